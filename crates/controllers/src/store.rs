//! The CN-store controller: one reconcile per pool pod, and the only writer
//! of the store registry (HAKeeper).
//!
//! From the pod it has just read it derives the store HAKeeper should hold
//! ([`cnpool_core::store::plan_store`]): a Bound pod's store Working with
//! the CN labels its binding annotation records, any other pod's store
//! Draining with no labels. It then makes the pod's phase transition
//! (register, recycle, terminate) through [`crate::ownership`]. It also
//! - removes a deleted pod's store before letting the pod go, through the
//!   `matrixorigin.io/cn-draining` finalizer, and lets go anyway with a
//!   Warning Event once HAKeeper has refused for longer than the timeout;
//! - keeps the pod's `matrixorigin.io/cn-store` condition saying whether
//!   its CN is registered;
//! - writes the stats annotations (score, deletion cost, connections) only
//!   when they change;
//! - releases orphans: a pod whose `claim-uid` names no claim, confirmed by
//!   a live read of the claim (new claims are often not cached yet); and a
//!   pod the Go operator bound (`claimed-by`, no `claim-uid`) once a live
//!   read finds no claim of that name in its namespace. A claim of that
//!   name, whatever its spec or phase, keeps the pod.

use std::sync::Arc;

use cnpool_api::{CNClaim, PodPhase, labels};
use cnpool_core::claim::AfterRelease;
use cnpool_core::model::{PodView, PoolView, StoreView};
use cnpool_core::store::{PodTransition, StoreWrite, drain_recheck, plan_store};
use cnpool_registry::{CnStore, RegistryError, StoreLabels, StoreRegistry, Workload};
use futures::StreamExt;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::context::Context;
use crate::error::{Error, is_not_found, is_stale};
use crate::key::{Key, Kind, key_of};
use crate::ownership::{self, Outcome, Transition};
use crate::registries::ClusterRegistry;
use crate::takeover::{self, Release};
use crate::wake;

/// Refreshes the stats annotations of the Bound pods every
/// `stats_interval` until `shutdown`. One pass reads each serving store's
/// workload and writes only the pods whose stats changed, so a steady pool
/// costs no writes and no reconciles (a draining pod's stats are written by
/// its reconcile, which reads the drain's counters anyway). A pass that
/// cannot refresh some pods says so once, and once again when all refresh.
pub async fn poll_stats<R: StoreRegistry>(ctx: Arc<Context<R>>, shutdown: Shared<BoxFuture<'static, ()>>) {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut failing = false;
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            () = tokio::time::sleep(ctx.config.stats_interval) => {}
        }
        match (refresh_stats(&ctx).await, failing) {
            (Some((failed, error)), false) => {
                tracing::warn!(failed, %error, kind = error.metric_label(), "cannot refresh the stats of bound pods");
                failing = true;
            }
            (None, true) => {
                tracing::info!("stats of bound pods refreshed again");
                failing = false;
            }
            _ => {}
        }
    }
}

/// One pass, a few pods at a time (each asks its CN); how many pods it
/// could not refresh and the first error, if any.
async fn refresh_stats<R: StoreRegistry>(ctx: &Context<R>) -> Option<(usize, Error)> {
    let refreshed = futures::stream::iter(ctx.pods.in_phase(PodPhase::Bound.as_str()))
        .filter(|pod| std::future::ready(pod.metadata.deletion_timestamp.is_none()))
        .map(|pod| async move {
            let Some(uuid) = pod.labels().get(labels::CN_UUID) else { return Ok(()) };
            // A pool whose HAKeeper is not known says so in its conditions.
            let Ok(cluster) = ctx.cluster_of_pod(&pod) else { return Ok(()) };
            let Some(store) = cluster.stores.get(uuid).1 else { return Ok(()) };
            let workload = cluster.registry.workload(&store).await.map_err(Error::Registry)?;
            write_stats(ctx, &pod, workload).await
        })
        .buffered(usize::from(ctx.config.workers.max(1)))
        .filter_map(|written| std::future::ready(written.err()))
        .collect::<Vec<Error>>()
        .await;
    let failed = refreshed.len();
    refreshed.into_iter().next().map(|error| (failed, error))
}

