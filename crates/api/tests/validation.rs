//! Each validation rule, with the message a user sees from `kubectl apply`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeMap;

use cnpool_api::cnset::Overlay;
use cnpool_api::validation::{FieldError, Invalid, validate_claim_set_spec, validate_claim_spec, validate_pool_spec};
use cnpool_api::{
    CNClaimSetSpec, CNClaimSpec, CNClaimTemplate, CNLabel, CNPoolSpec, CNSetTemplate, EmbeddedMetadata, GoDuration,
    PodRef,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};
use serde_json::json;

fn pool_selector() -> LabelSelector {
    LabelSelector { match_labels: Some(BTreeMap::from([("pool".into(), "default".into())])), ..Default::default() }
}

fn claim() -> CNClaimSpec {
    CNClaimSpec {
        selector: pool_selector(),
        cn_labels: vec![CNLabel { key: "role".into(), values: vec!["test".into()] }],
        ..Default::default()
    }
}

fn pool() -> CNPoolSpec {
    let mut spec = CNPoolSpec {
        template: Some(CNSetTemplate { image: "matrixorigin/matrixone:1.2.0".into(), ..Default::default() }),
        ..Default::default()
    };
    spec.strategy.scale_strategy.max_idle = 2;
    spec.strategy.scale_strategy.max_pods = Some(10);
    spec
}

/// The one error of a result that must have exactly one.
fn only_error(result: Result<(), Invalid>) -> FieldError {
    let Invalid(errors) = result.expect_err("the spec must be refused");
    assert_eq!(errors.len(), 1, "{errors:#?}");
    errors.into_iter().next().expect("one error")
}

fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(ToString::to_string).collect()),
        }]),
        ..Default::default()
    }
}

#[test]
fn valid_specs_pass() {
    assert_eq!(validate_claim_spec(&claim()), Ok(()));
    assert_eq!(validate_pool_spec(&pool()), Ok(()));
    let set =
        CNClaimSetSpec { replicas: 2, template: CNClaimTemplate { metadata: None, spec: claim() }, selector: None };
    assert_eq!(validate_claim_set_spec(&set), Ok(()));
}

#[test]
fn max_pods_below_max_idle_names_both_and_the_fix() {
    let mut spec = pool();
    spec.strategy.scale_strategy.max_pods = Some(1);
    let error = only_error(validate_pool_spec(&spec));
    assert_eq!(
        error.to_string(),
        "spec.strategy.scaleStrategy.maxPods: 1 is less than maxIdle (2); \
         set maxPods to at least maxIdle, lower maxIdle, or remove maxPods for no limit"
    );
}

#[test]
fn max_pods_unset_means_unlimited_and_equal_to_max_idle_is_fine() {
    let mut spec = pool();
    spec.strategy.scale_strategy.max_pods = None;
    assert_eq!(validate_pool_spec(&spec), Ok(()));
    spec.strategy.scale_strategy.max_pods = Some(2);
    assert_eq!(validate_pool_spec(&spec), Ok(()));
}

#[test]
fn negative_max_idle_is_refused() {
    let mut spec = pool();
    spec.strategy.scale_strategy.max_idle = -1;
    spec.strategy.scale_strategy.max_pods = None;
    let error = only_error(validate_pool_spec(&spec));
    assert_eq!(error.field, "spec.strategy.scaleStrategy.maxIdle");
    assert_eq!(error.to_string(), "spec.strategy.scaleStrategy.maxIdle: -1 is negative; set maxIdle to 0 or more");
}

#[test]
fn negative_replicas_are_refused() {
    let set =
        CNClaimSetSpec { replicas: -3, template: CNClaimTemplate { metadata: None, spec: claim() }, selector: None };
    assert_eq!(
        only_error(validate_claim_set_spec(&set)).to_string(),
        "spec.replicas: -3 is negative; set replicas to 0 or more"
    );
}

