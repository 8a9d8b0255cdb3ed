#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! Pod and pool lifecycles around the binding: crashes, orphans, HAKeeper
//! outages during deletion, and pool deletion.

mod support;

use std::time::Duration;

use cnpool_api::labels;
use cnpool_registry::RegistryError;
use cnpool_registry::memory::CallKind;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::*;

const BOUND: Duration = Duration::from_secs(30);

/// Waits until the pod `name` of UID `uid` is gone (the pool may have
/// created a new pod of the same name since).
async fn gone(cluster: &Cluster, name: &str, uid: &str, within: Duration) {
    eventually(&format!("pod {name} deleted"), within, || async {
        match cluster.pods().get_opt(name).await.unwrap() {
            Some(pod) if pod.metadata.uid.as_deref() == Some(uid) => {
                Err(format!("phase {:?}, finalizers {:?}", label(&pod, labels::PHASE), pod.metadata.finalizers))
            }
            _ => Ok(()),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_cn_is_retired_and_its_claim_rebinds() {
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    cluster.start_operator(0).await;
    cluster.create_pool(1, Some(4)).await;
    cluster.create_claim("tenant", &[], &[]).await;
    let (pod, uid) = bound_pod(&cluster, "tenant").await;

    cluster.world().crash(&cluster.ns, &pod).await.unwrap();
    eventually("tenant rebound", BOUND, || async {
        let (_, now) = bound_pod(&cluster, "tenant").await;
        if now != uid { Ok(()) } else { Err("still on the crashed pod".into()) }
    })
    .await;
    gone(&cluster, &pod, &uid, BOUND).await;
    let lost = commits
        .states_of("cnclaims", "tenant")
        .into_iter()
        .any(|claim| claim["status"]["phase"] == "Lost" && claim["status"]["conditions"][0]["reason"] == "PodFailed");
    assert!(lost, "the claim said its pod failed");
    let retired =
        commits.states_of("pods", &pod).iter().any(|pod| pod["metadata"]["labels"][labels::PHASE] == "Terminating");
    assert!(retired, "the failed pod was retired, not returned to the pool");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_owned_by_a_claim_that_does_not_exist_is_released() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(1, Some(2)).await;
    let idle = eventually("an Idle pod", BOUND, || async {
        let pods = cluster.pool_pods().await;
        pods.into_iter().find(|pod| label(pod, labels::PHASE) == Some("Idle")).ok_or_else(|| "none yet".to_string())
    })
    .await;
    let name = idle.metadata.name.clone().unwrap();
    // What a deposed operator could leave: the lock of a claim that is gone.
    let orphaned = json!({"metadata": {"labels": {
        labels::PHASE: "Bound", labels::CLAIM_UID: "uid-of-a-deleted-claim", labels::CLAIMED_BY: "deleted-claim",
    }}});
    cluster.pods().patch(&name, &PatchParams::default(), &Patch::Merge(&orphaned)).await.unwrap();

    let released: Pod = eventually("the orphan released", BOUND, || async {
        let pod = cluster.pods().get(&name).await.unwrap();
        if label(&pod, labels::CLAIM_UID).is_none() {
            Ok(pod)
        } else {
            Err(format!("{:?}", label(&pod, labels::PHASE)))
        }
    })
    .await;
    assert_eq!(label(&released, labels::CLAIMED_BY), None);
    assert!(released.metadata.annotations.unwrap().contains_key(labels::RECLAIMED_AT), "released, not just relabelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hakeeper_outage_holds_a_pod_deletion_only_until_the_timeout() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(1, Some(1)).await;
    let pod = eventually("an Idle pod", BOUND, || async {
        let pods = cluster.pool_pods().await;
        pods.into_iter().find(|pod| label(pod, labels::PHASE) == Some("Idle")).ok_or_else(|| "none yet".to_string())
    })
    .await;
    let name = pod.metadata.name.clone().unwrap();
    let uid = pod.metadata.uid.clone().unwrap();
    let outage = RegistryError::NoHaKeeper { detail: "no leader".into() };
    cluster.registry().fail_next(CallKind::DeleteStore, 10_000, outage);
    cluster.pods().delete(&name, &Default::default()).await.unwrap();

    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = cluster.pods().get_opt(&name).await.unwrap();
    assert_eq!(held.and_then(|pod| pod.metadata.uid), Some(uid.clone()), "the finalizer waits for HAKeeper a while");
    // The timeout is 5 s (support::operator_config).
    gone(&cluster, &name, &uid, Duration::from_secs(20)).await;
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(cluster.client.clone(), &cluster.ns);
    let events = events.list(&Default::default()).await.unwrap().items;
    assert!(
        events.iter().any(|event| event.reason.as_deref() == Some("StoreRemovalTimedOut")),
        "an Event says the pod went without its store being removed"
    );
    cluster.registry().clear_faults();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pool_retires_idle_pods_and_keeps_bound_ones_serving() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(2, Some(5)).await;
    cluster.create_claim("tenant", &[("account", "acme")], &[]).await;
    let (bound, bound_uid) = bound_pod(&cluster, "tenant").await;
    eventually("2 Idle pods besides", BOUND, || async {
        let idle = phase_count(&cluster.pool_pods().await, "Idle");
        if idle == 2 { Ok(()) } else { Err(format!("{idle} Idle")) }
    })
    .await;

    cluster.pools().delete(POOL, &Default::default()).await.unwrap();
    eventually("only the bound pod remains", BOUND, || async {
        let pods = cluster.pool_pods().await;
        let names: Vec<_> = pods.iter().filter_map(|pod| pod.metadata.name.clone()).collect();
        if names == [bound.clone()] { Ok(()) } else { Err(format!("{names:?}")) }
    })
    .await;
    let claim = cluster.claims().get("tenant").await.unwrap();
    assert_eq!(claim_phase(&claim), Some("Bound"), "the claim keeps serving");
    assert!(cluster.pools().get_opt(POOL).await.unwrap().is_some(), "the pool waits for its bound pod");

    cluster.claims().delete("tenant", &Default::default()).await.unwrap();
    gone(&cluster, &bound, &bound_uid, BOUND).await;
    eventually("the pool is gone", BOUND, || async {
        match cluster.pools().get_opt(POOL).await.unwrap() {
            None => Ok(()),
            Some(pool) => Err(format!("{:?}", pool.status)),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_bound_claim_gets_exactly_its_pod_or_says_why_not() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(2, Some(4)).await;
    let wanted = eventually("2 Idle pods", BOUND, || async {
        let pods = cluster.pool_pods().await;
        let mut idle: Vec<String> = pods
            .iter()
            .filter(|pod| label(pod, labels::PHASE) == Some("Idle"))
            .filter_map(|pod| pod.metadata.name.clone())
            .collect();
        idle.sort();
        if idle.len() == 2 { Ok(idle[1].clone()) } else { Err(format!("{idle:?}")) }
    })
    .await;
    let request = |name: &str, pod: &str| -> cnpool_api::CNClaim {
        serde_json::from_value(json!({
            "apiVersion": "core.matrixorigin.io/v1alpha1",
            "kind": "CNClaim",
            "metadata": {"name": name, "namespace": cluster.ns},
            "spec": {"selector": {}, "poolName": POOL, "podName": pod},
        }))
        .unwrap()
    };
    let params = kube::api::PostParams::default();
    cluster.claims().create(&params, &request("chosen", &wanted)).await.unwrap();
    cluster.claims().create(&params, &request("hopeful", "mo-does-not-exist")).await.unwrap();

    let (pod, _) = bound_pod(&cluster, "chosen").await;
    assert_eq!(pod, wanted, "a pre-bound claim gets the pod it named, not the oldest");
    let hopeful = eventually("the unavailable request is reported", BOUND, || async {
        let claim = cluster.claims().get("hopeful").await.unwrap();
        let reason = claim.status.as_ref().and_then(|s| s.conditions.first()).map(|c| c.reason.clone());
        if reason.as_deref() == Some("NotFound") { Ok(claim) } else { Err(format!("{reason:?}")) }
    })
    .await;
    assert_eq!(claim_phase(&hopeful), Some("Pending"), "a request that cannot be met is not a loss");
    assert_eq!(hopeful.spec.pod_name, "mo-does-not-exist", "the request stands");
    let pool = cluster.pools().get(POOL).await.unwrap();
    assert_eq!(pool.status.unwrap().pending_claims, 0, "a request for a named pod does not make the pool grow");
}

/// The pod's `matrixorigin.io/cn-store` condition: its status and reason.
fn store_condition(pod: &Pod) -> Option<(String, String)> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let condition = conditions.iter().find(|condition| condition.type_ == labels::CN_STORE_CONDITION)?;
    Some((condition.status.clone(), condition.reason.clone().unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_pod_whose_store_vanished_is_replaced_and_never_handed_out() {
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    cluster.start_operator(0).await;
    cluster.create_pool(1, Some(4)).await;
    let idle = eventually("an Idle pod", BOUND, || async {
        let pods = cluster.pool_pods().await;
        pods.into_iter().find(|pod| label(pod, labels::PHASE) == Some("Idle")).ok_or_else(|| "none yet".to_string())
    })
    .await;
    let (name, uid) = (idle.metadata.name.clone().unwrap(), idle.metadata.uid.clone().unwrap());
    eventually("the Idle pod says its store is registered", BOUND, || async {
        match store_condition(&cluster.pods().get(&name).await.unwrap()) {
            Some((status, reason)) if status == "True" && reason == "StoreRegistered" => Ok(()),
            other => Err(format!("cn-store condition {other:?}")),
        }
    })
    .await;
    assert!(cluster.vanish_store(label(&idle, labels::CN_UUID).unwrap()).await);

    gone(&cluster, &name, &uid, BOUND).await;
    let noted_missing = commits.snapshot().iter().any(|commit| {
        let Ok(pod) = serde_json::from_value::<Pod>(commit.object.clone()) else { return false };
        pod.metadata.uid.as_deref() == Some(uid.as_str())
            && store_condition(&pod) == Some(("False".into(), "StoreMissing".into()))
    });
    assert!(noted_missing, "the pod's cn-store condition said its store went missing before it was retired");
    cluster.create_claim("tenant", &[], &[]).await;
    let (_, bound_uid) = bound_pod(&cluster, "tenant").await;
    assert_ne!(bound_uid, uid, "the claim got a pod with a store");
    let handed_out = commits.snapshot().iter().any(|commit| {
        commit.object["metadata"]["uid"] == uid.as_str()
            && commit.object["metadata"]["labels"][labels::PHASE] == "Bound"
    });
    assert!(!handed_out, "the pod without a store was never Bound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_pod_carries_its_cn_workload_in_the_stats_annotations() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(1, Some(2)).await;
    cluster.create_claim("tenant", &[], &[]).await;
    let (pod, _) = bound_pod(&cluster, "tenant").await;
    let uuid = cnpool_world::store_uuid(&cluster.pods().get(&pod).await.unwrap()).unwrap();
    let stats = |sessions: u64| {
        let pods = cluster.pods();
        let pod = pod.clone();
        async move {
            let pod = pods.get(&pod).await.map_err(|e| e.to_string())?;
            let annotations = pod.metadata.annotations.unwrap_or_default();
            let score: serde_json::Value =
                serde_json::from_str(annotations.get(labels::SCORE).map_or("null", String::as_str)).unwrap();
            let cost = annotations.get(labels::POD_DELETION_COST).cloned();
            if score["sessionCount"] == sessions && cost == Some(sessions.to_string()) {
                Ok(())
            } else {
                Err(format!("score {score}, deletion cost {cost:?}"))
            }
        }
    };
    // The simulated CN has two sessions once its pod is Bound.
    eventually("stats of the bound CN", BOUND, || stats(2)).await;
    cluster.registry().set_workload(&uuid, cnpool_registry::Workload { sessions: 7, ..Default::default() });
    eventually("stats after more sessions", BOUND, || stats(7)).await;
}
