//! The binding protocol: how a claim gets, keeps and gives back a CN pod
//! (DESIGN §2). This is its one statement; the controllers only carry out
//! the steps named here, and the docs point here.
//!
//! # Authority
//!
//! A pod belongs to claim C exactly when its `pool.matrixorigin.io/claim-uid`
//! label is C's UID. That label is the lock, and the pod the single source of
//! truth: C's `spec.podName`, its `recorded-pod` annotation and its
//! `status.store` only point at the pod, trusted while the pod agrees. A
//! claim deleted and created again under the same name has a new UID, and
//! so never inherits a pod.
//!
//! # Guarded transitions
//!
//! Every change of a pod's phase or owner is one write, made by
//! `ownership::transition` in cnpool-controllers: a JSON patch whose `test`
//! operations pin the pod's `phase`, `claim-uid` and `claimed-by` labels as
//! the decision read them. If any of them changed since, the server refuses
//! the whole write: the decision was stale, and is made again on a fresh
//! read, never by sending the same write again.
//!
//! | transition | the pod read must show | the write |
//! |---|---|---|
//! | acquire ([`ClaimStep::Acquire`], [`ClaimStep::AcquirePreBound`]) | phase Idle, no `claim-uid`, no `claimed-by` (the decision checks the rest of [eligibility](crate::candidates)) | phase Bound, `claim-uid`, `claimed-by`, `matrixorigin.io/owner`, `matrixorigin.io/claimset`, the claim's `additionalPodLabels`, and the `pool.matrixorigin.io/binding` annotation ([`crate::binding`]: the claim's CN labels and the additional label keys applied) |
//! | adopt-legacy ([`ClaimStep::AdoptLegacy`]) | phase Bound, `claimed-by` = the claim's name, no `claim-uid` | `claim-uid`, owner, additional labels, binding annotation |
//! | rewrite ([`ClaimStep::RewriteBinding`]) | `claim-uid` = the claim's UID | phase Bound, the labels and binding annotation the claim's spec asks for now (keys it no longer asks for removed) |
//! | release ([`Release`]) | `claim-uid` = the claim's UID | phase Draining, or Terminating ([`AfterRelease::Retire`]); the owner labels, the additional label keys the binding annotation lists and that annotation removed; `matrixorigin.io/last-owner`, `matrixorigin.io/reclaimed-at` |
//! | register / recycle / terminate ([`crate::store::PodTransition`]) | no owner; phase Unknown / Draining / Draining | phase Idle / Idle / Terminating |
//! | retire ([`crate::pool`]) | no owner; phase Idle or Unknown | phase Terminating; the pool then deletes the pod with a UID precondition |
//!
//! Writes to the claim itself (its finalizer, the pod it records, its phase
//! and conditions, the migration fields) replace it at the resourceVersion
//! the decision read, its status through the `/status` subresource: a claim
//! changed in between is read again too.
//!
//! **Why two claims can never own one pod.** Only acquire and the one-time
//! legacy adoption give a pod an owner, and each requires, on the exact
//! version it writes over, that the pod has none (for adopt-legacy: none
//! but this claim's name in `claimed-by`). Every other transition keeps the
//! owner or removes it, so a pod changes hands only by release, then
//! acquire. Of two claims racing for one pod, the second write fails its
//! guard, whatever the cache lag, the number of workers or of operator
//! replicas: leader election saves work, and safety never rests on it.
//!
//! # The claim's next step
//!
//! [`next_claim_step`] reads one claim, the pods that carry its UID, the pod
//! it points at, its pod's CN store and the pool's candidates, and names
//! the single thing to do next. The controller carries that step out and
//! calls again with what it reads or wrote then; every step is idempotent,
//! so a repeated call after a failed guard or a crash is safe.
//!
//! Terms: a pod is **ours** when its `claim-uid` label is the claim's UID.
//! The claim **holds** the pods that are ours, except the pod it migrates
//! away from (`spec.sourcePod`), which a claim never takes back. The claim's
//! **record** is the pod its `pool.matrixorigin.io/recorded-pod` annotation
//! names (name and UID), or, without it, the one `status.store.podUID`
//! names (a claim an older cnpool recorded); a claim the
//! Go operator wrote (phase Bound or Outdated, `status.store.string` set, no
//! UID) has recorded that pod by name. **Eligible** is defined in
//! [`crate::candidates`].
//!
//! The first row that applies decides:
//!
//! | # | the claim … | step |
//! |---|---|---|
//! | 1 | is deleting and has no finalizer | `InSync`: nothing is left to do |
//! | 2 | is deleting; input read from the cache | `ConfirmFinalize`: list its pods live, call again |
//! | 3 | is deleting; input read live | `Finalize`: release every pod that is ours (the source too), then drop the finalizer |
//! | 4 | has no finalizer; the step rows 5–20 name is not `Acquire`, `AcquirePreBound`, `Record` or a read ([`ClaimStep::only_reads`]) | `AddFinalizer` |
//! | 5c | holds two pods or more; cache | `ConfirmRecord` |
//! | 5 | the same, read live | `Adopt`: keep the one `spec.podName` names, else the lowest name; release the rest |
//! | 6 | holds none; the pod `spec.podName` names is Bound, `claimed-by` this claim, without `claim-uid`, and not of another UID than recorded; the claim was created before the cutover time ([`ClaimInput::adopt_legacy_before`]) | `AdoptLegacy` |
//! | 6w | the same, but the cutover time is not known | `ReportUnavailable(CutoverUnknown)`: the claim waits and keeps its pod (never a loss) |
//! | 7 | holds none; has a record (not the source); is not Lost; cache | `ConfirmLost(reason)` |
//! | 8 | the same, read live | `MarkLost(reason)`, nothing to release (for `StoreMissing`, only on a store listing of this reconcile: else `RefreshStores`) |
//! | 9 | holds none; is Lost; belongs to a claim set | `InSync`: the set replaces it |
//! | 10m | holds none; is Lost; `spec.sourcePod` names a pod that is no longer ours (gone, released, another's) | `AbandonMigration`: clear `status.migrate`, then `spec.sourcePod`, condition `Migration=False` reason `Lost` |
//! | 10 | holds none; is Lost; `spec.podName` set | `Rebind`: clear `spec.podName` |
//! | 11 | holds none; `spec.podName` names an eligible pod | `AcquirePreBound`; `ConfirmCurrent` first unless the claim is read live or confirmed current |
//! | 12 | holds none; `spec.podName` names a pod that is missing or not eligible | `ReportUnavailable` (not a loss) |
//! | 13a | holds none; `spec.podName` empty; this process acquired a pod for it lately that `owned` does not show | `AwaitAcquired` |
//! | 13r | the same, without that pod; candidates not read | `ReadCandidates` |
//! | 13c | the same; some candidate is eligible; the claim is neither read live nor confirmed current | `ConfirmCurrent` |
//! | 13 | holds none; `spec.podName` empty | `Acquire`: eligible pods, best first; none, and the claim says why it waits ([`crate::waiting::why_no_pod`]) |
//! | 14c | holds one pod, which its status does not record, while it records another (not its migration source), or which is deleting or failed; cache | `ConfirmRecord`: the cache may lag the claim's own writes |
//! | 14a | holds one pod not recorded (as row 14), which this process did not acquire for it lately; cache | `ConfirmRecord`: the claim may have held it before the cache fell behind |
//! | 14 | holds one pod, whose UID and name its status does not record, or `spec.podName` is empty | `Record` |
//! | 15 | holds its recorded pod, which is deleting, failed, or whose store has been missing longer than the bound (no bound before the claim is first shown Bound or Outdated on it); cache | `ConfirmLost(reason)` |
//! | 16 | the same, read live | `MarkLost(reason)`, releasing that pod (retiring it if failed or its store is missing); `RefreshStores` first as in row 8 |
//! | 17 | holds its recorded pod, which is not phase Bound or whose binding annotation or additional labels differ from the spec | `RewriteBinding` |
//! | 18 | holds its recorded pod; its store is not observed Working with exactly the claim's CN labels (missing within the bound, or HAKeeper not asked) | `WaitForStore` |
//! | 19 | holds its recorded pod, whose store serves; phase not Bound/Outdated, or `status.store` describes another pod or none | `MarkBound`: phase Bound and the pod's store in status, one write |
//! | 20c | holds its recorded pod, whose store serves, which carries `matrixorigin.io/store-cordon` or runs on a cordoned node (`spec.unschedulable`); phase Bound or Outdated; no `sourcePod` | `StartMigration(Cordoned)`: `sourcePod` = that pod, `spec.podName` removed (cnpool picks the target) |
//! | 20o | the same pod, not cordoned, of an old template of its pool by its revision label (or labelled outdated); phase Bound | `MarkOutdated` |
//! | 20u | the same pod, of its pool's current template; phase Outdated | `MarkBound` |
//! | 20t | the same pod, of an old template; phase Outdated; no `Outdated` condition says since when | `MarkOutdated` |
//! | 20r | phase Outdated; standalone; the pool's rollout allows one more migration | `StartMigration(Outdated)` |
//! | 20x | phase Outdated; standalone; Outdated for the pool's `reclaimTimeout` | `StartMigration(ReclaimTimeout)` |
//! | 20w | phase Outdated; standalone; neither | `AwaitRollout(time left to the reclaim timeout)` |
//! | 20 | holds its recorded pod, whose store serves; phase Bound or Outdated; no `sourcePod` | `InSync` (an Outdated member of a claim set waits for the set's surge) |
//! | i | its spec fails validation ([`ClaimView::invalid`]), and rows 5–25 name a take, `ReadCandidates`, `ConfirmCurrent`, `AwaitAcquired`, `ReportUnavailable`, `AdoptLegacy`, `RewriteBinding`, `Rebind`, `StartMigration`, `MarkBound` or `InSync` | `ReportInvalid`: condition `Bound=False`, reason `InvalidSpec`; every other step (reads, a confirmed loss, `Record`, `WaitForStore`, and the end of a migration already under way: `ConfirmRefusal`, `RefuseMigration`, `FallBackToSource`, `ReleaseSource`, the drain, `CompleteMigration`) goes on, so the claim keeps what it holds and a lost target is not left recorded |
//!
//! A claim with `spec.sourcePod` set migrates (DESIGN §2, "Migrate"): it
//! keeps its source while it takes a target, named in `spec.podName` or, when
//! that is empty, chosen from the pool (row 13; the source is never a
//! candidate). These rows replace rows 12 and 20 for it, and row 8s comes
//! before row 9:
//!
//! | # | the migrating claim … | step |
//! |---|---|---|
//! | 8s | holds no target; not Lost; its source is gone or another's, or ours but deleting, failed or with its store missing longer than the bound | `ConfirmLost(reason)`; read live, `MarkLost(reason)`, releasing the source if still ours (retiring it if failed or its store is missing) |
//! | 12m | holds none; `spec.podName` names a pod that is missing or not eligible (the source itself included); cache | `ConfirmRefusal` |
//! | 12m′ | the same, read live | `RefuseMigration`: `spec.podName` back to the source, `sourcePod` cleared, condition MigrationRefused |
//! | 20m | holds its recorded target, whose store serves, not yet noted as serving | `NoteTargetServing` (no write) |
//! | 21 | the same; the source still carries its UID; the propagation delay since the target served has not passed, and the source is neither deleting nor failed | `WaitToReleaseSource` |
//! | 22 | the same, once the delay has passed (or the source is deleting or failed) | `ReleaseSource` (guarded by its UID) |
//! | 23 | the source was released and drains; its workload differs from `status.migrate` | `ReportDrain` |
//! | 24 | the same, already reported | `WaitForDrain` |
//! | 25 | the source is Idle, Terminating, deleting, gone, or another claim's | `CompleteMigration`: clear `status.migrate`, then `sourcePod` |
//! | 8t | its recorded target is lost as in rows 7/8 or 15/16, confirmed live, while the source still carries its UID and is neither deleting nor failed | `FallBackToSource(reason)`: `spec.podName` back to the source, `sourcePod` cleared, condition `Migration=False` reason `TargetLost`, then the target released if still ours (retired if failed or its store is missing): the tenant keeps its CN, and rows 14c/14/19 record the source and show it Bound again |
//!
//! A claim created at or after the cutover time never adopts (row 6): a
//! claim deleted and recreated under a Go claim's name is a new claim, and
//! the Go pod still bound to that name is not its own. It asks for the pod
//! like any request (row 12 reports it unavailable), and the pod stays bound to
//! the name until no claim of that name exists; then the CN-store
//! controller releases it.
//!
//! Rows 7/8 say why the recorded pod is lost by looking it up by name: none
//! → [`LossReason::PodDeleted`]; another UID → `PodReplaced`; for a claim the
//! Go operator recorded, `claimed-by` naming another claim → `Misbound` (the
//! legacy rule: when two claims point at one Go-bound pod, the claim its
//! `claimed-by` names adopts it (row 6) and the other goes Lost); another
//! claim's UID → `OwnedByOther`; no owner → `PodReleased`.
//!
//! # Guards against a stale read
//!
//! Beside the pod's own guard, these rows keep a decision from acting on
//! what a cache shows; the controller adds none of its own.
//!
//! - **A live read before a take** ([`ClaimStep::ConfirmCurrent`], rows 11
//!   and 13c). The claim cache may lag another replica's record of a pod:
//!   taking a pool pod then gives the claim a second one, which it must
//!   drain before anyone may have it. One GET of the claim, no write.
//! - **No second pod while the first is not in the cache**
//!   ([`ClaimStep::AwaitAcquired`], row 13a). For moments after this process
//!   acquired a pod for the claim, the pod cache may not show it yet; the
//!   claim waits for the pod's watch event rather than take another.
//! - **Recording from the cache only a pod just acquired**
//!   ([`ClaimStep::ConfirmRecord`], rows 5c, 14c and 14a). A lagging cache
//!   still shows a pod the claim released before it took the one it records,
//!   or released after a loss, or held before the cache fell behind
//!   (released, even deleted, since): recording it would point the claim at
//!   a pod it no longer holds, which it would then lose. Which of several
//!   pods to keep (row 5) is decided live too: a replica whose claim cache
//!   lags another's record would release the pod that one keeps.
//! - **Losses, finalization and refusals only on a live read**
//!   ([`ClaimStep::ConfirmLost`], [`ClaimStep::ConfirmFinalize`],
//!   [`ClaimStep::ConfirmRefusal`]): the claim, the pods carrying its UID and
//!   the pods it points at are read again, bypassing the cache.
//! - **A fresh HAKeeper listing before a `StoreMissing` loss**
//!   ([`ClaimStep::RefreshStores`], rows 8 and 16). The operator's list of
//!   HAKeeper's stores is a cache too: a store another replica registered
//!   since this process last listed looks missing, and the claim would lose
//!   a pod just registered (which is then retired), in a loop.
//!
//! Pool candidates are read only for a claim about to take one
//! ([`ClaimStep::ReadCandidates`], row 13r).
//!
//! # Self-healing of Lost claims
//!
//! A standalone claim heals by itself: once Lost it clears `spec.podName`
//! (row 10) and so binds again from the pool (row 13) like a new claim,
//! under the same name and UID. Its phase stays Lost until it is shown Bound
//! on the new pod, and its `status.store` describes the lost pod until then.
//! A claim of a claim set stays Lost (row 9): the set replaces it with a new
//! claim.
//!
//! # Migration
//!
//! A named target the claim cannot take is refused on a live read, and
//! nothing changes owner (rows 12m/12m′). The source is released once the
//! target's store has served for the propagation delay, which this process
//! counts in memory: after a restart it starts again, later, never earlier.
//! cnpool starts a migration itself off a cordoned pod (row 20c) and, for a
//! standalone claim, off a pod of an old template, one claim per pool at a
//! time ([`ClaimInput::may_roll`], row 20r), or regardless of that pace
//! once it has been Outdated for the pool's `reclaimTimeout` (row 20x),
//! counted from its `Outdated` condition's transition time.
//!
//! A target lost before the source is released sends the claim back to its
//! source (row 8t): the tenant still runs there, so losing the claim would
//! cut it off for nothing. A source lost while no target is held yet makes
//! the claim Lost (row 8s); it ends the migration (row 10m) and binds again
//! like any Lost claim (row 10 clears `spec.podName`): otherwise a migration waiting for room in
//! its pool would leave its tenant on a dead pod, shown Bound. A claim that
//! lost both is Lost.
//!
//! A Lost claim whose source is no longer its own (released before the
//! target was lost, gone, or another's) has nothing left to migrate from:
//! it ends the migration (row 10m) before it binds again. A source is never
//! a candidate of its own claim, so a claim that kept `spec.sourcePod`
//! naming its released source would never take that pod back, Idle as it
//! may be — and in a pool at `maxPods` it may be the only pod free, leaving
//! the claim Lost for good (found by `cnpool check --config migration`,
//! docs/model-checking.md). Without the source, the claim binds from the
//! whole pool, its old source included.
//!
//! # Finalization
//!
//! A deleting claim lists the pods carrying its UID live (row 2), releases
//! each and only then drops its finalizer (row 3); pods of other claims are
//! never touched. Every step that releases,
//! adopts or marks Lost waits for the finalizer (row 4), so a claim deleted
//! meanwhile still releases what it holds. A claim that holds nothing yet
//! acquires first and gets its finalizer in the record write (row 14): a
//! bind costs three writes (the acquire, the claim's metadata and spec, its
//! status), not four.
//!
//! # Orphans
//!
//! A pod acquired for a claim deleted before that record write, or whose
//! claim was removed without its finalizer, carries the UID of no claim.
//! The CN-store controller releases it (Event `OrphanReleased`) once a live
//! read (of the claim its `claimed-by` names, or of every claim in the
//! namespace) finds no claim with that UID: new claims are often not cached
//! yet.
//!
//! # Invariants kept
//!
//! What the rules above give, as DESIGN §3 names it:
//!
//! - I1, exclusive: no pod has two owners, no two claims are Bound to one
//!   pod (the guarded transitions).
//! - I2, truthful: a Bound claim's pod exists, has the recorded UID and is
//!   the claim's (rows 7/8 and 15/16, confirmed live). A claim is shown
//!   Bound only once its pod's store is observed Working with exactly the
//!   claim's CN labels (rows 18/19); the CN-store controller writes the
//!   store from the pod's binding annotation.
//! - I3, no leak: a deleted claim releases its pods (finalization), and an
//!   orphan is released within 60 s.
//! - I5, quiet: no write when what is desired equals what is observed
//!   (`InSync`).
//!
//! The simulator checks these and DESIGN §3's other invariants throughout
//! seeded runs with injected faults, and that deliberately broken variants
//! of the protocol are caught (docs/simulator.md).

