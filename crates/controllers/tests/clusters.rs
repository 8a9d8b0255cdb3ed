#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! One HAKeeper per MatrixOne cluster: each pool's CN stores live in the
//! HAKeeper its `spec.deps` names (a LogSet's `status.discovery`, or
//! `externalLogSet.haKeeperEndpoint`), and one cluster's HAKeeper being down
//! stalls only its own pools. On the embedded server, or on a real
//! kube-apiserver with `CNPOOL_E2E_KUBECONFIG` (see support).

mod support;

use std::time::Duration;

use cnpool_api::{CNClaim, CNPool};
use cnpool_registry::RegistryError;
use cnpool_registry::memory::{CallKind, MemoryRegistry};
use cnpool_world::WorldConfig;
use kube::api::PostParams;
use serde_json::json;
use support::*;

const SETTLE: Duration = Duration::from_secs(60);
/// The HAKeeper of the cluster whose pool names its LogSet `east`.
const EAST: &str = "east-log-discovery.mo.svc:32001";
/// The HAKeeper the `west` pool names outright.
const WEST: &str = "west-hakeeper.example:32001";

/// A pool `name` whose pods carry `tier: <name>`, with `deps`.
async fn create_pool_with_deps(cluster: &Cluster, name: &str, deps: serde_json::Value) {
    let pool: CNPool = serde_json::from_value(json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNPool",
        "metadata": {"name": name, "namespace": cluster.ns},
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": "cn", "image": "matrixorigin/matrixone:test"}]}},
            "podLabels": {"tier": name},
            "deps": deps,
            "strategy": {
                "scaleStrategy": {"maxIdle": 1, "maxPods": 4},
                "drainStrategy": {"minDelay": "300ms", "timeout": "60s"},
            },
        },
    }))
    .unwrap();
    cluster.pools().create(&PostParams::default(), &pool).await.expect("create pool");
}

/// A claim `name` on pool `pool`.
async fn claim_on(cluster: &Cluster, name: &str, pool: &str) {
    let claim: CNClaim = serde_json::from_value(json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNClaim",
        "metadata": {"name": name, "namespace": cluster.ns},
        "spec": {"selector": {"matchLabels": {"tier": pool}}, "poolName": pool, "ownerName": name},
    }))
    .unwrap();
    cluster.claims().create(&PostParams::default(), &claim).await.expect("create claim");
}

/// The pool's condition `type_` as (status, reason, message).
async fn pool_condition(cluster: &Cluster, pool: &str, type_: &str) -> Option<(String, String, String)> {
    let pool = cluster.pools().get(pool).await.ok()?;
    let conditions = pool.status?.conditions;
    let found = conditions.into_iter().find(|condition| condition.type_ == type_)?;
    Some((found.status, found.reason, found.message))
}

