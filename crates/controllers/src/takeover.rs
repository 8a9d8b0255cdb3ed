//! Pods the Go operator rendered, taken into cnpool's pools at cutover
//! (docs/cutover.md). The Go operator's CN pods belong to an OpenKruise
//! CloneSet of its CN set (the pods' controller ownerReference), so deleting
//! that CN set, or its pool's CN set chain, would have the garbage collector
//! delete every one of them, bound or not. cnpool owns a pool's pods through
//! their labels alone, so it removes those references: a pod of a pool is
//! then deleted only by cnpool's own decisions.
//!
//! A pod's readiness gates cannot be removed, and the Go pods carry kruise's
//! two besides `cn-store`: with no kruise managing them any more, cnpool
//! answers them itself (True), so that the pods stay Ready.
//!
//! A workload that takes a released pod back (kruise still running its
//! CloneSet) is told, in a Warning Event on the pod, and not fought: the
//! annotation [`labels::RELEASED_FROM`] remembers the release.

use cnpool_api::labels;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::context::Context;
use crate::error::{Error, is_not_found, is_stale};
use crate::key::key_of;

/// API groups of the Go operator's workloads: kruise's CloneSet and
/// StatefulSet, and the operator's own CN set and pool objects.
const GO_WORKLOAD_GROUPS: [&str; 2] = ["apps.kruise.io/", "core.matrixorigin.io/"];

/// The pod's references to a Go workload.
pub fn go_workloads(pod: &Pod) -> Vec<&OwnerReference> {
    let references = pod.metadata.owner_references.iter().flatten();
    references
        .filter(|reference| GO_WORKLOAD_GROUPS.iter().any(|group| reference.api_version.starts_with(group)))
        .collect()
}

fn named(reference: &OwnerReference) -> String {
    format!("{}/{}", reference.kind, reference.name)
}

/// What became of a pod with a Go workload among its owners.
pub enum Release {
    /// The references are gone: the pod's next version shows it.
    Released,
    /// The write was refused as stale, or the pod is gone.
    Refused,
    /// cnpool released it before and a workload took it back.
    TakenBack,
}

/// Removes the pod's Go workload references, guarded by its version, and
/// says so in an Event; or, if they came back after cnpool removed them,
/// says that instead. `None` when the pod has none.
pub async fn release_from_go_workload<R>(ctx: &Context<R>, pod: &Pod) -> Result<Option<Release>, Error> {
    let workloads = go_workloads(pod);
    let Some(first) = workloads.first() else { return Ok(None) };
    let (namespace, name) = key_of(pod);
    let owners = workloads.iter().map(|reference| named(reference)).collect::<Vec<_>>().join(", ");
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    if let Some(released) = annotations.get(labels::RELEASED_FROM) {
        let note = format!(
            "{owners} owns this pod again after cnpool released it from {released}: the Go operator or OpenKruise still \
             manages it, and deleting that workload would delete the pod. Delete the workload with \
             --cascade=orphan (docs/cutover.md)"
        );
        ctx.event(&pod.object_ref(&()), true, "GoWorkloadActive", "Release", note);
        return Ok(Some(Release::TakenBack));
    }
    let kept: Vec<&OwnerReference> = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|reference| !workloads.iter().any(|workload| workload.uid == reference.uid))
        .collect();
    let mut annotated = annotations;
    annotated.insert(labels::RELEASED_FROM.to_owned(), named(first));
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": pod.metadata.resource_version},
        {"op": "add", "path": "/metadata/ownerReferences", "value": kept},
        {"op": "add", "path": "/metadata/annotations", "value": annotated},
    ]))
    .map_err(|source| Error::Encode { what: "pod owner references patch", source })?;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    match pods.patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch)).await {
        Ok(_) => {
            let pool = pod.metadata.labels.as_ref().and_then(|labels| labels.get(labels::POOL_NAME));
            tracing::info!(pod = %name, pool = pool.map(String::as_str).unwrap_or_default(), from = %owners, "released pod from its Go workload");
            let note = format!("cnpool took the pod over from {owners}: its garbage collection no longer reaches it");
            ctx.event(&pod.object_ref(&()), false, "ReleasedFromGoWorkload", "Release", note);
            Ok(Some(Release::Released))
        }
        Err(error) if is_stale(&error) || is_not_found(&error) => Ok(Some(Release::Refused)),
        Err(error) => Err(Error::kube("release from its Go workload", name, error)),
    }
}

/// The kruise readiness-gate conditions the pod needs set True: one per
/// kruise gate it has whose condition is not True.
pub fn kruise_gate_answers(pod: &Pod, now: jiff::Timestamp) -> Vec<PodCondition> {
    let gates = pod.spec.as_ref().and_then(|spec| spec.readiness_gates.as_ref());
    let conditions = pod.status.as_ref().and_then(|status| status.conditions.as_ref());
    let is_true = |type_: &str| conditions.into_iter().flatten().any(|c| c.type_ == type_ && c.status == "True");
    gates
        .into_iter()
        .flatten()
        .map(|gate| gate.condition_type.as_str())
        .filter(|gate| labels::KRUISE_READINESS_GATES.contains(gate) && !is_true(gate))
        .map(|gate| PodCondition {
            type_: gate.to_owned(),
            status: "True".to_owned(),
            reason: Some("ManagedByCnpool".to_owned()),
            message: Some("cnpool manages this pod; no OpenKruise workload does".to_owned()),
            last_transition_time: Some(Time(now)),
            ..PodCondition::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn only_the_go_operators_workloads_are_released() {
        let pod = pod(json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "p-5d7c6d9c8d-cn", "uid": "1", "controller": true},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "keep", "uid": "2"},
            {"apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "CNSet", "name": "p-5d7c6d9c8d", "uid": "3"},
        ]}}));
        let released: Vec<String> = go_workloads(&pod).into_iter().map(named).collect();
        assert_eq!(released, ["CloneSet/p-5d7c6d9c8d-cn", "CNSet/p-5d7c6d9c8d"]);
        assert!(go_workloads(&Pod::default()).is_empty());
    }

    #[test]
    fn the_kruise_gates_the_pod_has_are_answered_true_once() {
        let now = jiff::Timestamp::UNIX_EPOCH;
        let gated = |conditions: serde_json::Value| {
            pod(json!({
                "spec": {"containers": [], "readinessGates": [
                    {"conditionType": "matrixorigin.io/cn-store"},
                    {"conditionType": "KruisePodReady"},
                    {"conditionType": "InPlaceUpdateReady"},
                ]},
                "status": {"conditions": conditions},
            }))
        };
        let answers = kruise_gate_answers(&gated(json!([{"type": "KruisePodReady", "status": "False"}])), now);
        let types: Vec<(&str, &str)> = answers.iter().map(|c| (c.type_.as_str(), c.status.as_str())).collect();
        assert_eq!(types, [("KruisePodReady", "True"), ("InPlaceUpdateReady", "True")]);
        let answered = gated(
            json!([{"type": "KruisePodReady", "status": "True"}, {"type": "InPlaceUpdateReady", "status": "True"}]),
        );
        assert!(kruise_gate_answers(&answered, now).is_empty());
        let ungated = pod(json!({"spec": {"containers": []}, "status": {"conditions": []}}));
        assert!(kruise_gate_answers(&ungated, now).is_empty(), "a pod cnpool rendered has no kruise gate");
    }
}
