//! What every reconcile shares: the client, the registries (one per
//! MatrixOne cluster) and the LogSets that say which a pool uses, the caches, the
//! wakers, and this process's memory between reconciles, each a small
//! struct named for what it holds (store listing, backoff, recent acquires,
//! migrations, rollouts, expected writes, own writes), and the Event
//! recorder.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cnpool_api::{CNClaim, CNPool, labels};
use cnpool_core::convert::DrainDefaults;
use cnpool_core::model::PoolView;
use cnpool_core::waiting::Reachability;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::ApiResource;

use crate::Config;
use crate::backoff::Backoff;
use crate::cache::{ClaimSets, Claims, Pods, Pools};
use crate::clusters::{LogSets, Unresolved, cluster_of};
use crate::events::{EventQueue, Recorder};
use crate::expected::Expected;
use crate::lately::{ClaimsTookLately, PodsTakenLately, Rollouts};
use crate::metrics::Metrics;
use crate::migrations::Migrations;
use crate::nodes::CordonedNodes;
use crate::observe::{Observer, StoresOfPool};
use crate::own_writes::OwnWrites;
use crate::registries::{ClusterRegistry, Registries};
use crate::stores::StoreSnapshot;
use crate::wakers::Wakers;

pub struct Context<R> {
    pub client: kube::Client,
    /// The HAKeeper client and store listing of each MatrixOne cluster a
    /// pool uses.
    pub registries: Registries<R>,
    /// The LogSets pools name in `spec.deps.logSet`.
    pub(crate) log_sets: Arc<LogSets>,
    pub config: Config,
    pub pods: Arc<Pods>,
    pub claims: Arc<Claims>,
    pub pools: Arc<Pools>,
    pub claim_sets: Arc<ClaimSets>,
    /// The nodes marked unschedulable.
    pub nodes: Arc<CordonedNodes>,
    /// The PodDisruptionBudget version the server serves, once discovered
    /// (`None`: it serves none).
    pub(crate) disruption_budgets: tokio::sync::OnceCell<Option<ApiResource>>,
    /// Whether the operator was refused PodDisruptionBudgets, said once.
    pub(crate) budgets_refused: AtomicBool,
    pub wake: Wakers,
    pub metrics: Arc<Metrics>,
    /// Growing delays per object, one series per reason to wait.
    pub(crate) backoff: Backoff,
    /// Pods this process acquired lately (by pod UID).
    pub(crate) pods_taken_lately: PodsTakenLately,
    /// The pod each claim acquired lately (by claim UID).
    pub(crate) claims_took_lately: ClaimsTookLately,
    /// Pods the pool controller created or deleted but the cache has not
    /// shown yet, per pool.
    pub(crate) expected: Expected,
    /// Claims the claim set controller created or deleted but the cache has
    /// not shown yet, per claim set.
    pub(crate) expected_members: Expected,
    /// Migrations this process has seen under way, by claim UID.
    pub(crate) migrations: Migrations,
    /// When this process last started a rollout migration, per pool.
    pub(crate) rollouts: Rollouts,
    /// Claims as this process last wrote them, for reconciles whose cache
    /// lags behind those writes.
    pub(crate) claim_writes: OwnWrites<CNClaim>,
    /// Pods as the claim controller's own writes left them (acquire,
    /// release, rewrite): their watch events do not wake the claim that
    /// wrote them.
    pub(crate) claim_pod_writes: OwnWrites<Pod>,
    /// Pool statuses as this process wrote them: a status another replica
    /// wrote from its own (maybe lagging) caches wakes the pool, this
    /// process's own does not.
    pub(crate) pool_status_writes: OwnWrites<CNPool>,
    /// The cutover time, once read from the cluster (`cutover`).
    pub(crate) cutover: OnceLock<Timestamp>,
    events: EventQueue,
}

impl<R> Context<R> {
    /// The time of day by the configured clock.
    pub fn now(&self) -> Timestamp {
        self.config.clock.now()
    }

    pub fn new(client: kube::Client, registries: Registries<R>, config: Config, metrics: Arc<Metrics>) -> Self {
        Self {
            wake: Wakers::new(config.wake_interval, config.pool_wake_interval),
            claim_writes: OwnWrites::new(config.requeue_max),
            claim_pod_writes: OwnWrites::new(config.requeue_max),
            pool_status_writes: OwnWrites::new(config.requeue_max),
            events: EventQueue::start(Recorder::new(client.clone(), "cnpool", &config.instance)),
            backoff: Backoff::new(&config),
            pods_taken_lately: PodsTakenLately::new(config.requeue_max),
            claims_took_lately: ClaimsTookLately::new(config.requeue_max),
            migrations: Migrations::new(config.clock.clone(), Arc::clone(&metrics)),
            client,
            registries,
            log_sets: Arc::default(),
            config,
            pods: Arc::default(),
            claims: Arc::default(),
            pools: Arc::default(),
            claim_sets: Arc::default(),
            nodes: Arc::default(),
            disruption_budgets: tokio::sync::OnceCell::new(),
            budgets_refused: AtomicBool::new(false),
            metrics,
            expected: Expected::default(),
            expected_members: Expected::default(),
            rollouts: Rollouts::default(),
            cutover: OnceLock::new(),
        }
    }

