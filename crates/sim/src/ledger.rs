//! What one run records: the trace (committed writes and injected faults,
//! in order, with virtual timestamps), the faults by kind, the API traffic
//! and the reconciles. Shared by every part of the run.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::hash::Hasher;
use std::ops::Range;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cnpool_api::labels;
use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;

/// The kinds of injected fault; every run counts each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    Conflict,
    ServerError,
    TimeoutLost,
    TimeoutApplied,
    WatchLag,
    DroppedWatch,
    OperatorCrash,
    SecondReplica,
    PodCrash,
    PodEviction,
    ForcedDeletion,
    StoreVanish,
    RegistryError,
    SlowDrain,
    /// The hostile specs of [`crate::scenario::Hostile`], one kind each.
    ClaimUidLabel,
    PhaseLabel,
    OwnerLabel,
    ClaimedByLabel,
    EmptyLabel,
    SelectorNothing,
    SelectorAll,
    OperatorLike,
    NegativeNumber,
    HugeNumber,
    SetOwnerLabels,
    PoolOwnerLabel,
    EditMidBind,
}

impl Fault {
    pub const ALL: [Fault; 27] = [
        Fault::Conflict,
        Fault::ServerError,
        Fault::TimeoutLost,
        Fault::TimeoutApplied,
        Fault::WatchLag,
        Fault::DroppedWatch,
        Fault::OperatorCrash,
        Fault::SecondReplica,
        Fault::PodCrash,
        Fault::PodEviction,
        Fault::ForcedDeletion,
        Fault::StoreVanish,
        Fault::RegistryError,
        Fault::SlowDrain,
        Fault::ClaimUidLabel,
        Fault::PhaseLabel,
        Fault::OwnerLabel,
        Fault::ClaimedByLabel,
        Fault::EmptyLabel,
        Fault::SelectorNothing,
        Fault::SelectorAll,
        Fault::OperatorLike,
        Fault::NegativeNumber,
        Fault::HugeNumber,
        Fault::SetOwnerLabels,
        Fault::PoolOwnerLabel,
        Fault::EditMidBind,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Conflict => "conflict",
            Fault::ServerError => "server-error",
            Fault::TimeoutLost => "timeout-lost",
            Fault::TimeoutApplied => "timeout-applied",
            Fault::WatchLag => "watch-lag",
            Fault::DroppedWatch => "dropped-watch",
            Fault::OperatorCrash => "operator-crash",
            Fault::SecondReplica => "second-replica",
            Fault::PodCrash => "pod-crash",
            Fault::PodEviction => "pod-eviction",
            Fault::ForcedDeletion => "forced-deletion",
            Fault::StoreVanish => "store-vanish",
            Fault::RegistryError => "registry-error",
            Fault::SlowDrain => "slow-drain",
            Fault::ClaimUidLabel => "claim-uid-label",
            Fault::PhaseLabel => "phase-label",
            Fault::OwnerLabel => "owner-label",
            Fault::ClaimedByLabel => "claimed-by-label",
            Fault::EmptyLabel => "empty-label",
            Fault::SelectorNothing => "selector-nothing",
            Fault::SelectorAll => "selector-all",
            Fault::OperatorLike => "operator-like",
            Fault::NegativeNumber => "negative-number",
            Fault::HugeNumber => "huge-number",
            Fault::SetOwnerLabels => "set-owner-labels",
            Fault::PoolOwnerLabel => "pool-owner-label",
            Fault::EditMidBind => "edit-mid-bind",
        }
    }
}

/// What an injected fault may have made dearer, and for how long: a
/// migration's cost (I5) is judged only where no fault reached it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Every object alike, all the time (a watch's lag): the bounds hold
    /// under it.
    Ambient,
    /// Every object (a crash relists all, a listing refused stalls all).
    All { lasting: Duration },
    /// The object of this name (a pod, a claim).
    Object { name: String, lasting: Duration },
}

impl Reach {
    /// Every object, at one moment (a crash, a dropped watch).
    pub const EVERYTHING: Reach = Reach::All { lasting: Duration::ZERO };

    /// A refused or lost API request: the object its path names
    /// (`…/namespaces/NS/RESOURCE/NAME[/SUBRESOURCE]`), or every object for
    /// a request on a collection.
    pub fn of_request(path: &str) -> Reach {
        let mut segments = path.split('/').skip_while(|segment| *segment != "namespaces").skip(3);
        match segments.next() {
            Some(name) => Reach::Object { name: name.to_owned(), lasting: Duration::ZERO },
            None => Reach::EVERYTHING,
        }
    }
}

