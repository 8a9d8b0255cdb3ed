//! `--controller legacy`: a model of the Go matrixone-operator's pool
//! algorithm (reference/legacy-algorithm.md, commit eb9b356), run by the
//! simulator on the same scenario instead of cnpool's controllers, so that
//! both are judged by the same checker (DESIGN §4).
//!
//! It keeps the Go operator's habits, not cnpool's: reads come from
//! informer caches (kube reflector stores, so they lag as controller-runtime's
//! do); a claim's lock on a pod is its `claimed-by` label, written with the
//! cached resourceVersion on bind, unconditionally re-stamped on every sync
//! and removed by merge patches without one on release; pods wake claims
//! only through that label; every pod and claim event wakes the pool. It
//! writes none of cnpool's own labels (`claim-uid`, `binding`, `revision`).
//!
//! - [`claim`]: Bind, Sync, Migrate, Finalize, Release;
//! - [`store`]: the CN-store (pod) reconcile: stats annotations, phase
//!   changes, the store removed when the pod goes;
//! - [`pool`]: desired = in-use + pending + maxIdle, the CN set written every
//!   time, and the CN set's own work (creating and deleting pods), since
//!   the simulated cluster has no OpenKruise.

pub mod claim;
pub mod pool;
pub mod store;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cnpool_api::{CNClaim, CNPool, labels};
use cnpool_controllers::Clock;
use cnpool_controllers::cache::{Cache, Change, NoIndex};
use cnpool_registry::memory::MemoryRegistry;
use cnpool_registry::{CnStore, RegistryError, StoreRegistry};
use futures::FutureExt;
use futures::channel::mpsc::{UnboundedSender, unbounded};
use futures::future::{BoxFuture, Shared};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::store::{Store, Writer};
use kube::runtime::watcher;

use crate::driver::Controller;
use crate::ledger::Ledger;

/// How often the Go operator refreshes its cache of HAKeeper's stores.
const STORE_CACHE_REFRESH: Duration = Duration::from_secs(15);
/// controller-runtime's default per-object backoff after an error: 5 ms,
/// doubling, at most 1000 s.
const ERROR_BACKOFF_BASE: Duration = Duration::from_millis(5);
const ERROR_BACKOFF_MAX: Duration = Duration::from_secs(1000);

/// Why a legacy reconcile failed; controller-runtime logs it and backs off.
#[derive(Debug, thiserror::Error)]
pub enum LegacyError {
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{what}: {source}")]
    Registry {
        what: String,
        #[source]
        source: RegistryError,
    },
}

impl LegacyError {
    fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| Self::Kube { what, source }
    }

    fn registry(what: impl Into<String>) -> impl FnOnce(RegistryError) -> Self {
        let what = what.into();
        move |source| Self::Registry { what, source }
    }
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Which of the model's controllers an object's backoff belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Claim,
    Pod,
    Pool,
}

/// What the model's reconciles share: one Go operator process.
pub struct Legacy {
    client: kube::Client,
    registry: MemoryRegistry,
    clock: Clock,
    pods: Store<Pod>,
    claims: Store<CNClaim>,
    pools: Store<CNPool>,
    /// HAKeeper's stores as last listed, by UUID.
    stores: Mutex<BTreeMap<String, CnStore>>,
    /// Consecutive failures per object (controller-runtime's rate limiter).
    failures: Mutex<BTreeMap<(Kind, String, String), u32>>,
    /// Pods the CN set created and its cache does not show yet, per pool.
    creations: Mutex<BTreeMap<String, BTreeMap<String, tokio::time::Instant>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update is one step on plain data.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Objects of one kind as the informer last saw them, sorted by name: the
/// Go cache lists in map order, which no seed can repeat, and name order is
/// as arbitrary and repeatable.
fn sorted<K: kube::Resource<DynamicType = ()> + Clone>(store: &Store<K>) -> Vec<Arc<K>> {
    let mut objects = store.state();
    objects.sort_by_key(|object| object.name_any());
    objects
}

impl Legacy {
    fn now(&self) -> jiff::Timestamp {
        self.clock.now()
    }

    /// How long ago `time` was; zero for a time to come.
    fn since(&self, time: jiff::Timestamp) -> Duration {
        Duration::try_from(self.now().duration_since(time)).unwrap_or_default()
    }

    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.pods.get(&ObjectRef::new(name).within(namespace))
    }