use std::time::Duration;

use cnpool_api::{ClaimPhase, PodPhase};
use cnpool_registry::{WorkState, Workload};
use jiff::{SignedDuration, Timestamp};

use crate::binding::Binding;
use crate::candidates::{Ineligible, eligibility, rank_candidates};
use crate::model::{ClaimView, ObservedStore, PodView, PoolView, Read, RecordedPod, has_elapsed};

/// Everything one claim decision reads.
#[derive(Clone, Copy, Debug)]
pub struct ClaimInput<'a, 'c> {
    /// The claim decided on.
    pub claim: &'a ClaimView,
    /// The pods whose `claim-uid` is the claim's UID (from the index, or a
    /// live list).
    pub owned: &'a [PodView],
    /// The pod named by [`ClaimView::pointed_pod`], if it exists.
    pub pointed: Option<&'a PodView>,
    /// Where `claim`, `owned` and `pointed` were read.
    pub read: Read,
    /// The CN store of the pod the claim holds or, while a migrating claim
    /// holds no target yet, of its source (where its tenant still runs).
    pub store: ObservedStore<'a>,
    /// Pool pods the claim might acquire (those it is not eligible for are
    /// skipped); borrowed, because the operator keeps them read. `None`
    /// until they are read: only a claim about to take a pool pod needs
    /// them ([`ClaimStep::ReadCandidates`]).
    pub candidates: Option<&'c [&'a PodView]>,
    /// The pools, for their current revisions.
    pub pools: &'a [PoolView],
    /// The current time.
    pub now: Timestamp,
    /// How long a running pod's store may be missing from HAKeeper before
    /// the claim counts the pod as lost.
    pub store_missing_bound: Duration,
    /// The pod `spec.sourcePod` names, if it exists.
    pub source: Option<&'a PodView>,
    /// Since when this process has seen the held pod's store serve the
    /// claim (noted on [`ClaimStep::NoteTargetServing`]); `None` when not yet.
    pub serving_since: Option<Timestamp>,
    /// How long a migration target must have served before its source is
    /// released, so that the proxy routes new sessions to the target first.
    pub propagation_delay: Duration,
    /// Whether the claim's pool lets one more Outdated standalone claim start
    /// migrating now (the rollout's bound per pool).
    pub may_roll: bool,
    /// Whether a live read in this reconcile confirmed that the claim read
    /// is the server's current version ([`ClaimStep::ConfirmCurrent`]). A
    /// claim read live is current without it.
    pub claim_confirmed: bool,
    /// The UID of the pod this process acquired for the claim lately, while
    /// the pod cache may not show it yet.
    pub acquired_lately: Option<&'a str>,
    /// Whether HAKeeper's stores were listed during this reconcile
    /// ([`ClaimStep::RefreshStores`]).
    pub stores_listed: bool,
    /// The operator's cutover time, recorded in the cluster on its first
    /// start: only a claim created before it may adopt a pod the Go
    /// operator bound to its name (row 6). `None` while the operator does
    /// not know it: no claim adopts, and one that would waits (row 6w).
    pub adopt_legacy_before: Option<Timestamp>,
}

