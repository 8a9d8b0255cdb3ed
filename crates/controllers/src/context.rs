//! What every reconcile shares: the client, the registry, the caches, the
//! store observations, backoff counters and the Event recorder.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use cnpool_api::{CNClaim, CNPool};
use cnpool_core::model::{ObservedStore, PoolView, StoreView};
use cnpool_registry::CnStore;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::ApiResource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::Config;
use crate::cache::{ClaimSets, Claims, Key, Pods, Pools};
use crate::nodes::CordonedNodes;
use crate::own_writes::OwnWrites;
use crate::wake::Wakers;

/// Where the controllers read the time of day (timestamps they write,
/// drain and loss deadlines): the system clock in the operator, a virtual
/// one in the simulator. Durations come from `tokio::time::Instant`, which
/// the simulator's paused runtime drives as well.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> Timestamp + Send + Sync>);

impl Clock {
    pub fn new(now: impl Fn() -> Timestamp + Send + Sync + 'static) -> Self {
        Self(Arc::new(now))
    }

    pub fn now(&self) -> Timestamp {
        (self.0)()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new(Timestamp::now)
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Clock").field(&self.now()).finish()
    }
}

/// What HAKeeper's store list said when last read.
#[derive(Default)]
pub struct StoreSnapshot {
    /// Whether the list has been read at least once.
    pub listed: bool,
    pub stores: BTreeMap<String, CnStore>,
    /// When each store was first noticed missing.
    pub missing_since: BTreeMap<String, Timestamp>,
}

/// How long a creation or deletion this process issued is expected to show
/// in the cache; past that it is forgotten and plans read the cache alone.
const EXPECTATION_TTL: Duration = Duration::from_secs(30);

/// One owner's writes not yet seen in the cache: created object names and
/// deleted (or retired) object UIDs, each with when it was issued.
#[derive(Default)]
struct Outstanding {
    creations: BTreeMap<String, Instant>,
    deletions: BTreeMap<String, Instant>,
}

/// The creations and deletions one controller issued for the objects it
/// manages (a pool's pods, a claim set's claims), per owner, until its cache
/// shows them: its plans count them so that a lagging cache makes it
/// neither create nor delete twice.
#[derive(Default)]
pub struct Expected(Mutex<BTreeMap<Key, Outstanding>>);

impl Expected {
    pub fn creation(&self, owner: &Key, name: &str) {
        lock(&self.0).entry(owner.clone()).or_default().creations.insert(name.to_owned(), Instant::now());
    }

    pub fn deletion(&self, owner: &Key, uid: &str) {
        lock(&self.0).entry(owner.clone()).or_default().deletions.insert(uid.to_owned(), Instant::now());
    }

    /// What `owner`'s plan must still count, once what the cache shows is
    /// dropped: a creation whose name is `seen`, a deletion whose UID is no
    /// longer `shown` as before, and anything older than the TTL.
    pub fn outstanding(
        &self,
        owner: &Key,
        seen: impl Fn(&str) -> bool,
        shown: impl Fn(&str) -> bool,
    ) -> cnpool_core::pool::Expectations {
        let mut all = lock(&self.0);
        let Outstanding { creations, deletions } = all.entry(owner.clone()).or_default();
        creations.retain(|name, at| at.elapsed() < EXPECTATION_TTL && !seen(name));
        deletions.retain(|uid, at| at.elapsed() < EXPECTATION_TTL && shown(uid));
        cnpool_core::pool::Expectations {
            creations: creations.keys().cloned().collect(),
            deletions: deletions.keys().cloned().collect(),
        }
    }
}

/// Which controller a backoff counter belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Claim,
    Pool,
    ClaimSet,
    Pod,
}

/// Which delay series a requeue draws from. They grow apart: a write
/// refused right after a long wait retries at the shortest delay, and the
/// refusals of a busy moment do not stretch a later wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Series {
    Failure,
    Wait,
    Refused,
}

