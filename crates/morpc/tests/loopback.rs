#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

//! The real clients against the simulated servers over loopback TCP: every
//! call, error mapping, deadlines, leader moves, and a HAKeeper killed and
//! restarted under a client that keeps running.

use std::sync::Arc;
use std::time::Duration;

use cnpool_morpc::conn::{Connection, ConnectionOptions};
use cnpool_morpc::hakeeper::{HaKeeperClient, HaKeeperOptions};
use cnpool_morpc::server::{
    HaKeeperServer, HaKeeperServerOptions, ServerHandle, bind_lock_service, bind_query_service,
};
use cnpool_morpc::{MorpcOptions, MorpcRegistry};
use cnpool_registry::memory::{CallKind, MemoryRegistry, StoreAddresses};
use cnpool_registry::{RegistryError, StoreLabels, StoreRegistry, WorkState, Workload};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, sleep};

const LOOPBACK: &str = "127.0.0.1:0";

/// A simulated cluster: HAKeeper, the TN lock service and one query
/// service per CN, all serving one registry.
struct Cluster {
    registry: MemoryRegistry,
    hakeeper: HaKeeperServer,
    _lock: ServerHandle,
    _queries: Vec<ServerHandle>,
}

async fn cluster(stores: &[&str]) -> Cluster {
    let registry = MemoryRegistry::new();
    let lock = bind_lock_service(LOOPBACK, registry.clone()).await.unwrap();
    let options = HaKeeperServerOptions {
        tn_lock_service_address: Some(lock.local_addr().to_string()),
        ..HaKeeperServerOptions::default()
    };
    let hakeeper = HaKeeperServer::bind_with(LOOPBACK, registry.clone(), options).await.unwrap();
    let mut queries = Vec::new();
    for uuid in stores {
        let query = bind_query_service(LOOPBACK, registry.clone(), *uuid).await.unwrap();
        registry.register_store(uuid, addresses(&query.local_addr().to_string()));
        queries.push(query);
    }
    Cluster { registry, hakeeper, _lock: lock, _queries: queries }
}

fn addresses(query_address: &str) -> StoreAddresses {
    StoreAddresses {
        service_address: "cn:6001".into(),
        sql_address: "cn:6001".into(),
        lock_service_address: "cn:6003".into(),
        query_address: query_address.into(),
    }
}

fn options(discovery: &str) -> MorpcOptions {
    MorpcOptions {
        call_timeout: Duration::from_secs(5),
        // Every read asks HAKeeper, so each test sees its own writes at once.
        store_cache_max_age: Duration::ZERO,
        ..MorpcOptions::new(discovery)
    }
}

fn client(cluster: &Cluster) -> MorpcRegistry {
    MorpcRegistry::new(options(&cluster.hakeeper.local_addr().to_string()))
}

fn labels(pairs: &[(&str, &[&str])]) -> StoreLabels {
    pairs.iter().map(|(k, vs)| (k.to_string(), vs.iter().map(|v| v.to_string()).collect())).collect()
}

