//! Pool pods: an owner never changes from one claim to another.

use cnpool_api::labels::{CLAIM_UID, CLAIMED_BY};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};

use crate::review::{Change, Refusal, Request, answer, change};

/// Refuses an UPDATE that changes a pod's [`CLAIM_UID`] or [`CLAIMED_BY`]
/// label from one non-empty value to another: the binding protocol changes
/// owners only by release (label removed) and a later acquire (label set),
/// and a direct hand-over would let two claims believe they hold the pod.
/// Setting, removing and keeping the labels, and everything else about
/// pods, is allowed.
pub fn review_pod(request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    answer(request, owner_change(request))
}

fn owner_change(request: &Request) -> Result<(), Refusal> {
    let Change::Update { old, new } = change::<DynamicObject>(request)? else { return Ok(()) };
    let label = |pod: &DynamicObject, key: &str| {
        pod.metadata.labels.as_ref().and_then(|labels| labels.get(key)).cloned().unwrap_or_default()
    };
    let refusals: Vec<String> = [CLAIM_UID, CLAIMED_BY]
        .into_iter()
        .filter_map(|key| {
            let (from, to) = (label(&old, key), label(&new, key));
            (!from.is_empty() && !to.is_empty() && from != to).then(|| {
                format!(
                    "metadata.labels[{key}]: cannot change from \"{from}\" to \"{to}\" on pod {pod}; a pod changes \
                     owner only by release then acquire: delete or migrate the claim that holds it, cnpool releases \
                     the pod, and another claim can acquire it once it is Idle again",
                    pod = request.name,
                )
            })
        })
        .collect();
    if refusals.is_empty() { Ok(()) } else { Err(Refusal::Forbidden(refusals.join("\n"))) }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::review::tests::{assert_allowed, assert_refused, request};

    fn pod(labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "pool-a-0", "namespace": "ns", "labels": labels},
               "spec": {"containers": [{"name": "cn", "image": "matrixone"}]}})
    }

    fn update(old: Value, new: Value) -> Request {
        request("Pod", "UPDATE", "pool-a-0", Some(pod(new)), Some(pod(old)), "system:node:n1")
    }

    #[test]
    fn moving_a_bound_pod_to_another_claim_is_refused_with_the_label_and_both_owners() {
        let old = json!({(CLAIMED_BY): "a", (CLAIM_UID): "uid-a", "pool.matrixorigin.io/pool-name": "p"});
        let new = json!({(CLAIMED_BY): "other", (CLAIM_UID): "uid-a", "pool.matrixorigin.io/pool-name": "p"});
        assert_refused(
            &review_pod(&update(old, new)),
            403,
            "metadata.labels[pool.matrixorigin.io/claimed-by]: cannot change from \"a\" to \"other\" on pod \
             pool-a-0; a pod changes owner only by release then acquire: delete or migrate the claim that holds it, \
             cnpool releases the pod, and another claim can acquire it once it is Idle again",
        );
    }

    #[test]
    fn both_owner_labels_changed_at_once_are_both_reported() {
        let old = json!({(CLAIMED_BY): "a", (CLAIM_UID): "uid-a"});
        let new = json!({(CLAIMED_BY): "b", (CLAIM_UID): "uid-b"});
        let response = review_pod(&update(old, new));
        assert!(!response.allowed);
        let lines: Vec<&str> = response.result.message.lines().collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with("metadata.labels[pool.matrixorigin.io/claim-uid]: cannot change from \"uid-a\""));
        assert!(lines[1].starts_with("metadata.labels[pool.matrixorigin.io/claimed-by]: cannot change from \"a\""));
    }

    #[test]
    fn acquire_release_and_legacy_adoption_are_allowed() {
        let idle = json!({"pool.matrixorigin.io/phase": "Idle"});
        let bound = json!({"pool.matrixorigin.io/phase": "Bound", (CLAIMED_BY): "a", (CLAIM_UID): "uid-a"});
        let draining = json!({"pool.matrixorigin.io/phase": "Draining"});
        let legacy = json!({"pool.matrixorigin.io/phase": "Bound", (CLAIMED_BY): "a"});
        let emptied = json!({(CLAIMED_BY): "", (CLAIM_UID): ""});
        assert_allowed(&review_pod(&update(idle, bound.clone())));
        assert_allowed(&review_pod(&update(bound.clone(), draining)));
        assert_allowed(&review_pod(&update(legacy, bound.clone())));
        assert_allowed(&review_pod(&update(bound.clone(), emptied)));
        assert_allowed(&review_pod(&update(bound.clone(), bound)));
    }

    #[test]
    fn other_label_changes_and_finalizer_removal_are_allowed() {
        let bound = json!({(CLAIMED_BY): "a", (CLAIM_UID): "uid-a"});
        let relabelled = json!({(CLAIMED_BY): "a", (CLAIM_UID): "uid-a", "team": "x"});
        assert_allowed(&review_pod(&update(bound.clone(), relabelled)));

        let mut with_finalizer = pod(bound.clone());
        with_finalizer["metadata"]["finalizers"] = json!(["matrixorigin.io/cn-draining"]);
        let finalizer_removed =
            request("Pod", "UPDATE", "pool-a-0", Some(pod(bound)), Some(with_finalizer), "system:serviceaccount:x:y");
        assert_allowed(&review_pod(&finalizer_removed));
    }

    #[test]
    fn creating_and_deleting_pods_is_not_judged() {
        let owned = pod(json!({(CLAIMED_BY): "a", (CLAIM_UID): "uid-a"}));
        assert_allowed(&review_pod(&request("Pod", "CREATE", "pool-a-0", Some(owned.clone()), None, "u")));
        assert_allowed(&review_pod(&request("Pod", "DELETE", "pool-a-0", None, Some(owned), "u")));
    }
}
