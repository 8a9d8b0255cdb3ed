//! The CNClaim controller: binding, loss, release and finalization.
//!
//! # The protocol
//!
//! A pod belongs to a claim exactly when the pod's
//! `pool.matrixorigin.io/claim-uid` label holds the claim's UID. That label
//! is the lock, and the pod is the single source of truth: the claim's
//! `spec.podName` and `status.store` are the claim's pointer to its pod,
//! trusted only while the pod agrees. Every write that gives a pod an owner
//! or takes it away goes through [`crate::ownership::transition`], a JSON
//! patch whose `test` operations pin the pod's `phase`, `claim-uid` and
//! `claimed-by` labels as the decision read them. An acquire therefore
//! succeeds only on a pod that is still Idle and unowned at the exact moment
//! of the write, whatever the cache lag, the number of workers or the number
//! of operator replicas: two claims can never own one pod. A failed guard
//! means the decision was made on stale data; the controller decides again
//! on fresher data (the next candidate, or a re-read), and never repeats the
//! same write blindly.
//!
//! Writes to the claim itself (its finalizer, the pod it records, phase Lost,
//! its conditions) replace the object at the resourceVersion the decision
//! read, so a claim changed in between is read again as well.
//!
//! Each reconcile reads the claim, the pods carrying its UID (an index of
//! the pod cache), the pod its status or `spec.podName` points at, the CN
//! store of the pod it holds and, when it holds none, the Idle pods of the
//! pools it may use, and asks [`cnpool_core::claim::next_claim_step`] for
//! the one step to take. After each write it continues with what the write
//! returned, so that a new claim goes from nothing to Bound in one reconcile
//! when the store is ready:
//!
//! 1. a claim that will release, adopt or lose a pod gets its finalizer
//!    first; one that holds nothing yet acquires first and gets it with the
//!    pointer (step 6), so the finalizer costs no write of its own. A pod
//!    acquired for a claim deleted before that write carries the UID of no
//!    claim: the orphan sweep releases it;
//! 2. pods already carrying the claim's UID are adopted (a crash between
//!    acquire and record leaves such a pod): the one `spec.podName` names,
//!    else the lowest name, is kept and the others are released;
//! 3. a pod the Go operator bound to the claim by name (`claimed-by`, no
//!    `claim-uid`) and that `spec.podName` names is adopted by writing the
//!    claim's UID onto it. When two claims point at one such pod, the claim
//!    the pod's `claimed-by` names keeps it and the other goes Lost with
//!    reason Misbound;
//! 4. a `spec.podName` set at creation is a request: exactly that pod is
//!    acquired, or a condition says why it cannot be (not a loss);
//! 5. otherwise candidates are tried best first (previous owner, oldest,
//!    name); on a failed guard the next one is tried, a few per reconcile,
//!    then the claim requeues with backoff. Before the first try (in 4 too)
//!    the claim is read live: a cache behind another replica's record would
//!    take a second pod;
//! 6. the pod is recorded in one write: the `recorded-pod` annotation
//!    (name and UID), `spec.podName`, `nodeName`, `poolName`, and the
//!    finalizer if missing. A pod this process did not just acquire for the
//!    claim is recorded only on a live read;
//! 7. the claim shows Bound only once its pod's store is observed Working
//!    with the claim's CN labels (the CN-store controller writes it from the
//!    pod); that status write also describes the pod and its store.
//!
//! A bound claim whose recorded pod is deleted, replaced, failed, owned by
//! another claim, released or whose store has been missing from HAKeeper
//! for longer than the bound is not marked Lost from the cache alone: the
//! claim, its pods and the pointed pod are read again bypassing the cache,
//! and only a confirmed loss sets phase Lost, with a `Bound=False`
//! condition naming the reason and a Warning Event. Any pod still carrying
//! the claim's UID is released (a failed one is retired).
//!
//! **Self-healing.** A standalone claim that is Lost clears its
//! `spec.podName` (and `nodeName`) and binds again from its pool like a new
//! claim, under the same name and UID; its status keeps the lost pod until
//! the new one is recorded, and its phase goes from Lost to Bound. A claim of
//! a claim set stays Lost: the set replaces it.
//!
//! **Migration.** A claim with `spec.sourcePod` keeps its source while it
//! takes a target by the same guarded acquire (a named target it cannot
//! take is refused on a live read: `spec.podName` goes back to the source,
//! nothing changes owner); once the target is recorded and its store has
//! served the claim for the propagation delay, the source is released
//! (guarded by its UID), its drain is reported in `status.migrate` when it
//! changes, and `sourcePod` is cleared once the source is done with. The
//! claim never takes its source back. cnpool itself starts a migration off a
//! pod carrying `matrixorigin.io/store-cordon`, and off a pod of an old
//! template for a standalone claim, one per pool at a time.
//!
//! Deleting a claim lists the pods carrying its UID with a live read,
//! releases each (guarded by its UID) and only then drops the finalizer.
//! Pods of other claims are never touched. A pod whose owner UID names no
//! claim at all (a claim removed without its finalizer) is released by the
//! orphan sweep of the CN-store controller after a live read of the claim.
//!
//! Invariants this controller keeps: a pod gets an owner only by acquire or
//! the one-time legacy adoption, each guarded by "no owner" (or "owned by
//! name by this claim") on the exact version written over; a claim is Lost
//! only on a live read; a claim is Bound only when its pod carries its UID
//! and its store serves its labels; and no write is made when what is
//! desired equals what is observed.

use std::sync::Arc;

use cnpool_api::{CNClaim, CNClaimStatus, CNLabel, CNStoreStatus, ClaimPhase, MigrateStatus, PodRef, Workload, labels};
use cnpool_core::candidates::eligibility;
use cnpool_core::claim::{
    AfterRelease, ClaimInput, ClaimStep, LossReason, MigrationCause, Release, Unavailable, next_claim_step,
};
use cnpool_core::convert::claim_view;
use cnpool_core::model::{ClaimView, PodView, Read};
use cnpool_registry::StoreRegistry;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use crate::cache::IdlePod;
use crate::context::Context;
use crate::error::{Error, is_not_found, is_stale};
use crate::key::{Key, Kind, key_of};
use crate::lately::ACQUIRED_LATELY;
use crate::observe::store_missing_noted;
use crate::ownership::{self, Outcome, Transition};