#[tokio::test]
async fn every_hakeeper_call_keeps_hakeepers_semantics() {
    let cluster = cluster(&["u1", "u2"]).await;
    let client = client(&cluster);

    let stores = client.list_stores().await.unwrap();
    assert_eq!(stores.iter().map(|s| s.uuid.as_str()).collect::<Vec<_>>(), ["u1", "u2"]);
    assert!(stores.iter().all(|s| s.work_state == WorkState::Working && s.labels.is_empty()));

    client.patch_store("u1", WorkState::Working, &labels(&[("tenant", &["a", "b"])])).await.unwrap();
    let u1 = cluster.registry.store("u1").unwrap();
    assert_eq!((u1.work_state, u1.labels.clone()), (WorkState::Working, labels(&[("tenant", &["a", "b"])])));

    // Draining with no labels: the labels stay, as in HAKeeper.
    client.patch_store("u1", WorkState::Draining, &StoreLabels::new()).await.unwrap();
    let listed = client.list_stores().await.unwrap().into_iter().find(|s| s.uuid == "u1").unwrap();
    assert_eq!((listed.work_state, listed.labels), (WorkState::Draining, labels(&[("tenant", &["a", "b"])])));

    // Only UpdateCNLabel with no labels clears them.
    client.replace_labels("u1", &StoreLabels::new()).await.unwrap();
    assert!(cluster.registry.store("u1").unwrap().labels.is_empty());

    // A state of 0 is stored as Working.
    client.patch_store("u1", WorkState::Unknown, &StoreLabels::new()).await.unwrap();
    assert_eq!(cluster.registry.store("u1").unwrap().work_state, WorkState::Working);

    client.delete_store("u2").await.unwrap();
    client.delete_store("never-existed").await.unwrap();
    assert_eq!(client.list_stores().await.unwrap().len(), 1);
    assert_eq!(cluster.registry.write_counts().total(), 6);
}

#[tokio::test]
async fn writes_to_an_unknown_store_are_store_not_found() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster);
    let missing = Err(RegistryError::StoreNotFound { uuid: "ghost".into() });
    assert_eq!(client.patch_store("ghost", WorkState::Draining, &StoreLabels::new()).await, missing);
    assert_eq!(client.replace_labels("ghost", &labels(&[("k", &["v"])])).await, missing);
}

#[tokio::test]
async fn the_workload_comes_from_the_cns_query_service() {
    let cluster = cluster(&["u1"]).await;
    let client = client(&cluster);
    let store = client.list_stores().await.unwrap().remove(0);
    assert_eq!(client.workload(&store).await, Ok(Workload::default()), "the internal sys session does not count");
    let busy = Workload { sessions: 3, pipelines: 2, replicas: 1 };
    cluster.registry.set_workload("u1", busy);
    assert_eq!(client.workload(&store).await, Ok(busy));
}

#[tokio::test]
async fn a_query_service_error_is_an_error_not_zero() {
    let cluster = cluster(&["u1"]).await;
    let client = client(&cluster);
    let store = client.list_stores().await.unwrap().remove(0);
    let error = RegistryError::Remote { call: "query", code: 20429, message: "timeout".into() };
    cluster.registry.fail_next(CallKind::Workload, 1, error);
    assert_eq!(
        client.workload(&store).await,
        Err(RegistryError::Remote { call: "ShowProcessList", code: 20429, message: "timeout".into() })
    );
    assert_eq!(client.workload(&store).await, Ok(Workload::default()));

    // A CN that is gone closes its query connection: an error, not zero.
    cluster.registry.remove_store("u1");
    assert!(matches!(client.workload(&store).await, Err(RegistryError::Connection { .. })));
}

#[tokio::test]
async fn the_lock_hand_over_calls_reach_the_tn() {
    let cluster = cluster(&["u1"]).await;
    let client = client(&cluster);
    cluster.registry.set_workload("u1", Workload { sessions: 2, ..Workload::default() });
    assert_eq!(client.can_restart_service("u1").await, Ok(false));
    assert_eq!(client.set_restart_service("u1").await, Ok(true));
    assert!(cluster.registry.restart_announced("u1"));
    assert_eq!(client.remain_txn_in_service("u1").await, Ok(2));
    cluster.registry.set_workload("u1", Workload::default());
    assert_eq!(client.remain_txn_in_service("u1").await, Ok(0));
    assert_eq!(client.can_restart_service("u1").await, Ok(true));
}