/// The one thing to do next for a claim.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimStep<'a> {
    /// Add the claim finalizer (guarded by the claim's resourceVersion).
    AddFinalizer,
    /// The claim is deleting and the input came from the cache: list the
    /// pods carrying its UID live and call again.
    ConfirmFinalize,
    /// Release these pods, then drop the finalizer.
    Finalize {
        /// Every pod carrying the claim's UID, the migration source included.
        release: Vec<Release<'a>>,
    },
    /// The claim holds several pods (a crash between acquire and record):
    /// keep one, release the others.
    Adopt {
        /// The pod the claim goes on holding.
        keep: &'a PodView,
        /// The others.
        release: Vec<Release<'a>>,
    },
    /// Write the claim's UID onto a pod the Go operator bound to it, guarded
    /// by the pod having no `claim-uid`, `claimed-by` = the claim's name and
    /// phase Bound. The write also records the claim's binding annotation.
    AdoptLegacy(&'a PodView),
    /// Acquire the pod a user named in `spec.podName` at creation (or the
    /// migration target).
    AcquirePreBound(&'a PodView),
    /// The pod `spec.podName` asks for cannot be acquired now: say so in a
    /// condition and requeue. This is a request, not a loss.
    ReportUnavailable(Unavailable),
    /// The claim is about to take a pool pod: read the Idle pods of the
    /// pools it may use into [`ClaimInput::candidates`] and call again.
    ReadCandidates,
    /// The claim is about to take a pod but was read from the cache
    /// ([why that is not enough](crate::claim#guards-against-a-stale-read)).
    /// Read the claim live: call again with
    /// [`ClaimInput::claim_confirmed`] if its resourceVersion is the one
    /// read; else it changed, and is decided again on its new version.
    ConfirmCurrent,
    /// This process acquired a pod for the claim moments ago
    /// ([`ClaimInput::acquired_lately`]) that the pod cache does not show
    /// yet: wait for the cache rather than take a second pod
    /// ([guards](crate::claim#guards-against-a-stale-read)). A pod the cache
    /// does show (a migration's source, bound just before) is no reason to
    /// wait.
    AwaitAcquired,
    /// Acquire the first of these that succeeds, a few per reconcile; none
    /// means the pool has nothing to offer yet (the claim counts as pending,
    /// and its condition says why: [`crate::waiting::why_no_pod`]).
    Acquire {
        /// Eligible pods, best first.
        candidates: Vec<&'a PodView>,
    },
    /// Record the held pod, in one write of the claim's metadata and spec:
    /// the `recorded-pod` annotation, `spec.podName` (set to it even when it
    /// named another pod, which the claim does not hold), `nodeName`,
    /// `poolName`, and the claim's finalizer when it has none yet. The
    /// status describes the pod from `MarkBound` on.
    Record(&'a PodView),
    /// Rewrite phase Bound, the binding annotation and the claim's
    /// additional labels on a pod the claim owns (guarded by its UID).
    RewriteBinding(&'a PodView),
    /// The recorded pod looks lost in the cache: read the claim, its pods and
    /// the pointed pod live and call again.
    ConfirmLost(LossReason),
    /// A loss for a missing store is next, but HAKeeper's stores were not
    /// listed in this reconcile, and that listing is a cache too
    /// ([guards](crate::claim#guards-against-a-stale-read)): list the
    /// stores and call again.
    RefreshStores,
    /// Confirmed on a live read: set phase Lost with a condition and an
    /// Event saying why, then release these pods.
    MarkLost {
        /// Why, for the condition, the Event and metrics.
        reason: LossReason,
        /// The lost pod, if it still carries the claim's UID.
        release: Vec<Release<'a>>,
    },
    /// Lost and standalone: clear `spec.podName` so that the claim binds again.
    Rebind,
    /// Bound and recorded, but the store does not serve with the claim's
    /// labels yet: do not show Bound ([`crate::waiting::why_store_waits`]
    /// says why); requeue. A claim already shown Bound
    /// keeps its phase (the CN-store controller rewrites a drift). When the
    /// store is missing, how long until it has been missing for the bound
    /// (look again then at the latest).
    WaitForStore(Option<Duration>),
    /// The store serves with the claim's labels: set phase Bound (and the
    /// bound time if unset).
    MarkBound,
    /// The named migration target looks unavailable in the cache: read the
    /// claim and the target live and call again.
    ConfirmRefusal,
    /// The cache shows the claim holding a pod other than the one its status
    /// records, or several pods: read the claim and its pods live and call
    /// again before pointing it elsewhere or releasing any.
    ConfirmRecord,
    /// Start a migration away from the held pod to a pod cnpool chooses
    /// (`sourcePod` = it, `spec.podName` removed), for the reason given.
    StartMigration(&'a PodView, MigrationCause),
    /// The held pod runs an old template of its pool: set phase Outdated and
    /// the `Outdated` condition, whose transition time says since when.
    MarkOutdated,
    /// An Outdated standalone claim waits for its pool's rollout to let it
    /// migrate: requeue at the resync, or sooner when the pool's reclaim
    /// timeout ends the wait in the time given.
    AwaitRollout(Option<Duration>),
    /// A migration whose named target cannot be acquired is refused:
    /// `spec.podName` goes back to the source, `spec.sourcePod` is cleared,
    /// and the claim says why in its Migration condition and an Event.
    RefuseMigration(Unavailable),
    /// The migration target's store serves: remember since when (in
    /// memory; after a restart the delay starts again) and call again.
    NoteTargetServing(&'a PodView),
    /// The target serves, but not yet for the propagation delay: requeue
    /// after what remains of it.
    WaitToReleaseSource(Duration),
    /// Release the migration source (guarded by its `claim-uid`).
    ReleaseSource(Release<'a>),
    /// Copy the released source's workload into `status.migrate`.
    ReportDrain(Workload),
    /// The source drains and its progress is reported: requeue, at growing
    /// intervals.
    WaitForDrain,
    /// The source is done with: clear `status.migrate`, then `spec.sourcePod`.
    CompleteMigration,
    /// The claim is Lost and its migration source is no longer its own: the
    /// migration ends without a pod to stay on. Clear `status.migrate`, then
    /// `spec.sourcePod`, so that the claim binds again from the whole pool,
    /// its old source included (row 10m).
    AbandonMigration,
    /// The spec fails validation ([`ClaimView::invalid`]): say so in the
    /// `Bound` condition (reason `InvalidSpec`) and wait for a fix. Nothing
    /// is done because of the spec meanwhile: no pod is taken, rewritten,
    /// migrated to or rebound; a pod the claim holds stays its own, with its
    /// store.
    ReportInvalid,
    /// A migrating claim's target is lost (deleted, replaced, another's,
    /// failed or its store missing; confirmed live) while its source still
    /// serves it: the claim goes back to the source — `spec.podName` = the
    /// source, `sourcePod` cleared, the Migration condition says why — and
    /// the target, if still ours, is released. The tenant keeps its CN.
    FallBackToSource {
        /// Why the target is lost.
        reason: LossReason,
        /// The target, if it still carries the claim's UID.
        release: Vec<Release<'a>>,
    },
    /// Nothing to do.
    InSync,
}

/// A pod to release, and where it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Release<'a> {
    /// The pod, as read: the release is guarded by its `claim-uid`.
    pub pod: &'a PodView,
    /// Where it goes.
    pub then: AfterRelease,
}

/// Where a released pod goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterRelease {
    /// Draining, and back to Idle once drained.
    Drain,
    /// The pod has failed: retire it (Terminating).
    Retire,
}

impl<'a> Release<'a> {
    fn of(pod: &'a PodView) -> Self {
        let then = if pod.failed { AfterRelease::Retire } else { AfterRelease::Drain };
        Self { pod, then }
    }
}

/// Why cnpool itself starts a migration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationCause {
    /// The pod carries `matrixorigin.io/store-cordon`, or its node is
    /// cordoned (node maintenance).
    Cordoned,
    /// The pod runs an old template of its pool (a template rollout).
    Outdated,
    /// The claim has been Outdated for its pool's `reclaimTimeout`: it moves
    /// whatever the rollout's pace.
    ReclaimTimeout,
}

impl MigrationCause {
    /// What a person reads in the Event.
    pub fn message(self) -> &'static str {
        match self {
            Self::Cordoned => "is cordoned for maintenance",
            Self::Outdated => "runs an old template of its pool",
            Self::ReclaimTimeout => "has run an old template of its pool for its reclaimTimeout",
        }
    }
}

/// Why a claim lost its recorded pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LossReason {
    /// The pod no longer exists.
    PodDeleted,
    /// A pod of the same name but another UID stands in its place.
    PodReplaced,
    /// Another claim's UID is on the pod.
    OwnedByOther,
    /// The pod carries no owner any more: something released it.
    PodReleased,
    /// The pod is being deleted.
    PodDeleting,
    /// The pod has failed.
    PodFailed,
    /// The pod runs but its CN store has been missing from HAKeeper longer
    /// than the bound.
    StoreMissing,
    /// The Go operator bound two claims to one pod; the pod's `claimed-by`
    /// names the other one.
    Misbound,
}

impl LossReason {
    /// A stable identifier for condition reasons and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PodDeleted => "PodDeleted",
            Self::PodReplaced => "PodReplaced",
            Self::OwnedByOther => "OwnedByOther",
            Self::PodReleased => "PodReleased",
            Self::PodDeleting => "PodDeleting",
            Self::PodFailed => "PodFailed",
            Self::StoreMissing => "StoreMissing",
            Self::Misbound => "Misbound",
        }
    }

    /// What a person reads in the condition and the Event.
    pub fn message(self) -> &'static str {
        match self {
            Self::PodDeleted => "the pod this claim was bound to no longer exists",
            Self::PodReplaced => "the pod this claim was bound to was replaced by a new pod of the same name",
            Self::OwnedByOther => "the pod this claim was bound to now belongs to another claim",
            Self::PodReleased => "the pod this claim was bound to was released",
            Self::PodDeleting => "the pod this claim was bound to is being deleted",
            Self::PodFailed => "the pod this claim was bound to has failed",
            Self::StoreMissing => "the CN store of this claim's pod has been missing from HAKeeper for too long",
            Self::Misbound => "the pod this claim points at was bound to another claim by the Go operator",
        }
    }
}