pub async fn reconcile<R: StoreRegistry + 'static>(pod: Arc<Pod>, ctx: Arc<Context<R>>) -> Result<Action, Error> {
    let key = key_of(pod.as_ref());
    ctx.wake.reconciling(Kind::Pod, &key.0, &key.1, ctx.pods.holds_version(&pod));
    let view = ctx.observer().read_pod(&pod)?;
    let Some(uuid) = view.store_uuid.clone() else {
        return Ok(Action::await_change());
    };
    if view.deleting {
        return finalize(&ctx, &pod, &uuid).await;
    }
    match takeover::release_from_go_workload(&ctx, &pod).await? {
        Some(Release::Released) => return Ok(after_own_write(&ctx)),
        Some(Release::Refused) => return Ok(Action::requeue(ctx.backoff.refused(Kind::Pod, &key))),
        Some(Release::TakenBack) | None => {}
    }
    if !pod.finalizers().iter().any(|f| f == labels::CN_DRAINING_FINALIZER) {
        return add_finalizer(&ctx, &pod).await;
    }
    if let Some(claim_uid) = view.claim_uid.as_deref()
        && ctx.claims.by_uid(claim_uid).is_none()
    {
        return sweep_orphan(&ctx, &pod, &view, claim_uid).await;
    }
    if view.claim_uid.is_none()
        && let Some(claim_name) = view.claimed_by.as_deref()
        && ctx.claims.get(&(key.0.clone(), claim_name.to_owned())).is_none()
    {
        return sweep_go_orphan(&ctx, &pod, &view, claim_name).await;
    }
    let pool = pool_of(&ctx, &view);
    let cluster = match ctx.cluster_of_pod(&pod) {
        Ok(cluster) => cluster,
        // Its pool's conditions say why; the LogSet watch wakes the pool.
        Err(_) => return Ok(Action::requeue(ctx.backoff.failure(Kind::Pod, &key))),
    };
    let (listed, store) = cluster.stores.get(&uuid);
    if !listed {
        return Ok(Action::requeue(ctx.config.registry_poll));
    }
    let workload = match store.as_ref().filter(|_| view.phase == Some(PodPhase::Draining)) {
        Some(store) => cluster.registry.workload(store).await.ok(),
        None => None,
    };
    let store_view = store.as_ref().map(StoreView::from);
    let plan = plan_store(&view, store_view.as_ref(), workload, ctx.now(), &pool)?;
    #[cfg(feature = "sabotage")]
    let plan = crate::sabotage::store_from_claim(&ctx, &key.0, &view, store_view.as_ref(), plan);
    if let Some(store) = store.as_ref() {
        match write_store(&ctx, &cluster, &key, &view, store, &plan.writes).await {
            // The listing predates the store's removal; plan again without it.
            Err(Error::Registry(RegistryError::StoreNotFound { .. })) => {
                tracing::debug!(pod = %view.name, store = %uuid, "store left HAKeeper since it was listed");
                cluster.stores.forget(&uuid);
                return Ok(Action::requeue(ctx.config.requeue_min));
            }
            written => written?,
        }
    }
    let condition_written = set_store_condition(&ctx, &pod, store.is_some()).await?;
    if let Some(workload) = workload {
        write_stats(&ctx, &pod, workload).await?;
    }
    if let Some(step) = plan.transition {
        match ownership::transition(&ctx.client, &pod, Transition::Phase(step), ctx.now()).await? {
            Outcome::Applied(_) => {
                if let PodTransition::Terminate(reason) = step {
                    let note = format!("draining pod goes Terminating: {}", reason.as_str());
                    ctx.event(&pod.object_ref(&()), false, reason.as_str(), "Terminate", note);
                }
                ctx.backoff.settled(Kind::Pod, &key);
                return Ok(after_own_write(&ctx));
            }
            Outcome::Stale | Outcome::NotApplicable => {
                return Ok(Action::requeue(ctx.backoff.refused(Kind::Pod, &key)));
            }
        }
    }
    let next = match view.phase {
        Some(PodPhase::Draining) => {
            drain_recheck(&view, ctx.now(), &pool, ctx.config.drain_poll, ctx.config.drain_poll_max)
        }
        _ => ctx.config.resync,
    };
    if !condition_written {
        // The condition says since when the store is missing, and that must
        // outlive this process: a claim's patience is counted from it after a
        // restart. Waiting out `next` (30 s for a bound pod) let a crash
        // restart the count and keep a claim Bound to a lost store past I2.
        return Ok(Action::requeue(next.min(ctx.backoff.refused(Kind::Pod, &key))));
    }
    ctx.backoff.settled(Kind::Pod, &key);
    Ok(Action::requeue(next))
}

