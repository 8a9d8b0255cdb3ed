#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! Taking over a cluster the Go matrixone-operator ran.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use cnpool_api::{CNClaim, labels};
use cnpool_registry::WorkState;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_left_by_the_go_operator_are_repaired_on_start() {
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    legacy::leave_go_operator_state(&cluster).await;
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