pub struct Context<R> {
    pub client: kube::Client,
    pub registry: R,
    pub config: Config,
    pub pods: Arc<Pods>,
    pub claims: Arc<Claims>,
    pub pools: Arc<Pools>,
    pub claim_sets: Arc<ClaimSets>,
    /// The nodes marked unschedulable.
    pub nodes: CordonedNodes,
    /// The PodDisruptionBudget version the server serves, once discovered
    /// (`None`: it serves none).
    disruption_budgets: tokio::sync::OnceCell<Option<ApiResource>>,
    /// Whether the operator was refused PodDisruptionBudgets, said once.
    pub(crate) budgets_refused: AtomicBool,
    pub wake: Wakers,
    pub metrics: Arc<crate::Metrics>,
    stores: Mutex<StoreSnapshot>,
    /// Growing delays per object, one series for failures and one for
    /// waits (see [`Series`]).
    backoff: Mutex<BTreeMap<(Kind, Key, Series), u32>>,
    /// Pods this process acquired lately: other claims skip them while the
    /// cache still shows them Idle.
    recently_acquired: Mutex<BTreeMap<String, Instant>>,
    /// Claims that acquired a pod lately (by UID), with the pod's UID and
    /// when: until their caches show that pod, they take no other one.
    claims_acquired_lately: Mutex<BTreeMap<String, (String, Instant)>>,
    /// Pods the pool controller created or deleted but the cache has not
    /// shown yet, per pool.
    pub(crate) expected: Expected,
    /// Claims the claim set controller created or deleted but the cache has
    /// not shown yet, per claim set.
    pub(crate) expected_members: Expected,
    /// Migrations this process has seen under way, by claim UID.
    migrations: Mutex<BTreeMap<String, Migration>>,
    /// When this process last started a rollout migration, per pool.
    rolled: Mutex<BTreeMap<Key, Instant>>,
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
    recorder: Recorder,
}

/// A migration as this process saw it: kept in memory only, so that after a
/// restart the propagation delay starts again (later, never earlier).
struct Migration {
    /// When this process first saw the claim migrating.
    seen: Timestamp,
    /// The target pod's UID and when its store was first seen serving.
    serving: Option<(String, Timestamp)>,
}

async fn discover_disruption_budgets(client: &kube::Client) -> Result<Option<ApiResource>, kube::Error> {
    for version in ["v1", "v1beta1"] {
        let api_version = format!("policy/{version}");
        let served = match client.list_api_group_resources(&api_version).await {
            Ok(list) => list.resources.iter().any(|resource| resource.name == "poddisruptionbudgets"),
            Err(kube::Error::Api(status)) if status.code == 404 => false,
            Err(error) => return Err(error),
        };
        if served {
            tracing::info!(api_version, "Bound pods are guarded by PodDisruptionBudgets of this version");
            return Ok(Some(ApiResource {
                group: "policy".into(),
                version: version.into(),
                api_version,
                kind: "PodDisruptionBudget".into(),
                plural: "poddisruptionbudgets".into(),
            }));
        }
    }
    tracing::warn!(
        "the API server serves no PodDisruptionBudgets (policy/v1 or v1beta1): evictions of Bound pods are not refused"
    );
    Ok(None)
}

/// How long a pod just acquired is taken as such while the cache may lag.
pub(crate) const ACQUIRED_LATELY: Duration = Duration::from_secs(5);

/// Notes `key` now, forgetting keys older than `horizon`.
fn remember(map: &Mutex<BTreeMap<String, Instant>>, key: &str, horizon: Duration) {
    note(&mut lock(map), key, horizon);
}

