//! The claim controller's writes to the claim itself: its spec and metadata
//! (finalizer, pointer, migration fields) and its status (phase,
//! conditions, the pod and store it is bound to), each at the
//! resourceVersion the decision read.

use cnpool_api::{CNClaim, CNClaimStatus, CNLabel, CNStoreStatus, ClaimPhase, OUTDATED_CONDITION, labels};
use cnpool_core::claim::LossReason;
use cnpool_core::model::{ClaimView, PodView, StoreView};
use cnpool_core::waiting::{ClaimWait, why_store_waits};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};

use super::Next;
use super::observe::Snapshot;
use crate::conditions::{self, Wanted};
use crate::context::Context;
use crate::error::{Error, is_not_found, is_stale};
use crate::key::{Kind, key_of};
use crate::observe::StoresOfPool;

/// The condition type a claim reports its binding in.
pub const BOUND_CONDITION: &str = "Bound";
/// The condition type a claim reports its last migration in.
pub const MIGRATION_CONDITION: &str = "Migration";
/// How long a new claim may wait for its pod's store before its status shows
/// it Pending, waiting for the store.
const STORE_WAIT_SHOWN_AFTER: jiff::SignedDuration = jiff::SignedDuration::from_secs(5);

/// What to do when the claim, or a pod it read, changed since it was read
/// (a write refused as stale, a pod the caches no longer hold): the watch
/// brings the newer version and wakes the claim, so the timer is only the
/// fallback, and it grows while the caches keep lagging.
pub(super) fn changed_since_read<R>(ctx: &Context<R>, claim: &CNClaim) -> Next {
    Next::Requeue(ctx.backoff.refused(Kind::Claim, &key_of(claim)))
}

/// Replaces the claim (metadata and spec) at the resourceVersion read and
/// goes on with what was written; when it changed or is gone, waits for
/// its newer version.
pub(super) async fn replace_claim<R>(ctx: &Context<R>, snap: &mut Snapshot, updated: &CNClaim) -> Result<Next, Error> {
    Ok(match replace(ctx, updated).await? {
        Some(written) => {
            snap.claim = written;
            Next::Again
        }
        None => changed_since_read(ctx, &snap.claim),
    })
}

fn remember_written<R>(ctx: &Context<R>, read: &CNClaim, written: CNClaim) -> CNClaim {
    ctx.claim_writes.wrote(read.resource_version().as_deref(), written.clone());
    written
}

/// Replaces the claim at the resourceVersion read; `None` when it changed
/// or is gone.
pub(super) async fn replace<R>(ctx: &Context<R>, claim: &CNClaim) -> Result<Option<CNClaim>, Error> {
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
pub(super) async fn replace_status<R>(ctx: &Context<R>, claim: &CNClaim) -> Result<Option<CNClaim>, Error> {
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
pub(super) fn set_condition(
    status: &mut CNClaimStatus,
    type_: &str,
    value: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> bool {
    let wanted = Wanted { type_, status: value, reason, message };
    conditions::set(&mut status.conditions, wanted, generation, now)
}

/// Sets the condition `type_` (and phase Pending on a new claim) when it
/// differs; publishes a Warning Event then when `warn` (a person must act),
/// so once per change of reason or message, never per retry.
pub(super) async fn write_condition<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    type_: &str,
    value: &str,
    reason: &str,
    message: &str,
    warn: bool,
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
        tracing::info!(claim = %snap.claim.name_any(), condition = type_, reason, "claim condition changed");
        if warn {
            let action = if type_ == MIGRATION_CONDITION { "Migrate" } else { "Bind" };
            ctx.event(&snap.claim.object_ref(&()), true, reason, action, message.to_owned());
        }
    }
    Ok(())
}

/// A new claim shows no phase while its pod's store comes up (a moment,
/// usually): its status is written once, Bound. One that has waited
/// longer, or has said before why it waits (phase Pending), says why it
/// waits now: for the store of `held`, or for HAKeeper.
pub(super) async fn show_store_wait<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    view: &ClaimView,
    held: Option<&PodView>,
) -> Result<(), Error> {
    let created = snap.claim.metadata.creation_timestamp.as_ref().map(|time| time.0);
    let waited_long = created.is_some_and(|created| ctx.now().duration_since(created) >= STORE_WAIT_SHOWN_AFTER);
    let shown = match view.phase {
        None => waited_long,
        Some(phase) => phase == ClaimPhase::Pending,
    };
    let Some(pod) = held.filter(|_| shown) else { return Ok(()) };
    let namespace = snap.namespace();
    let wait = why_store_waits(pod, ctx.reachability_of(&namespace, pod.pool.as_deref().unwrap_or_default()));
    write_condition(ctx, snap, BOUND_CONDITION, "False", wait.reason(), &wait.message(), wait.needs_action()).await
}

/// Says in the condition `type_` why a claim that takes a pod from its
/// pool found none ([`cnpool_core::waiting::why_no_pod`]).
pub(super) async fn show_pod_wait<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    type_: &str,
    wait: &ClaimWait,
) -> Result<(), Error> {
    write_condition(ctx, snap, type_, "False", wait.reason(), &wait.message(), wait.needs_action()).await
}

fn store_status(
    pod: &PodView,
    store: Option<&StoreView>,
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

/// Records the held pod in one write: the `recorded-pod` annotation,
/// `spec.podName`, `nodeName`, `poolName`, and the finalizer if missing.
pub(super) async fn record<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    view: &ClaimView,
    pod: &PodView,
) -> Result<Next, Error> {
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
    let next = replace_claim(ctx, snap, &updated).await?;
    if matches!(next, Next::Again) {
        tracing::info!(claim = %view.name, pod = %pod.name, "claim recorded its pod");
    }
    Ok(next)
}

