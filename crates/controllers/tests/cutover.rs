#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! Taking over a cluster the Go matrixone-operator ran.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use cnpool_api::{CNClaim, labels};
use cnpool_controllers::cutover;
use cnpool_registry::WorkState;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, PostParams};
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
        // Its CN registered under the UUID its DNS name gives: the Go pods'
        // subdomain is the pool's, a pod cnpool rendered has its own.
        let pod = cluster.pods().get(pod).await.unwrap();
        let store = cluster.registry().store(&cnpool_world::store_uuid(&pod).unwrap()).unwrap();
        assert_eq!(store.work_state, WorkState::Working);
        assert_eq!(store.labels, [("account".to_string(), vec![name.clone()])].into(), "{name}'s store");
    }
}

/// Writes the cutover record as cnpool's first start on this cluster left
/// it, at `time`.
async fn record_cutover(cluster: &Cluster, time: jiff::Timestamp) {
    let record: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": cutover::RECORD},
        "data": {cutover::KEY: time.to_string()},
    }))
    .unwrap();
    let records: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &cluster.ns);
    records.create(&PostParams::default(), &record).await.unwrap();
}

/// The cutover time the operator recorded, once it has.
async fn recorded_cutover(cluster: &Cluster) -> jiff::Timestamp {
    let records: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &cluster.ns);
    eventually("the cutover time recorded", Duration::from_secs(10), || async {
        let record = records.get_opt(cutover::RECORD).await.map_err(|e| e.to_string())?.ok_or("no record yet")?;
        let time = record.data.as_ref().and_then(|data| data.get(cutover::KEY)).ok_or("no time in it")?;
        time.parse::<jiff::Timestamp>().map_err(|e| e.to_string())
    })
    .await
}

/// Whether the pod is as the Go operator left it bound to `claim`: phase
/// Bound, `claimed-by` the claim, no UID.
fn go_bound_to(pod: &Pod, claim: &str) -> bool {
    label(pod, labels::PHASE) == Some("Bound")
        && label(pod, labels::CLAIMED_BY) == Some(claim)
        && label(pod, labels::CLAIM_UID).is_none()
}