fn note(recent: &mut BTreeMap<String, Instant>, key: &str, horizon: Duration) {
    recent.retain(|_, at| at.elapsed() < horizon);
    recent.insert(key.to_owned(), Instant::now());
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is one step on plain data.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<R> Context<R> {
    /// The time of day by the configured clock.
    pub fn now(&self) -> Timestamp {
        self.config.clock.now()
    }

    pub fn new(client: kube::Client, registry: R, config: Config, metrics: Arc<crate::Metrics>) -> Self {
        let reporter = Reporter { controller: "cnpool".into(), instance: Some(config.instance.clone()) };
        Self {
            wake: Wakers::new(config.wake_interval, config.pool_wake_interval),
            claim_writes: OwnWrites::new(config.requeue_max),
            claim_pod_writes: OwnWrites::new(config.requeue_max),
            pool_status_writes: OwnWrites::new(config.requeue_max),
            recorder: Recorder::new(client.clone(), reporter),
            client,
            registry,
            config,
            pods: Arc::default(),
            claims: Arc::default(),
            pools: Arc::default(),
            claim_sets: Arc::default(),
            nodes: CordonedNodes::default(),
            disruption_budgets: tokio::sync::OnceCell::new(),
            budgets_refused: AtomicBool::new(false),
            metrics,
            stores: Mutex::default(),
            backoff: Mutex::default(),
            recently_acquired: Mutex::default(),
            claims_acquired_lately: Mutex::default(),
            expected: Expected::default(),
            expected_members: Expected::default(),
            migrations: Mutex::default(),
            rolled: Mutex::default(),
        }
    }

    /// Notes that a rollout migration of pool `namespace/pool` just started.
    pub fn note_rolled(&self, namespace: &str, pool: &str) {
        lock(&self.rolled).insert((namespace.to_owned(), pool.to_owned()), Instant::now());
    }

    /// Whether this process started a rollout migration in the pool so
    /// lately that the cache may not show it yet.
    pub fn rolled_lately(&self, namespace: &str, pool: &str) -> bool {
        let key = (namespace.to_owned(), pool.to_owned());
        lock(&self.rolled).get(&key).is_some_and(|at| at.elapsed() < Duration::from_secs(5))
    }

    /// Notes that the claim `claim_uid` migrates and returns since when the
    /// store of `target` (its held pod's UID) has been seen serving.
    pub fn track_migration(&self, claim_uid: &str, target: Option<&str>) -> Option<Timestamp> {
        let mut migrations = lock(&self.migrations);
        let now = self.now();
        let migration = migrations.entry(claim_uid.to_owned()).or_insert(Migration { seen: now, serving: None });
        let since = migration.serving.as_ref().filter(|(uid, _)| Some(uid.as_str()) == target).map(|(_, at)| *at);
        self.metrics.migrations_in_flight(migrations.len());
        since
    }

    /// Notes that the store of `target` serves the migrating claim now.
    pub fn note_target_serving(&self, claim_uid: &str, target: &str) {
        let now = self.now();
        let mut migrations = lock(&self.migrations);
        let migration = migrations.entry(claim_uid.to_owned()).or_insert(Migration { seen: now, serving: None });
        migration.serving = Some((target.to_owned(), now));
    }

    /// Forgets the claim's migration: `outcome` is `Completed` or `Refused`,
    /// or `None` when the claim went away mid-migration.
    pub fn end_migration(&self, claim_uid: &str, outcome: Option<&'static str>) {
        let mut migrations = lock(&self.migrations);
        let ended = migrations.remove(claim_uid);
        self.metrics.migrations_in_flight(migrations.len());
        if let (Some(migration), Some(outcome)) = (ended, outcome) {
            let took = self.now().duration_since(migration.seen).as_secs_f64().max(0.0);
            self.metrics.migration_ended(outcome, took);
        }
    }

    /// The next delay after a failure of `key` (an error, a write refused
    /// for a reason no watch event follows); [`Self::settled`] resets it.
    pub fn backoff(&self, kind: Kind, key: &Key) -> Duration {
        self.next_delay(kind, key, Series::Failure)
    }

    /// The next delay while `key` waits for something its watches wake it
    /// for (capacity, a store, a drain); [`Self::settled`] resets it.
    pub fn wait(&self, kind: Kind, key: &Key) -> Duration {
        self.next_delay(kind, key, Series::Wait)
    }

    /// The next delay after a write of `key` was refused because what it
    /// was decided from changed since it was read: the watch brings the newer
    /// version and wakes the object, so this is only the net for a refusal
    /// that no change follows (a server's own 409); [`Self::settled`] resets
    /// it. Retried at the failure pace instead, an object read from a lagging
    /// cache was refused again at 200 ms, 400 ms, 800 ms, … until the watch
    /// caught up: most of a minute's reconciles where two replicas contend.
    pub fn refused(&self, kind: Kind, key: &Key) -> Duration {
        self.next_delay(kind, key, Series::Refused)
    }

    /// Doubling up to `requeue_max`, without jitter: failures from
    /// `requeue_min`, waits from `registry_poll` (what they wait for wakes
    /// the object when it comes, and HAKeeper shows it no sooner), refusals
    /// from `wake_interval` (a watch event wakes the object no sooner).
    fn next_delay(&self, kind: Kind, key: &Key, series: Series) -> Duration {
        let first = match series {
            Series::Failure => self.config.requeue_min,
            Series::Wait => self.config.registry_poll,
            Series::Refused => self.config.wake_interval,
        };
        let mut counters = lock(&self.backoff);
        let attempts = counters.entry((kind, key.clone(), series)).or_insert(0);
        let delay = first.saturating_mul(1 << (*attempts).min(16));
        *attempts += 1;
        delay.min(self.config.requeue_max)
    }

    /// Forgets `key`'s delays: it made progress.
    pub fn settled(&self, kind: Kind, key: &Key) {
        let mut counters = lock(&self.backoff);
        for series in [Series::Failure, Series::Wait, Series::Refused] {
            counters.remove(&(kind, key.clone(), series));
        }
    }

    pub fn note_acquired(&self, pod_uid: &str) {
        remember(&self.recently_acquired, pod_uid, self.config.requeue_max);
    }

    pub fn acquired_lately(&self, pod_uid: &str) -> bool {
        lock(&self.recently_acquired).get(pod_uid).is_some_and(|at| at.elapsed() < ACQUIRED_LATELY)
    }

    /// Notes the pod `pod_uid` as acquired now, unless it already was
    /// lately: whether this caller may try to acquire it. Claims reconciled
    /// at once then try different pods instead of racing for the first Idle
    /// one, whose guarded write only one of them can win. A try that fails
    /// leaves the note, as a lost race does.
    pub fn reserve_for_acquire(&self, pod_uid: &str) -> bool {
        // One lock for the test and the note: two workers cannot both pass.
        let mut recent = lock(&self.recently_acquired);
        if recent.get(pod_uid).is_some_and(|at| at.elapsed() < ACQUIRED_LATELY) {
            return false;
        }
        note(&mut recent, pod_uid, self.config.requeue_max);
        true
    }

    /// The claim `claim_uid` acquired the pod `pod_uid` (or, with `None`,
    /// let go of what it held).
    pub fn note_claim_acquired(&self, claim_uid: &str, pod_uid: Option<&str>) {
        let mut lately = lock(&self.claims_acquired_lately);
        lately.retain(|_, (_, at)| at.elapsed() < self.config.requeue_max);
        match pod_uid {
            Some(pod_uid) => lately.insert(claim_uid.to_owned(), (pod_uid.to_owned(), Instant::now())),
            None => lately.remove(claim_uid),
        };
    }

    /// The pod the claim `claim_uid` acquired within [`ACQUIRED_LATELY`].
    pub fn pod_acquired_lately(&self, claim_uid: &str) -> Option<String> {
        let lately = lock(&self.claims_acquired_lately);
        lately.get(claim_uid).filter(|(_, at)| at.elapsed() < ACQUIRED_LATELY).map(|(pod_uid, _)| pod_uid.clone())
    }

    /// The requeue after a status or condition write refused as stale. The
    /// change that made it stale wakes the object through its watch; this is
    /// only the net for a refusal that changed nothing. It is not shorter
    /// because two replicas refuse each other's status writes all the time,
    /// and a short retry would only fight.
    pub fn after_stale_refusal(&self) -> Duration {
        self.config.requeue_max
    }

    /// Whether HAKeeper's latest listing lacks the store `uuid`.
    pub fn lacks_store(&self, uuid: &str) -> bool {
        let snapshot = lock(&self.stores);
        snapshot.listed && !snapshot.stores.contains_key(uuid)
    }

    pub fn observe_store(&self, uuid: Option<&str>) -> Option<StoreView> {
        let snapshot = lock(&self.stores);
        uuid.and_then(|uuid| snapshot.stores.get(uuid)).map(StoreView::from)
    }

    /// The store `uuid` as a claim decision sees it; `view` holds the
    /// registered store's view, which the answer borrows; `noted` when the
    /// store was noted missing on its pod (see [`Context::store_missing_since`]).
    pub fn observed<'a>(
        &self,
        uuid: Option<&str>,
        view: &'a Option<StoreView>,
        noted: Option<Timestamp>,
    ) -> ObservedStore<'a> {
        let Some(uuid) = uuid else { return ObservedStore::Unobserved };
        if let Some(view) = view {
            return ObservedStore::Registered(view);
        }
        match self.store_missing_since(uuid, noted) {
            Some(since) => ObservedStore::Missing { since },
            None => ObservedStore::Unobserved,
        }
    }

    /// Since when the listed stores have lacked `uuid`; `None` while it is
    /// registered or nothing was listed yet. The first sighting in this
    /// process counts, or `noted`, when the pod's `cn-store` condition
    /// recorded an earlier one: a restart forgets what memory held, and a
    /// store vanishing just before it would otherwise be missing for the
    /// bound twice over.
    pub fn store_missing_since(&self, uuid: &str, noted: Option<Timestamp>) -> Option<Timestamp> {
        let mut snapshot = lock(&self.stores);
        if !snapshot.listed || snapshot.stores.contains_key(uuid) {
            return None;
        }
        let since = snapshot.missing_since.entry(uuid.to_owned()).or_insert_with(|| self.config.clock.now());
        *since = noted.map_or(*since, |noted| noted.min(*since));
        Some(*since)
    }

    pub fn store(&self, uuid: &str) -> (bool, Option<CnStore>) {
        let snapshot = lock(&self.stores);
        (snapshot.listed, snapshot.stores.get(uuid).cloned())
    }

    /// Replaces the snapshot with a fresh list; returns the UUIDs whose
    /// entry changed.
    pub fn replace_stores(&self, listed: Vec<CnStore>) -> Vec<String> {
        let mut snapshot = lock(&self.stores);
        let fresh: BTreeMap<String, CnStore> = listed.into_iter().map(|store| (store.uuid.clone(), store)).collect();
        let mut changed: Vec<String> =
            snapshot.stores.keys().filter(|uuid| !fresh.contains_key(*uuid)).cloned().collect();
        changed.extend(
            fresh
                .iter()
                .filter(|(uuid, store)| snapshot.stores.get(*uuid) != Some(*store))
                .map(|(uuid, _)| uuid.clone()),
        );
        snapshot.missing_since.retain(|uuid, _| !fresh.contains_key(uuid));
        snapshot.stores = fresh;
        snapshot.listed = true;
        changed
    }

    /// Records a store as this controller just wrote it.
    pub fn wrote_store(&self, store: CnStore) {
        let mut snapshot = lock(&self.stores);
        snapshot.missing_since.remove(&store.uuid);
        snapshot.stores.insert(store.uuid.clone(), store);
    }

    pub fn forget_store(&self, uuid: &str) {
        lock(&self.stores).stores.remove(uuid);
    }

    /// The pool views, with this operator's drain defaults for pools that
    /// set none.
    pub fn pool_views(&self) -> Vec<PoolView> {
        self.pools
            .all()
            .into_iter()
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

    /// The PodDisruptionBudget resource to write: policy/v1 where served,
    /// else policy/v1beta1 (kube-apiserver before 1.21); `None` when the
    /// server serves neither, or discovery failed this time (asked again
    /// on the next call).
    pub async fn disruption_budgets(&self) -> Option<ApiResource> {
        let found = self.disruption_budgets.get_or_try_init(|| discover_disruption_budgets(&self.client)).await;
        match found {
            Ok(resource) => resource.clone(),
            Err(error) => {
                tracing::debug!(%error, "cannot discover the PodDisruptionBudget version; trying again later");
                None
            }
        }
    }

    /// Publishes an Event; a failure to publish is logged, never fatal.
    pub async fn event(&self, object: &ObjectReference, warning: bool, reason: &str, action: &str, note: String) {
        let event = Event {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, object).await {
            tracing::debug!(%error, reason, "could not publish an Event");
        }
    }
}