/// One injected fault's reach, from when.
#[derive(Clone, Debug)]
struct Reached {
    at: Duration,
    reach: Reach,
}

/// Who sent an API request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Actor {
    /// Operator replica `n`.
    Operator(usize),
    /// The simulated kubelet and CNs.
    World,
    /// The scenario's user: creates and deletes claims, sets up the pool.
    ControlPlane,
}

impl std::fmt::Display for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Actor::Operator(replica) => write!(f, "operator-{replica}"),
            Actor::World => f.write_str("the world"),
            Actor::ControlPlane => f.write_str("the control plane"),
        }
    }
}

/// One write to a pod as its client sent it: what the checker knows of
/// the write behind a commit beyond the versions before and after (I8).
#[derive(Clone, Debug)]
pub struct PodWrite {
    pub actor: Actor,
    pub method: String,
    pub content_type: String,
    /// The request body as JSON (`Null` when it was none).
    pub body: Value,
}

/// The labels a guarded transition's leading `test` operations pin
/// (`cnpool_controllers::ownership`).
const PINNED: [&str; 3] = [labels::PHASE, labels::CLAIM_UID, labels::CLAIMED_BY];

/// A JSON pointer to label `key`.
fn label_pointer(key: &str) -> String {
    format!("/metadata/labels/{}", key.replace('~', "~0").replace('/', "~1"))
}

impl PodWrite {
    /// A guarded transition: an operator's JSON patch whose leading `test`
    /// operations pin `phase`, `claim-uid` and `claimed-by`, so that the
    /// server applied it only to the version its decision read.
    pub fn guarded(&self) -> bool {
        let Actor::Operator(_) = self.actor else { return false };
        let Some(ops) = self.body.as_array().filter(|_| self.content_type.starts_with("application/json-patch")) else {
            return false;
        };
        let tested: Vec<&str> = ops
            .iter()
            .take_while(|op| op.get("op").and_then(Value::as_str) == Some("test"))
            .filter_map(|op| op.get("path").and_then(Value::as_str))
            .collect();
        self.method == "PATCH" && PINNED.iter().all(|key| tested.contains(&label_pointer(key).as_str()))
    }

    /// The values the write's operations give label `key`, in order: more
    /// than one means something overwrote what the transition set.
    pub fn values_set(&self, key: &str) -> Vec<&str> {
        let pointer = label_pointer(key);
        self.body
            .as_array()
            .into_iter()
            .flatten()
            .filter(|op| matches!(op.get("op").and_then(Value::as_str), Some("add" | "replace")))
            .filter(|op| op.get("path").and_then(Value::as_str) == Some(pointer.as_str()))
            .filter_map(|op| op.get("value").and_then(Value::as_str))
            .collect()
    }

    /// Who wrote how, for a violation's detail.
    pub fn describe(&self) -> String {
        let how = match (self.method.as_str(), self.guarded()) {
            ("PATCH", true) => "a guarded JSON patch".to_owned(),
            ("PATCH", false) if self.content_type.starts_with("application/json-patch") => {
                "a JSON patch without the owner tests".to_owned()
            }
            ("PATCH", false) => format!("a patch ({})", self.content_type),
            ("POST", _) => "the creation".to_owned(),
            (method, _) => format!("a {method}"),
        };
        format!("{how} by {}", self.actor)
    }
}

/// API traffic, of the operators unless said otherwise.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct ApiCounts {
    pub requests: u64,
    /// Writes other than Events.
    pub writes: u64,
    pub event_writes: u64,
    /// Answers 409 Conflict or 422 (a failed JSON patch `test`).
    pub conflicts: u64,
    /// Request bodies sent.
    pub request_bytes: u64,
    /// Response bodies received, watch streams included.
    pub response_bytes: u64,
}

impl ApiCounts {
    /// The traffic since `earlier`, a count this one grew from.
    pub fn since(self, earlier: ApiCounts) -> ApiCounts {
        ApiCounts {
            requests: self.requests - earlier.requests,
            writes: self.writes - earlier.writes,
            event_writes: self.event_writes - earlier.event_writes,
            conflicts: self.conflicts - earlier.conflicts,
            request_bytes: self.request_bytes - earlier.request_bytes,
            response_bytes: self.response_bytes - earlier.response_bytes,
        }
    }
}

/// A run's running totals at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    pub api: ApiCounts,
    pub reconciles: u64,
    pub log_lines: u64,
}