pub fn error_policy<R>(pod: Arc<Pod>, error: &Error, ctx: Arc<Context<R>>) -> Action {
    let delay = ctx.backoff.failure(Kind::Pod, &key_of(pod.as_ref()));
    tracing::warn!(pod = %pod.name_any(), error = %error, kind = error.metric_label(), ?delay, "pod reconcile failed");
    Action::requeue(delay)
}

/// The pod's pool, or — for a pod whose pool is gone — a deleting pool
/// with this operator's defaults, so that its pods wind down.
fn pool_of<R>(ctx: &Context<R>, view: &PodView) -> PoolView {
    let namespace_pools = ctx.pool_views();
    namespace_pools.into_iter().find(|pool| Some(&pool.name) == view.pool.as_ref()).unwrap_or_else(|| PoolView {
        name: view.pool.clone().unwrap_or_default(),
        current_revision: String::new(),
        max_idle: 0,
        max_pods: None,
        drain_timeout: ctx.config.drain_timeout,
        min_delay: ctx.config.drain_min_delay,
        reclaim_timeout: None,
        deleting: true,
        pod_labels: Default::default(),
    })
}

async fn write_store<R: StoreRegistry>(
    ctx: &Context<R>,
    cluster: &ClusterRegistry<R>,
    pod: &Key,
    view: &PodView,
    observed: &CnStore,
    writes: &[StoreWrite],
) -> Result<(), Error> {
    if writes.is_empty() {
        return Ok(());
    }
    let mut store = observed.clone();
    for write in writes {
        match write {
            StoreWrite::ReplaceLabels(labels) => {
                cluster.registry.replace_labels(&store.uuid, labels).await?;
                store.labels = labels.clone();
            }
            StoreWrite::SetState(state) => {
                cluster.registry.patch_store(&store.uuid, *state, &StoreLabels::new()).await?;
                store.work_state = *state;
            }
        }
    }
    tracing::info!(
        pod = %view.name,
        store = %store.uuid,
        cluster = %cluster.address,
        state = ?store.work_state,
        labels = store.labels.len(),
        "store written from pod"
    );
    cluster.stores.wrote(store.clone());
    wake::store_changed(ctx, &store.uuid, Some(pod));
    Ok(())
}

/// The pod's `cn-store` condition: True while its CN is registered; and
/// the kruise gates of a pod taken over from the Go operator, True
/// ([`takeover`]). `false` when the write was refused as stale.
async fn set_store_condition<R>(ctx: &Context<R>, pod: &Pod, registered: bool) -> Result<bool, Error> {
    let wanted = if registered { "True" } else { "False" };
    let conditions = pod.status.as_ref().and_then(|status| status.conditions.clone()).unwrap_or_default();
    let current = conditions.iter().find(|condition| condition.type_ == labels::CN_STORE_CONDITION);
    let store_said = current.is_some_and(|condition| condition.status == wanted) || (current.is_none() && !registered);
    let mut written = takeover::kruise_gate_answers(pod, ctx.now());
    if !store_said {
        written.push(PodCondition {
            type_: labels::CN_STORE_CONDITION.to_owned(),
            status: wanted.to_owned(),
            reason: Some(if registered { "StoreRegistered" } else { "StoreMissing" }.to_owned()),
            last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ctx.now())),
            ..PodCondition::default()
        });
    }
    if written.is_empty() {
        return Ok(true);
    }
    let mut updated: Vec<PodCondition> =
        conditions.into_iter().filter(|condition| !written.iter().any(|new| new.type_ == condition.type_)).collect();
    updated.extend(written);
    // Guarded by the pod's version, not by a test of the conditions read:
    // the typed pod drops the nulls the server keeps (a kubelet's
    // `lastProbeTime: null`), so such a test never passes on a real
    // kube-apiserver.
    let test = json!({"op": "test", "path": "/metadata/resourceVersion", "value": pod.resource_version()});
    let set = json!({"op": "add", "path": "/status/conditions", "value": updated});
    let patch: json_patch::Patch = serde_json::from_value(json!([test, set]))
        .map_err(|source| Error::Encode { what: "pod condition patch", source })?;
    let (namespace, name) = key_of(pod);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    match pods.patch_status(&name, &PatchParams::default(), &Patch::Json::<()>(patch)).await {
        Ok(_) => Ok(true),
        Err(error) if is_stale(&error) || is_not_found(&error) => Ok(false),
        Err(error) => Err(Error::kube("set cn-store condition on", name, error)),
    }
}

