//! Performs the step the core named: reads that bypass the cache, guarded
//! pod writes through [`crate::ownership::transition`], and the claim
//! writes of the `status` part. A refused guard is never retried as it
//! was: the claim is decided again on what is read next.

use cnpool_api::{CNClaim, ClaimPhase, labels};
use cnpool_core::claim::{AfterRelease, ClaimStep, LossReason, Release, next_claim_step};
use cnpool_core::model::{ClaimView, PodView, Read};
use cnpool_registry::StoreRegistry;
use k8s_openapi::api::core::v1::Pod;
use kube::{Resource, ResourceExt};

use super::Next;
use super::migration::{self, BackOnSource, MigrationEnd};
use super::observe::{Observed, Snapshot, candidate_pods, why_no_pod};
use super::status::{
    self, BOUND_CONDITION, MIGRATION_CONDITION, changed_since_read, replace, replace_claim, write_condition,
};
use crate::conditions;
use crate::context::Context;
use crate::error::Error;
use crate::key::{Key, Kind};
use crate::lately::ACQUIRED_LATELY;
use crate::ownership::{self, Outcome, Transition};

/// Reads what the claim's decision needs, asks the core, performs the step.
pub(super) async fn step<R: StoreRegistry>(ctx: &Context<R>, snap: &mut Snapshot, key: &Key) -> Result<Next, Error> {
    let view = cnpool_core::convert::claim_view(&snap.claim)?;
    snap.refresh(ctx, &view).await?;
    let observed = Observed::read(ctx, snap)?;
    let candidates = observed.candidate_views();
    let input = observed.input(ctx, snap, candidates.as_deref());
    let step = next_claim_step(&input);
    #[cfg(feature = "sabotage")]
    let step = crate::sabotage::loss_from_cache(step, &input);
    tracing::trace!(claim = %observed.view.name, ?step, "claim step");
    // Whatever the step, a store missing under the claim's tenant is looked
    // at again when its bound runs out: a loss is never found late (I2).
    let loss_due = cnpool_core::claim::store_loss_due_in(&input).map(|left| left + ctx.config.requeue_min);
    Ok(match (perform(ctx, snap, key, &observed, step).await?, loss_due) {
        (Next::Requeue(after), Some(due)) => Next::Requeue(after.min(due)),
        (Next::AwaitChange, Some(due)) => Next::Requeue(due),
        (next, _) => next,
    })
}