/// The condition type a claim reports its binding in.
pub const BOUND_CONDITION: &str = "Bound";
/// The condition type a claim reports its last migration in.
pub const MIGRATION_CONDITION: &str = "Migration";
/// How long a new claim may wait for its pod's store before its status shows
/// it Pending, waiting for the store.
const STORE_WAIT_SHOWN_AFTER: jiff::SignedDuration = jiff::SignedDuration::from_secs(5);
/// The reasons of a claim waiting for something to come, not of a fault:
/// no Warning Event for them.
const NO_IDLE_POD: &str = "NoIdlePod";
const WAITING_FOR_STORE: &str = "WaitingForStore";
/// Steps one reconcile takes at most before requeueing.
const MAX_STEPS: usize = 12;

/// What one reconcile has read, updated with what its writes returned.
struct Snapshot {
    claim: CNClaim,
    owned: Vec<Arc<Pod>>,
    pointed: Option<Arc<Pod>>,
    /// The pod `spec.sourcePod` names.
    source: Option<Arc<Pod>>,
    read: Read,
    /// Whether this reconcile listed HAKeeper's stores itself.
    stores_listed: bool,
}

enum Next {
    Again,
    Done(Action),
}

pub async fn reconcile<R: StoreRegistry + 'static>(claim: Arc<CNClaim>, ctx: Arc<Context<R>>) -> Result<Action, Error> {
    let current = ctx.claims.holds_version(&claim);
    let claim = ctx.claim_writes.freshest(claim);
    let key = key_of(claim.as_ref());
    ctx.wake.reconciling(Kind::Claim, &key.0, &key.1, current);
    let uid = claim.uid().unwrap_or_default();
    let mut snap = Snapshot {
        owned: ctx.pods.owned_by(&uid),
        claim: (*claim).clone(),
        pointed: None,
        source: None,
        read: Read::Cached,
        stores_listed: false,
    };
    for _ in 0..MAX_STEPS {
        if let Next::Done(action) = step(&ctx, &mut snap, &key).await? {
            return Ok(action);
        }
    }
    Ok(Action::requeue(ctx.config.requeue_min))
}

pub fn error_policy<R>(claim: Arc<CNClaim>, error: &Error, ctx: Arc<Context<R>>) -> Action {
    let delay = ctx.backoff.failure(Kind::Claim, &key_of(claim.as_ref()));
    tracing::warn!(claim = %claim.name_any(), error = %error, kind = error.metric_label(), ?delay, "claim reconcile failed");
    Action::requeue(delay)
}

impl Snapshot {
    fn namespace(&self) -> String {
        self.claim.namespace().unwrap_or_default()
    }

    /// Finds the pods the claim points at now (its pointer and its
    /// migration source).
    async fn refresh<R>(&mut self, ctx: &Context<R>, view: &ClaimView) -> Result<(), Error> {
        self.pointed = match view.pointed_pod() {
            Some(name) => self.find_pod(ctx, name).await?,
            None => None,
        };
        self.source = match view.source_pod.as_deref() {
            Some(name) => self.find_pod(ctx, name).await?,
            None => None,
        };
        Ok(())
    }

    /// A pod by name: among what this reconcile already holds, else in the
    /// cache or, for a live read, from the server.
    async fn find_pod<R>(&self, ctx: &Context<R>, name: &str) -> Result<Option<Arc<Pod>>, Error> {
        let known = self.owned.iter().chain(self.pointed.as_ref()).chain(self.source.as_ref());
        if let Some(pod) = known.into_iter().find(|pod| pod.name_any() == name) {
            return Ok(Some(pod.clone()));
        }
        let namespace = self.namespace();
        match self.read {
            Read::Cached => Ok(ctx.pods.get(&(namespace, name.to_owned()))),
            Read::Live => {
                let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
                Ok(pods.get_opt(name).await.map_err(|error| Error::kube("read pod", name, error))?.map(Arc::new))
            }
        }
    }

    /// Reads the claim and its pods again, bypassing the cache. `false` when
    /// the claim is gone.
    async fn read_live<R>(&mut self, ctx: &Context<R>) -> Result<bool, Error> {
        let namespace = self.namespace();
        let name = self.claim.name_any();
        let Some(claim) = self.claim_live(ctx).await? else {
            return Ok(false);
        };
        let uid = claim.uid().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
        let selector = format!("{}={uid}", labels::CLAIM_UID);
        let owned = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|error| Error::kube("list pods of claim", &name, error))?;
        self.claim = claim;
        self.owned = owned.items.into_iter().map(Arc::new).collect();
        self.pointed = None;
        self.source = None;
        self.read = Read::Live;
        Ok(true)
    }

    /// Whether the claim read is the server's current version. A claim is
    /// read so before it takes a pod: a cache that lags behind another
    /// replica's record of a pod would otherwise have this one take a second
    /// pod, which the claim must then drain before anyone may have it.
    async fn is_current<R>(&self, ctx: &Context<R>) -> Result<bool, Error> {
        if self.read == Read::Live {
            return Ok(true);
        }
        let live = self.claim_live(ctx).await?;
        Ok(live.is_some_and(|live| live.resource_version() == self.claim.resource_version()))
    }

    /// The claim as the server has it now, bypassing the cache.
    async fn claim_live<R>(&self, ctx: &Context<R>) -> Result<Option<CNClaim>, Error> {
        let name = self.claim.name_any();
        let claims: Api<CNClaim> = Api::namespaced(ctx.client.clone(), &self.namespace());
        claims.get_opt(&name).await.map_err(|error| Error::kube("read claim", &name, error))
    }

    /// Takes a pod as this reconcile's write over `read` returned it. The
    /// watch event of that version is no news to the claim.
    fn put_pod<R>(&mut self, ctx: &Context<R>, read: &Pod, pod: Pod) {
        ctx.claim_pod_writes.wrote(read.resource_version().as_deref(), pod.clone());
        let pod = Arc::new(pod);
        let name = pod.name_any();
        self.owned.retain(|held| held.name_any() != name);
        self.owned.push(pod.clone());
        for slot in [&mut self.pointed, &mut self.source] {
            if slot.as_ref().is_some_and(|known| known.name_any() == name) {
                *slot = Some(pod.clone());
            }
        }
    }
}

