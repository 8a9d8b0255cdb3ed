//! A cluster as the Go matrixone-operator leaves it, for the cutover and
//! shadow-mode scenarios.

use std::time::Duration;

use cnpool_api::labels;
use cnpool_registry::StoreLabels;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

use super::*;

/// A pod as the Go operator leaves it bound to `claim`: phase Bound and
/// `claimed-by`, but no `claim-uid`, no revision and no CN-store finalizer.
pub fn go_pod(ns: &str, name: &str, claim: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {
                labels::POOL_NAME: POOL,
                labels::PHASE: "Bound",
                labels::CLAIMED_BY: claim,
                labels::OWNER: format!("owner-{claim}"),
                "tier": "standard",
            },
        },
        "spec": {"hostname": name, "subdomain": POOL, "containers": [{"name": "cn", "image": "matrixorigin/matrixone:go"}]},
    }))
    .unwrap()
}

/// The API of namespaced kind `group/v1alpha1 kind` (plural `plural`) in
/// `cluster`'s namespace, its CRD installed first if it is not: schemaless,
/// with a status subresource, as far as a test reads the Go operator's and
/// OpenKruise's objects.
pub async fn schemaless_kind(cluster: &Cluster, group: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind, "listKind": format!("{kind}List")},
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    }))
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.reason == "AlreadyExists" => {}
        Err(other) => panic!("install the {kind} CRD: {other}"),
    }
    let gvk = GroupVersionKind::gvk(group, "v1alpha1", kind);
    let api =
        Api::namespaced_with(cluster.client.clone(), &cluster.ns, &ApiResource::from_gvk_with_plural(&gvk, plural));
    eventually(&format!("the {kind} CRD served"), Duration::from_secs(30), || async {
        api.list(&Default::default()).await.map(|_| ()).map_err(|error| error.to_string())
    })
    .await;
    api
}

/// Creates LogSet `name` of `spec` and writes the status the Go LogSet
/// controller gives it once ready (reference §5): Ready and Synced for its
/// generation, and `status.discovery` at `address:port`. Through the status
/// subresource of the Go operator's LogSet CRD, installed first if it is
/// not, so that every test on a shared server agrees on the CRD.
pub async fn create_ready_log_set(
    cluster: &Cluster,
    name: &str,
    spec: serde_json::Value,
    (address, port): (&str, u16),
) {
    let log_sets = schemaless_kind(cluster, "core.matrixorigin.io", "LogSet", "logsets").await;
    let log_set: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "LogSet",
        "metadata": {"name": name, "namespace": cluster.ns},
        "spec": spec,
    }))
    .unwrap();
    let created = log_sets.create(&PostParams::default(), &log_set).await.unwrap();
    let generation = created.metadata.generation.unwrap_or(1);
    let condition = |type_: &str| {
        json!({"type": type_, "status": "True", "reason": type_, "message": "", "observedGeneration": generation,
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    let status = json!({"status": {
        "conditions": [condition("Ready"), condition("Synced")],
        "discovery": {"address": address, "port": port}
    }});
    log_sets.patch_status(name, &Default::default(), &kube::api::Patch::Merge(&status)).await.unwrap();
}

/// The kruise CloneSet `S-cn` the Go operator makes for CN set `S`, as far
/// as its pods' owner reference needs it; returns its UID.
pub async fn go_clone_set(cluster: &Cluster, cn_set: &str) -> String {
    let clone_sets = schemaless_kind(cluster, "apps.kruise.io", "CloneSet", "clonesets").await;
    let clone_set: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": format!("{cn_set}-cn"), "namespace": cluster.ns},
        "spec": {"replicas": 0},
    }))
    .unwrap();
    clone_sets.create(&PostParams::default(), &clone_set).await.unwrap().metadata.uid.unwrap()
}

