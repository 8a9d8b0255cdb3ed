#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! Pools and claim sets whose spec fails validation, with no webhook to
//! refuse them (DESIGN §2, "Inputs"): the operator says which field to fix,
//! once per new message, and does nothing because of the invalid spec; once
//! fixed, it acts again. A pool does not scale out for a claim that cannot
//! bind because its own spec is invalid.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use cnpool_api::{CNClaimSet, labels};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::*;

/// Long enough for several reconciles of the operator the tests run
/// (requeues of at most 2 s, wakes every 200 ms).
const WINDOW: Duration = Duration::from_secs(3);
const SETTLE: Duration = Duration::from_secs(60);

fn sets(cluster: &Cluster) -> Api<CNClaimSet> {
    Api::namespaced(cluster.client.clone(), &cluster.ns)
}

fn ready(conditions: &[Condition]) -> Option<(String, String, String)> {
    let found = conditions.iter().find(|condition| condition.type_ == "Ready")?;
    Some((found.status.clone(), found.reason.clone(), found.message.clone()))
}

async fn pool_ready(cluster: &Cluster) -> Option<(String, String, String)> {
    let pool = cluster.pools().get(POOL).await.ok()?;
    ready(&pool.status?.conditions)
}

async fn set_ready(cluster: &Cluster, set: &str) -> Option<(String, String, String)> {
    let set = sets(cluster).get(set).await.ok()?;
    ready(&set.status?.conditions)
}

