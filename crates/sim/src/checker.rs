//! The invariants of DESIGN §3, checked against the cluster as the API
//! server committed it (every write, in order) and against HAKeeper.
//!
//! I1, the pod cap of I6, a claim's going Lost (I2) and every change of a
//! pod's owner labels (I8) are checked on every committed write; the
//! bounded ones (I2, I3, I4, I7) each second of virtual time, a condition
//! being a violation once it has lasted longer than its bound; I5 and the
//! idle count of I6 once the run has settled.
//!
//! I8 as checked: a pod's `claim-uid` may become a non-empty value U only
//! by a guarded transition (an operator's JSON patch whose leading `test`
//! operations pin `phase`, `claim-uid` and `claimed-by`) that is U's own
//! claim's acquire — the version written over was Idle with neither
//! `claim-uid` nor `claimed-by`, and the write sets `claimed-by` to that
//! claim's name — or its adopt-legacy — the version written over had no
//! `claim-uid` and `claimed-by` that claim's name, which stays. U must name
//! a claim that existed at some time of the run. With cnpool's lock, every
//! other change of `claim-uid` or `claimed-by` (a release, a rewrite) must
//! be a guarded transition too. And no one write may set an owner or
//! phase key (`phase`, `claim-uid`, `claimed-by`, `owner`, `claimset`) to
//! two values: the transition set it, and something of a spec overwrote
//! it. The write behind a commit is the one the gate recorded under the
//! resourceVersion it committed ([`Ledger::pod_write`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use cnpool_api::selector::selector_matches;
use cnpool_api::validation::{validate_claim_set_spec, validate_claim_spec, validate_pool_spec};
use cnpool_api::{CNClaimSetSpec, CNClaimSpec, CNPoolSpec, labels};
use cnpool_apiserver::{Event, EventType};
use cnpool_registry::WorkState;
use cnpool_registry::memory::MemoryRegistry;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Serialize;
use serde_json::Value;

use crate::ledger::{Ledger, PodWrite};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Invariant {
    I1,
    I2,
    I3,
    I4,
    I5,
    I6,
    I7,
    I8,
}

impl Invariant {
    pub const ALL: [Invariant; 8] = [
        Invariant::I1,
        Invariant::I2,
        Invariant::I3,
        Invariant::I4,
        Invariant::I5,
        Invariant::I6,
        Invariant::I7,
        Invariant::I8,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Invariant::I1 => "exclusive",
            Invariant::I2 => "truthful",
            Invariant::I3 => "no leak",
            Invariant::I4 => "live",
            Invariant::I5 => "quiet",
            Invariant::I6 => "bounded pool",
            Invariant::I7 => "registry agrees",
            Invariant::I8 => "inputs",
        }
    }
}

/// One broken invariant.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    pub invariant: Invariant,
    /// Virtual seconds into the run.
    pub at_seconds: f64,
    pub detail: String,
}

/// Which pod label says who owns a pod: the lock of the controller under test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OwnerLabel {
    /// cnpool's lock: `claim-uid` carries the owning claim's UID.
    #[default]
    ClaimUid,
    /// The Go operator's (the legacy model's): `claimed-by` carries the
    /// owning claim's name; it never writes `claim-uid`.
    ClaimedBy,
}

impl OwnerLabel {
    /// The owner a pod's labels name.
    pub fn owner(self, object: &Value) -> Option<String> {
        let key = match self {
            OwnerLabel::ClaimUid => labels::CLAIM_UID,
            OwnerLabel::ClaimedBy => labels::CLAIMED_BY,
        };
        label(object, key).filter(|owner| !owner.is_empty())
    }

    /// How the owner label names the claim `name`.
    fn names<'a>(self, name: &'a str, claim: &'a ClaimRecord) -> &'a str {
        match self {
            OwnerLabel::ClaimUid => &claim.uid,
            OwnerLabel::ClaimedBy => name,
        }
    }
}

/// The bounds of DESIGN §3 and the run's parameters they depend on.
#[derive(Clone, Debug)]
pub struct Bounds {
    /// The scenario's pool: I4's capacity and I6's idle count are its.
    pub pool: String,
    pub max_pods: u32,
    pub max_idle: u32,
    /// The world's pod start delay (I4 allows it on top of 30 s).
    pub start_delay: Duration,
    /// The operator's store-missing bound (I2 allows 30 s beyond it).
    pub store_missing_bound: Duration,
    /// The label that names a pod's owner.
    pub owner_label: OwnerLabel,
}

const BOUND_30S: Duration = Duration::from_secs(30);
const BOUND_60S: Duration = Duration::from_secs(60);

/// I5's bounds on one migration of a claim: reconciles, writes and log lines.
const MIGRATION_RECONCILES: usize = 20;
const MIGRATION_WRITES: usize = 10;
const MIGRATION_LOG_LINES: usize = 10;
/// How long after a migration's last write its cost is still counted: the
/// claim's own watch event of that write reconciles it once more.
const MIGRATION_TAIL: Duration = Duration::from_secs(5);

/// A pool as the checker follows it.
#[derive(Clone, Debug)]
struct PoolRecord {
    valid: bool,
    /// The labels it gives its pods (template, `podLabels`, `pool-name`):
    /// what a claim's selector must match for the pool to serve it.
    labels: BTreeMap<String, String>,
    /// Its `maxPods` when valid and set: I6's cap on its pods.
    max_pods: Option<u32>,
}

#[derive(Clone, Debug, Default)]
struct PodRecord {
    uid: String,
    pool: String,
    phase: String,
    claim_uid: Option<String>,
    claimed_by: Option<String>,
    /// The owner as [`Bounds::owner_label`] reads it.
    owner: Option<String>,
    deleting: bool,
    failed: bool,
    store_uuid: Option<String>,
}

#[derive(Clone, Debug, Default)]
struct ClaimRecord {
    uid: String,
    phase: String,
    spec_pod: String,
    source_pod: Option<String>,
    recorded_pod: Option<String>,
    recorded_pod_uid: Option<String>,
    deleting: bool,
    cn_labels: BTreeMap<String, Vec<String>>,
    /// What decides whether the claim is meant to bind (I4): its spec
    /// passes the controllers' validation, and its selector and pool.
    valid: bool,
    selector: LabelSelector,
    pool_name: String,
    claim_set: Option<String>,
}

impl ClaimRecord {
    /// Whether the claim says it has a serving pod: Bound, or Outdated (Bound
    /// to a pod of an old template, waiting for its turn in a rollout).
    fn holds(&self) -> bool {
        matches!(self.phase.as_str(), "Bound" | "Outdated")
    }

    /// The pod a holding claim says it is Bound to.
    fn bound_pod(&self) -> Option<&str> {
        if !self.holds() || self.deleting {
            return None;
        }
        self.recorded_pod.as_deref().or(Some(self.spec_pod.as_str()).filter(|pod| !pod.is_empty()))
    }

    /// Whether the controllers are meant to bind the claim (I4): its spec,
    /// its pool's and its claim set's pass the validation the controllers
    /// run before they act (an invalid one gets `InvalidSpec` and nothing
    /// else), and its selector matches the labels its pool gives its pods.
    fn meant_to_bind(&self, namespace: &str, pools: &BTreeMap<Key, PoolRecord>, sets: &BTreeMap<Key, bool>) -> bool {
        let pool = pools.get(&(namespace.to_owned(), self.pool_name.clone()));
        let set_valid = self
            .claim_set
            .as_ref()
            .is_none_or(|set| sets.get(&(namespace.to_owned(), set.clone())).copied().unwrap_or(true));
        self.valid && set_valid && pool.is_some_and(|pool| pool.valid && selector_matches(&self.selector, &pool.labels))
    }