#[test]
fn reserved_prefixes_are_refused_in_additional_pod_labels() {
    for key in ["pool.matrixorigin.io/claim-uid", "matrixorigin.io/owner", "matrixone.cloud/cn-uuid"] {
        let mut spec = claim();
        spec.additional_pod_labels.insert(key.into(), "forged".into());
        let error = only_error(validate_claim_spec(&spec));
        assert_eq!(error.field, format!("spec.additionalPodLabels[{key}]"));
        assert_eq!(
            error.to_string(),
            format!(
                "spec.additionalPodLabels[{key}]: uses a prefix reserved for the operator's ownership and pool labels; \
                 choose a key outside pool.matrixorigin.io/, matrixorigin.io/, matrixone.cloud/"
            )
        );
    }
}

#[test]
fn reserved_prefixes_are_refused_in_pool_pod_labels() {
    let mut spec = pool();
    spec.pod_labels.insert("pool.matrixorigin.io/phase".into(), "Idle".into());
    assert_eq!(only_error(validate_pool_spec(&spec)).field, "spec.podLabels[pool.matrixorigin.io/phase]");
}

#[test]
fn illegal_label_keys_name_the_rule() {
    let cases = [
        ("-starts-with-dash", "key name `-starts-with-dash` is not a valid label name"),
        ("Example.COM/x", "key prefix `Example.COM` is not a DNS subdomain"),
        ("example.com/", "key name `` is not a valid label name"),
        (&"k".repeat(64), "is not a valid label name"),
    ];
    for (key, problem) in cases {
        let mut spec = claim();
        spec.additional_pod_labels.insert(key.to_string(), "v".into());
        let error = only_error(validate_claim_spec(&spec));
        assert!(error.problem.contains(problem), "{key}: {error}");
        assert!(!error.fix.is_empty());
    }
}

#[test]
fn illegal_label_values_are_refused_and_empty_values_allowed() {
    let mut spec = claim();
    spec.additional_pod_labels.insert("tier".into(), "".into());
    assert_eq!(validate_claim_spec(&spec), Ok(()));
    spec.additional_pod_labels.insert("tier".into(), "gold tier".into());
    assert_eq!(
        only_error(validate_claim_spec(&spec)).to_string(),
        "spec.additionalPodLabels[tier]: value `gold tier` is not a valid label value; use at most 63 characters of \
         a-z, A-Z, 0-9, '-', '_' and '.', starting and ending with a letter or digit, or leave it empty"
    );
}

#[test]
fn owner_and_pool_names_must_fit_in_a_label_value() {
    let mut spec = claim();
    spec.owner_name = Some("has space".into());
    assert_eq!(only_error(validate_claim_spec(&spec)).field, "spec.ownerName");
    let mut spec = claim();
    spec.pool_name = "x".repeat(64);
    assert_eq!(only_error(validate_claim_spec(&spec)).field, "spec.poolName");
}

#[test]
fn selector_operators_and_values_are_checked() {
    let values = "spec.selector.matchExpressions[0].values";
    let cases = [
        (expression("zone", "In", &[]), values, "needs at least one value", "list the values"),
        (expression("zone", "NotIn", &[]), values, "needs at least one value", "list the values"),
        (expression("zone", "Exists", &["a"]), values, "must be empty", "remove the values"),
        (
            expression("zone", "Like", &["a"]),
            "spec.selector.matchExpressions[0].operator",
            "`Like` is not an operator",
            "use one of In, NotIn, Exists, DoesNotExist",
        ),
        (
            expression("bad key!", "Exists", &[]),
            "spec.selector.matchExpressions[0].key",
            "not a valid label name",
            "at most 63 characters",
        ),
        (
            expression("zone", "NotIn", &["a b"]),
            "spec.selector.matchExpressions[0].values[0]",
            "not a valid label value",
            "or leave it empty",
        ),
    ];
    for (selector, field, problem, fix) in cases {
        let spec = CNClaimSpec { selector, ..claim() };
        let error = only_error(validate_claim_spec(&spec));
        assert_eq!(error.field, field);
        assert!(error.problem.contains(problem), "{error}");
        assert!(error.fix.contains(fix), "{error}");
    }
    for operator in ["Exists", "DoesNotExist"] {
        let spec = CNClaimSpec { selector: expression("zone", operator, &[]), ..claim() };
        assert_eq!(validate_claim_spec(&spec), Ok(()));
    }
}

