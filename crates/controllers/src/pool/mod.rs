//! The CNPool controller: the pool's headless Service, its pods (created
//! from the template, named `<pool>-<ordinal>` so that AlreadyExists is the
//! lock that keeps `maxPods` even with two operators), scale-in, deletion
//! behind the pool finalizer, and a status that counts pods per phase.
//! A pool whose spec fails validation is not acted on (DESIGN §2,
//! "Inputs"): its status says why, and its pods are left as they are.
//! Rendering the pods and the Service is `pods`'s job; the pool's
//! PodDisruptionBudget is `budget`'s.

mod blueprint;
mod budget;
mod health;
mod pods;

use std::sync::Arc;

use cnpool_api::validation::validate_pool_spec;
use cnpool_api::{CNPool, CNPoolStatus, PodPhase, labels};
use cnpool_core::model::PodView;
use cnpool_core::pool::{Expectations, occupancy, plan_pool};
use cnpool_registry::StoreRegistry;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::cache::waits_for_pod;
use crate::context::Context;
use crate::error::{Error, is_not_found, is_stale};
use crate::key::{Key, Kind, key_of};
use crate::observe::pool_revision;
use crate::ownership::{self, Outcome, Transition};
use crate::validity::{INVALID_SPEC, Verdict, ready_condition};

/// What an invalid pool does not do, as its condition says.
const HELD_BACK: &str = "the pool creates, retires and deletes no pods; its pods keep serving their claims";

/// How many claims wait for a pod of `pool`.
fn pending_claims<R>(ctx: &Context<R>, pool: &CNPool) -> u32 {
    let (namespace, name) = key_of(pool);
    let pool_labels = pool.pod_labels();
    let mut pending = 0u32;
    for claim in &ctx.claims.may_wait_in_pool(&namespace, &name) {
        // A migration source is on its way out: a claim that holds only its
        // source waits for a target like any pending claim.
        let source = claim.spec.source_pod.as_ref().map(|source| source.pod_name.as_str());
        let holds = claim
            .uid()
            .is_some_and(|uid| ctx.pods.owned_by(&uid).iter().any(|pod| Some(pod.name_any().as_str()) != source));
        if waits_for_pod(claim, &name, &pool_labels, holds) {
            pending += 1;
        }
    }
    pending
}

