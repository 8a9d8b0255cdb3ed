#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! The simulated kubelet and CN against the embedded API server, without
//! any operator: what a pool pod goes through on its own.

use std::time::{Duration, Instant};

use cnpool_api::labels;
use cnpool_apiserver::ApiServer;
use cnpool_registry::Workload;
use cnpool_registry::memory::MemoryRegistry;
use cnpool_world::{World, WorldConfig};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

async fn until<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{what}: not within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_pool_pod_starts_registers_carries_sessions_and_is_deleted_like_a_kubelet_would() {
    let server = ApiServer::default();
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let registry = MemoryRegistry::new();
    let config = WorldConfig { sessions_per_cn: 3, ..WorldConfig::default() };
    let world = World::new(server.client(), registry.clone(), config);
    tokio::spawn(world.clone().run(std::future::pending()));

    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": "mo-0",
            "labels": {labels::POOL_NAME: "mo", labels::PHASE: "Unknown"},
            "finalizers": [labels::CN_DRAINING_FINALIZER],
        },
        "spec": {"hostname": "mo-0", "subdomain": "mo", "containers": [{"name": "cn", "image": "mo"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    // The UUID MatrixOne's start script derives from mo-0.mo.default.svc.
    let uuid = cnpool_api::cn_store_uuid("mo-0", "mo", "default");

    let store = until("the CN registers", async || registry.store(&uuid)).await;
    let running = pods.get("mo-0").await.unwrap();
    let status = running.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert!(status.start_time.is_some() && status.pod_ip.is_some());
    assert_eq!(running.spec.unwrap().node_name.as_deref(), Some("sim-node-0"));
    assert_eq!(store.sql_address, format!("{}:6001", status.pod_ip.unwrap()));

    let bind = json!({"metadata": {"labels": {labels::PHASE: "Bound"}}});
    pods.patch("mo-0", &PatchParams::default(), &Patch::Merge(&bind)).await.unwrap();
    until("sessions arrive on a bound CN", async || {
        (registry.store_workload(&uuid) == Some(Workload { sessions: 3, ..Workload::default() })).then_some(())
    })
    .await;
    let release = json!({"metadata": {"labels": {labels::PHASE: "Draining"}}});
    pods.patch("mo-0", &PatchParams::default(), &Patch::Merge(&release)).await.unwrap();
    until("sessions leave a released CN", async || registry.store_workload(&uuid).filter(Workload::is_idle)).await;

    pods.delete("mo-0", &Default::default()).await.unwrap();
    until("the stopped CN leaves HAKeeper", async || registry.store(&uuid).is_none().then_some(())).await;
    assert!(pods.get_opt("mo-0").await.unwrap().is_some(), "the finalizer still holds the pod");
    let unfinalize = json!({"metadata": {"finalizers": null}});
    pods.patch("mo-0", &PatchParams::default(), &Patch::Merge(&unfinalize)).await.unwrap();
    until("the kubelet completes the deletion", async || pods.get_opt("mo-0").await.unwrap().is_none().then_some(()))
        .await;
}
