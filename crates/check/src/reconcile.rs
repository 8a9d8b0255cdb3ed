//! What each action does to the state. The claim reconcile performs the
//! step the production core names as crates/controllers/src/claim/execute.rs
//! does (which reads, which writes); the CN-store controller follows
//! crates/controllers/src/store.rs.

use cnpool_api::labels;
use cnpool_controllers::ownership::{Transition, operations};
use cnpool_controllers::sabotage;
use cnpool_core::candidates::eligibility;
use cnpool_core::claim::{AfterRelease, ClaimInput, ClaimStep, Holding, LossReason, next_claim_step};
use cnpool_core::model::{ObservedStore, PodView, Read, StoreView};
use cnpool_core::store::{DesiredStore, StoreWrite, plan_store, store_writes};
use cnpool_registry::{StoreLabels, WorkState, Workload};

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::{Action, CheckModel, Memory, OWNER_KEYS, Replica, Snap, State, WRITES};
use crate::objects::{ClaimObj, Memo, PodObj, cutover, now, pool, store_uuid};
use crate::{Error, Variant};

thread_local! {
    static TRACING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread writes a trace: the notes of what each action did
/// are formatted only then (formatting them for every state explored would
/// cost more than the steps themselves).
pub(crate) fn tracing() -> bool {
    TRACING.with(std::cell::Cell::get)
}

/// Runs `run` with the notes formatted.
pub(crate) fn traced<T>(run: impl FnOnce() -> T) -> T {
    TRACING.with(|tracing| tracing.set(true));
    let result = run();
    TRACING.with(|tracing| tracing.set(false));
    result
}

/// A note for the trace, formatted only while tracing ([`tracing`]).
macro_rules! note {
    ($($arg:tt)*) => {
        if tracing() { format!($($arg)*) } else { String::new() }
    };
}

/// Candidate acquires one reconcile tries (the controllers' default).
const ACQUIRE_ATTEMPTS: usize = 3;
/// Steps one reconcile takes at most (the controller's bound).
const MAX_STEPS: usize = 16;

/// Applies `action` to `state`; returns what happened, for a trace.
pub(crate) fn apply(model: &CheckModel, state: &mut State, action: &Action) -> Result<String, Error> {
    match action {
        Action::Reconcile { replica, claim, whole } => reconcile_claim(model, state, *replica, claim, *whole),
        Action::StoreSync { replica, pod } => store_sync(model, state, *replica, pod),
        Action::DeliverPods { replica } => {
            state.replicas[*replica].pods = state.pods.clone();
            let lines = || state.pods.values().map(|pod| pod_line(pod)).collect::<Vec<_>>().join(", ");
            Ok(note!("watch: pods [{}]", lines()))
        }
        Action::DeliverClaims { replica } => {
            state.replicas[*replica].claims = state.claims.clone();
            let lines = || state.claims.values().map(|claim| claim_line(claim)).collect::<Vec<_>>().join(", ");
            Ok(note!("watch: claims [{}]", lines()))
        }
        Action::Forget { replica } => {
            let memory = Arc::make_mut(&mut state.replicas[*replica].memory);
            memory.acquired.clear();
            memory.claim_acquired.clear();
            Ok(note!("notes of pods acquired lately expire"))
        }
        Action::Crash { replica } => {
            state.budget.crashes -= 1;
            // The restarted process relists its caches.
            state.replicas[*replica] =
                Replica { pods: state.pods.clone(), claims: state.claims.clone(), ..Replica::default() };
            Ok(note!("crash and restart: memory and reconciles lost, caches relisted"))
        }
        Action::DeletePod(name) => {
            state.budget.pod_deletions -= 1;
            // A copy, not `Arc::make_mut`: a copy starts without the memo of
            // the version it copies (objects.rs).
            if let Some(pod) = state.pods.get(name) {
                let pod = PodObj { deleting: true, ..(**pod).clone() };
                state.pods.insert(model.pods.intern(pod));
            }
            Ok(note!("delete pod {name}"))
        }
        Action::FailPod(name) => {
            state.budget.pod_failures -= 1;
            if let Some(pod) = state.pods.get(name) {
                let pod = PodObj { failed: true, ..(**pod).clone() };
                state.pods.insert(model.pods.intern(pod));
            }
            Ok(note!("pod {name} fails"))
        }
        Action::VanishStore(name) => {
            state.budget.store_vanishings -= 1;
            state.stores.remove(name);
            Ok(note!("store of pod {name} vanishes"))
        }
        Action::DeleteClaim(name) => {
            state.budget.claim_deletions -= 1;
            let remove = match state.claims.get(name) {
                Some(claim) if claim.finalizer => {
                    let claim = ClaimObj { deleting: true, ..(**claim).clone() };
                    state.claims.insert(model.claims.intern(claim));
                    false
                }
                Some(_) => true,
                None => false,
            };
            if remove {
                state.claims.remove(name);
            }
            Ok(note!("delete claim {name}"))
        }
        Action::RecreateClaim(name) => {
            let generation = Arc::make_mut(&mut state.generations).entry(name.clone()).or_insert(0);
            *generation += 1;
            // From the manifest the configuration created it with.
            let manifest = model.config.claims.iter().find(|claim| claim.name == *name);
            let claim = manifest.map_or_else(|| ClaimObj::new(name, *generation), |claim| claim.recreated(*generation));
            let note = note!("create claim {}", claim_line(&claim));
            state.claims.insert(model.claims.intern(claim));
            Ok(note)
        }
        Action::Migrate(name) => {
            state.budget.migrations -= 1;
            let target = model.config.migration_target.clone();
            if let Some(claim) = state.claims.get(name) {
                let claim = ClaimObj { source_pod: claim.pod_name.clone(), pod_name: target, ..(**claim).clone() };
                state.claims.insert(model.claims.intern(claim));
            }
            Ok(note!("migrate claim {name} to {}", model.config.migration_target.as_deref().unwrap_or("any pod")))
        }
    }
}

/// One trace-style rendering of a pod (the sim's commit line, without rv).
fn pod_line(pod: &PodObj) -> String {
    format!(
        "{} uid={} phase={} claim-uid={} claimed-by={}{}{}",
        pod.name,
        pod.uid,
        pod.label(labels::PHASE).unwrap_or("-"),
        pod.claim_uid().unwrap_or("-"),
        pod.label(labels::CLAIMED_BY).unwrap_or("-"),
        if pod.deleting { " deleting" } else { "" },
        if pod.failed { " failed" } else { "" },
    )
}

fn claim_line(claim: &ClaimObj) -> String {
    format!(
        "{} uid={} phase={} pod={}{}{}",
        claim.name,
        claim.uid,
        claim.phase.map_or("-", |phase| phase.as_str()),
        claim.pod_name.as_deref().unwrap_or("-"),
        claim.source_pod.as_deref().map(|source| format!(" source={source}")).unwrap_or_default(),
        if claim.deleting { " deleting" } else { "" },
    )
}

/// What became of a pod write.
enum Outcome {
    Applied(Arc<PodObj>),
    /// Refused: a `test` failed, or the pod is gone.
    Stale,
    /// The pod read does not satisfy the transition's precondition.
    NotApplicable,
}

/// Sends `transition` for the pod as `read`, as
/// `cnpool_controllers::ownership::transition` does: the patch goes to the
/// pod of that name, whatever its UID, and is refused when a `test` fails.
fn pod_write(
    model: &CheckModel,
    state: &mut State,
    read: &PodObj,
    transition: Transition<'_>,
) -> Result<(Outcome, String), Error> {
    let Some(ops) = operations(&read.to_pod(), transition, now()) else {
        return Ok((Outcome::NotApplicable, note!("{} on pod {}: not applicable", transition.name(), read.name)));
    };
    let Some(current) = state.pods.get(&read.name) else {
        return Ok((Outcome::Stale, note!("{} on pod {}: 404", transition.name(), read.name)));
    };
    let Some(written) = current.patched(&ops)? else {
        return Ok((Outcome::Stale, note!("{} on pod {}: 422, a test failed", transition.name(), read.name)));
    };
    if let Some(detail) = keys_not_the_transitions(transition, &written)
        && state.broken.is_none()
    {
        state.broken = Some((OWNER_KEYS, detail));
    }
    // I8: an owner changes only by release (to none) or by an acquire or
    // adoption of an unowned pod, never from one claim to another.
    if let (Some(before), Some(after)) = (current.claim_uid(), written.claim_uid())
        && before != after
        && state.broken.is_none()
    {
        state.broken =
            Some((WRITES, format!("pod {} went from claim-uid {before} to {after} in one write", read.name)));
    }
    let note = note!("{} -> pod {}", transition.name(), pod_line(&written));
    let written = model.pods.intern(written);
    state.pods.insert(written.clone());
    Ok((Outcome::Applied(written), note))
}

/// I8 on a claim's write to a pod (acquire, adopt-legacy, rewrite): the
/// owner and phase keys it leaves are the transition's own — Bound, that
/// claim's UID and name, its owner and claim set — and none came from the
/// claim's spec (`additionalPodLabels`). What is wrong, if anything.
fn keys_not_the_transitions(transition: Transition<'_>, written: &PodObj) -> Option<String> {
    let (Transition::Acquire(claim) | Transition::AdoptLegacy(claim) | Transition::Rewrite(claim)) = transition else {
        return None;
    };
    let owner_keys = [
        (labels::PHASE, Some(cnpool_api::PodPhase::Bound.as_str())),
        (labels::CLAIM_UID, Some(claim.uid.as_str())),
        (labels::CLAIMED_BY, Some(claim.name.as_str())),
        (labels::OWNER, claim.owner_name.as_deref()),
        (labels::CLAIM_SET, claim.claim_set.as_deref()),
    ];
    let (key, own) = owner_keys.into_iter().find(|(key, own)| written.label(key) != *own)?;
    let from_spec = claim.additional_pod_labels.get(key).map_or(String::new(), |value| {
        format!(", and {}'s spec asks for {key}={value} in additionalPodLabels", claim.name)
    });
    Some(format!(
        "pod {}: claim {}'s {} left {key}={} where the transition writes {}{from_spec}",
        written.name,
        claim.name,
        transition.name(),
        written.label(key).unwrap_or("(none)"),
        own.unwrap_or("(none)"),
    ))
}

/// A claim write at the version read: refused (409) unless the server's
/// claim is the one read. With `remove`, the write drops the last finalizer
/// of a deleting claim, which the server then deletes.
fn claim_write(model: &CheckModel, state: &mut State, read: &ClaimObj, written: ClaimObj) -> Option<Arc<ClaimObj>> {
    if state.claims.get(&read.name).map(|claim| &**claim) != Some(read) {
        return None;
    }
    // Written claims are built with `..` from a copy of the one read, whose
    // memos (moved, not copied) may hold what was read: they start afresh,
    // and the interner gives the shared version of the content.
    let written = model.claims.intern(ClaimObj {
        view: Memo::default(),
        hash: Memo::default(),
        twin: Memo::default(),
        ..written
    });
    if written.deleting && !written.finalizer {
        state.claims.remove(&read.name);
    } else {
        state.claims.insert(written.clone());
    }
    Some(written)
}

/// A replica's per-claim notes.
#[derive(Clone, Copy)]
enum Note {
    /// The pod it acquired lately for the claim.
    Acquired,
    /// The migration target it saw serve.
    Serving,
}

/// Drops the note of `claim` from a replica's memory, copying the memory
/// only when it holds one.
fn forget(replica: &mut Replica, note: Note, claim: &str) {
    fn notes(memory: &mut Memory, note: Note) -> &mut BTreeMap<String, String> {
        match note {
            Note::Acquired => &mut memory.claim_acquired,
            Note::Serving => &mut memory.serving,
        }
    }
    let held = match note {
        Note::Acquired => replica.memory.claim_acquired.contains_key(claim),
        Note::Serving => replica.memory.serving.contains_key(claim),
    };
    if held {
        notes(Arc::make_mut(&mut replica.memory), note).remove(claim);
    }
}

/// The outcome of one reconcile step.
enum Next {
    Again,
    Done,
}

fn reconcile_claim(
    model: &CheckModel,
    state: &mut State,
    replica: usize,
    name: &str,
    whole: bool,
) -> Result<String, Error> {
    let Some(claim) = state.replicas[replica].claims.get(name).cloned() else {
        return Ok(note!("reconcile claim {name}: not in the cache"));
    };
    let cache = &state.replicas[replica];
    let owned = cache.pods.values().filter(|pod| pod.claim_uid() == Some(claim.uid.as_str())).cloned().collect();
    let mut snap = Snap {
        claim,
        owned,
        pointed: None,
        source: None,
        live: false,
        confirmed: false,
        stores_listed: false,
        candidates: None,
    };
    let mut notes = Vec::new();
    // A whole reconcile is one action; the other kind stops after its first
    // write, as one whose next request fails or whose process dies does
    // (docs/model-checking.md says what this leaves out).
    for _ in 0..MAX_STEPS {
        let (next, after, note, wrote) = claim_step(model, state, replica, snap)?;
        notes.push(note);
        match next {
            Next::Again if whole || !wrote => snap = after,
            Next::Again | Next::Done => break,
        }
    }
    let how = if whole { "reconcile" } else { "reconcile (stops after a write)" };
    Ok(note!("{how} claim {name}: {}", notes.join(" / ")))
}

/// A pod by name for the reconcile: what it already read, else the cache,
/// or the server for a live read.
fn find_pod(state: &State, replica: usize, snap: &Snap, name: &str) -> Option<Arc<PodObj>> {
    let known = snap.owned.iter().chain(snap.pointed.as_ref()).chain(snap.source.as_ref());
    if let Some(pod) = known.into_iter().find(|pod| pod.name == name) {
        return Some(pod.clone());
    }
    if snap.live { state.pods.get(name).cloned() } else { state.replicas[replica].pods.get(name).cloned() }
}

/// The views a decision reads, owned.
struct Views {
    claim: cnpool_core::model::ClaimView,
    owned: Vec<PodView>,
    pointed: Option<PodView>,
    source: Option<PodView>,
    candidates: Option<Vec<PodView>>,
    store: Option<StoreView>,
    store_uuid: Option<String>,
    serving_since: bool,
    acquired_lately: Option<String>,
}

/// A step with its pods named by UID, free of the views' borrows.
enum Plan {
    AddFinalizer,
    ReadLive,
    ConfirmCurrent,
    ReadCandidates,
    RefreshStores,
    Finalize(Vec<(String, AfterRelease)>),
    Adopt(Vec<(String, AfterRelease)>),
    AdoptLegacy(String),
    Acquire(Vec<String>),
    Record(String),
    Rewrite(String),
    MarkLost(LossReason, Vec<(String, AfterRelease)>),
    Rebind,
    MarkBound,
    StartMigration(String),
    MarkOutdated,
    /// Back to the source (`spec.podName` = it, `sourcePod` cleared), then
    /// these pods released (a lost migration target).
    Refuse(Vec<(String, AfterRelease)>),
    NoteServing(String),
    ReleaseSource(String, AfterRelease),
    /// `sourcePod` cleared: the migration completed, or was abandoned by a
    /// Lost claim (`status.migrate` and the condition are not modelled).
    EndMigration,
    /// A step that writes nothing the model keeps (a condition, a requeue).
    Wait,
}

fn plan_of(step: &ClaimStep<'_>) -> Plan {
    let releases = |release: &[cnpool_core::claim::Release<'_>]| -> Vec<(String, AfterRelease)> {
        release.iter().map(|release| (release.pod.uid.clone(), release.then)).collect()
    };
    match step {
        ClaimStep::AddFinalizer => Plan::AddFinalizer,
        ClaimStep::ConfirmFinalize
        | ClaimStep::ConfirmLost(_)
        | ClaimStep::ConfirmRefusal
        | ClaimStep::ConfirmRecord => Plan::ReadLive,
        ClaimStep::ConfirmCurrent => Plan::ConfirmCurrent,
        ClaimStep::ReadCandidates => Plan::ReadCandidates,
        ClaimStep::RefreshStores => Plan::RefreshStores,
        ClaimStep::Finalize { release } => Plan::Finalize(releases(release)),
        ClaimStep::Adopt { release, .. } => Plan::Adopt(releases(release)),
        ClaimStep::AdoptLegacy(pod) => Plan::AdoptLegacy(pod.uid.clone()),
        ClaimStep::AcquirePreBound(pod) => Plan::Acquire(vec![pod.uid.clone()]),
        ClaimStep::Acquire { candidates } => Plan::Acquire(candidates.iter().map(|pod| pod.uid.clone()).collect()),
        ClaimStep::Record(pod) => Plan::Record(pod.uid.clone()),
        ClaimStep::RewriteBinding(pod) => Plan::Rewrite(pod.uid.clone()),
        ClaimStep::MarkLost { reason, release } => Plan::MarkLost(*reason, releases(release)),
        ClaimStep::Rebind => Plan::Rebind,
        ClaimStep::MarkBound => Plan::MarkBound,
        ClaimStep::StartMigration(pod, _) => Plan::StartMigration(pod.name.clone()),
        ClaimStep::MarkOutdated => Plan::MarkOutdated,
        ClaimStep::RefuseMigration(_) => Plan::Refuse(Vec::new()),
        ClaimStep::FallBackToSource { release, .. } => Plan::Refuse(releases(release)),
        ClaimStep::NoteTargetServing(pod) => Plan::NoteServing(pod.uid.clone()),
        ClaimStep::ReleaseSource(release) => Plan::ReleaseSource(release.pod.uid.clone(), release.then),
        ClaimStep::CompleteMigration | ClaimStep::AbandonMigration => Plan::EndMigration,
        ClaimStep::AwaitAcquired
        | ClaimStep::ReportUnavailable(_)
        | ClaimStep::WaitForStore(_)
        | ClaimStep::WaitToReleaseSource(_)
        | ClaimStep::ReportDrain(_)
        | ClaimStep::WaitForDrain
        | ClaimStep::AwaitRollout(_)
        | ClaimStep::ReportInvalid
        | ClaimStep::InSync => Plan::Wait,
    }
}

/// A short name of the step, for the trace.
fn step_name(step: &ClaimStep<'_>) -> String {
    let text = format!("{step:?}");
    let end = text.find(['(', ' ', '{']).unwrap_or(text.len());
    match step {
        ClaimStep::ConfirmLost(reason) | ClaimStep::MarkLost { reason, .. } => {
            format!("{}({})", &text[..end], reason.as_str())
        }
        _ => text[..end].to_owned(),
    }
}

/// The views a decision reads, as the claim controller's `Observed::read`
/// reads them: the production readers, then its broken variants' hooks
/// (which change nothing unless the model's variant is theirs).
fn read_views(state: &State, replica: usize, snap: &Snap) -> Result<Views, Error> {
    let claim = sabotage::ignore_validation(snap.claim.view()?);
    let owned: Vec<PodView> = snap.owned.iter().map(|pod| pod.view()).collect::<Result<_, _>>()?;
    let owned = sabotage::hide_extra_pods(&claim, owned);
    let pointed = snap.pointed.as_ref().map(|pod| pod.view()).transpose()?;
    let source = snap.source.as_ref().map(|pod| pod.view()).transpose()?;
    let candidates = match &snap.candidates {
        Some(pods) => Some(pods.iter().map(|pod| pod.view()).collect::<Result<Vec<_>, _>>()?),
        None => None,
    };
    let memory = &state.replicas[replica];
    let holding = Holding::of(&claim, &owned, pointed.as_ref(), source.as_ref());
    let serving_uuid = holding.serving.and_then(|pod| pod.store_uuid.clone());
    let held_uid = holding.one().map(|pod| pod.uid.clone());
    let serving_name = holding.serving.map(|pod| pod.name.clone());
    let store = serving_name.as_ref().and_then(|name| {
        let listed = state.stores.get(name)?;
        Some(StoreView { uuid: store_uuid(name), work_state: listed.work_state(), labels: listed.labels.clone() })
    });
    let serving_since = claim.source_pod.is_some()
        && held_uid.is_some()
        && memory.memory.serving.get(&claim.uid).is_some_and(|target| Some(target) == held_uid.as_ref());
    let acquired_lately = memory.memory.claim_acquired.get(&claim.uid).cloned();
    Ok(Views {
        store_uuid: serving_uuid,
        claim,
        owned,
        pointed,
        source,
        candidates,
        store,
        serving_since,
        acquired_lately,
    })
}

/// The store of the serving pod as the decision sees it: HAKeeper's entry,
/// or missing since long ago when HAKeeper lacks it (every bound has
/// passed).
fn observed(views: &Views) -> ObservedStore<'_> {
    match (&views.store, &views.store_uuid) {
        (Some(store), _) => ObservedStore::Registered(store),
        (None, Some(_)) => ObservedStore::Missing { since: jiff::Timestamp::UNIX_EPOCH },
        _ => ObservedStore::Unobserved,
    }
}