    /// The pods the claim points at: its spec's pod and a migration's source.
    fn pods_pointed_at(&self) -> impl Iterator<Item = &str> {
        [Some(self.spec_pod.as_str()).filter(|pod| !pod.is_empty()), self.source_pod.as_deref()].into_iter().flatten()
    }
}

type Key = (String, String);

/// One migration of a claim (I5): from the commit that set its
/// `spec.sourcePod` to the one that cleared it.
#[derive(Clone, Debug)]
struct Migration {
    claim: Key,
    uid: String,
    /// How the pods' owner label names the claim.
    owner: String,
    source: String,
    /// The source, every pod the spec named meanwhile and the one recorded.
    pods: BTreeSet<String>,
    started: Duration,
    ended: Option<Duration>,
    /// Its writes: commits of the claim after the one that started it (the
    /// cause, not the cost, whoever wrote it), and of a pod's owner to or
    /// from the claim.
    writes: usize,
    /// What the bound does not price happened meanwhile: a pod it names
    /// went away or failed, the claim went Lost or was deleted.
    disturbed: bool,
}

impl Migration {
    /// The window its cost is counted in, once it has ended.
    fn window(&self) -> Option<std::ops::Range<Duration>> {
        Some(self.started..self.ended? + MIGRATION_TAIL)
    }

    /// Whether what happens at `now` is still counted into it: under way,
    /// or within the tail after its end.
    fn counts_at(&self, now: Duration) -> bool {
        self.ended.is_none_or(|ended| now <= ended + MIGRATION_TAIL)
    }
}

/// What a bounded condition is about; with a name, one subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Subject {
    Claim,
    /// The store of a claim's pod.
    ClaimStore,
    Pod,
    /// The store of a released pod.
    PodStore,
    /// The store of a deleted pod, by UUID.
    Store,
}

/// Since when each bounded condition has held and whether its episode was
/// reported, by (invariant, subject) and name. Nested so that the common
/// case, a condition that does not hold, is looked up by `&str` without
/// building a key.
#[derive(Default)]
struct Episodes(BTreeMap<(Invariant, Subject), BTreeMap<String, (Duration, bool)>>);

impl Episodes {
    /// A violation once `bad` has held longer than `bound`, once per episode.
    fn track(
        &mut self,
        invariant: Invariant,
        subject: Subject,
        name: &str,
        bad: Option<String>,
        bound: Duration,
        now: Duration,
    ) -> Option<Violation> {
        let Some(detail) = bad else {
            self.end(invariant, subject, name);
            return None;
        };
        let held = self.0.entry((invariant, subject)).or_default();
        if !held.contains_key(name) {
            held.insert(name.to_owned(), (now, false));
        }
        let (since, reported) = held.get_mut(name)?;
        if now - *since <= bound || *reported {
            return None;
        }
        *reported = true;
        let detail = format!("{detail} for {}s (bound {}s)", (now - *since).as_secs(), bound.as_secs());
        Some(Violation { invariant, at_seconds: now.as_secs_f64(), detail })
    }

    /// Ends one episode of `name`: the next bad tick starts a new one.
    fn end(&mut self, invariant: Invariant, subject: Subject, name: &str) {
        if let Some(held) = self.0.get_mut(&(invariant, subject)) {
            held.remove(name);
        }
    }

    /// Ends the episodes of an object that is gone: one created later under
    /// its name starts its own.
    fn forget(&mut self, subjects: &[Subject], name: &str) {
        for ((_, subject), held) in &mut self.0 {
            if subjects.contains(subject) {
                held.remove(name);
            }
        }
    }
}

fn str_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

fn label(object: &Value, key: &str) -> Option<String> {
    object.pointer("/metadata/labels").and_then(|labels| labels.get(key)).and_then(Value::as_str).map(str::to_owned)
}

fn key_of(object: &Value) -> Key {
    let namespace = str_at(object, "/metadata/namespace").unwrap_or_default().to_owned();
    (namespace, str_at(object, "/metadata/name").unwrap_or_default().to_owned())
}

fn pod_record(object: &Value, owner_label: OwnerLabel) -> PodRecord {
    let (namespace, name) = key_of(object);
    PodRecord {
        uid: str_at(object, "/metadata/uid").unwrap_or_default().to_owned(),
        pool: label(object, labels::POOL_NAME).unwrap_or_default(),
        phase: label(object, labels::PHASE).unwrap_or_default(),
        claim_uid: label(object, labels::CLAIM_UID).filter(|uid| !uid.is_empty()),
        claimed_by: label(object, labels::CLAIMED_BY).filter(|name| !name.is_empty()),
        owner: owner_label.owner(object),
        deleting: object.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()),
        failed: str_at(object, "/status/phase") == Some("Failed"),
        store_uuid: str_at(object, "/spec/subdomain")
            .map(|subdomain| cnpool_api::cn_store_uuid(&name, subdomain, &namespace)),
    }
}

fn claim_record(object: &Value) -> ClaimRecord {
    let cn_labels = object
        .pointer("/spec/cnLabels")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|label| {
            let key = label.get("key")?.as_str()?.to_owned();
            let values = label.get("values").and_then(Value::as_array).into_iter().flatten();
            Some((key, values.filter_map(|v| v.as_str().map(str::to_owned)).collect()))
        })
        .collect();
    let spec = object.get("spec").cloned().map(serde_json::from_value::<CNClaimSpec>);
    let (valid, selector) = match spec {
        Some(Ok(spec)) => (validate_claim_spec(&spec).is_ok(), spec.selector),
        _ => (false, LabelSelector::default()),
    };
    ClaimRecord {
        valid,
        selector,
        pool_name: str_at(object, "/spec/poolName").unwrap_or_default().to_owned(),
        claim_set: label(object, labels::CLAIM_SET).filter(|set| !set.is_empty()),
        uid: str_at(object, "/metadata/uid").unwrap_or_default().to_owned(),
        phase: str_at(object, "/status/phase").unwrap_or_default().to_owned(),
        spec_pod: str_at(object, "/spec/podName").unwrap_or_default().to_owned(),
        source_pod: str_at(object, "/spec/sourcePod/podName").map(str::to_owned),
        recorded_pod: str_at(object, "/status/store/podName").map(str::to_owned),
        recorded_pod_uid: str_at(object, "/status/store/podUID").map(str::to_owned),
        deleting: object.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()),
        cn_labels,
    }
}

fn pool_record(object: &Value) -> PoolRecord {
    let (_, name) = key_of(object);
    let spec = object.get("spec").cloned().map(serde_json::from_value::<CNPoolSpec>);
    let Some(Ok(spec)) = spec else {
        return PoolRecord { valid: false, labels: BTreeMap::new(), max_pods: None };
    };
    let valid = validate_pool_spec(&spec).is_ok();
    let mut pod_labels = spec.template_labels();
    pod_labels.extend(spec.pod_labels.clone());
    pod_labels.insert(labels::POOL_NAME.to_owned(), name);
    let max_pods = spec.strategy.scale_strategy.max_pods.and_then(|max| u32::try_from(max).ok()).filter(|_| valid);
    PoolRecord { valid, labels: pod_labels, max_pods }
}

fn claim_set_valid(object: &Value) -> bool {
    let spec = object.get("spec").cloned().map(serde_json::from_value::<CNClaimSetSpec>);
    matches!(spec, Some(Ok(spec)) if validate_claim_set_spec(&spec).is_ok())
}

/// The owner and phase labels of a pod version (none for no version); an
/// empty owner value is no owner, as in the controllers' cache and guard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct OwnerLabels {
    phase: Option<String>,
    claim_uid: Option<String>,
    claimed_by: Option<String>,
}

