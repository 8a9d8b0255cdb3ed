//! Small helpers on objects held as JSON.

use serde_json::{Map, Value};

pub fn meta(object: &Value) -> &Value {
    &object["metadata"]
}

pub fn meta_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object["metadata"].is_object() {
        object["metadata"] = Value::Object(Map::new());
    }
    match object.get_mut("metadata") {
        Some(Value::Object(map)) => map,
        // Unreachable: the line above made metadata an object.
        _ => unreachable!("metadata was just made an object"),
    }
}

pub fn str_field<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    meta(object)[key].as_str().filter(|text| !text.is_empty())
}

pub fn name(object: &Value) -> &str {
    str_field(object, "name").unwrap_or_default()
}

pub fn uid(object: &Value) -> &str {
    str_field(object, "uid").unwrap_or_default()
}

pub fn finalizers(object: &Value) -> Vec<String> {
    meta(object)["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(ToString::to_string))
        .collect()
}

pub fn set_finalizers(object: &mut Value, finalizers: Vec<String>) {
    let map = meta_mut(object);
    if finalizers.is_empty() {
        map.remove("finalizers");
    } else {
        map.insert("finalizers".into(), Value::from(finalizers));
    }
}

pub fn is_deleting(object: &Value) -> bool {
    str_field(object, "deletionTimestamp").is_some()
}

/// UIDs of the object's owners.
pub fn owner_uids(object: &Value) -> Vec<String> {
    meta(object)["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|owner| owner["uid"].as_str().map(ToString::to_string))
        .collect()
}

/// The object without fields that every write changes, for "did anything
/// change" comparisons.
pub fn without_version(object: &Value) -> Value {
    let mut copy = object.clone();
    let map = meta_mut(&mut copy);
    map.remove("resourceVersion");
    map.remove("managedFields");
    copy
}

/// Everything but metadata and status: what moves `generation`.
pub fn spec_part(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        for key in ["metadata", "status", "apiVersion", "kind"] {
            map.remove(key);
        }
    }
    copy
}

pub fn is_dns_subdomain(text: &str) -> bool {
    !text.is_empty() && text.len() <= 253 && text.split('.').all(is_dns_label)
}

pub fn is_dns_label(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes.iter().all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}