/// Waits until `read` shows `Ready` with `status` and `reason`, and
/// returns its message.
async fn ready_becomes<F, Fut>(what: &str, status: &str, reason: &str, read: F) -> String
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<(String, String, String)>>,
{
    eventually(&format!("{what} Ready={status} ({reason})"), SETTLE, || async {
        match read().await {
            Some((seen, why, message)) if seen == status && why == reason => Ok(message),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// How many times a Warning Event with reason InvalidSpec was published
/// about the `kind` named `name`: a repeat of an Event is counted in its
/// series, not as another object.
async fn invalid_spec_events(cluster: &Cluster, kind: &str, name: &str) -> i32 {
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), &cluster.ns);
    let listed = events.list(&ListParams::default()).await.expect("list Events").items;
    listed
        .iter()
        .filter(|event| event.reason.as_deref() == Some("InvalidSpec") && event.type_.as_deref() == Some("Warning"))
        .filter(|event| {
            let regarding = event.regarding.as_ref();
            regarding.and_then(|r| r.kind.as_deref()) == Some(kind)
                && regarding.and_then(|r| r.name.as_deref()) == Some(name)
        })
        .map(|event| event.series.as_ref().map_or(1, |series| series.count))
        .sum()
}

/// Each pod of the pool as name → (UID, phase, owner), the things the
/// operator must not change because of an invalid pool.
async fn pod_states(cluster: &Cluster) -> BTreeMap<String, (Option<String>, Option<String>, Option<String>)> {
    cluster
        .pool_pods()
        .await
        .iter()
        .map(|pod| {
            let owned = |key: &str| label(pod, key).map(str::to_owned);
            let state = (pod.metadata.uid.clone(), owned(labels::PHASE), owned(labels::CLAIM_UID));
            (pod.metadata.name.clone().unwrap_or_default(), state)
        })
        .collect()
}

async fn patch_pool(cluster: &Cluster, patch: Value) -> i64 {
    let pool = cluster.pools().patch(POOL, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch pool");
    pool.metadata.generation.expect("a generation")
}

/// Waits until the pool's status reports `generation`: it has reconciled
/// that spec.
async fn pool_observed(cluster: &Cluster, generation: i64) {
    eventually(&format!("the pool observed generation {generation}"), SETTLE, || async {
        let pool = cluster.pools().get(POOL).await.map_err(|e| e.to_string())?;
        let observed = pool.status.and_then(|status| status.observed_generation);
        if observed == Some(generation) { Ok(()) } else { Err(format!("{observed:?}")) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_pool_touches_no_pod_says_why_once_per_message_and_scales_again_once_fixed() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(1, Some(3)).await;
    cluster.create_claim("tenant", &[("account", "acme")], &[]).await;
    let (tenant_pod, _) = bound_pod(&cluster, "tenant").await;
    ready_becomes("the pool", "True", "Serving", || pool_ready(&cluster)).await;
    let before = eventually("one Bound and one Idle pod", SETTLE, || async {
        let states = pod_states(&cluster).await;
        let phases: Vec<Option<&str>> = states.values().map(|(_, phase, _)| phase.as_deref()).collect();
        let idle = phases.iter().filter(|phase| **phase == Some("Idle")).count();
        if states.len() == 2 && idle == 1 { Ok(states) } else { Err(format!("{states:?}")) }
    })
    .await;

    // maxPods below maxIdle: acted on, it would retire the Idle pod.
    patch_pool(&cluster, json!({"spec": {"strategy": {"scaleStrategy": {"maxPods": 0}}}})).await;
    let first = ready_becomes("the pool", "False", "InvalidSpec", || pool_ready(&cluster)).await;
    assert!(first.contains("spec.strategy.scaleStrategy.maxPods"), "the message names the field: {first}");
    tokio::time::sleep(WINDOW).await;
    assert_eq!(pod_states(&cluster).await, before, "no pod created, retired, deleted or given away");
    assert_eq!(bound_pod(&cluster, "tenant").await.0, tenant_pod, "the tenant keeps its pod");
    assert_eq!(invalid_spec_events(&cluster, "CNPool", POOL).await, 1);

    // Another mistake, another message and Event; an edit that leaves the
    // message as it was adds none.
    patch_pool(&cluster, json!({"spec": {"strategy": {"scaleStrategy": {"maxIdle": 2}}}})).await;
    eventually("a new message", SETTLE, || async {
        match pool_ready(&cluster).await {
            Some((_, reason, message)) if reason == "InvalidSpec" && message != first => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let unrelated = patch_pool(&cluster, json!({"spec": {"strategy": {"drainStrategy": {"timeout": "61s"}}}})).await;
    pool_observed(&cluster, unrelated).await;
    tokio::time::sleep(WINDOW).await;
    assert_eq!(invalid_spec_events(&cluster, "CNPool", POOL).await, 2, "one Event per message");
    assert_eq!(pod_states(&cluster).await, before, "still no pod touched");

    patch_pool(&cluster, json!({"spec": {"strategy": {"scaleStrategy": {"maxPods": 4}}}})).await;
    ready_becomes("the pool", "True", "Serving", || pool_ready(&cluster)).await;
    let after = eventually("maxIdle 2 Idle pods once fixed", SETTLE, || async {
        let states = pod_states(&cluster).await;
        let idle = states.values().filter(|(_, phase, _)| phase.as_deref() == Some("Idle")).count();
        if idle == 2 { Ok(states) } else { Err(format!("{states:?}")) }
    })
    .await;
    for (name, state) in &before {
        assert_eq!(after.get(name), Some(state), "{name} kept as it was");
    }
    assert_eq!(invalid_spec_events(&cluster, "CNPool", POOL).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_does_not_scale_out_for_a_claim_whose_spec_is_invalid() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(0, Some(3)).await;
    ready_becomes("the pool", "True", "Serving", || pool_ready(&cluster)).await;
    // An owner key among the pod labels it asks for: it will not bind.
    cluster.create_claim("sneaky", &[], &[(labels::CLAIM_UID, "someone-else")]).await;
    tokio::time::sleep(WINDOW).await;
    assert!(cluster.pool_pods().await.is_empty(), "no pod made for a claim that cannot bind");
    let status = cluster.pools().get(POOL).await.unwrap().status.unwrap_or_default();
    assert_eq!(status.pending_claims, 0);

    // Fixed, it is a pending claim like any other.
    let fix = json!({"spec": {"additionalPodLabels": {labels::CLAIM_UID: null}}});
    cluster.claims().patch("sneaky", &PatchParams::default(), &Patch::Merge(&fix)).await.expect("fix the claim");
    let (pod, _) = bound_pod(&cluster, "sneaky").await;
    assert_eq!(cluster.pool_pods().await.len(), 1, "one pod, made for it: {pod}");
}

async fn create_set(cluster: &Cluster, name: &str, replicas: i32, template_labels: Value) {
    let set: CNClaimSet = serde_json::from_value(json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNClaimSet",
        "metadata": {"name": name, "namespace": cluster.ns},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": template_labels},
                "spec": {"selector": {"matchLabels": {"tier": "standard"}}, "poolName": POOL},
            },
        },
    }))
    .unwrap();
    sets(cluster).create(&PostParams::default(), &set).await.expect("create claim set");
}

/// The set's members not being deleted, as name → (UID, phase).
async fn members(cluster: &Cluster, set: &str) -> BTreeMap<String, (Option<String>, Option<&'static str>)> {
    let selector = format!("{}={set}", labels::CLAIM_SET);
    let claims = cluster.claims().list(&ListParams::default().labels(&selector)).await.expect("list members").items;
    claims
        .iter()
        .filter(|claim| claim.metadata.deletion_timestamp.is_none())
        .map(|claim| {
            (claim.metadata.name.clone().unwrap_or_default(), (claim.metadata.uid.clone(), claim_phase(claim)))
        })
        .collect()
}

/// Waits until `set` has `replicas` members, each Bound.
async fn bound_members(
    cluster: &Cluster,
    set: &str,
    replicas: usize,
) -> BTreeMap<String, (Option<String>, Option<&'static str>)> {
    eventually(&format!("{set}: {replicas} Bound members"), SETTLE, || async {
        let members = members(cluster, set).await;
        let bound = members.values().filter(|(_, phase)| *phase == Some("Bound")).count();
        if members.len() == replicas && bound == replicas { Ok(members) } else { Err(format!("{members:?}")) }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_claim_set_creates_and_deletes_no_member_until_fixed() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(1, Some(8)).await;
    create_set(&cluster, "tenant", 2, json!({"app": "tenant"})).await;
    let before = bound_members(&cluster, "tenant", 2).await;
    ready_becomes("tenant", "True", "AllClaimsBound", || set_ready(&cluster, "tenant")).await;

    // A member carrying this would pass for the owner of a pod. Scaled to
    // 0 at once: acted on, the set would delete both members.
    let reserved = json!({"spec": {"replicas": 0, "template": {"metadata": {"labels": {labels::CLAIM_UID: "x"}}}}});
    sets(&cluster).patch("tenant", &PatchParams::default(), &Patch::Merge(&reserved)).await.expect("patch set");
    // Invalid from the start: acted on, it would create two members.
    create_set(&cluster, "fresh", 2, json!({"app": "fresh", labels::CLAIM_UID: "x"})).await;
    for set in ["tenant", "fresh"] {
        let message = ready_becomes(set, "False", "InvalidSpec", || set_ready(&cluster, set)).await;
        assert!(message.contains("spec.template.metadata.labels"), "{set}: the message names the field: {message}");
    }
    tokio::time::sleep(WINDOW).await;
    assert_eq!(members(&cluster, "tenant").await, before, "no member deleted or replaced");
    assert!(members(&cluster, "fresh").await.is_empty(), "no member created");
    for set in ["tenant", "fresh"] {
        assert_eq!(invalid_spec_events(&cluster, "CNClaimSet", set).await, 1, "{set}: one Event");
    }

    let fixed = json!({"spec": {"replicas": 3, "template": {"metadata": {"labels": {labels::CLAIM_UID: null}}}}});
    sets(&cluster).patch("tenant", &PatchParams::default(), &Patch::Merge(&fixed)).await.expect("fix set");
    ready_becomes("tenant", "True", "AllClaimsBound", || set_ready(&cluster, "tenant")).await;
    let after = bound_members(&cluster, "tenant", 3).await;
    for (name, member) in &before {
        assert_eq!(after.get(name), Some(member), "{name} kept");
    }
}
