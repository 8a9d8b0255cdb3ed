//! Objects as the Go matrixone-operator writes them must read into cnpool's
//! types and write back unchanged, so that a cluster can be cut over (and
//! back) without rewriting a single claim. The one addition is the store's
//! `workStateName` beside its number, which Go's JSON reading ignores.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use cnpool_api::{CNClaim, CNClaimSet, ClaimPhase};
use serde_json::{Value, json};

fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(object: &Value) -> (T, Value) {
    let typed: T = serde_json::from_value(object.clone()).expect("the Go operator's object deserializes");
    let back = serde_json::to_value(&typed).expect("serializes");
    (typed, back)
}

/// `claim` as cnpool writes it back: with its store's work state named.
fn with_work_state_name(claim: &Value, name: &str) -> Value {
    let mut named = claim.clone();
    named["status"]["store"]["workStateName"] = json!(name);
    named
}

/// A claim mid-migration, with every field the Go types define set.
fn go_bound_claim() -> Value {
    json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNClaim",
        "metadata": {
            "name": "tenant-6rh6f",
            "namespace": "freetier-01",
            "uid": "0b1c2d3e-0000-4000-8000-000000000001",
            "resourceVersion": "4711",
            "generation": 3,
            "creationTimestamp": "2026-05-14T05:12:00Z",
            "labels": {"matrixorigin.io/claimset": "tenant", "claim.matrixorigin.io/instance-id": "6rh6f"},
            "finalizers": ["matrixorigin.io/cnclaim"]
        },
        "spec": {
            "podName": "cn-8fqpx",
            "nodeName": "node-3",
            "sourcePod": {"podName": "cn-glhd9", "nodeName": "node-1"},
            "selector": {
                "matchLabels": {"pool": "default"},
                "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]
            },
            "cnLabels": [{"key": "account", "values": ["acc1"]}, {"key": "role", "values": ["tp", "ap"]}],
            "ownerName": "tenant",
            "additionalPodLabels": {"tenant.example.com/id": "acc1"},
            "poolName": "default"
        },
        "status": {
            "phase": "Bound",
            "store": {
                "serviceID": "62333133-3462-6162-3339-633436306439",
                "lockServiceAddress": "cn-8fqpx.cn-headless.freetier-01.svc:6003",
                "pipelineServiceAddress": "cn-8fqpx.cn-headless.freetier-01.svc:6005",
                "sqlAddress": "cn-8fqpx.cn-headless.freetier-01.svc:6001",
                "queryAddress": "cn-8fqpx.cn-headless.freetier-01.svc:19998",
                "workState": 1,
                "labels": [{"key": "account", "values": ["acc1"]}],
                "boundTime": "2026-05-14T21:40:00Z",
                "string": "cn-8fqpx"
            },
            "boundTime": "2026-05-14T05:12:31Z",
            "migrate": {"source": {"connections": 3, "pipelines": 1, "replicas": 0}}
        }
    })
}

#[test]
fn a_bound_migrating_claim_round_trips_without_loss() {
    let original = go_bound_claim();
    let (claim, back) = round_trip::<CNClaim>(&original);
    assert_eq!(back, with_work_state_name(&original, "Working"));

    assert_eq!(claim.spec.source_pod.as_ref().map(|source| source.pod_name.as_str()), Some("cn-glhd9"));
    assert_eq!(claim.phase(), Some(ClaimPhase::Bound));
    let status = claim.status.as_ref().expect("status");
    let store = status.store.as_ref().expect("store");
    assert_eq!(store.pod_name(), Some("cn-8fqpx"), "the pod name is read from the Go `string` key");
    assert_eq!(store.work_state, Some(1));
    assert_eq!(status.migrate.as_ref().and_then(|m| m.source).map(|w| w.connections), Some(3));
}

#[test]
fn the_go_example_claim_reads_as_pending_with_nothing_recorded() {
    let original = json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNClaim",
        "metadata": {"name": "test", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"pool": "default"}}, "cnLabels": [{"key": "role", "values": ["test"]}]}
    });
    let (claim, back) = round_trip::<CNClaim>(&original);
    assert_eq!(back, original);
    assert!(claim.spec.pod_name.is_empty());
    assert_eq!(claim.phase(), None);
}

#[test]
fn writing_the_pod_name_keeps_the_go_key_beside_the_new_one() {
    let (mut claim, _) = round_trip::<CNClaim>(&go_bound_claim());
    let status = claim.status.as_mut().expect("status");
    let store = status.store.as_mut().expect("store");
    store.set_pod_name("cn-qnl95");
    store.pod_uid = Some("pod-uid-1".into());
    let written = serde_json::to_value(&claim).expect("serializes");
    assert_eq!(written["status"]["store"]["string"], "cn-qnl95");
    assert_eq!(written["status"]["store"]["podName"], "cn-qnl95");
    assert_eq!(written["status"]["store"]["podUID"], "pod-uid-1");
}