async fn perform<R: StoreRegistry>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    key: &Key,
    observed: &Observed,
    step: ClaimStep<'_>,
) -> Result<Next, Error> {
    let view = &observed.view;
    match step {
        ClaimStep::AddFinalizer => {
            let mut updated = snap.claim.clone();
            updated.finalizers_mut().push(labels::CLAIM_FINALIZER.to_owned());
            replace_claim(ctx, snap, &updated).await
        }
        ClaimStep::ConfirmFinalize
        | ClaimStep::ConfirmLost(_)
        | ClaimStep::ConfirmRefusal
        | ClaimStep::ConfirmRecord => {
            if snap.read == Read::Live {
                // Already live: a second confirmation would loop.
                return Ok(Next::Requeue(ctx.backoff.failure(Kind::Claim, key)));
            }
            read_live(ctx, snap).await
        }
        ClaimStep::ConfirmCurrent => Ok(match snap.confirm_current(ctx).await? {
            true => Next::Again,
            false => changed_since_read(ctx, &snap.claim),
        }),
        ClaimStep::ReadCandidates => {
            snap.candidates = Some(candidate_pods(ctx, view, &snap.namespace(), &observed.pools));
            Ok(Next::Again)
        }
        // Its watch event wakes the claim once the cache shows the pod.
        ClaimStep::AwaitAcquired => Ok(changed_since_read(ctx, &snap.claim)),
        ClaimStep::RefreshStores => {
            // A pool whose HAKeeper is not known has nothing to list; its
            // conditions say why.
            let cluster = observed.serving_pool.as_deref().map(|pool| ctx.cluster_of_pool(&snap.namespace(), pool));
            if let Some(Ok(cluster)) = cluster {
                crate::registry_poll::refresh_stores(ctx, &cluster).await?;
            }
            snap.stores_listed = true;
            Ok(Next::Again)
        }
        ClaimStep::Finalize { release } => finalize(ctx, snap, observed, &release).await,
        ClaimStep::Adopt { keep, release } => {
            tracing::info!(claim = %view.name, keep = %keep.name, extra = release.len(), "claim holds several pods; keeping one");
            for pod in &release {
                let Some(raw) = observed.raw(pod.pod) else { continue };
                match ownership::transition(&ctx.client, &raw, release_transition(view, *pod), ctx.now()).await? {
                    Outcome::Applied(written) => snap.put_pod(ctx, &raw, *written),
                    Outcome::Stale | Outcome::NotApplicable => return Ok(changed_since_read(ctx, &snap.claim)),
                }
            }
            Ok(Next::Again)
        }
        ClaimStep::AdoptLegacy(pod) => adopt_legacy(ctx, snap, observed, pod).await,
        ClaimStep::AcquirePreBound(pod) => {
            let Some(raw) = observed.raw(pod) else {
                return Ok(changed_since_read(ctx, &snap.claim));
            };
            Ok(match acquire(ctx, snap, key, view, pod, &raw).await? {
                true => Next::Again,
                false => changed_since_read(ctx, &snap.claim),
            })
        }
        ClaimStep::ReportUnavailable(why) => {
            let message = format!("requested pod {}: {}", view.pod_name.as_deref().unwrap_or_default(), why.message());
            write_condition(ctx, snap, BOUND_CONDITION, "False", why.as_str(), &message, true).await?;
            Ok(Next::Requeue(ctx.backoff.wait(Kind::Claim, key)))
        }
        ClaimStep::Acquire { candidates } => acquire_first(ctx, snap, key, observed, &candidates).await,
        ClaimStep::Record(pod) => status::record(ctx, snap, view, pod).await,
        ClaimStep::RewriteBinding(pod) => {
            let Some(raw) = observed.raw(pod) else {
                return Ok(changed_since_read(ctx, &snap.claim));
            };
            match ownership::transition(&ctx.client, &raw, Transition::Rewrite(view), ctx.now()).await? {
                Outcome::Applied(written) => {
                    snap.put_pod(ctx, &raw, *written);
                    Ok(Next::Again)
                }
                Outcome::Stale | Outcome::NotApplicable => Ok(changed_since_read(ctx, &snap.claim)),
            }
        }
        ClaimStep::MarkLost { reason, release } => mark_lost(ctx, snap, observed, reason, &release).await,
        ClaimStep::Rebind => status::rebind(ctx, snap, view).await,
        ClaimStep::WaitForStore(lost_in) => {
            // The store's change wakes the claim at once.
            ctx.wake.expect_claim(&key.0, &key.1);
            status::show_store_wait(ctx, snap, view, observed.held()).await?;
            Ok(Next::Requeue(match lost_in {
                // A missing store is looked at again when its bound runs out.
                Some(left) => left + ctx.config.requeue_min,
                None => ctx.backoff.wait(Kind::Claim, key),
            }))
        }
        ClaimStep::MarkBound => {
            if !status::mark_bound(ctx, snap, view, observed.held(), observed.store.as_ref()).await? {
                // The claim changed since it was read: its watch wakes it.
                return Ok(changed_since_read(ctx, &snap.claim));
            }
            ctx.backoff.settled(Kind::Claim, key);
            // A migration's target shown Bound goes on to release the source.
            Ok(Next::Again)
        }
        ClaimStep::StartMigration(pod, cause) => migration::start_migration(ctx, snap, view, pod, cause).await,
        ClaimStep::MarkOutdated => migration::mark_outdated(ctx, snap, view).await,
        ClaimStep::AwaitRollout(reclaim_in) => {
            ctx.backoff.settled(Kind::Claim, key);
            // The end of a migration in its pool wakes it sooner.
            let resync = ctx.config.resync;
            Ok(Next::Requeue(reclaim_in.map_or(resync, |left| resync.min(left + ctx.config.requeue_min))))
        }
        ClaimStep::RefuseMigration(why) => {
            let target = view.pod_name.as_deref().unwrap_or_default();
            let message = format!("target pod {target}: {}", why.message());
            migration::end_migration_on_source(ctx, snap, view, BackOnSource::Refused, &message).await
        }
        ClaimStep::FallBackToSource { reason, release } => {
            let target = view.pod_name.as_deref().unwrap_or_default();
            let message = format!("target pod {target}: {}", reason.message());
            let next = migration::end_migration_on_source(ctx, snap, view, BackOnSource::TargetLost, &message).await?;
            if matches!(next, Next::Again) {
                return release_pods(ctx, snap, observed, &release).await;
            }
            Ok(next)
        }
        ClaimStep::ReportInvalid => {
            status::report_invalid(ctx, snap, view).await?;
            // A fix is a change of the claim, which wakes it.
            Ok(Next::Requeue(ctx.config.resync))
        }
        ClaimStep::NoteTargetServing(target) => {
            ctx.migrations.target_serving(&view.uid, &target.uid);
            Ok(Next::Again)
        }
        ClaimStep::WaitToReleaseSource(remaining) => Ok(Next::Requeue(remaining.max(ctx.config.requeue_min))),
        ClaimStep::ReleaseSource(release) => release_source(ctx, snap, observed, release).await,
        ClaimStep::ReportDrain(workload) => {
            migration::report_drain(ctx, snap, view, workload).await?;
            Ok(Next::Requeue(ctx.backoff.wait(Kind::Claim, key)))
        }
        ClaimStep::WaitForDrain => Ok(Next::Requeue(ctx.backoff.wait(Kind::Claim, key))),
        ClaimStep::CompleteMigration => migration::end_migration(ctx, snap, view, MigrationEnd::Completed).await,
        ClaimStep::AbandonMigration => migration::end_migration(ctx, snap, view, MigrationEnd::Abandoned).await,
        ClaimStep::InSync => {
            ctx.backoff.settled(Kind::Claim, key);
            Ok(if view.deleting { Next::AwaitChange } else { Next::Requeue(ctx.config.resync) })
        }
    }
}

