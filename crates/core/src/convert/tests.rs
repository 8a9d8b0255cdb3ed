use cnpool_api::ClaimPhase;
use cnpool_registry::WorkState;
use serde_json::json;

use super::*;
use crate::testing::{labels as label_map, store_labels};

fn pod(value: serde_json::Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

fn bound_pod_json() -> serde_json::Value {
    json!({
        "metadata": {
            "name": "mo-cn-0", "namespace": "default", "uid": "pod-uid",
            "creationTimestamp": "2026-05-14T18:00:59Z",
            "labels": {
                "pool.matrixorigin.io/phase": "Bound",
                "pool.matrixorigin.io/pool-name": "pool",
                "pool.matrixorigin.io/claim-uid": "claim-uid",
                "pool.matrixorigin.io/claimed-by": "claim",
                "pool.matrixorigin.io/revision": "r1",
                "matrixorigin.io/last-owner": "",
                "team": "blue"
            },
            "annotations": {
                "matrixorigin.io/reclaimed-at": "2026-05-14T17:00:00Z",
                "controller.kubernetes.io/pod-deletion-cost": "7",
                "pool.matrixorigin.io/binding": "{}"
            }
        },
        "spec": {"containers": [], "nodeName": "node-1", "subdomain": "mo-cn-headless"},
        "status": {"phase": "Running"}
    })
}

#[test]
fn reads_a_bound_pod() {
    let view = pod_view(&pod(bound_pod_json()), false).unwrap();
    assert_eq!((view.name.as_str(), view.uid.as_str()), ("mo-cn-0", "pod-uid"));
    assert_eq!(view.phase, Some(PodPhase::Bound));
    assert_eq!(view.pool.as_deref(), Some("pool"));
    assert_eq!(view.claim_uid.as_deref(), Some("claim-uid"));
    assert_eq!(view.claimed_by.as_deref(), Some("claim"));
    assert_eq!(view.revision.as_deref(), Some("r1"));
    assert_eq!(view.last_owner, None, "an empty label value is no owner");
    assert_eq!(view.created, "2026-05-14T18:00:59Z".parse().unwrap());
    assert_eq!(view.reclaimed_at, Some("2026-05-14T17:00:00Z".parse().unwrap()));
    assert_eq!(view.deletion_cost, 7);
    assert_eq!(view.binding.as_deref(), Some("{}"));
    assert_eq!(view.node.as_deref(), Some("node-1"));
    assert_eq!(view.labels.get("team").map(String::as_str), Some("blue"));
    assert!(!view.failed && !view.deleting && !view.outdated && !view.delete_on_reclaim && !view.cordoned);
    // The reference's test vector for mo-cn-0.mo-cn-headless.default.svc.
    assert_eq!(view.store_uuid.as_deref(), Some("62333133-3462-6162-3339-633436306439"));
}

#[test]
fn the_store_uuid_label_wins_over_the_dns_name() {
    let mut value = bound_pod_json();
    value["metadata"]["labels"]["matrixone.cloud/cn-uuid"] = json!("from-label");
    assert_eq!(pod_view(&pod(value), false).unwrap().store_uuid.as_deref(), Some("from-label"));
}

#[test]
fn a_go_cn_set_pods_revision_is_its_cn_sets_hash_and_cnpools_label_wins() {
    let go_pod = |instance: &str, component: &str| {
        let mut value = bound_pod_json();
        let labels = value["metadata"]["labels"].as_object_mut().unwrap();
        labels.remove("pool.matrixorigin.io/revision");
        labels.insert("matrixorigin.io/instance".into(), json!(instance));
        labels.insert("matrixorigin.io/component".into(), json!(component));
        value
    };
    let revision = |value: serde_json::Value| pod_view(&pod(value), false).unwrap().revision;
    assert_eq!(revision(go_pod("pool-5d7c6d9c8d", "CNSet")).as_deref(), Some("5d7c6d9c8d"));
    assert_eq!(revision(go_pod("other-5d7c6d9c8d", "CNSet")), None, "another pool's CN set says nothing");
    assert_eq!(revision(go_pod("pool5d7c6d9c8d", "CNSet")), None);
    assert_eq!(revision(go_pod("pool-", "CNSet")), None);
    assert_eq!(revision(go_pod("pool-5d7c6d9c8d", "LogSet")), None, "only a CN set's pods");
    let mut labelled = go_pod("pool-5d7c6d9c8d", "CNSet");
    labelled["metadata"]["labels"]["pool.matrixorigin.io/revision"] = json!("r2");
    assert_eq!(revision(labelled).as_deref(), Some("r2"));
}

#[test]
fn reads_flags_and_a_failed_phase() {
    let mut value = bound_pod_json();
    value["metadata"]["deletionTimestamp"] = json!("2026-05-14T19:00:00Z");
    value["metadata"]["labels"]["matrixorigin.io/outdated"] = json!("true");
    value["metadata"]["labels"]["pool.matrixorigin.io/phase"] = json!("Sleeping");
    value["metadata"]["annotations"]["matrixorigin.io/delete-on-reclaim"] = json!("true");
    value["metadata"]["annotations"]["matrixorigin.io/store-cordon"] = json!("true");
    value["metadata"]["annotations"]["matrixorigin.io/reclaimed-at"] = json!("yesterday");
    value["status"]["phase"] = json!("Failed");
    let view = pod_view(&pod(value), false).unwrap();
    assert!(view.deleting && view.outdated && view.delete_on_reclaim && view.cordoned && view.failed);
    assert_eq!(view.phase, None, "a phase no operator writes");
    assert_eq!(view.reclaimed_at, None, "an unreadable time reads as absent");
}

#[test]
fn a_pod_on_a_cordoned_node_reads_as_cordoned_without_the_annotation() {
    assert!(pod_view(&pod(bound_pod_json()), true).unwrap().cordoned);
    assert!(!pod_view(&pod(bound_pod_json()), false).unwrap().cordoned);
}

#[test]
fn a_pod_without_a_uid_is_refused_with_the_field_named() {
    let mut value = bound_pod_json();
    value["metadata"].as_object_mut().unwrap().remove("uid");
    let error = pod_view(&pod(value), false).unwrap_err();
    assert_eq!(error, ConvertError::MissingField { kind: "Pod", field: "metadata.uid" });
    assert!(error.to_string().contains("metadata.uid"));
}

#[test]
fn reads_a_claim_the_go_operator_wrote() {
    let claim: CNClaim = serde_json::from_value(json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "CNClaim",
        "metadata": {
            "name": "claim", "uid": "claim-uid", "labels": {"matrixorigin.io/claimset": "set"},
            "finalizers": ["pool.matrixorigin.io/claim"]
        },
        "spec": {
            "podName": "mo-cn-0", "poolName": "pool", "ownerName": "tenant",
            "selector": {"matchLabels": {"tier": "gold"}},
            "cnLabels": [{"key": "account", "values": ["acme"]}],
            "additionalPodLabels": {"team": "blue"},
            "sourcePod": {"podName": "mo-cn-9"}
        },
        "status": {"phase": "Bound", "store": {"string": "mo-cn-0", "workState": 1}, "boundTime": "2026-05-14T18:01:00Z"}
    }))
    .unwrap();
    let view = claim_view(&claim).unwrap();
    assert_eq!((view.name.as_str(), view.uid.as_str()), ("claim", "claim-uid"));
    assert!(view.has_finalizer && !view.deleting);
    assert_eq!(view.pod_name.as_deref(), Some("mo-cn-0"));
    assert_eq!(view.source_pod.as_deref(), Some("mo-cn-9"));
    assert_eq!(view.pool_name.as_deref(), Some("pool"));
    assert_eq!(view.owner_name.as_deref(), Some("tenant"));
    assert_eq!(view.phase, Some(ClaimPhase::Bound));
    assert_eq!(view.recorded_pod_uid, None);
    assert_eq!(view.recorded_pod_name.as_deref(), Some("mo-cn-0"));
    assert_eq!(view.bound_time, Some("2026-05-14T18:01:00Z".parse().unwrap()));
    assert_eq!(view.cn_labels, store_labels(&[("account", &["acme"])]));
    assert_eq!(view.additional_pod_labels, label_map(&[("team", "blue")]));
    assert_eq!(view.claim_set.as_deref(), Some("set"));
    assert_eq!(view.selector.match_labels, Some(label_map(&[("tier", "gold")])));
}