    fn pod_api(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn claim_api(&self, namespace: &str) -> Api<CNClaim> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn cached_store(&self, uuid: &str) -> Option<CnStore> {
        lock(&self.stores).get(uuid).cloned()
    }

    /// Reads HAKeeper's store list into the cache; a failed read keeps the old one.
    async fn refresh_stores(&self) {
        match self.registry.list_stores().await {
            Ok(stores) => {
                *lock(&self.stores) = stores.into_iter().map(|store| (store.uuid.clone(), store)).collect();
            }
            Err(error) => tracing::warn!(%error, "legacy: listing HAKeeper stores failed"),
        }
    }

    /// What one reconcile of `object` gave: a success resets its backoff,
    /// as controller-runtime forgets an object's failures.
    fn settle<K: ResourceExt>(
        &self,
        kind: Kind,
        object: &K,
        result: Result<Action, LegacyError>,
    ) -> Result<Action, LegacyError> {
        if result.is_ok() {
            lock(&self.failures).remove(&failure_key(kind, object));
        }
        result
    }

    /// controller-runtime's error handling: log the error, requeue after an
    /// exponential backoff.
    fn failed<K: ResourceExt>(&self, kind: Kind, object: &K, error: &LegacyError) -> Action {
        let mut failures = lock(&self.failures);
        let count = failures.entry(failure_key(kind, object)).or_default();
        let delay = ERROR_BACKOFF_BASE.saturating_mul(2u32.saturating_pow(*count)).min(ERROR_BACKOFF_MAX);
        *count = count.saturating_add(1);
        let (namespace, name) = (object.namespace().unwrap_or_default(), object.name_any());
        tracing::error!(?kind, namespace, name, %error, "Reconciler error");
        Action::requeue(delay)
    }
}

fn failure_key<K: ResourceExt>(kind: Kind, object: &K) -> (Kind, String, String) {
    (kind, object.namespace().unwrap_or_default(), object.name_any())
}

/// The UUID of a pod's CN store, from its DNS name.
fn store_uuid(pod: &Pod) -> Option<String> {
    let subdomain = pod.spec.as_ref()?.subdomain.as_deref()?;
    Some(cnpool_api::cn_store_uuid(&pod.name_any(), subdomain, &pod.namespace().unwrap_or_default()))
}

fn label<'a>(object: &'a impl kube::Resource, key: &str) -> Option<&'a str> {
    object.meta().labels.as_ref()?.get(key).map(String::as_str).filter(|value| !value.is_empty())
}

fn phase(pod: &Pod) -> Option<&str> {
    label(pod, labels::PHASE)
}

/// Where the informers' changes queue reconciles.
struct Wakers {
    claims: UnboundedSender<ObjectRef<CNClaim>>,
    pods: UnboundedSender<ObjectRef<Pod>>,
    pools: UnboundedSender<ObjectRef<CNPool>>,
}

impl Wakers {
    // A send fails only once the controllers stopped: nothing to wake then.
    fn claim(&self, namespace: &str, name: &str) {
        let _ = self.claims.unbounded_send(ObjectRef::new(name).within(namespace));
    }

    fn pool(&self, namespace: &str, name: &str) {
        let _ = self.pools.unbounded_send(ObjectRef::new(name).within(namespace));
    }

    /// A pod's change: its own reconcile; the pool of its `pool-name` label,
    /// on every change; the claim of its `claimed-by` label, on a status
    /// change, a creation or a deletion (controller-runtime maps the old and
    /// the new object of an update).
    fn pod_changed(&self, (old, new): Change<'_, Pod>) {
        let Some(any) = new.or(old) else { return };
        let namespace = any.namespace().unwrap_or_default();
        let _ = self.pods.unbounded_send(ObjectRef::new(&any.name_any()).within(&namespace));
        let both = old.into_iter().chain(new);
        let mut pools: Vec<&str> = both.clone().filter_map(|pod| label(pod.as_ref(), labels::POOL_NAME)).collect();
        pools.dedup();
        for pool in pools {
            self.pool(&namespace, pool);
        }
        let status_changed = match (old, new) {
            (Some(old), Some(new)) => old.status != new.status,
            _ => true,
        };
        if status_changed {
            let mut claims: Vec<&str> = both.filter_map(|pod| label(pod.as_ref(), labels::CLAIMED_BY)).collect();
            claims.dedup();
            for claim in claims {
                self.claim(&namespace, claim);
            }
        }
    }

    /// A claim's change: the claim itself, and the pool it names.
    fn claim_changed(&self, (old, new): Change<'_, CNClaim>) {
        let Some(any) = new.or(old) else { return };
        let namespace = any.namespace().unwrap_or_default();
        self.claim(&namespace, &any.name_any());
        let mut pools: Vec<&str> = old
            .into_iter()
            .chain(new)
            .map(|claim| claim.spec.pool_name.as_str())
            .filter(|pool| !pool.is_empty())
            .collect();
        pools.dedup();
        for pool in pools {
            self.pool(&namespace, pool);
        }
    }

