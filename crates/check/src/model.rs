//! The model: the API server's objects, HAKeeper's stores and each operator
//! replica's cache and memory; the actions that change them; the properties
//! every reachable state must have.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use cnpool_api::ClaimPhase;
use cnpool_controllers::sabotage;
use stateright::{Model, Property};

use crate::Variant;
use crate::configs::Config;
use crate::objects::{ClaimObj, ClaimSwap, Interner, Objects, PodObj, StoreRec, twin_of};
use crate::reconcile;

/// Objects by name. Shared: a state's caches and its successors' mostly
/// hold the very versions it holds, which keeps each state small.
pub type Pods = Objects<PodObj>;
pub type Claims = Objects<ClaimObj>;

/// What the model's world holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The API server's pods and claims, by name.
    pub pods: Pods,
    pub claims: Claims,
    /// HAKeeper's stores, by the name of the pod whose CN registered them.
    pub stores: Objects<StoreRec>,
    pub replicas: Vec<Replica>,
    /// Faults and control-plane requests still allowed.
    pub budget: Budget,
    /// How many times each claim name was created (its UID's suffix).
    pub generations: Arc<BTreeMap<String, u8>>,
    /// A violation seen on a committed write (the invariants that speak of
    /// a write, not of a state), or an error of the model itself: the
    /// property it violates ([`WRITES`] or [`OWNER_KEYS`]) and what
    /// happened.
    pub broken: Option<(&'static str, String)>,
}

/// One operator replica: its informer caches, what it remembers in memory,
/// and the reconciles it has under way. It reads HAKeeper's current stores
/// (its listing does not lag: docs/model-checking.md).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Replica {
    /// The version of each pod and claim its watches last delivered.
    pub pods: Pods,
    pub claims: Claims,
    /// What it remembers (shared until it changes: it rarely does).
    pub memory: Arc<Memory>,
}

/// A replica's notes, by UIDs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Memory {
    /// Pods it acquired (or tried to) lately.
    pub acquired: BTreeSet<String>,
    /// The pod it acquired lately for each claim.
    pub claim_acquired: BTreeMap<String, String>,
    /// Migration targets it saw serve, by claim.
    pub serving: BTreeMap<String, String>,
}

impl Memory {
    fn swapped(&self, swap: &ClaimSwap) -> Self {
        let keys =
            |map: &BTreeMap<String, String>| map.iter().map(|(claim, pod)| (swap.text(claim), pod.clone())).collect();
        Self {
            acquired: self.acquired.clone(),
            claim_acquired: keys(&self.claim_acquired),
            serving: keys(&self.serving),
        }
    }
}

/// What one claim reconcile has read so far (the controller's `Snapshot`);
/// it lives within one action.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Snap {
    pub claim: Arc<ClaimObj>,
    pub owned: Vec<Arc<PodObj>>,
    pub pointed: Option<Arc<PodObj>>,
    pub source: Option<Arc<PodObj>>,
    pub live: bool,
    pub confirmed: bool,
    pub stores_listed: bool,
    pub candidates: Option<Vec<Arc<PodObj>>>,
}

/// Bounds on the faults and requests, which keep the state space finite.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Budget {
    pub crashes: u8,
    pub claim_deletions: u8,
    pub pod_deletions: u8,
    pub pod_failures: u8,
    pub store_vanishings: u8,
    pub migrations: u8,
}

/// One thing that happens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A replica reconciles a claim from its cache: the whole reconcile,
    /// or only up to its first write.
    Reconcile {
        replica: usize,
        claim: String,
        whole: bool,
    },
    /// A replica's CN-store controller reconciles a pod from its cache.
    StoreSync {
        replica: usize,
        pod: String,
    },
    /// A replica's pod watch catches up: its cache becomes the server's
    /// pods as they are now (any prefix of the event stream is reachable by
    /// choosing when this happens).
    DeliverPods {
        replica: usize,
    },
    /// The same for its claim watch.
    DeliverClaims {
        replica: usize,
    },
    /// A replica's notes of pods acquired lately expire.
    Forget {
        replica: usize,
    },
    /// A replica crashes and restarts: memory and reconciles lost, caches
    /// relisted.
    Crash {
        replica: usize,
    },
    DeletePod(String),
    FailPod(String),
    VanishStore(String),
    DeleteClaim(String),
    /// A deleted claim is created again under the same name (a new UID).
    RecreateClaim(String),
    /// The control plane asks a Bound claim to migrate.
    Migrate(String),
}