/// A CN pod as the Go operator renders it through CN set `cn_set`
/// (`<pool>-<hash>`, reference §0 and §2) and leaves it in `phase`, bound to
/// `claim` if any: owned by the CN set's kruise CloneSet (UID
/// `clone_set_uid`), with the instance labels, the headless Service's
/// subdomain, the Go CN-store finalizer and kruise's readiness gates.
pub fn go_cn_set_pod(
    ns: &str,
    name: &str,
    (cn_set, clone_set_uid): (&str, &str),
    phase: &str,
    claim: Option<&str>,
) -> Pod {
    let headless = format!("{cn_set}-cn-headless");
    let mut labels = json!({
        "matrixorigin.io/namespace": ns,
        "matrixorigin.io/instance": cn_set,
        "matrixorigin.io/component": "CNSet",
        "apps.kruise.io/cloneset-instance-id": name.rsplit('-').next(),
        labels::POOL_NAME: POOL,
        labels::PHASE: phase,
        labels::CN_UUID: cnpool_api::cn_store_uuid(name, &headless, ns),
        "tier": "standard",
    });
    if let Some(claim) = claim {
        labels[labels::CLAIMED_BY] = json!(claim);
        labels[labels::OWNER] = json!(format!("owner-{claim}"));
    }
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": labels,
            "annotations": {labels::MANAGEMENT_POLICY: labels::MANAGEMENT_POLICY_POOLING},
            "finalizers": [labels::CN_DRAINING_FINALIZER],
            "ownerReferences": [{
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": format!("{cn_set}-cn"),
                "uid": clone_set_uid, "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "subdomain": headless,
            "readinessGates": [
                {"conditionType": labels::CN_STORE_CONDITION},
                {"conditionType": "KruisePodReady"},
                {"conditionType": "InPlaceUpdateReady"},
            ],
            "containers": [{"name": "main", "image": "matrixorigin/matrixone:1.1.0"}],
        },
    }))
    .unwrap()
}

/// Writes the status the Go operator gives a bound claim: phase Bound and
/// the pod under the Go key `status.store.string`, no pod UID.
pub async fn go_bind(cluster: &Cluster, claim: &str, pod: &str) {
    let mut current = cluster.claims().get(claim).await.unwrap();
    current.spec.pod_name = pod.to_owned();
    let mut current = cluster.claims().replace(claim, &PostParams::default(), &current).await.unwrap();
    current.status = Some(
        serde_json::from_value(json!({
            "phase": "Bound",
            "store": {"string": pod, "workState": 1, "labels": [{"key": "account", "values": [claim]}]},
            "boundTime": "2026-01-01T00:00:00Z",
        }))
        .unwrap(),
    );
    cluster.claims().replace_status(claim, &PostParams::default(), &current).await.unwrap();
}

/// The pods the Go operator bound, with the claim each pod's `claimed-by`
/// names.
pub const HOLDERS: [(&str, &str); 3] = [("mo-0", "solo"), ("mo-1", "other"), ("mo-2", "shared-a")];

/// Writes the Go operator's state into `cluster`: a pool; pods bound to
/// [`HOLDERS`], whose CNs serve their tenants' labels; claims pointing at
/// them, where mo-2 is the incident's state (the Go operator bound two
/// claims to it; its claimed-by names "shared-a") and "dangling" points at
/// a pod that is gone.
pub async fn leave_go_operator_state(cluster: &Cluster) {
    cluster.create_pool(1, Some(10)).await;
    for (pod, claim) in HOLDERS {
        cluster.pods().create(&PostParams::default(), &go_pod(&cluster.ns, pod, claim)).await.unwrap();
    }
    for claim in ["solo", "other", "shared-a", "shared-b", "dangling"] {
        cluster.create_claim(claim, &[("account", claim)], &[]).await;
    }
    for (claim, pod) in
        [("solo", "mo-0"), ("other", "mo-1"), ("shared-a", "mo-2"), ("shared-b", "mo-2"), ("dangling", "mo-9")]
    {
        go_bind(cluster, claim, pod).await;
    }
    // The Go CNs serve their tenants' labels.
    for (pod, claim) in HOLDERS {
        let uuid = cnpool_api::cn_store_uuid(pod, POOL, &cluster.ns);
        eventually(&format!("{pod}'s CN registered"), Duration::from_secs(10), || async {
            cluster.store(&uuid).await.map(|_| ()).ok_or_else(|| "not yet".to_string())
        })
        .await;
        let account: StoreLabels = [("account".to_string(), vec![claim.to_string()])].into();
        cluster.label_store(&uuid, &account).await;
    }
}