pub async fn reconcile<R: StoreRegistry + 'static>(pool: Arc<CNPool>, ctx: Arc<Context<R>>) -> Result<Action, Error> {
    let key = key_of(pool.as_ref());
    ctx.wake.reconciling(Kind::Pool, &key.0, &key.1, ctx.pools.holds_version(&pool));
    let (namespace, name) = key.clone();
    let pools: Api<CNPool> = Api::namespaced(ctx.client.clone(), &namespace);
    let deleting = pool.metadata.deletion_timestamp.is_some();
    // Validation comes first, whatever the webhook let through. A deleting
    // pool still winds down: that retires only unowned Idle pods, which
    // the user asked for by deleting it, whatever its spec says.
    let verdict = Verdict::of(validate_pool_spec(&pool.spec), HELD_BACK);
    if !verdict.valid && !deleting {
        return hold(&ctx, &pool, &verdict).await;
    }
    let has_finalizer = pool.finalizers().iter().any(|f| f == labels::POOL_FINALIZER);
    if !deleting && !has_finalizer {
        let mut updated = (*pool).clone();
        updated.finalizers_mut().push(labels::POOL_FINALIZER.to_owned());
        return match pools.replace(&name, &PostParams::default(), &updated).await {
            Ok(_) => Ok(Action::await_change()),
            // Another replica added it first, or this cache lags: the watch
            // brings the pool with its finalizer.
            Err(error) if is_stale(&error) || is_not_found(&error) => {
                Ok(Action::requeue(ctx.backoff.refused(Kind::Pool, &key)))
            }
            Err(error) => Err(Error::kube("add finalizer to", format!("CNPool {namespace}/{name}"), error)),
        };
    }
    let revision = ctx.pools.revision(&key).unwrap_or_else(|| pool_revision(&pool.spec));
    // A deleting pool creates no pods: it needs no blueprint.
    let blueprint = match deleting {
        true => None,
        // Boxed: the rendering's state would otherwise sit in every pool
        // reconcile's future, whose size the simulator's threads feel.
        false => match Box::pin(blueprint::resolve(&ctx, &pool, &revision)).await? {
            Ok(blueprint) => Some(blueprint),
            Err(blocked) => return hold(&ctx, &pool, &blocked).await,
        },
    };
    if let Some(blueprint) = &blueprint {
        Box::pin(blueprint::ensure(&ctx, &pool, blueprint)).await?;
        budget::ensure(&ctx, &pool).await?;
    }
    let view = ctx.pool_view(&pool, &revision)?;
    let raw_pods = ctx.pods.in_pool(&namespace, &name);
    let pods: Vec<PodView> = raw_pods.iter().map(|pod| ctx.observer().read_pod(pod)).collect::<Result<_, _>>()?;

    if deleting && raw_pods.is_empty() {
        return remove_finalizer(&ctx, &pool).await;
    }

    let pending = pending_claims(&ctx, &pool);

    let expected = expectations(&ctx, &key, &pods);
    let plan = plan_pool(&view, &pods, pending, &expected);
    let busy = !plan.is_empty();
    let mut created = Vec::new();
    // A deleting pool has no blueprint: its plan creates nothing.
    if let Some(blueprint) = &blueprint {
        for pod_name in &plan.create {
            if pods::create_pod(&ctx, &pool, blueprint.pod_template(), &revision, pod_name).await? {
                created.push(pod_name.as_str());
            }
        }
    }
    let mut retired = Vec::new();
    for pod in &plan.retire {
        let Some(raw) = raw_pods.iter().find(|raw| raw.uid().as_deref() == Some(pod.uid.as_str())) else { continue };
        if let Outcome::Applied(_) = ownership::transition(&ctx.client, raw, Transition::Retire, ctx.now()).await? {
            ctx.expected.deletion(&key, &pod.uid);
            retired.push(pod.name.as_str());
        }
    }
    let pool_ref = pool.object_ref(&());
    if !created.is_empty() {
        let note =
            format!("created pods {} (pending claims: {pending}, maxIdle: {})", created.join(", "), view.max_idle);
        ctx.event(&pool_ref, false, "ScaledOut", "Create", note);
    }
    if !retired.is_empty() {
        let note = format!("retiring pods {} (surplus Idle, or of an old template)", retired.join(", "));
        ctx.event(&pool_ref, false, "ScaledIn", "Retire", note);
    }
    for pod in &plan.delete {
        delete_pod(&ctx, &key, pod).await?;
    }

    let at_max_pods = occupancy(&view, &pods).at_max_pods(&view);
    if !write_status(&ctx, &pool, &pods, pending, Some(revision), &verdict, Some(at_max_pods)).await? {
        return Ok(Action::requeue(ctx.after_stale_refusal()));
    }
    if busy || !expected.creations.is_empty() || !expected.deletions.is_empty() {
        // What the plan asked for shows up as pod events, and they wake the
        // pool; polling for them would only add reconciles. The requeue is a
        // safety net.
        return Ok(Action::requeue(ctx.config.requeue_max));
    }
    ctx.backoff.settled(Kind::Pool, &key);
    // An unowned pod whose store is missing is replaced once that has lasted
    // the registration grace, retired once it has lasted the store-missing
    // bound; nothing else would wake the pool then.
    let observer = ctx.observer();
    let store_deadline = raw_pods
        .iter()
        .zip(&pods)
        .filter(|(_, view)| !view.failed)
        .filter_map(|(raw, view)| observer.next_store_deadline(raw, view))
        .min();
    Ok(Action::requeue(store_deadline.map_or(ctx.config.resync, |due| due.min(ctx.config.resync))))
}

/// Keeps an invalid or blocked pool's status (its pods counted,
/// `Ready=False` saying which field to fix or what it waits for) and does
/// nothing else: no pod created, retired or
/// deleted, so its pods keep serving. The fix wakes the pool through its
/// watch.
async fn hold<R: Send + Sync>(ctx: &Context<R>, pool: &CNPool, verdict: &Verdict) -> Result<Action, Error> {
    let key = key_of(pool);
    let raw_pods = ctx.pods.in_pool(&key.0, &key.1);
    let pods: Vec<PodView> = raw_pods.iter().map(|pod| ctx.observer().read_pod(pod)).collect::<Result<_, _>>()?;
    // The revision shown stays the one the pods were made from: the invalid
    // template made none.
    let revision = pool.status.as_ref().and_then(|status| status.current_revision.clone());
    // Its pods are not judged against an invalid spec: AtMaxPods stays.
    if !write_status(ctx, pool, &pods, pending_claims(ctx, pool), revision, verdict, None).await? {
        return Ok(Action::requeue(ctx.after_stale_refusal()));
    }
    ctx.backoff.settled(Kind::Pool, &key);
    // A fix of the spec wakes the pool through its watch; a LogSet coming
    // ready does not (the operator does not watch LogSets): look again soon.
    let again = if verdict.reason == INVALID_SPEC { ctx.config.resync } else { ctx.config.requeue_max };
    Ok(Action::requeue(again))
}

pub fn error_policy<R>(pool: Arc<CNPool>, error: &Error, ctx: Arc<Context<R>>) -> Action {
    let delay = ctx.backoff.failure(Kind::Pool, &key_of(pool.as_ref()));
    tracing::warn!(pool = %pool.name_any(), error = %error, kind = error.metric_label(), ?delay, "pool reconcile failed");
    Action::requeue(delay)
}