/// The model of one configuration, with a variant or the correct protocol.
pub struct CheckModel {
    pub config: Config,
    pub variant: Option<Variant>,
    /// Fingerprints of states from which the fair run was seen to reach a
    /// settled, good state: each state on such a run can.
    recovers: Mutex<HashSet<u64>>,
    /// Every pod and claim version made, each once.
    pub(crate) pods: Interner<PodObj>,
    pub(crate) claims: Interner<ClaimObj>,
    /// Whether states are reduced by the replicas' symmetry.
    replica_symmetry: bool,
    /// The two claims to swap, when they are interchangeable and states are
    /// reduced by it.
    claim_swap: Option<ClaimSwap>,
}

/// How a state maps to its representative: replica `k` of the
/// representative is replica `replicas[k]` of the state, with the two
/// claims' identities swapped when `claims_swapped`.
#[derive(Clone, Debug, Default)]
pub struct Symmetry {
    pub replicas: Vec<usize>,
    pub claims_swapped: bool,
}

/// The property of the write-time invariants: I8's owner moves, I2's
/// truthful loss (and the model's own errors).
pub const WRITES: &str = "writes keep I2 and I8";
/// The property that no pod's owner keys came from a claim's spec (I8).
pub const OWNER_KEYS: &str = "I8 owner keys never from a spec";

/// Rounds of the fair run before it counts as not settling.
const FAIR_ROUNDS: usize = 40;

impl CheckModel {
    /// The model, with states reduced by its symmetries when `symmetry`:
    /// the replicas always, the two claims when the configuration's are
    /// interchangeable (docs/model-checking.md, "Reductions").
    pub fn new(config: Config, variant: Option<Variant>, symmetry: bool) -> Self {
        let mut model = Self {
            config,
            variant,
            recovers: Mutex::new(HashSet::new()),
            pods: Interner::default(),
            claims: Interner::default(),
            replica_symmetry: symmetry,
            claim_swap: None,
        };
        // The variant that picks "the first claim" by name breaks the
        // claims' symmetry.
        if symmetry && variant != Some(Variant::StoreFromClaim) {
            model.claim_swap = model.interchangeable_claims();
        }
        model
    }

    /// The swap of the configuration's two claims, if it leaves the initial
    /// state as it is (both new, asking for the same thing).
    fn interchangeable_claims(&self) -> Option<ClaimSwap> {
        let [first, second] = self.config.claims.as_slice() else { return None };
        let swap = ClaimSwap { first: first.name.clone(), second: second.name.clone() };
        let initial = self.initial();
        (self.swapped(&swap, &initial) == initial).then_some(swap)
    }

    fn initial(&self) -> State {
        let config = &self.config;
        let pods: Pods = config.pods.iter().map(|pod| self.pods.intern(pod.clone())).collect();
        let claims: Claims = config.claims.iter().map(|claim| self.claims.intern(claim.clone())).collect();
        let replicas = (0..config.replicas)
            .map(|_| Replica { pods: pods.clone(), claims: claims.clone(), ..Replica::default() })
            .collect();
        State {
            pods,
            claims,
            stores: config.stores.iter().cloned().map(Arc::new).collect(),
            replicas,
            budget: config.budget.clone(),
            generations: Arc::new(config.claims.iter().map(|claim| (claim.name.clone(), 1)).collect()),
            broken: None,
        }
    }

