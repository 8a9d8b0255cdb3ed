//! Which MatrixOne cluster, named by its HAKeeper's `host:port`, each pool
//! belongs to (DESIGN §2, "One HAKeeper per MatrixOne cluster"), from
//! [`cnpool_api::hakeeper::hakeeper_source`]:
//! - `spec.deps.logSet`: the LogSet object (namespace defaulting to the
//!   pool's), whose `status.discovery` {address, port} the Go operator's
//!   LogSet controller fills in (it wins, as in the rendered CN config);
//! - else `spec.deps.externalLogSet.haKeeperEndpoint`;
//! - else the operator's `--hakeeper-discovery`.
//!
//! LogSets are read from a watch ([`watch`]). A cluster without the LogSet
//! CRD, or an operator not allowed to read LogSets, leaves the pools that
//! name one unresolved: they say why in their conditions, and every other
//! pool runs.

use std::collections::BTreeMap;
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use cnpool_api::CNPool;
use cnpool_api::hakeeper::{HaKeeperSource, hakeeper_source, log_set_discovery, log_set_resource};
use futures::StreamExt;
use futures::future::{BoxFuture, Shared};
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;

/// Why a pool's HAKeeper is not known.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unresolved {
    /// LogSets cannot be read at all.
    #[error(
        "spec.deps.logSet names LogSet {namespace}/{name}, but the operator cannot read LogSets ({why}): install \
         matrixone-operator's LogSet CRD and grant the operator get, list and watch on logsets.core.matrixorigin.io, \
         or give spec.deps.externalLogSet.haKeeperEndpoint instead"
    )]
    LogSetsUnreadable { namespace: String, name: String, why: String },
    /// No LogSet of that name.
    #[error(
        "spec.deps.logSet names LogSet {namespace}/{name}, which does not exist: fix spec.deps.logSet, or create \
         the LogSet"
    )]
    LogSetMissing { namespace: String, name: String },
    /// The LogSet has not said where its HAKeeper is yet.
    #[error(
        "LogSet {namespace}/{name} (spec.deps.logSet) has no status.discovery address yet: wait for its log \
         service to start, or check matrixone-operator"
    )]
    NoDiscovery { namespace: String, name: String },
    /// The pool is not in the operator's cache (gone, or not seen yet).
    #[error("pool {namespace}/{name} is not known to the operator, so neither is its HAKeeper")]
    UnknownPool { namespace: String, name: String },
}

/// The cluster key (HAKeeper `host:port`) of `pool`; `default` for a pool
/// without deps.
pub fn cluster_of(pool: &CNPool, log_sets: &LogSets, default: &str) -> Result<String, Unresolved> {
    match hakeeper_source(pool) {
        HaKeeperSource::Endpoint(endpoint) => Ok(endpoint.to_owned()),
        HaKeeperSource::Default => Ok(default.to_owned()),
        HaKeeperSource::LogSet(namespace, name) => log_sets.discovery(namespace, name),
    }
}

/// The LogSets as last listed: each one's discovery address, if it has one.
#[derive(Default)]
pub struct LogSets(RwLock<Listed>);

#[derive(Default)]
struct Listed {
    /// Why LogSets cannot be read, while they cannot.
    unreadable: Option<String>,
    addresses: BTreeMap<(String, String), Option<String>>,
}