/// Waits until the pod `name` is released: no owner, Draining or Idle.
async fn released(cluster: &Cluster, name: &str, within: Duration) {
    eventually(&format!("{name} released"), within, || async {
        let pod = cluster.pods().get(name).await.map_err(|e| e.to_string())?;
        let unowned = label(&pod, labels::CLAIMED_BY).is_none() && label(&pod, labels::CLAIM_UID).is_none();
        match label(&pod, labels::PHASE) {
            Some("Draining" | "Idle") if unowned => Ok(()),
            phase => Err(format!("{phase:?}, claimed-by {:?}", label(&pod, labels::CLAIMED_BY))),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_binding_is_kept_while_a_claim_of_its_name_exists_and_a_recreated_claim_does_not_inherit_it() {
    let cluster = Cluster::new().await;
    // cnpool first started an hour ago; since then "solo" was deleted and
    // created again, asking for the pod the Go operator had bound to it.
    let cutover = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() - 3600).unwrap();
    record_cutover(&cluster, cutover).await;
    cluster.create_pool(1, Some(10)).await;
    for (pod, claim) in [("mo-0", "solo"), ("mo-1", "gone")] {
        cluster.pods().create(&PostParams::default(), &legacy::go_pod(&cluster.ns, pod, claim)).await.unwrap();
    }
    let mut recreated = cluster.create_claim("solo", &[("account", "solo")], &[]).await;
    recreated.spec.pod_name = "mo-0".into();
    cluster.claims().replace("solo", &PostParams::default(), &recreated).await.unwrap();
    let commits = Commits::record(&cluster).await;
    cluster.start_operator(0).await;
    cluster.start_operator(1).await;

    // No claim is named "gone": its pod goes back to the pool.
    released(&cluster, "mo-1", Duration::from_secs(15)).await;
    // The new "solo" is told the pod is not to be had, and does not take it.
    eventually("solo told mo-0 is not available", Duration::from_secs(15), || async {
        let claim = cluster.claims().get("solo").await.map_err(|e| e.to_string())?;
        let conditions = claim.status.as_ref().map(|status| status.conditions.clone()).unwrap_or_default();
        match conditions.iter().find(|condition| condition.type_ == "Bound") {
            Some(bound) if bound.status == "False" && bound.message.contains("mo-0") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let solo = cluster.claims().get("solo").await.unwrap();
    assert_ne!(claim_phase(&solo), Some("Bound"));
    for state in commits.states_of("pods", "mo-0") {
        let pod: Pod = serde_json::from_value(state).unwrap();
        assert!(go_bound_to(&pod, "solo"), "mo-0 kept as the Go operator bound it: {:?}", pod.metadata.labels);
    }
    assert!(go_bound_to(&cluster.pods().get("mo-0").await.unwrap(), "solo"));
    assert_eq!(recorded_cutover(&cluster).await, cutover, "the record is never rewritten");

    // Once no claim of its name exists, the Go pod goes back to the pool.
    cluster.claims().delete("solo", &Default::default()).await.unwrap();
    released(&cluster, "mo-0", Duration::from_secs(15)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_go_era_claim_keeps_its_pod() {
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    cluster.create_pool(1, Some(10)).await;
    for (pod, claim) in [("mo-0", "solo"), ("mo-1", "odd")] {
        cluster.pods().create(&PostParams::default(), &legacy::go_pod(&cluster.ns, pod, claim)).await.unwrap();
    }
    cluster.create_claim("solo", &[("account", "solo")], &[]).await;
    // The Go operator never validated: a reserved key in its additional labels.
    let odd = cluster.create_claim("odd", &[("account", "odd")], &[("matrixorigin.io/tier", "gold")]).await;
    for (claim, pod) in [("solo", "mo-0"), ("odd", "mo-1")] {
        legacy::go_bind(&cluster, claim, pod).await;
    }
    cluster.start_operator(0).await;

    let cutover = recorded_cutover(&cluster).await;
    let created = odd.metadata.creation_timestamp.clone().unwrap().0;
    assert!(created < cutover, "recorded at the operator's first start, after the Go-era claims");
    eventually("solo adopted its Go-bound pod", Duration::from_secs(30), || async {
        let pod = cluster.pods().get("mo-0").await.map_err(|e| e.to_string())?;
        let solo = cluster.claims().get("solo").await.map_err(|e| e.to_string())?;
        match label(&pod, labels::CLAIM_UID) {
            uid if uid == solo.metadata.uid.as_deref() => Ok(()),
            uid => Err(format!("claim-uid {uid:?}")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Whether cnpool adopts it or leaves it unadopted until its spec is
    // fixed, the tenant keeps its CN: Bound, claimed by "odd", never
    // released, nor given another owner.
    let odd_uid = odd.metadata.uid.clone().unwrap();
    let states = commits.states_of("pods", "mo-1");
    for state in states.iter().chain([&serde_json::to_value(cluster.pods().get("mo-1").await.unwrap()).unwrap()]) {
        let pod: Pod = serde_json::from_value(state.clone()).unwrap();
        assert_eq!(label(&pod, labels::PHASE), Some("Bound"), "{:?}", pod.metadata.labels);
        assert_eq!(label(&pod, labels::CLAIMED_BY), Some("odd"));
        assert!(label(&pod, labels::CLAIM_UID).is_none_or(|uid| uid == odd_uid), "{:?}", pod.metadata.labels);
    }
    assert_eq!(cluster.claims().get("odd").await.unwrap().spec.pod_name, "mo-1");
    assert!(loss_reasons(&commits, "odd").is_empty(), "an invalid Go-era claim is not Lost");
}
