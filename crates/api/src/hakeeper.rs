//! Where a pool's HAKeeper is, as its `spec.deps` says: the one place that
//! reads `deps` for it, shared by the operator and the simulated node side.

use crate::CNPool;

/// Where a pool's deps say its HAKeeper is, before any LogSet is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HaKeeperSource<'a> {
    /// `deps.externalLogSet.haKeeperEndpoint`: `host:port` given outright.
    Endpoint(&'a str),
    /// `deps.logSet`: the LogSet `(namespace, name)`, namespace defaulting
    /// to the pool's; its `status.discovery` says where.
    LogSet(String, String),
    /// No deps: the operator's `--hakeeper-discovery`.
    Default,
}

/// Where `pool`'s HAKeeper is. A `logSet` wins over an `externalLogSet`,
/// as in the CN config the pool's pods are rendered with (the Go renderer
/// only ever reads the LogSet): the operator must talk to the HAKeeper its
/// CNs register with.
pub fn hakeeper_source(pool: &CNPool) -> HaKeeperSource<'_> {
    let Some(deps) = pool.spec.deps.as_ref() else { return HaKeeperSource::Default };
    let pool_namespace = pool.metadata.namespace.as_deref().unwrap_or_default();
    if let Some((namespace, name)) = deps.log_set_key(pool_namespace) {
        return HaKeeperSource::LogSet(namespace, name);
    }
    deps.external_endpoint().map_or(HaKeeperSource::Default, HaKeeperSource::Endpoint)
}

/// matrixone-operator's LogSet kind, read as a dynamic object: only its
/// `status.discovery` counts here.
pub fn log_set_resource() -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk("core.matrixorigin.io", "v1alpha1", "LogSet"))
}

/// A LogSet's `status.discovery` as `address:port`, when both are set (the
/// LogSet controller of matrixone-operator fills it in:
/// `<name>-log-discovery.<namespace>.svc`, port 32001).
pub fn log_set_discovery(log_set: &serde_json::Value) -> Option<String> {
    let discovery = log_set.get("status")?.get("discovery")?;
    let address = discovery.get("address")?.as_str().filter(|address| !address.is_empty())?;
    let port = discovery.get("port")?.as_u64()?;
    Some(format!("{address}:{port}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pool(deps: serde_json::Value) -> CNPool {
        serde_json::from_value(json!({
            "apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "CNPool",
            "metadata": {"name": "p", "namespace": "tenants"},
            "spec": {"template": {}, "deps": deps},
        }))
        .unwrap()
    }

    #[test]
    fn a_log_set_wins_over_an_external_endpoint_and_is_in_its_own_namespace_else_the_pools() {
        let both = pool(
            json!({"logSet": {"metadata": {"name": "mo"}}, "externalLogSet": {"haKeeperEndpoint": "10.0.0.1:32001"}}),
        );
        assert_eq!(hakeeper_source(&both), HaKeeperSource::LogSet("tenants".into(), "mo".into()));
        let external = pool(json!({"externalLogSet": {"haKeeperEndpoint": " 10.0.0.1:32001 "}}));
        assert_eq!(hakeeper_source(&external), HaKeeperSource::Endpoint("10.0.0.1:32001"));
        let here = pool(json!({"logSet": {"metadata": {"name": "mo"}}}));
        assert_eq!(hakeeper_source(&here), HaKeeperSource::LogSet("tenants".into(), "mo".into()));
        let there = pool(json!({"logSet": {"metadata": {"name": "mo", "namespace": "mo-system"}}}));
        assert_eq!(hakeeper_source(&there), HaKeeperSource::LogSet("mo-system".into(), "mo".into()));
        let older_form = pool(json!({"logSet": {"name": "mo", "namespace": "mo-system"}}));
        assert_eq!(hakeeper_source(&older_form), HaKeeperSource::LogSet("mo-system".into(), "mo".into()));
        assert_eq!(hakeeper_source(&there), HaKeeperSource::LogSet("mo-system".into(), "mo".into()));
        assert_eq!(hakeeper_source(&pool(json!(null))), HaKeeperSource::Default);
        assert_eq!(hakeeper_source(&pool(json!({}))), HaKeeperSource::Default);
    }

    #[test]
    fn a_discovery_address_needs_both_address_and_port() {
        let full = json!({"status": {"discovery": {"address": "mo-log-discovery.mo.svc", "port": 32001}}});
        assert_eq!(log_set_discovery(&full).as_deref(), Some("mo-log-discovery.mo.svc:32001"));
        assert_eq!(log_set_discovery(&json!({"status": {"discovery": {"address": "a"}}})), None);
        assert_eq!(log_set_discovery(&json!({"status": {"discovery": {"address": "", "port": 1}}})), None);
        assert_eq!(log_set_discovery(&json!({"spec": {}})), None);
    }
}