/// Why the pod `spec.podName` asks for cannot be acquired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// No such pod.
    NotFound,
    /// The pod exists but acquire's precondition does not hold.
    Ineligible(Ineligible),
    /// The Go operator bound the pod to this claim, but the operator does
    /// not know its cutover time yet, without which it adopts nothing.
    CutoverUnknown,
}

impl Unavailable {
    /// A stable identifier for condition reasons and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotFound => "NotFound",
            Self::Ineligible(why) => why.as_str(),
            Self::CutoverUnknown => "CutoverUnknown",
        }
    }

    /// What a person reads in the condition.
    pub fn message(self) -> &'static str {
        match self {
            Self::NotFound => "the requested pod does not exist",
            Self::Ineligible(why) => why.message(),
            Self::CutoverUnknown => {
                "bound to this claim by the Go operator; it is adopted once cnpool has read or recorded its \
                 cutover time (ConfigMap cnpool-cutover in the operator's namespace: see the operator's log)"
            }
        }
    }
}

/// The claim's next step; see the module documentation for the table.
pub fn next_claim_step<'a>(input: &ClaimInput<'a, '_>) -> ClaimStep<'a> {
    let claim = input.claim;
    if claim.deleting {
        return finalize(input);
    }
    let step = step_of_live_claim(input);
    let step = if claim.invalid.is_some() { step_of_invalid_claim(step) } else { step };
    // A claim that holds nothing yet acquires before it has its finalizer,
    // which `Record` then writes with the pointer: one write, not two. A pod
    // acquired for a claim deleted before that write carries the UID of no
    // claim, and the orphan sweep releases it. A read leaves nothing behind
    // either. Any other step (one that releases, adopts or marks Lost) needs
    // the finalizer first.
    match step {
        ClaimStep::Acquire { .. } | ClaimStep::AcquirePreBound(_) | ClaimStep::Record(_) => step,
        _ if step.only_reads() => step,
        _ if !claim.has_finalizer => ClaimStep::AddFinalizer,
        _ => step,
    }
}

