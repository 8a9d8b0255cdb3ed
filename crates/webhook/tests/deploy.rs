//! deploy/webhook/validating-webhook.yaml keeps the promises docs/webhook.md
//! makes: an operator outage never blocks an UPDATE (finalizer removal, the
//! kubelet), pods are reviewed only when they are pool pods, and every
//! webhook calls a path the router serves for the kind its rule names.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use cnpool_webhook::{CLAIM_SETS_PATH, CLAIMS_PATH, PODS_PATH, POOLS_PATH};
use k8s_openapi::api::admissionregistration::v1::{ValidatingWebhook, ValidatingWebhookConfiguration};

fn webhooks() -> Vec<ValidatingWebhook> {
    let yaml = include_str!("../../../deploy/webhook/validating-webhook.yaml");
    let configuration: ValidatingWebhookConfiguration = serde_saphyr::from_str(yaml).unwrap();
    configuration.webhooks.unwrap()
}

fn operations(webhook: &ValidatingWebhook) -> Vec<String> {
    webhook.rules.iter().flatten().flat_map(|rule| rule.operations.clone().unwrap_or_default()).collect()
}

#[test]
fn updates_fail_open_and_only_creates_fail_closed() {
    for webhook in webhooks() {
        let operations = operations(&webhook);
        let policy = webhook.failure_policy.as_deref().unwrap();
        if operations.iter().any(|operation| operation != "CREATE") {
            assert_eq!(policy, "Ignore", "{}: {operations:?} must not be blocked by an outage", webhook.name);
        } else {
            assert_eq!(policy, "Fail", "{}: creates are refused while nobody can validate them", webhook.name);
        }
        assert!(!operations.iter().any(|operation| operation == "DELETE" || operation == "*"), "{}", webhook.name);
    }
}

#[test]
fn only_updates_of_pool_pods_themselves_are_reviewed() {
    let pod_webhooks: Vec<_> = webhooks()
        .into_iter()
        .filter(|webhook| webhook.rules.iter().flatten().any(|rule| rule.api_groups == Some(vec![String::new()])))
        .collect();
    assert_eq!(pod_webhooks.len(), 1);
    let webhook = &pod_webhooks[0];
    let rule = &webhook.rules.as_ref().unwrap()[0];
    // `pods` only: not pods/status, so the kubelet's updates never reach it.
    assert_eq!(rule.resources, Some(vec!["pods".to_string()]));
    assert_eq!(operations(webhook), ["UPDATE"]);
    let selector = webhook.object_selector.as_ref().unwrap().match_expressions.as_ref().unwrap();
    assert_eq!(selector.len(), 1);
    assert_eq!((selector[0].key.as_str(), selector[0].operator.as_str()), ("pool.matrixorigin.io/pool-name", "Exists"));
}

#[test]
fn every_webhook_calls_the_path_of_the_resource_it_reviews() {
    let expected =
        [("pods", PODS_PATH), ("cnclaims", CLAIMS_PATH), ("cnclaimsets", CLAIM_SETS_PATH), ("cnpools", POOLS_PATH)];
    let webhooks = webhooks();
    for webhook in &webhooks {
        let service = webhook.client_config.service.as_ref().unwrap();
        assert_eq!((service.namespace.as_str(), service.name.as_str()), ("cnpool-system", "cnpool-webhook"));
        let resources: Vec<String> =
            webhook.rules.iter().flatten().flat_map(|rule| rule.resources.clone().unwrap_or_default()).collect();
        assert_eq!(resources.len(), 1, "{}", webhook.name);
        let path = expected.iter().find(|(resource, _)| *resource == resources[0]).unwrap().1;
        assert_eq!(service.path.as_deref(), Some(path), "{}", webhook.name);
    }
    // Each CRD is reviewed on CREATE and UPDATE; pods on UPDATE only.
    let mut covered: Vec<(String, String)> = webhooks
        .iter()
        .flat_map(|webhook| {
            let resources: Vec<String> =
                webhook.rules.iter().flatten().flat_map(|rule| rule.resources.clone().unwrap_or_default()).collect();
            let operations = operations(webhook);
            resources.into_iter().flat_map(move |resource| {
                operations.clone().into_iter().map(move |operation| (resource.clone(), operation))
            })
        })
        .collect();
    covered.sort();
    let pairs = |list: &[(&str, &str)]| list.iter().map(|(r, o)| (r.to_string(), o.to_string())).collect::<Vec<_>>();
    assert_eq!(
        covered,
        pairs(&[
            ("cnclaims", "CREATE"),
            ("cnclaims", "UPDATE"),
            ("cnclaimsets", "CREATE"),
            ("cnclaimsets", "UPDATE"),
            ("cnpools", "CREATE"),
            ("cnpools", "UPDATE"),
            ("pods", "UPDATE"),
        ])
    );
}