#[test]
fn match_labels_are_checked_like_labels() {
    let mut spec = claim();
    spec.selector.match_labels = Some(BTreeMap::from([("pool".into(), "not valid".into())]));
    assert_eq!(only_error(validate_claim_spec(&spec)).field, "spec.selector.matchLabels[pool]");
}

#[test]
fn a_claim_set_selector_must_match_its_template() {
    let metadata = EmbeddedMetadata { labels: BTreeMap::from([("app".into(), "a".into())]), ..Default::default() };
    let mut set = CNClaimSetSpec {
        replicas: 1,
        template: CNClaimTemplate { metadata: Some(metadata), spec: claim() },
        selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("app".into(), "b".into())])),
            ..Default::default()
        }),
    };
    let error = only_error(validate_claim_set_spec(&set));
    assert_eq!(error.field, "spec.selector");
    assert!(error.problem.contains("does not match spec.template.metadata.labels"), "{error}");
    set.selector =
        Some(LabelSelector { match_labels: Some(BTreeMap::from([("app".into(), "a".into())])), ..Default::default() });
    assert_eq!(validate_claim_set_spec(&set), Ok(()));
    set.selector = Some(expression("app", "In", &["a", "b"]));
    assert_eq!(validate_claim_set_spec(&set), Ok(()));
    // A selector that cannot be read is reported once, where it is wrong.
    set.selector = Some(expression("app", "Like", &["a"]));
    assert_eq!(only_error(validate_claim_set_spec(&set)).field, "spec.selector.matchExpressions[0].operator");
}

#[test]
fn claim_set_template_errors_point_into_the_template() {
    let mut spec = claim();
    spec.additional_pod_labels.insert("matrixorigin.io/owner".into(), "x".into());
    let set = CNClaimSetSpec { replicas: 1, template: CNClaimTemplate { metadata: None, spec }, selector: None };
    assert_eq!(
        only_error(validate_claim_set_spec(&set)).field,
        "spec.template.spec.additionalPodLabels[matrixorigin.io/owner]"
    );
}

#[test]
fn empty_cn_label_keys_and_source_pods_are_refused() {
    let mut spec = claim();
    spec.cn_labels.push(CNLabel { key: String::new(), values: vec!["x".into()] });
    assert_eq!(only_error(validate_claim_spec(&spec)).field, "spec.cnLabels[1].key");
    let mut spec = claim();
    spec.source_pod = Some(PodRef::default());
    assert_eq!(only_error(validate_claim_spec(&spec)).field, "spec.sourcePod.podName");
}