fn raw<'a>(pods: impl IntoIterator<Item = &'a Arc<Pod>>, view: &PodView) -> Option<Arc<Pod>> {
    pods.into_iter().find(|pod| pod.uid().as_deref() == Some(view.uid.as_str())).cloned()
}

/// Whether an Outdated standalone claim on `held` may start migrating: no
/// other claim of the pod's pool migrates now (by the cache, and by what
/// this process started lately), so a rollout moves one tenant at a time.
fn may_roll<R>(ctx: &Context<R>, namespace: &str, held: Option<&PodView>) -> bool {
    let Some(pool) = held.and_then(|pod| pod.pool.as_deref()) else { return false };
    let migrating = ctx.claims.in_pool(namespace, pool).iter().any(|claim| claim.spec.source_pod.is_some());
    !migrating && !ctx.rollouts.lately(namespace, pool)
}

/// How many Idle pods a claim reads from each pool that it may take (after
/// those of its previous owner): enough for every attempt of every worker
/// binding at once, a few of the first being reserved by the others.
const CANDIDATES_READ: usize = 16;

/// The Idle pods `claim` may take, at most [`CANDIDATES_READ`] a pool
/// beside those its owner held last (the core ranks them), and whether any
/// were held back as acquired lately (by this process, or tried and
/// refused). Those on a cordoned node and those whose store HAKeeper does
/// not list now are left out: the first are not eligible, and a claim taking
/// one of the second would only wait for its store, and maybe be Lost.
fn candidate_pods<R>(
    ctx: &Context<R>,
    claim: &ClaimView,
    namespace: &str,
    pools: &[cnpool_core::model::PoolView],
) -> (Vec<Arc<IdlePod>>, bool) {
    let pool_names: Vec<String> = match &claim.pool_name {
        Some(pool) => vec![pool.clone()],
        None => ctx
            .pools
            .all()
            .iter()
            .filter(|(pool, _)| pool.namespace().as_deref() == Some(namespace))
            .map(|(pool, _)| pool.name_any())
            .collect(),
    };
    let mut held_back = false;
    let mut offered = Vec::new();
    let returning = |idle: &IdlePod| claim.owner_name.is_some() && idle.view.last_owner == claim.owner_name;
    for pool in &pool_names {
        let mut offer = |idle: Arc<IdlePod>| {
            if ctx.pods_taken_lately.contains(&idle.view.uid) {
                held_back = true;
                return false;
            }
            // Reading the store's absence also starts the clock by which the
            // pool replaces the pod.
            let offerable = eligibility(claim, &idle.view, pools).is_ok()
                && !ctx.observer().on_cordoned_node(&idle.view)
                && ctx.observer().unowned_store_missing_since(&idle.pod, &idle.view).is_none();
            if offerable {
                offered.push(idle);
            }
            offerable
        };
        if let Some(owner) = &claim.owner_name {
            for idle in ctx.pods.idle_last_owned_by(namespace, pool, owner) {
                offer(idle);
            }
        }
        let (mut after, mut found) = (None, 0);
        loop {
            let page = ctx.pods.idle_by_age(namespace, pool, after.as_ref(), CANDIDATES_READ);
            let end = page.len() < CANDIDATES_READ;
            after = page.last().map(|idle| crate::cache::age_rank_of(&idle.view));
            for idle in page.into_iter().filter(|idle| !returning(idle)) {
                found += usize::from(offer(idle));
            }
            if end || found >= CANDIDATES_READ {
                break;
            }
        }
    }
    (offered, held_back)
}