impl ClaimStep<'_> {
    /// Whether the step only reads (or waits for a cache): it writes nothing.
    pub fn only_reads(&self) -> bool {
        matches!(
            self,
            Self::ConfirmFinalize
                | Self::ConfirmLost(_)
                | Self::ConfirmRefusal
                | Self::ConfirmRecord
                | Self::ConfirmCurrent
                | Self::ReadCandidates
                | Self::AwaitAcquired
                | Self::RefreshStores
        )
    }
}

/// What an invalid claim may still do: read, confirm and record a loss,
/// record what it holds, wait for its store, and end a migration already
/// under way (fall back to its source when the target is lost, refuse an
/// unavailable target, release the source once the target serves, report
/// the drain): a migration left half done would keep a lost target
/// recorded, or two pods held, until the spec is fixed. Every step taken
/// because of the spec (a take, a rewrite of the pod's labels, a rebind,
/// the start of a migration) becomes [`ClaimStep::ReportInvalid`], and so
/// does showing it Bound or in sync: its condition says why it is not
/// served as asked.
fn step_of_invalid_claim(step: ClaimStep<'_>) -> ClaimStep<'_> {
    match step {
        ClaimStep::Acquire { .. }
        | ClaimStep::AcquirePreBound(_)
        | ClaimStep::ReadCandidates
        | ClaimStep::ConfirmCurrent
        | ClaimStep::AwaitAcquired
        | ClaimStep::ReportUnavailable(_)
        | ClaimStep::AdoptLegacy(_)
        | ClaimStep::RewriteBinding(_)
        | ClaimStep::Rebind
        | ClaimStep::StartMigration(..)
        | ClaimStep::MarkBound
        | ClaimStep::InSync => ClaimStep::ReportInvalid,
        step => step,
    }
}

/// Whether the claim as read is the server's current version.
fn claim_is_current(input: &ClaimInput<'_, '_>) -> bool {
    input.read == Read::Live || input.claim_confirmed
}

/// Rows 5–20: the step of a claim not being deleted.
fn step_of_live_claim<'a>(input: &ClaimInput<'a, '_>) -> ClaimStep<'a> {
    let claim = input.claim;
    let held = Holding::of(claim, input.owned, input.pointed, input.source).held;
    match held.as_slice() {
        [] => bind(input),
        [pod] => sync(input, pod),
        // Which pod to keep follows `spec.podName`: a replica whose claim
        // cache lags another's record would release the pod that one keeps.
        _ if input.read == Read::Cached => ClaimStep::ConfirmRecord,
        _ => adopt(claim, &held),
    }
}

/// What a claim holds, as its decision counts it. The controller reads the
/// same to know which store to observe and which migration to track.
#[derive(Clone, Debug, PartialEq)]
pub struct Holding<'a> {
    /// The pods that are ours, but the migration source, by name.
    pub held: Vec<&'a PodView>,
    /// The pod the claim's tenant is served from: the one pod it holds or,
    /// while a migrating claim holds no target yet, its source if still ours.
    pub serving: Option<&'a PodView>,
}