/// Clears `spec.podName` (and `nodeName`) of a Lost standalone claim so
/// that it binds again.
pub(super) async fn rebind<R>(ctx: &Context<R>, snap: &mut Snapshot, view: &ClaimView) -> Result<Next, Error> {
    let next = replace_claim(ctx, snap, &rebind_spec(&snap.claim)).await?;
    if matches!(next, Next::Again) {
        tracing::info!(claim = %view.name, "lost claim clears its pod to bind again");
    }
    Ok(next)
}

/// `claim` with `spec.podName` (and the node it named) cleared, as a Lost
/// standalone claim asks to bind again from its pool (core row 10).
pub fn rebind_spec(claim: &CNClaim) -> CNClaim {
    let mut updated = claim.clone();
    updated.spec.pod_name.clear();
    updated.spec.node_name.clear();
    updated
}

/// `claim` shown Lost for `reason` (phase Lost, condition `Bound=False`
/// with the reason); `None` when it already shows exactly that.
pub fn lost_status(claim: &CNClaim, reason: LossReason, now: jiff::Timestamp) -> Option<CNClaim> {
    let mut updated = claim.clone();
    let status = updated.status.get_or_insert_with(CNClaimStatus::default);
    let from = status.phase;
    status.phase = Some(ClaimPhase::Lost);
    let generation = claim.metadata.generation;
    let condition_changed =
        set_condition(status, BOUND_CONDITION, "False", reason.as_str(), reason.message(), generation, now);
    (from != Some(ClaimPhase::Lost) || condition_changed).then_some(updated)
}

/// Sets phase Lost; `false` when the claim changed since it was read.
pub(super) async fn mark_lost<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    view: &ClaimView,
    reason: LossReason,
) -> Result<bool, Error> {
    let from = snap.claim.status.as_ref().and_then(|status| status.phase);
    let Some(updated) = lost_status(&snap.claim, reason, ctx.now()) else {
        // Already shown Lost for this reason (a pod it still has to
        // release): one write, one Event and one count per loss.
        return Ok(true);
    };
    if let Some(written) = replace_status(ctx, &updated).await? {
        tracing::info!(claim = %view.name, from = from.map(ClaimPhase::as_str), to = "Lost", reason = reason.as_str(), "claim lost its pod");
        ctx.metrics.claim_lost(reason.as_str());
        snap.claim = written;
        ctx.event(&snap.claim.object_ref(&()), true, reason.as_str(), "Lose", reason.message().to_owned());
        return Ok(true);
    }
    Ok(false)
}

/// Sets phase Bound with the held pod and its store in status; `false`
/// when the claim changed since it was read.
pub(super) async fn mark_bound<R>(
    ctx: &Context<R>,
    snap: &mut Snapshot,
    view: &ClaimView,
    held: Option<&PodView>,
    store: Option<&StoreView>,
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
        let listing = pod.pool.as_deref().and_then(|pool| ctx.stores_of(&snap.namespace(), pool));
        let registry = pod.store_uuid.as_deref().zip(listing).and_then(|(uuid, listing)| listing.get(uuid).1);
        let same_pod = status.store.as_ref().is_some_and(|shown| shown.pod_uid.as_deref() == Some(pod.uid.as_str()));
        let shown_since = status.store.as_ref().and_then(|shown| shown.bound_time.clone()).filter(|_| same_pod);
        let mut shown = store_status(pod, store, registry.as_ref());
        shown.bound_time = Some(shown_since.unwrap_or(bound_at));
        status.store = Some(shown);
    }
    let message = format!("bound to pod {pod_name}, whose CN store serves the claim's labels");
    let generation = snap.claim.metadata.generation;
    set_condition(status, BOUND_CONDITION, "True", "Bound", &message, generation, now);
    if conditions::find(&status.conditions, OUTDATED_CONDITION).is_some() {
        let current = format!("pod {pod_name} runs its pool's current template");
        set_condition(status, OUTDATED_CONDITION, "False", "CurrentTemplate", &current, generation, now);
    }
    let Some(written) = replace_status(ctx, &updated).await? else { return Ok(false) };
    tracing::info!(claim = %view.name, pod = %pod_name, from = from.map(ClaimPhase::as_str), to = "Bound", "claim bound");
    if first_bind && let Some(created) = &snap.claim.metadata.creation_timestamp {
        let waited = now.duration_since(created.0);
        ctx.metrics.claim_bound_after(waited.as_secs_f64().max(0.0));
    }
    snap.claim = written;
    ctx.event(&snap.claim.object_ref(&()), false, "Bound", "Bind", message);
    Ok(true)
}

/// The reason of the `Bound` condition of a claim whose spec fails
/// validation.
pub const INVALID_SPEC: &str = "InvalidSpec";

/// Says in the `Bound` condition why the spec is refused: the first field
/// and its fix, and how many more there are.
pub(super) async fn report_invalid<R>(ctx: &Context<R>, snap: &mut Snapshot, view: &ClaimView) -> Result<(), Error> {
    let Some(invalid) = &view.invalid else { return Ok(()) };
    let message = match invalid.0.as_slice() {
        [only] => format!("invalid spec, nothing is done for it until fixed: {only}"),
        [first, rest @ ..] => {
            format!("invalid spec, nothing is done for it until fixed: {first} (and {} more)", rest.len())
        }
        [] => return Ok(()),
    };
    write_condition(ctx, snap, BOUND_CONDITION, "False", INVALID_SPEC, &message, true).await
}