/// Reads the claim and its pods live; done when the claim is gone.
async fn read_live<R>(ctx: &Context<R>, snap: &mut Snapshot) -> Result<Next, Error> {
    Ok(if snap.read_live(ctx).await? { Next::Again } else { Next::AwaitChange })
}

fn release_transition<'a>(view: &'a ClaimView, release: Release<'_>) -> Transition<'a> {
    Transition::Release { claim_uid: &view.uid, then: release.then }
}

/// Acquires `pod` (read as `raw`) for the claim; `false` when the guard
/// failed: someone else took it, or it changed, since it was read.
async fn acquire<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    key: &Key,
    view: &ClaimView,
    pod: &PodView,
    raw: &Pod,
) -> Result<bool, Error> {
    match ownership::transition(&ctx.client, raw, Transition::Acquire(view), ctx.now()).await? {
        Outcome::Applied(written) => {
            ctx.pods_taken_lately.note(&pod.uid);
            ctx.claims_took_lately.note(&view.uid, Some(&pod.uid));
            // Progress: a failure from here on retries from the shortest delay.
            ctx.backoff.settled(Kind::Claim, key);
            snap.put_pod(ctx, raw, *written);
            Ok(true)
        }
        Outcome::Stale | Outcome::NotApplicable => Ok(false),
    }
}

/// Tries the candidates best first, a few per reconcile, skipping those
/// another worker reserved; when none is taken, says why and requeues.
async fn acquire_first<R: Send + Sync>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    key: &Key,
    observed: &Observed,
    candidates: &[&PodView],
) -> Result<Next, Error> {
    let view = &observed.view;
    let unreserved = candidates
        .iter()
        .filter_map(|pod| Some((*pod, observed.raw(pod)?)))
        .filter(|(pod, _)| ctx.pods_taken_lately.reserve(&pod.uid));
    for (pod, raw) in unreserved.take(ctx.config.acquire_attempts) {
        if acquire(ctx, snap, key, view, pod, &raw).await? {
            return Ok(Next::Again);
        }
        // Taken by someone else since the cache showed it: next.
        ctx.pods_taken_lately.note(&pod.uid);
    }
    // A Lost claim keeps the condition that says why it was lost while it
    // waits for a new pod; a migrating one is still bound, and says why its
    // migration waits.
    if candidates.is_empty() && (view.source_pod.is_some() || view.phase != Some(ClaimPhase::Lost)) {
        let condition = if view.source_pod.is_some() { MIGRATION_CONDITION } else { BOUND_CONDITION };
        let shown = snap.claim.status.as_ref().and_then(|status| conditions::find(&status.conditions, condition));
        let wait = why_no_pod(ctx, view, &snap.namespace(), shown).await?;
        status::show_pod_wait(ctx, snap, condition, &wait).await?;
    }
    // A pod held back as acquired lately comes back when that note expires,
    // with no event if its acquire was refused without a change: the wait
    // for capacity must not outgrow the note.
    let delay =
        if candidates.is_empty() { ctx.backoff.wait(Kind::Claim, key) } else { ctx.backoff.failure(Kind::Claim, key) };
    let held_back = observed.candidates.as_ref().is_some_and(|read| read.held_back);
    Ok(Next::Requeue(if held_back { delay.min(ACQUIRED_LATELY) } else { delay }))
}

