//! The patch types the API server accepts.

use serde_json::Value;

use crate::error::ApiError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    Json,
    Merge,
    /// Strategic merge patch, for built-in types. Served as a JSON merge
    /// patch: the two agree on everything but lists of built-in types that
    /// merge by key (containers, volumes), which cnpool and the kubectl
    /// commands it documents never patch.
    Strategic,
}

const ACCEPTED: &str = "the body of the request was in an unknown format - accepted media types include: \
                        application/json-patch+json, application/merge-patch+json";

impl PatchKind {
    pub fn from_content_type(content_type: &str, custom: bool) -> Result<Self, ApiError> {
        let media = content_type.split(';').next().unwrap_or_default().trim();
        match media {
            "application/json-patch+json" => Ok(Self::Json),
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" if !custom => Ok(Self::Strategic),
            "application/strategic-merge-patch+json" => Err(ApiError::unsupported_media_type(ACCEPTED)),
            // Server-side apply: neither cnpool nor the kubectl commands it
            // documents use it, so it is refused plainly rather than
            // half-implemented.
            "application/apply-patch+yaml" => Err(ApiError::unsupported_media_type(format!(
                "server-side apply is not supported by the embedded API server; use client-side `kubectl apply` ({ACCEPTED})"
            ))),
            _ => Err(ApiError::unsupported_media_type(ACCEPTED)),
        }
    }
}

pub fn parse(_kind: PatchKind, body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|error| ApiError::bad_request(format!("error decoding patch: {error}")))
}

/// Applies `patch` to `document`, the object as stored at this moment (a
/// copy the caller gives up). JSON patch `test` operations are checked
/// against it, which makes a patch that tests a pod's phase and owner a
/// compare-and-set on exactly those fields.
pub fn apply(kind: PatchKind, mut document: Value, patch: &Value) -> Result<Value, ApiError> {
    match kind {
        PatchKind::Merge | PatchKind::Strategic => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            json_patch::merge(&mut document, patch);
        }
        PatchKind::Json => {
            let Some(operations) = patch.as_array() else {
                return Err(ApiError::bad_request("a JSON patch must be a JSON array of operations"));
            };
            // The real server treats `test` of null on an absent path as a
            // success; json-patch does not, so such tests are settled here.
            let mut kept = Vec::with_capacity(operations.len());
            for operation in operations {
                let is_null_test = operation["op"] == "test" && operation.get("value").is_some_and(Value::is_null);
                if is_null_test {
                    let path = operation["path"].as_str().unwrap_or_default();
                    match document.pointer(path) {
                        None | Some(Value::Null) => continue,
                        Some(found) => return Err(test_failed(path, found)),
                    }
                }
                kept.push(operation.clone());
            }
            let operations: json_patch::Patch = serde_json::from_value(Value::Array(kept))
                .map_err(|error| ApiError::bad_request(format!("error decoding patch: {error}")))?;
            json_patch::patch(&mut document, &operations).map_err(|error| {
                ApiError::unprocessable(format!(
                    "the server rejected our request due to an error in our request: {error}"
                ))
            })?;
        }
    }
    Ok(document)
}

fn test_failed(path: &str, found: &Value) -> ApiError {
    ApiError::unprocessable(format!("testing value {path} failed: expected null, found {found}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod() -> Value {
        json!({"metadata": {"name": "p", "labels": {"phase": "Idle"}}})
    }

    #[test]
    fn a_test_of_null_on_an_absent_path_succeeds() {
        let patch = json!([
            {"op": "test", "path": "/metadata/labels/owner", "value": null},
            {"op": "test", "path": "/metadata/labels/phase", "value": "Idle"},
            {"op": "add", "path": "/metadata/labels/owner", "value": "c1"}
        ]);
        let patched = apply(PatchKind::Json, pod(), &patch).unwrap();
        assert_eq!(patched["metadata"]["labels"]["owner"], "c1");
    }

    #[test]
    fn a_test_of_null_on_a_present_path_fails_with_422() {
        let patch = json!([{"op": "test", "path": "/metadata/labels/phase", "value": null}]);
        assert_eq!(apply(PatchKind::Json, pod(), &patch).unwrap_err().code, 422);
    }

    #[test]
    fn a_failing_test_is_422_and_changes_nothing() {
        let patch = json!([
            {"op": "test", "path": "/metadata/labels/phase", "value": "Bound"},
            {"op": "add", "path": "/metadata/labels/owner", "value": "c1"}
        ]);
        assert_eq!(apply(PatchKind::Json, pod(), &patch).unwrap_err().code, 422);
    }

    #[test]
    fn strategic_merge_is_refused_for_custom_resources() {
        assert_eq!(PatchKind::from_content_type("application/strategic-merge-patch+json", true).unwrap_err().code, 415);
        assert_eq!(PatchKind::from_content_type("application/apply-patch+yaml", false).unwrap_err().code, 415);
    }
}