#[test]
fn new_status_fields_are_optional_and_round_trip() {
    let mut original = go_bound_claim();
    original["status"]["observedGeneration"] = json!(3);
    original["status"]["conditions"] = json!([{
        "type": "Bound",
        "status": "True",
        "reason": "Acquired",
        "message": "bound to cn-8fqpx",
        "lastTransitionTime": "2026-05-14T05:12:31Z",
        "observedGeneration": 3
    }]);
    original["status"]["store"]["podName"] = json!("cn-8fqpx");
    original["status"]["store"]["podUID"] = json!("9f0e0000-0000-4000-8000-0000000000aa");
    let (claim, back) = round_trip::<CNClaim>(&original);
    assert_eq!(back, with_work_state_name(&original, "Working"));
    assert_eq!(claim.status.expect("status").conditions[0].reason, "Acquired");
}

/// `kubectl get cnclaim -o yaml` shows the store's work state by name; the
/// number stays what both operators read, and a name is never read back.
#[test]
fn the_store_work_state_is_written_by_name_beside_its_number() {
    for (number, name) in [(0, Some("Unknown")), (2, Some("Draining")), (3, Some("Drained")), (9, None)] {
        let mut original = go_bound_claim();
        original["status"]["store"]["workState"] = json!(number);
        // A stale or forged name is not what the number says.
        original["status"]["store"]["workStateName"] = json!("Working");
        let (claim, back) = round_trip::<CNClaim>(&original);
        let store = claim.status.as_ref().and_then(|status| status.store.as_ref()).expect("store");
        assert_eq!(store.work_state, Some(number));
        assert_eq!(store.work_state_name(), name);
        assert_eq!(back["status"]["store"]["workState"], json!(number));
        assert_eq!(back["status"]["store"].get("workStateName").and_then(Value::as_str), name, "{number}");
    }
}

#[test]
fn a_claim_set_round_trips_without_loss() {
    let original = json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNClaimSet",
        "metadata": {"name": "tenant", "namespace": "freetier-01"},
        "spec": {
            "replicas": 2,
            "template": {
                "metadata": {"name": "ignored", "labels": {"app": "tenant"}, "annotations": {"note": "x"}},
                "spec": {"selector": {"matchLabels": {"pool": "default"}}, "cnLabels": [{"key": "role", "values": ["test"]}]}
            },
            "selector": {"matchLabels": {"app": "tenant"}}
        },
        "status": {
            "replicas": 2,
            "readyReplicas": 1,
            "claims": [
                {"phase": "Bound", "store": {"serviceID": "u1", "sqlAddress": "a:6001", "string": "cn-1"}, "boundTime": "2026-05-14T05:12:31Z"},
                {"phase": "Pending"}
            ],
            "labelSelector": "matrixorigin.io/claimset=tenant,pool.matrixorigin.io/phase=Bound",
            "podSelector": "matrixorigin.io/claimset=tenant"
        }
    });
    let (set, back) = round_trip::<CNClaimSet>(&original);
    assert_eq!(back, original);
    assert_eq!(set.spec.replicas, 2);
    assert_eq!(set.status.expect("status").claims[0].store.as_ref().and_then(|s| s.pod_name()), Some("cn-1"));
}

/// A CNPool as written for the Go operator: a CNSet template, a LogSet
/// object as `deps.logSet`, fields a pool ignores (serviceType, cnLabels,
/// updateStrategy). cnpool reads it as a Go-shaped pool and writes back
/// every key it read.
#[test]
fn a_go_pool_round_trips_without_loss() {
    let original = json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNPool",
        "metadata": {"name": "freetier", "namespace": "freetier-01"},
        "spec": {
            "template": {
                "image": "matrixorigin/matrixone:1.2.3",
                "replicas": 0,
                "serviceType": "ClusterIP",
                "cnLabels": [{"key": "role", "values": ["free"]}],
                "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "8Gi"}},
                "memoryLimitPercent": 80,
                "config": "[cn.frontend]\nport = 6001\n",
                "overlay": {"env": [{"name": "GODEBUG", "value": "madvdontneed=1"}], "podLabels": {"tier": "free"}},
                "updateStrategy": {"maxSurge": 1},
                "scalingConfig": {"storeDrainEnabled": true, "storeDrainTimeout": "10m"}
            },
            "podLabels": {"pool": "freetier"},
            "deps": {"logSet": {"metadata": {"name": "mo", "namespace": "mo-system"}, "spec": {"replicas": 3}}},
            "strategy": {"scaleStrategy": {"maxIdle": 2, "maxPods": 100}, "updateStrategy": {"reclaimTimeout": "24h"}}
        }
    });
    let (pool, back) = round_trip::<cnpool_api::CNPool>(&original);
    assert_eq!(back, original);
    let template = pool.spec.template.as_ref().expect("the Go template is spec.template");
    assert_eq!(template.image, "matrixorigin/matrixone:1.2.3");
    assert!(pool.spec.pod_template.is_none());
    let deps = pool.spec.deps.as_ref().expect("deps");
    assert_eq!(deps.log_set_key("freetier-01"), Some(("mo-system".into(), "mo".into())));
    assert_eq!(pool.pod_labels().get("tier").map(String::as_str), Some("free"), "overlay.podLabels reach the pods");
}