/// Waits until the pool's `Ready` shows `status` with `reason`; its message.
async fn pool_ready(cluster: &Cluster, pool: &str, status: &str, reason: &str) -> String {
    eventually(&format!("pool {pool} Ready={status} {reason}"), SETTLE, || async {
        match pool_condition(cluster, pool, "Ready").await {
            Some((seen, why, message)) if seen == status && why == reason => Ok(message),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// The UUIDs of the stores `registry` holds.
fn uuids(registry: &MemoryRegistry) -> Vec<String> {
    registry.list_stores_now().unwrap().into_iter().map(|store| store.uuid).collect()
}

/// The store UUID of the pod claim `name` is bound to.
async fn bound_store(cluster: &Cluster, claim: &str, pool: &str) -> String {
    let (pod, _) = bound_pod(cluster, claim).await;
    cnpool_api::cn_store_uuid(&pod, pool, &cluster.ns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_of_two_clusters_register_in_their_own_hakeeper_and_one_down_stalls_only_its_pools() {
    let cluster = Cluster::with_hakeepers(WorldConfig::default(), &[EAST, WEST]).await;
    legacy::create_ready_log_set(&cluster, "east", json!({"replicas": 3}), ("east-log-discovery.mo.svc", 32001)).await;
    create_pool_with_deps(&cluster, "east", json!({"logSet": {"metadata": {"name": "east"}}})).await;
    create_pool_with_deps(&cluster, "west", json!({"externalLogSet": {"haKeeperEndpoint": WEST}})).await;
    cluster.start_operator(0).await;
    let (east, west) = (cluster.world().cluster_registry(EAST), cluster.world().cluster_registry(WEST));

    claim_on(&cluster, "e1", "east").await;
    claim_on(&cluster, "w1", "west").await;
    let (east_store, west_store) =
        (bound_store(&cluster, "e1", "east").await, bound_store(&cluster, "w1", "west").await);
    assert!(uuids(&east).contains(&east_store) && !uuids(&west).contains(&east_store), "east's store in EAST only");
    assert!(uuids(&west).contains(&west_store) && !uuids(&east).contains(&west_store), "west's store in WEST only");
    assert!(uuids(cluster.registry()).is_empty(), "nothing in the default HAKeeper: {:?}", uuids(cluster.registry()));
    let labelled = west.store(&west_store).unwrap();
    assert_eq!(labelled.work_state, cnpool_registry::WorkState::Working, "west's binding written to WEST");

    // WEST's HAKeeper stops answering: only the west pool says so, naming it.
    let down = || RegistryError::NoHaKeeper { detail: "the log service does not answer".into() };
    for call in [CallKind::ListStores, CallKind::PatchStore, CallKind::ReplaceLabels, CallKind::DeleteStore] {
        west.fail_next_only(call, u32::MAX, down());
    }
    let message = pool_ready(&cluster, "west", "False", "HAKeeperUnreachable").await;
    assert!(message.contains(WEST), "names its HAKeeper: {message}");
    claim_on(&cluster, "w2", "west").await;
    claim_on(&cluster, "e2", "east").await;
    let e2 = bound_store(&cluster, "e2", "east").await;
    assert!(uuids(&east).contains(&e2), "east still binds, in EAST");
    let east_ready = pool_condition(&cluster, "east", "Ready").await.unwrap();
    assert_eq!((east_ready.0.as_str(), east_ready.1.as_str()), ("True", "Serving"), "{east_ready:?}");
    eventually("w2 waits for WEST's HAKeeper", SETTLE, || async {
        let claim = cluster.claims().get("w2").await.map_err(|error| error.to_string())?;
        let conditions = claim.status.map(|status| status.conditions).unwrap_or_default();
        match conditions.iter().find(|condition| condition.type_ == "Bound") {
            Some(bound) if bound.reason == "HAKeeperUnreachable" && bound.message.contains("west") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    west.clear_faults();
    let w2 = bound_store(&cluster, "w2", "west").await;
    assert!(uuids(&west).contains(&w2));
    pool_ready(&cluster, "west", "True", "Serving").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_log_set_cannot_be_found_says_how_to_fix_it_and_other_pools_run() {
    let cluster = Cluster::new().await;
    create_pool_with_deps(&cluster, "lost", json!({"logSet": {"name": "nowhere"}})).await;
    create_pool_with_deps(&cluster, "plain", json!(null)).await;
    cluster.start_operator(0).await;
    // Without the LogSet CRD the operator cannot read LogSets; with it (a
    // real server where another test installed it), there is no such LogSet.
    let message = pool_ready(&cluster, "lost", "False", "HAKeeperUnknown").await;
    assert!(message.contains("spec.deps.logSet names LogSet") && message.contains("nowhere"), "{message}");
    claim_on(&cluster, "p1", "plain").await;
    let store = bound_store(&cluster, "p1", "plain").await;
    assert!(uuids(cluster.registry()).contains(&store), "a pool without deps uses --hakeeper-discovery's");
}