#[tokio::test]
async fn transient_hakeeper_faults_are_retried_and_final_ones_are_not() {
    let cluster = cluster(&["u1"]).await;
    let client = client(&cluster);
    let registry = &cluster.registry;

    // 20429 twice, then success, within one call.
    registry.fail_next(CallKind::PatchStore, 2, RegistryError::Timeout { call: "PatchCNStore" });
    assert_eq!(client.patch_store("u1", WorkState::Draining, &StoreLabels::new()).await, Ok(()));
    assert_eq!(registry.faults_fired(CallKind::PatchStore), 2);

    // A dropped connection and a malformed answer: rediscover and retry.
    let dropped = RegistryError::Connection { call: "c", address: String::new(), detail: String::new() };
    registry.fail_next(CallKind::ListStores, 1, dropped);
    registry.fail_next(CallKind::ListStores, 1, RegistryError::Protocol { call: "c", detail: String::new() });
    assert_eq!(client.list_stores().await.unwrap().len(), 1);
    assert_eq!(registry.faults_fired(CallKind::ListStores), 2);

    // Any other error code is HAKeeper's answer: no retry.
    let refused = RegistryError::Remote { call: "c", code: 20100, message: "internal error".into() };
    registry.fail_next(CallKind::ReplaceLabels, 1, refused);
    assert_eq!(
        client.replace_labels("u1", &StoreLabels::new()).await,
        Err(RegistryError::Remote { call: "UpdateCNLabel", code: 20100, message: "internal error".into() })
    );
    assert_eq!(registry.faults_fired(CallKind::ReplaceLabels), 1);
}

#[tokio::test]
async fn an_unreachable_hakeeper_fails_by_the_deadline() {
    // A port nobody listens on: bind, note it, close.
    let address = TcpListener::bind(LOOPBACK).await.unwrap().local_addr().unwrap().to_string();
    let client = HaKeeperClient::new(HaKeeperOptions::new(&address));
    let result = client.cluster(Instant::now() + Duration::from_millis(300)).await;
    assert!(matches!(result, Err(RegistryError::NoHaKeeper { .. })), "{result:?}");
}

#[tokio::test]
async fn a_silent_query_service_times_out() {
    // Accepts and never answers.
    let silent = TcpListener::bind(LOOPBACK).await.unwrap();
    let address = silent.local_addr().unwrap().to_string();
    let held = tokio::spawn(async move {
        let (_stream, _) = silent.accept().await.unwrap();
        sleep(Duration::from_secs(30)).await;
    });
    let cluster = cluster(&[]).await;
    cluster.registry.register_store("u1", addresses(&address));
    let client = MorpcRegistry::new(MorpcOptions {
        call_timeout: Duration::from_millis(300),
        ..options(&cluster.hakeeper.local_addr().to_string())
    });
    let store = client.list_stores().await.unwrap().remove(0);
    assert!(matches!(client.workload(&store).await, Err(RegistryError::Timeout { .. })));
    held.abort();
}

#[tokio::test]
async fn discovery_skips_dead_replicas_and_replicas_that_are_not_the_hakeeper() {
    let registry = MemoryRegistry::new();
    let dead = TcpListener::bind(LOOPBACK).await.unwrap().local_addr().unwrap().to_string();
    let not_hakeeper = HaKeeperServer::bind_with(
        LOOPBACK,
        registry.clone(),
        HaKeeperServerOptions { is_hakeeper: false, ..HaKeeperServerOptions::default() },
    )
    .await
    .unwrap();
    let hakeeper = HaKeeperServer::bind(LOOPBACK, registry.clone()).await.unwrap();
    let replicas = vec![dead, not_hakeeper.local_addr().to_string(), hakeeper.local_addr().to_string()];
    let discovery = HaKeeperServer::bind_with(
        LOOPBACK,
        registry,
        HaKeeperServerOptions { replicas, is_hakeeper: false, ..HaKeeperServerOptions::default() },
    )
    .await
    .unwrap();

    let client = HaKeeperClient::new(HaKeeperOptions::new(discovery.local_addr().to_string()));
    client.cluster(Instant::now() + Duration::from_secs(5)).await.unwrap();
    assert_eq!(client.leader_address().await, Some(hakeeper.local_addr().to_string()));
}