    /// The MatrixOne cluster of the pool `namespace/pool`, as its deps say.
    pub fn cluster_of_pool(&self, namespace: &str, pool: &str) -> Result<Arc<ClusterRegistry<R>>, Unresolved> {
        let unknown = || Unresolved::UnknownPool { namespace: namespace.to_owned(), name: pool.to_owned() };
        let pool = self.pools.get(&(namespace.to_owned(), pool.to_owned())).ok_or_else(unknown)?;
        Ok(self.registries.get(&cluster_of(&pool, &self.log_sets, self.registries.default_address())?))
    }

    /// The MatrixOne cluster of a pool pod's pool.
    pub fn cluster_of_pod(&self, pod: &Pod) -> Result<Arc<ClusterRegistry<R>>, Unresolved> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let pool = pod.metadata.labels.as_ref().and_then(|labels| labels.get(labels::POOL_NAME));
        self.cluster_of_pool(namespace, pool.map(String::as_str).unwrap_or_default())
    }

    /// Whether the HAKeeper of the pool `namespace/pool` answers. One its
    /// deps cannot lead to does not; the HAKeeper of a pool the cache has
    /// not shown yet (a claim listed it live) is not judged.
    pub(crate) fn reachability_of(&self, namespace: &str, pool: &str) -> Reachability {
        match self.cluster_of_pool(namespace, pool) {
            Ok(cluster) => cluster.stores.reachability(),
            Err(Unresolved::UnknownPool { .. }) => Reachability::Unknown,
            Err(_) => Reachability::Unreachable,
        }
    }

    /// The clusters the cached pools use.
    pub(crate) fn wanted_clusters(&self) -> BTreeSet<String> {
        let default = self.registries.default_address();
        self.pools.all().iter().filter_map(|(pool, _)| cluster_of(pool, &self.log_sets, default).ok()).collect()
    }

    /// The requeue after a status or condition write refused as stale. The
    /// change that made it stale wakes the object through its watch; this is
    /// only the net for a refusal that changed nothing. It is not shorter
    /// because two replicas refuse each other's status writes all the time,
    /// and a short retry would only fight.
    pub fn after_stale_refusal(&self) -> Duration {
        self.config.requeue_max
    }

    /// The pool views, with this operator's drain defaults for pools that
    /// set none.
    pub fn pool_views(&self) -> Vec<PoolView> {
        self.pool_views_where(|_| true)
    }

    /// The views of the pools in `namespace`.
    pub fn pool_views_in(&self, namespace: &str) -> Vec<PoolView> {
        self.pool_views_where(|pool| pool.metadata.namespace.as_deref() == Some(namespace))
    }

    fn pool_views_where(&self, wanted: impl Fn(&cnpool_api::CNPool) -> bool) -> Vec<PoolView> {
        self.pools
            .all()
            .into_iter()
            .filter(|(pool, _)| wanted(pool))
            .filter_map(|(pool, revision)| match self.pool_view(&pool, &revision) {
                Ok(view) => Some(view),
                Err(error) => {
                    tracing::warn!(pool = %kube::ResourceExt::name_any(pool.as_ref()), %error, "pool spec unreadable");
                    None
                }
            })
            .collect()
    }

    pub fn pool_view(
        &self,
        pool: &cnpool_api::CNPool,
        revision: &str,
    ) -> Result<PoolView, cnpool_core::convert::ConvertError> {
        let defaults = DrainDefaults { timeout: self.config.drain_timeout, min_delay: self.config.drain_min_delay };
        cnpool_core::convert::pool_view(pool, revision, defaults)
    }

    /// Queues an Event for publishing; a failure to publish is logged,
    /// never fatal, and never waited for.
    pub fn event(&self, object: &ObjectReference, warning: bool, reason: &str, action: &str, note: String) {
        self.events.publish(object, warning, reason, action, note, self.now());
    }
}

impl<R: Send + Sync> Context<R> {
    /// How pods read now, against the cordoned nodes and each pool's cluster's store listing.
    pub fn observer(&self) -> Observer<'_> {
        Observer {
            nodes: &self.nodes,
            stores: self,
            now: self.now(),
            store_missing_bound: self.config.store_missing_bound,
            store_registration_grace: self.config.store_registration_grace,
        }
    }
}

impl<R> StoresOfPool for Context<R> {
    fn stores_of(&self, namespace: &str, pool: &str) -> Option<Arc<StoreSnapshot>> {
        self.cluster_of_pool(namespace, pool).ok().map(|cluster| Arc::clone(&cluster.stores))
    }
}
