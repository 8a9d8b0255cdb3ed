//! The Go CNPool reconcile, woken by every event of every pool pod and
//! every nominated claim: desired = in-use + pending + maxIdle, surplus
//! Idle pods marked Terminating, and the CN set written every time. The
//! simulated cluster has no OpenKruise, so the CN set's own work (deleting
//! the pods to delete, creating pods up to its replicas) is done here too.

use std::sync::Arc;
use std::time::Duration;

use cnpool_api::{CNPool, labels};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use serde_json::json;
use tokio::time::Instant;

use super::{Kind, Legacy, LegacyError, is_not_found, label, lock, phase, sorted};

/// How long the CN set expects a pod it created to show in its cache
/// (the TTL of Kubernetes' controller expectations).
const CREATION_EXPECTATION: Duration = Duration::from_secs(300);

pub async fn reconcile(pool: Arc<CNPool>, ctx: Arc<Legacy>) -> Result<Action, LegacyError> {
    let result = reconcile_pool(&pool, &ctx).await;
    ctx.settle(Kind::Pool, pool.as_ref(), result)
}

pub fn error_policy(pool: Arc<CNPool>, error: &LegacyError, ctx: Arc<Legacy>) -> Action {
    ctx.failed(Kind::Pool, pool.as_ref(), error)
}

async fn reconcile_pool(pool: &CNPool, ctx: &Legacy) -> Result<Action, LegacyError> {
    let (namespace, name) = (pool.namespace().unwrap_or_default(), pool.name_any());
    if pool.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let live: Vec<Arc<Pod>> = sorted(&ctx.pods)
        .into_iter()
        .filter(|pod| label(pod.as_ref(), labels::POOL_NAME) == Some(name.as_str()))
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .collect();
    let in_phase = |phases: &[&str]| live.iter().filter(|pod| phases.contains(&phase(pod).unwrap_or_default())).count();
    let in_use = in_phase(&["Bound", "Draining"]);
    let terminating = in_phase(&["Terminating"]);
    let pending = sorted(&ctx.claims)
        .into_iter()
        .filter(|claim| claim.spec.pool_name == name && claim.metadata.deletion_timestamp.is_none())
        .filter(|claim| claim.phase() == Some(cnpool_api::ClaimPhase::Pending))
        .count();
    let scale = &pool.spec.strategy.scale_strategy;
    let mut desired = in_use + pending + usize::try_from(scale.max_idle).unwrap_or_default();
    if let Some(max_pods) = scale.max_pods {
        desired = desired.min(usize::try_from(max_pods).unwrap_or_default());
    }
    let active = live.len() - terminating;
    let mut retired = Vec::new();
    let surplus_idle = live.iter().filter(|pod| phase(pod) == Some("Idle")).take(active.saturating_sub(desired));
    for pod in surplus_idle {
        let mut retiring = (**pod).clone();
        retiring.labels_mut().insert(labels::PHASE.to_owned(), "Terminating".to_owned());
        ctx.pod_api(&namespace)
            .replace(&pod.name_any(), &PostParams::default(), &retiring)
            .await
            .map_err(LegacyError::kube(format!("scale in pod {}", pod.name_any())))?;
        retired.push(pod.name_any());
    }
    // The CN set's replicas and pods to delete, written whether or not they changed.
    let to_delete = terminating + retired.len();
    let status = json!({"status": {"replicas": desired, "terminating": to_delete}});
    Api::<CNPool>::namespaced(ctx.client.clone(), &namespace)
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(LegacyError::kube(format!("scale cnset of pool {name}")))?;
    tracing::info!(pool = %name, replicas = desired, in_use, pending, to_delete, "scale cnset");
    cn_set(ctx, pool, &live, desired, &retired).await?;
    Ok(Action::await_change())
}

/// What OpenKruise's CloneSet does with the CN set: deletes the pods to
/// delete and creates pods up to its replicas, counting its own creations
/// until its cache shows them.
async fn cn_set(
    ctx: &Legacy,
    pool: &CNPool,
    live: &[Arc<Pod>],
    replicas: usize,
    retired: &[String],
) -> Result<(), LegacyError> {
    let (namespace, name) = (pool.namespace().unwrap_or_default(), pool.name_any());
    let pods = ctx.pod_api(&namespace);
    let leaving = |pod: &Pod| phase(pod) == Some("Terminating") || retired.contains(&pod.name_any());
    for pod in live.iter().filter(|pod| leaving(pod)) {
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: pod.uid(), resource_version: None }),
            ..DeleteParams::default()
        };
        match pods.delete(&pod.name_any(), &params).await {
            Ok(_) => tracing::info!(pool = %name, pod = %pod.name_any(), "cnset deleted pod"),
            Err(error) if is_not_found(&error) => {}
            Err(error) => return Err(LegacyError::kube(format!("delete pod {}", pod.name_any()))(error)),
        }
    }
    let staying = live.iter().filter(|pod| !leaving(pod)).count();
    let outstanding = {
        let mut creations = lock(&ctx.creations);
        let mine = creations.entry(name.clone()).or_default();
        mine.retain(|pod, at| at.elapsed() < CREATION_EXPECTATION && ctx.pod(&namespace, pod).is_none());
        mine.len()
    };
    for _ in staying + outstanding..replicas {
        let created = pods
            .create(&PostParams::default(), &new_pod(pool)?)
            .await
            .map_err(LegacyError::kube(format!("create a pod of pool {name}")))?;
        tracing::info!(pool = %name, pod = %created.name_any(), "cnset created pod");
        lock(&ctx.creations).entry(name.clone()).or_default().insert(created.name_any(), Instant::now());
    }
    Ok(())
}

/// A pod of the pool's CN set: named `<pool>-<random>`, labelled with the
/// pool's pod labels, phase Unknown, held by the `cn-draining` finalizer.
fn new_pod(pool: &CNPool) -> Result<Pod, LegacyError> {
    let name = pool.name_any();
    let mut pod_labels = pool.pod_labels();
    pod_labels.insert(labels::PHASE.to_owned(), "Unknown".to_owned());
    let mut spec = match (&pool.spec.template, &pool.spec.pod_template) {
        // The model's CN runs the template's image; how Go renders the rest
        // of the pod does not change what the model shows.
        (Some(template), _) => json!({"containers": [{"name": "main", "image": template.image}]}),
        (None, pod_template) => {
            serde_json::to_value(pod_template.as_ref().and_then(|template| template.spec.clone()).unwrap_or_default())
                .unwrap_or_default()
        }
    };
    spec["subdomain"] = json!(name);
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": format!("{name}-"),
            "namespace": pool.namespace(),
            "labels": pod_labels,
            "annotations": {labels::MANAGEMENT_POLICY: labels::MANAGEMENT_POLICY_POOLING},
            "finalizers": [labels::CN_DRAINING_FINALIZER],
        },
        "spec": spec,
    });
    serde_json::from_value(pod).map_err(|source| LegacyError::Kube {
        what: format!("render a pod of pool {name}"),
        source: kube::Error::SerdeError(source),
    })
}
