//! Spec validation of CNPool and CNClaimSet, with `cnpool_api::validation`.

use cnpool_api::validation::{Invalid, validate_claim_set_spec, validate_pool_spec};
use cnpool_api::{CNClaimSet, CNPool};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use serde::de::DeserializeOwned;

use crate::review::{Change, Refusal, Request, answer, change};

/// Refuses a CNPool whose spec is invalid; the message is the validation
/// text, one line per field, naming the field and the fix.
pub fn review_pool(request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    answer(request, spec_change(request, |pool: &CNPool| &pool.spec, validate_pool_spec))
}

/// Refuses a CNClaimSet whose spec is invalid, as [`review_pool`].
pub fn review_claim_set(request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    answer(request, spec_change(request, |set: &CNClaimSet| &set.spec, validate_claim_set_spec))
}

fn spec_change<K: DeserializeOwned, S>(
    request: &Request,
    spec: fn(&K) -> &S,
    validate: fn(&S) -> Result<(), Invalid>,
) -> Result<(), Refusal> {
    match change::<K>(request)? {
        Change::Create(new) => introduced_errors(validate, None, spec(&new)),
        Change::Update { old, new } => introduced_errors(validate, Some(spec(&old)), spec(&new)),
        Change::Other => Ok(()),
    }
}

/// The invalid fields of `new` that `old` did not already have. An UPDATE is
/// judged only on what it breaks: an object stored before the webhook
/// existed (or while it was down) can still get its finalizer removed, its
/// status recorded by the operator, or other fields fixed.
pub(crate) fn introduced_errors<S>(
    validate: fn(&S) -> Result<(), Invalid>,
    old: Option<&S>,
    new: &S,
) -> Result<(), Refusal> {
    let Err(Invalid(mut errors)) = validate(new) else { return Ok(()) };
    if let Some(Err(Invalid(before))) = old.map(validate) {
        errors.retain(|error| !before.contains(error));
    }
    if errors.is_empty() { Ok(()) } else { Err(Refusal::Invalid(Invalid(errors).to_string())) }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::review::tests::{assert_allowed, assert_refused, request};

    fn pool(scale: Value) -> Value {
        json!({"apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "CNPool",
               "metadata": {"name": "pool-a", "namespace": "ns"},
               "spec": {"template": {"image": "matrixorigin/matrixone:1.2.0"},
                        "strategy": {"scaleStrategy": scale}}})
    }

    fn claim_set(replicas: i64, selector: Value) -> Value {
        json!({"apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "CNClaimSet",
               "metadata": {"name": "set", "namespace": "ns"},
               "spec": {"replicas": replicas, "selector": selector,
                        "template": {"metadata": {"labels": {"app": "tenant"}}, "spec": {"selector": {}}}}})
    }

    // The message is FieldError's "{field}: {problem}; {fix}" with the
    // maxPods < maxIdle case of validate_pool_spec.
    const MAX_PODS_BELOW_MAX_IDLE: &str = "spec.strategy.scaleStrategy.maxPods: 1 is less than maxIdle (3); set \
                                           maxPods to at least maxIdle, lower maxIdle, or remove maxPods for no limit";

    #[test]
    fn a_pool_with_fewer_max_pods_than_max_idle_is_refused_naming_the_field() {
        let created = request("CNPool", "CREATE", "pool-a", Some(pool(json!({"maxIdle": 3, "maxPods": 1}))), None, "u");
        assert_refused(&review_pool(&created), 422, MAX_PODS_BELOW_MAX_IDLE);

        let good = pool(json!({"maxIdle": 3, "maxPods": 5}));
        let bad = pool(json!({"maxIdle": 3, "maxPods": 1}));
        let updated = request("CNPool", "UPDATE", "pool-a", Some(bad), Some(good), "u");
        assert_refused(&review_pool(&updated), 422, MAX_PODS_BELOW_MAX_IDLE);
    }

    #[test]
    fn a_valid_pool_is_allowed() {
        let created = request("CNPool", "CREATE", "pool-a", Some(pool(json!({"maxIdle": 3, "maxPods": 3}))), None, "u");
        assert_allowed(&review_pool(&created));
    }

    #[test]
    fn an_update_is_judged_only_on_the_invalid_fields_it_introduces() {
        let stored_invalid = pool(json!({"maxIdle": 3, "maxPods": 1}));
        let mut finalizer_removed = stored_invalid.clone();
        finalizer_removed["metadata"]["finalizers"] = json!([]);
        let update = request("CNPool", "UPDATE", "pool-a", Some(finalizer_removed), Some(stored_invalid.clone()), "u");
        assert_allowed(&review_pool(&update));

        let mut worse = stored_invalid.clone();
        worse["spec"]["podLabels"] = json!({"pool.matrixorigin.io/claim-uid": "x"});
        let update = request("CNPool", "UPDATE", "pool-a", Some(worse), Some(stored_invalid), "u");
        assert_refused(
            &review_pool(&update),
            422,
            "spec.podLabels[pool.matrixorigin.io/claim-uid]: uses a prefix reserved for the operator's ownership and \
             pool labels; choose a key outside pool.matrixorigin.io/, matrixorigin.io/, matrixone.cloud/",
        );
    }

    #[test]
    fn a_claim_set_is_refused_with_every_invalid_field_one_per_line() {
        let set = claim_set(-1, json!({"matchLabels": {"app": "other"}}));
        let created = request("CNClaimSet", "CREATE", "set", Some(set), None, "u");
        assert_refused(
            &review_claim_set(&created),
            422,
            "spec.replicas: -1 is negative; set replicas to 0 or more\n\
             spec.selector: does not match spec.template.metadata.labels, so the set would never see the claims it \
             creates; make the selector match the template's labels, or leave the selector out",
        );
    }

    #[test]
    fn a_valid_claim_set_is_allowed() {
        let set = claim_set(2, json!({"matchLabels": {"app": "tenant"}}));
        assert_allowed(&review_claim_set(&request("CNClaimSet", "CREATE", "set", Some(set), None, "u")));
    }

    #[test]
    fn an_object_that_is_not_the_kind_expected_is_refused_as_unreadable() {
        // Every field of a CNPool's spec is optional: an object of another
        // kind is unreadable when its spec has another type.
        let not_a_pool = json!({"apiVersion": "v1", "kind": "List", "metadata": {"name": "p"}, "spec": "a list"});
        let response = review_pool(&request("CNPool", "CREATE", "p", Some(not_a_pool), None, "u"));
        assert!(!response.allowed);
        assert_eq!(response.result.code, 400);
        assert!(
            response.result.message.starts_with("request.object: not a readable CNPool ("),
            "{:?}",
            response.result
        );
    }
}