impl OwnerLabels {
    fn of(object: Option<&Value>) -> Self {
        let Some(object) = object else { return Self::default() };
        Self {
            phase: label(object, labels::PHASE),
            claim_uid: label(object, labels::CLAIM_UID).filter(|uid| !uid.is_empty()),
            claimed_by: label(object, labels::CLAIMED_BY).filter(|name| !name.is_empty()),
        }
    }

    fn describe(&self) -> String {
        match (&self.claim_uid, &self.claimed_by) {
            (None, None) => "no owner".to_owned(),
            (Some(uid), None) => format!("claim-uid {uid}"),
            (None, Some(name)) => format!("claimed-by {name} (no claim-uid)"),
            (Some(uid), Some(name)) => format!("claim-uid {uid} (claimed-by {name})"),
        }
    }
}

/// A commit that changed a pod's owner labels, kept until the write
/// behind it is known.
#[derive(Clone, Debug)]
struct OwnerChange {
    resource_version: u64,
    at: Duration,
    pod: String,
    before: OwnerLabels,
    after: OwnerLabels,
}

/// The keys a transition writes and no spec may overwrite.
const TRANSITION_KEYS: [&str; 5] =
    [labels::PHASE, labels::CLAIM_UID, labels::CLAIMED_BY, labels::OWNER, labels::CLAIM_SET];

/// Watches one run.
pub struct Checker {
    bounds: Bounds,
    /// Where the gate records the write behind each pod commit (I8).
    ledger: Arc<Ledger>,
    pods: BTreeMap<Key, PodRecord>,
    claims: BTreeMap<Key, ClaimRecord>,
    /// How many of `pods` each pool name has: I6 is judged at every pod
    /// commit, and counting them then would make a run quadratic.
    pods_per_pool: BTreeMap<String, usize>,
    /// The names of the claims of `claims` Bound to each pod, by
    /// (namespace, pod name): I1 is judged at every claim commit.
    bound_to: BTreeMap<Key, BTreeSet<String>>,
    /// Every claim the run ever had, by UID: an owner must name one (I8).
    claims_ever: BTreeMap<String, Key>,
    pools: BTreeMap<Key, PoolRecord>,
    /// Claim sets, and whether their spec is valid.
    claim_sets: BTreeMap<Key, bool>,
    /// Owner changes whose write the gate had not recorded yet when they
    /// were committed; judged at the next tick.
    pending: Vec<OwnerChange>,
    /// The last commit's time and resourceVersion, and the last
    /// resourceVersion committed before that time: every write up to that
    /// one has been recorded by the gate and judged.
    latest: (Duration, u64),
    judged_through: u64,
    /// The bounded conditions holding now.
    episodes: Episodes,
    /// Stores of deleted pods, and when the pod went.
    removed_stores: BTreeMap<String, (Key, Duration)>,
    /// Every migration started, in order.
    migrations: Vec<Migration>,
    violations: Vec<Violation>,
}

impl Checker {
    pub fn new(bounds: Bounds, ledger: Arc<Ledger>) -> Self {
        Self {
            bounds,
            ledger,
            pods: BTreeMap::new(),
            claims: BTreeMap::new(),
            pods_per_pool: BTreeMap::new(),
            bound_to: BTreeMap::new(),
            claims_ever: BTreeMap::new(),
            pools: BTreeMap::new(),
            claim_sets: BTreeMap::new(),
            pending: Vec::new(),
            latest: (Duration::ZERO, 0),
            judged_through: 0,
            episodes: Episodes::default(),
            removed_stores: BTreeMap::new(),
            migrations: Vec::new(),
            violations: Vec::new(),
        }
    }

    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    fn violate(&mut self, invariant: Invariant, now: Duration, detail: String) {
        self.violations.push(Violation { invariant, at_seconds: now.as_secs_f64(), detail });
    }

    /// Applies one committed write and checks I1, I8 and the pod cap.
    pub fn commit(&mut self, event: &Event, now: Duration) {
        let key = key_of(&event.object);
        if now > self.latest.0 {
            self.judged_through = self.latest.1;
        }
        self.latest = (now, event.resource_version);
        match event.storage.plural.as_str() {
            "pods" if event.event_type == EventType::Deleted => {
                self.episodes.forget(&[Subject::Pod, Subject::PodStore], &key.1);
                self.migrating_pod_changed(&key, None, now);
                if let Some(pod) = self.remove_pod(&key)
                    && let Some(uuid) = pod.store_uuid
                {
                    self.removed_stores.insert(uuid, (key, now));
                }
            }
            "pods" => {
                let record = pod_record(&event.object, self.bounds.owner_label);
                self.migrating_pod_changed(&key, Some(&record), now);
                let pool = record.pool.clone();
                self.insert_pod(key.clone(), record);
                self.check_owners(&key, now);
                self.owner_labels_written(event, &key.1, now);
                let cap = if pool == self.bounds.pool {
                    Some(self.bounds.max_pods)
                } else {
                    self.pools.get(&(key.0.clone(), pool.clone())).and_then(|pool| pool.max_pods)
                };
                let pods = self.pods_per_pool.get(&pool).copied().unwrap_or_default();
                if let Some(cap) = cap.filter(|cap| pods > *cap as usize) {
                    self.violate(Invariant::I6, now, format!("{pods} pods of pool {pool} exist, maxPods is {cap}"));
                }
            }
            "cnpools" if event.event_type == EventType::Deleted => {
                self.pools.remove(&key);
            }
            "cnpools" => {
                self.pools.insert(key, pool_record(&event.object));
            }
            "cnclaimsets" if event.event_type == EventType::Deleted => {
                self.claim_sets.remove(&key);
            }
            "cnclaimsets" => {
                self.claim_sets.insert(key, claim_set_valid(&event.object));
            }
            "cnclaims" if event.event_type == EventType::Deleted => {
                self.episodes.forget(&[Subject::Claim, Subject::ClaimStore], &key.1);
                for migration in self.migrations.iter_mut().filter(|migration| migration.claim == key) {
                    if migration.counts_at(now) {
                        migration.disturbed = true;
                        migration.ended.get_or_insert(now);
                    }
                }
                self.remove_claim(&key);
            }
            "cnclaims" => {
                let record = claim_record(&event.object);
                let was_lost = self.claims.get(&key).is_some_and(|claim| claim.phase == "Lost");
                if record.phase == "Lost" && !was_lost {
                    self.check_loss(&key, &record, &event.object, now);
                    // I4 counts from a claim's creation or loss: a claim that
                    // loses the pod it was about to be Bound to (deleted,
                    // failed) waits for a new one, and a new pod start, anew.
                    self.episodes.end(Invariant::I4, Subject::Claim, &key.1);
                }
                self.follow_migration(&key, &record, now);
                self.claims_ever.insert(record.uid.clone(), key.clone());
                self.insert_claim(key.clone(), record);
                self.check_bound_once(&key, now);
            }
            _ => {}
        }
    }

    fn insert_pod(&mut self, key: Key, record: PodRecord) {
        *self.pods_per_pool.entry(record.pool.clone()).or_default() += 1;
        if let Some(old) = self.pods.insert(key, record) {
            self.uncount_pod(&old);
        }
    }

    fn remove_pod(&mut self, key: &Key) -> Option<PodRecord> {
        let old = self.pods.remove(key)?;
        self.uncount_pod(&old);
        Some(old)
    }

    fn uncount_pod(&mut self, pod: &PodRecord) {
        if let Some(count) = self.pods_per_pool.get_mut(&pod.pool) {
            *count -= 1;
            if *count == 0 {
                self.pods_per_pool.remove(&pod.pool);
            }
        }
    }