    /// `state` with the two claims' identities swapped everywhere they
    /// appear: the claims' names and UIDs, the pods' `claimed-by`,
    /// `claim-uid` and binding annotation, the stores' labels, the caches,
    /// the replicas' notes and the claims' generations. (A write's
    /// violation text in `broken` is left as written.)
    pub fn swapped(&self, swap: &ClaimSwap, state: &State) -> State {
        let pod = |pod: &Arc<PodObj>| twin_of(pod, |pod| &pod.twin, &self.pods, |pod| swap.pod(pod));
        let claim =
            |claim: &Arc<ClaimObj>| twin_of(claim, |claim| &claim.twin, &self.claims, |claim| swap.claim(claim));
        let store = |store: &Arc<StoreRec>| match store.labels.is_empty() {
            true => store.clone(),
            false => Arc::new(StoreRec { labels: swap.store_labels(&store.labels), ..(**store).clone() }),
        };
        let memory = |memory: &Arc<Memory>| match **memory == Memory::default() {
            true => memory.clone(),
            false => Arc::new(memory.swapped(swap)),
        };
        State {
            pods: state.pods.mapped(pod),
            claims: state.claims.mapped(claim),
            stores: state.stores.mapped(store),
            replicas: state
                .replicas
                .iter()
                .map(|replica| Replica {
                    pods: replica.pods.mapped(pod),
                    claims: replica.claims.mapped(claim),
                    memory: memory(&replica.memory),
                })
                .collect(),
            budget: state.budget.clone(),
            generations: Arc::new(state.generations.iter().map(|(name, count)| (swap.text(name), *count)).collect()),
            broken: state.broken.clone(),
        }
    }

    /// The claims' swap, when states are reduced by it.
    pub fn claim_swap(&self) -> Option<&ClaimSwap> {
        self.claim_swap.as_ref()
    }

    /// The representative of `state` under the model's symmetries, and how
    /// `state` maps to it. Replicas run the same code, so which one holds
    /// which cache and memory does not matter: the representative has them
    /// sorted. Two interchangeable claims: of the state and its swapped
    /// twin (each with replicas sorted), the one of lower fingerprint. Every
    /// state of an orbit gets the same representative (up to a hash
    /// collision, which costs only reduction).
    ///
    /// stateright 0.31 applies a symmetry function only in its depth-first
    /// checker, so the model applies it itself: every successor is its
    /// representative (see [`Model::next_state`] below).
    pub fn representative(&self, state: &State) -> (State, Symmetry) {
        if !self.replica_symmetry {
            return (state.clone(), Symmetry { replicas: (0..state.replicas.len()).collect(), claims_swapped: false });
        }
        let (plain, replicas) = sorted_replicas(state);
        let Some(swap) = &self.claim_swap else { return (plain, Symmetry { replicas, claims_swapped: false }) };
        let (twin, twin_replicas) = sorted_replicas(&self.swapped(swap, state));
        if fingerprint_of(&twin) < fingerprint_of(&plain) {
            (twin, Symmetry { replicas: twin_replicas, claims_swapped: true })
        } else {
            (plain, Symmetry { replicas, claims_swapped: false })
        }
    }

