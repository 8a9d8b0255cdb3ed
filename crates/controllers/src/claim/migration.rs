//! The claim's own writes that move it between pods of its pool: phase
//! Outdated (a template rollout), and a migration's start, drain report and
//! end (DESIGN §2, "Migrate" and "Outdated"), each at the resourceVersion
//! the decision read.

use cnpool_api::{CNClaimStatus, ClaimPhase, MigrateStatus, OUTDATED_CONDITION, PodRef, Workload};
use cnpool_core::claim::MigrationCause;
use cnpool_core::model::{ClaimView, PodView};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;

use super::Next;
use super::observe::Snapshot;
use super::status::{MIGRATION_CONDITION, changed_since_read, replace, replace_status, set_condition, write_condition};
use crate::context::Context;
use crate::error::Error;

/// Sets phase Outdated and the `Outdated` condition, whose transition time
/// the pool's reclaim timeout counts from: the held pod runs an old
/// template of its pool.
pub(super) async fn mark_outdated<R>(ctx: &Context<R>, snap: &mut Snapshot, view: &ClaimView) -> Result<Next, Error> {
    let mut updated = snap.claim.clone();
    let status = updated.status.get_or_insert_with(CNClaimStatus::default);
    let from = status.phase;
    status.phase = Some(ClaimPhase::Outdated);
    let pod = view.pod_name.as_deref().unwrap_or_default();
    let message =
        format!("pod {pod} runs an old template of its pool: the claim moves when the pool's rollout lets it");
    set_condition(
        status,
        OUTDATED_CONDITION,
        "True",
        "OldTemplate",
        &message,
        snap.claim.metadata.generation,
        ctx.now(),
    );
    let Some(written) = replace_status(ctx, &updated).await? else {
        return Ok(changed_since_read(ctx, &snap.claim));
    };
    snap.claim = written;
    if from != Some(ClaimPhase::Outdated) {
        tracing::info!(claim = %view.name, pod, from = from.map(ClaimPhase::as_str), to = "Outdated", "claim's pod runs an old template");
        ctx.event(&snap.claim.object_ref(&()), false, "Outdated", "Rollout", message);
    }
    Ok(Next::Again)
}

/// Starts a migration off `pod`: `sourcePod` = it, `spec.podName` cleared
/// so that cnpool picks the target.
pub(super) async fn start_migration<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    view: &ClaimView,
    pod: &PodView,
    cause: MigrationCause,
) -> Result<Next, Error> {
    let mut updated = snap.claim.clone();
    let node_name = pod.node.clone().unwrap_or_default();
    updated.spec.source_pod = Some(PodRef { pod_name: pod.name.clone(), node_name });
    updated.spec.pod_name.clear();
    let Some(written) = replace(ctx, &updated).await? else {
        return Ok(changed_since_read(ctx, &snap.claim));
    };
    snap.claim = written;
    if matches!(cause, MigrationCause::Outdated | MigrationCause::ReclaimTimeout) {
        ctx.rollouts.started(&snap.namespace(), pod.pool.as_deref().unwrap_or_default());
    }
    let why = cause.message();
    tracing::info!(claim = %view.name, pod = %pod.name, why, "claim starts migrating");
    let note = format!("pod {} {why}: migrating to another pod", pod.name);
    ctx.event(&snap.claim.object_ref(&()), false, "MigrationStarted", "Migrate", note);
    Ok(Next::Again)
}

