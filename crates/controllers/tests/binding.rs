#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! The binding core end to end: the controllers on the embedded API server
//! with the simulated kubelet, CNs and HAKeeper.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cnpool_api::labels;
use cnpool_registry::WorkState;
use support::*;

const BIND: Duration = Duration::from_secs(30);

fn labels_of(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<String>> {
    pairs.iter().map(|(k, v)| (k.to_string(), vec![v.to_string()])).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_bind_to_distinct_pods_whose_stores_carry_their_labels() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0);
    cluster.create_pool(2, Some(10)).await;

    eventually("the pool keeps 2 Idle pods", BIND, || async {
        let pods = cluster.pool_pods().await;
        let idle = phase_count(&pods, "Idle");
        if idle == 2 && pods.len() == 2 { Ok(()) } else { Err(format!("{idle} Idle of {}", pods.len())) }
    })
    .await;

    let wishes: [(&str, &[(&str, &str)]); 3] =
        [("alpha", &[("account", "acme")]), ("beta", &[("account", "globex"), ("role", "tp")]), ("gamma", &[])];
    for (name, cn_labels) in wishes {
        cluster.create_claim(name, cn_labels, &[("team", name)]).await;
    }

    let bound = eventually("3 claims Bound to 3 distinct pods", BIND, || async {
        let claims = cluster.all_claims().await;
        let bound: BTreeMap<String, String> = claims
            .iter()
            .filter(|claim| claim_phase(claim) == Some("Bound"))
            .map(|claim| (claim.metadata.name.clone().unwrap(), claim.spec.pod_name.clone()))
            .collect();
        let distinct: BTreeSet<&String> = bound.values().collect();
        if bound.len() == 3 && distinct.len() == 3 { Ok(bound) } else { Err(format!("{bound:?}")) }
    })
    .await;

    eventually("the pool refills to 2 Idle pods", BIND, || async {
        let pods = cluster.pool_pods().await;
        let idle = phase_count(&pods, "Idle");
        if idle == 2 { Ok(()) } else { Err(format!("{idle} Idle")) }
    })
    .await;

    let pods = cluster.pool_pods().await;
    let claims = cluster.all_claims().await;
    for (name, cn_labels) in wishes {
        let claim = claims.iter().find(|claim| claim.metadata.name.as_deref() == Some(name)).unwrap();
        let pod = pods.iter().find(|pod| pod.metadata.name.as_ref() == Some(&bound[name])).unwrap();
        assert_eq!(label(pod, labels::CLAIM_UID), claim.metadata.uid.as_deref(), "{name}'s pod carries its UID");
        assert_eq!(label(pod, labels::PHASE), Some("Bound"));
        assert_eq!(label(pod, "team"), Some(name), "{name}'s additional pod label");
        let store = cluster.registry().store(label(pod, labels::CN_UUID).unwrap()).expect("store registered");
        assert_eq!(store.work_state, WorkState::Working, "{name}'s store serves");
        assert_eq!(store.labels, labels_of(cn_labels), "{name}'s store carries exactly its CN labels");
        let recorded = claim.status.as_ref().and_then(|status| status.store.as_ref()).unwrap();
        assert_eq!(recorded.pod_uid, pod.metadata.uid, "{name} recorded its pod's UID");
    }
}