    /// The protocol's actions enabled in `state`, in a fixed order.
    fn protocol_actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (replica, cache) in state.replicas.iter().enumerate() {
            if cache.pods != state.pods {
                actions.push(Action::DeliverPods { replica });
            }
            if cache.claims != state.claims {
                actions.push(Action::DeliverClaims { replica });
            }
            if !cache.memory.acquired.is_empty() || !cache.memory.claim_acquired.is_empty() {
                actions.push(Action::Forget { replica });
            }
            for pod in cache.pods.keys() {
                actions.push(Action::StoreSync { replica, pod: pod.to_owned() });
            }
            for claim in cache.claims.keys() {
                for whole in [true, false].into_iter().take(if self.config.partial_reconciles { 2 } else { 1 }) {
                    actions.push(Action::Reconcile { replica, claim: claim.to_owned(), whole });
                }
            }
        }
    }

    /// The world's faults and requests enabled in `state`.
    fn world_actions(&self, state: &State, actions: &mut Vec<Action>) {
        let budget = &state.budget;
        if budget.crashes > 0 {
            actions.extend((0..state.replicas.len()).map(|replica| Action::Crash { replica }));
        }
        for pod in state.pods.values() {
            if budget.pod_deletions > 0 && !pod.deleting {
                actions.push(Action::DeletePod(pod.name.clone()));
            }
            if budget.pod_failures > 0 && !pod.failed && !pod.deleting {
                actions.push(Action::FailPod(pod.name.clone()));
            }
        }
        if budget.store_vanishings > 0 {
            actions.extend(state.stores.keys().map(|name| Action::VanishStore(name.to_owned())));
        }
        for claim in state.claims.values() {
            if budget.claim_deletions > 0 && !claim.deleting {
                actions.push(Action::DeleteClaim(claim.name.clone()));
            }
            let migratable = claim.phase == Some(ClaimPhase::Bound) && claim.source_pod.is_none() && !claim.deleting;
            if budget.migrations > 0 && migratable && claim.pod_name.is_some() {
                actions.push(Action::Migrate(claim.name.clone()));
            }
        }
        for name in self.config.claims.iter().map(|claim| &claim.name) {
            if !state.claims.contains_key(name) {
                actions.push(Action::RecreateClaim(name.clone()));
            }
        }
    }

    /// The state after `action`, and what happened, for a trace.
    /// The variant, if any, is switched on in the controllers for the
    /// step, on whatever thread takes it.
    pub fn step(&self, state: &State, action: &Action) -> (State, String) {
        let mut next = state.clone();
        let applied = match self.variant {
            Some(variant) => sabotage::with(variant.sabotage(), || reconcile::apply(self, &mut next, action)),
            None => reconcile::apply(self, &mut next, action),
        };
        match applied {
            Ok(note) => (next, note),
            Err(error) => {
                let mut broken = state.clone();
                broken.broken = Some((WRITES, format!("model error: {error}")));
                (broken, format!("model error: {error}"))
            }
        }
    }

    /// Whether the fair run from `state` settles in a good state; when it
    /// does not, why, and the run's lines (written only while tracing).
    pub fn recovers(&self, state: &State) -> Result<(), (String, Vec<String>)> {
        let mut seen = Vec::new();
        let mut current = state.clone();
        let mut fingerprint = symmetric_fingerprint(&current);
        let mut lines = Vec::new();
        let known = |fingerprint: u64| self.recovers.lock().is_ok_and(|known| known.contains(&fingerprint));
        if known(fingerprint) {
            return Ok(());
        }
        for _ in 0..FAIR_ROUNDS {
            let mut changed = false;
            let mut actions = Vec::new();
            self.protocol_actions(&current, &mut actions);
            for action in actions {
                let (next, note) = self.step(&current, &action);
                if next == current {
                    continue;
                }
                if next.broken.is_some() {
                    // A write's violation: reachable, so the write's property
                    // reports it with its own path; this one says nothing.
                    return Ok(());
                }
                if reconcile::tracing() {
                    lines.push(format!("{} {note}", actor(&action)));
                }
                seen.push(fingerprint);
                current = next;
                fingerprint = symmetric_fingerprint(&current);
                changed = true;
                if known(fingerprint) {
                    return self.remember(seen);
                }
            }
            if !changed {
                return match settled_problem(&current) {
                    None => {
                        seen.push(fingerprint);
                        self.remember(seen)
                    }
                    Some(problem) => Err((problem, lines)),
                };
            }
        }
        Err((format!("the fair run did not settle within {FAIR_ROUNDS} rounds"), lines))
    }

    fn remember(&self, seen: Vec<u64>) -> Result<(), (String, Vec<String>)> {
        if let Ok(mut known) = self.recovers.lock() {
            known.extend(seen);
        }
        Ok(())
    }
}

/// `state` with its replicas sorted, and the permutation: replica `k` of
/// the result is replica `permutation[k]` of `state`.
fn sorted_replicas(state: &State) -> (State, Vec<usize>) {
    let keys: Vec<u64> = state.replicas.iter().map(fingerprint_of).collect();
    let mut permutation: Vec<usize> = (0..state.replicas.len()).collect();
    permutation.sort_by_key(|&index| keys[index]);
    let mut canonical = state.clone();
    canonical.replicas = permutation.iter().map(|&index| state.replicas[index].clone()).collect();
    (canonical, permutation)
}