    fn insert_claim(&mut self, key: Key, record: ClaimRecord) {
        if let Some(pod) = record.bound_pod() {
            self.bound_to.entry((key.0.clone(), pod.to_owned())).or_default().insert(key.1.clone());
        }
        if let Some(old) = self.claims.insert(key.clone(), record) {
            self.unbind_claim(&key, &old);
        }
    }

    fn remove_claim(&mut self, key: &Key) {
        if let Some(old) = self.claims.remove(key) {
            self.unbind_claim(key, &old);
        }
    }

    /// Drops `key`'s old record `old` from `bound_to`, unless its new
    /// record is Bound to the same pod.
    fn unbind_claim(&mut self, key: &Key, old: &ClaimRecord) {
        let Some(pod) = old.bound_pod() else { return };
        if self.claims.get(key).and_then(ClaimRecord::bound_pod) == Some(pod) {
            return;
        }
        let at = (key.0.clone(), pod.to_owned());
        if let Some(names) = self.bound_to.get_mut(&at) {
            names.remove(&key.1);
            if names.is_empty() {
                self.bound_to.remove(&at);
            }
        }
    }

    /// The migration of `claim` under way, if any.
    fn migration_of(&mut self, claim: &Key) -> Option<&mut Migration> {
        self.migrations.iter_mut().rev().find(|migration| &migration.claim == claim && migration.ended.is_none())
    }

    /// Starts, follows and ends a claim's migration on a commit of the
    /// claim (`record`, before it replaces the last one).
    fn follow_migration(&mut self, key: &Key, record: &ClaimRecord, now: Duration) {
        let counted =
            self.migrations.iter_mut().filter(|migration| &migration.claim == key && migration.counts_at(now));
        for migration in counted {
            migration.writes += 1;
            // A loss in the tail is priced by no migration bound: the
            // release and new acquire that follow are the loss's cost.
            migration.disturbed |= record.phase == "Lost" || record.deleting;
        }
        let owner = self.bounds.owner_label.names(&key.1, record).to_owned();
        match (&record.source_pod, self.migration_of(key)) {
            (Some(source), None) => self.migrations.push(Migration {
                claim: key.clone(),
                uid: record.uid.clone(),
                owner,
                source: source.clone(),
                pods: BTreeSet::from([source.clone()]),
                started: now,
                ended: None,
                writes: 0,
                disturbed: false,
            }),
            (source, Some(migration)) => {
                // Another source: a second migration over the first.
                migration.disturbed |= source.as_ref().is_some_and(|source| *source != migration.source);
                migration.pods.extend(record.pods_pointed_at().map(str::to_owned));
                migration.pods.extend(record.recorded_pod.clone());
                if source.is_none() {
                    migration.ended = Some(now);
                }
            }
            _ => {}
        }
    }

    /// Counts a pod's change of owner to or from a migrating claim, and
    /// notes a pod a migration names going away (`record` `None`) or failing.
    fn migrating_pod_changed(&mut self, key: &Key, record: Option<&PodRecord>, now: Duration) {
        let before = self.pods.get(key).and_then(|pod| pod.owner.clone());
        let after = record.and_then(|pod| pod.owner.clone());
        let gone = record.is_none_or(|pod| pod.deleting || pod.failed);
        for migration in self.migrations.iter_mut().filter(|migration| migration.claim.0 == key.0) {
            // A pod it names going away in the tail disturbs it as before
            // its end: what follows is the loss's cost, not the migration's.
            if migration.counts_at(now) {
                migration.disturbed |= gone && migration.pods.contains(&key.1);
            }
            if migration.ended.is_some() {
                continue;
            }
            let owner = Some(&migration.owner);
            if before != after && (before.as_ref() == owner || after.as_ref() == owner) {
                migration.writes += 1;
            }
        }
    }

    /// I5 on every migration that ended undisturbed and that no injected
    /// fault reached (a crash, a refused write, a slow drain legitimately
    /// add work): its claim's reconciles, writes and log lines within its
    /// bound. Reconciles are counted per replica, as the per-minute bound
    /// is: each of a split brain's does its own. Returns how many
    /// migrations were judged.
    pub fn check_migrations(&mut self, ledger: &Ledger, now: Duration) -> usize {
        let mut judged = 0;
        let mut violations = Vec::new();
        for (index, migration) in self.migrations.iter().enumerate() {
            let Some(window) = migration.window().filter(|window| window.end <= now && !migration.disturbed) else {
                continue;
            };
            // The next migration of the claim would be counted with it.
            let followed = self.migrations[index + 1..]
                .iter()
                .any(|next| next.claim == migration.claim && next.started < window.end);
            let (namespace, name) = &migration.claim;
            let mut reachable = migration.pods.clone();
            reachable.insert(name.clone());
            if followed || ledger.fault_reached(&reachable, &window) {
                continue;
            }
            judged += 1;
            let reconciles = ledger.reconciles_of("CNClaim", namespace, name, &migration.uid, &window);
            let writes = migration.writes;
            let lines = ledger.log_lines_within(window.clone(), Some(name));
            if reconciles > MIGRATION_RECONCILES || writes > MIGRATION_WRITES || lines > MIGRATION_LOG_LINES {
                let pods: Vec<&str> = migration.pods.iter().map(String::as_str).collect();
                let detail = format!(
                    "migration of claim {name} (pods {}) over {:.0}s cost {reconciles} reconciles, {writes} writes, \
                     {lines} log lines (bounds {MIGRATION_RECONCILES}, {MIGRATION_WRITES}, {MIGRATION_LOG_LINES})",
                    pods.join(", "),
                    (window.end - window.start - MIGRATION_TAIL).as_secs_f64()
                );
                violations.push(Violation { invariant: Invariant::I5, at_seconds: window.start.as_secs_f64(), detail });
            }
        }
        self.violations.extend(violations);
        judged
    }

    /// I8 on a pod commit: judges a change of its owner labels, and any
    /// write that set an owner or phase key twice, against the write the
    /// gate recorded for it; a change whose write is not recorded yet
    /// waits for the next tick.
    fn owner_labels_written(&mut self, event: &Event, pod: &str, now: Duration) {
        let write = self.ledger.take_pod_write(event.resource_version);
        let change = OwnerChange {
            resource_version: event.resource_version,
            at: now,
            pod: pod.to_owned(),
            before: OwnerLabels::of(event.old.as_ref()),
            after: OwnerLabels::of(Some(&event.object)),
        };
        match write {
            Some(write) => self.judge_owner_change(&change, Some(&write), now),
            None if self.owner_changed(&change) => self.pending.push(change),
            None => {}
        }
    }

    /// Whether `change` moved what I8 judges: `claim-uid`, and with
    /// cnpool's lock `claimed-by` too (the legacy model's lock is
    /// `claimed-by`, which it writes without guards by design).
    fn owner_changed(&self, change: &OwnerChange) -> bool {
        change.before.claim_uid != change.after.claim_uid
            || (self.bounds.owner_label == OwnerLabel::ClaimUid && change.before.claimed_by != change.after.claimed_by)
    }