async fn step<R: StoreRegistry>(ctx: &Context<R>, snap: &mut Snapshot, key: &Key) -> Result<Next, Error> {
    let view = claim_view(&snap.claim)?;
    snap.refresh(ctx, &view).await?;
    let namespace = snap.namespace();
    let owned: Vec<PodView> = snap.owned.iter().map(|pod| ctx.observer().read_pod(pod)).collect::<Result<_, _>>()?;
    #[cfg(feature = "sabotage")]
    let owned = crate::sabotage::hide_extra_pods(&view, owned);
    let pointed: Option<PodView> = snap.pointed.as_deref().map(|pod| ctx.observer().read_pod(pod)).transpose()?;
    let source: Option<PodView> = snap.source.as_deref().map(|pod| ctx.observer().read_pod(pod)).transpose()?;
    let pools = ctx.pool_views();
    let held: Vec<&PodView> = owned
        .iter()
        .chain(pointed.as_ref())
        .filter(|pod| pod.is_owned_by(&view.uid) && !view.is_source(&pod.name))
        .collect();
    // Only a claim that holds nothing and may pick a pod from the pool
    // needs its Idle pods.
    let may_pick =
        !view.deleting && held.is_empty() && (view.pod_name.is_none() || view.phase == Some(ClaimPhase::Lost));
    let (offered, held_back) =
        if may_pick { candidate_pods(ctx, &view, &namespace, &pools) } else { (Vec::new(), false) };
    let candidates: Vec<&PodView> = offered.iter().map(|idle| &idle.view).collect();
    // The one pod the claim holds (found in `owned` and as `pointed` alike).
    let held_pod = match held.as_slice() {
        [pod, rest @ ..] if rest.iter().all(|other| other.uid == pod.uid) => Some(*pod),
        _ => None,
    };
    // A migrating claim that holds no target yet serves from its source.
    let serving_pod = if held.is_empty() { source.as_ref().filter(|pod| pod.is_owned_by(&view.uid)) } else { held_pod };
    let store_uuid = serving_pod.and_then(|pod| pod.store_uuid.clone());
    let store_view = ctx.stores.view(store_uuid.as_deref());
    let store_noted = serving_pod
        .and_then(|serving| {
            let read = snap.owned.iter().chain(snap.pointed.as_ref()).chain(snap.source.as_ref());
            read.into_iter().find(|pod| pod.uid().as_deref() == Some(&serving.uid))
        })
        .and_then(|pod| store_missing_noted(pod));
    let serving_since = match &view.source_pod {
        Some(_) => ctx.migrations.track(&view.uid, held_pod.map(|pod| pod.uid.as_str())),
        None => None,
    };
    let input = ClaimInput {
        claim: &view,
        owned: &owned,
        pointed: pointed.as_ref(),
        read: snap.read,
        store: ctx.stores.observed(store_uuid.as_deref(), &store_view, store_noted, ctx.now()),
        candidates: &candidates,
        pools: &pools,
        now: ctx.now(),
        store_missing_bound: ctx.config.store_missing_bound,
        source: source.as_ref(),
        serving_since,
        propagation_delay: ctx.config.migration_propagation_delay,
        may_roll: view.phase == Some(ClaimPhase::Outdated) && may_roll(ctx, &namespace, held_pod),
    };
    let read_pods: Vec<Arc<Pod>> = snap
        .owned
        .iter()
        .chain(snap.pointed.as_ref())
        .chain(snap.source.as_ref())
        .chain(offered.iter().map(|idle| &idle.pod))
        .cloned()
        .collect();
    let claim_ref = snap.claim.object_ref(&());
    let step = next_claim_step(&input);
    #[cfg(feature = "sabotage")]
    let step = match step {
        // Takes the cache for the live read that should confirm the loss.
        ClaimStep::ConfirmLost(_) if crate::sabotage::active(crate::sabotage::Variant::LostWithoutLiveRead) => {
            next_claim_step(&ClaimInput { read: Read::Live, ..input })
        }
        step => step,
    };
    tracing::trace!(claim = %view.name, ?step, "claim step");
    match step {
        ClaimStep::AddFinalizer => {
            let mut updated = snap.claim.clone();
            updated.finalizers_mut().push(labels::CLAIM_FINALIZER.to_owned());
            Ok(match replace(ctx, &updated).await? {
                Some(written) => {
                    snap.claim = written;
                    Next::Again
                }
                None => changed_since_read(ctx, &snap.claim),
            })
        }
        ClaimStep::ConfirmFinalize
        | ClaimStep::ConfirmLost(_)
        | ClaimStep::ConfirmRefusal
        | ClaimStep::ConfirmRecord => {
            if snap.read == Read::Live {
                // Already live: a second confirmation would loop.
                return Ok(Next::Done(Action::requeue(ctx.backoff.failure(Kind::Claim, key))));
            }
            Ok(if snap.read_live(ctx).await? { Next::Again } else { Next::Done(Action::await_change()) })
        }
        ClaimStep::Finalize { release } => {
            for pod in &release {
                let Some(raw) = raw(&read_pods, pod.pod) else { continue };
                if !release_pod(ctx, &raw, &view, *pod).await? {
                    return Ok(changed_since_read(ctx, &snap.claim));
                }
            }
            let mut updated = snap.claim.clone();
            updated.finalizers_mut().retain(|finalizer| finalizer != labels::CLAIM_FINALIZER);
            if replace(ctx, &updated).await?.is_some() {
                tracing::info!(claim = %view.name, released = release.len(), "claim finalized");
                ctx.migrations.end(&view.uid, None);
            }
            Ok(Next::Done(Action::await_change()))
        }
        ClaimStep::Adopt { keep, release } => {
            tracing::info!(claim = %view.name, keep = %keep.name, extra = release.len(), "claim holds several pods; keeping one");
            for pod in &release {
                let Some(raw) = raw(&read_pods, pod.pod) else { continue };
                match ownership::transition(&ctx.client, &raw, release_transition(&view, *pod), ctx.now()).await? {
                    Outcome::Applied(written) => snap.put_pod(ctx, &raw, *written),
                    Outcome::Stale | Outcome::NotApplicable => return Ok(changed_since_read(ctx, &snap.claim)),
                }
            }
            Ok(Next::Again)
        }
        ClaimStep::AdoptLegacy(pod) => {
            let Some(raw) = raw(&read_pods, pod) else {
                return Ok(changed_since_read(ctx, &snap.claim));
            };
            match ownership::transition(&ctx.client, &raw, Transition::AdoptLegacy(&view), ctx.now()).await? {
                Outcome::Applied(written) => {
                    snap.put_pod(ctx, &raw, *written);
                    let note = format!("adopted pod {} bound by the Go operator", pod.name);
                    ctx.event(&claim_ref, false, "AdoptedLegacy", "Adopt", note).await;
                    Ok(Next::Again)
                }
                Outcome::Stale | Outcome::NotApplicable => {
                    Ok(if snap.read_live(ctx).await? { Next::Again } else { Next::Done(Action::await_change()) })
                }
            }
        }
        ClaimStep::AcquirePreBound(pod) => {
            let Some(raw) = raw(&read_pods, pod) else {
                return Ok(changed_since_read(ctx, &snap.claim));
            };
            if !snap.is_current(ctx).await? {
                return Ok(changed_since_read(ctx, &snap.claim));
            }
            match ownership::transition(&ctx.client, &raw, Transition::Acquire(&view), ctx.now()).await? {
                Outcome::Applied(written) => {
                    ctx.pods_taken_lately.note(&pod.uid);
                    ctx.claims_took_lately.note(&view.uid, Some(&pod.uid));
                    // Progress: a failure from here on retries from the shortest delay.
                    ctx.backoff.settled(Kind::Claim, key);
                    snap.put_pod(ctx, &raw, *written);
                    Ok(Next::Again)
                }
                Outcome::Stale | Outcome::NotApplicable => Ok(changed_since_read(ctx, &snap.claim)),
            }
        }
        ClaimStep::ReportUnavailable(why) => {
            let message = format!("requested pod {}: {}", view.pod_name.as_deref().unwrap_or_default(), why.message());
            write_condition(ctx, snap, BOUND_CONDITION, "False", why.as_str(), &message).await?;
            Ok(Next::Done(Action::requeue(ctx.backoff.wait(Kind::Claim, key))))
        }
        ClaimStep::Acquire { candidates } => {
            // The claim took a pod moments ago that its caches do not show
            // yet: wait for them rather than take a second pod. One they do
            // show (a migration's source, bound just before) is no reason.
            let unseen = |pod_uid: &String| !snap.owned.iter().any(|pod| pod.uid().as_ref() == Some(pod_uid));
            if ctx.claims_took_lately.pod(&view.uid).is_some_and(|pod_uid| unseen(&pod_uid)) {
                return Ok(changed_since_read(ctx, &snap.claim));
            }
            if !candidates.is_empty() && !snap.is_current(ctx).await? {
                return Ok(changed_since_read(ctx, &snap.claim));
            }
            let unreserved = candidates
                .iter()
                .filter_map(|pod| Some((pod, raw(&read_pods, pod)?)))
                .filter(|(pod, _)| ctx.pods_taken_lately.reserve(&pod.uid));
            for (pod, raw) in unreserved.take(ctx.config.acquire_attempts) {
                match ownership::transition(&ctx.client, &raw, Transition::Acquire(&view), ctx.now()).await? {
                    Outcome::Applied(written) => {
                        ctx.pods_taken_lately.note(&pod.uid);
                        ctx.claims_took_lately.note(&view.uid, Some(&pod.uid));
                        ctx.backoff.settled(Kind::Claim, key);
                        snap.put_pod(ctx, &raw, *written);
                        return Ok(Next::Again);
                    }
                    // Taken by someone else since the cache showed it: next.
                    Outcome::Stale | Outcome::NotApplicable => ctx.pods_taken_lately.note(&pod.uid),
                }
            }
            // A Lost claim keeps the condition that says why it was lost
            // while it waits for a new pod; a migrating one is still bound.
            if candidates.is_empty() && view.source_pod.is_some() {
                let message = "waiting for an Idle pod of the pool to migrate to";
                write_condition(ctx, snap, MIGRATION_CONDITION, "False", NO_IDLE_POD, message).await?;
            } else if candidates.is_empty() && view.phase != Some(ClaimPhase::Lost) {
                let message = "waiting for an Idle pod of the pool";
                write_condition(ctx, snap, BOUND_CONDITION, "False", NO_IDLE_POD, message).await?;
            }
            // A pod held back as acquired lately comes back when that note
            // expires, with no event if its acquire was refused without a
            // change: the wait for capacity must not outgrow the note.
            let delay = if candidates.is_empty() {
                ctx.backoff.wait(Kind::Claim, key)
            } else {
                ctx.backoff.failure(Kind::Claim, key)
            };
            Ok(Next::Done(Action::requeue(if held_back { delay.min(ACQUIRED_LATELY) } else { delay })))
        }
        ClaimStep::Record(pod) => {
            // A pod the cache shows as the claim's that this process did not
            // just acquire for it may be one the claim held before the cache
            // fell behind (released, even deleted, since): recording it
            // would point the claim at a pod it no longer has, and lose it.
            let just_acquired = ctx.claims_took_lately.pod(&view.uid).as_deref() == Some(pod.uid.as_str());
            if snap.read == Read::Cached && !just_acquired {
                return Ok(if snap.read_live(ctx).await? { Next::Again } else { Next::Done(Action::await_change()) });
            }
            record(ctx, snap, &view, pod).await
        }
        ClaimStep::RewriteBinding(pod) => {
            let Some(raw) = raw(&read_pods, pod) else {
                return Ok(changed_since_read(ctx, &snap.claim));
            };
            match ownership::transition(&ctx.client, &raw, Transition::Rewrite(&view), ctx.now()).await? {
                Outcome::Applied(written) => {
                    snap.put_pod(ctx, &raw, *written);
                    Ok(Next::Again)
                }
                Outcome::Stale | Outcome::NotApplicable => Ok(changed_since_read(ctx, &snap.claim)),
            }
        }
        ClaimStep::MarkLost { reason, release } => {
            // The store listing is a cache too: a store that another replica
            // registered after this process last listed looks missing, and a
            // live read reached for another reason (recording a new pod) does
            // not list it again. So a loss for a missing store is written only
            // on a listing this reconcile read; else the claim took a pod just
            // registered, lost it at once, and the pod was retired, in a loop.
            if reason == LossReason::StoreMissing && !snap.stores_listed {
                crate::registry_poll::refresh_stores(ctx).await?;
                snap.stores_listed = true;
                return Ok(Next::Again);
            }
            if !mark_lost(ctx, snap, &view, reason).await? {
                // The claim changed since the live read: decide again.
                return Ok(changed_since_read(ctx, &snap.claim));
            }
            // What it took is gone: a replacement may be taken at once.
            ctx.claims_took_lately.note(&view.uid, None);
            for pod in &release {
                let Some(raw) = raw(&read_pods, pod.pod) else { continue };
                if let Outcome::Applied(written) =
                    ownership::transition(&ctx.client, &raw, release_transition(&view, *pod), ctx.now()).await?
                {
                    snap.put_pod(ctx, &raw, *written);
                }
            }
            Ok(Next::Again)
        }
        ClaimStep::Rebind => {
            let mut updated = snap.claim.clone();
            updated.spec.pod_name.clear();
            updated.spec.node_name.clear();
            Ok(match replace(ctx, &updated).await? {
                Some(written) => {
                    tracing::info!(claim = %view.name, "lost claim clears its pod to bind again");
                    snap.claim = written;
                    Next::Again
                }
                None => changed_since_read(ctx, &snap.claim),
            })
        }
        ClaimStep::WaitForStore(lost_in) => {
            // The store's change wakes the claim at once.
            ctx.wake.expect_claim(&key.0, &key.1);
            // A new claim shows no phase while its pod's store comes up (a
            // moment, usually): its status is written once, Bound. One that
            // has waited longer says so.
            let created = snap.claim.metadata.creation_timestamp.as_ref().map(|time| time.0);
            let waited_long =
                created.is_some_and(|created| ctx.now().duration_since(created) >= STORE_WAIT_SHOWN_AFTER);
            if view.phase.is_none() && waited_long {
                let message = format!(
                    "pod {} is the claim's; waiting for its CN store to serve the claim's labels",
                    view.pod_name.as_deref().unwrap_or_default()
                );
                write_condition(ctx, snap, BOUND_CONDITION, "False", WAITING_FOR_STORE, &message).await?;
            }
            Ok(Next::Done(Action::requeue(match lost_in {
                // A missing store is looked at again when its bound runs out.
                Some(left) => left + ctx.config.requeue_min,
                None => ctx.backoff.wait(Kind::Claim, key),
            })))
        }
        ClaimStep::MarkBound => {
            if !mark_bound(ctx, snap, &view, held_pod, store_view.as_ref()).await? {
                // The claim changed since it was read: its watch wakes it.
                return Ok(changed_since_read(ctx, &snap.claim));
            }
            ctx.backoff.settled(Kind::Claim, key);
            // A migration's target shown Bound goes on to release the source.
            Ok(Next::Again)
        }
        ClaimStep::StartMigration(pod, cause) => {
            let mut updated = snap.claim.clone();
            let node_name = pod.node.clone().unwrap_or_default();
            updated.spec.source_pod = Some(PodRef { pod_name: pod.name.clone(), node_name });
            updated.spec.pod_name.clear();
            Ok(match replace(ctx, &updated).await? {
                Some(written) => {
                    snap.claim = written;
                    if cause == MigrationCause::Outdated {
                        ctx.rollouts.started(&namespace, pod.pool.as_deref().unwrap_or_default());
                    }
                    let why = cause.message();
                    tracing::info!(claim = %view.name, pod = %pod.name, why, "claim starts migrating");
                    let note = format!("pod {} {why}: migrating to another pod", pod.name);
                    ctx.event(&claim_ref, false, "MigrationStarted", "Migrate", note).await;
                    Next::Again
                }
                None => changed_since_read(ctx, &snap.claim),
            })
        }
        ClaimStep::MarkOutdated => {
            let mut updated = snap.claim.clone();
            let status = updated.status.get_or_insert_with(CNClaimStatus::default);
            let from = status.phase;
            status.phase = Some(ClaimPhase::Outdated);
            if let Some(written) = replace_status(ctx, &updated).await? {
                snap.claim = written;
                tracing::info!(claim = %view.name, from = ?from, to = "Outdated", "claim's pod runs an old template");
                return Ok(Next::Again);
            }
            Ok(changed_since_read(ctx, &snap.claim))
        }
        ClaimStep::RefuseMigration(why) => refuse_migration(ctx, snap, &view, why).await,
        ClaimStep::NoteTargetServing(target) => {
            ctx.migrations.target_serving(&view.uid, &target.uid);
            Ok(Next::Again)
        }
        ClaimStep::WaitToReleaseSource(remaining) => {
            Ok(Next::Done(Action::requeue(remaining.max(ctx.config.requeue_min))))
        }
        ClaimStep::ReleaseSource(release) => {
            let Some(raw) = raw(&read_pods, release.pod) else {
                return Ok(changed_since_read(ctx, &snap.claim));
            };
            match ownership::transition(&ctx.client, &raw, release_transition(&view, release), ctx.now()).await? {
                Outcome::Applied(written) => {
                    tracing::info!(claim = %view.name, pod = %release.pod.name, "claim released its migration source");
                    snap.put_pod(ctx, &raw, *written);
                    Ok(Next::Again)
                }
                // Changed or gone since read: decide again on a fresh read.
                Outcome::Stale | Outcome::NotApplicable => Ok(changed_since_read(ctx, &snap.claim)),
            }
        }
        ClaimStep::ReportDrain(workload) => {
            let mut updated = snap.claim.clone();
            let status = updated.status.get_or_insert_with(CNClaimStatus::default);
            status.migrate = Some(MigrateStatus { source: Some(reported_workload(workload)) });
            if let Some(written) = replace_status(ctx, &updated).await? {
                tracing::debug!(claim = %view.name, ?workload, "migration source drains");
                snap.claim = written;
            }
            Ok(Next::Done(Action::requeue(ctx.backoff.wait(Kind::Claim, key))))
        }
        ClaimStep::WaitForDrain => Ok(Next::Done(Action::requeue(ctx.backoff.wait(Kind::Claim, key)))),
        ClaimStep::CompleteMigration => complete_migration(ctx, snap, &view).await,
        ClaimStep::InSync => {
            ctx.backoff.settled(Kind::Claim, key);
            Ok(Next::Done(if view.deleting { Action::await_change() } else { Action::requeue(ctx.config.resync) }))
        }
    }
}

