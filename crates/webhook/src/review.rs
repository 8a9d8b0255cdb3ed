//! What every rule shares: reading the objects of a request and answering.

use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::core::{DynamicObject, Status};
use serde::de::DeserializeOwned;

pub(crate) type Request = AdmissionRequest<DynamicObject>;

/// Why a request is refused; the text is what the user sees after the
/// apiserver's `admission webhook "…" denied the request: `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A transition the binding protocol does not allow (HTTP 403).
    Forbidden(String),
    /// An invalid spec (HTTP 422, as the apiserver's own validation).
    Invalid(String),
    /// The request itself cannot be read (HTTP 400).
    Unreadable(String),
}

pub(crate) fn answer(request: &Request, verdict: Result<(), Refusal>) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(request);
    let Err(refusal) = verdict else { return response };
    let (code, reason, message) = match refusal {
        Refusal::Forbidden(message) => (403, "Forbidden", message),
        Refusal::Invalid(message) => (422, "Invalid", message),
        Refusal::Unreadable(message) => (400, "BadRequest", message),
    };
    response.allowed = false;
    response.result = Status::failure(&message, reason).with_code(code);
    response
}

/// The objects of a request, typed.
pub(crate) enum Change<K> {
    Create(K),
    Update {
        old: K,
        new: K,
    },
    /// DELETE and CONNECT: no rule looks at them.
    Other,
}

pub(crate) fn change<K: DeserializeOwned>(request: &Request) -> Result<Change<K>, Refusal> {
    match request.operation {
        Operation::Create => Ok(Change::Create(typed(request, request.object.as_ref(), "object")?)),
        Operation::Update => Ok(Change::Update {
            old: typed(request, request.old_object.as_ref(), "oldObject")?,
            new: typed(request, request.object.as_ref(), "object")?,
        }),
        Operation::Delete | Operation::Connect => Ok(Change::Other),
    }
}

fn typed<K: DeserializeOwned>(request: &Request, object: Option<&DynamicObject>, field: &str) -> Result<K, Refusal> {
    let kind = &request.kind.kind;
    let object = object.ok_or_else(|| {
        Refusal::Unreadable(format!(
            "request.{field}: missing from the {operation:?} review of {kind} {name}; the apiserver always sends it, so \
             check what forwards admission reviews to this webhook",
            operation = request.operation,
            name = request.name,
        ))
    })?;
    serde_json::to_value(object).and_then(serde_json::from_value).map_err(|error| {
        Refusal::Unreadable(format!(
            "request.{field}: not a readable {kind} ({error}); fix the object, or register this path for {kind} only"
        ))
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use kube::core::admission::AdmissionReview;
    use serde_json::{Value, json};

    use super::*;

    /// An AdmissionReview as kube-apiserver sends it (admission.k8s.io/v1),
    /// for an object in namespace `ns`.
    pub(crate) fn review_json(
        kind: &str,
        operation: &str,
        name: &str,
        object: Option<Value>,
        old_object: Option<Value>,
        username: &str,
    ) -> Value {
        let (group, version, resource) = match kind {
            "Pod" => ("", "v1", "pods"),
            "CNClaim" => ("core.matrixorigin.io", "v1alpha1", "cnclaims"),
            "CNClaimSet" => ("core.matrixorigin.io", "v1alpha1", "cnclaimsets"),
            "CNPool" => ("core.matrixorigin.io", "v1alpha1", "cnpools"),
            other => panic!("no resource for kind {other}"),
        };
        let options = if operation == "CREATE" { "CreateOptions" } else { "UpdateOptions" };
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "0df28fbd-5f5f-11e8-bc74-36e6bb280816",
                "kind": {"group": group, "version": version, "kind": kind},
                "resource": {"group": group, "version": version, "resource": resource},
                "requestKind": {"group": group, "version": version, "kind": kind},
                "requestResource": {"group": group, "version": version, "resource": resource},
                "name": name,
                "namespace": "ns",
                "operation": operation,
                "userInfo": {"username": username, "uid": "1", "groups": ["system:authenticated"]},
                "object": object,
                "oldObject": old_object,
                "dryRun": false,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": options}
            }
        })
    }

    pub(crate) fn request(
        kind: &str,
        operation: &str,
        name: &str,
        object: Option<Value>,
        old_object: Option<Value>,
        username: &str,
    ) -> Request {
        let review: AdmissionReview<DynamicObject> =
            serde_json::from_value(review_json(kind, operation, name, object, old_object, username)).unwrap();
        review.try_into().unwrap()
    }

    pub(crate) fn assert_allowed(response: &AdmissionResponse) {
        assert!(response.allowed, "refused: {}", response.result.message);
        assert_eq!(response.uid, "0df28fbd-5f5f-11e8-bc74-36e6bb280816", "the uid is echoed");
    }

    pub(crate) fn assert_refused(response: &AdmissionResponse, code: u16, message: &str) {
        assert!(!response.allowed, "allowed, expected: {message}");
        assert_eq!(response.uid, "0df28fbd-5f5f-11e8-bc74-36e6bb280816", "the uid is echoed");
        assert_eq!(response.result.code, code);
        assert_eq!(response.result.message, message);
    }

    #[test]
    fn an_update_without_its_old_object_is_refused_as_unreadable() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let request = request("Pod", "UPDATE", "p", Some(pod), None, "u");
        let verdict = change::<DynamicObject>(&request).map(|_| ());
        assert_refused(
            &answer(&request, verdict),
            400,
            "request.oldObject: missing from the Update review of Pod p; the apiserver always sends it, so check \
             what forwards admission reviews to this webhook",
        );
    }
}