#[test]
fn durations_and_hakeeper_endpoints_are_checked() {
    let mut spec = pool();
    spec.strategy.drain_strategy = Some(cnpool_api::DrainStrategy {
        timeout: Some(GoDuration::new("10 minutes")),
        min_delay: Some(GoDuration::new("15s")),
    });
    let error = only_error(validate_pool_spec(&spec));
    assert_eq!(error.field, "spec.strategy.drainStrategy.timeout");
    assert!(error.problem.contains("`10 minutes` is not a duration"), "{error}");

    let mut spec = pool();
    spec.deps = Some(cnpool_api::PoolDeps {
        external_log_set: Some(cnpool_api::ExternalLogSet {
            ha_keeper_endpoint: "mo-log-discovery".into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let error = only_error(validate_pool_spec(&spec));
    assert_eq!(error.field, "spec.deps.externalLogSet.haKeeperEndpoint");
    assert!(error.fix.contains("32001"), "{error}");
}

#[test]
fn every_error_of_an_object_is_reported_at_once() {
    let mut spec = pool();
    spec.strategy.scale_strategy.max_idle = -1;
    spec.strategy.scale_strategy.max_pods = Some(-2);
    spec.pod_labels.insert("bad key".into(), "v".into());
    let Invalid(errors) = validate_pool_spec(&spec).expect_err("refused");
    let fields: Vec<_> = errors.iter().map(|error| error.field.as_str()).collect();
    assert_eq!(
        fields,
        ["spec.podLabels[bad key]", "spec.strategy.scaleStrategy.maxIdle", "spec.strategy.scaleStrategy.maxPods"]
    );
}

#[test]
fn owner_keys_are_refused_in_claim_set_and_pool_templates() {
    let metadata = EmbeddedMetadata {
        labels: BTreeMap::from([("pool.matrixorigin.io/claim-uid".into(), "uid-of-another".into())]),
        ..Default::default()
    };
    let set = CNClaimSetSpec {
        replicas: 1,
        template: CNClaimTemplate { metadata: Some(metadata), spec: claim() },
        selector: None,
    };
    let error = only_error(validate_claim_set_spec(&set));
    assert_eq!(error.field, "spec.template.metadata.labels[pool.matrixorigin.io/claim-uid]");
    assert!(error.fix.contains("pool.matrixorigin.io/"), "{error}");

    let mut spec = pool();
    let forged = BTreeMap::from([("pool.matrixorigin.io/phase".into(), "Bound".into()), ("app".into(), "cn".into())]);
    spec.template = Some(CNSetTemplate {
        image: "matrixorigin/matrixone:1.2.0".into(),
        overlay: Some(Overlay { pod_labels: Some(forged.clone()), ..Default::default() }),
        ..Default::default()
    });
    assert_eq!(
        only_error(validate_pool_spec(&spec)).field,
        "spec.template.overlay.podLabels[pool.matrixorigin.io/phase]"
    );
    spec.template = None;
    spec.pod_template = Some(PodTemplateSpec {
        metadata: Some(ObjectMeta { labels: Some(forged), ..Default::default() }),
        ..Default::default()
    });
    assert_eq!(
        only_error(validate_pool_spec(&spec)).field,
        "spec.podTemplate.metadata.labels[pool.matrixorigin.io/phase]"
    );
}

fn pool_from(json: serde_json::Value) -> CNPoolSpec {
    serde_json::from_value(json).expect("a pool spec")
}

#[test]
fn a_pool_sets_exactly_one_of_template_and_pod_template() {
    let go = json!({"image": "matrixorigin/matrixone:1.2.0"});
    let plain = json!({"spec": {"containers": [{"name": "cn", "image": "matrixorigin/matrixone:1.2.0"}]}});
    assert_eq!(validate_pool_spec(&pool_from(json!({"template": go}))), Ok(()));
    assert_eq!(validate_pool_spec(&pool_from(json!({"podTemplate": plain}))), Ok(()));

    let neither = only_error(validate_pool_spec(&pool_from(json!({}))));
    assert_eq!(neither.field, "spec.template");
    assert!(neither.fix.contains("spec.podTemplate"), "{neither}");

    let both = only_error(validate_pool_spec(&pool_from(json!({"template": go, "podTemplate": plain}))));
    assert_eq!(both.field, "spec.podTemplate");
    assert!(both.fix.contains("keep one"), "{both}");

    // A pool written for an earlier cnpool: its pod template under `template`.
    let moved = only_error(validate_pool_spec(&pool_from(json!({"template": plain}))));
    assert_eq!(moved.field, "spec.template");
    assert!(moved.fix.contains("move the pod template to spec.podTemplate"), "{moved}");

    let no_image = only_error(validate_pool_spec(&pool_from(json!({"template": {"resources": {}}}))));
    assert_eq!(no_image.field, "spec.template.image");
}

#[test]
fn a_log_set_is_named_by_its_metadata_or_the_older_name() {
    let with_log_set =
        |log_set: serde_json::Value| pool_from(json!({"template": {"image": "mo:1.2.0"}, "deps": {"logSet": log_set}}));
    let go = with_log_set(json!({"metadata": {"name": "mo", "namespace": "db"}, "spec": {"replicas": 3}}));
    assert_eq!(validate_pool_spec(&go), Ok(()));
    assert_eq!(go.deps.as_ref().and_then(|deps| deps.log_set_key("tenant")), Some(("db".into(), "mo".into())));
    let older = with_log_set(json!({"name": "mo"}));
    assert_eq!(validate_pool_spec(&older), Ok(()));
    assert_eq!(older.deps.as_ref().and_then(|deps| deps.log_set_key("tenant")), Some(("tenant".into(), "mo".into())));
    let unnamed = only_error(validate_pool_spec(&with_log_set(json!({"metadata": {"namespace": "db"}}))));
    assert_eq!(unnamed.field, "spec.deps.logSet.metadata.name");
}