impl CheckModel {
    /// The action on a state that does what `action` does on its
    /// representative, `symmetry` being how the state maps to it.
    pub fn renumbered(&self, action: &Action, symmetry: &Symmetry) -> Action {
        let mut action = action.clone();
        let swap = self.claim_swap.as_ref().filter(|_| symmetry.claims_swapped);
        let rename = |claim: &mut String| {
            if let Some(swap) = swap {
                *claim = swap.text(claim);
            }
        };
        match &mut action {
            Action::Reconcile { replica, claim, .. } => {
                *replica = symmetry.replicas[*replica];
                rename(claim);
            }
            Action::StoreSync { replica, .. }
            | Action::DeliverPods { replica }
            | Action::DeliverClaims { replica }
            | Action::Forget { replica }
            | Action::Crash { replica } => *replica = symmetry.replicas[*replica],
            Action::DeleteClaim(claim) | Action::RecreateClaim(claim) | Action::Migrate(claim) => rename(claim),
            Action::DeletePod(_) | Action::FailPod(_) | Action::VanishStore(_) => {}
        }
        action
    }
}

fn fingerprint_of<T: Hash>(value: &T) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// A fingerprint that is the same for states equal up to the replicas'
/// order (as their representative's), without building the representative.
fn symmetric_fingerprint(state: &State) -> u64 {
    let State { pods, claims, stores, replicas, budget, generations, broken } = state;
    let mut replicas: Vec<u64> = replicas.iter().map(fingerprint_of).collect();
    replicas.sort_unstable();
    fingerprint_of(&(pods, claims, stores, replicas, budget, generations, broken))
}

/// Who acts, for a trace line.
pub fn actor(action: &Action) -> String {
    match action {
        Action::Reconcile { replica, .. }
        | Action::StoreSync { replica, .. }
        | Action::DeliverPods { replica }
        | Action::DeliverClaims { replica }
        | Action::Forget { replica }
        | Action::Crash { replica } => format!("replica-{replica}"),
        Action::DeletePod(_) | Action::FailPod(_) => "WORLD".to_owned(),
        Action::VanishStore(_) => "HAKEEPER".to_owned(),
        Action::DeleteClaim(_) | Action::RecreateClaim(_) | Action::Migrate(_) => "CONTROL".to_owned(),
    }
}

/// I1: no pod carries two owners (its `claim-uid` names a live claim whose
/// name its `claimed-by` does not carry), and no two live claims show Bound
/// to one pod by the UID cnpool recorded. A pod whose `claim-uid` names no
/// live claim is an orphan (I3), whatever its `claimed-by` says: a claim
/// deleted before it recorded its pod and created again under its name
/// leaves one (docs/model-checking.md).
pub fn exclusive(state: &State) -> Option<String> {
    for pod in state.pods.values() {
        let Some(uid) = pod.claim_uid() else { continue };
        let claimed_by = pod.label(cnpool_api::labels::CLAIMED_BY);
        if let Some(owner) = state.claims.values().find(|claim| claim.uid == uid)
            && claimed_by != Some(owner.name.as_str())
        {
            return Some(format!(
                "pod {} carries claim-uid {uid} (claim {}) but claimed-by {}",
                pod.name,
                owner.name,
                claimed_by.unwrap_or("-")
            ));
        }
    }
    let bound: Vec<(&Arc<ClaimObj>, &str)> = state
        .claims
        .values()
        .filter(|claim| claim.holds() && !claim.deleting)
        .filter_map(|claim| Some((claim, claim.status_pod.as_ref()?.1.as_deref()?)))
        .collect();
    for (i, (first, uid)) in bound.iter().enumerate() {
        if let Some((second, _)) = bound[i + 1..].iter().find(|(_, other)| other == uid) {
            return Some(format!("claims {} and {} are both Bound to pod UID {uid}", first.name, second.name));
        }
    }
    None
}