#[tokio::test]
async fn a_leader_move_is_followed() {
    let registry = MemoryRegistry::new();
    registry.register_store("u1", addresses("cn:19998"));
    let first = HaKeeperServer::bind(LOOPBACK, registry.clone()).await.unwrap();
    let second = HaKeeperServer::bind_with(
        LOOPBACK,
        registry.clone(),
        HaKeeperServerOptions { is_hakeeper: false, ..HaKeeperServerOptions::default() },
    )
    .await
    .unwrap();
    let replicas = vec![first.local_addr().to_string(), second.local_addr().to_string()];
    let discovery = HaKeeperServer::bind_with(
        LOOPBACK,
        registry.clone(),
        HaKeeperServerOptions { replicas, is_hakeeper: false, ..HaKeeperServerOptions::default() },
    )
    .await
    .unwrap();
    let client = MorpcRegistry::new(options(&discovery.local_addr().to_string()));
    client.list_stores().await.unwrap();
    assert_eq!(client.hakeeper().leader_address().await, Some(first.local_addr().to_string()));

    // The old leader now answers 20417; the client rediscovers the new one.
    first.set_hakeeper(false);
    second.set_hakeeper(true);
    client.patch_store("u1", WorkState::Draining, &StoreLabels::new()).await.unwrap();
    assert_eq!(client.hakeeper().leader_address().await, Some(second.local_addr().to_string()));
    assert_eq!(registry.store("u1").unwrap().work_state, WorkState::Draining);
}

#[tokio::test]
async fn a_killed_and_restarted_hakeeper_is_found_again_by_the_same_client() {
    let registry = MemoryRegistry::new();
    registry.register_store("u1", addresses("cn:19998"));
    let server = HaKeeperServer::bind(LOOPBACK, registry.clone()).await.unwrap();
    let address = server.local_addr();
    let client = MorpcRegistry::new(options(&address.to_string()));
    assert_eq!(client.list_stores().await.unwrap().len(), 1);

    server.shutdown().await;
    // While it is down, a call with a short deadline fails, transiently.
    let down = client.hakeeper().cluster(Instant::now() + Duration::from_millis(200)).await;
    assert!(down.as_ref().is_err_and(RegistryError::is_transient), "{down:?}");

    // A call in flight across the restart succeeds once HAKeeper is back.
    let in_flight = {
        let client = client.clone();
        tokio::spawn(async move { client.patch_store("u1", WorkState::Draining, &StoreLabels::new()).await })
    };
    sleep(Duration::from_millis(300)).await;
    let restarted = HaKeeperServer::bind(address, registry.clone()).await.unwrap();
    assert_eq!(in_flight.await.unwrap(), Ok(()));
    assert_eq!(registry.store("u1").unwrap().work_state, WorkState::Draining);
    assert_eq!(client.list_stores().await.unwrap().len(), 1);
    restarted.shutdown().await;
}

#[tokio::test]
async fn the_store_cache_serves_reads_until_a_write_or_its_age_and_refreshes_in_the_background() {
    let cluster = cluster(&["u1"]).await;
    let client = MorpcRegistry::new(MorpcOptions {
        store_cache_max_age: Duration::from_secs(3600),
        ..options(&cluster.hakeeper.local_addr().to_string())
    });
    assert_eq!(client.list_stores().await.unwrap().len(), 1);

    // A CN registering is not seen while the cached answer is fresh...
    cluster.registry.register_store("u2", addresses("cn:19998"));
    assert_eq!(client.list_stores().await.unwrap().len(), 1);
    // ...but is after a write through the client, or an explicit refresh.
    client.patch_store("u1", WorkState::Working, &StoreLabels::new()).await.unwrap();
    assert_eq!(client.list_stores().await.unwrap().len(), 2);
    cluster.registry.register_store("u3", addresses("cn:19998"));
    assert_eq!(client.store_cache().refresh().await.unwrap().cn_stores.len(), 3);

    // The background refresher picks up changes by itself.
    cluster.registry.remove_store("u3");
    let _refresher = client.store_cache().spawn_refresher(Duration::from_millis(20));
    let until = Instant::now() + Duration::from_secs(5);
    while client.store_cache().last().unwrap().cn_stores.len() != 2 {
        assert!(Instant::now() < until, "the refresher never saw u3 go");
        sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn one_connection_carries_many_calls_at_once_within_its_bound() {
    let cluster = cluster(&["u1"]).await;
    let options = ConnectionOptions { max_in_flight: 2, ..ConnectionOptions::log_service() };
    let address = cluster.hakeeper.local_addr().to_string();
    let deadline = Instant::now() + Duration::from_secs(5);
    let connection = Arc::new(Connection::connect(&address, &options, deadline).await.unwrap());
    connection.ping(deadline).await.unwrap();

    let client =
        Arc::new(HaKeeperClient::new(HaKeeperOptions { connection: options, ..HaKeeperOptions::new(&address) }));
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let client = Arc::clone(&client);
            tokio::spawn(async move { client.cluster(deadline).await })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap().cn_stores.len(), 1);
    }
}

