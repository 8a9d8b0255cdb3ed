//! The Go CN-store (pod) reconcile: every reconcile patches the pod's stats
//! annotations, then moves the pool phase on (Draining → Idle or
//! Terminating, Unknown → Idle once the store is known) or marks readiness;
//! a deleted pod's store is removed before its finalizer is dropped.

use std::sync::Arc;
use std::time::Duration;

use cnpool_api::{CNPool, labels};
use cnpool_controllers::store::stats_annotations;
use cnpool_registry::{StoreRegistry, Workload};
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use super::{Kind, Legacy, LegacyError, is_not_found, label, phase, store_uuid};

const RESYNC: Duration = Duration::from_secs(30);
const DRAIN_POLL: Duration = Duration::from_secs(5);
/// The Go operator's minimum rest of a drained CN when the pool sets none.
const DEFAULT_MIN_DELAY: Duration = Duration::from_secs(15);

pub async fn reconcile(pod: Arc<Pod>, ctx: Arc<Legacy>) -> Result<Action, LegacyError> {
    let result = reconcile_pod(&pod, &ctx).await;
    ctx.settle(Kind::Pod, pod.as_ref(), result)
}

pub fn error_policy(pod: Arc<Pod>, error: &LegacyError, ctx: Arc<Legacy>) -> Action {
    ctx.failed(Kind::Pod, pod.as_ref(), error)
}

async fn reconcile_pod(pod: &Pod, ctx: &Legacy) -> Result<Action, LegacyError> {
    let uuid = store_uuid(pod).unwrap_or_default();
    if pod.metadata.deletion_timestamp.is_some() {
        return remove_store(ctx, pod, &uuid).await;
    }
    let store = ctx.cached_store(&uuid);
    let workload = match &store {
        Some(store) => Some(sync_stats(ctx, pod, store).await?),
        None => None,
    };
    match phase(pod) {
        Some("Draining") => drain(ctx, pod, workload).await,
        Some("Unknown") if store.is_some() => {
            set_phase(ctx, pod, "Idle").await?;
            Ok(Action::requeue(RESYNC))
        }
        Some("Bound" | "Idle") => {
            mark_readiness(ctx, pod, store.is_some()).await?;
            Ok(Action::requeue(RESYNC))
        }
        _ => Ok(Action::requeue(RESYNC)),
    }
}

/// Asks the CN for its counters and patches them onto the pod, every time,
/// at the cached resourceVersion (the conflicts the incident's log shows
/// while syncing pod stats).
async fn sync_stats(ctx: &Legacy, pod: &Pod, store: &cnpool_registry::CnStore) -> Result<Workload, LegacyError> {
    let workload = ctx
        .registry
        .workload(store)
        .await
        .map_err(LegacyError::registry(format!("read stats of pod {}", pod.name_any())))?;
    // The same annotations cnpool writes, but on every reconcile.
    let annotations: serde_json::Map<String, serde_json::Value> =
        stats_annotations(pod, workload).into_iter().map(|(key, value)| (key.to_owned(), json!(value))).collect();
    let patch = json!({"metadata": {"resourceVersion": pod.resource_version(), "annotations": annotations}});
    ctx.pod_api(&pod.namespace().unwrap_or_default())
        .patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(LegacyError::kube(format!("sync stats of pod {}", pod.name_any())))?;
    Ok(workload)
}

async fn set_phase(ctx: &Legacy, pod: &Pod, phase: &str) -> Result<(), LegacyError> {
    let patch = json!({"metadata": {"labels": {labels::PHASE: phase}}});
    ctx.pod_api(&pod.namespace().unwrap_or_default())
        .patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(LegacyError::kube(format!("set pod {} {phase}", pod.name_any())))?;
    tracing::info!(pod = %pod.name_any(), from = phase_of(pod), to = phase, "pod phase");
    Ok(())
}

fn phase_of(pod: &Pod) -> &str {
    phase(pod).unwrap_or("-")
}