impl<'a> Holding<'a> {
    /// Reads it from the pods carrying the claim's UID, the pointed pod and
    /// the migration source.
    pub fn of(
        claim: &ClaimView,
        owned: &'a [PodView],
        pointed: Option<&'a PodView>,
        source: Option<&'a PodView>,
    ) -> Self {
        let held: Vec<&PodView> =
            ours(claim, owned, pointed).into_iter().filter(|pod| !claim.is_source(&pod.name)).collect();
        let serving = match held.as_slice() {
            [] => source.filter(|pod| claim.is_source(&pod.name) && pod.is_owned_by(&claim.uid)),
            [pod] => Some(*pod),
            _ => None,
        };
        Self { held, serving }
    }

    /// The one pod held, if exactly one.
    pub fn one(&self) -> Option<&'a PodView> {
        match self.held.as_slice() {
            [pod] => Some(*pod),
            _ => None,
        }
    }
}

/// Every pod carrying the claim's UID, by name, each once.
fn ours<'a>(claim: &ClaimView, owned: &'a [PodView], pointed: Option<&'a PodView>) -> Vec<&'a PodView> {
    let uid = claim.uid.as_str();
    let mut pods: Vec<&PodView> = owned.iter().chain(pointed).filter(|pod| pod.is_owned_by(uid)).collect();
    pods.sort_by_key(|pod| (pod.name.as_str(), pod.uid.as_str()));
    // The pointed pod is usually also in `owned`.
    pods.dedup_by(|a, b| a.name == b.name && a.uid == b.uid);
    pods
}

fn finalize<'a>(input: &ClaimInput<'a, '_>) -> ClaimStep<'a> {
    match (input.claim.has_finalizer, input.read) {
        (false, _) => ClaimStep::InSync,
        (true, Read::Cached) => ClaimStep::ConfirmFinalize,
        (true, Read::Live) => {
            let release = ours(input.claim, input.owned, input.pointed).into_iter().map(Release::of).collect();
            ClaimStep::Finalize { release }
        }
    }
}

fn adopt<'a>(claim: &ClaimView, held: &[&'a PodView]) -> ClaimStep<'a> {
    let keep = pod_to_keep(claim, held);
    let release = held.iter().copied().filter(|pod| !std::ptr::eq(*pod, keep)).map(Release::of).collect();
    ClaimStep::Adopt { keep, release }
}

/// Of the several pods a claim holds (`held`, sorted by name, not empty),
/// the one it keeps: the one `spec.podName` names, else the lowest name.
pub fn pod_to_keep<'a>(claim: &ClaimView, held: &[&'a PodView]) -> &'a PodView {
    let named = held.iter().copied().find(|pod| claim.pod_name.as_deref() == Some(pod.name.as_str()));
    named.unwrap_or(held[0])
}

/// Rows 6–13: the claim holds no pod.
fn bind<'a>(input: &ClaimInput<'a, '_>) -> ClaimStep<'a> {
    let claim = input.claim;
    match legacy_adoptable(input) {
        Some(Ok(pod)) => return ClaimStep::AdoptLegacy(pod),
        Some(Err(why)) => return ClaimStep::ReportUnavailable(why),
        None => {}
    }
    if let Some(reason) = why_recorded_pod_is_gone(input) {
        return lose_target(input, reason, Vec::new());
    }
    if let Some((reason, release)) = why_source_is_lost(input) {
        return lose(input, reason, release);
    }
    if claim.phase == Some(ClaimPhase::Lost) {
        if claim.claim_set.is_some() {
            return ClaimStep::InSync;
        }
        if source_let_go(input) {
            return ClaimStep::AbandonMigration;
        }
        if claim.pod_name.is_some() {
            return ClaimStep::Rebind;
        }
    }
    match claim.pod_name.as_deref() {
        Some(requested) => match acquire_pre_bound(input, requested) {
            // A named target is taken now or not at all: nothing is stolen.
            ClaimStep::ReportUnavailable(why) if claim.source_pod.is_some() => match input.read {
                Read::Cached => ClaimStep::ConfirmRefusal,
                Read::Live => ClaimStep::RefuseMigration(why),
            },
            step => step,
        },
        None => acquire(input),
    }
}

/// Row 13: a pod from the pool, best first, once the guards allow a take.
fn acquire<'a>(input: &ClaimInput<'a, '_>) -> ClaimStep<'a> {
    let unseen = |pod_uid: &str| !input.owned.iter().any(|pod| pod.uid == pod_uid);
    if input.acquired_lately.is_some_and(unseen) {
        return ClaimStep::AwaitAcquired;
    }
    let Some(candidates) = input.candidates else {
        return ClaimStep::ReadCandidates;
    };
    let candidates = rank_candidates(input.claim, candidates.iter().copied(), input.pools);
    if !candidates.is_empty() && !claim_is_current(input) {
        return ClaimStep::ConfirmCurrent;
    }
    ClaimStep::Acquire { candidates }
}

/// The pointed pod, when adopt-legacy's precondition holds on it exactly,
/// the claim has not recorded another pod's UID under that name (a pod
/// replaced since is not the one the claim was bound to) and the claim
/// was created before the cutover time; `Err` while that time is unknown
/// (row 6w). `None` for a claim created since: the name on the pod is a
/// deleted claim's.
fn legacy_adoptable<'a>(input: &ClaimInput<'a, '_>) -> Option<Result<&'a PodView, Unavailable>> {
    let claim = input.claim;
    let pod = input.pointed.filter(|pod| {
        claim.pod_name.as_deref() == Some(pod.name.as_str())
            && claim.recorded_pod_uid.as_ref().is_none_or(|uid| *uid == pod.uid)
            && !claim.is_source(&pod.name)
            && pod.phase == Some(PodPhase::Bound)
            && pod.claimed_by.as_deref() == Some(claim.name.as_str())
            && pod.claim_uid.is_none()
    })?;
    match input.adopt_legacy_before {
        None => Some(Err(Unavailable::CutoverUnknown)),
        Some(cutover) => claim.created.filter(|created| *created < cutover).map(|_| Ok(pod)),
    }
}