#[tokio::test]
async fn an_answer_over_the_frame_limit_is_refused() {
    let cluster = cluster(&[]).await;
    for n in 0..20 {
        cluster.registry.register_store(&format!("store-with-a-long-name-{n}"), addresses("cn:19998"));
    }
    let address = cluster.hakeeper.local_addr().to_string();
    let small = ConnectionOptions { max_frame_len: 512, ..ConnectionOptions::log_service() };
    let client = HaKeeperClient::new(HaKeeperOptions { connection: small, ..HaKeeperOptions::new(&address) });
    let result = client.cluster(Instant::now() + Duration::from_millis(300)).await;
    assert!(
        matches!(&result, Err(RegistryError::Connection { detail, .. }) if detail.contains("exceeds the limit")),
        "{result:?}"
    );
}

#[tokio::test]
async fn garbage_closes_that_connection_only() {
    let cluster = cluster(&["u1"]).await;
    let mut garbage = TcpStream::connect(cluster.hakeeper.local_addr()).await.unwrap();
    garbage.write_all(&[0, 0, 0, 3, 0xff, 0xff, 0xff]).await.unwrap();
    let mut rest = Vec::new();
    assert_eq!(garbage.read_to_end(&mut rest).await.unwrap(), 0, "closed without an answer");
    assert_eq!(client(&cluster).list_stores().await.unwrap().len(), 1);
}

/// Each call is counted once by its method, whatever attempts it took, and
/// one that fails is counted by its kind of error: what a dashboard of
/// HAKeeper's health reads.
#[tokio::test]
async fn calls_are_counted_by_method_and_failures_by_kind() {
    let cluster = cluster(&["u1"]).await;
    let calls = cnpool_morpc::MorpcMetrics::default();
    let options = MorpcOptions {
        call_timeout: Duration::from_millis(500),
        ..options(&cluster.hakeeper.local_addr().to_string())
    };
    let client = MorpcRegistry::observed(options, calls.clone());
    let store = client.list_stores().await.unwrap().remove(0);
    client.patch_store("u1", WorkState::Working, &labels(&[("account", &["acme"])])).await.unwrap();
    client.workload(&store).await.unwrap();
    assert_eq!(calls.requests("GetClusterDetails"), 1);
    assert_eq!(calls.requests("PatchCNStore"), 1);
    for method in ["ShowProcessList", "GetPipelineInfo", "GetReplicaCount"] {
        assert_eq!(calls.requests(method), 1, "{method}");
    }

    cluster.hakeeper.shutdown().await;
    let down = client.delete_store("u1").await;
    assert!(down.is_err(), "{down:?}");
    assert_eq!(calls.requests("DeleteCNStore"), 1, "a call retried until its deadline is one call");
    assert_eq!(calls.errors("DeleteCNStore", "no_hakeeper"), 1);
    assert_eq!(calls.errors("PatchCNStore", "no_hakeeper"), 0);
}