/// Drain settings of the pod's pool: (minimum delay, timeout).
fn drain_settings(ctx: &Legacy, pod: &Pod) -> (Duration, Option<Duration>) {
    let pool_name = label(pod, labels::POOL_NAME).unwrap_or_default();
    let pool: Option<Arc<CNPool>> =
        ctx.pools.get(&ObjectRef::new(pool_name).within(&pod.namespace().unwrap_or_default()));
    let drain = pool.and_then(|pool| pool.spec.strategy.drain_strategy.clone()).unwrap_or_default();
    let parse = |value: Option<cnpool_api::GoDuration>| value.and_then(|value| value.parse().ok());
    (parse(drain.min_delay).unwrap_or(DEFAULT_MIN_DELAY), parse(drain.timeout))
}

async fn drain(ctx: &Legacy, pod: &Pod, workload: Option<Workload>) -> Result<Action, LegacyError> {
    let (min_delay, timeout) = drain_settings(ctx, pod);
    let reclaimed_at =
        pod.annotations().get(labels::RECLAIMED_AT).and_then(|text| text.parse::<jiff::Timestamp>().ok());
    let drained_for = reclaimed_at.map(|at| ctx.since(at)).unwrap_or_default();
    let delete_on_reclaim = pod.annotations().contains_key(labels::DELETE_ON_RECLAIM);
    if delete_on_reclaim || timeout.is_some_and(|timeout| drained_for > timeout) {
        set_phase(ctx, pod, "Terminating").await?;
    } else if workload.is_some_and(|workload| workload.is_idle()) && drained_for >= min_delay {
        set_phase(ctx, pod, "Idle").await?;
    }
    Ok(Action::requeue(DRAIN_POLL))
}

/// Sets the pod's `cn-store` condition to whether its store is known.
async fn mark_readiness(ctx: &Legacy, pod: &Pod, serving: bool) -> Result<(), LegacyError> {
    let wanted = if serving { "True" } else { "False" };
    let mut conditions = pod.status.as_ref().and_then(|status| status.conditions.clone()).unwrap_or_default();
    let current = conditions.iter().find(|condition| condition.type_ == labels::CN_STORE_CONDITION);
    if current.is_some_and(|condition| condition.status == wanted) {
        return Ok(());
    }
    conditions.retain(|condition| condition.type_ != labels::CN_STORE_CONDITION);
    conditions.push(PodCondition {
        type_: labels::CN_STORE_CONDITION.to_owned(),
        status: wanted.to_owned(),
        last_transition_time: Some(Time(ctx.now())),
        ..PodCondition::default()
    });
    let patch = json!({"status": {"conditions": conditions}});
    ctx.pod_api(&pod.namespace().unwrap_or_default())
        .patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(LegacyError::kube(format!("mark readiness of pod {}", pod.name_any())))?;
    Ok(())
}

/// The pod is going: HAKeeper forgets its store, then the finalizer goes.
async fn remove_store(ctx: &Legacy, pod: &Pod, uuid: &str) -> Result<Action, LegacyError> {
    if !pod.finalizers().iter().any(|finalizer| finalizer == labels::CN_DRAINING_FINALIZER) {
        return Ok(Action::await_change());
    }
    ctx.registry
        .delete_store(uuid)
        .await
        .map_err(LegacyError::registry(format!("delete store of pod {}", pod.name_any())))?;
    let mut released = pod.clone();
    released.finalizers_mut().retain(|finalizer| finalizer != labels::CN_DRAINING_FINALIZER);
    match ctx
        .pod_api(&pod.namespace().unwrap_or_default())
        .replace(&pod.name_any(), &PostParams::default(), &released)
        .await
    {
        Ok(_) => {
            tracing::info!(pod = %pod.name_any(), "store removed, finalizer dropped");
            Ok(Action::await_change())
        }
        Err(error) if is_not_found(&error) => Ok(Action::await_change()),
        Err(error) => Err(LegacyError::kube(format!("drop finalizer of pod {}", pod.name_any()))(error)),
    }
}