fn release_transition<'a>(view: &'a ClaimView, release: Release<'_>) -> Transition<'a> {
    Transition::Release { claim_uid: &view.uid, then: release.then }
}

/// Releases one pod; `false` when the guard failed.
async fn release_pod<R>(ctx: &Context<R>, pod: &Pod, view: &ClaimView, release: Release<'_>) -> Result<bool, Error> {
    Ok(match ownership::transition(&ctx.client, pod, release_transition(view, release), ctx.now()).await? {
        Outcome::Applied(_) => {
            let action = if release.then == AfterRelease::Retire { "retired" } else { "released" };
            tracing::info!(claim = %view.name, pod = %pod.name_any(), action, "claim let go of its pod");
            true
        }
        // Gone, or no longer ours: nothing of ours to release.
        Outcome::NotApplicable => true,
        Outcome::Stale => false,
    })
}

/// What to do when the claim, or a pod it read, changed since it was read
/// (a write refused as stale, a pod the caches no longer hold): the watch
/// brings the newer version and wakes the claim, so the timer is only the
/// fallback, and it grows while the caches keep lagging.
fn changed_since_read<R>(ctx: &Context<R>, claim: &CNClaim) -> Next {
    Next::Done(Action::requeue(ctx.backoff.refused(Kind::Claim, &key_of(claim))))
}