/// The stats annotations of a pod whose CN reports `workload`, in the Go
/// operator's format (the proxy and the CN set's scale-in read them).
pub fn stats_annotations(pod: &Pod, workload: Workload) -> [(&'static str, String); 3] {
    let started = pod.status.as_ref().and_then(|status| status.start_time.as_ref()).map(|time| time.0.to_string());
    let score = json!({
        "sessionCount": workload.sessions,
        "pipelineCount": workload.pipelines,
        "replicaCount": workload.replicas,
        "startedTime": started,
    })
    .to_string();
    [
        (labels::SCORE, score),
        (labels::POD_DELETION_COST, workload.sessions.to_string()),
        (labels::CONNECTIONS, (workload.sessions + workload.pipelines).to_string()),
    ]
}

/// Writes the stats annotations when they differ from the pod's.
async fn write_stats<R>(ctx: &Context<R>, pod: &Pod, workload: Workload) -> Result<(), Error> {
    let wanted = stats_annotations(pod, workload);
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    if wanted.iter().all(|(key, value)| annotations.get(*key) == Some(value)) {
        return Ok(());
    }
    let map: serde_json::Map<String, serde_json::Value> =
        wanted.into_iter().map(|(key, value)| (key.to_owned(), json!(value))).collect();
    let (namespace, name) = key_of(pod);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let patch = json!({"metadata": {"annotations": map}});
    match pods.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(error) if is_not_found(&error) => Ok(()),
        Err(error) => Err(Error::kube("write stats of", name, error)),
    }
}

async fn add_finalizer<R>(ctx: &Context<R>, pod: &Pod) -> Result<Action, Error> {
    let mut finalizers = pod.finalizers().to_vec();
    finalizers.push(labels::CN_DRAINING_FINALIZER.to_owned());
    patch_finalizers(ctx, pod, finalizers).await?;
    Ok(after_own_write(ctx))
}

/// After a write to the pod: the write's own watch event wakes the pod once
/// the cache holds it (a reconcile before then would only see the old state
/// and retry a write already done), so the timer is just a fallback.
fn after_own_write<R>(ctx: &Context<R>) -> Action {
    Action::requeue(ctx.config.requeue_max)
}

/// Replaces the pod's finalizers, guarded by the list as read.
async fn patch_finalizers<R>(ctx: &Context<R>, pod: &Pod, finalizers: Vec<String>) -> Result<bool, Error> {
    let old = pod.metadata.finalizers.as_ref();
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": old},
        {"op": "add", "path": "/metadata/finalizers", "value": finalizers},
    ]))
    .map_err(|source| Error::Encode { what: "pod finalizer patch", source })?;
    let (namespace, name) = key_of(pod);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    match pods.patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch)).await {
        Ok(_) => Ok(true),
        Err(error) if is_stale(&error) || is_not_found(&error) => Ok(false),
        Err(error) => Err(Error::kube("update finalizers of", name, error)),
    }
}