/// Copies the released source's workload into `status.migrate`.
pub(super) async fn report_drain<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    view: &ClaimView,
    workload: cnpool_registry::Workload,
) -> Result<(), Error> {
    let mut updated = snap.claim.clone();
    let status = updated.status.get_or_insert_with(CNClaimStatus::default);
    status.migrate = Some(MigrateStatus { source: Some(reported_workload(workload)) });
    if let Some(written) = replace_status(ctx, &updated).await? {
        tracing::debug!(claim = %view.name, ?workload, "migration source drains");
        snap.claim = written;
    }
    Ok(())
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

/// The ways a migration ends on its source, as the Migration condition's
/// reason and the `outcome` of `cnpool_migrations_total`.
#[derive(Clone, Copy, Debug)]
pub(super) enum BackOnSource {
    /// The named target could not be acquired.
    Refused,
    /// The target was lost before the source was released.
    TargetLost,
}

impl BackOnSource {
    fn reason(self) -> &'static str {
        match self {
            Self::Refused => "MigrationRefused",
            Self::TargetLost => "TargetLost",
        }
    }

    fn outcome(self) -> &'static str {
        match self {
            Self::Refused => "Refused",
            Self::TargetLost => "TargetLost",
        }
    }
}

/// Ends a migration on its source, the target refused or lost:
/// `spec.podName` back to the source and `sourcePod` cleared in one write,
/// then the Migration condition says why and that the claim stays on its
/// source.
pub(super) async fn end_migration_on_source<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    view: &ClaimView,
    ending: BackOnSource,
    why: &str,
) -> Result<Next, Error> {
    let reason = ending.reason();
    let source = view.source_pod.clone().unwrap_or_default();
    let mut updated = snap.claim.clone();
    updated.spec.pod_name.clone_from(&source);
    updated.spec.source_pod = None;
    let Some(written) = replace(ctx, &updated).await? else {
        return Ok(changed_since_read(ctx, &snap.claim));
    };
    snap.claim = written;
    tracing::info!(claim = %view.name, source = %source, reason, why, "migration ends on its source");
    ctx.migrations.end(&view.uid, Some(ending.outcome()));
    let message = format!("{why}; the claim stays on pod {source}");
    write_condition(ctx, snap, MIGRATION_CONDITION, "False", reason, &message, true).await?;
    Ok(Next::Again)
}

/// How a migration whose source the claim no longer holds ends.
#[derive(Clone, Copy, Debug)]
pub(super) enum MigrationEnd {
    /// The claim runs on its target.
    Completed,
    /// The claim is Lost and its source is no longer its own: it binds
    /// again from the pool, that pod included (the core's row 10m).
    Abandoned,
}

/// Ends a migration whose source is done with: `status.migrate` cleared
/// (and, completed, the target's bound time recorded), then
/// `spec.sourcePod`.
pub(super) async fn end_migration<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    view: &ClaimView,
    ending: MigrationEnd,
) -> Result<Next, Error> {
    let source = view.source_pod.clone().unwrap_or_default();
    let target = view.pod_name.clone().unwrap_or_default();
    let (value, reason, message, outcome) = match ending {
        MigrationEnd::Completed => {
            ("True", "Migrated", format!("moved from pod {source} to pod {target}"), "Completed")
        }
        MigrationEnd::Abandoned => (
            "False",
            "Lost",
            format!("lost its pods mid-migration (pod {source} is no longer the claim's): binding again from the pool"),
            "Lost",
        ),
    };
    let now = ctx.now();
    let mut updated = snap.claim.clone();
    let status = updated.status.get_or_insert_with(CNClaimStatus::default);
    status.migrate = None;
    if let (MigrationEnd::Completed, Some(store)) = (ending, status.store.as_mut()) {
        store.bound_time.get_or_insert(Time(now));
    }
    set_condition(status, MIGRATION_CONDITION, value, reason, &message, snap.claim.metadata.generation, now);
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
    ctx.migrations.end(&view.uid, Some(outcome));
    match ending {
        MigrationEnd::Completed => {
            tracing::info!(claim = %view.name, from = %source, to = %target, "claim migrated");
            ctx.event(&snap.claim.object_ref(&()), false, "Migrated", "Migrate", message);
        }
        // The loss had its Warning Event.
        MigrationEnd::Abandoned => tracing::info!(claim = %view.name, from = %source, "lost claim ends its migration"),
    }
    Ok(Next::Again)
}
