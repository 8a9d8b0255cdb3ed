#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeMap;

use cnpool_api::{CNClaim, CNPool, labels};
use cnpool_registry::CnStore;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::*;
use crate::snapshot::Stores;

const NS: &str = "tenants";
const NOW: i64 = 1_800_000_000;

fn at(seconds_before_now: i64) -> String {
    Timestamp::from_second(NOW - seconds_before_now).unwrap().to_string()
}

fn pod(name: &str, pod_labels: Value) -> Pod {
    let mut all = json!({labels::POOL_NAME: "mo", "tier": "standard"});
    all.as_object_mut().unwrap().extend(pod_labels.as_object().unwrap().clone());
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "creationTimestamp": at(3600), "labels": all},
        "spec": {"hostname": name, "subdomain": "mo", "containers": [{"name": "cn", "image": "mo"}]},
    }))
    .unwrap()
}

/// A pod the Go operator bound to `claim`.
fn go_pod(name: &str, claim: &str) -> Pod {
    pod(name, json!({labels::PHASE: "Bound", labels::CLAIMED_BY: claim}))
}

fn claim(name: &str, spec: Value, status: Value) -> CNClaim {
    let mut full = json!({"selector": {"matchLabels": {"tier": "standard"}}, "poolName": "mo",
        "cnLabels": [{"key": "account", "values": [name]}]});
    full.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "creationTimestamp": at(7200)},
        "spec": full,
        "status": status,
    }))
    .unwrap()
}

/// A claim as the Go operator leaves it Bound to `pod`.
fn go_claim(name: &str, pod: &str) -> CNClaim {
    claim(name, json!({"podName": pod}), json!({"phase": "Bound", "store": {"string": pod}}))
}

fn pool(max_pods: i32) -> CNPool {
    serde_json::from_value(json!({
        "metadata": {"name": "mo", "namespace": NS, "uid": "uid-pool", "creationTimestamp": at(9000)},
        "spec": {"template": {"image": "mo"}, "podLabels": {"tier": "standard"},
                 "strategy": {"scaleStrategy": {"maxIdle": 1, "maxPods": max_pods}}},
    }))
    .unwrap()
}

fn store(pod: &str, account: &str) -> CnStore {
    CnStore {
        uuid: cnpool_api::cn_store_uuid(pod, "mo", NS),
        labels: [("account".to_owned(), vec![account.to_owned()])].into(),
        ..CnStore::default()
    }
}

fn snapshot(pods: Vec<Pod>, claims: Vec<CNClaim>, stores: Vec<CnStore>) -> Snapshot {
    Snapshot {
        pods,
        claims,
        claim_sets: Vec::new(),
        pools: vec![pool(10)],
        stores: BTreeMap::from([(
            (NS.to_owned(), "mo".to_owned()),
            Stores::Listed { hakeeper: "hakeeper:32001".to_owned(), stores },
        )]),
        cutover: None,
        now: Timestamp::from_second(NOW).unwrap(),
    }
}

/// Each finding as `check objects...`, and its writes.
fn seen(snapshot: &Snapshot) -> Vec<(String, Vec<String>)> {
    findings(snapshot, &Settings::default())
        .into_iter()
        .map(|finding| {
            let objects: Vec<String> = finding.objects.iter().map(|object| object.name.clone()).collect();
            let writes = finding.fix.writes.iter().map(ToString::to_string).collect();
            (format!("{} {}", finding.check.as_str(), objects.join(" ")), writes)
        })
        .collect()
}

#[test]
fn the_go_operators_double_binding_marks_the_claim_claimed_by_does_not_name_and_adopts_the_other() {
    let state = snapshot(
        vec![go_pod("mo-2", "shared-a")],
        vec![go_claim("shared-a", "mo-2"), go_claim("shared-b", "mo-2")],
        vec![store("mo-2", "shared-a")],
    );
    assert_eq!(
        seen(&state),
        [
            (
                "shared-pod mo-2 shared-a shared-b".to_owned(),
                vec![format!("CNClaim {NS}/shared-b: status Lost (Misbound), then spec.podName cleared")]
            ),
            ("legacy-binding shared-a mo-2".to_owned(), vec![]),
        ]
    );
}