fn claim_step(
    model: &CheckModel,
    state: &mut State,
    replica: usize,
    mut snap: Snap,
) -> Result<(Next, Snap, String, bool), Error> {
    let view = snap.claim.view()?;
    if let Some(name) = view.pointed_pod() {
        snap.pointed = find_pod(state, replica, &snap, name);
    } else {
        snap.pointed = None;
    }
    snap.source = match view.source_pod.as_deref() {
        Some(name) => find_pod(state, replica, &snap, name),
        None => None,
    };
    let views = read_views(state, replica, &snap)?;
    let candidate_refs: Option<Vec<&PodView>> = views.candidates.as_ref().map(|pods| pods.iter().collect());
    let pools = [pool()];
    let input = ClaimInput {
        claim: &views.claim,
        owned: &views.owned,
        pointed: views.pointed.as_ref(),
        read: if snap.live { Read::Live } else { Read::Cached },
        store: observed(&views),
        candidates: candidate_refs.as_deref(),
        pools: &pools,
        now: now(),
        store_missing_bound: std::time::Duration::from_secs(30),
        source: views.source.as_ref(),
        serving_since: views.serving_since.then(now),
        propagation_delay: std::time::Duration::ZERO,
        may_roll: false,
        claim_confirmed: snap.confirmed,
        acquired_lately: views.acquired_lately.as_deref(),
        stores_listed: snap.stores_listed,
        adopt_legacy_before: Some(cutover()),
    };
    let step = sabotage::loss_from_cache(next_claim_step(&input), &input);
    let name = if tracing() { step_name(&step) } else { String::new() };
    let plan = plan_of(&step);
    let wrote = !matches!(
        plan,
        Plan::ReadCandidates
            | Plan::NoteServing(_)
            | Plan::ReadLive
            | Plan::ConfirmCurrent
            | Plan::RefreshStores
            | Plan::Wait
    );
    let held = Holding::of(&views.claim, &views.owned, views.pointed.as_ref(), views.source.as_ref())
        .one()
        .map(|pod| pod.uid.clone());
    let (next, note) = perform(model, state, replica, &mut snap, plan, held)?;
    Ok((next, snap, note!("{name}{}{note}", if note.is_empty() { "" } else { ": " }), wrote))
}

