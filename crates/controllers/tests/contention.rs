#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! Two operator instances and more claims than the pool may have pods.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use cnpool_api::labels;
use support::*;

const CLAIMS: usize = 200;
const MAX_PODS: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_operators_never_give_a_pod_two_owners_nor_exceed_max_pods() {
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    cluster.start_operator(0).await;
    cluster.start_operator(1).await;
    cluster.create_pool(2, Some(MAX_PODS as i32)).await;
    let creations = (0..CLAIMS).map(|i| {
        let cluster = &cluster;
        async move { cluster.create_claim(&format!("claim-{i:03}"), &[("account", &format!("a{i}"))], &[]).await }
    });
    futures::future::join_all(creations).await;

    eventually("100 claims Bound and 100 Pending", Duration::from_secs(90), || async {
        let claims = cluster.all_claims().await;
        let count = |phase| claims.iter().filter(|claim| claim_phase(claim) == Some(phase)).count();
        let (bound, pending) = (count("Bound"), count("Pending"));
        if bound == MAX_PODS && pending == CLAIMS - MAX_PODS {
            return Ok(());
        }
        let others: Vec<String> = claims
            .iter()
            .filter(|claim| !matches!(claim_phase(claim), Some("Bound" | "Pending")))
            .map(|claim| {
                let conditions = claim.status.as_ref().map(|status| &status.conditions);
                let reasons: Vec<&str> = conditions.into_iter().flatten().map(|c| c.reason.as_str()).collect();
                format!("{:?} {:?} {reasons:?}", claim.metadata.name, claim_phase(claim))
            })
            .collect();
        Err(format!("{bound} Bound, {pending} Pending, others: {others:?}"))
    })
    .await;

    let claims = cluster.all_claims().await;
    let bound_pods: BTreeSet<&str> = claims
        .iter()
        .filter(|claim| claim_phase(claim) == Some("Bound"))
        .map(|claim| claim.spec.pod_name.as_str())
        .collect();
    assert_eq!(bound_pods.len(), MAX_PODS, "each Bound claim holds its own pod");
    let pods = cluster.pool_pods().await;
    for claim in claims.iter().filter(|claim| claim_phase(claim) == Some("Bound")) {
        let pod = pods.iter().find(|pod| pod.metadata.name.as_deref() == Some(claim.spec.pod_name.as_str())).unwrap();
        assert_eq!(label(pod, labels::CLAIM_UID), claim.metadata.uid.as_deref(), "the pod agrees it is the claim's");
    }

    // Every committed write, in order, as a watch of each kind saw it: a
    // pod's owner only ever changes from none to one claim or back, two live
    // claims never record one pod as Bound, and the pool never has more than
    // maxPods pods.
    let mut pods_alive: BTreeSet<String> = BTreeSet::new();
    let mut peak = 0;
    let mut bound_by: HashMap<String, String> = HashMap::new(); // claim name → recorded pod UID while Bound
    let mut checked = 0;
    for event in commits.snapshot() {
        let name = event.object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        match event.plural.as_str() {
            "pods" => {
                checked += 1;
                match event.change {
                    Change::Added => {
                        pods_alive.insert(name.clone());
                    }
                    Change::Deleted => {
                        pods_alive.remove(&name);
                    }
                    Change::Modified => {}
                }
                peak = peak.max(pods_alive.len());
                assert!(pods_alive.len() <= MAX_PODS, "rv {}: {} pods", event.resource_version, pods_alive.len());
                let owner = |object: &serde_json::Value| {
                    object["metadata"]["labels"][labels::CLAIM_UID].as_str().map(str::to_owned)
                };
                if let Some(old) = &event.old {
                    let (before, after) = (owner(old), owner(&event.object));
                    assert!(
                        before.is_none() || after.is_none() || before == after,
                        "rv {}: pod {name} went from owner {before:?} to {after:?} without being released",
                        event.resource_version
                    );
                }
            }
            "cnclaims" => {
                checked += 1;
                let status = &event.object["status"];
                let alive = event.change != Change::Deleted;
                match status["store"]["podUID"].as_str().filter(|_| alive && status["phase"] == "Bound") {
                    Some(pod_uid) => bound_by.insert(name, pod_uid.to_owned()),
                    None => bound_by.remove(&name),
                };
                let mut holders: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
                for (claim, pod) in &bound_by {
                    holders.entry(pod.as_str()).or_default().push(claim.as_str());
                }
                let shared: Vec<_> = holders.iter().filter(|(_, claims)| claims.len() > 1).collect();
                assert!(shared.is_empty(), "rv {}: pods Bound to two claims: {shared:?}", event.resource_version);
            }
            _ => {}
        }
    }
    assert_eq!(peak, MAX_PODS, "the pool grew to exactly maxPods");
    assert!(checked > 2 * CLAIMS, "the commits were recorded ({checked})");
}