/// A deleted pod: its store leaves HAKeeper, then the `cn-draining`
/// finalizer lets the pod go — or, once HAKeeper has failed for longer than
/// `store_removal_timeout`, lets it go anyway and says so in an Event.
async fn finalize<R: StoreRegistry>(ctx: &Context<R>, pod: &Pod, uuid: &str) -> Result<Action, Error> {
    if !pod.finalizers().iter().any(|f| f == labels::CN_DRAINING_FINALIZER) {
        return Ok(Action::await_change());
    }
    let cluster = ctx.cluster_of_pod(pod);
    let removed = match &cluster {
        Ok(cluster) => cluster.registry.delete_store(uuid).await.map_err(|error| error.to_string()),
        Err(unresolved) => Err(unresolved.to_string()),
    };
    if let Err(error) = &removed {
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
        let asked =
            pod.metadata.deletion_timestamp.as_ref().map(|time| time.0 - jiff::SignedDuration::from_secs(grace));
        let waited = asked.map(|asked| ctx.now().duration_since(asked));
        let timeout =
            jiff::SignedDuration::try_from(ctx.config.store_removal_timeout).unwrap_or(jiff::SignedDuration::MAX);
        if waited.is_none_or(|waited| waited < timeout) {
            tracing::debug!(pod = %pod.name_any(), store = uuid, %error, "store removal failed; retrying");
            return Ok(Action::requeue(ctx.backoff.failure(Kind::Pod, &key_of(pod))));
        }
        let note = format!("CN store {uuid} could not be removed from HAKeeper ({error}); the pod goes anyway");
        ctx.event(&pod.object_ref(&()), true, "StoreRemovalTimedOut", "RemoveStore", note);
    }
    if let Ok(cluster) = &cluster {
        cluster.stores.forget(uuid);
    }
    let kept: Vec<String> = pod.finalizers().iter().filter(|f| *f != labels::CN_DRAINING_FINALIZER).cloned().collect();
    if !patch_finalizers(ctx, pod, kept).await? {
        // Refused as stale: a change is coming, or the refusal was the
        // server's alone. Either way the pod must not wait on a watch event.
        return Ok(Action::requeue(ctx.backoff.failure(Kind::Pod, &key_of(pod))));
    }
    tracing::info!(pod = %pod.name_any(), store = uuid, removed = removed.is_ok(), "store removed; pod released to deletion");
    Ok(Action::await_change())
}

/// The Go operator bound the pod to a claim name the cache does not hold:
/// read that claim live, and release the pod (guarded by the name and the
/// absence of a UID) only if there is none. One that exists, new or old,
/// valid or not, keeps the pod: its own reconcile decides about it.
async fn sweep_go_orphan<R>(ctx: &Context<R>, pod: &Pod, view: &PodView, claim_name: &str) -> Result<Action, Error> {
    let (namespace, name) = key_of(pod);
    let claims: Api<CNClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    let exists = claims
        .get_opt(claim_name)
        .await
        .map_err(|error| Error::kube("read", format!("CNClaim {namespace}/{claim_name}"), error))?
        .is_some();
    if exists {
        return Ok(Action::requeue(ctx.backoff.failure(Kind::Pod, &key_of(pod))));
    }
    let then = if view.failed { AfterRelease::Retire } else { AfterRelease::Drain };
    if let Outcome::Applied(_) =
        ownership::transition(&ctx.client, pod, Transition::ReleaseLegacy { claim_name, then }, ctx.now()).await?
    {
        tracing::info!(pod = %name, claim = claim_name, "released a Go-bound pod: no claim of its name exists");
        let note = format!("released: claim {claim_name}, which the Go operator bound it to, no longer exists");
        ctx.event(&pod.object_ref(&()), false, "OrphanReleased", "Release", note);
    }
    Ok(after_own_write(ctx))
}

/// The pod's owner is not in the cache: read the claim live, and release the
/// pod if no live claim has that UID.
async fn sweep_orphan<R>(ctx: &Context<R>, pod: &Pod, view: &PodView, claim_uid: &str) -> Result<Action, Error> {
    let (namespace, name) = key_of(pod);
    let claims: Api<CNClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    let alive = match view.claimed_by.as_deref() {
        Some(claim) => claims
            .get_opt(claim)
            .await
            .map_err(|error| Error::kube("read", format!("CNClaim {namespace}/{claim}"), error))?
            .is_some_and(|claim| claim.uid().as_deref() == Some(claim_uid)),
        None => claims
            .list(&ListParams::default())
            .await
            .map_err(|error| Error::kube("list", format!("CNClaims in {namespace}"), error))?
            .items
            .iter()
            .any(|claim| claim.uid().as_deref() == Some(claim_uid)),
    };
    if alive {
        // Not cached yet; the claim's own reconcile looks after its pods.
        return Ok(Action::requeue(ctx.backoff.failure(Kind::Pod, &key_of(pod))));
    }
    let then = if view.failed { AfterRelease::Retire } else { AfterRelease::Drain };
    if let Outcome::Applied(_) =
        ownership::transition(&ctx.client, pod, Transition::Release { claim_uid, then }, ctx.now()).await?
    {
        tracing::info!(pod = %name, claim_uid, "released an orphan: no claim has its owner's UID");
        let note = format!("released: claim {claim_uid} no longer exists");
        ctx.event(&pod.object_ref(&()), false, "OrphanReleased", "Release", note);
    }
    Ok(after_own_write(ctx))
}