fn remember_written<R>(ctx: &Context<R>, read: &CNClaim, written: CNClaim) -> CNClaim {
    ctx.claim_writes.wrote(read.resource_version().as_deref(), written.clone());
    written
}

/// Replaces the claim at the resourceVersion read; `None` when it changed
/// or is gone.
async fn replace<R>(ctx: &Context<R>, claim: &CNClaim) -> Result<Option<CNClaim>, Error> {
    let claims: Api<CNClaim> = Api::namespaced(ctx.client.clone(), &claim.namespace().unwrap_or_default());
    match claims.replace(&claim.name_any(), &PostParams::default(), claim).await {
        Ok(written) => Ok(Some(remember_written(ctx, claim, written))),
        Err(error) if is_stale(&error) || is_not_found(&error) => {
            tracing::debug!(claim = %claim.name_any(), %error, "claim changed since it was read");
            Ok(None)
        }
        Err(error) => Err(Error::kube("write", format!("CNClaim {}", claim.name_any()), error)),
    }
}

/// Replaces the claim's status at the resourceVersion read.
async fn replace_status<R>(ctx: &Context<R>, claim: &CNClaim) -> Result<Option<CNClaim>, Error> {
    let claims: Api<CNClaim> = Api::namespaced(ctx.client.clone(), &claim.namespace().unwrap_or_default());
    match claims.replace_status(&claim.name_any(), &PostParams::default(), claim).await {
        Ok(written) => Ok(Some(remember_written(ctx, claim, written))),
        Err(error) if is_stale(&error) || is_not_found(&error) => {
            tracing::debug!(claim = %claim.name_any(), %error, "claim changed since it was read");
            Ok(None)
        }
        Err(error) => Err(Error::kube("write status of", format!("CNClaim {}", claim.name_any()), error)),
    }
}

