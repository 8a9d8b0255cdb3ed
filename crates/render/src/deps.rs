//! Where a pool's CNs find their MatrixOne cluster (reference §5).

use cnpool_api::cnset::{LogSet, PoolDeps, SharedStorageProvider};

/// The HAKeeper (log service) port of a LogSet.
pub const HAKEEPER_PORT: i32 = 32001;

/// The MatrixOne cluster a pool's CNs join, resolved from its `deps`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    /// `host:port` the operator's HAKeeper client dials (Go: always the
    /// LogSet's `status.discovery`).
    pub hakeeper_address: String,
    /// The log service Services for `hakeeper-client.service-addresses` of
    /// MatrixOne < 2; the HAKeeper address alone for an external log set.
    pub service_addresses: Vec<String>,
    /// The LogSet's shared storage, which the CN config and env point at;
    /// `None` for an external log set (the user's `config` must name it).
    pub shared_storage: Option<SharedStorageProvider>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DepsError {
    #[error("spec.deps.logSet needs metadata.name: name the LogSet of the MatrixOne cluster the pool's CNs join")]
    LogSetUnnamed,
    #[error(
        "spec.deps.externalLogSet.haKeeperEndpoint is empty: give the HAKeeper's host:port, e.g. mo-log-discovery.default.svc:32001"
    )]
    EndpointEmpty,
    #[error("LogSet {namespace}/{name} is not ready yet ({reason})")]
    LogSetNotReady { namespace: String, name: String, reason: String },
    #[error("LogSet {namespace}/{name} had not yet exposed HAKeeper discovery address (status.discovery)")]
    NoDiscovery { namespace: String, name: String },
}

/// The cluster of a pool with `deps`, from the LogSet read at
/// `PoolDeps::log_set_key` (`log_set`, with the `reserveOrdinals` of its log
/// StatefulSet) or from `externalLogSet`. A `logSet` wins over an
/// `externalLogSet`, as the Go renderer only ever reads the LogSet. `None`
/// when `deps` names neither: such a pool uses the operator's default
/// HAKeeper.
pub fn cluster(
    deps: &PoolDeps,
    pool_namespace: &str,
    log_set: Option<&LogSet>,
    reserve_ordinals: &[i32],
) -> Result<Option<Cluster>, DepsError> {
    if deps.log_set.is_some() {
        let (namespace, name) = deps.log_set_key(pool_namespace).ok_or(DepsError::LogSetUnnamed)?;
        let read = log_set.ok_or_else(|| DepsError::LogSetNotReady {
            namespace: namespace.clone(),
            name: name.clone(),
            reason: "not found".into(),
        })?;
        return log_set_cluster(read, reserve_ordinals).map(Some);
    }
    match (deps.external_log_set.as_ref(), deps.external_endpoint()) {
        (Some(_), None) => Err(DepsError::EndpointEmpty),
        (_, Some(endpoint)) => Ok(Some(Cluster {
            hakeeper_address: endpoint.to_owned(),
            service_addresses: vec![endpoint.to_owned()],
            shared_storage: None,
        })),
        (None, None) => Ok(None),
    }
}

