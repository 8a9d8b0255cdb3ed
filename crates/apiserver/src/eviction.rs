//! The eviction subresource of pods (`POST pods/{name}/eviction`), as
//! kube-apiserver 1.20 answers it: a pod selected by no PodDisruptionBudget
//! is deleted; a pod selected by one is deleted only when the budget's
//! status allows a disruption, which then takes one from it; otherwise 429.
//! A budget whose status has not been computed for its current generation
//! (no disruption controller has run, as here and in a cluster without
//! kube-controller-manager) refuses every eviction it selects. A terminal
//! pod (Succeeded or Failed) is deleted whatever the budgets say.

use serde_json::{Value, json};

use crate::error::ApiError;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{Part, Store, Target, WriteOptions};

const REFUSED: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// Checks the budgets of the namespace against `pod` and, when one selects
/// it and allows a disruption, takes that disruption (not on a `dry_run`).
/// `Ok` means the pod may be deleted.
pub fn admit(store: &Store, namespace: &str, pod: &Value, dry_run: bool) -> Result<(), ApiError> {
    if matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed")) {
        return Ok(());
    }
    let Some(budgets) = store.lookup("policy", "v1", "poddisruptionbudgets") else { return Ok(()) };
    let target = Target { resource: &budgets, namespace: Some(namespace) };
    let listed = store.list(&target, &LabelSelector::default(), &FieldSelector::default(), None, None)?;
    let mut selecting = Vec::new();
    for budget in listed["items"].as_array().into_iter().flatten() {
        // A budget without a selector, or with an empty one, selects nothing.
        let selector = &budget["spec"]["selector"];
        let empty = selector.get("matchLabels").and_then(Value::as_object).is_none_or(|m| m.is_empty())
            && selector.get("matchExpressions").and_then(Value::as_array).is_none_or(|e| e.is_empty());
        if !empty && LabelSelector::from_object(selector)?.matches(pod) {
            selecting.push(budget);
        }
    }
    let budget = match selecting.as_slice() {
        [] => return Ok(()),
        [one] => *one,
        _ => {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
    };
    let name = budget["metadata"]["name"].as_str().unwrap_or_default();
    let status = &budget["status"];
    let observed = status["observedGeneration"].as_i64().unwrap_or(0);
    if observed < budget["metadata"]["generation"].as_i64().unwrap_or(0) {
        return Err(ApiError::too_many_requests(REFUSED).with_cause(
            "DisruptionBudget",
            format!("The disruption budget {name} is still being processed by the server."),
        ));
    }
    let allowed = status["disruptionsAllowed"].as_i64().unwrap_or(0);
    if allowed <= 0 {
        let (desired, current) =
            (status["desiredHealthy"].as_i64().unwrap_or(0), status["currentHealthy"].as_i64().unwrap_or(0));
        return Err(ApiError::too_many_requests(REFUSED).with_cause(
            "DisruptionBudget",
            format!("The disruption budget {name} needs {desired} healthy pods and has {current} currently"),
        ));
    }
    if dry_run {
        return Ok(());
    }
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let take =
        json!({"status": {"disruptionsAllowed": allowed - 1, "disruptedPods": {pod_name: store.now().to_string()}}});
    store.patch(
        &target,
        name,
        "application/merge-patch+json",
        take.to_string().as_bytes(),
        Part::Status,
        WriteOptions::default(),
    )?;
    Ok(())
}

/// What a successful eviction answers.
pub fn evicted() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}