impl LogSets {
    fn discovery(&self, namespace: String, name: String) -> Result<String, Unresolved> {
        // Every write is one step on plain data: a panicked writer left it whole.
        let listed = self.0.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(why) = listed.unreadable.clone() {
            return Err(Unresolved::LogSetsUnreadable { namespace, name, why });
        }
        match listed.addresses.get(&(namespace.clone(), name.clone())) {
            Some(Some(address)) => Ok(address.clone()),
            Some(None) => Err(Unresolved::NoDiscovery { namespace, name }),
            None => Err(Unresolved::LogSetMissing { namespace, name }),
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Listed> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that LogSets cannot be read; whether that is news.
    fn unreadable(&self, why: String) -> bool {
        self.write().unreadable.replace(why).is_none()
    }

    /// Notes a LogSet as read; whether it changed anything a pool resolves.
    fn apply(&self, log_set: &DynamicObject) -> bool {
        let Some(key) = key_of(log_set) else { return false };
        let mut listed = self.write();
        let readable = listed.unreadable.take().is_some();
        let address = log_set_discovery(&log_set.data);
        readable || listed.addresses.insert(key, address.clone()) != Some(address)
    }

    fn delete(&self, log_set: &DynamicObject) -> bool {
        key_of(log_set).is_some_and(|key| self.write().addresses.remove(&key).is_some())
    }

    /// Replaces every LogSet with a fresh list's.
    fn replace(&self, addresses: BTreeMap<(String, String), Option<String>>) {
        let mut listed = self.write();
        listed.unreadable = None;
        listed.addresses = addresses;
    }
}

fn key_of(log_set: &DynamicObject) -> Option<(String, String)> {
    Some((log_set.metadata.namespace.clone()?, log_set.metadata.name.clone()?))
}

/// First and longest wait before a failed LogSet watch is tried again: a
/// cluster without the CRD is asked every five minutes at most.
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// Watches LogSets (in `namespace`, or everywhere) until `shutdown`, keeping
/// `log_sets`, and calls `changed` whenever what a pool resolves to may have
/// changed. A failed watch is retried with kube's backoff; one line says
/// LogSets cannot be read, and one that they can again.
pub async fn watch(
    client: kube::Client,
    namespace: Option<String>,
    log_sets: std::sync::Arc<LogSets>,
    changed: impl Fn(),
    shutdown: Shared<BoxFuture<'static, ()>>,
) {
    let resource = log_set_resource();
    let api: Api<DynamicObject> = match namespace {
        Some(namespace) => Api::namespaced_with(client, &namespace, &resource),
        None => Api::all_with(client, &resource),
    };
    let mut events = watcher(api, watcher::Config::default()).boxed();
    let mut relisted: Option<BTreeMap<(String, String), Option<String>>> = None;
    let mut retry = RETRY_MIN;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let event = tokio::select! {
            () = &mut shutdown => return,
            event = events.next() => event,
        };
        let event = match event {
            None => return,
            Some(Err(error)) => {
                let why = Unreadable::of(&error);
                if log_sets.unreadable(why.to_string()) {
                    match why {
                        // A cluster without matrixone-operator's LogSets is
                        // usual when pools name their HAKeeper otherwise: a
                        // pool that names a LogSet says so in its conditions.
                        Unreadable::CrdMissing => tracing::info!(
                            "the LogSet CRD is not installed: pools whose spec.deps names a LogSet are held"
                        ),
                        Unreadable::Forbidden | Unreadable::Failed(_) => tracing::warn!(
                            %error,
                            "cannot read LogSets: pools whose spec.deps names a LogSet are held"
                        ),
                    }
                    changed();
                }
                // Not kube's backoff: its jitter would make the simulator's
                // runs differ from one replay to the next.
                tokio::select! {
                    () = &mut shutdown => return,
                    () = tokio::time::sleep(retry) => {}
                }
                retry = (retry * 2).min(RETRY_MAX);
                continue;
            }
            Some(Ok(event)) => event,
        };
        retry = RETRY_MIN;
        match event {
            watcher::Event::Init => relisted = Some(BTreeMap::new()),
            watcher::Event::InitApply(log_set) => {
                if let (Some(listed), Some(key)) = (relisted.as_mut(), key_of(&log_set)) {
                    listed.insert(key, log_set_discovery(&log_set.data));
                }
            }
            watcher::Event::InitDone => {
                let Some(listed) = relisted.take() else { continue };
                tracing::info!(log_sets = listed.len(), "LogSets read");
                log_sets.replace(listed);
                changed();
            }
            watcher::Event::Apply(log_set) => {
                if log_sets.apply(&log_set) {
                    changed();
                }
            }
            watcher::Event::Delete(log_set) => {
                if log_sets.delete(&log_set) {
                    changed();
                }
            }
        }
    }
}

/// Why a LogSet watch failed, as a user reads it.
enum Unreadable {
    CrdMissing,
    Forbidden,
    Failed(String),
}

impl Unreadable {
    fn of(error: &watcher::Error) -> Self {
        let status = match error {
            watcher::Error::InitialListFailed(kube::Error::Api(status))
            | watcher::Error::WatchStartFailed(kube::Error::Api(status))
            | watcher::Error::WatchFailed(kube::Error::Api(status)) => Some(status.code),
            watcher::Error::WatchError(status) => Some(status.code),
            _ => None,
        };
        match status {
            Some(404) => Self::CrdMissing,
            Some(403) => Self::Forbidden,
            _ => Self::Failed(error.to_string()),
        }
    }
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::CrdMissing => f.write_str("the LogSet CRD is not installed"),
            Self::Forbidden => f.write_str("the operator is forbidden to list them"),
            Self::Failed(error) => f.write_str(error),
        }
    }
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

    fn log_set(namespace: &str, name: &str, discovery: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "LogSet",
            "metadata": {"name": name, "namespace": namespace},
            "status": {"discovery": discovery},
        }))
        .unwrap()
    }

    #[test]
    fn a_log_set_wins_then_an_external_endpoint_then_the_default() {
        let log_sets = LogSets::default();
        log_sets.apply(&log_set("tenants", "mo", json!({"address": "mo-log-discovery.tenants.svc", "port": 32001})));
        let both = pool(
            json!({"logSet": {"metadata": {"name": "mo"}}, "externalLogSet": {"haKeeperEndpoint": "10.0.0.1:32001"}}),
        );
        assert_eq!(cluster_of(&both, &log_sets, "default:32001").unwrap(), "mo-log-discovery.tenants.svc:32001");
        let external_only = pool(json!({"externalLogSet": {"haKeeperEndpoint": "10.0.0.1:32001"}}));
        assert_eq!(cluster_of(&external_only, &log_sets, "default:32001").unwrap(), "10.0.0.1:32001");
        assert_eq!(cluster_of(&pool(json!(null)), &log_sets, "default:32001").unwrap(), "default:32001");
        assert_eq!(cluster_of(&pool(json!({})), &log_sets, "default:32001").unwrap(), "default:32001");
    }

    #[test]
    fn a_log_set_is_looked_up_in_its_own_namespace_else_the_pools() {
        let log_sets = LogSets::default();
        log_sets.apply(&log_set("mo-system", "mo", json!({"address": "a.mo-system.svc", "port": 32001})));
        let elsewhere = pool(json!({"logSet": {"name": "mo", "namespace": "mo-system"}}));
        assert_eq!(cluster_of(&elsewhere, &log_sets, "d").unwrap(), "a.mo-system.svc:32001");
        let here = pool(json!({"logSet": {"name": "mo"}}));
        assert_eq!(
            cluster_of(&here, &log_sets, "d"),
            Err(Unresolved::LogSetMissing { namespace: "tenants".into(), name: "mo".into() })
        );
    }

    #[test]
    fn a_log_set_without_discovery_or_unreadable_log_sets_leave_the_pool_unresolved_and_say_the_fix() {
        let log_sets = LogSets::default();
        let mo = pool(json!({"logSet": {"name": "mo"}}));
        assert!(log_sets.apply(&log_set("tenants", "mo", json!({"address": "a"}))));
        let no_port = cluster_of(&mo, &log_sets, "d").unwrap_err();
        assert_eq!(no_port, Unresolved::NoDiscovery { namespace: "tenants".into(), name: "mo".into() });
        assert!(no_port.to_string().contains("status.discovery"));
        assert!(log_sets.apply(&log_set("tenants", "mo", json!({"address": "a", "port": 32001}))));
        assert!(!log_sets.apply(&log_set("tenants", "mo", json!({"address": "a", "port": 32001}))), "no news");
        assert_eq!(cluster_of(&mo, &log_sets, "d").unwrap(), "a:32001");

        assert!(log_sets.unreadable("the LogSet CRD is not installed".into()));
        assert!(!log_sets.unreadable("the LogSet CRD is not installed".into()), "said once");
        let message = cluster_of(&mo, &log_sets, "d").unwrap_err().to_string();
        assert!(message.contains("the LogSet CRD is not installed") && message.contains("externalLogSet"), "{message}");
        assert_eq!(cluster_of(&pool(json!(null)), &log_sets, "d").unwrap(), "d", "pools without deps run");
        log_sets.replace(BTreeMap::new());
        assert!(matches!(cluster_of(&mo, &log_sets, "d"), Err(Unresolved::LogSetMissing { .. })));
    }
}
