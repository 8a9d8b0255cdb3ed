#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! Taking over a cluster the Go matrixone-operator ran.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use cnpool_api::{CNClaim, labels};
use cnpool_registry::{StoreLabels, WorkState};
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use serde_json::json;
use support::*;

/// A pod as the Go operator leaves it bound to `claim`: phase Bound and
/// `claimed-by`, but no `claim-uid`, no revision and no CN-store finalizer.
fn go_pod(ns: &str, name: &str, claim: &str) -> Pod {
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
async fn go_bind(cluster: &Cluster, claim: &str, pod: &str) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_left_by_the_go_operator_are_repaired_on_start() {
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    cluster.create_pool(1, Some(10)).await;
    // mo-2 is the incident's state: the Go operator bound two claims to it;
    // its claimed-by names "shared-a". "dangling" points at a pod that is gone.
    let holders = [("mo-0", "solo"), ("mo-1", "other"), ("mo-2", "shared-a")];
    for (pod, claim) in holders {
        cluster.pods().create(&PostParams::default(), &go_pod(&cluster.ns, pod, claim)).await.unwrap();
    }
    for claim in ["solo", "other", "shared-a", "shared-b", "dangling"] {
        cluster.create_claim(claim, &[("account", claim)], &[]).await;
    }
    for (claim, pod) in
        [("solo", "mo-0"), ("other", "mo-1"), ("shared-a", "mo-2"), ("shared-b", "mo-2"), ("dangling", "mo-9")]
    {
        go_bind(&cluster, claim, pod).await;
    }
    // The Go CNs serve their tenants' labels.
    for (pod, claim) in holders {
        let uuid = cnpool_api::cn_store_uuid(pod, POOL, &cluster.ns);
        eventually(&format!("{pod}'s CN registered"), Duration::from_secs(10), || async {
            cluster.registry().store(&uuid).map(|_| ()).ok_or_else(|| "not yet".to_string())
        })
        .await;
        let account: StoreLabels = [("account".to_string(), vec![claim.to_string()])].into();
        cluster.registry().replace_labels_now(&uuid, &account).unwrap();
    }

    cluster.start_operator(0).await;

    let claims: Vec<CNClaim> =
        eventually("every claim Bound to a pod that carries its UID", Duration::from_secs(60), || async {
            let claims = cluster.all_claims().await;
            let pods = cluster.pool_pods().await;
            let mut seen = Vec::new();
            for claim in &claims {
                let pod = pods.iter().find(|pod| pod.metadata.name.as_deref() == Some(claim.spec.pod_name.as_str()));
                let owned = pod.is_some_and(|pod| label(pod, labels::CLAIM_UID) == claim.metadata.uid.as_deref());
                if claim_phase(claim) != Some("Bound") || !owned {
                    seen.push(format!(
                        "{}: {:?} on {}",
                        claim.metadata.name.clone().unwrap(),
                        claim_phase(claim),
                        claim.spec.pod_name
                    ));
                }
            }
            if seen.is_empty() { Ok(claims) } else { Err(seen.join(", ")) }
        })
        .await;

    let pod_of: BTreeMap<String, String> =
        claims.iter().map(|claim| (claim.metadata.name.clone().unwrap(), claim.spec.pod_name.clone())).collect();
    assert_eq!(pod_of["solo"], "mo-0", "a Go-bound pod is adopted, not replaced");
    assert_eq!(pod_of["other"], "mo-1");
    assert_eq!(pod_of["shared-a"], "mo-2", "the claim the pod's claimed-by names keeps it");
    assert_ne!(pod_of["shared-b"], "mo-2", "the other claim gets a pod of its own");
    let distinct: std::collections::BTreeSet<&String> = pod_of.values().collect();
    assert_eq!(distinct.len(), pod_of.len(), "one owner per pod: {pod_of:?}");

    assert_eq!(loss_reasons(&commits, "shared-b"), ["Misbound"]);
    assert_eq!(loss_reasons(&commits, "dangling"), ["PodDeleted"]);
    assert!(loss_reasons(&commits, "solo").is_empty(), "an adopted claim is never Lost");

    for (name, pod) in &pod_of {
        let store = cluster.registry().store(&cnpool_api::cn_store_uuid(pod, POOL, &cluster.ns)).unwrap();
        assert_eq!(store.work_state, WorkState::Working);
        assert_eq!(store.labels, [("account".to_string(), vec![name.clone()])].into(), "{name}'s store");
    }
}