#[test]
fn the_recorded_pod_annotation_wins_over_the_status_and_a_malformed_one_is_ignored() {
    let claim = |annotation: &str| -> CNClaim {
        serde_json::from_value(json!({
            "apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "CNClaim",
            "metadata": {"name": "claim", "uid": "u", "annotations": {"pool.matrixorigin.io/recorded-pod": annotation}},
            "spec": {"podName": "target", "selector": {}},
            "status": {"phase": "Bound", "store": {"podName": "source", "podUID": "source-uid"}}
        }))
        .unwrap()
    };
    let view = claim_view(&claim("target/target-uid")).unwrap();
    assert_eq!(view.recorded_pod_uid.as_deref(), Some("target-uid"));
    assert_eq!(view.recorded_pod_name.as_deref(), Some("target"));
    assert_eq!(view.status_pod_uid.as_deref(), Some("source-uid"), "the status still shows the source");
    for malformed in ["target", "/uid", "target/"] {
        let view = claim_view(&claim(malformed)).unwrap();
        assert_eq!(view.recorded_pod_uid.as_deref(), Some("source-uid"), "{malformed}");
        assert_eq!(view.recorded_pod_name.as_deref(), Some("source"), "{malformed}");
    }
}

#[test]
fn a_claim_without_cnpools_finalizer_says_so() {
    let mut claim = CNClaim::new("claim", Default::default());
    claim.metadata.uid = Some("u".into());
    claim.metadata.finalizers = Some(vec!["other/finalizer".into()]);
    let view = claim_view(&claim).unwrap();
    assert!(!view.has_finalizer);
    assert_eq!((view.pod_name, view.phase, view.recorded_pod_name), (None, None, None));
}