async fn adopt_legacy<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    observed: &Observed,
    pod: &PodView,
) -> Result<Next, Error> {
    let Some(raw) = observed.raw(pod) else {
        return Ok(changed_since_read(ctx, &snap.claim));
    };
    match ownership::transition(&ctx.client, &raw, Transition::AdoptLegacy(&observed.view), ctx.now()).await? {
        Outcome::Applied(written) => {
            snap.put_pod(ctx, &raw, *written);
            let note = format!("adopted pod {} bound by the Go operator", pod.name);
            ctx.event(&snap.claim.object_ref(&()), false, "AdoptedLegacy", "Adopt", note);
            Ok(Next::Again)
        }
        Outcome::Stale | Outcome::NotApplicable => read_live(ctx, snap).await,
    }
}

/// Releases every pod carrying the claim's UID, then drops the finalizer.
async fn finalize<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    observed: &Observed,
    release: &[Release<'_>],
) -> Result<Next, Error> {
    let view = &observed.view;
    for pod in release {
        let Some(raw) = observed.raw(pod.pod) else { continue };
        let released = match ownership::transition(&ctx.client, &raw, release_transition(view, *pod), ctx.now()).await?
        {
            Outcome::Applied(_) => {
                let action = if pod.then == AfterRelease::Retire { "retired" } else { "released" };
                tracing::info!(claim = %view.name, pod = %raw.name_any(), action, "claim let go of its pod");
                true
            }
            // Gone, or no longer ours: nothing of ours to release.
            Outcome::NotApplicable => true,
            Outcome::Stale => false,
        };
        if !released {
            return Ok(changed_since_read(ctx, &snap.claim));
        }
    }
    let mut updated: CNClaim = snap.claim.clone();
    updated.finalizers_mut().retain(|finalizer| finalizer != labels::CLAIM_FINALIZER);
    if replace(ctx, &updated).await?.is_some() {
        tracing::info!(claim = %view.name, released = release.len(), "claim finalized");
        ctx.migrations.end(&view.uid, None);
    }
    Ok(Next::AwaitChange)
}

/// Marks the claim Lost, then releases what still carries its UID.
async fn mark_lost<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    observed: &Observed,
    reason: LossReason,
    release: &[Release<'_>],
) -> Result<Next, Error> {
    let view = &observed.view;
    if !status::mark_lost(ctx, snap, view, reason).await? {
        // The claim changed since the live read: decide again.
        return Ok(changed_since_read(ctx, &snap.claim));
    }
    // What it took is gone: a replacement may be taken at once.
    ctx.claims_took_lately.note(&view.uid, None);
    release_pods(ctx, snap, observed, release).await
}

/// Releases what still carries the claim's UID of a pod it lost. A pod that
/// changed since it was read (typically: it is gone) is read again live
/// before the next decision: decided again on the same read, the claim
/// would only be found Lost again and release the same pod again, a refused
/// patch each time until the reconcile's steps ran out.
async fn release_pods<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    observed: &Observed,
    release: &[Release<'_>],
) -> Result<Next, Error> {
    let mut refused = false;
    for pod in release {
        let Some(raw) = observed.raw(pod.pod) else { continue };
        match ownership::transition(&ctx.client, &raw, release_transition(&observed.view, *pod), ctx.now()).await? {
            Outcome::Applied(written) => snap.put_pod(ctx, &raw, *written),
            Outcome::Stale | Outcome::NotApplicable => refused = true,
        }
    }
    if refused { read_live(ctx, snap).await } else { Ok(Next::Again) }
}

async fn release_source<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    observed: &Observed,
    release: Release<'_>,
) -> Result<Next, Error> {
    let Some(raw) = observed.raw(release.pod) else {
        return Ok(changed_since_read(ctx, &snap.claim));
    };
    match ownership::transition(&ctx.client, &raw, release_transition(&observed.view, release), ctx.now()).await? {
        Outcome::Applied(written) => {
            tracing::info!(claim = %observed.view.name, pod = %release.pod.name, "claim released its migration source");
            snap.put_pod(ctx, &raw, *written);
            Ok(Next::Again)
        }
        // Changed or gone since read: decide again on a fresh read.
        Outcome::Stale | Outcome::NotApplicable => Ok(changed_since_read(ctx, &snap.claim)),
    }
}
