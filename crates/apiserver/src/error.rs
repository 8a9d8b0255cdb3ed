//! API errors as the Kubernetes API server reports them: an HTTP code, a
//! machine-readable reason and a `Status` object.

use serde_json::{Value, json};

/// One failed request, rendered as a `meta/v1 Status`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details` of the Status (name, group, kind, causes), when known.
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self { code, reason, message: message.into(), details: None }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn not_found(resource: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
            .with_details(json!({"name": name, "kind": short_kind(resource), "group": group_of(resource)}))
    }

    pub fn path_not_found() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource")
    }

    pub fn already_exists(resource: &str, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{resource} \"{name}\" already exists"))
            .with_details(json!({"name": name, "kind": short_kind(resource), "group": group_of(resource)}))
    }

    /// The write was based on a version that is no longer current.
    pub fn conflict(resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again"
            ),
        )
        .with_details(json!({"name": name, "kind": short_kind(resource), "group": group_of(resource)}))
    }

    /// A precondition (uid or resourceVersion) of a delete failed.
    pub fn precondition_failed(resource: &str, name: &str, what: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {resource} \"{name}\": Precondition failed: {what}"),
        )
    }

    /// 422: the object is invalid. `causes` are (field, message) pairs.
    pub fn invalid(kind: &str, name: &str, causes: Vec<(String, String)>) -> Self {
        let summary =
            causes.iter().map(|(field, message)| format!("{field}: {message}")).collect::<Vec<_>>().join(", ");
        let causes: Vec<Value> = causes
            .into_iter()
            .map(|(field, message)| json!({"reason": "FieldValueInvalid", "message": message, "field": field}))
            .collect();
        Self::new(422, "Invalid", format!("{kind} \"{name}\" is invalid: {summary}"))
            .with_details(json!({"name": name, "kind": kind, "causes": causes}))
    }

    /// 422 with a message of its own (e.g. a failed JSON patch `test`).
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 410: the requested version is older than the retained history.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 429 TooManyRequests: the PodDisruptionBudget refuses an eviction.
    pub fn too_many_requests(message: impl Into<String>) -> Self {
        Self::new(429, "TooManyRequests", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// Adds a cause (`type`, `message`) to the Status's details.
    pub fn with_cause(mut self, type_: &str, message: String) -> Self {
        let details = self.details.get_or_insert_with(|| json!({}));
        if !details["causes"].is_array() {
            details["causes"] = json!([]);
        }
        if let Some(causes) = details["causes"].as_array_mut() {
            causes.push(json!({"reason": type_, "message": message}));
        }
        self
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The `Status` object the real server sends.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

/// `cnclaims.core.matrixorigin.io` → `cnclaims`.
fn short_kind(resource: &str) -> &str {
    resource.split('.').next().unwrap_or(resource)
}

fn group_of(resource: &str) -> &str {
    resource.split_once('.').map(|(_, group)| group).unwrap_or("")
}
