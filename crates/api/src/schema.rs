//! Hand-written schema parts of the CRDs.

use schemars::{Schema, SchemaGenerator, json_schema};

/// The pool's pod template is kept open in the CRD: the full PodTemplateSpec
/// schema would make the CRD larger than the 256 KiB `kubectl apply` can
/// record in its last-applied annotation, and the API server validates the
/// template anyway when the pool creates a pod from it (a bad template shows
/// as a pool condition).
pub(crate) fn pod_template(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "A Kubernetes pod template (metadata and spec) for the pool's CN pods.",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

