#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! Why a claim waits, as a person on call reads it: the reason and message
//! of the claim's `Bound` condition, a Warning Event only when a person must
//! act (once, never per retry), the pool's conditions; and a pool's Events
//! that name the pods of each scale-out. On the embedded server, or on a
//! real kube-apiserver with `CNPOOL_E2E_KUBECONFIG` (see support).

mod support;

use std::time::Duration;

use cnpool_api::{CNClaim, labels};
use cnpool_registry::RegistryError;
use cnpool_registry::memory::CallKind;
use cnpool_world::WorldConfig;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

/// Long enough for many reconciles of the operator the tests run
/// (requeues of at most 2 s, registry polls every 100 ms).
const WINDOW: Duration = Duration::from_secs(3);
const SETTLE: Duration = Duration::from_secs(60);

/// A claim on pool `pool` whose selector asks for `tier`.
async fn create_claim_selecting(cluster: &Cluster, name: &str, tier: &str, pool: &str) {
    let claim: CNClaim = serde_json::from_value(json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNClaim",
        "metadata": {"name": name, "namespace": cluster.ns},
        "spec": {"selector": {"matchLabels": {"tier": tier}}, "poolName": pool},
    }))
    .unwrap();
    cluster.claims().create(&PostParams::default(), &claim).await.expect("create claim");
}

fn condition(conditions: &[Condition], type_: &str) -> Option<(String, String, String)> {
    let found = conditions.iter().find(|condition| condition.type_ == type_)?;
    Some((found.status.clone(), found.reason.clone(), found.message.clone()))
}