    /// I8 on one commit of a pod, with the write behind it if known.
    fn judge_owner_change(&mut self, change: &OwnerChange, write: Option<&PodWrite>, now: Duration) {
        let writer = write.map_or_else(|| "a write the gate did not see".to_owned(), PodWrite::describe);
        let pod = &change.pod;
        for key in TRANSITION_KEYS {
            let values = write.map(|write| write.values_set(key)).unwrap_or_default();
            if let Some(other) = values.iter().find(|value| **value != values[0]) {
                let detail = format!(
                    "pod {pod}: one write ({writer}) set {key} to {} and then {other}: labels from a spec \
                     overwrote the transition's own",
                    values[0]
                );
                self.violate(Invariant::I8, now, detail);
            }
        }
        if !self.owner_changed(change) {
            return;
        }
        let (before, after) = (change.before.describe(), change.after.describe());
        let new_uid = change.after.claim_uid.as_ref().filter(|uid| change.before.claim_uid.as_ref() != Some(*uid));
        let claim = new_uid.map(|uid| self.claims_ever.get(uid).map(|(_, name)| name.clone()));
        if let (Some(uid), Some(None)) = (new_uid, &claim) {
            let detail = format!(
                "pod {pod} changed owner from {before} to claim-uid {uid}, which names no claim that ever \
                 existed ({writer})"
            );
            return self.violate(Invariant::I8, now, detail);
        }
        if !write.is_some_and(PodWrite::guarded) {
            let detail =
                format!("pod {pod} changed owner from {before} to {after} by {writer}, not a guarded transition");
            return self.violate(Invariant::I8, now, detail);
        }
        let (Some(uid), Some(Some(name))) = (new_uid, claim) else { return };
        let was = &change.before;
        let named = |by: &Option<String>| by.as_deref() == Some(name.as_str());
        let acquire = was.phase.as_deref() == Some("Idle")
            && was.claim_uid.is_none()
            && was.claimed_by.is_none()
            && named(&change.after.claimed_by);
        let adopt = was.claim_uid.is_none() && named(&was.claimed_by) && named(&change.after.claimed_by);
        if !acquire && !adopt {
            let phase = was.phase.as_deref().unwrap_or("-");
            let detail = format!(
                "pod {pod} changed owner from {before} (phase {phase}) to claim {name} (UID {uid}), now {after}, \
                 by {writer}: neither {name}'s acquire (an Idle pod with no owner) nor its adopt-legacy \
                 (claimed-by {name}, no claim-uid)"
            );
            self.violate(Invariant::I8, now, detail);
        }
    }

    /// I1 on a pod: its `claim-uid` and `claimed-by` name one claim.
    fn check_owners(&mut self, key: &Key, now: Duration) {
        let Some(pod) = self.pods.get(key) else { return };
        let (Some(uid), Some(name)) = (pod.claim_uid.clone(), pod.claimed_by.clone()) else { return };
        let named = self.claims.get(&(key.0.clone(), name.clone())).map(|claim| claim.uid.clone());
        if let Some(named_uid) = named
            && named_uid != uid
        {
            let detail = format!("pod {} carries claim-uid {uid} but claimed-by {name} (UID {named_uid})", key.1);
            self.violate(Invariant::I1, now, detail);
        }
    }

    /// I1 on a claim: no other live claim is Bound to its pod.
    fn check_bound_once(&mut self, key: &Key, now: Duration) {
        let Some(pod) = self.claims.get(key).and_then(ClaimRecord::bound_pod).map(str::to_owned) else { return };
        let uid = self.claims.get(key).and_then(|claim| claim.recorded_pod_uid.clone());
        // One pod: the same name, and the same UID where both claims
        // recorded one (a pod of a reused name is another pod).
        let bound = self.bound_to.get(&(key.0.clone(), pod.clone())).into_iter().flatten();
        let others: Vec<String> = bound
            .filter(|other| **other != key.1)
            .filter(|other| {
                let claim = self.claims.get(&(key.0.clone(), (*other).clone()));
                claim.is_some_and(|claim| {
                    uid.is_none() || claim.recorded_pod_uid.is_none() || claim.recorded_pod_uid == uid
                })
            })
            .cloned()
            .collect();
        if !others.is_empty() {
            let detail = format!("claims {} and {} are both Bound to pod {pod}", key.1, others.join(", "));
            self.violate(Invariant::I1, now, detail);
        }
    }

    /// I2 on a claim going Lost because its pod is gone, replaced or no
    /// longer its own: the server must show that. A loss the server
    /// refutes (its recorded pod there, the same, still the claim's, neither
    /// deleting nor failed) is a claim that does not tell the truth about its
    /// pod. Losses judged on the CN (a failed container, a missing store)
    /// are not checked here.
    fn check_loss(&mut self, key: &Key, claim: &ClaimRecord, object: &Value, now: Duration) {
        let conditions = object.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten();
        let reason = conditions
            .filter(|condition| condition.get("type").and_then(Value::as_str) == Some("Bound"))
            .find_map(|condition| condition.get("reason").and_then(Value::as_str))
            .unwrap_or_default();
        if !matches!(reason, "PodDeleted" | "PodReplaced" | "OwnedByOther" | "PodReleased") {
            return;
        }
        let Some(name) = claim.recorded_pod.as_deref() else { return };
        let Some(pod) = self.pods.get(&(key.0.clone(), name.to_owned())) else { return };
        let same = claim.recorded_pod_uid.as_deref().is_none_or(|uid| uid == pod.uid);
        if same && pod.claim_uid.as_deref() == Some(claim.uid.as_str()) && !pod.deleting && !pod.failed {
            let detail =
                format!("claim {} marked Lost ({reason}) while its pod {name} is there and still its own", key.1);
            self.violate(Invariant::I2, now, detail);
        }
    }