/// The pool's expectations, with what the cache now shows dropped: a
/// retired or deleted pod is seen once it is no longer Idle or starting.
fn expectations<R>(ctx: &Context<R>, key: &Key, pods: &[PodView]) -> Expectations {
    ctx.expected.outstanding(
        key,
        |name| pods.iter().any(|pod| pod.name == name),
        |uid| {
            pods.iter().any(|pod| {
                pod.uid == uid && !pod.deleting && matches!(pod.phase, Some(PodPhase::Idle | PodPhase::Unknown))
            })
        },
    )
}
async fn delete_pod<R>(ctx: &Context<R>, key: &Key, pod: &PodView) -> Result<(), Error> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &key.0);
    let params = DeleteParams {
        preconditions: Some(Preconditions { uid: Some(pod.uid.clone()), resource_version: None }),
        ..DeleteParams::default()
    };
    match pods.delete(&pod.name, &params).await {
        Ok(_) => {
            tracing::info!(pool = %key.1, pod = %pod.name, "deleted terminating pod");
            ctx.expected.deletion(key, &pod.uid);
            Ok(())
        }
        Err(error) if is_stale(&error) || is_not_found(&error) => Ok(()),
        Err(error) => Err(Error::kube("delete pod", &pod.name, error)),
    }
}

async fn remove_finalizer<R>(ctx: &Context<R>, pool: &CNPool) -> Result<Action, Error> {
    let (namespace, name) = key_of(pool);
    let kept: Vec<String> = pool.finalizers().iter().filter(|f| *f != labels::POOL_FINALIZER).cloned().collect();
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": pool.finalizers()},
        {"op": "replace", "path": "/metadata/finalizers", "value": kept},
    ]))
    .map_err(|source| Error::Encode { what: "pool finalizer patch", source })?;
    let pools: Api<CNPool> = Api::namespaced(ctx.client.clone(), &namespace);
    match pools.patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch)).await {
        Ok(_) => {
            tracing::info!(pool = %name, "pool has no pods left; finalizer removed");
            ctx.metrics.pool_observed(&namespace, &name, None);
            Ok(Action::await_change())
        }
        Err(error) if is_stale(&error) || is_not_found(&error) => {
            Ok(Action::requeue(ctx.backoff.refused(Kind::Pool, &(namespace, name))))
        }
        Err(error) => Err(Error::kube("remove finalizer from", format!("CNPool {namespace}/{name}"), error)),
    }
}

/// Writes the pool's status when it changed, with its conditions: `Ready`
/// (`verdict`, then HAKeeper), `HAKeeperReachable`, and `AtMaxPods` when
/// `at_max_pods` judges it; `false` when the write was refused as stale.
async fn write_status<R>(
    ctx: &Context<R>,
    pool: &CNPool,
    pods: &[PodView],
    pending: u32,
    revision: Option<String>,
    verdict: &Verdict,
    at_max_pods: Option<bool>,
) -> Result<bool, Error> {
    let count = |phase: PodPhase| pods.iter().filter(|pod| pod.phase == Some(phase)).count() as i32;
    let current = pool.status.clone().unwrap_or_default();
    let mut conditions = current.conditions.clone();
    // A deleting pool winds down whatever its spec says: its conditions
    // stay as they were.
    let judged = pool.metadata.deletion_timestamp.is_none();
    if judged {
        let (namespace, name) = key_of(pool);
        let cluster = ctx.cluster_of_pool(&namespace, &name);
        let hakeeper = match &cluster {
            Ok(cluster) => {
                health::HaKeeper::Known { address: &cluster.address, reachability: cluster.stores.reachability() }
            }
            Err(unresolved) => health::HaKeeper::Unknown(unresolved),
        };
        health::apply(&mut conditions, pool, verdict, &hakeeper, at_max_pods, ctx.now());
    }
    let status = CNPoolStatus {
        replicas: pods.len() as i32,
        idle: count(PodPhase::Idle),
        bound: count(PodPhase::Bound),
        draining: count(PodPhase::Draining),
        terminating: count(PodPhase::Terminating),
        pending_claims: i32::try_from(pending).unwrap_or(i32::MAX),
        current_revision: revision,
        conditions,
        observed_generation: pool.metadata.generation,
    };
    ctx.metrics.pool_observed(&pool.namespace().unwrap_or_default(), &pool.name_any(), Some(&status));
    if status == current {
        return Ok(true);
    }
    let shown = status.conditions.clone();
    let mut updated = pool.clone();
    updated.status = Some(status);
    let pools: Api<CNPool> = Api::namespaced(ctx.client.clone(), pool.namespace().as_deref().unwrap_or_default());
    match pools.replace_status(&pool.name_any(), &PostParams::default(), &updated).await {
        Ok(written) => {
            ctx.pool_status_writes.wrote(pool.resource_version().as_deref(), written);
            if judged {
                verdict.announce(ctx, &pool.object_ref(&()), ready_condition(&current.conditions)).await;
                health::log_changes(pool, &current.conditions, &shown);
            }
            Ok(true)
        }
        Err(error) if is_stale(&error) || is_not_found(&error) => Ok(false),
        Err(error) => Err(Error::kube("write status of", format!("CNPool {}", pool.name_any()), error)),
    }
}
