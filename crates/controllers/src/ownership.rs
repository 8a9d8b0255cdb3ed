//! The one place that writes a pod's `phase` and owner labels: the guarded
//! write of the binding protocol, whose transitions, their preconditions and
//! why two claims can never own one pod are stated in [`cnpool_core::claim`].
//!
//! Each transition is one JSON patch whose leading `test` operations pin
//! exactly what the decision read: the `phase`, `claim-uid` and `claimed-by`
//! labels, each tested against its value on the pod read, or against null
//! when the pod read lacked it (a `test` of null on an absent path succeeds
//! on the real API server). A pod read that does not meet the transition's
//! precondition sends nothing. If any pinned label changed since, the
//! server refuses the whole patch (422): the caller reads again and decides
//! again, and never retries the same write. Unrelated writes to the pod
//! (stats annotations, status) do not disturb the guard.

use std::collections::BTreeMap;

use cnpool_api::{PodPhase, labels};
use cnpool_core::binding::Binding;
use cnpool_core::claim::AfterRelease;
use cnpool_core::model::ClaimView;
use cnpool_core::store::PodTransition;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::error::{Error, is_not_found, is_stale};

/// A change of who owns a pod, or of its pool phase.
#[derive(Clone, Copy, Debug)]
pub enum Transition<'a> {
    /// Idle and unowned → Bound to `claim`, with its labels and binding.
    Acquire(&'a ClaimView),
    /// Bound by the Go operator to `claim` (by name) → also by its UID.
    AdoptLegacy(&'a ClaimView),
    /// Already `claim`'s → phase Bound, binding and additional labels as
    /// the claim's spec asks now.
    Rewrite(&'a ClaimView),
    /// `claim-uid` = this UID → unowned, Draining (or Terminating for a
    /// failed pod), with `last-owner` and `reclaimed-at`.
    Release { claim_uid: &'a str, then: AfterRelease },
    /// Bound by the Go operator to the claim named `claim_name` (by name
    /// only, no `claim-uid`) → released as [`Transition::Release`]. For a
    /// pod whose claim is confirmed gone.
    ReleaseLegacy { claim_name: &'a str, then: AfterRelease },
    /// A phase change of an unowned pod (register, recycle, terminate).
    Phase(PodTransition),
    /// Idle or Unknown and unowned → Terminating (scale-in, stale pods).
    Retire,
}

impl Transition<'_> {
    /// A name for logs and Events.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Acquire(_) => "Acquire",
            Self::AdoptLegacy(_) => "AdoptLegacy",
            Self::Rewrite(_) => "RewriteBinding",
            Self::Release { .. } => "Release",
            Self::ReleaseLegacy { .. } => "ReleaseLegacy",
            Self::Phase(PodTransition::Register) => "Register",
            Self::Phase(PodTransition::Recycle) => "Recycle",
            Self::Phase(PodTransition::Terminate(_)) => "Terminate",
            Self::Retire => "Retire",
        }
    }
}

/// What became of a transition.
#[derive(Debug)]
pub enum Outcome {
    /// Written; the pod as the server returned it.
    Applied(Box<Pod>),
    /// The guard failed or the pod is gone: the decision was stale.
    Stale,
    /// The pod read does not satisfy the transition's precondition; nothing
    /// was sent. (A caller bug or a decision made on another pod version.)
    NotApplicable,
}

/// Sends `transition` for `pod`, guarded by the labels of `pod` as read;
/// `now` stamps a release.
pub async fn transition(
    client: &kube::Client,
    pod: &Pod,
    transition: Transition<'_>,
    now: jiff::Timestamp,
) -> Result<Outcome, Error> {
    let Some(operations) = operations(pod, transition, now) else {
        return Ok(Outcome::NotApplicable);
    };
    let name = pod.metadata.name.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(operations))
        .map_err(|source| Error::Encode { what: "pod patch", source })?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    match pods.patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch)).await {
        Ok(written) => {
            let from = label(pod, labels::PHASE).unwrap_or("-");
            let to = label(&written, labels::PHASE).unwrap_or("-");
            tracing::info!(pod = %name, transition = transition.name(), from, to, "pod transition");
            Ok(Outcome::Applied(Box::new(written)))
        }
        Err(error) if is_stale(&error) || is_not_found(&error) => {
            tracing::debug!(pod = %name, transition = transition.name(), %error, "pod changed since it was read");
            Ok(Outcome::Stale)
        }
        Err(error) => Err(Error::kube("patch pod", format!("{namespace}/{name}"), error)),
    }
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// A JSON pointer to a label or annotation key.
fn pointer(map: &str, key: &str) -> String {
    format!("/metadata/{map}/{}", key.replace('~', "~0").replace('/', "~1"))
}