    /// The bounded invariants, once per virtual second; and I8 on the owner
    /// changes committed before this instant whose write was not recorded
    /// when they were.
    pub fn tick(&mut self, now: Duration, registry: &MemoryRegistry) {
        let (due, waiting): (Vec<OwnerChange>, Vec<OwnerChange>) =
            std::mem::take(&mut self.pending).into_iter().partition(|change| change.at < now);
        self.pending = waiting;
        for change in due {
            let write = self.ledger.take_pod_write(change.resource_version);
            self.judge_owner_change(&change, write.as_ref(), now);
        }
        let judged = if self.latest.0 < now { self.latest.1 } else { self.judged_through };
        self.ledger.forget_pod_writes_through(judged);
        // Borrowed apart: the records are read while the episodes change.
        let Self { bounds, pods, claims, pools, claim_sets, episodes, removed_stores, violations, .. } = self;
        let mut track = |invariant, subject, name: &str, bad: Option<String>, bound| {
            if let Some(violation) = episodes.track(invariant, subject, name, bad, bound, now) {
                violations.push(violation);
            }
        };
        let store_bound = BOUND_30S + bounds.store_missing_bound;
        let unusable = pods.values().filter(|pod| pod.pool == bounds.pool && (pod.deleting || pod.failed)).count();
        // Claims not meant to bind (an invalid spec, a selector its pool
        // cannot match) take capacity only while they hold a pod.
        let meant = |key: &Key, claim: &ClaimRecord| claim.meant_to_bind(&key.0, pools, claim_sets);
        let live_claims =
            claims.iter().filter(|(key, claim)| !claim.deleting && (claim.holds() || meant(key, claim))).count();
        let spare = live_claims + unusable < bounds.max_pods as usize;
        let owner_label = bounds.owner_label;
        for (key, claim) in claims.iter() {
            let bound_pod = claim.bound_pod().map(|name| (name, pods.get(&(key.0.clone(), name.to_owned()))));
            // I2: a Bound claim's pod exists, is the recorded one and is owned by it.
            let untruthful = bound_pod.and_then(|(name, pod)| match pod {
                None => Some(format!("claim {} Bound to pod {name}, which does not exist", key.1)),
                Some(pod) if claim.recorded_pod_uid.as_deref().is_some_and(|uid| uid != pod.uid) => {
                    Some(format!("claim {} Bound to pod {name}, which was replaced", key.1))
                }
                Some(pod) if pod.owner.as_deref() != Some(owner_label.names(&key.1, claim)) => {
                    Some(format!("claim {} Bound to pod {name}, which it does not own", key.1))
                }
                Some(_) => None,
            });
            track(Invariant::I2, Subject::Claim, &key.1, untruthful, BOUND_30S);
            let store_of_bound_pod = bound_pod.and_then(|(name, pod)| Some((name, pod?, pod?.store_uuid.as_deref()?)));
            let store_missing = store_of_bound_pod.and_then(|(name, pod, uuid)| {
                (!pod.deleting && registry.inspect_store(uuid, |store| store.is_none()))
                    .then(|| format!("claim {} Bound to pod {name}, whose store is missing", key.1))
            });
            track(Invariant::I2, Subject::ClaimStore, &key.1, store_missing, store_bound);
            // I4: with capacity to spare, a claim is Bound soon after its creation or loss.
            let waiting = (!claim.deleting && !claim.holds() && spare && meant(key, claim))
                .then(|| format!("claim {} is {}", key.1, if claim.phase.is_empty() { "new" } else { &claim.phase }));
            track(Invariant::I4, Subject::Claim, &key.1, waiting, BOUND_30S + bounds.start_delay);
            // I7: a Bound claim's store carries its labels and is Working.
            let disagreeing = store_of_bound_pod.and_then(|(name, _, uuid)| {
                registry.inspect_store(uuid, |store| {
                    let store = store?;
                    (store.work_state != WorkState::Working || store.labels != claim.cn_labels).then(|| {
                        format!(
                            "store of pod {name} (claim {}) is {:?} with labels {:?}",
                            key.1, store.work_state, store.labels
                        )
                    })
                })
            });
            track(Invariant::I7, Subject::Claim, &key.1, disagreeing, BOUND_30S);
        }
        // (namespace, owner, pod) for every pod a live claim points at.
        let pointed: BTreeSet<(&str, &str, &str)> = claims
            .iter()
            .flat_map(|(key, claim)| {
                let owner = owner_label.names(&key.1, claim);
                claim.pods_pointed_at().map(move |pod| (key.0.as_str(), owner, pod))
            })
            .collect();
        for (key, pod) in pods.iter() {
            // I3: a pod owned by a claim that does not point at it is released.
            let leaked = pod.owner.as_deref().and_then(|owner| {
                (!pointed.contains(&(key.0.as_str(), owner, key.1.as_str())))
                    .then(|| format!("pod {} owned by {owner}, which no claim points at", key.1))
            });
            track(Invariant::I3, Subject::Pod, &key.1, leaked, BOUND_60S);
            // I7: a released store is Draining with no labels.
            let dirty = (pod.phase == "Draining" && pod.owner.is_none() && !pod.deleting)
                .then_some(pod.store_uuid.as_deref())
                .flatten()
                .and_then(|uuid| {
                    registry.inspect_store(uuid, |store| {
                        store.filter(|store| store.work_state == WorkState::Working || !store.labels.is_empty()).map(
                            |store| {
                                format!(
                                    "released pod {}'s store is {:?} with labels {:?}",
                                    key.1, store.work_state, store.labels
                                )
                            },
                        )
                    })
                });
            track(Invariant::I7, Subject::PodStore, &key.1, dirty, BOUND_30S);
        }
        // I7: a deleted pod's store is removed (unless a pod of the same name registered it again).
        removed_stores.retain(|uuid, (key, _)| {
            let gone = pods.contains_key(key) || registry.inspect_store(uuid, |store| store.is_none());
            let detail = (!gone).then(|| format!("store of deleted pod {} is still registered", key.1));
            track(Invariant::I7, Subject::Store, uuid, detail, BOUND_30S);
            !gone
        });
    }

    /// I5 and I6 once the run has settled: `quiet_writes` operator writes
    /// in the last quiet window, `busiest` the most reconciles of one object
    /// in one minute.
    pub fn settled(&mut self, now: Duration, quiet_writes: usize, busiest: Option<(String, usize, Duration)>) {
        if quiet_writes > 0 {
            self.violate(Invariant::I5, now, format!("{quiet_writes} operator writes in the last 10 quiet minutes"));
        }
        if let Some((object, count, from)) = busiest.filter(|(_, count, _)| *count > 30) {
            let detail = format!("{object} reconciled {count} times in the minute from {:.0}s", from.as_secs_f64());
            self.violate(Invariant::I5, from, detail);
        }
        let pool: Vec<&PodRecord> =
            self.pods.values().filter(|pod| pod.pool == self.bounds.pool && !pod.deleting).collect();
        let in_use = pool.iter().filter(|pod| pod.owner.is_some()).count() as u32;
        let idle = pool.iter().filter(|pod| pod.phase == "Idle").count() as u32;
        let expected = self.bounds.max_idle.min(self.bounds.max_pods.saturating_sub(in_use));
        if idle != expected {
            let detail = format!("{idle} idle pods after settling, expected {expected} ({in_use} in use)");
            self.violate(Invariant::I6, now, detail);
        }
    }
}

#[cfg(test)]
mod tests {
    use cnpool_apiserver::StorageKey;
    use serde_json::json;

    use super::*;
    use crate::ledger::{Actor, Fault, Reach};

    fn claim_event(event_type: EventType, uid: &str) -> Event {
        claim_in_phase(event_type, uid, "Pending")
    }

    fn claim_in_phase(event_type: EventType, uid: &str, phase: &str) -> Event {
        claim_with_spec(event_type, "tenant", uid, phase, json!({"poolName": "pool", "selector": {}}))
    }

    fn claim_with_spec(event_type: EventType, name: &str, uid: &str, phase: &str, spec: Value) -> Event {
        let object = json!({
            "metadata": {"namespace": "default", "name": name, "uid": uid},
            "spec": spec,
            "status": {"phase": phase},
        });
        committed("cnclaims", event_type, object)
    }

    fn committed(plural: &str, event_type: EventType, object: Value) -> Event {
        let group = if plural == "pods" { "" } else { "core.matrixorigin.io" };
        Event::new(1, StorageKey { group: group.into(), plural: plural.into() }, event_type, None, object)
    }

    fn checker() -> Checker {
        let bounds = Bounds {
            pool: "pool".into(),
            max_pods: 4,
            max_idle: 1,
            start_delay: Duration::ZERO,
            store_missing_bound: Duration::from_secs(30),
            owner_label: OwnerLabel::ClaimUid,
        };
        let mut checker = Checker::new(bounds, Arc::new(Ledger::new(false)));
        let pool = json!({
            "metadata": {"namespace": "default", "name": "pool", "uid": "pool"},
            "spec": {
                "template": {"image": "matrixorigin/matrixone:1.2.0"},
                "podLabels": {"tier": "standard"},
                "strategy": {"scaleStrategy": {"maxIdle": 1, "maxPods": 4}},
            },
        });
        checker.commit(&committed("cnpools", EventType::Added, pool), Duration::ZERO);
        checker
    }

    fn i8(checker: &Checker) -> Vec<&str> {
        let found = checker.violations.iter().filter(|violation| violation.invariant == Invariant::I8);
        found.map(|violation| violation.detail.as_str()).collect()
    }

    /// A claim Bound to `pod` (by its status), as committed.
    fn bound_claim(event_type: EventType, name: &str, pod: &str) -> Event {
        let object = json!({
            "metadata": {"namespace": "default", "name": name, "uid": format!("uid-{name}")},
            "spec": {"poolName": "pool", "selector": {}},
            "status": {"phase": "Bound", "store": {"podName": pod}},
        });
        committed("cnclaims", event_type, object)
    }

    fn i1(checker: &Checker) -> Vec<&str> {
        let found = checker.violations.iter().filter(|violation| violation.invariant == Invariant::I1);
        found.map(|violation| violation.detail.as_str()).collect()
    }

