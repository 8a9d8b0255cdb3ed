//! CNClaim: a valid spec, and `spec.podName` (with the operator's record of
//! the pod held) changes only as the binding protocol defines them (DESIGN §2).

use cnpool_api::validation::validate_claim_spec;
use cnpool_api::{CNClaim, ClaimPhase, labels};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};

use crate::review::{Change, Refusal, Request, answer, change};
use crate::specs::introduced_errors;

/// Who the operator is, as the apiserver names the user of a request: the
/// only user who may set a claim's `spec.podName` from empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorIdentity {
    username: String,
}

impl OperatorIdentity {
    /// The operator authenticated as some other user (e.g. a kubeconfig of
    /// its own outside the cluster).
    pub fn username(username: impl Into<String>) -> Self {
        Self { username: username.into() }
    }

    /// The operator running under ServiceAccount `namespace/name`, which the
    /// apiserver names `system:serviceaccount:<namespace>:<name>`.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        Self::username(format!("system:serviceaccount:{namespace}:{name}"))
    }
}

/// Judges a CNClaim CREATE or UPDATE.
///
/// CREATE: the spec must be valid; a `spec.podName` given at creation is a
/// pre-bound request and allowed.
///
/// UPDATE: the spec must not become invalid, and `spec.podName` may change
/// only
/// - from empty to a pod, by the operator ([`OperatorIdentity`]): it binds;
/// - to empty when the claim is Lost (it will be bound again), or together
///   with `spec.sourcePod` naming the old pod (a migration whose target the
///   operator chooses);
/// - to another pod together with `spec.sourcePod` naming the old pod (a
///   migration to that target);
/// - back to `spec.sourcePod` while removing it (a refused or cancelled
///   migration).
///
/// No new migration starts while one is under way, and `spec.sourcePod` is
/// never set without the podName change that starts the migration. The
/// `pool.matrixorigin.io/recorded-pod` annotation, the operator's record of
/// the pod the claim holds, is changed by the operator alone.
pub fn review_claim(operator: &OperatorIdentity, request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    answer(request, claim_change(operator, request))
}

fn claim_change(operator: &OperatorIdentity, request: &Request) -> Result<(), Refusal> {
    match change::<CNClaim>(request)? {
        Change::Create(new) => introduced_errors(validate_claim_spec, None, &new.spec),
        Change::Update { old, new } => {
            introduced_errors(validate_claim_spec, Some(&old.spec), &new.spec)?;
            let username = request.user_info.username.as_deref().unwrap_or_default();
            recorded_pod_change(operator, username, &old, &new).map_err(Refusal::Forbidden)?;
            pod_name_change(operator, username, &old, &new).map_err(Refusal::Forbidden)
        }
        Change::Other => Ok(()),
    }
}

fn source(claim: &CNClaim) -> Option<&str> {
    claim.spec.source_pod.as_ref().map(|source| source.pod_name.as_str()).filter(|name| !name.is_empty())
}

fn recorded_pod(claim: &CNClaim) -> Option<&String> {
    claim.metadata.annotations.as_ref().and_then(|annotations| annotations.get(labels::RECORDED_POD))
}

/// The operator's record of the pod a claim holds is the operator's alone.
fn recorded_pod_change(
    operator: &OperatorIdentity,
    username: &str,
    old: &CNClaim,
    new: &CNClaim,
) -> Result<(), String> {
    if recorded_pod(old) == recorded_pod(new) || username == operator.username {
        return Ok(());
    }
    Err(format!(
        "metadata.annotations[{key}]: only the operator ({operator}) writes it, not user \"{username}\"; it records \
         which pod the claim holds: leave it as it is (to move the claim, migrate it with spec.sourcePod)",
        key = labels::RECORDED_POD,
        operator = operator.username,
    ))
}