/// Why the recorded pod no longer belongs to the claim, given that the claim
/// holds no pod; `None` when there is no record to lose.
fn why_recorded_pod_is_gone(input: &ClaimInput<'_, '_>) -> Option<LossReason> {
    let claim = input.claim;
    if claim.phase == Some(ClaimPhase::Lost) {
        return None;
    }
    let recorded = claim.recorded_pod()?;
    if recorded.name().is_some_and(|name| claim.is_source(name)) {
        return None;
    }
    let found = input.pointed.filter(|pod| Some(pod.name.as_str()) == recorded.name());
    let Some(pod) = found else {
        return Some(LossReason::PodDeleted);
    };
    Some(match recorded {
        RecordedPod::ByUid { uid, .. } if pod.uid != uid => LossReason::PodReplaced,
        RecordedPod::ByName { .. } if pod.claimed_by.as_ref().is_some_and(|name| *name != claim.name) => {
            LossReason::Misbound
        }
        _ if pod.claim_uid.is_some() => LossReason::OwnedByOther,
        _ => LossReason::PodReleased,
    })
}

/// Row 8s: a migrating claim that holds no target yet still serves its
/// tenant from the source. When that pod is gone, another's, or in trouble
/// (rows 15/16), the claim has lost it like any held pod; it then takes a
/// target as a Lost claim does. `None` while the source serves, or once the
/// claim is Lost.
fn why_source_is_lost<'a>(input: &ClaimInput<'a, '_>) -> Option<(LossReason, Vec<Release<'a>>)> {
    let claim = input.claim;
    let name = claim.source_pod.as_deref()?;
    if claim.phase == Some(ClaimPhase::Lost) {
        return None;
    }
    let Some(source) = input.source.filter(|pod| pod.name == name) else {
        return Some((LossReason::PodDeleted, Vec::new()));
    };
    if !source.is_owned_by(&claim.uid) {
        let reason = if source.claim_uid.is_some() { LossReason::OwnedByOther } else { LossReason::PodReleased };
        return Some((reason, Vec::new()));
    }
    let reason = trouble(input, source)?;
    Some((reason, vec![release_lost(source, reason)]))
}

/// Row 10m: whether the claim migrates from a pod that is no longer its
/// own (gone, released, another's).
fn source_let_go(input: &ClaimInput<'_, '_>) -> bool {
    let Some(name) = input.claim.source_pod.as_deref() else { return false };
    !input.source.is_some_and(|pod| pod.name == name && pod.is_owned_by(&input.claim.uid))
}

fn acquire_pre_bound<'a>(input: &ClaimInput<'a, '_>, requested: &str) -> ClaimStep<'a> {
    let Some(pod) = input.pointed.filter(|pod| pod.name == requested) else {
        return ClaimStep::ReportUnavailable(Unavailable::NotFound);
    };
    match eligibility(input.claim, pod, input.pools) {
        Ok(()) if !claim_is_current(input) => ClaimStep::ConfirmCurrent,
        Ok(()) => ClaimStep::AcquirePreBound(pod),
        Err(why) => ClaimStep::ReportUnavailable(Unavailable::Ineligible(why)),
    }
}

/// Rows 14–20: the claim holds exactly `pod`.
fn sync<'a>(input: &ClaimInput<'a, '_>, pod: &'a PodView) -> ClaimStep<'a> {
    let claim = input.claim;
    if !is_recorded(claim, pod) {
        // A pod cache that lags the claim's own writes still shows a pod the
        // claim released before it took the one it records, or, after a
        // loss, the lost pod it released: recording that one would point
        // the claim back at it, and the next live read would clear it again.
        let records_another = claim.recorded_pod_uid.as_deref().is_some_and(|uid| uid != pod.uid)
            && !claim.recorded_pod_name.as_deref().is_some_and(|name| claim.is_source(name));
        // Nor is a pod the cache shows as ours, that this process did not
        // just acquire, recorded from the cache: the claim may have held it
        // before the cache fell behind (released, even deleted, since), and
        // would point at a pod it no longer has, and lose it.
        let just_acquired = input.acquired_lately == Some(pod.uid.as_str());
        if input.read == Read::Cached && (records_another || pod.deleting || pod.failed || !just_acquired) {
            return ClaimStep::ConfirmRecord;
        }
        return ClaimStep::Record(pod);
    }
    if let Some(reason) = trouble(input, pod) {
        return lose_target(input, reason, vec![release_lost(pod, reason)]);
    }
    if !binding_agrees(claim, pod) {
        return ClaimStep::RewriteBinding(pod);
    }
    if !store_serves(claim, input.store) {
        return ClaimStep::WaitForStore(missing_store_left(input, pod));
    }
    // The status describes the pod once its store serves, in the write that
    // shows the claim Bound (a migration's target: the write that moves the
    // status from the source to it).
    if claim.status_pod_uid.as_deref() != Some(pod.uid.as_str()) {
        return ClaimStep::MarkBound;
    }
    match claim.phase {
        Some(ClaimPhase::Bound | ClaimPhase::Outdated) if claim.source_pod.is_some() => migrate(input, pod),
        Some(ClaimPhase::Bound | ClaimPhase::Outdated) if pod.cordoned => {
            ClaimStep::StartMigration(pod, MigrationCause::Cordoned)
        }
        Some(ClaimPhase::Bound) if template_of(input, pod) == Some(Template::Old) => ClaimStep::MarkOutdated,
        Some(ClaimPhase::Outdated) if template_of(input, pod) == Some(Template::Current) => ClaimStep::MarkBound,
        // Marked Outdated without saying since when (by the Go operator or
        // an older cnpool): recorded now, for the reclaim timeout to count.
        Some(ClaimPhase::Outdated)
            if template_of(input, pod) == Some(Template::Old) && claim.outdated_since.is_none() =>
        {
            ClaimStep::MarkOutdated
        }
        Some(ClaimPhase::Outdated) if template_of(input, pod) == Some(Template::Old) && claim.claim_set.is_none() => {
            match reclaim_left(input, pod) {
                _ if input.may_roll => ClaimStep::StartMigration(pod, MigrationCause::Outdated),
                Some(Duration::ZERO) => ClaimStep::StartMigration(pod, MigrationCause::ReclaimTimeout),
                left => ClaimStep::AwaitRollout(left),
            }
        }
        Some(ClaimPhase::Bound | ClaimPhase::Outdated) => ClaimStep::InSync,
        _ => ClaimStep::MarkBound,
    }
}

/// Which template of its pool a held pod runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Template {
    Current,
    Old,
}

/// The template `pod` runs: old when labelled outdated or when its revision
/// label differs from its pool's; `None` when that cannot be told (no
/// revision label, as on the Go operator's pods, or an unknown pool), so
/// that nothing is rolled on a guess.
fn template_of(input: &ClaimInput<'_, '_>, pod: &PodView) -> Option<Template> {
    if pod.outdated {
        return Some(Template::Old);
    }
    let pool = input.pools.iter().find(|pool| pod.pool.as_ref() == Some(&pool.name))?;
    let revision = pod.revision.as_ref()?;
    Some(if *revision == pool.current_revision { Template::Current } else { Template::Old })
}