    #[test]
    fn two_claims_bound_to_one_pod_break_i1_only_while_both_say_so() {
        let mut checker = checker();
        let at = Duration::from_secs(1);
        checker.commit(&bound_claim(EventType::Added, "a", "pod-0"), at);
        // a moves on to pod-1: pod-0 is free for b.
        checker.commit(&bound_claim(EventType::Modified, "a", "pod-1"), at);
        checker.commit(&bound_claim(EventType::Added, "b", "pod-0"), at);
        assert!(i1(&checker).is_empty(), "{:?}", i1(&checker));
        // c on a's pod-1 while a still says it holds it.
        checker.commit(&bound_claim(EventType::Added, "c", "pod-1"), at);
        assert_eq!(i1(&checker), ["claims c and a are both Bound to pod pod-1"]);
        // Once a is gone, d may be Bound to pod-1 beside c only: one more, naming c.
        checker.commit(&bound_claim(EventType::Deleted, "a", "pod-1"), at);
        checker.commit(&bound_claim(EventType::Added, "d", "pod-1"), at);
        assert_eq!(i1(&checker)[1..], ["claims d and c are both Bound to pod pod-1"]);
    }

    #[test]
    fn claims_the_controllers_must_not_bind_are_not_waited_for() {
        let mut checker = checker();
        let like = json!({"matchExpressions": [{"key": "tier", "operator": "Like", "values": ["standard"]}]});
        let specs = [
            ("reserved", json!({"poolName": "pool", "additionalPodLabels": {labels::CLAIM_UID: "x"}})),
            ("like", json!({"poolName": "pool", "selector": like})),
            ("nothing", json!({"poolName": "pool", "selector": {"matchLabels": {"tier": "none"}}})),
        ];
        for (name, spec) in specs {
            checker.commit(&claim_with_spec(EventType::Added, name, name, "Pending", spec), Duration::ZERO);
        }
        tick_through(&mut checker, 0..=60);
        assert_eq!(i4(&checker), 0, "{:?}", checker.violations);
        let valid = json!({"poolName": "pool", "selector": {"matchLabels": {"tier": "standard"}}});
        checker.commit(&claim_with_spec(EventType::Added, "valid", "v", "Pending", valid), Duration::from_secs(60));
        tick_through(&mut checker, 60..=91);
        assert_eq!(i4(&checker), 1, "a valid claim its pool serves is waited for");
    }

    /// A version of pod "cn-0" with these owner labels.
    fn cn0(phase: &str, claim_uid: Option<&str>, claimed_by: Option<&str>) -> Value {
        let labels = json!({
            labels::POOL_NAME: "pool",
            labels::PHASE: phase,
            labels::CLAIM_UID: claim_uid,
            labels::CLAIMED_BY: claimed_by,
        });
        let labels: serde_json::Map<String, Value> = labels
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        json!({"metadata": {"namespace": "default", "name": "cn-0", "uid": "cn-0", "labels": labels}})
    }

    /// Commits `after` over `before` as resourceVersion `rv`, written by `write`.
    fn write_pod(checker: &mut Checker, rv: u64, before: Value, after: Value, write: Option<PodWrite>) {
        if let Some(write) = write {
            checker.ledger.pod_write(rv, write);
        }
        let storage = StorageKey { group: String::new(), plural: "pods".into() };
        checker.commit(&Event::new(rv, storage, EventType::Modified, Some(before), after), Duration::from_secs(1));
    }

    /// An operator's transition as `ownership::transition` sends it: the
    /// owner tests, then `sets` in order.
    fn guarded(sets: &[(&str, &str)]) -> PodWrite {
        let pointer = |key: &str| format!("/metadata/labels/{}", key.replace('/', "~1"));
        let tests = [labels::PHASE, labels::CLAIM_UID, labels::CLAIMED_BY]
            .map(|key| json!({"op": "test", "path": pointer(key), "value": null}));
        let adds = sets.iter().map(|(key, value)| json!({"op": "add", "path": pointer(key), "value": value}));
        PodWrite {
            actor: Actor::Operator(0),
            method: "PATCH".into(),
            content_type: "application/json-patch+json".into(),
            body: Value::Array(tests.into_iter().chain(adds).collect()),
        }
    }

    /// A checker that knows claims "a" (UID "ua") and "b" (UID "ub").
    fn two_claims() -> Checker {
        let mut checker = checker();
        for (name, uid) in [("a", "ua"), ("b", "ub")] {
            let spec = json!({"poolName": "pool", "selector": {}});
            checker.commit(&claim_with_spec(EventType::Added, name, uid, "Pending", spec), Duration::ZERO);
        }
        checker
    }

    #[test]
    fn an_acquire_and_an_adopt_by_the_owners_own_claim_are_inputs_kept() {
        let mut checker = two_claims();
        let acquire = guarded(&[(labels::PHASE, "Bound"), (labels::CLAIM_UID, "ua"), (labels::CLAIMED_BY, "a")]);
        write_pod(&mut checker, 10, cn0("Idle", None, None), cn0("Bound", Some("ua"), Some("a")), Some(acquire));
        let adopt = guarded(&[(labels::CLAIM_UID, "ub")]);
        write_pod(&mut checker, 11, cn0("Bound", None, Some("b")), cn0("Bound", Some("ub"), Some("b")), Some(adopt));
        assert!(i8(&checker).is_empty(), "{:?}", checker.violations);
    }