/// Waits until the claim's `Bound` condition is False with `reason`;
/// returns its message and the claim's resourceVersion then.
async fn claim_waits_for(cluster: &Cluster, name: &str, reason: &str) -> (String, String) {
    eventually(&format!("{name}: Bound=False {reason}"), SETTLE, || async {
        let claim = cluster.claims().get(name).await.map_err(|e| e.to_string())?;
        let conditions = claim.status.as_ref().map(|status| status.conditions.clone()).unwrap_or_default();
        match condition(&conditions, "Bound") {
            Some((status, why, message)) if status == "False" && why == reason => {
                Ok((message, claim.metadata.resource_version.unwrap_or_default()))
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// Waits until the pool's condition `type_` shows `status` and `reason`;
/// returns its message.
async fn pool_shows(cluster: &Cluster, type_: &str, status: &str, reason: &str) -> String {
    eventually(&format!("pool {type_}={status} {reason}"), SETTLE, || async {
        let pool = cluster.pools().get(POOL).await.map_err(|e| e.to_string())?;
        let conditions = pool.status.map(|status| status.conditions).unwrap_or_default();
        match condition(&conditions, type_) {
            Some((seen, why, message)) if seen == status && why == reason => Ok(message),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// The Events about the `kind` named `name`.
async fn events_of(cluster: &Cluster, kind: &str, name: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), &cluster.ns);
    let listed = events.list(&ListParams::default()).await.expect("list Events").items;
    listed
        .into_iter()
        .filter(|event| {
            let regarding = event.regarding.as_ref();
            regarding.and_then(|r| r.kind.as_deref()) == Some(kind)
                && regarding.and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect()
}

/// How many times a Warning with `reason` was published about the claim
/// `name` (a repeat counts in its Event's series).
async fn warnings(cluster: &Cluster, name: &str, reason: &str) -> i32 {
    events_of(cluster, "CNClaim", name)
        .await
        .iter()
        .filter(|event| event.type_.as_deref() == Some("Warning") && event.reason.as_deref() == Some(reason))
        .map(|event| event.series.as_ref().map_or(1, |series| series.count))
        .sum()
}

/// The claim's resourceVersion now.
async fn version_of(cluster: &Cluster, name: &str) -> String {
    cluster.claims().get(name).await.unwrap().metadata.resource_version.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_selector_or_pool_matches_no_pool_says_so_once() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(0, Some(2)).await;
    create_claim_selecting(&cluster, "gold", "gold", POOL).await;
    create_claim_selecting(&cluster, "elsewhere", "standard", "ghost").await;

    let (gold, gold_version) = claim_waits_for(&cluster, "gold", "NoPoolMatches").await;
    assert!(gold.contains(POOL) && gold.contains("spec.selector"), "names the pool and the field: {gold}");
    let (elsewhere, elsewhere_version) = claim_waits_for(&cluster, "elsewhere", "NoPoolMatches").await;
    assert!(elsewhere.contains("ghost") && elsewhere.contains("spec.poolName"), "{elsewhere}");
    pool_shows(&cluster, "Ready", "True", "Serving").await;

    tokio::time::sleep(WINDOW).await;
    assert_eq!(version_of(&cluster, "gold").await, gold_version, "no status write per retry");
    assert_eq!(version_of(&cluster, "elsewhere").await, elsewhere_version);
    assert_eq!(warnings(&cluster, "gold", "NoPoolMatches").await, 1);
    assert_eq!(warnings(&cluster, "elsewhere", "NoPoolMatches").await, 1);
    assert!(cluster.pool_pods().await.is_empty(), "the pool makes no pod for claims that cannot take one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_on_a_pool_at_max_pods_names_the_pool_and_its_limit_and_a_new_claim_rewrites_it_not() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(0, Some(1)).await;
    cluster.create_claim("first", &[], &[]).await;
    bound_pod(&cluster, "first").await;
    cluster.create_claim("second", &[], &[]).await;
    let (message, _) = claim_waits_for(&cluster, "second", "PoolAtMaxPods").await;
    assert!(message.contains(&format!("pool {POOL}")) && message.contains("maxPods 1"), "{message}");
    let at_max = pool_shows(&cluster, "AtMaxPods", "True", "AtMaxPods").await;
    assert!(at_max.contains("maxPods 1"), "{at_max}");
    pool_shows(&cluster, "Ready", "True", "Serving").await;

    // Another claim on the full pool: the first one's status says the same
    // as before, and is not written again.
    let second_version = version_of(&cluster, "second").await;
    cluster.create_claim("third", &[], &[]).await;
    let (third, _) = claim_waits_for(&cluster, "third", "PoolAtMaxPods").await;
    assert_eq!(third, message, "the same words for every claim on the pool");
    eventually("the pool counts both pending claims", SETTLE, || async {
        let pool = cluster.pools().get(POOL).await.map_err(|e| e.to_string())?;
        let pending = pool.status.map(|status| status.pending_claims);
        if pending == Some(2) { Ok(()) } else { Err(format!("{pending:?}")) }
    })
    .await;
    tokio::time::sleep(WINDOW).await;
    assert_eq!(version_of(&cluster, "second").await, second_version, "a new claim rewrote a pending claim");
    assert_eq!(warnings(&cluster, "second", "PoolAtMaxPods").await, 1);
    assert_eq!(warnings(&cluster, "third", "PoolAtMaxPods").await, 1);

    let room = json!({"spec": {"strategy": {"scaleStrategy": {"maxPods": 4}}}});
    cluster.pools().patch(POOL, &PatchParams::default(), &Patch::Merge(&room)).await.expect("raise maxPods");
    bound_pod(&cluster, "second").await;
    bound_pod(&cluster, "third").await;
    let below = pool_shows(&cluster, "AtMaxPods", "False", "BelowMaxPods").await;
    assert!(below.contains("maxPods 4"), "{below}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_waiting_for_its_pool_to_start_a_pod_says_so_without_a_warning() {
    let slow = WorldConfig { start_delay: Duration::from_secs(6), ..WorldConfig::default() };
    let cluster = Cluster::with_world(slow).await;
    cluster.start_operator(0).await;
    cluster.create_pool(0, Some(3)).await;
    cluster.create_claim("patient", &[], &[]).await;
    let (message, _) = claim_waits_for(&cluster, "patient", "PoolScalingOut").await;
    assert!(message.contains(&format!("pool {POOL}")) && message.contains("maxPods 3"), "{message}");
    pool_shows(&cluster, "AtMaxPods", "False", "BelowMaxPods").await;
    bound_pod(&cluster, "patient").await;
    let events = events_of(&cluster, "CNClaim", "patient").await;
    assert!(
        events.iter().all(|event| event.type_.as_deref() != Some("Warning")),
        "waiting for a pod that comes asks nothing of anyone: {:?}",
        events.iter().map(|event| &event.reason).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_store_has_not_taken_its_labels_names_its_pod_without_a_warning() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(1, Some(3)).await;
    eventually("an Idle pod", SETTLE, || async {
        let idle = phase_count(&cluster.pool_pods().await, "Idle");
        if idle == 1 { Ok(()) } else { Err(format!("{idle} Idle")) }
    })
    .await;
    // HAKeeper refuses every write of the store's state and labels.
    let refused = || RegistryError::Remote { call: "PatchCNStore", code: 20500, message: "refused".into() };
    for call in [CallKind::PatchStore, CallKind::ReplaceLabels] {
        cluster.registry().fail_next_only(call, u32::MAX, refused());
    }
    cluster.create_claim("labelled", &[("account", "acme")], &[]).await;
    let (message, _) = claim_waits_for(&cluster, "labelled", "WaitingForStore").await;
    let pod = cluster.claims().get("labelled").await.unwrap().spec.pod_name;
    assert!(!pod.is_empty() && message.contains(&pod) && message.contains(POOL), "names {pod:?}: {message}");
    assert_eq!(warnings(&cluster, "labelled", "WaitingForStore").await, 0);
    cluster.registry().clear_faults();
    bound_pod(&cluster, "labelled").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hakeeper_unreachable_shows_on_the_claim_and_the_pool_and_clears_once_it_answers() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(0, Some(3)).await;
    pool_shows(&cluster, "HAKeeperReachable", "True", "Reachable").await;
    let down = RegistryError::NoHaKeeper { detail: "the log service does not answer".into() };
    cluster.registry().fail_next_only(CallKind::ListStores, u32::MAX, down);
    let ready = pool_shows(&cluster, "Ready", "False", "HAKeeperUnreachable").await;
    assert!(ready.contains("HAKeeper"), "{ready}");
    pool_shows(&cluster, "HAKeeperReachable", "False", "HAKeeperUnreachable").await;

    cluster.create_claim("stranded", &[], &[]).await;
    let (message, version) = claim_waits_for(&cluster, "stranded", "HAKeeperUnreachable").await;
    assert!(message.contains(POOL), "names the pool: {message}");
    tokio::time::sleep(WINDOW).await;
    assert_eq!(version_of(&cluster, "stranded").await, version, "no status write per failed listing");
    assert_eq!(warnings(&cluster, "stranded", "HAKeeperUnreachable").await, 1);

    cluster.registry().clear_faults();
    bound_pod(&cluster, "stranded").await;
    pool_shows(&cluster, "Ready", "True", "Serving").await;
    pool_shows(&cluster, "HAKeeperReachable", "True", "Reachable").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_with_an_invalid_spec_says_which_field_once_and_its_pool_stays_ready() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(0, Some(3)).await;
    cluster.create_claim("sneaky", &[], &[(labels::CLAIM_UID, "someone-else")]).await;
    let (message, version) = claim_waits_for(&cluster, "sneaky", "InvalidSpec").await;
    assert!(message.contains("spec.additionalPodLabels"), "names the field: {message}");
    pool_shows(&cluster, "Ready", "True", "Serving").await;
    tokio::time::sleep(WINDOW).await;
    assert_eq!(version_of(&cluster, "sneaky").await, version);
    assert_eq!(warnings(&cluster, "sneaky", "InvalidSpec").await, 1);
    assert!(cluster.pool_pods().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_scale_out_has_an_event_naming_its_own_pods() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(0, Some(10)).await;
    let mut pods = Vec::new();
    for name in ["one", "two", "three"] {
        cluster.create_claim(name, &[], &[]).await;
        pods.push(bound_pod(&cluster, name).await.0);
    }
    let scaled_out = eventually("three ScaledOut Events", SETTLE, || async {
        let events: Vec<Event> = events_of(&cluster, "CNPool", POOL)
            .await
            .into_iter()
            .filter(|event| event.reason.as_deref() == Some("ScaledOut"))
            .collect();
        if events.len() == 3 { Ok(events) } else { Err(format!("{} ScaledOut Events", events.len())) }
    })
    .await;
    let last_seen = |event: &Event| {
        event.series.as_ref().map(|series| series.last_observed_time.0).or(event.event_time.as_ref().map(|time| time.0))
    };
    let latest = scaled_out.iter().max_by_key(|event| last_seen(event)).unwrap();
    let note = latest.note.clone().unwrap_or_default();
    assert!(note.contains(&pods[2]), "the latest ScaledOut names the last scale-out's pod {}: {note}", pods[2]);
    for pod in &pods {
        let naming = scaled_out.iter().filter(|event| event.note.as_deref().unwrap_or_default().contains(pod.as_str()));
        assert_eq!(naming.count(), 1, "one Event names {pod}");
    }
}
