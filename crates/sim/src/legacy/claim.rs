//! The Go CNClaim reconcile: Bind, Sync, Migrate, Finalize and Release, as
//! reference/legacy-algorithm.md describes them. Reads are from the
//! informer caches; writes carry the cached resourceVersion where the Go
//! code Updates, and none where it merge-patches.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use cnpool_api::selector::selector_matches;
use cnpool_api::{CNClaim, CNStoreStatus, ClaimPhase, MigrateStatus, Workload, cn_label_map, labels};
use cnpool_registry::{RegistryError, StoreLabels, StoreRegistry, WorkState};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use serde_json::{Map, Value, json};

use super::{Kind, Legacy, LegacyError, is_conflict, is_not_found, label, phase, sorted, store_uuid};

/// The Go claim finalizer's work is done under this key (cnpool's claim
/// finalizer; the checker does not read it).
const FINALIZER: &str = labels::CLAIM_FINALIZER;
/// Waits of the Go claim reconcile.
const NOT_NORMAL_YET: Duration = Duration::from_secs(15);
const NO_POD_YET: Duration = Duration::from_secs(5);
const JUST_BOUND: Duration = Duration::from_secs(10);
const KEEP_WORKING_RETRY: Duration = Duration::from_secs(15);
const MIGRATION_MIN_BOUND: Duration = Duration::from_secs(15);
const MIGRATION_POLL: Duration = Duration::from_secs(10);

pub async fn reconcile(claim: Arc<CNClaim>, ctx: Arc<Legacy>) -> Result<Action, LegacyError> {
    let result = reconcile_claim((*claim).clone(), &ctx).await;
    ctx.settle(Kind::Claim, claim.as_ref(), result)
}

pub fn error_policy(claim: Arc<CNClaim>, error: &LegacyError, ctx: Arc<Legacy>) -> Action {
    ctx.failed(Kind::Claim, claim.as_ref(), error)
}

async fn reconcile_claim(mut claim: CNClaim, ctx: &Legacy) -> Result<Action, LegacyError> {
    if claim.metadata.deletion_timestamp.is_some() {
        return finalize(ctx, &claim).await;
    }
    if !claim.finalizers().iter().any(|finalizer| finalizer == FINALIZER) {
        claim.finalizers_mut().push(FINALIZER.to_owned());
        claim = ctx
            .claim_api(&claim.namespace().unwrap_or_default())
            .replace(&claim.name_any(), &PostParams::default(), &claim)
            .await
            .map_err(LegacyError::kube(format!("add finalizer to claim {}", claim.name_any())))?;
    }
    if claim.spec.pod_name.is_empty() { bind(ctx, claim).await } else { sync(ctx, claim).await }
}

/// UpdateStatus with the claim's resourceVersion; returns the stored claim.
async fn update_status(ctx: &Legacy, claim: &CNClaim) -> Result<CNClaim, LegacyError> {
    let name = claim.name_any();
    ctx.claim_api(&claim.namespace().unwrap_or_default())
        .replace_status(&name, &PostParams::default(), claim)
        .await
        .map_err(LegacyError::kube(format!("update status of claim {name}")))
}

async fn patch_spec(ctx: &Legacy, claim: &CNClaim, spec: Value) -> Result<CNClaim, LegacyError> {
    let name = claim.name_any();
    ctx.claim_api(&claim.namespace().unwrap_or_default())
        .patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": spec})))
        .await
        .map_err(LegacyError::kube(format!("patch spec of claim {name}")))
}

fn set_phase(claim: &mut CNClaim, phase: ClaimPhase) {
    claim.status.get_or_insert_default().phase = Some(phase);
}

