//! The CNPool controller: the pool's headless Service, its pods (created
//! from the template, named `<pool>-<ordinal>` so that AlreadyExists is the
//! lock that keeps `maxPods` even with two operators), scale-in, deletion
//! behind the pool finalizer, and a status that counts pods per phase.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use cnpool_api::selector::selector_matches;
use cnpool_api::{CNClaim, CNPool, CNPoolStatus, PodPhase, labels};
use cnpool_core::convert::pod_view;
use cnpool_core::model::PodView;
use cnpool_core::pool::{Expectations, plan_pool};
use cnpool_registry::StoreRegistry;
use jiff::SignedDuration;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::core::v1::{PodTemplateSpec, Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::cache::{Key, key_of};
use crate::context::{Context, Kind};
use crate::error::{Error, is_already_exists, is_not_found, is_stale};
use crate::ownership::{self, Outcome, Transition};

/// The revision label of pods made from `template`: the first 10 hex digits
/// of the SHA-256 of the template's canonical JSON (object keys sorted, no
/// whitespace). It depends on the user's template only, so a new cnpool
/// release does not roll every pod.
pub fn template_revision(template: &PodTemplateSpec) -> String {
    let value = serde_json::to_value(template).unwrap_or(Value::Null);
    let mut canonical = String::new();
    write_canonical(&value, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    digest.iter().take(5).fold(String::new(), |mut hex, byte| {
        let _ = write!(hex, "{byte:02x}");
        hex
    })
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (index, (key, value)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The headless Service of a pool: its name is the pods' subdomain.
pub fn service_name(pool: &str) -> String {
    pool.to_owned()
}

/// Reads a pool pod. A pod on a cordoned node counts as cordoned. A pod
/// whose containers terminated counts as failed, and so does an unowned pod
/// whose CN runs but whose store HAKeeper has not held for longer than the
/// store-missing bound (an Idle pod, or one still Unknown since its CN
/// started): it cannot serve a tenant, so no claim is offered it (a claim
/// taking it would wait that bound again and be Lost) and its pool
/// replaces it.
pub(crate) fn read_pod<R>(ctx: &Context<R>, pod: &Pod) -> Result<PodView, Error> {
    let mut view = own_view(pod)?;
    view.cordoned |= on_cordoned_node(ctx, &view);
    let store_gone = unowned_store_missing_since(ctx, pod, &view).is_some_and(|since| {
        SignedDuration::try_from(ctx.config.store_missing_bound)
            .is_ok_and(|bound| ctx.now().duration_since(since) >= bound)
    });
    view.failed |= store_gone && !view.deleting;
    Ok(view)
}

/// The part of [`read_pod`] that depends on the pod's object alone: what
/// the pod index keeps for Idle pods, read once per change of the pod
/// rather than once per claim that might take it.
pub(crate) fn own_view(pod: &Pod) -> Result<PodView, cnpool_core::convert::ConvertError> {
    let mut view = pod_view(pod, false)?;
    let terminated =
        pod.status.as_ref().and_then(|status| status.container_statuses.as_ref()).is_some_and(|containers| {
            containers.iter().any(|container| container.state.as_ref().is_some_and(|state| state.terminated.is_some()))
        });
    view.failed |= terminated && !view.deleting;
    Ok(view)
}

/// Whether `view` runs on a node that is cordoned.
pub(crate) fn on_cordoned_node<R>(ctx: &Context<R>, view: &PodView) -> bool {
    view.node.as_deref().is_some_and(|node| ctx.nodes.contains(node))
}

/// Since when HAKeeper has lacked the store of `view`, if it is an Idle pod
/// or an Unknown one whose CN has started. A CN whose store vanished before
/// it registered never leaves Unknown; one still starting is not missing
/// anything yet, so for it the time counts from its container's start.
pub(crate) fn unowned_store_missing_since<R>(ctx: &Context<R>, pod: &Pod, view: &PodView) -> Option<jiff::Timestamp> {
    let started = match view.phase {
        Some(PodPhase::Idle) => None,
        Some(PodPhase::Unknown) => Some(cn_started_at(pod)?),
        _ => return None,
    };
    let since = ctx.store_missing_since(view.store_uuid.as_deref()?, crate::store::store_missing_noted(pod))?;
    Some(started.map_or(since, |started| since.max(started)))
}

/// When the pod's first running container started.
fn cn_started_at(pod: &Pod) -> Option<jiff::Timestamp> {
    let containers = pod.status.as_ref()?.container_statuses.as_ref()?;
    containers.iter().find_map(|container| Some(container.state.as_ref()?.running.as_ref()?.started_at.as_ref()?.0))
}

/// Whether `claim` waits for a pod of `pool`.
fn waits_for(claim: &CNClaim, pool: &CNPool, pool_labels: &BTreeMap<String, String>, ctx_holds: bool) -> bool {
    if claim.metadata.deletion_timestamp.is_some() || ctx_holds {
        return false;
    }
    let lost_in_set = claim.phase() == Some(cnpool_api::ClaimPhase::Lost)
        && claim.labels().get(labels::CLAIM_SET).is_some_and(|set| !set.is_empty());
    // A claim naming a pod (a pre-bound request, or a pointer the Go
    // operator left) waits for that pod, not for a new one; a Lost one
    // clears its pointer and binds from the pool.
    let names_a_pod = !claim.spec.pod_name.is_empty() && claim.phase() != Some(cnpool_api::ClaimPhase::Lost);
    let nominated = claim.spec.pool_name.is_empty() || claim.spec.pool_name == pool.name_any();
    nominated && !lost_in_set && !names_a_pod && selector_matches(&claim.spec.selector, pool_labels)
}

pub async fn reconcile<R: StoreRegistry + 'static>(pool: Arc<CNPool>, ctx: Arc<Context<R>>) -> Result<Action, Error> {
    let key = key_of(pool.as_ref());
    ctx.wake.reconciling(Kind::Pool, &key.0, &key.1, ctx.pools.holds_version(&pool));
    let (namespace, name) = key.clone();
    let pools: Api<CNPool> = Api::namespaced(ctx.client.clone(), &namespace);
    let deleting = pool.metadata.deletion_timestamp.is_some();
    let has_finalizer = pool.finalizers().iter().any(|f| f == labels::POOL_FINALIZER);
    if !deleting && !has_finalizer {
        let mut updated = (*pool).clone();
        updated.finalizers_mut().push(labels::POOL_FINALIZER.to_owned());
        return match pools.replace(&name, &PostParams::default(), &updated).await {
            Ok(_) => Ok(Action::await_change()),
            // Another replica added it first, or this cache lags: the watch
            // brings the pool with its finalizer.
            Err(error) if is_stale(&error) || is_not_found(&error) => {
                Ok(Action::requeue(ctx.refused(Kind::Pool, &key)))
            }
            Err(error) => Err(Error::kube("add finalizer to", format!("CNPool {namespace}/{name}"), error)),
        };
    }
    if !deleting {
        ensure_service(&ctx, &pool).await?;
        ensure_disruption_budget(&ctx, &pool).await?;
    }

    let revision = ctx.pools.revision(&key).unwrap_or_else(|| template_revision(&pool.spec.template));
    let view = ctx.pool_view(&pool, &revision)?;
    let raw_pods = ctx.pods.in_pool(&namespace, &name);
    let pods: Vec<PodView> = raw_pods.iter().map(|pod| read_pod(&ctx, pod)).collect::<Result<_, _>>()?;

    if deleting && raw_pods.is_empty() {
        return remove_finalizer(&ctx, &pool).await;
    }

    let pool_labels = pod_labels(&pool);
    let mut pending = 0u32;
    for claim in ctx.claims.in_pool(&namespace, &name).iter().chain(&ctx.claims.in_pool(&namespace, "")) {
        // A migration source is on its way out: a claim that holds only its
        // source waits for a target like any pending claim.
        let source = claim.spec.source_pod.as_ref().map(|source| source.pod_name.as_str());
        let holds = claim
            .uid()
            .is_some_and(|uid| ctx.pods.owned_by(&uid).iter().any(|pod| Some(pod.name_any().as_str()) != source));
        if waits_for(claim, &pool, &pool_labels, holds) {
            pending += 1;
        }
    }

    let expected = expectations(&ctx, &key, &pods);
    let plan = plan_pool(&view, &pods, pending, &expected);
    let busy = !plan.is_empty();
    let mut created = Vec::new();
    for pod_name in &plan.create {
        if create_pod(&ctx, &pool, &revision, pod_name).await? {
            created.push(pod_name.as_str());
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
        let note = format!("created pods {} ({pending} pending claims, maxIdle {})", created.join(", "), view.max_idle);
        ctx.event(&pool_ref, false, "ScaledOut", "Create", note).await;
    }
    if !retired.is_empty() {
        let note = format!("retiring pods {} (surplus Idle, or of an old template)", retired.join(", "));
        ctx.event(&pool_ref, false, "ScaledIn", "Retire", note).await;
    }
    for pod in &plan.delete {
        delete_pod(&ctx, &key, pod).await?;
    }

    if !write_status(&ctx, &pool, &pods, pending, &revision).await? {
        return Ok(Action::requeue(ctx.after_stale_refusal()));
    }
    if busy || !expected.creations.is_empty() || !expected.deletions.is_empty() {
        // What the plan asked for shows up as pod events, and they wake the
        // pool; polling for them would only add reconciles. The requeue is a
        // safety net.
        return Ok(Action::requeue(ctx.config.requeue_max));
    }
    ctx.settled(Kind::Pool, &key);
    // An unowned pod whose store is missing is retired once that has lasted
    // the store-missing bound; nothing else would wake the pool then.
    let store_missing = raw_pods
        .iter()
        .zip(&pods)
        .any(|(raw, view)| !view.failed && unowned_store_missing_since(&ctx, raw, view).is_some());
    Ok(Action::requeue(if store_missing { ctx.config.store_missing_bound } else { ctx.config.resync }))
}

pub fn error_policy<R>(pool: Arc<CNPool>, error: &Error, ctx: Arc<Context<R>>) -> Action {
    let delay = ctx.backoff(Kind::Pool, &key_of(pool.as_ref()));
    tracing::warn!(pool = %pool.name_any(), error = %error, kind = error.metric_label(), ?delay, "pool reconcile failed");
    Action::requeue(delay)
}

fn pod_labels(pool: &CNPool) -> BTreeMap<String, String> {
    let mut labels = pool.spec.template.metadata.as_ref().and_then(|meta| meta.labels.clone()).unwrap_or_default();
    labels.extend(pool.spec.pod_labels.clone());
    labels.insert(labels::POOL_NAME.to_owned(), pool.name_any());
    labels
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

async fn ensure_service<R>(ctx: &Context<R>, pool: &CNPool) -> Result<(), Error> {
    let (namespace, name) = key_of(pool);
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let service_name = service_name(&name);
    if services.get_opt(&service_name).await.map_err(|e| Error::kube("read", &service_name, e))?.is_some() {
        return Ok(());
    }
    let service = Service {
        metadata: ObjectMeta {
            name: Some(service_name.clone()),
            namespace: Some(namespace.clone()),
            labels: Some([(labels::POOL_NAME.to_owned(), name.clone())].into()),
            owner_references: pool.controller_owner_ref(&()).map(|owner| vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some([(labels::POOL_NAME.to_owned(), name.clone())].into()),
            publish_not_ready_addresses: Some(true),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    match services.create(&PostParams::default(), &service).await {
        Ok(_) => {
            tracing::info!(pool = %name, service = %service_name, "created headless service");
            Ok(())
        }
        Err(error) if is_already_exists(&error) => Ok(()),
        Err(error) => Err(Error::kube("create service", service_name, error)),
    }
}

/// The PodDisruptionBudget that guards `pool`'s Bound pods against
/// voluntary evictions (`kubectl drain`): named after the pool.
pub fn disruption_budget_name(pool: &str) -> String {
    format!("{pool}-bound")
}

/// What the budget of `pool` says: no Bound pod of the pool may be evicted.
/// It selects by the `phase` label, which only the guarded ownership write
/// sets, so a pod is guarded exactly while it is Bound; once released
/// (Draining, Idle) it may be evicted.
fn disruption_budget_spec(pool: &str) -> Value {
    json!({
        "maxUnavailable": 0,
        "selector": {"matchLabels": {labels::POOL_NAME: pool, labels::PHASE: PodPhase::Bound.as_str()}},
    })
}

/// Creates the pool's PodDisruptionBudget, or restores its spec. A server
/// without PodDisruptionBudgets, or a role without them, leaves Bound pods
/// unguarded and is said once at warn; neither stops the pool.
async fn ensure_disruption_budget<R>(ctx: &Context<R>, pool: &CNPool) -> Result<(), Error> {
    let Some(resource) = ctx.disruption_budgets().await else { return Ok(()) };
    let (namespace, name) = key_of(pool);
    let budgets: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &resource);
    let budget_name = disruption_budget_name(&name);
    let spec = disruption_budget_spec(&name);
    let refused = |error: &kube::Error| {
        let forbidden = matches!(error, kube::Error::Api(status) if status.code == 403);
        if forbidden && !ctx.budgets_refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                pool = %name, %error,
                "cannot manage PodDisruptionBudgets: evictions of Bound pods are not refused; grant the operator get, \
                 create and patch on poddisruptionbudgets (group policy), as deploy/rbac/clusterrole.yaml does"
            );
        }
        forbidden
    };
    let existing = match budgets.get_opt(&budget_name).await {
        Ok(existing) => existing,
        Err(error) if refused(&error) => return Ok(()),
        Err(error) => return Err(Error::kube("read", format!("PodDisruptionBudget {budget_name}"), error)),
    };
    if let Some(existing) = existing {
        let current = &existing.data["spec"];
        if current["maxUnavailable"] == spec["maxUnavailable"] && current["selector"] == spec["selector"] {
            return Ok(());
        }
        let restore = json!({"spec": spec});
        return match budgets.patch(&budget_name, &PatchParams::default(), &Patch::Merge(&restore)).await {
            Ok(_) => {
                tracing::info!(pool = %name, budget = %budget_name, "restored the PodDisruptionBudget's spec");
                Ok(())
            }
            Err(error) if refused(&error) || is_not_found(&error) => Ok(()),
            Err(error) => Err(Error::kube("patch", format!("PodDisruptionBudget {budget_name}"), error)),
        };
    }
    let budget = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {
            "name": budget_name,
            "namespace": namespace,
            "labels": {labels::POOL_NAME: name},
            "ownerReferences": pool.controller_owner_ref(&()).map(|owner| vec![owner]),
        },
        "spec": spec,
    });
    let budget: DynamicObject =
        serde_json::from_value(budget).map_err(|source| Error::Encode { what: "PodDisruptionBudget", source })?;
    match budgets.create(&PostParams::default(), &budget).await {
        Ok(_) => {
            let api_version = resource.api_version.as_str();
            tracing::info!(pool = %name, budget = %budget_name, api_version, "created the budget of Bound pods");
            Ok(())
        }
        Err(error) if refused(&error) || is_already_exists(&error) => Ok(()),
        Err(error) => Err(Error::kube("create", format!("PodDisruptionBudget {budget_name}"), error)),
    }
}

/// Creates pod `name` of `pool`; `false` when the name was taken (by another
/// worker or operator: the name is the lock).
async fn create_pod<R>(ctx: &Context<R>, pool: &CNPool, revision: &str, name: &str) -> Result<bool, Error> {
    let (namespace, pool_name) = key_of(pool);
    let template = &pool.spec.template;
    let mut meta = template.metadata.clone().unwrap_or_default();
    let subdomain = service_name(&pool_name);
    let mut pod_labels = pod_labels(pool);
    pod_labels.insert(labels::PHASE.to_owned(), PodPhase::Unknown.as_str().to_owned());
    pod_labels.insert(labels::REVISION.to_owned(), revision.to_owned());
    pod_labels.insert(labels::DIRECT_POD.to_owned(), "true".to_owned());
    pod_labels.insert(labels::CN_UUID.to_owned(), cnpool_api::cn_store_uuid(name, &subdomain, &namespace));
    let mut annotations = meta.annotations.take().unwrap_or_default();
    annotations.insert(labels::MANAGEMENT_POLICY.to_owned(), labels::MANAGEMENT_POLICY_POOLING.to_owned());
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.hostname = Some(name.to_owned());
    spec.subdomain = Some(subdomain);
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.clone()),
            labels: Some(pod_labels),
            annotations: Some(annotations),
            finalizers: Some(vec![labels::CN_DRAINING_FINALIZER.to_owned()]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    match pods.create(&PostParams::default(), &pod).await {
        Ok(_) => {
            tracing::info!(pool = %pool_name, pod = %name, revision, "created pod");
            ctx.expected.creation(&(namespace, pool_name), name);
            Ok(true)
        }
        Err(error) if is_already_exists(&error) => {
            tracing::debug!(pool = %pool_name, pod = %name, "pod exists already");
            Ok(false)
        }
        Err(error) => Err(Error::kube("create pod", name, error)),
    }
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
            Ok(Action::requeue(ctx.refused(Kind::Pool, &(namespace, name))))
        }
        Err(error) => Err(Error::kube("remove finalizer from", format!("CNPool {namespace}/{name}"), error)),
    }
}

/// Writes the pool's status when it changed; `false` when the write was
/// refused as stale.
async fn write_status<R>(
    ctx: &Context<R>,
    pool: &CNPool,
    pods: &[PodView],
    pending: u32,
    revision: &str,
) -> Result<bool, Error> {
    let count = |phase: PodPhase| pods.iter().filter(|pod| pod.phase == Some(phase)).count() as i32;
    let current = pool.status.clone().unwrap_or_default();
    let status = CNPoolStatus {
        replicas: pods.len() as i32,
        idle: count(PodPhase::Idle),
        bound: count(PodPhase::Bound),
        draining: count(PodPhase::Draining),
        terminating: count(PodPhase::Terminating),
        pending_claims: i32::try_from(pending).unwrap_or(i32::MAX),
        current_revision: Some(revision.to_owned()),
        conditions: current.conditions.clone(),
        observed_generation: pool.metadata.generation,
    };
    ctx.metrics.pool_observed(&pool.namespace().unwrap_or_default(), &pool.name_any(), Some(&status));
    if status == current {
        return Ok(true);
    }
    let mut updated = pool.clone();
    updated.status = Some(status);
    let pools: Api<CNPool> = Api::namespaced(ctx.client.clone(), pool.namespace().as_deref().unwrap_or_default());
    match pools.replace_status(&pool.name_any(), &PostParams::default(), &updated).await {
        Ok(written) => {
            ctx.pool_status_writes.wrote(pool.resource_version().as_deref(), written);
            Ok(true)
        }
        Err(error) if is_stale(&error) || is_not_found(&error) => Ok(false),
        Err(error) => Err(Error::kube("write status of", format!("CNPool {}", pool.name_any()), error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_revision_ignores_key_order_and_changes_with_the_template() {
        let a: PodTemplateSpec =
            serde_json::from_value(json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"containers": [{"name": "cn", "image": "mo:1"}]}}))
                .unwrap();
        let b: PodTemplateSpec =
            serde_json::from_value(json!({"spec": {"containers": [{"image": "mo:1", "name": "cn"}]}, "metadata": {"labels": {"b": "2", "a": "1"}}}))
                .unwrap();
        let c: PodTemplateSpec =
            serde_json::from_value(json!({"spec": {"containers": [{"image": "mo:2", "name": "cn"}]}})).unwrap();
        assert_eq!(template_revision(&a), template_revision(&b));
        assert_ne!(template_revision(&a), template_revision(&c));
        assert_eq!(template_revision(&a).len(), 10);
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let mut out = String::new();
        write_canonical(&json!({"b": {"d": 1, "c": [{"f": true, "e": null}]}, "a": "x"}), &mut out);
        assert_eq!(out, r#"{"a":"x","b":{"c":[{"e":null,"f":true}],"d":1}}"#);
    }
}