/// What is wrong with a state no protocol action changes: I2 (a Bound
/// claim's pod exists, is the one recorded and is its own), I3 (an owned
/// pod is pointed at by its owner), I7 (stores agree with their pods) and
/// liveness (every live claim is Bound while enough usable pods exist).
fn settled_problem(state: &State) -> Option<String> {
    let pod_by_uid = |uid: &str| state.pods.values().find(|pod| pod.uid == uid);
    for claim in state.claims.values().filter(|claim| claim.holds()) {
        let Some((name, Some(uid))) = &claim.status_pod else { continue };
        match pod_by_uid(uid) {
            None => return Some(format!("I2: claim {} stays Bound to pod {name}, which is gone", claim.name)),
            Some(pod) if pod.claim_uid() != Some(claim.uid.as_str()) => {
                return Some(format!("I2: claim {} stays Bound to pod {name}, which it does not own", claim.name));
            }
            Some(pod) => {
                let store = state.stores.get(&pod.name);
                let serves = store.is_some_and(|store| {
                    store.work_state() == cnpool_registry::WorkState::Working && store.labels == claim.cn_labels()
                });
                if !serves {
                    return Some(format!(
                        "I7: claim {} stays Bound to pod {name}, whose store is {store:?}",
                        claim.name
                    ));
                }
            }
        }
    }
    for pod in state.pods.values() {
        if let Some(uid) = pod.claim_uid()
            && !state.claims.values().any(|claim| claim.uid == uid && claim.points_at(&pod.name))
        {
            return Some(format!("I3: pod {} stays owned by {uid}, which no claim points at", pod.name));
        }
        let unowned = pod.claim_uid().is_none() && !pod.deleting;
        let released = matches!(pod.phase(), Some(cnpool_api::PodPhase::Idle | cnpool_api::PodPhase::Draining));
        if let Some(store) = state.stores.get(&pod.name).filter(|_| unowned && released)
            && (store.work_state() == cnpool_registry::WorkState::Working || !store.labels.is_empty())
        {
            return Some(format!("I7: released pod {}'s store stays {store:?}", pod.name));
        }
    }
    let usable = state
        .pods
        .values()
        .filter(|pod| {
            !pod.deleting
                && !pod.failed
                && pod.phase() != Some(cnpool_api::PodPhase::Terminating)
                && state.stores.contains_key(&pod.name)
        })
        .count();
    // A claim whose spec fails validation is refused, not bound (DESIGN §2,
    // "Inputs"): it neither waits for a pod nor needs one.
    let valid = |claim: &Arc<ClaimObj>| claim.view().is_ok_and(|view| view.invalid.is_none());
    let live: Vec<&Arc<ClaimObj>> = state.claims.values().filter(|claim| !claim.deleting && valid(claim)).collect();
    // A pre-bound request waits for the pod it names, whatever else is free:
    // it is a request, not a loss (DESIGN §2, "Bind").
    let requests = |claim: &&&Arc<ClaimObj>| {
        claim.phase.is_none() && claim.recorded.is_none() && claim.pod_name.is_some() && claim.source_pod.is_none()
    };
    if usable >= live.len()
        && let Some(waiting) =
            live.iter().filter(|claim| !requests(claim)).find(|claim| claim.phase != Some(ClaimPhase::Bound))
    {
        return Some(format!(
            "liveness: claim {} stays {:?} with {usable} usable pods for {} claims",
            waiting.name,
            waiting.phase,
            live.len()
        ));
    }
    None
}

impl Model for CheckModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.initial()]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        // A state with a violation seen on a write is a dead end: the
        // property reports it with the path that led there.
        if state.broken.is_some() {
            return;
        }
        self.protocol_actions(state, actions);
        self.world_actions(state, actions);
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let (next, _) = self.step(state, &action);
        (next != *state).then(|| self.representative(&next).0)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("I1 exclusive", |_, state| exclusive(state).is_none()),
            Property::always(WRITES, |_, state: &State| state.broken.as_ref().is_none_or(|(of, _)| *of != WRITES)),
            Property::always(OWNER_KEYS, |_, state: &State| {
                state.broken.as_ref().is_none_or(|(of, _)| *of != OWNER_KEYS)
            }),
            Property::always("I2 I3 I7 recover and claims bind", |model: &CheckModel, state: &State| {
                state.broken.is_some() || model.recovers(state).is_ok()
            }),
        ]
    }
}