async fn bind(ctx: &Legacy, mut claim: CNClaim) -> Result<Action, LegacyError> {
    let (namespace, name) = (claim.namespace().unwrap_or_default(), claim.name_any());
    set_phase(&mut claim, ClaimPhase::Pending);
    claim = update_status(ctx, &claim).await?;
    let orphan = sorted(&ctx.pods)
        .into_iter()
        .find(|pod| phase(pod) == Some("Bound") && label(pod.as_ref(), labels::CLAIMED_BY) == Some(name.as_str()));
    let pod = match orphan {
        Some(pod) => (*pod).clone(),
        None => match acquire(ctx, &claim).await? {
            Some(pod) => pod,
            None => {
                nominate(ctx, &claim).await?;
                return Ok(Action::requeue(NO_POD_YET));
            }
        },
    };
    let running = pod.status.as_ref().and_then(|status| status.phase.as_deref()) == Some("Running");
    if !running {
        return Ok(Action::requeue(NOT_NORMAL_YET));
    }
    let uuid = store_uuid(&pod).unwrap_or_default();
    let store_labels = cn_label_map(&claim.spec.cn_labels);
    ctx.registry
        .patch_store(&uuid, WorkState::Working, &store_labels)
        .await
        .map_err(LegacyError::registry(format!("set store of pod {} working", pod.name_any())))?;
    let node = pod.spec.as_ref().and_then(|spec| spec.node_name.clone()).unwrap_or_default();
    let pool = label(&pod, labels::POOL_NAME).unwrap_or_default().to_owned();
    claim = patch_spec(ctx, &claim, json!({"podName": pod.name_any(), "nodeName": node, "poolName": pool})).await?;
    let now = Time(ctx.now());
    let cached = ctx.cached_store(&uuid).unwrap_or_default();
    let status = claim.status.get_or_insert_default();
    status.phase = Some(ClaimPhase::Bound);
    status.bound_time.get_or_insert(now.clone());
    status.store = Some(CNStoreStatus {
        service_id: Some(uuid),
        lock_service_address: Some(cached.lock_service_address),
        pipeline_service_address: Some(cached.service_address),
        sql_address: Some(cached.sql_address),
        query_address: Some(cached.query_address),
        work_state: Some(WorkState::Working.code()),
        labels: claim.spec.cn_labels.clone(),
        bound_time: Some(now),
        // The Go type writes the pod name under the key `string` only.
        legacy_pod_name: Some(pod.name_any()),
        ..CNStoreStatus::default()
    });
    update_status(ctx, &claim).await?;
    tracing::info!(claim = %name, namespace, pod = %pod.name_any(), "claim bound");
    Ok(Action::await_change())
}

/// Takes the first Idle pod that fits and that no other live claim names,
/// by an Update at the cached resourceVersion; a conflict tries the next.
async fn acquire(ctx: &Legacy, claim: &CNClaim) -> Result<Option<Pod>, LegacyError> {
    let name = claim.name_any();
    let owner = claim.spec.owner_name.as_deref();
    let pool = claim.spec.pool_name.as_str();
    let mut candidates: Vec<Arc<Pod>> = sorted(&ctx.pods)
        .into_iter()
        .filter(|pod| {
            let pod_labels = pod.metadata.labels.clone().unwrap_or_default();
            phase(pod) == Some("Idle")
                && selector_matches(&claim.spec.selector, &pod_labels)
                && (pool.is_empty() || label(pod.as_ref(), labels::POOL_NAME) == Some(pool))
                && label(pod.as_ref(), labels::OUTDATED).is_none()
        })
        .collect();
    // Previous owner first, then the seconds field (0–59) of the creation time.
    candidates.sort_by_key(|pod| {
        let previous = owner.is_some() && label(pod.as_ref(), labels::LAST_OWNER) == owner;
        let second = pod.metadata.creation_timestamp.as_ref().map_or(0, |time| time.0.as_second().rem_euclid(60));
        (!previous, second)
    });
    let named: BTreeSet<String> = sorted(&ctx.claims)
        .into_iter()
        .filter(|other| other.name_any() != name && other.metadata.deletion_timestamp.is_none())
        .map(|other| other.spec.pod_name.clone())
        .filter(|pod| !pod.is_empty())
        .collect();
    for pod in candidates.into_iter().filter(|pod| !named.contains(&pod.name_any())) {
        let mut stamped = (*pod).clone();
        let pod_labels = stamped.labels_mut();
        pod_labels.insert(labels::PHASE.to_owned(), "Bound".to_owned());
        pod_labels.insert(labels::CLAIMED_BY.to_owned(), name.clone());
        if let Some(owner) = owner {
            pod_labels.insert(labels::OWNER.to_owned(), owner.to_owned());
        }
        if let Some(set) = label(claim, labels::CLAIM_SET) {
            pod_labels.insert(labels::CLAIM_SET.to_owned(), set.to_owned());
        }
        pod_labels.extend(claim.spec.additional_pod_labels.clone());
        let pods = ctx.pod_api(&pod.namespace().unwrap_or_default());
        match pods.replace(&pod.name_any(), &PostParams::default(), &stamped).await {
            Ok(updated) => return Ok(Some(updated)),
            Err(error) if is_conflict(&error) => continue,
            Err(error) => return Err(LegacyError::kube(format!("bind pod {}", pod.name_any()))(error)),
        }
    }
    Ok(None)
}

