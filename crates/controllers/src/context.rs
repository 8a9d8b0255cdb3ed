//! What every reconcile shares: the client, the registry, the caches, the
//! wakers, and this process's memory between reconciles, each a small
//! struct named for what it holds (store listing, backoff, recent acquires,
//! migrations, rollouts, expected writes, own writes), and the Event
//! recorder.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cnpool_api::{CNClaim, CNPool};
use cnpool_core::model::PoolView;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::ApiResource;

use crate::Config;
use crate::backoff::Backoff;
use crate::cache::{ClaimSets, Claims, Pods, Pools};
use crate::events::Recorder;
use crate::expected::Expected;
use crate::lately::{ClaimsTookLately, PodsTakenLately, Rollouts};
use crate::metrics::Metrics;
use crate::migrations::Migrations;
use crate::nodes::CordonedNodes;
use crate::observe::Observer;
use crate::own_writes::OwnWrites;
use crate::stores::StoreSnapshot;
use crate::wakers::Wakers;

pub struct Context<R> {
    pub client: kube::Client,
    pub registry: R,
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
    /// What HAKeeper's store list said when last read.
    pub(crate) stores: StoreSnapshot,
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
    recorder: Recorder,
}

impl<R> Context<R> {
    /// The time of day by the configured clock.
    pub fn now(&self) -> Timestamp {
        self.config.clock.now()
    }

    pub fn new(client: kube::Client, registry: R, config: Config, metrics: Arc<Metrics>) -> Self {
        Self {
            wake: Wakers::new(config.wake_interval, config.pool_wake_interval),
            claim_writes: OwnWrites::new(config.requeue_max),
            claim_pod_writes: OwnWrites::new(config.requeue_max),
            pool_status_writes: OwnWrites::new(config.requeue_max),
            recorder: Recorder::new(client.clone(), "cnpool", &config.instance),
            backoff: Backoff::new(&config),
            pods_taken_lately: PodsTakenLately::new(config.requeue_max),
            claims_took_lately: ClaimsTookLately::new(config.requeue_max),
            migrations: Migrations::new(config.clock.clone(), Arc::clone(&metrics)),
            client,
            registry,
            config,
            pods: Arc::default(),
            claims: Arc::default(),
            pools: Arc::default(),
            claim_sets: Arc::default(),
            nodes: Arc::default(),
            disruption_budgets: tokio::sync::OnceCell::new(),
            budgets_refused: AtomicBool::new(false),
            metrics,
            stores: StoreSnapshot::default(),
            expected: Expected::default(),
            expected_members: Expected::default(),
            rollouts: Rollouts::default(),
            cutover: OnceLock::new(),
        }
    }

    /// How pods read now, against the cordoned nodes and the store listing.
    pub fn observer(&self) -> Observer<'_> {
        Observer {
            nodes: &self.nodes,
            stores: &self.stores,
            now: self.now(),
            store_missing_bound: self.config.store_missing_bound,
            store_registration_grace: self.config.store_registration_grace,
        }
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
        let mut view = cnpool_core::convert::pool_view(pool, revision)?;
        let drain = pool.spec.strategy.drain_strategy.as_ref();
        if drain.and_then(|drain| drain.timeout.as_ref()).is_none() {
            view.drain_timeout = self.config.drain_timeout;
        }
        if drain.and_then(|drain| drain.min_delay.as_ref()).is_none() {
            view.min_delay = self.config.drain_min_delay;
        }
        Ok(view)
    }

    /// Publishes an Event; a failure to publish is logged, never fatal.
    pub async fn event(&self, object: &ObjectReference, warning: bool, reason: &str, action: &str, note: String) {
        if let Err(error) = self.recorder.publish(object, warning, reason, action, note, self.now()).await {
            tracing::debug!(%error, reason, "could not publish an Event");
        }
    }
}
