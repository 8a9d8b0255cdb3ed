#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! The binding core's end-to-end scenarios with `cnpool operator` as its own
//! process, talking to the simulated HAKeeper of `cnpool dev --no-operator`
//! over morpc with the client it uses against a real MatrixOne; and a
//! HAKeeper outage that the operator rides out without a restart. On the
//! embedded API server (served by the dev process), or on a real one when
//! `CNPOOL_E2E_KUBECONFIG` names it.

#[path = "../../controllers/tests/support/mod.rs"]
mod support;

use std::time::Duration;

use cnpool_api::labels;
use cnpool_registry::WorkState;
use support::{Cluster, Commits, binding, bound_pod, claim_phase, eventually, label, legacy};

const CNPOOL: &str = env!("CARGO_BIN_EXE_cnpool");

async fn cluster() -> Cluster {
    Cluster::with_processes(CNPOOL).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_bind_to_distinct_pods_whose_stores_carry_their_labels() {
    binding::claims_bind_to_distinct_pods_whose_stores_carry_their_labels(&cluster().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_pod_is_deleted_or_whose_store_vanishes_is_lost_then_rebound() {
    binding::a_claim_whose_pod_is_deleted_or_whose_store_vanishes_is_lost_then_rebound(&cluster().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_claim_releases_its_pod_which_drains_back_to_idle_with_a_clean_store() {
    binding::a_deleted_claim_releases_its_pod_which_drains_back_to_idle_with_a_clean_store(&cluster().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_cluster_costs_no_writes() {
    binding::a_settled_cluster_costs_no_writes(&cluster().await).await;
}

/// HAKeeper stops and starts again on the same address while claims are
/// bound and one is waiting: nothing is Bound on a store that cannot be
/// seen, and once HAKeeper is back the waiting claim binds, the bound ones
/// stay, and the same operator process goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_rides_out_a_hakeeper_restart() {
    let cluster = cluster().await;
    cluster.start_operator(0).await;
    cluster.create_pool(2, Some(6)).await;
    cluster.create_claim("before", &[("account", "acme")], &[]).await;
    let (before_pod, before_uid) = bound_pod(&cluster, "before").await;

    cluster.processes().toggle_hakeeper("cnpool dev: HAKeeper stopped");
    cluster.create_claim("during", &[("account", "globex")], &[]).await;
    // Longer than the registry poll, the bind of a claim with a warm pod and
    // the operator's store cache together.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let during = cluster.claims().get("during").await.unwrap();
    assert_ne!(claim_phase(&during), Some("Bound"), "Bound needs its store seen Working in HAKeeper");

    cluster.processes().toggle_hakeeper("cnpool dev: HAKeeper started again");
    let (during_pod, _) = bound_pod(&cluster, "during").await;
    assert_ne!(during_pod, before_pod, "two claims, two pods");
    let pod = cluster.pods().get(&during_pod).await.unwrap();
    let uuid = label(&pod, labels::CN_UUID).unwrap().to_owned();
    eventually("the new claim's store Working with its labels", binding::BIND, || async {
        let store = cluster.store(&uuid).await.ok_or("no store")?;
        let labelled = store.labels.get("account").is_some_and(|values| values == &["globex"]);
        if store.work_state == WorkState::Working && labelled { Ok(()) } else { Err(format!("{store:?}")) }
    })
    .await;
    assert_eq!(bound_pod(&cluster, "before").await, (before_pod, before_uid), "the bound claim kept its pod");
    assert!(cluster.processes().operators_running(), "the operator was not restarted");
}

/// Shadow mode on a cluster as the Go operator leaves it: the operator reads
/// and decides (it logs the adoption it would do: `claim-uid` onto each pod
/// the Go operator bound) but writes nothing — no object's resourceVersion
/// moves and HAKeeper's stores stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_reports_the_adoption_and_writes_nothing() {
    let cluster = cluster().await;
    legacy::leave_go_operator_state(&cluster).await;
    eventually("the Go operator's pods running", binding::BIND, || async {
        let pods = cluster.pool_pods().await;
        let running = pods
            .iter()
            .filter(|pod| pod.status.as_ref().and_then(|status| status.phase.as_deref()) == Some("Running"))
            .count();
        if running == legacy::HOLDERS.len() { Ok(()) } else { Err(format!("{running} running")) }
    })
    .await;
    let stores = cluster.stores().await;
    let commits = Commits::record(&cluster).await;

    cluster.start_operator_with(0, &["--dry-run"]).await;
    eventually("the adoption of every Go-bound pod reported", binding::BIND, || async {
        let log = cluster.processes().operator_log(0);
        let reported = |pod: &str| {
            log.lines().any(|line| {
                line.contains("shadow mode: would write")
                    && line.contains(&format!("/pods/{pod} "))
                    // a JSON-patch path spells the key's `/` as `~1`
                    && line.contains("claim-uid")
            })
        };
        let missing: Vec<&str> = legacy::HOLDERS.iter().map(|(pod, _)| *pod).filter(|pod| !reported(pod)).collect();
        if missing.is_empty() { Ok(()) } else { Err(format!("not reported: {missing:?}")) }
    })
    .await;
    // Long enough for several requeues of the decisions that could not land.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let writes = commits.summaries();
    assert!(writes.is_empty(), "shadow mode wrote: {writes:?}");
    assert_eq!(cluster.stores().await, stores, "shadow mode changed HAKeeper");
    let log = cluster.processes().operator_log(0);
    let reported: Vec<&str> =
        log.lines().filter_map(|line| line.split_once("shadow mode: would write write=")).map(|(_, w)| w).collect();
    let adoptions = reported.iter().filter(|write| write.contains("/pods/mo-0 ") && write.contains("claim-uid"));
    assert_eq!(adoptions.count(), 1, "the adoption of mo-0 is reported once: {reported:#?}");
    let distinct: std::collections::BTreeSet<&&str> = reported.iter().collect();
    assert_eq!(distinct.len(), reported.len(), "no write is reported twice");
    assert!(cluster.processes().operators_running());
}

/// `--namespace` given twice: the operator binds the claims of both
/// namespaces and leaves a third alone (no finalizer, no status, no pods
/// made for its pool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_scoped_to_two_namespaces_serves_both_and_no_other() {
    let cluster = cluster().await;
    let second = cluster.another_namespace("second").await;
    let outside = cluster.another_namespace("outside").await;
    cluster.start_operator_with(0, &["--namespace", &second]).await;
    for ns in [&cluster.ns, &second, &outside] {
        cluster.create_pool_in(ns, 1, Some(3)).await;
        cluster.create_claim_in(ns, "tenant", &[("account", ns)], &[]).await;
    }
    bound_pod(&cluster, "tenant").await;
    let claims_of = |ns: &str| kube::Api::<cnpool_api::CNClaim>::namespaced(cluster.client.clone(), ns);
    let pods_of = |ns: &str| kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(cluster.client.clone(), ns);
    eventually("the second namespace's claim Bound", Duration::from_secs(30), || async {
        let claim = claims_of(&second).get("tenant").await.map_err(|e| e.to_string())?;
        match claim_phase(&claim) {
            Some("Bound") => Ok(()),
            phase => Err(format!("{phase:?}")),
        }
    })
    .await;
    // Both bound; the third namespace had as long to be touched.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let untouched = claims_of(&outside).get("tenant").await.unwrap();
    assert!(untouched.status.is_none(), "a claim outside the scope has no status: {:?}", untouched.status);
    assert!(untouched.metadata.finalizers.unwrap_or_default().is_empty(), "nor a finalizer");
    let pods = pods_of(&outside).list(&Default::default()).await.unwrap();
    assert!(pods.items.is_empty(), "no pods made outside the scope: {}", pods.items.len());
    let log = cluster.processes().operator_log(0);
    assert!(log.contains(&format!("namespaces={},{second}", cluster.ns)), "the scope is logged at start");
}
