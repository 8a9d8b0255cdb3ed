//! A cluster as the Go matrixone-operator leaves it, for the cutover and
//! shadow-mode scenarios.

use std::time::Duration;

use cnpool_api::labels;
use cnpool_registry::StoreLabels;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
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