/// Sets the condition `type_`; `true` when that changed anything.
fn set_condition(
    status: &mut CNClaimStatus,
    type_: &str,
    value: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> bool {
    let existing = status.conditions.iter_mut().find(|condition| condition.type_ == type_);
    match existing {
        Some(condition) if condition.status == value && condition.reason == reason && condition.message == message => {
            false
        }
        Some(condition) => {
            if condition.status != value {
                condition.last_transition_time = Time(now);
            }
            condition.status = value.to_owned();
            condition.reason = reason.to_owned();
            condition.message = message.to_owned();
            condition.observed_generation = generation;
            true
        }
        None => {
            status.conditions.push(Condition {
                type_: type_.to_owned(),
                status: value.to_owned(),
                reason: reason.to_owned(),
                message: message.to_owned(),
                observed_generation: generation,
                last_transition_time: Time(now),
            });
            true
        }
    }
}

/// Sets the condition `type_` (and phase Pending on a new claim) when it
/// differs; publishes a Warning Event when the reason is new.
async fn write_condition<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    type_: &str,
    value: &str,
    reason: &str,
    message: &str,
) -> Result<(), Error> {
    let mut updated = snap.claim.clone();
    let status = updated.status.get_or_insert_with(CNClaimStatus::default);
    let mut changed = set_condition(status, type_, value, reason, message, snap.claim.metadata.generation, ctx.now());
    if status.phase.is_none() {
        status.phase = Some(ClaimPhase::Pending);
        changed = true;
    }
    if !changed {
        return Ok(());
    }
    if let Some(written) = replace_status(ctx, &updated).await? {
        snap.claim = written;
        if reason != NO_IDLE_POD && reason != WAITING_FOR_STORE {
            let action = if type_ == MIGRATION_CONDITION { "Migrate" } else { "Bind" };
            ctx.event(&snap.claim.object_ref(&()), true, reason, action, message.to_owned()).await;
        }
    }
    Ok(())
}

fn store_status(
    pod: &PodView,
    store: Option<&cnpool_core::model::StoreView>,
    registry: Option<&cnpool_registry::CnStore>,
) -> CNStoreStatus {
    let mut status = CNStoreStatus {
        service_id: pod.store_uuid.clone(),
        pod_uid: Some(pod.uid.clone()),
        ..CNStoreStatus::default()
    };
    status.set_pod_name(&pod.name);
    if let Some(store) = registry {
        status.lock_service_address = Some(store.lock_service_address.clone());
        status.pipeline_service_address = Some(store.service_address.clone());
        status.sql_address = Some(store.sql_address.clone());
        status.query_address = Some(store.query_address.clone());
    }
    if let Some(store) = store {
        status.work_state = Some(store.work_state.code());
        status.labels =
            store.labels.iter().map(|(key, values)| CNLabel { key: key.clone(), values: values.clone() }).collect();
    }
    status
}

async fn record<R>(ctx: &Context<R>, snap: &mut Snapshot, view: &ClaimView, pod: &PodView) -> Result<Next, Error> {
    let mut updated = snap.claim.clone();
    // The pointer names what the claim holds. It can name another pod only
    // after a race (a reconcile on a stale claim adopted the other of two
    // pods it had acquired): leaving it would show Bound to a released pod.
    updated.spec.pod_name = pod.name.clone();
    updated.spec.node_name = pod.node.clone().unwrap_or_default();
    if updated.spec.pool_name.is_empty() {
        updated.spec.pool_name = pod.pool.clone().unwrap_or_default();
    }
    if !view.has_finalizer {
        updated.finalizers_mut().push(labels::CLAIM_FINALIZER.to_owned());
    }
    updated.annotations_mut().insert(labels::RECORDED_POD.to_owned(), format!("{}/{}", pod.name, pod.uid));
    match replace(ctx, &updated).await? {
        Some(written) => {
            tracing::info!(claim = %view.name, pod = %pod.name, "claim recorded its pod");
            snap.claim = written;
            Ok(Next::Again)
        }
        None => Ok(changed_since_read(ctx, &snap.claim)),
    }
}