    #[test]
    fn spec_labels_that_overwrite_the_owner_break_inputs() {
        let mut checker = two_claims();
        // a's acquire, whose additional labels then name b as the owner.
        let write = guarded(&[
            (labels::PHASE, "Bound"),
            (labels::CLAIM_UID, "ua"),
            (labels::CLAIMED_BY, "a"),
            (labels::CLAIM_UID, "ub"),
        ]);
        write_pod(&mut checker, 10, cn0("Idle", None, None), cn0("Bound", Some("ub"), Some("a")), Some(write));
        let found = i8(&checker);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("set pool.matrixorigin.io/claim-uid to ua and then ub"), "{}", found[0]);
        assert!(found[1].contains("to claim b (UID ub)") && found[1].contains("neither b's acquire"), "{}", found[1]);
    }

    #[test]
    fn an_owner_change_that_is_no_guarded_transition_of_its_claim_breaks_inputs() {
        let mut checker = two_claims();
        // Taken from a: a guarded write, but no acquire (the pod had an owner).
        let steal = guarded(&[(labels::CLAIM_UID, "ub"), (labels::CLAIMED_BY, "b")]);
        write_pod(
            &mut checker,
            10,
            cn0("Bound", Some("ua"), Some("a")),
            cn0("Bound", Some("ub"), Some("b")),
            Some(steal),
        );
        // A merge patch by the control plane.
        let merge = PodWrite {
            actor: Actor::ControlPlane,
            method: "PATCH".into(),
            content_type: "application/merge-patch+json".into(),
            body: json!({"metadata": {"labels": {labels::CLAIM_UID: "ua", labels::CLAIMED_BY: "a"}}}),
        };
        write_pod(&mut checker, 11, cn0("Idle", None, None), cn0("Idle", Some("ua"), Some("a")), Some(merge));
        // A UID no claim ever had.
        let forged = guarded(&[(labels::PHASE, "Bound"), (labels::CLAIM_UID, "zz"), (labels::CLAIMED_BY, "a")]);
        write_pod(&mut checker, 12, cn0("Idle", None, None), cn0("Bound", Some("zz"), Some("a")), Some(forged));
        let found = i8(&checker);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].contains("from claim-uid ua (claimed-by a) (phase Bound) to claim b"), "{}", found[0]);
        assert!(found[1].contains("by the control plane, not a guarded transition"), "{}", found[1]);
        assert!(found[2].contains("names no claim that ever existed"), "{}", found[2]);
    }

    #[test]
    fn a_write_recorded_after_its_commit_is_judged_at_the_next_tick() {
        let mut checker = two_claims();
        let acquire = guarded(&[(labels::PHASE, "Bound"), (labels::CLAIM_UID, "ua"), (labels::CLAIMED_BY, "a")]);
        write_pod(&mut checker, 10, cn0("Idle", None, None), cn0("Bound", Some("ua"), Some("a")), None);
        checker.ledger.pod_write(10, acquire);
        tick_through(&mut checker, 2..=2);
        assert!(i8(&checker).is_empty(), "{:?}", checker.violations);
        write_pod(&mut checker, 11, cn0("Idle", None, None), cn0("Bound", Some("ub"), Some("b")), None);
        tick_through(&mut checker, 3..=3);
        let found = i8(&checker);
        assert!(found.len() == 1 && found[0].contains("a write the gate did not see"), "{found:?}");
    }

    /// The checker's ticks at each of `seconds`.
    fn tick_through(checker: &mut Checker, seconds: std::ops::RangeInclusive<u64>) {
        let registry = MemoryRegistry::new();
        for second in seconds {
            checker.tick(Duration::from_secs(second), &registry);
        }
    }

    fn i4(checker: &Checker) -> usize {
        checker.violations.iter().filter(|violation| violation.invariant == Invariant::I4).count()
    }

    #[test]
    fn a_claim_waiting_past_the_bound_breaks_liveness() {
        let mut checker = checker();
        checker.commit(&claim_event(EventType::Added, "a"), Duration::ZERO);
        tick_through(&mut checker, 0..=31);
        assert_eq!(i4(&checker), 1);
    }

    #[test]
    fn a_claim_created_under_the_name_of_a_deleted_one_waits_from_its_own_creation() {
        let mut checker = checker();
        checker.commit(&claim_event(EventType::Added, "old"), Duration::ZERO);
        tick_through(&mut checker, 20..=20);
        checker.commit(&claim_event(EventType::Deleted, "old"), Duration::from_secs(21));
        checker.commit(&claim_event(EventType::Added, "new"), Duration::from_secs(100));
        tick_through(&mut checker, 100..=120);
        assert_eq!(i4(&checker), 0, "{:?}", checker.violations);
    }

    #[test]
    fn a_claim_that_loses_its_pod_before_it_is_bound_waits_from_its_loss() {
        let mut checker = checker();
        checker.commit(&claim_event(EventType::Added, "a"), Duration::ZERO);
        tick_through(&mut checker, 0..=20);
        checker.commit(&claim_in_phase(EventType::Modified, "a", "Lost"), Duration::from_secs(20));
        tick_through(&mut checker, 20..=50);
        assert_eq!(i4(&checker), 0, "30 s after its loss: {:?}", checker.violations);
        tick_through(&mut checker, 51..=52);
        assert_eq!(i4(&checker), 1, "past 30 s after its loss");
    }

    /// The claim "tenant" (UID "t") Bound to `pod`, migrating from `source`.
    fn tenant(pod: &str, source: Option<&str>) -> Event {
        let spec = json!({"podName": pod, "sourcePod": source.map(|source| json!({"podName": source}))});
        let object = json!({
            "metadata": {"namespace": "default", "name": "tenant", "uid": "t"},
            "spec": spec,
            "status": {"phase": "Bound", "store": {"podName": pod}},
        });
        committed("cnclaims", EventType::Modified, object)
    }

    fn pod(name: &str, owner: Option<&str>) -> Event {
        let labels = json!({ labels::CLAIM_UID: owner, labels::PHASE: if owner.is_some() { "Bound" } else { "Idle" } });
        let object = json!({"metadata": {"namespace": "default", "name": name, "uid": name, "labels": labels}});
        committed("pods", EventType::Modified, object)
    }

    /// Migrates "tenant" from pod a to pod b over 60 virtual seconds, with
    /// `reconciles` of the claim by each of `replicas` and `fault_on` hit by
    /// a fault meanwhile, then `in_tail` committed a second after its end;
    /// returns how many migrations were judged and the I5 violations.
    async fn migrate_a_to_b(
        replicas: usize,
        reconciles: usize,
        fault_on: Option<&str>,
        in_tail: &[Event],
    ) -> (usize, Vec<Violation>) {
        let ledger = Ledger::new(false);
        let mut checker = checker();
        let at = |ledger: &Ledger| ledger.elapsed();
        for event in
            [pod("a", Some("t")), pod("b", None), tenant("a", None), tenant("b", Some("a")), pod("b", Some("t"))]
        {
            checker.commit(&event, at(&ledger));
        }
        if let Some(name) = fault_on {
            let reach = Reach::Object { name: name.to_owned(), lasting: Duration::ZERO };
            ledger.fault(Fault::PodCrash, reach, format_args!("pod {name}"));
        }
        for _ in 0..reconciles {
            for replica in 0..replicas {
                ledger.reconciled(&format!("operator-{replica}"), "CNClaim", "default", "tenant", "t");
            }
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        tokio::time::advance(Duration::from_secs(60)).await;
        for event in [pod("a", None), tenant("b", None)] {
            checker.commit(&event, at(&ledger));
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        for event in in_tail {
            checker.commit(event, at(&ledger));
        }
        tokio::time::advance(MIGRATION_TAIL).await;
        let judged = checker.check_migrations(&ledger, at(&ledger));
        (judged, checker.violations.iter().filter(|violation| violation.invariant == Invariant::I5).cloned().collect())
    }

    #[tokio::test(start_paused = true)]
    async fn a_migration_that_reconciles_its_claim_more_than_20_times_breaks_quiet() {
        let (judged, violations) = migrate_a_to_b(1, 21, None, &[]).await;
        assert_eq!(judged, 1);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].detail.contains("21 reconciles, 3 writes"), "{}", violations[0].detail);
        let (_, violations) = migrate_a_to_b(1, 20, None, &[]).await;
        assert!(violations.is_empty(), "20 reconciles are within the bound: {violations:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_split_brain_prices_each_replica_on_its_own() {
        let (judged, violations) = migrate_a_to_b(2, 15, None, &[]).await;
        assert_eq!((judged, violations.len()), (1, 0), "15 reconciles by each of two replicas: {violations:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_migration_a_fault_reached_is_not_priced() {
        let (judged, violations) = migrate_a_to_b(1, 21, Some("a"), &[]).await;
        assert_eq!((judged, violations.len()), (0, 0), "a fault on its source: {violations:?}");
        let (judged, violations) = migrate_a_to_b(1, 21, Some("c"), &[]).await;
        assert_eq!((judged, violations.len()), (1, 1), "a fault on a pod it does not name leaves it priced");
    }

    /// Rollout seed 140: the control plane deleted a migration's target
    /// inside its tail, and the loss's writes were priced as the migration's.
    #[tokio::test(start_paused = true)]
    async fn a_pod_it_names_going_away_in_the_tail_leaves_a_migration_unpriced() {
        let mut loss = vec![committed("pods", EventType::Deleted, pod("b", Some("t")).object)];
        loss.extend((0..8).map(|_| claim_in_phase(EventType::Modified, "t", "Lost")));
        let (judged, violations) = migrate_a_to_b(1, 5, None, &loss).await;
        assert_eq!((judged, violations.len()), (0, 0), "its target deleted in the tail: {violations:?}");
        let commits: Vec<Event> = (0..8).map(|_| tenant("b", None)).collect();
        let (judged, violations) = migrate_a_to_b(1, 5, None, &commits).await;
        assert_eq!((judged, violations.len()), (1, 1), "8 more commits of the claim in the tail are priced");
    }
}
