#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! `kubectl explain` reads each field's description from the CRD schema,
//! which the doc comments of the API types become: every field of every
//! CRD's spec and status has one, so a field added without a doc comment
//! fails here.

use serde_json::Value;

/// The paths of the properties under `schema` that carry no description.
fn undescribed(path: &str, schema: &Value, missing: &mut Vec<String>) {
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            let at = format!("{path}.{name}");
            let described =
                property.get("description").and_then(Value::as_str).is_some_and(|text| !text.trim().is_empty());
            if !described {
                missing.push(at.clone());
            }
            undescribed(&at, property, missing);
        }
    }
    if let Some(items) = schema.get("items") {
        undescribed(&format!("{path}[]"), items, missing);
    }
    if let Some(values) = schema.get("additionalProperties").filter(|values| values.is_object()) {
        undescribed(&format!("{path}{{}}"), values, missing);
    }
    for combined in ["allOf", "anyOf", "oneOf"] {
        for branch in schema.get(combined).and_then(Value::as_array).into_iter().flatten() {
            undescribed(path, branch, missing);
        }
    }
}

#[test]
fn every_spec_and_status_field_is_described_for_kubectl_explain() {
    let mut missing = Vec::new();
    for crd in cnpool_api::crd::crds() {
        let kind = crd.spec.names.kind.clone();
        for version in &crd.spec.versions {
            let schema =
                version.schema.as_ref().and_then(|schema| schema.open_api_v3_schema.as_ref()).expect("a schema");
            let schema = serde_json::to_value(schema).unwrap();
            for part in ["spec", "status"] {
                let Some(part_schema) = schema.pointer(&format!("/properties/{part}")) else { continue };
                let at = format!("{kind}.{part}");
                if part_schema.get("description").is_none() {
                    missing.push(at.clone());
                }
                undescribed(&at, part_schema, &mut missing);
            }
        }
    }
    assert!(missing.is_empty(), "fields without a description (add a doc comment):\n{}", missing.join("\n"));
}