/// How long before the reclaim timeout of `pod`'s pool ends the wait of the
/// claim, Outdated on it, for the rollout's pace; `None` without a timeout.
fn reclaim_left(input: &ClaimInput<'_, '_>, pod: &PodView) -> Option<Duration> {
    let pool = input.pools.iter().find(|pool| pod.pool.as_ref() == Some(&pool.name))?;
    let timeout = SignedDuration::try_from(pool.reclaim_timeout?).unwrap_or(SignedDuration::MAX);
    // A condition time ahead of this clock counts as now: never a wait longer than the timeout.
    let outdated_for = input.now.duration_since(input.claim.outdated_since?).max(SignedDuration::ZERO);
    let left = timeout.checked_sub(outdated_for).unwrap_or(SignedDuration::ZERO);
    Some(if left.is_positive() { left.unsigned_abs() } else { Duration::ZERO })
}

/// Rows 20m–25: the claim holds its recorded target, whose store serves.
fn migrate<'a>(input: &ClaimInput<'a, '_>, target: &'a PodView) -> ClaimStep<'a> {
    let claim = input.claim;
    let Some(since) = input.serving_since else {
        return ClaimStep::NoteTargetServing(target);
    };
    let source = input.source.filter(|pod| claim.is_source(&pod.name));
    match source {
        Some(pod) if pod.is_owned_by(&claim.uid) => {
            let delay = SignedDuration::try_from(input.propagation_delay).unwrap_or(SignedDuration::MAX);
            let remaining = delay.checked_sub(input.now.duration_since(since)).unwrap_or(SignedDuration::ZERO);
            if remaining.is_positive() && !pod.deleting && !pod.failed {
                ClaimStep::WaitToReleaseSource(remaining.unsigned_abs())
            } else {
                ClaimStep::ReleaseSource(Release::of(pod))
            }
        }
        Some(pod) if drains(pod) => match pod.workload {
            Some(workload) if claim.drain_reported != Some(workload) => ClaimStep::ReportDrain(workload),
            _ => ClaimStep::WaitForDrain,
        },
        _ => ClaimStep::CompleteMigration,
    }
}

/// Whether a released source is still draining: unowned, phase Draining,
/// not going away.
fn drains(pod: &PodView) -> bool {
    pod.claim_uid.is_none() && pod.phase == Some(PodPhase::Draining) && !pod.deleting
}

fn is_recorded(claim: &ClaimView, pod: &PodView) -> bool {
    claim.pod_name.is_some()
        && claim.recorded_pod_uid.as_deref() == Some(pod.uid.as_str())
        && claim.recorded_pod_name.as_deref() == Some(pod.name.as_str())
}

/// Why the held, recorded pod can no longer serve the claim.
fn trouble(input: &ClaimInput<'_, '_>, pod: &PodView) -> Option<LossReason> {
    if pod.deleting {
        return Some(LossReason::PodDeleting);
    }
    if pod.failed {
        return Some(LossReason::PodFailed);
    }
    match input.store {
        // A store cannot have been missing for longer than its pod existed.
        ObservedStore::Missing { since } if has_elapsed(since.max(pod.created), input.now, store_patience(input)) => {
            Some(LossReason::StoreMissing)
        }
        _ => None,
    }
}

/// How long the held pod's store may be missing before the claim is lost:
/// the store-missing bound while the claim serves from the pod (Bound or
/// Outdated), which rides out a HAKeeper hiccup under a tenant; none for a
/// claim still waiting to be shown Bound, which has no tenant there to keep
/// and would only be bound later.
fn store_patience(input: &ClaimInput<'_, '_>) -> Duration {
    match input.claim.phase {
        Some(ClaimPhase::Bound | ClaimPhase::Outdated) => input.store_missing_bound,
        _ => Duration::ZERO,
    }
}

/// How a pod lost for `reason` is released. One whose store stayed missing
/// that long has failed as a CN: a drain has nothing to wait for, and
/// retiring it frees the room its pool needs to replace it (an Idle pod is
/// judged the same way).
fn release_lost(pod: &PodView, reason: LossReason) -> Release<'_> {
    match reason {
        LossReason::StoreMissing => Release { pod, then: AfterRelease::Retire },
        _ => Release::of(pod),
    }
}

/// How long a missing store may stay missing before the claim is lost.
fn missing_store_left(input: &ClaimInput<'_, '_>, pod: &PodView) -> Option<Duration> {
    let ObservedStore::Missing { since } = input.store else { return None };
    let missing_for = input.now.duration_since(since.max(pod.created)).unsigned_abs();
    Some(store_patience(input).saturating_sub(missing_for))
}

/// How long before the store the claim's tenant is served from
/// ([`Holding::serving`]) will have been missing for the bound, while it is
/// missing and the claim is shown served: whatever step is taken meanwhile,
/// the claim is decided again then, so that its loss is never found late
/// (I2). `None` when no such deadline is ahead.
pub fn store_loss_due_in(input: &ClaimInput<'_, '_>) -> Option<Duration> {
    let serving = Holding::of(input.claim, input.owned, input.pointed, input.source).serving?;
    missing_store_left(input, serving).filter(|left| !left.is_zero())
}

/// The held (or recorded) pod is lost: a migrating claim whose source still
/// serves it falls back to that source; any other claim is Lost.
fn lose_target<'a>(input: &ClaimInput<'a, '_>, reason: LossReason, release: Vec<Release<'a>>) -> ClaimStep<'a> {
    let claim = input.claim;
    let source_serves = input.source.is_some_and(|source| {
        claim.is_source(&source.name) && source.is_owned_by(&claim.uid) && !source.deleting && !source.failed
    });
    match lose(input, reason, release) {
        ClaimStep::MarkLost { reason, release } if source_serves => ClaimStep::FallBackToSource { reason, release },
        step => step,
    }
}

fn lose<'a>(input: &ClaimInput<'a, '_>, reason: LossReason, release: Vec<Release<'a>>) -> ClaimStep<'a> {
    match input.read {
        Read::Cached => ClaimStep::ConfirmLost(reason),
        Read::Live if reason == LossReason::StoreMissing && !input.stores_listed => ClaimStep::RefreshStores,
        Read::Live => ClaimStep::MarkLost { reason, release },
    }
}

/// Whether the pod shows phase Bound and records what the claim's spec asks.
fn binding_agrees(claim: &ClaimView, pod: &PodView) -> bool {
    let recorded = pod.binding.as_deref().map(Binding::parse);
    pod.phase == Some(PodPhase::Bound)
        && recorded == Some(Ok(Binding::of_claim(claim)))
        && claim.applicable_pod_labels().all(|(key, value)| pod.labels.get(key) == Some(value))
}

fn store_serves(claim: &ClaimView, store: ObservedStore<'_>) -> bool {
    matches!(store, ObservedStore::Registered(store)
        if store.work_state == WorkState::Working && store.labels == claim.cn_labels)
}

#[cfg(test)]
mod tests;