/// The patch's operations, guard first; `None` when the pod read does not
/// satisfy the transition's precondition. Public so that the model checker
/// (crates/check) applies the very patch the controllers send.
pub fn operations(pod: &Pod, transition: Transition<'_>, now: jiff::Timestamp) -> Option<Vec<Value>> {
    let phase = label(pod, labels::PHASE).and_then(PodPhase::parse);
    // An empty owner label owns nothing, as the cache's view reads it; the
    // `test`s below still pin the exact text read.
    let claim_uid = label(pod, labels::CLAIM_UID).filter(|uid| !uid.is_empty());
    let claimed_by = label(pod, labels::CLAIMED_BY).filter(|name| !name.is_empty());
    let owned = claim_uid.is_some() || claimed_by.is_some();
    let precondition = match transition {
        Transition::Acquire(_) => phase == Some(PodPhase::Idle) && !owned,
        Transition::AdoptLegacy(claim) => {
            phase == Some(PodPhase::Bound) && claim_uid.is_none() && claimed_by == Some(claim.name.as_str())
        }
        Transition::Rewrite(claim) => claim_uid == Some(claim.uid.as_str()),
        Transition::Release { claim_uid: uid, .. } => claim_uid == Some(uid),
        Transition::ReleaseLegacy { claim_name, .. } => claim_uid.is_none() && claimed_by == Some(claim_name),
        Transition::Phase(step) => phase == Some(step.from()) && !owned,
        Transition::Retire => matches!(phase, Some(PodPhase::Idle | PodPhase::Unknown)) && !owned,
    };
    if !precondition || pod.metadata.labels.is_none() {
        return None;
    }
    let mut ops: Vec<Value> = [labels::PHASE, labels::CLAIM_UID, labels::CLAIMED_BY]
        .into_iter()
        .map(|key| json!({"op": "test", "path": pointer("labels", key), "value": label(pod, key)}))
        .collect();
    #[cfg(feature = "sabotage")]
    if matches!(transition, Transition::Acquire(_))
        && crate::sabotage::active(crate::sabotage::Variant::UnguardedAcquire)
    {
        // The guard goes: the write lands whatever the pod says now.
        ops.clear();
    }
    let mut edit = Edit { pod, ops: &mut ops };
    match transition {
        Transition::Acquire(claim) | Transition::Rewrite(claim) => {
            edit.set_label(labels::PHASE, PodPhase::Bound.as_str());
            edit.set_label(labels::CLAIM_UID, &claim.uid);
            edit.set_label(labels::CLAIMED_BY, &claim.name);
            edit.set_or_remove_label(labels::OWNER, claim.owner_name.as_deref());
            edit.set_or_remove_label(labels::CLAIM_SET, claim.claim_set.as_deref());
            // Keys a previous binding of this claim applied but its spec
            // no longer asks for.
            let recorded = recorded_keys(pod);
            for key in recorded.iter().filter(|key| !claim.additional_pod_labels.contains_key(*key)) {
                edit.remove_label(key);
            }
            for (key, value) in spec_labels(claim) {
                edit.set_label(key, value);
            }
            edit.set_annotation(labels::BINDING, &Binding::of_claim(claim).render());
        }
        Transition::AdoptLegacy(claim) => {
            edit.set_label(labels::CLAIM_UID, &claim.uid);
            edit.set_or_remove_label(labels::OWNER, claim.owner_name.as_deref());
            for (key, value) in spec_labels(claim) {
                edit.set_label(key, value);
            }
            edit.set_annotation(labels::BINDING, &Binding::of_claim(claim).render());
        }
        Transition::Release { then, .. } | Transition::ReleaseLegacy { then, .. } => {
            let to = match then {
                AfterRelease::Drain => PodPhase::Draining,
                AfterRelease::Retire => PodPhase::Terminating,
            };
            edit.set_label(labels::PHASE, to.as_str());
            let owner = label(pod, labels::OWNER).map(str::to_owned);
            for key in [labels::CLAIM_UID, labels::CLAIMED_BY, labels::OWNER, labels::CLAIM_SET] {
                edit.remove_label(key);
            }
            for key in recorded_keys(pod) {
                edit.remove_label(&key);
            }
            if let Some(owner) = owner {
                edit.set_label(labels::LAST_OWNER, &owner);
            }
            edit.remove_annotation(labels::BINDING);
            edit.set_annotation(labels::RECLAIMED_AT, &now.to_string());
        }
        Transition::Phase(step) => {
            edit.set_label(labels::PHASE, step.to().as_str());
            if step == PodTransition::Recycle {
                edit.remove_annotation(labels::RECLAIMED_AT);
            }
        }
        Transition::Retire => edit.set_label(labels::PHASE, PodPhase::Terminating.as_str()),
    }
    Some(ops)
}