#[test]
fn a_claim_bound_to_a_deleted_pod_is_left_to_the_operator_and_nothing_else_is_wrong() {
    let state = snapshot(vec![], vec![go_claim("dangling", "mo-9")], vec![]);
    let found = findings(&state, &Settings::default());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].check, found[0].fix.by), (Check::LostPod, FixBy::Operator));
    assert!(found[0].summary.contains("mo-9"), "{}", found[0].summary);
}

#[test]
fn a_pod_carrying_the_uid_of_no_claim_is_an_orphan_released_by_that_uid() {
    let orphan =
        pod("mo-4", json!({labels::PHASE: "Bound", labels::CLAIM_UID: "uid-gone", labels::CLAIMED_BY: "gone"}));
    let state = snapshot(vec![orphan], vec![], vec![]);
    assert_eq!(
        seen(&state),
        [("orphan-pod mo-4".to_owned(), vec![format!("Pod {NS}/mo-4: guarded release from claim-uid uid-gone")])]
    );
    // A claim being deleted still owns its pods: its finalizer releases them.
    let mut deleting = claim("gone", json!({}), json!({}));
    deleting.metadata.uid = Some("uid-gone".to_owned());
    deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(state.now));
    deleting.metadata.finalizers = Some(vec![labels::CLAIM_FINALIZER.to_owned()]);
    let held = snapshot(state.pods.clone(), vec![deleting], vec![]);
    assert!(seen(&held).is_empty(), "{:?}", seen(&held));
}

#[test]
fn a_store_is_foreign_only_when_it_carries_the_labels_of_a_claim_that_does_not_own_its_pod() {
    let pods = vec![go_pod("mo-0", "solo"), go_pod("mo-1", "other")];
    let claims = vec![go_claim("solo", "mo-0"), go_claim("other", "mo-1")];
    let healthy = snapshot(pods.clone(), claims.clone(), vec![store("mo-0", "solo"), store("mo-1", "other")]);
    assert!(seen(&healthy).iter().all(|(what, _)| what.starts_with("legacy-binding")), "{:?}", seen(&healthy));
    let swapped = snapshot(pods, claims, vec![store("mo-0", "solo"), store("mo-1", "solo")]);
    let uuid = cnpool_api::cn_store_uuid("mo-1", "mo", NS);
    let foreign: Vec<String> =
        seen(&swapped).into_iter().map(|(what, _)| what).filter(|what| what.starts_with("foreign")).collect();
    assert_eq!(foreign, [format!("foreign-store-labels {uuid} mo-1 other solo")]);
}

#[test]
fn a_pool_over_max_pods_and_a_claim_deleted_long_ago_are_reported() {
    let idle = |name: &str| pod(name, json!({labels::PHASE: "Idle"}));
    let mut state = snapshot(vec![idle("mo-0"), idle("mo-1"), idle("mo-2")], vec![], vec![]);
    state.pools = vec![pool(2)];
    let mut stuck = claim("old", json!({}), json!({}));
    stuck.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::from_second(NOW - 3600).unwrap()));
    stuck.metadata.finalizers = Some(vec![labels::CLAIM_FINALIZER.to_owned()]);
    let mut recent = stuck.clone();
    recent.metadata.name = Some("recent".to_owned());
    recent.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::from_second(NOW - 10).unwrap()));
    state.claims = vec![stuck, recent];
    let what: Vec<String> = seen(&state).into_iter().map(|(what, _)| what).collect();
    assert_eq!(what, ["over-max-pods mo", "stuck-finalizer old"]);
}

#[test]
fn a_spec_the_validation_refuses_names_its_field() {
    let state = snapshot(vec![], vec![claim("bad", json!({"sourcePod": {"podName": ""}}), json!({}))], vec![]);
    let found = findings(&state, &Settings::default());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].check, Check::InvalidSpec);
    assert!(found[0].fix.action.contains("spec.sourcePod.podName"), "{}", found[0].fix.action);
}

#[test]
fn a_pool_whose_max_pods_the_validation_refuses_is_reported_as_invalid_only() {
    let idle = |name: &str| pod(name, json!({labels::PHASE: "Idle"}));
    let mut state = snapshot(vec![idle("mo-0"), idle("mo-1")], vec![], vec![]);
    state.pools = vec![pool(-1)];
    let what: Vec<String> = seen(&state).into_iter().map(|(what, _)| what).collect();
    assert_eq!(what, ["invalid-spec mo"]);
}