fn pod_name_change(operator: &OperatorIdentity, username: &str, old: &CNClaim, new: &CNClaim) -> Result<(), String> {
    let (from, to) = (old.spec.pod_name.as_str(), new.spec.pod_name.as_str());
    let (old_source, new_source) = (source(old), source(new));
    // Starting a migration: sourcePod newly names the pod podName leaves.
    let starts_migration = old_source.is_none() && new_source == Some(from);

    if from == to {
        return match new_source {
            Some(source) if new_source != old_source => Err(format!(
                "spec.sourcePod.podName: set to \"{source}\" while spec.podName stays \"{from}\"; a migration changes \
                 both in one write: spec.sourcePod.podName to the current pod and spec.podName to the target (or \
                 empty to let the operator choose)"
            )),
            _ => Ok(()),
        };
    }
    if from.is_empty() {
        return if username == operator.username {
            Ok(())
        } else {
            Err(format!(
                "spec.podName: only the operator ({operator}) sets it from empty, not user \"{username}\"; to ask \
                 for a particular pod, create the claim with spec.podName set; to move a bound claim, migrate it \
                 with spec.sourcePod",
                operator = operator.username,
            ))
        };
    }
    if let Some(source) = old_source {
        // A refused or cancelled migration returns to its source.
        if to == source && new_source.is_none() {
            return Ok(());
        }
        return Err(format!(
            "spec.podName: cannot change from \"{from}\" to \"{to}\" while the migration from \"{source}\" is under \
             way; wait until it completes (spec.sourcePod is removed), or cancel it by setting spec.podName back to \
             \"{source}\" and removing spec.sourcePod"
        ));
    }
    if starts_migration {
        return Ok(());
    }
    if to.is_empty() {
        if old.phase() == Some(ClaimPhase::Lost) {
            return Ok(());
        }
        let phase = old.phase().map_or("none yet", ClaimPhase::as_str);
        return Err(format!(
            "spec.podName: cannot be cleared while the claim holds \"{from}\" (phase {phase}); a claim gives up its \
             pod only when Lost or by migration: to move it, set spec.sourcePod.podName to \"{from}\" with \
             spec.podName the target or empty; to release it, delete the claim"
        ));
    }
    Err(format!(
        "spec.podName: cannot change from \"{from}\" to \"{to}\" without spec.sourcePod.podName \"{from}\"; a new \
         pod is a migration: set spec.sourcePod.podName to \"{from}\" in the same write, or put spec.podName back to \
         \"{from}\""
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::review::tests::{assert_allowed, assert_refused, request};

    const OPERATOR: &str = "system:serviceaccount:cnpool:cnpool";
    const USER: &str = "alice";

    fn operator() -> OperatorIdentity {
        OperatorIdentity::service_account("cnpool", "cnpool")
    }

    /// A claim with `podName`, `sourcePod` (None: absent) and `status.phase`.
    fn claim(pod_name: &str, source_pod: Option<&str>, phase: Option<&str>) -> Value {
        let mut claim = json!({"apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "CNClaim",
                               "metadata": {"name": "c", "namespace": "ns", "uid": "uid-c"},
                               "spec": {"podName": pod_name, "selector": {}, "poolName": "pool-a"}});
        if let Some(source) = source_pod {
            claim["spec"]["sourcePod"] = json!({"podName": source});
        }
        if let Some(phase) = phase {
            claim["status"] = json!({"phase": phase});
        }
        claim
    }

    fn update(old: Value, new: Value, username: &str) -> AdmissionResponse {
        review_claim(&operator(), &request("CNClaim", "UPDATE", "c", Some(new), Some(old), username))
    }

    #[test]
    fn a_claim_is_created_with_or_without_a_pre_bound_pod() {
        for pod_name in ["", "pool-a-3"] {
            let created = request("CNClaim", "CREATE", "c", Some(claim(pod_name, None, None)), None, USER);
            assert_allowed(&review_claim(&operator(), &created));
        }
    }

    #[test]
    fn an_invalid_claim_spec_is_refused_naming_the_field() {
        let mut bad = claim("", None, None);
        bad["spec"]["additionalPodLabels"] = json!({"matrixorigin.io/owner": "me"});
        let message = "spec.additionalPodLabels[matrixorigin.io/owner]: uses a prefix reserved for the operator's \
                       ownership and pool labels; choose a key outside pool.matrixorigin.io/, matrixorigin.io/, \
                       matrixone.cloud/";
        let created = request("CNClaim", "CREATE", "c", Some(bad.clone()), None, USER);
        assert_refused(&review_claim(&operator(), &created), 422, message);
        assert_refused(&update(claim("", None, None), bad, USER), 422, message);
    }

    #[test]
    fn only_the_operator_binds_a_claim_after_creation() {
        assert_allowed(&update(claim("", None, Some("Pending")), claim("pool-a-1", None, None), OPERATOR));
        assert_refused(
            &update(claim("", None, Some("Pending")), claim("pool-a-1", None, None), USER),
            403,
            "spec.podName: only the operator (system:serviceaccount:cnpool:cnpool) sets it from empty, not user \
             \"alice\"; to ask for a particular pod, create the claim with spec.podName set; to move a bound claim, \
             migrate it with spec.sourcePod",
        );
    }

    #[test]
    fn a_pod_name_change_without_source_pod_is_refused() {
        let message = "spec.podName: cannot change from \"pool-a-1\" to \"pool-a-2\" without spec.sourcePod.podName \
                       \"pool-a-1\"; a new pod is a migration: set spec.sourcePod.podName to \"pool-a-1\" in the same \
                       write, or put spec.podName back to \"pool-a-1\"";
        let bound = claim("pool-a-1", None, Some("Bound"));
        assert_refused(&update(bound.clone(), claim("pool-a-2", None, None), USER), 403, message);
        // The operator follows the protocol too: it rebinds through empty.
        assert_refused(&update(bound, claim("pool-a-2", None, None), OPERATOR), 403, message);
    }

    #[test]
    fn a_migration_starts_with_source_pod_naming_the_old_pod() {
        let bound = claim("pool-a-1", None, Some("Bound"));
        assert_allowed(&update(bound.clone(), claim("pool-a-2", Some("pool-a-1"), None), USER));
        // The operator chooses the target, then records it.
        assert_allowed(&update(bound.clone(), claim("", Some("pool-a-1"), None), USER));
        assert_allowed(&update(claim("", Some("pool-a-1"), None), claim("pool-a-4", Some("pool-a-1"), None), OPERATOR));
        assert_refused(
            &update(bound, claim("pool-a-2", Some("pool-a-9"), None), USER),
            403,
            "spec.podName: cannot change from \"pool-a-1\" to \"pool-a-2\" without spec.sourcePod.podName \
             \"pool-a-1\"; a new pod is a migration: set spec.sourcePod.podName to \"pool-a-1\" in the same write, \
             or put spec.podName back to \"pool-a-1\"",
        );
    }

    #[test]
    fn a_migration_completes_or_reverts_to_its_source_and_nothing_else_while_under_way() {
        let migrating = claim("pool-a-2", Some("pool-a-1"), Some("Bound"));
        // Completion: sourcePod removed, podName kept.
        assert_allowed(&update(migrating.clone(), claim("pool-a-2", None, None), OPERATOR));
        // Refused or cancelled: back to the source.
        assert_allowed(&update(migrating.clone(), claim("pool-a-1", None, None), OPERATOR));
        assert_allowed(&update(migrating.clone(), claim("pool-a-1", None, None), USER));
        let under_way = "spec.podName: cannot change from \"pool-a-2\" to \"pool-a-3\" while the migration from \
                         \"pool-a-1\" is under way; wait until it completes (spec.sourcePod is removed), or cancel it \
                         by setting spec.podName back to \"pool-a-1\" and removing spec.sourcePod";
        assert_refused(&update(migrating.clone(), claim("pool-a-3", Some("pool-a-1"), None), USER), 403, under_way);
        assert_refused(&update(migrating, claim("pool-a-3", Some("pool-a-2"), None), USER), 403, under_way);
    }

    #[test]
    fn pod_name_is_cleared_only_when_lost_or_to_migrate() {
        assert_allowed(&update(claim("pool-a-1", None, Some("Lost")), claim("", None, None), OPERATOR));
        assert_allowed(&update(claim("pool-a-1", None, Some("Lost")), claim("", None, None), USER));
        assert_refused(
            &update(claim("pool-a-1", None, Some("Bound")), claim("", None, None), USER),
            403,
            "spec.podName: cannot be cleared while the claim holds \"pool-a-1\" (phase Bound); a claim gives up its \
             pod only when Lost or by migration: to move it, set spec.sourcePod.podName to \"pool-a-1\" with \
             spec.podName the target or empty; to release it, delete the claim",
        );
        assert_refused(
            &update(claim("pool-a-1", None, None), claim("", None, None), USER),
            403,
            "spec.podName: cannot be cleared while the claim holds \"pool-a-1\" (phase none yet); a claim gives up \
             its pod only when Lost or by migration: to move it, set spec.sourcePod.podName to \"pool-a-1\" with \
             spec.podName the target or empty; to release it, delete the claim",
        );
    }

    #[test]
    fn source_pod_is_not_set_without_the_pod_name_change_that_starts_a_migration() {
        assert_refused(
            &update(claim("pool-a-1", None, Some("Bound")), claim("pool-a-1", Some("pool-a-1"), None), USER),
            403,
            "spec.sourcePod.podName: set to \"pool-a-1\" while spec.podName stays \"pool-a-1\"; a migration changes \
             both in one write: spec.sourcePod.podName to the current pod and spec.podName to the target (or empty \
             to let the operator choose)",
        );
    }

    #[test]
    fn only_the_operator_writes_the_recorded_pod_annotation() {
        let recorded = |value: Option<&str>| {
            let mut bound = claim("pool-a-1", None, Some("Bound"));
            if let Some(value) = value {
                bound["metadata"]["annotations"] = json!({"pool.matrixorigin.io/recorded-pod": value});
            }
            bound
        };
        let message = "metadata.annotations[pool.matrixorigin.io/recorded-pod]: only the operator \
                       (system:serviceaccount:cnpool:cnpool) writes it, not user \"alice\"; it records which pod the \
                       claim holds: leave it as it is (to move the claim, migrate it with spec.sourcePod)";
        let (held, other) = (recorded(Some("pool-a-1/uid-1")), recorded(Some("pool-a-2/uid-2")));
        assert_allowed(&update(recorded(None), held.clone(), OPERATOR));
        assert_allowed(&update(held.clone(), held.clone(), USER));
        assert_refused(&update(held.clone(), other, USER), 403, message);
        assert_refused(&update(held.clone(), recorded(None), USER), 403, message);
        assert_refused(&update(recorded(None), held, USER), 403, message);
    }

    #[test]
    fn updates_that_leave_pod_name_alone_are_allowed() {
        let bound = claim("pool-a-1", None, Some("Bound"));
        let mut finalizer_removed = bound.clone();
        finalizer_removed["metadata"]["finalizers"] = json!([]);
        assert_allowed(&update(bound.clone(), finalizer_removed, USER));
        let mut labelled = bound.clone();
        labelled["spec"]["cnLabels"] = json!([{"key": "account", "values": ["acme"]}]);
        assert_allowed(&update(bound, labelled, USER));
    }
}