/// The pod of `uid` among those the reconcile read.
fn raw(snap: &Snap, uid: &str) -> Option<Arc<PodObj>> {
    let read = snap.owned.iter().chain(snap.pointed.as_ref()).chain(snap.source.as_ref());
    let candidates = snap.candidates.iter().flatten();
    read.chain(candidates).find(|pod| pod.uid == uid).cloned()
}

/// Takes the pod as this reconcile's write returned it.
fn put_pod(snap: &mut Snap, pod: Arc<PodObj>) {
    snap.owned.retain(|held| held.name != pod.name);
    for slot in [&mut snap.pointed, &mut snap.source] {
        if slot.as_ref().is_some_and(|known| known.name == pod.name) {
            *slot = Some(pod.clone());
        }
    }
    snap.owned.push(pod);
}

fn perform(
    model: &CheckModel,
    state: &mut State,
    replica: usize,
    snap: &mut Snap,
    plan: Plan,
    held: Option<String>,
) -> Result<(Next, String), Error> {
    let view = snap.claim.view()?;
    let claim = (*snap.claim).clone();
    let uid = claim.uid.clone();
    let release = |then: AfterRelease| Transition::Release { claim_uid: &uid, then };
    // A claim write at the version read; the reconcile goes on from it.
    let write = |state: &mut State, snap: &mut Snap, written: ClaimObj| -> (Next, String) {
        match claim_write(model, state, &snap.claim, written) {
            Some(written) => {
                let note = note!("claim {}", claim_line(&written));
                snap.claim = written;
                (Next::Again, note)
            }
            None => (Next::Done, "claim write refused: 409".to_owned()),
        }
    };
    Ok(match plan {
        Plan::Wait => (Next::Done, String::new()),
        Plan::AddFinalizer => write(state, snap, ClaimObj { finalizer: true, ..claim }),
        Plan::ReadLive => {
            if snap.live {
                // Already live: a second confirmation would loop.
                return Ok((Next::Done, String::new()));
            }
            let Some(live) = state.claims.get(&claim.name).cloned() else {
                return Ok((Next::Done, "live read: claim gone".to_owned()));
            };
            snap.owned =
                state.pods.values().filter(|pod| pod.claim_uid() == Some(live.uid.as_str())).cloned().collect();
            snap.claim = live;
            snap.pointed = None;
            snap.source = None;
            snap.live = true;
            (Next::Again, "read live".to_owned())
        }
        Plan::ConfirmCurrent => {
            snap.confirmed = state.claims.get(&claim.name).is_some_and(|live| **live == claim);
            let next = if snap.confirmed { Next::Again } else { Next::Done };
            (next, note!("claim current: {}", snap.confirmed))
        }
        Plan::ReadCandidates => {
            let pools = [pool()];
            let memory = &state.replicas[replica];
            let mut offered = Vec::new();
            for pod in memory.pods.values() {
                let pod_view = pod.view()?;
                let store_missing = !state.stores.contains_key(&pod.name);
                if !memory.memory.acquired.contains(&pod.uid)
                    && eligibility(&view, &pod_view, &pools).is_ok()
                    && !store_missing
                {
                    offered.push(pod.clone());
                }
            }
            let names = || offered.iter().map(|pod| pod.name.as_str()).collect::<Vec<_>>().join(" ");
            let note = note!("offered [{}]", names());
            snap.candidates = Some(offered);
            (Next::Again, note)
        }
        Plan::RefreshStores => {
            snap.stores_listed = true;
            (Next::Again, String::new())
        }
        Plan::Finalize(releases) => {
            let mut notes = Vec::new();
            for (pod_uid, then) in releases {
                let Some(read) = raw(snap, &pod_uid) else { continue };
                let (outcome, note) = pod_write(model, state, &read, release(then))?;
                notes.push(note);
                if let Outcome::Stale = outcome {
                    return Ok((Next::Done, notes.join("; ")));
                }
            }
            let (_, note) = write(state, snap, ClaimObj { finalizer: false, ..claim });
            notes.push(note);
            (Next::Done, notes.join("; "))
        }
        Plan::Adopt(releases) => {
            let mut notes = Vec::new();
            for (pod_uid, then) in releases {
                let Some(read) = raw(snap, &pod_uid) else { continue };
                let (outcome, note) = pod_write(model, state, &read, release(then))?;
                notes.push(note);
                match outcome {
                    Outcome::Applied(written) => put_pod(snap, written),
                    Outcome::Stale | Outcome::NotApplicable => return Ok((Next::Done, notes.join("; "))),
                }
            }
            (Next::Again, notes.join("; "))
        }
        Plan::AdoptLegacy(pod_uid) => {
            let Some(read) = raw(snap, &pod_uid) else { return Ok((Next::Done, String::new())) };
            let (outcome, note) = pod_write(model, state, &read, Transition::AdoptLegacy(&view))?;
            match outcome {
                Outcome::Applied(written) => {
                    put_pod(snap, written);
                    (Next::Again, note)
                }
                Outcome::Stale | Outcome::NotApplicable => {
                    let (next, live) = perform(model, state, replica, snap, Plan::ReadLive, held)?;
                    (next, note!("{note}; {live}"))
                }
            }
        }
        Plan::Acquire(candidates) => {
            let mut notes = Vec::new();
            let mut tried = 0;
            for pod_uid in candidates {
                if tried == ACQUIRE_ATTEMPTS {
                    break;
                }
                let Some(read) = raw(snap, &pod_uid) else { continue };
                // Another worker of this process reserved it: next.
                if !Arc::make_mut(&mut state.replicas[replica].memory).acquired.insert(pod_uid.clone()) {
                    continue;
                }
                tried += 1;
                let (outcome, note) = pod_write(model, state, &read, Transition::Acquire(&view))?;
                notes.push(note);
                if let Outcome::Applied(written) = outcome {
                    Arc::make_mut(&mut state.replicas[replica].memory).claim_acquired.insert(uid.clone(), pod_uid);
                    put_pod(snap, written);
                    return Ok((Next::Again, notes.join("; ")));
                }
            }
            (Next::Done, notes.join("; "))
        }
        Plan::Record(pod_uid) => {
            let Some(pod) = raw(snap, &pod_uid) else { return Ok((Next::Done, String::new())) };
            let written = ClaimObj {
                pod_name: Some(pod.name.clone()),
                finalizer: true,
                recorded: Some((pod.name.clone(), pod.uid.clone())),
                ..claim
            };
            write(state, snap, written)
        }
        Plan::Rewrite(pod_uid) => {
            let Some(read) = raw(snap, &pod_uid) else { return Ok((Next::Done, String::new())) };
            let (outcome, note) = pod_write(model, state, &read, Transition::Rewrite(&view))?;
            match outcome {
                Outcome::Applied(written) => {
                    put_pod(snap, written);
                    (Next::Again, note)
                }
                Outcome::Stale | Outcome::NotApplicable => (Next::Done, note),
            }
        }
        Plan::MarkLost(reason, releases) => {
            let refuted = loss_refuted(state, &claim, reason);
            let written = ClaimObj { phase: Some(cnpool_api::ClaimPhase::Lost), lost: Some(reason), ..claim };
            let (next, note) = write(state, snap, written);
            if let Next::Done = next {
                return Ok((next, note));
            }
            if let Some(detail) = refuted
                && state.broken.is_none()
            {
                state.broken = Some((WRITES, detail));
            }
            forget(&mut state.replicas[replica], Note::Acquired, &uid);
            let mut notes = vec![note];
            for (pod_uid, then) in releases {
                let Some(read) = raw(snap, &pod_uid) else { continue };
                let (outcome, note) = pod_write(model, state, &read, release(then))?;
                notes.push(note);
                if let Outcome::Applied(written) = outcome {
                    put_pod(snap, written);
                }
            }
            (Next::Again, notes.join("; "))
        }
        Plan::Rebind => write(state, snap, ClaimObj { pod_name: None, ..claim }),
        Plan::MarkBound => {
            let status_pod = match held.as_deref().and_then(|pod_uid| raw(snap, pod_uid)) {
                Some(pod) => Some((pod.name.clone(), Some(pod.uid.clone()))),
                None => claim.status_pod.clone(),
            };
            let written = ClaimObj { phase: Some(cnpool_api::ClaimPhase::Bound), status_pod, lost: None, ..claim };
            write(state, snap, written)
        }
        Plan::StartMigration(pod) => write(state, snap, ClaimObj { source_pod: Some(pod), pod_name: None, ..claim }),
        Plan::MarkOutdated => write(state, snap, ClaimObj { phase: Some(cnpool_api::ClaimPhase::Outdated), ..claim }),
        Plan::Refuse(releases) => {
            let source = claim.source_pod.clone();
            forget(&mut state.replicas[replica], Note::Serving, &uid);
            let (next, note) = write(state, snap, ClaimObj { pod_name: source, source_pod: None, ..claim });
            if let Next::Done = next {
                return Ok((next, note));
            }
            let mut notes = vec![note];
            for (pod_uid, then) in releases {
                let Some(read) = raw(snap, &pod_uid) else { continue };
                let (outcome, note) = pod_write(model, state, &read, release(then))?;
                notes.push(note);
                if let Outcome::Applied(written) = outcome {
                    put_pod(snap, written);
                }
            }
            (Next::Again, notes.join("; "))
        }
        Plan::NoteServing(pod_uid) => {
            Arc::make_mut(&mut state.replicas[replica].memory).serving.insert(uid.clone(), pod_uid);
            (Next::Again, String::new())
        }
        Plan::ReleaseSource(pod_uid, then) => {
            let Some(read) = raw(snap, &pod_uid) else { return Ok((Next::Done, String::new())) };
            let (outcome, note) = pod_write(model, state, &read, release(then))?;
            match outcome {
                Outcome::Applied(written) => {
                    put_pod(snap, written);
                    (Next::Again, note)
                }
                Outcome::Stale | Outcome::NotApplicable => (Next::Done, note),
            }
        }
        Plan::EndMigration => {
            forget(&mut state.replicas[replica], Note::Serving, &uid);
            write(state, snap, ClaimObj { source_pod: None, ..claim })
        }
    })
}