/// No pod: nominate the first pool whose pod labels the selector matches.
async fn nominate(ctx: &Legacy, claim: &CNClaim) -> Result<(), LegacyError> {
    let fits =
        sorted(&ctx.pools).into_iter().find(|pool| selector_matches(&claim.spec.selector, &pool.spec.pod_labels));
    match fits {
        Some(pool) if pool.name_any() != claim.spec.pool_name => {
            patch_spec(ctx, claim, json!({"poolName": pool.name_any()})).await.map(drop)
        }
        _ => Ok(()),
    }
}

async fn sync(ctx: &Legacy, mut claim: CNClaim) -> Result<Action, LegacyError> {
    let namespace = claim.namespace().unwrap_or_default();
    let Some(pod) = ctx.pod(&namespace, &claim.spec.pod_name) else {
        let bound_at = claim.status.as_ref().and_then(|status| status.bound_time.as_ref());
        if bound_at.is_some_and(|time| ctx.since(time.0) < JUST_BOUND) {
            return Ok(Action::requeue(JUST_BOUND));
        }
        set_phase(&mut claim, ClaimPhase::Lost);
        update_status(ctx, &claim).await?;
        return Ok(Action::await_change());
    };
    let pod_phase = pod.status.as_ref().and_then(|status| status.phase.as_deref());
    if matches!(pod_phase, Some("Succeeded" | "Unknown")) {
        set_phase(&mut claim, ClaimPhase::Lost);
        update_status(ctx, &claim).await?;
        return Ok(Action::await_change());
    }
    // The Go Sync stamps whatever spec.podName names, whoever holds it.
    let mut stamped = (*pod).clone();
    let pod_labels = stamped.labels_mut();
    pod_labels.insert(labels::PHASE.to_owned(), "Bound".to_owned());
    pod_labels.insert(labels::CLAIMED_BY.to_owned(), claim.name_any());
    ctx.pod_api(&namespace)
        .replace(&pod.name_any(), &PostParams::default(), &stamped)
        .await
        .map_err(LegacyError::kube(format!("keep pod {} bound", pod.name_any())))?;
    let uuid = store_uuid(&pod).unwrap_or_default();
    if let Err(error) = ctx.registry.patch_store(&uuid, WorkState::Working, &cn_label_map(&claim.spec.cn_labels)).await
    {
        tracing::error!(claim = %claim.name_any(), pod = %pod.name_any(), %error, "error keep bound CN working");
        return Ok(Action::requeue(KEEP_WORKING_RETRY));
    }
    match claim.spec.source_pod.clone().filter(|source| !source.pod_name.is_empty()) {
        Some(source) => migrate(ctx, claim, &source.pod_name).await,
        None => Ok(Action::await_change()),
    }
}

async fn migrate(ctx: &Legacy, mut claim: CNClaim, source_name: &str) -> Result<Action, LegacyError> {
    let namespace = claim.namespace().unwrap_or_default();
    let Some(source) = ctx.pod(&namespace, source_name) else {
        return complete_migration(ctx, claim).await;
    };
    let store_bound_at = claim.status.as_ref().and_then(|status| status.store.as_ref()?.bound_time.clone());
    if store_bound_at.is_some_and(|time| ctx.since(time.0) < MIGRATION_MIN_BOUND) {
        return Ok(Action::requeue(MIGRATION_MIN_BOUND));
    }
    let source_phase = phase(&source).unwrap_or_default().to_owned();
    tracing::info!(claim = %claim.name_any(), source = source_name, source_phase, "migrate");
    match source_phase.as_str() {
        "Draining" => {
            claim.status.get_or_insert_default().migrate = Some(MigrateStatus { source: Some(source_stats(&source)) });
            update_status(ctx, &claim).await?;
            Ok(Action::requeue(MIGRATION_POLL))
        }
        "Bound" => {
            release(ctx, &source, &claim).await?;
            Ok(Action::requeue(MIGRATION_POLL))
        }
        "Terminating" | "Idle" => complete_migration(ctx, claim).await,
        _ => Ok(Action::await_change()),
    }
}