/// The claim's additional pod labels this write may apply: never an owner
/// or phase key, whatever reached the guard (the controllers refuse an
/// invalid spec before, but safety must not rest on that).
fn spec_labels<'a>(claim: &'a ClaimView) -> Box<dyn Iterator<Item = (&'a String, &'a String)> + 'a> {
    #[cfg(feature = "sabotage")]
    if crate::sabotage::active(crate::sabotage::Variant::OwnerLabelsFromSpec) {
        // Every key of the spec lands, after the owner keys it overwrites.
        return Box::new(claim.additional_pod_labels.iter());
    }
    Box::new(claim.applicable_pod_labels())
}

/// The additional label keys the pod's binding says acquire applied. An
/// unreadable binding records none: only owner labels are then removed. A
/// reserved key there (a hand-edited annotation) is not the spec's to
/// remove.
fn recorded_keys(pod: &Pod) -> Vec<String> {
    annotation(pod, labels::BINDING)
        .and_then(|text| Binding::parse(text).ok())
        .map(|binding| binding.additional_label_keys.into_iter().filter(|key| !labels::is_reserved(key)).collect())
        .unwrap_or_default()
}

/// Builds add/replace/remove operations that are valid on the pod read.
struct Edit<'a> {
    pod: &'a Pod,
    ops: &'a mut Vec<Value>,
}