/// The sim checker's I2 on a loss: a claim marked Lost because its pod is
/// gone, replaced or no longer its own, while the server shows its
/// recorded pod there, the same, its own, neither deleting nor failed.
fn loss_refuted(state: &State, claim: &ClaimObj, reason: LossReason) -> Option<String> {
    let judged_on_pod = matches!(
        reason,
        LossReason::PodDeleted | LossReason::PodReplaced | LossReason::OwnedByOther | LossReason::PodReleased
    );
    let recorded = claim.view().ok()?;
    let name = recorded.recorded_pod_name.clone()?;
    let pod = state.pods.get(&name)?;
    let same = recorded.recorded_pod_uid.as_deref().is_none_or(|uid| uid == pod.uid);
    (judged_on_pod && same && pod.claim_uid() == Some(claim.uid.as_str()) && !pod.deleting && !pod.failed).then(|| {
        format!(
            "claim {} marked Lost ({}) while its pod {name} is there and still its own",
            claim.name,
            reason.as_str()
        )
    })
}

/// The CN-store controller's reconcile of one pod, from the replica's cache.
fn store_sync(model: &CheckModel, state: &mut State, replica: usize, name: &str) -> Result<String, Error> {
    let Some(pod) = state.replicas[replica].pods.get(name).cloned() else {
        return Ok(note!("store reconcile of pod {name}: not in the cache"));
    };
    let view = pod.view()?;
    if pod.deleting {
        // The cn-draining finalizer: remove the store, then let the pod go.
        state.stores.remove(name);
        if state.pods.get(name).is_some_and(|current| current.uid == pod.uid) {
            state.pods.remove(name);
        }
        return Ok(note!("store of pod {name} removed; pod deleted"));
    }
    if view.claim_uid.is_none()
        && let Some(claim_name) = view.claimed_by.as_deref()
        && !state.replicas[replica].claims.contains_key(claim_name)
    {
        // Bound by the Go operator to a name the cache does not hold: a
        // live read of that name, and the pod released only if none exists.
        if state.claims.contains_key(claim_name) {
            return Ok(note!("store reconcile of pod {name}: claim {claim_name} not cached yet"));
        }
        let then = if view.failed { AfterRelease::Retire } else { AfterRelease::Drain };
        let claim_name = claim_name.to_owned();
        let (_, note) = pod_write(model, state, &pod, Transition::ReleaseLegacy { claim_name: &claim_name, then })?;
        return Ok(note!("Go orphan sweep: {note}"));
    }
    if let Some(owner) = view.claim_uid.as_deref()
        && !state.replicas[replica].claims.values().any(|claim| claim.uid == owner)
    {
        // The owner is not cached: a live read says whether it exists.
        let alive = match view.claimed_by.as_deref() {
            Some(claim) => state.claims.get(claim).is_some_and(|claim| claim.uid == owner),
            None => state.claims.values().any(|claim| claim.uid == owner),
        };
        if alive {
            return Ok(note!("store reconcile of pod {name}: owner {owner} not cached yet"));
        }
        let then = if view.failed { AfterRelease::Retire } else { AfterRelease::Drain };
        let owner = owner.to_owned();
        let (_, note) = pod_write(model, state, &pod, Transition::Release { claim_uid: &owner, then })?;
        return Ok(note!("orphan sweep: {note}"));
    }
    let listed = state.stores.get(name).map(|store| StoreView {
        uuid: store_uuid(name),
        work_state: store.work_state(),
        labels: store.labels.clone(),
    });
    let mut plan = plan_store(&view, listed.as_ref(), Some(Workload::default()), now(), &pool())?;
    if model.variant == Some(Variant::StoreFromClaim)
        && let Some(observed) = listed.as_ref()
    {
        let claimant = state.replicas[replica].claims.values().find(|claim| claim.pod_name.as_deref() == Some(name));
        let desired = match claimant {
            Some(claim) => DesiredStore { state: WorkState::Working, labels: Some(claim.cn_labels()) },
            None => DesiredStore { state: WorkState::Draining, labels: Some(StoreLabels::new()) },
        };
        plan.writes = store_writes(&desired, observed);
    }
    let mut notes = Vec::new();
    if listed.is_some() && !plan.writes.is_empty() {
        let Some(store) = state.stores.get(name) else {
            return Ok(note!("store reconcile of pod {name}: store no longer in HAKeeper"));
        };
        let mut store = (**store).clone();
        for write in &plan.writes {
            match write {
                StoreWrite::ReplaceLabels(labels) => store.labels = labels.clone(),
                StoreWrite::SetState(work_state) => store.state = work_state.code(),
            }
        }
        notes.push(note!("store of pod {name} written {:?} {:?}", store.work_state(), store.labels));
        state.stores.insert(Arc::new(store));
    }
    if let Some(step) = plan.transition {
        let (_, note) = pod_write(model, state, &pod, Transition::Phase(step))?;
        notes.push(note);
    }
    if notes.is_empty() {
        notes.push("in sync".to_owned());
    }
    Ok(note!("store reconcile of pod {name}: {}", notes.join("; ")))
}