async fn complete_migration(ctx: &Legacy, mut claim: CNClaim) -> Result<Action, LegacyError> {
    if let Some(status) = claim.status.as_mut() {
        status.migrate = None;
    }
    claim = update_status(ctx, &claim).await?;
    patch_spec(ctx, &claim, json!({"sourcePod": null})).await?;
    tracing::info!(claim = %claim.name_any(), "migration complete");
    Ok(Action::await_change())
}

/// The source's drain counters, from the score annotation the pod reconcile wrote.
fn source_stats(pod: &Pod) -> Workload {
    let score: Value =
        pod.annotations().get(labels::SCORE).and_then(|text| serde_json::from_str(text).ok()).unwrap_or(Value::Null);
    let count = |key: &str| score.get(key).and_then(Value::as_i64).unwrap_or_default();
    Workload {
        connections: count("sessionCount") + count("pipelineCount"),
        pipelines: count("pipelineCount"),
        replicas: count("replicaCount"),
    }
}

async fn finalize(ctx: &Legacy, claim: &CNClaim) -> Result<Action, LegacyError> {
    let name = claim.name_any();
    let named: BTreeSet<String> = sorted(&ctx.claims)
        .into_iter()
        .filter(|other| other.name_any() != name && other.metadata.deletion_timestamp.is_none())
        .map(|other| other.spec.pod_name.clone())
        .collect();
    let held = sorted(&ctx.pods).into_iter().filter(|pod| {
        phase(pod) == Some("Bound")
            && label(pod.as_ref(), labels::CLAIMED_BY) == Some(name.as_str())
            && !named.contains(&pod.name_any())
    });
    for pod in held {
        release(ctx, &pod, claim).await?;
    }
    let mut finished = claim.clone();
    finished.finalizers_mut().retain(|finalizer| finalizer != FINALIZER);
    match ctx.claim_api(&claim.namespace().unwrap_or_default()).replace(&name, &PostParams::default(), &finished).await
    {
        Ok(_) => {}
        Err(error) if is_not_found(&error) => {}
        Err(error) => return Err(LegacyError::kube(format!("remove finalizer of claim {name}"))(error)),
    }
    tracing::info!(claim = %name, "claim finalized");
    Ok(Action::await_change())
}

/// Drains the pod's store and hands the pod back to the pool, by merge
/// patches without a resourceVersion.
pub(super) async fn release(ctx: &Legacy, pod: &Pod, claim: &CNClaim) -> Result<(), LegacyError> {
    let uuid = store_uuid(pod).unwrap_or_default();
    match ctx.registry.patch_store(&uuid, WorkState::Draining, &StoreLabels::new()).await {
        Ok(()) | Err(RegistryError::StoreNotFound { .. }) => {}
        Err(error) => return Err(LegacyError::registry(format!("drain store of pod {}", pod.name_any()))(error)),
    }
    let mut pod_labels = Map::new();
    pod_labels.insert(labels::PHASE.to_owned(), json!("Draining"));
    pod_labels.insert(labels::CLAIMED_BY.to_owned(), Value::Null);
    pod_labels.insert(labels::OWNER.to_owned(), Value::Null);
    if let Some(owner) = label(pod, labels::OWNER) {
        pod_labels.insert(labels::LAST_OWNER.to_owned(), json!(owner));
    }
    for key in claim.spec.additional_pod_labels.keys() {
        pod_labels.insert(key.clone(), Value::Null);
    }
    let reclaimed_at = ctx.now().to_string();
    let patch = json!({"metadata": {"labels": pod_labels, "annotations": {labels::RECLAIMED_AT: reclaimed_at}}});
    ctx.pod_api(&pod.namespace().unwrap_or_default())
        .patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(LegacyError::kube(format!("release pod {}", pod.name_any())))?;
    tracing::info!(claim = %claim.name_any(), pod = %pod.name_any(), "released pod");
    Ok(())
}