    fn pool_changed(&self, (old, new): Change<'_, CNPool>) {
        if let Some(pool) = new.or(old) {
            self.pool(&pool.namespace().unwrap_or_default(), &pool.name_any());
        }
    }
}

/// One kind's informer: a reflector store, fed by `cnpool_controllers`'
/// watch loop (which relists on a dropped watch), telling `on_change`.
fn inform<K>(
    api: Api<K>,
    config: watcher::Config,
    on_change: impl Fn(Change<'_, K>) + Send + 'static,
    shutdown: Shared<BoxFuture<'static, ()>>,
) -> (Store<K>, BoxFuture<'static, ()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let writer: Writer<K> = Writer::default();
    let store = writer.as_reader();
    let changes: Arc<Cache<K, NoIndex>> = Arc::default();
    let informer = cnpool_controllers::cache::inform(
        kube::runtime::watcher(api, config),
        writer,
        changes,
        on_change,
        cnpool_controllers::cache::Progress { delivered: || {}, first_list: || {} },
        shutdown,
    )
    .boxed();
    (store, informer)
}

/// Runs one Go operator process on `client` until `shutdown`: its
/// informers, its HAKeeper store cache and its claim, pod and pool
/// controllers. Its memory dies with it.
pub async fn run_replica(
    client: kube::Client,
    registry: MemoryRegistry,
    instance: String,
    namespace: &str,
    clock: Clock,
    ledger: Arc<Ledger>,
    shutdown: Shared<BoxFuture<'static, ()>>,
) {
    let (claims_tx, claim_triggers) = unbounded();
    let (pods_tx, pod_triggers) = unbounded();
    let (pools_tx, pool_triggers) = unbounded();
    let wakers = Arc::new(Wakers { claims: claims_tx, pods: pods_tx, pools: pools_tx });
    let (pod_wakers, claim_wakers, pool_wakers) = (wakers.clone(), wakers.clone(), wakers);
    let (pods, pod_informer) = inform(
        Api::namespaced(client.clone(), namespace),
        watcher::Config::default().labels(labels::POOL_NAME),
        move |change| pod_wakers.pod_changed(change),
        shutdown.clone(),
    );
    let (claims, claim_informer) = inform(
        Api::namespaced(client.clone(), namespace),
        watcher::Config::default(),
        move |change| claim_wakers.claim_changed(change),
        shutdown.clone(),
    );
    let (pools, pool_informer) = inform(
        Api::namespaced(client.clone(), namespace),
        watcher::Config::default(),
        move |change| pool_wakers.pool_changed(change),
        shutdown.clone(),
    );
    let ctx = Arc::new(Legacy {
        client,
        registry,
        clock,
        pods: pods.clone(),
        claims: claims.clone(),
        pools: pools.clone(),
        stores: Mutex::default(),
        failures: Mutex::default(),
        creations: Mutex::default(),
    });
    let refresh = {
        let (ctx, shutdown) = (ctx.clone(), shutdown.clone());
        async move {
            let mut ticks = tokio::time::interval(STORE_CACHE_REFRESH);
            let mut shutdown = std::pin::pin!(shutdown);
            loop {
                tokio::select! {
                    () = &mut shutdown => return,
                    _ = ticks.tick() => ctx.refresh_stores().await,
                }
            }
        }
    };
    let claim_controller = Controller {
        replica: instance.clone(),
        kind: "CNClaim",
        store: claims,
        triggers: claim_triggers,
        reconcile: claim::reconcile,
        error_policy: claim::error_policy,
    };
    let store_controller = Controller {
        replica: instance.clone(),
        kind: "Pod",
        store: pods,
        triggers: pod_triggers,
        reconcile: store::reconcile,
        error_policy: store::error_policy,
    };
    let pool_controller = Controller {
        replica: instance,
        kind: "CNPool",
        store: pools,
        triggers: pool_triggers,
        reconcile: pool::reconcile,
        error_policy: pool::error_policy,
    };
    let informers = futures::future::join4(pod_informer, claim_informer, pool_informer, refresh);
    futures::future::join4(
        informers,
        claim_controller.run(ctx.clone(), ledger.clone(), shutdown.clone()),
        store_controller.run(ctx.clone(), ledger.clone(), shutdown.clone()),
        pool_controller.run(ctx, ledger, shutdown),
    )
    .map(drop)
    .await;
}
