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

/// A label selector as Kubernetes defines it, with the operator of each
/// expression limited to the four the API server knows: the generated
/// schema takes any string, so a claim whose selector says `Like` would be
/// stored and then match nothing, silently.
pub(crate) fn label_selector(_: &mut SchemaGenerator) -> Schema {
    selector_schema()
}

/// [`label_selector`] for an optional field, which the Go operator may
/// write as null.
pub(crate) fn optional_label_selector(_: &mut SchemaGenerator) -> Schema {
    let mut schema = selector_schema();
    schema.insert("nullable".to_owned(), true.into());
    schema
}

fn selector_schema() -> Schema {
    json_schema!({
        "type": "object",
        "description": "A label query over the pool's pods: matchLabels and matchExpressions are ANDed; an empty selector matches everything.",
        "properties": {
            "matchLabels": {
                "type": "object",
                "description": "Labels a pod must carry with exactly these values.",
                "additionalProperties": {"type": "string"}
            },
            "matchExpressions": {
                "type": "array",
                "description": "Requirements a pod's labels must meet.",
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": {"type": "string", "description": "The label key the requirement applies to."},
                        "operator": {
                            "type": "string",
                            "description": "How the key relates to the values.",
                            "enum": ["In", "NotIn", "Exists", "DoesNotExist"]
                        },
                        "values": {
                            "type": "array",
                            "description": "Values for In and NotIn (at least one); empty for Exists and DoesNotExist.",
                            "items": {"type": "string"}
                        }
                    }
                }
            }
        }
    })
}