#[derive(Default)]
struct State {
    /// Full trace lines, kept only when asked for.
    lines: Option<Vec<String>>,
    /// FNV-1a over every trace line, kept always: equal digests, equal traces.
    digest: Fnv,
    faults: BTreeMap<Fault, u64>,
    api: ApiCounts,
    /// When each operator write (Events excluded) happened.
    write_times: Vec<Duration>,
    /// What each injected fault reached, in order.
    reached: Vec<Reached>,
    reconciles: u64,
    /// Reconcile times by object ("kind namespace/name by replica") and
    /// UID: a pod replaced under its name is another object.
    reconciles_by_object: BTreeMap<(String, String), Vec<Duration>>,
    /// When each operator and world log line at INFO or above was written.
    log_times: Vec<Duration>,
    /// The times of those that name a claim (their `claim` field), by claim.
    claim_log_times: BTreeMap<String, Vec<Duration>>,
    /// Writes to pods by the resourceVersion they committed, until the
    /// checker takes them.
    pod_writes: BTreeMap<u64, PodWrite>,
}

struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

pub struct Ledger {
    start: Instant,
    state: Mutex<State>,
}

impl Ledger {
    /// A ledger whose virtual time starts now; `keep_lines` keeps the trace
    /// text (else only its digest).
    pub fn new(keep_lines: bool) -> Self {
        let state = State { lines: keep_lines.then(Vec::new), ..State::default() };
        Self { start: Instant::now(), state: Mutex::new(state) }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Each update is one step on plain data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Virtual time since the run began.
    pub fn elapsed(&self) -> Duration {
        Instant::now().duration_since(self.start)
    }

    /// Appends a trace line stamped with the virtual time.
    pub fn trace(&self, line: std::fmt::Arguments<'_>) {
        let elapsed = self.elapsed();
        let mut text = String::new();
        let _ = write!(text, "{:>10.3} {line}", elapsed.as_secs_f64());
        let mut state = self.state();
        state.digest.write(text.as_bytes());
        state.digest.write(b"\n");
        if let Some(lines) = state.lines.as_mut() {
            lines.push(text);
        }
    }

    /// Counts an injected fault, notes what it reached and traces it.
    pub fn fault(&self, fault: Fault, reach: Reach, detail: std::fmt::Arguments<'_>) {
        let at = self.elapsed();
        {
            let mut state = self.state();
            *state.faults.entry(fault).or_default() += 1;
            if reach != Reach::Ambient {
                state.reached.push(Reached { at, reach });
            }
        }
        self.trace(format_args!("FAULT {} {detail}", fault.name()));
    }

    pub fn operator_request(&self, write: bool, event: bool) {
        let elapsed = self.elapsed();
        let mut state = self.state();
        state.api.requests += 1;
        if write && event {
            state.api.event_writes += 1;
        } else if write {
            state.api.writes += 1;
            state.write_times.push(elapsed);
        }
    }

    pub fn operator_conflict(&self) {
        self.state().api.conflicts += 1;
    }

    /// An operator request's body, and its answer's.
    pub fn operator_bytes(&self, sent: u64, received: u64) {
        let mut state = self.state();
        state.api.request_bytes += sent;
        state.api.response_bytes += received;
    }

    /// A log line at INFO or above; `claim`, the claim it names.
    pub fn log_line(&self, claim: Option<String>) {
        let elapsed = self.elapsed();
        let mut state = self.state();
        state.log_times.push(elapsed);
        if let Some(claim) = claim {
            state.claim_log_times.entry(claim).or_default().push(elapsed);
        }
    }

    /// `replica` reconciled one object. Reconciles are counted per replica:
    /// I5's "no object reconciled more than 30 times in a minute" is a bound
    /// on one operator; two replicas of a split brain each do their own.
    pub fn reconciled(&self, replica: &str, kind: &str, namespace: &str, name: &str, uid: &str) {
        let elapsed = self.elapsed();
        let mut state = self.state();
        state.reconciles += 1;
        let object = format!("{kind} {namespace}/{name} by {replica}");
        state.reconciles_by_object.entry((object, uid.to_owned())).or_default().push(elapsed);
    }

    /// A write to a pod that committed `resource_version`.
    pub fn pod_write(&self, resource_version: u64, write: PodWrite) {
        self.state().pod_writes.insert(resource_version, write);
    }

    /// The write that committed `resource_version` to a pod, if recorded.
    pub fn take_pod_write(&self, resource_version: u64) -> Option<PodWrite> {
        self.state().pod_writes.remove(&resource_version)
    }

    /// Drops the writes of versions up to `resource_version`: the checker
    /// has judged every commit up to there.
    pub fn forget_pod_writes_through(&self, resource_version: u64) {
        let mut state = self.state();
        let kept = state.pod_writes.split_off(&(resource_version + 1));
        state.pod_writes = kept;
    }

    pub fn digest(&self) -> u64 {
        self.state().digest.finish()
    }

    pub fn take_lines(&self) -> Vec<String> {
        self.state().lines.take().unwrap_or_default()
    }

    pub fn faults(&self) -> BTreeMap<Fault, u64> {
        self.state().faults.clone()
    }

    pub fn api(&self) -> ApiCounts {
        self.state().api
    }

    pub fn reconciles(&self) -> u64 {
        self.state().reconciles
    }

    pub fn log_lines(&self) -> u64 {
        self.state().log_times.len() as u64
    }

    pub fn tally(&self) -> Tally {
        let state = self.state();
        Tally { api: state.api, reconciles: state.reconciles, log_lines: state.log_times.len() as u64 }
    }

    /// Log lines written within `window`; only those naming `claim` when given.
    pub fn log_lines_within(&self, window: std::ops::Range<Duration>, claim: Option<&str>) -> usize {
        let state = self.state();
        let times = match claim {
            Some(claim) => state.claim_log_times.get(claim).map(Vec::as_slice).unwrap_or_default(),
            None => &state.log_times,
        };
        times.iter().filter(|at| window.contains(at)).count()
    }

    /// Reconciles within `window` of every object reconciled in the run
    /// (by any replica, zero included), by "kind namespace/name".
    pub fn reconciles_within(&self, window: std::ops::Range<Duration>) -> BTreeMap<String, usize> {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for ((key, _), times) in &self.state().reconciles_by_object {
            let object = key.split(" by ").next().unwrap_or(key).to_owned();
            *counts.entry(object).or_default() += times.iter().filter(|at| window.contains(at)).count();
        }
        counts
    }

    /// Reconciles of one object (`kind`, `namespace`/`name`, `uid`) within
    /// `window`, by the replica that reconciled it most: each replica of a
    /// split brain does its own.
    pub fn reconciles_of(&self, kind: &str, namespace: &str, name: &str, uid: &str, window: &Range<Duration>) -> usize {
        let prefix = format!("{kind} {namespace}/{name} by ");
        let state = self.state();
        let by_replica = state
            .reconciles_by_object
            .iter()
            .filter(|((object, object_uid), _)| object.starts_with(&prefix) && object_uid == uid)
            .map(|(_, times)| times.iter().filter(|at| window.contains(at)).count());
        by_replica.max().unwrap_or_default()
    }

    /// Whether an injected fault reached any of `objects` (by name), or
    /// every object, while `window` lasted.
    pub fn fault_reached(&self, objects: &BTreeSet<String>, window: &Range<Duration>) -> bool {
        self.state().reached.iter().any(|Reached { at, reach }| {
            let (lasting, reaches) = match reach {
                Reach::Ambient => return false,
                Reach::All { lasting } => (*lasting, true),
                Reach::Object { name, lasting } => (*lasting, objects.contains(name)),
            };
            reaches && *at < window.end && *at + lasting >= window.start
        })
    }

    /// Operator writes (Events excluded) at or after `since`.
    pub fn writes_since(&self, since: Duration) -> usize {
        self.state().write_times.iter().filter(|at| **at >= since).count()
    }

    /// When each operator write (Events excluded) happened.
    pub fn write_times(&self) -> Vec<Duration> {
        self.state().write_times.clone()
    }

    /// When each reconcile happened, of any object, in time order.
    pub fn reconcile_times(&self) -> Vec<Duration> {
        let mut times: Vec<Duration> = self.state().reconciles_by_object.values().flatten().copied().collect();
        times.sort();
        times
    }

    /// The object reconciled most often within one minute: (object, count,
    /// when that minute began).
    pub fn busiest_minute(&self) -> Option<(String, usize, Duration)> {
        let state = self.state();
        let minute = Duration::from_secs(60);
        let mut busiest: Option<(String, usize, Duration)> = None;
        for ((object, _), times) in &state.reconciles_by_object {
            let mut first = 0;
            for (last, at) in times.iter().enumerate() {
                while *at - times[first] >= minute {
                    first += 1;
                }
                let count = last - first + 1;
                if busiest.as_ref().is_none_or(|(_, most, _)| count > *most) {
                    busiest = Some((object.clone(), count, times[first]));
                }
            }
        }
        busiest
    }
}