fn pool_with(drain: serde_json::Value) -> CNPool {
    serde_json::from_value(json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "CNPool",
        "metadata": {"name": "pool"},
        "spec": {
            "template": {"image": "matrixorigin/matrixone:1.2.0"},
            "strategy": {"scaleStrategy": {"maxIdle": 3, "maxPods": 8}, "drainStrategy": drain}
        }
    }))
    .unwrap()
}

#[test]
fn reads_a_pool_with_its_drain_settings_or_the_defaults() {
    let view =
        pool_view(&pool_with(json!({"timeout": "10m", "minDelay": "1s"})), "r1", DrainDefaults::default()).unwrap();
    assert_eq!((view.max_idle, view.max_pods), (3, Some(8)));
    assert_eq!((view.drain_timeout, view.min_delay), (Duration::from_secs(600), Duration::from_secs(1)));
    assert_eq!(view.current_revision, "r1");
    let defaults = pool_view(&pool_with(json!({})), "r1", DrainDefaults::default()).unwrap();
    assert_eq!(
        (defaults.drain_timeout, defaults.min_delay),
        (Duration::from_secs(300), Duration::from_secs(15)),
        "a Go-shaped template drains for the CNSet webhook's 5 minutes"
    );
}

#[test]
fn the_drain_timeout_is_the_strategys_then_the_templates_then_a_default_for_its_kind() {
    let with_template_timeout = |strategy: serde_json::Value, template: &str| {
        let mut pool = pool_with(strategy);
        pool.spec.template.as_mut().unwrap().scaling_config = Some(cnpool_api::cnset::ScalingConfig {
            store_drain_timeout: Some(cnpool_api::GoDuration(template.into())),
            ..Default::default()
        });
        pool_view(&pool, "r1", DrainDefaults::default())
    };
    assert_eq!(with_template_timeout(json!({}), "10m").unwrap().drain_timeout, Duration::from_secs(600));
    assert_eq!(with_template_timeout(json!({"timeout": "30s"}), "10m").unwrap().drain_timeout, Duration::from_secs(30));
    let error = with_template_timeout(json!({}), "ten minutes").unwrap_err();
    assert!(error.to_string().contains("spec.template.scalingConfig.storeDrainTimeout"), "{error}");
    let mut plain = pool_with(json!({}));
    plain.spec.template = None;
    plain.spec.pod_template = Some(Default::default());
    assert_eq!(
        pool_view(&plain, "r1", DrainDefaults::default()).unwrap().drain_timeout,
        Duration::from_secs(1800),
        "a plain pod template"
    );
}

#[test]
fn reads_a_pools_reclaim_timeout_and_names_the_field_when_it_is_malformed() {
    let with_reclaim = |timeout: &str| {
        let mut pool = pool_with(json!({}));
        pool.spec.strategy.update_strategy =
            Some(cnpool_api::UpdateStrategy { reclaim_timeout: Some(cnpool_api::GoDuration(timeout.into())) });
        pool_view(&pool, "r1", DrainDefaults::default())
    };
    assert_eq!(with_reclaim("24h").unwrap().reclaim_timeout, Some(Duration::from_secs(24 * 3600)));
    assert_eq!(
        pool_view(&pool_with(json!({})), "r1", DrainDefaults::default()).unwrap().reclaim_timeout,
        None,
        "no limit by default"
    );
    let error = with_reclaim("a day").unwrap_err();
    assert!(error.to_string().contains("spec.strategy.updateStrategy.reclaimTimeout"), "{error}");
}

#[test]
fn an_outdated_claim_is_outdated_since_its_conditions_transition_while_it_is_true() {
    let claim = |status: &str| -> CNClaim {
        serde_json::from_value(json!({
            "apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "CNClaim",
            "metadata": {"name": "claim", "uid": "u"},
            "spec": {"podName": "p", "selector": {}},
            "status": {"phase": "Outdated", "conditions": [{
                "type": "Outdated", "status": status, "reason": "OldTemplate", "message": "",
                "lastTransitionTime": "2026-05-14T18:01:00Z"
            }]}
        }))
        .unwrap()
    };
    assert_eq!(claim_view(&claim("True")).unwrap().outdated_since, Some("2026-05-14T18:01:00Z".parse().unwrap()));
    assert_eq!(claim_view(&claim("False")).unwrap().outdated_since, None);
}

#[test]
fn a_malformed_drain_duration_names_the_field() {
    let error = pool_view(&pool_with(json!({"minDelay": "soon"})), "r1", DrainDefaults::default()).unwrap_err();
    assert!(error.to_string().contains("spec.strategy.drainStrategy.minDelay"), "{error}");
}

#[test]
fn reads_a_store() {
    let store = CnStore {
        uuid: "u".into(),
        work_state: WorkState::Draining,
        labels: store_labels(&[("a", &["b"])]),
        ..Default::default()
    };
    assert_eq!(
        StoreView::from(&store),
        StoreView { uuid: "u".into(), work_state: WorkState::Draining, labels: store_labels(&[("a", &["b"])]) }
    );
}