fn log_set_cluster(log_set: &LogSet, reserve_ordinals: &[i32]) -> Result<Cluster, DepsError> {
    let name = log_set.metadata.name.clone().unwrap_or_default();
    let namespace = log_set.metadata.namespace.clone().unwrap_or_default();
    let not_ready =
        |reason: String| DepsError::LogSetNotReady { namespace: namespace.clone(), name: name.clone(), reason };
    // Go waits for Ready=True and Synced=True, the latter observed at the
    // current generation.
    let conditions = log_set.status.as_ref().map(|status| status.conditions.as_slice()).unwrap_or_default();
    let generation = log_set.metadata.generation.unwrap_or(0);
    for wanted in ["Ready", "Synced"] {
        let condition = conditions.iter().find(|condition| condition.type_ == wanted);
        match condition {
            Some(condition) if condition.status == "True" => {
                if wanted == "Synced" && condition.observed_generation.unwrap_or(0) < generation {
                    return Err(not_ready(format!(
                        "condition Synced is for generation {} of {generation}",
                        condition.observed_generation.unwrap_or(0)
                    )));
                }
            }
            Some(condition) => return Err(not_ready(format!("condition {wanted} is {}", condition.status))),
            None => return Err(not_ready(format!("no condition {wanted}"))),
        }
    }
    let discovery = log_set
        .status
        .as_ref()
        .and_then(|status| status.discovery.as_ref())
        .filter(|discovery| !discovery.address.is_empty())
        .ok_or_else(|| DepsError::NoDiscovery { namespace: namespace.clone(), name: name.clone() })?;
    let spec = log_set.spec.clone().unwrap_or_default();
    let replicas = usize::try_from(spec.replicas.unwrap_or(0)).unwrap_or(0);
    let service_addresses = (0..)
        .filter(|ordinal| !reserve_ordinals.contains(ordinal))
        .take(replicas)
        .map(|ordinal| format!("{name}-log-{ordinal}.{name}-log-headless.{namespace}.svc:{HAKEEPER_PORT}"))
        .collect();
    Ok(Cluster {
        hakeeper_address: format!("{}:{}", discovery.address, discovery.port),
        service_addresses,
        shared_storage: spec.shared_storage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_set(json: serde_json::Value) -> LogSet {
        serde_json::from_value(json).unwrap()
    }

    fn ready_mo_log_set(replicas: i32) -> LogSet {
        log_set(serde_json::json!({
            "metadata": {"name": "mo", "namespace": "default", "generation": 2},
            "spec": {"replicas": replicas, "sharedStorage": {"fileSystem": {"path": "/test"}}},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "Synced", "status": "True", "observedGeneration": 2, "reason": "", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                ],
                "discovery": {"address": "mo-log-discovery.default.svc", "port": 32001}
            }
        }))
    }

    fn deps(json: serde_json::Value) -> PoolDeps {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_ready_log_set_gives_its_discovery_address_and_log_services() {
        // reference §5: L=mo, LNS=default → mo-log-discovery.default.svc:32001; replicas 3 → ordinals 0,1,2.
        let deps = deps(serde_json::json!({"logSet": {"metadata": {"name": "mo", "namespace": "default"}}}));
        let cluster = cluster(&deps, "tenant", Some(&ready_mo_log_set(3)), &[]).unwrap().unwrap();
        assert_eq!(cluster.hakeeper_address, "mo-log-discovery.default.svc:32001");
        assert_eq!(
            cluster.service_addresses,
            [
                "mo-log-0.mo-log-headless.default.svc:32001",
                "mo-log-1.mo-log-headless.default.svc:32001",
                "mo-log-2.mo-log-headless.default.svc:32001"
            ]
        );
        // reference §3: replicas 3, reserveOrdinals [1] → ordinals 0, 2, 3.
        let reserved = super::cluster(&deps, "tenant", Some(&ready_mo_log_set(3)), &[1]).unwrap().unwrap();
        let ordinals: Vec<&str> = reserved.service_addresses.iter().map(|a| &a[..8]).collect();
        assert_eq!(ordinals, ["mo-log-0", "mo-log-2", "mo-log-3"]);
    }

    #[test]
    fn a_log_set_not_ready_or_without_discovery_is_waited_for() {
        let deps = deps(serde_json::json!({"logSet": {"metadata": {"name": "mo", "namespace": "default"}}}));
        let mut stale = ready_mo_log_set(3);
        stale.metadata.generation = Some(3);
        let err = cluster(&deps, "tenant", Some(&stale), &[]).unwrap_err();
        assert!(matches!(err, DepsError::LogSetNotReady { .. }), "{err}");
        let mut hidden = ready_mo_log_set(3);
        if let Some(status) = hidden.status.as_mut() {
            status.discovery = None;
        }
        assert!(matches!(cluster(&deps, "tenant", Some(&hidden), &[]), Err(DepsError::NoDiscovery { .. })));
        assert!(matches!(cluster(&deps, "tenant", None, &[]), Err(DepsError::LogSetNotReady { .. })));
        let in_pools_namespace = super::tests::deps(serde_json::json!({"logSet": {"metadata": {"name": "mo"}}}));
        let missing = cluster(&in_pools_namespace, "tenant", None, &[]).unwrap_err();
        assert!(missing.to_string().contains("LogSet tenant/mo "), "named with the pool's namespace: {missing}");
    }

    #[test]
    fn an_external_log_set_is_its_endpoint_and_no_deps_is_none() {
        let external = deps(serde_json::json!({"externalLogSet": {"haKeeperEndpoint": "hk.example:32001"}}));
        let cluster = cluster(&external, "tenant", None, &[]).unwrap().unwrap();
        assert_eq!(cluster.hakeeper_address, "hk.example:32001");
        assert_eq!(super::cluster(&PoolDeps::default(), "tenant", None, &[]), Ok(None));
        let empty = deps(serde_json::json!({"externalLogSet": {"haKeeperEndpoint": ""}}));
        assert_eq!(super::cluster(&empty, "tenant", None, &[]), Err(DepsError::EndpointEmpty));
    }

    #[test]
    fn a_log_set_without_namespace_is_looked_up_in_the_pools() {
        let deps = deps(serde_json::json!({"logSet": {"metadata": {"name": "mo"}}}));
        assert_eq!(deps.log_set_key("tenant"), Some(("tenant".into(), "mo".into())));
        let older = super::tests::deps(serde_json::json!({"logSet": {"name": "mo", "namespace": "db"}}));
        assert_eq!(older.log_set_key("tenant"), Some(("db".into(), "mo".into())), "cnpool's older form");
    }
}