/// Sets phase Lost; `false` when the claim changed since it was read.
async fn mark_lost<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    view: &ClaimView,
    reason: LossReason,
) -> Result<bool, Error> {
    let mut updated = snap.claim.clone();
    let status = updated.status.get_or_insert_with(CNClaimStatus::default);
    let from = status.phase;
    status.phase = Some(ClaimPhase::Lost);
    let generation = snap.claim.metadata.generation;
    set_condition(status, BOUND_CONDITION, "False", reason.as_str(), reason.message(), generation, ctx.now());
    if let Some(written) = replace_status(ctx, &updated).await? {
        tracing::info!(claim = %view.name, from = ?from, to = "Lost", reason = reason.as_str(), "claim lost its pod");
        ctx.metrics.claim_lost(reason.as_str());
        snap.claim = written;
        ctx.event(&snap.claim.object_ref(&()), true, reason.as_str(), "Lose", reason.message().to_owned()).await;
        return Ok(true);
    }
    Ok(false)
}

async fn mark_bound<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    view: &ClaimView,
    held: Option<&PodView>,
    store: Option<&cnpool_core::model::StoreView>,
) -> Result<bool, Error> {
    let mut updated = snap.claim.clone();
    let pod_name = updated.spec.pod_name.clone();
    let status = updated.status.get_or_insert_with(CNClaimStatus::default);
    let from = status.phase;
    status.phase = Some(ClaimPhase::Bound);
    let now = ctx.now();
    let bound_at = Time(now);
    let first_bind = status.bound_time.is_none();
    status.bound_time.get_or_insert_with(|| bound_at.clone());
    if let Some(pod) = held {
        // The store of the pod held; the time it was first shown Bound to
        // that very pod is kept.
        let registry = pod.store_uuid.as_deref().and_then(|uuid| ctx.stores.get(uuid).1);
        let same_pod = status.store.as_ref().is_some_and(|shown| shown.pod_uid.as_deref() == Some(pod.uid.as_str()));
        let shown_since = status.store.as_ref().and_then(|shown| shown.bound_time.clone()).filter(|_| same_pod);
        let mut shown = store_status(pod, store, registry.as_ref());
        shown.bound_time = Some(shown_since.unwrap_or(bound_at));
        status.store = Some(shown);
    }
    let message = format!("bound to pod {pod_name}, whose CN store serves the claim's labels");
    set_condition(status, BOUND_CONDITION, "True", "Bound", &message, snap.claim.metadata.generation, now);
    let Some(written) = replace_status(ctx, &updated).await? else { return Ok(false) };
    tracing::info!(claim = %view.name, pod = %pod_name, from = ?from, to = "Bound", "claim bound");
    if first_bind && let Some(created) = &snap.claim.metadata.creation_timestamp {
        let waited = now.duration_since(created.0);
        ctx.metrics.claim_bound_after(waited.as_secs_f64().max(0.0));
    }
    snap.claim = written;
    ctx.event(&snap.claim.object_ref(&()), false, "Bound", "Bind", message).await;
    Ok(true)
}

/// The workload as `status.migrate` reports it.
fn reported_workload(workload: cnpool_registry::Workload) -> Workload {
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    Workload {
        connections: count(workload.sessions),
        pipelines: count(workload.pipelines),
        replicas: count(workload.replicas),
    }
}

/// Refuses a migration: `spec.podName` back to the source and `sourcePod`
/// cleared in one write, then the Migration condition says why.
async fn refuse_migration<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    view: &ClaimView,
    why: Unavailable,
) -> Result<Next, Error> {
    let source = view.source_pod.clone().unwrap_or_default();
    let target = view.pod_name.clone().unwrap_or_default();
    let mut updated = snap.claim.clone();
    updated.spec.pod_name.clone_from(&source);
    updated.spec.source_pod = None;
    let Some(written) = replace(ctx, &updated).await? else {
        return Ok(changed_since_read(ctx, &snap.claim));
    };
    snap.claim = written;
    tracing::info!(claim = %view.name, target = %target, source = %source, reason = why.as_str(), "migration refused");
    ctx.migrations.end(&view.uid, Some("Refused"));
    let message = format!("target pod {target}: {}; the claim stays on pod {source}", why.message());
    write_condition(ctx, snap, MIGRATION_CONDITION, "False", "MigrationRefused", &message).await?;
    Ok(Next::Again)
}

/// Ends a migration whose source is done with: `status.migrate` cleared
/// (and the target's bound time recorded), then `spec.sourcePod`.
async fn complete_migration<R>(ctx: &Context<R>, snap: &mut Snapshot, view: &ClaimView) -> Result<Next, Error> {
    let source = view.source_pod.clone().unwrap_or_default();
    let target = view.pod_name.clone().unwrap_or_default();
    let message = format!("moved from pod {source} to pod {target}");
    let now = ctx.now();
    let mut updated = snap.claim.clone();
    let status = updated.status.get_or_insert_with(CNClaimStatus::default);
    status.migrate = None;
    if let Some(store) = status.store.as_mut() {
        store.bound_time.get_or_insert(Time(now));
    }
    set_condition(status, MIGRATION_CONDITION, "True", "Migrated", &message, snap.claim.metadata.generation, now);
    if updated.status != snap.claim.status {
        match replace_status(ctx, &updated).await? {
            Some(written) => snap.claim = written,
            None => return Ok(changed_since_read(ctx, &snap.claim)),
        }
    }
    let mut updated = snap.claim.clone();
    updated.spec.source_pod = None;
    let Some(written) = replace(ctx, &updated).await? else {
        return Ok(changed_since_read(ctx, &snap.claim));
    };
    snap.claim = written;
    tracing::info!(claim = %view.name, from = %source, to = %target, "claim migrated");
    ctx.migrations.end(&view.uid, Some("Completed"));
    ctx.event(&snap.claim.object_ref(&()), false, "Migrated", "Migrate", message).await;
    Ok(Next::Again)
}