impl Edit<'_> {
    fn set_label(&mut self, key: &str, value: &str) {
        if label(self.pod, key) != Some(value) {
            self.ops.push(json!({"op": "add", "path": pointer("labels", key), "value": value}));
        }
    }

    fn remove_label(&mut self, key: &str) {
        if label(self.pod, key).is_some() && !self.removed(&pointer("labels", key)) {
            self.ops.push(json!({"op": "remove", "path": pointer("labels", key)}));
        }
    }

    fn set_or_remove_label(&mut self, key: &str, value: Option<&str>) {
        match value {
            Some(value) => self.set_label(key, value),
            None => self.remove_label(key),
        }
    }

    fn set_annotation(&mut self, key: &str, value: &str) {
        if self.pod.metadata.annotations.is_none() && !self.ops.iter().any(|op| op["path"] == "/metadata/annotations") {
            let empty: BTreeMap<String, String> = BTreeMap::new();
            self.ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": empty}));
        }
        if annotation(self.pod, key) != Some(value) {
            self.ops.push(json!({"op": "add", "path": pointer("annotations", key), "value": value}));
        }
    }

    fn remove_annotation(&mut self, key: &str) {
        if annotation(self.pod, key).is_some() {
            self.ops.push(json!({"op": "remove", "path": pointer("annotations", key)}));
        }
    }

    fn removed(&self, path: &str) -> bool {
        self.ops.iter().any(|op| op["op"] == "remove" && op["path"] == path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(pairs: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                labels: Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    fn claim() -> ClaimView {
        ClaimView {
            name: "c".into(),
            uid: "u1".into(),
            deleting: false,
            has_finalizer: true,
            owner_name: None,
            selector: Default::default(),
            pool_name: None,
            pod_name: None,
            source_pod: None,
            phase: None,
            recorded_pod_uid: None,
            recorded_pod_name: None,
            status_pod_uid: None,
            bound_time: None,
            cn_labels: Default::default(),
            additional_pod_labels: [("team".to_string(), "a".to_string())].into_iter().collect(),
            claim_set: None,
            drain_reported: None,
            invalid: None,
            created: None,
            outdated_since: None,
        }
    }

    #[test]
    fn acquire_tests_absent_owner_labels_against_null() {
        let claim = claim();
        let ops =
            operations(&pod(&[(labels::PHASE, "Idle")]), Transition::Acquire(&claim), jiff::Timestamp::UNIX_EPOCH)
                .expect("an idle pod may be acquired");
        assert_eq!(
            ops[0],
            json!({"op": "test", "path": "/metadata/labels/pool.matrixorigin.io~1phase", "value": "Idle"})
        );
        assert_eq!(
            ops[1],
            json!({"op": "test", "path": "/metadata/labels/pool.matrixorigin.io~1claim-uid", "value": null})
        );
        assert_eq!(
            ops[2],
            json!({"op": "test", "path": "/metadata/labels/pool.matrixorigin.io~1claimed-by", "value": null})
        );
        assert!(ops.contains(&json!({"op": "add", "path": "/metadata/labels/team", "value": "a"})));
    }

    #[test]
    fn a_pod_with_an_owner_cannot_be_acquired_and_release_needs_the_uid() {
        let claim = claim();
        let owned = pod(&[(labels::PHASE, "Idle"), (labels::CLAIM_UID, "other")]);
        assert!(operations(&owned, Transition::Acquire(&claim), jiff::Timestamp::UNIX_EPOCH).is_none());
        let release = Transition::Release { claim_uid: "u1", then: AfterRelease::Drain };
        assert!(operations(&owned, release, jiff::Timestamp::UNIX_EPOCH).is_none());
    }

    #[test]
    fn no_spec_label_reaches_an_owner_or_phase_key() {
        let mut claim = claim();
        claim.additional_pod_labels.extend([
            (labels::CLAIM_UID.to_string(), "uid-of-another".to_string()),
            (labels::PHASE.to_string(), "Idle".to_string()),
            (labels::OWNER.to_string(), "someone-else".to_string()),
        ]);
        let idle = pod(&[(labels::PHASE, "Idle")]);
        let ops = operations(&idle, Transition::Acquire(&claim), jiff::Timestamp::UNIX_EPOCH).expect("idle pod");
        let written = |key: &str| -> Vec<&Value> {
            let path = pointer("labels", key);
            ops.iter().filter(|op| op["op"] == "add" && op["path"] == path.as_str()).map(|op| &op["value"]).collect()
        };
        assert_eq!(written(labels::CLAIM_UID), vec!["u1"], "{ops:#?}");
        assert_eq!(written(labels::PHASE), vec!["Bound"]);
        assert!(written(labels::OWNER).is_empty());
        assert_eq!(written("team"), vec!["a"], "the claim's other labels still land");
        let binding = ops.iter().find(|op| op["path"] == pointer("annotations", labels::BINDING).as_str());
        assert!(binding.is_some_and(|op| op["value"].as_str().is_some_and(|text| !text.contains("claim-uid"))));

        let legacy = pod(&[(labels::PHASE, "Bound"), (labels::CLAIMED_BY, "c")]);
        let ops = operations(&legacy, Transition::AdoptLegacy(&claim), jiff::Timestamp::UNIX_EPOCH).expect("Go pod");
        assert!(!ops.iter().any(|op| op["op"] == "add" && op["value"] == "uid-of-another"), "{ops:#?}");
    }

    #[test]
    fn an_empty_owner_label_owns_nothing_and_is_pinned_as_read() {
        let claim = claim();
        let idle = pod(&[(labels::PHASE, "Idle"), (labels::CLAIM_UID, ""), (labels::CLAIMED_BY, "")]);
        let ops = operations(&idle, Transition::Acquire(&claim), jiff::Timestamp::UNIX_EPOCH)
            .expect("the cache reads this pod as unowned, and so does the guard");
        assert_eq!(
            ops[1],
            json!({"op": "test", "path": "/metadata/labels/pool.matrixorigin.io~1claim-uid", "value": ""})
        );
        let release = Transition::Release { claim_uid: "", then: AfterRelease::Drain };
        assert!(operations(&idle, release, jiff::Timestamp::UNIX_EPOCH).is_none(), "no owner to release for");
    }

    #[test]
    fn release_never_removes_a_reserved_key_a_binding_lists() {
        let mut bound = pod(&[(labels::PHASE, "Bound"), (labels::CLAIM_UID, "u1"), (labels::POOL_NAME, "p")]);
        let listed = format!(r#"{{"additionalLabelKeys":["{}"]}}"#, labels::POOL_NAME);
        bound.metadata.annotations = Some([(labels::BINDING.to_string(), listed)].into());
        let release = Transition::Release { claim_uid: "u1", then: AfterRelease::Drain };
        let ops = operations(&bound, release, jiff::Timestamp::UNIX_EPOCH).expect("the owner may release");
        assert!(
            !ops.iter().any(|op| op["op"] == "remove" && op["path"] == pointer("labels", labels::POOL_NAME).as_str())
        );
    }

    #[test]
    fn a_go_bound_pod_is_released_by_name_only_while_it_carries_no_uid() {
        let release = Transition::ReleaseLegacy { claim_name: "c", then: AfterRelease::Drain };
        let go_bound = pod(&[(labels::PHASE, "Bound"), (labels::CLAIMED_BY, "c"), (labels::OWNER, "tenant")]);
        let ops = operations(&go_bound, release, jiff::Timestamp::UNIX_EPOCH).expect("bound to c by name");
        assert_eq!(
            ops[1],
            json!({"op": "test", "path": "/metadata/labels/pool.matrixorigin.io~1claim-uid", "value": null})
        );
        assert_eq!(
            ops[2],
            json!({"op": "test", "path": "/metadata/labels/pool.matrixorigin.io~1claimed-by", "value": "c"})
        );
        assert!(ops.contains(&json!({"op": "remove", "path": "/metadata/labels/pool.matrixorigin.io~1claimed-by"})));
        let adopted = pod(&[(labels::PHASE, "Bound"), (labels::CLAIMED_BY, "c"), (labels::CLAIM_UID, "u1")]);
        assert!(operations(&adopted, release, jiff::Timestamp::UNIX_EPOCH).is_none(), "a UID makes it cnpool's");
        let other = pod(&[(labels::PHASE, "Bound"), (labels::CLAIMED_BY, "d")]);
        assert!(operations(&other, release, jiff::Timestamp::UNIX_EPOCH).is_none());
    }

    #[test]
    fn release_removes_exactly_the_recorded_keys() {
        let mut bound = pod(&[
            (labels::PHASE, "Bound"),
            (labels::CLAIM_UID, "u1"),
            (labels::CLAIMED_BY, "c"),
            (labels::OWNER, "tenant"),
            ("team", "a"),
            ("app", "mo"),
        ]);
        bound.metadata.annotations =
            Some([(labels::BINDING.to_string(), r#"{"additionalLabelKeys":["team"]}"#.to_string())].into());
        let release = Transition::Release { claim_uid: "u1", then: AfterRelease::Drain };
        let ops = operations(&bound, release, jiff::Timestamp::UNIX_EPOCH).expect("the owner may release");
        let removed: Vec<&str> =
            ops.iter().filter(|op| op["op"] == "remove").filter_map(|op| op["path"].as_str()).collect();
        assert!(removed.contains(&"/metadata/labels/team"));
        assert!(!removed.contains(&"/metadata/labels/app"), "labels acquire did not add stay");
        assert!(ops.contains(
            &json!({"op": "add", "path": "/metadata/labels/matrixorigin.io~1last-owner", "value": "tenant"})
        ));
        assert!(ops.contains(
            &json!({"op": "add", "path": "/metadata/labels/pool.matrixorigin.io~1phase", "value": "Draining"})
        ));
    }
}
