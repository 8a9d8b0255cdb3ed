//! What the real server does with a custom resource's structural schema:
//! apply defaults, prune unknown fields, and validate types, enums,
//! patterns, bounds and required fields.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use serde_json::{Map, Value};

/// Applies defaults and prunes unknown fields, in place; returns the paths
/// it pruned. `metadata`, `apiVersion` and `kind` at the root are never
/// pruned.
pub fn default_and_prune(object: &mut Value, schema: &Value) -> Vec<String> {
    let mut pruned = Vec::new();
    if let Some(map) = object.as_object_mut() {
        let saved: Vec<(String, Value)> = ["apiVersion", "kind", "metadata"]
            .iter()
            .filter_map(|key| map.remove(*key).map(|value| (key.to_string(), value)))
            .collect();
        walk(object, schema, "", &mut pruned);
        if let Some(map) = object.as_object_mut() {
            map.extend(saved);
        }
    }
    pruned
}

fn walk(value: &mut Value, schema: &Value, path: &str, pruned: &mut Vec<String>) {
    match value {
        Value::Object(map) => walk_object(map, schema, path, pruned),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter_mut().enumerate() {
                    walk(item, item_schema, &format!("{path}[{index}]"), pruned);
                }
            }
        }
        _ => {}
    }
}

fn walk_object(map: &mut Map<String, Value>, schema: &Value, path: &str, pruned: &mut Vec<String>) {
    let preserve = schema["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true);
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    if let Some(properties) = properties {
        for (key, property) in properties {
            // A null where null is not allowed is dropped, so the default applies.
            if map.get(key).is_some_and(Value::is_null) && property["nullable"].as_bool() != Some(true) {
                map.remove(key);
            }
            if !map.contains_key(key)
                && let Some(default) = property.get("default")
            {
                map.insert(key.clone(), default.clone());
            }
        }
    }
    let keys: Vec<String> = map.keys().cloned().collect();
    for key in keys {
        let property = properties.and_then(|p| p.get(&key)).or(additional);
        match property {
            Some(property) => {
                if let Some(child) = map.get_mut(&key) {
                    walk(child, property, &child_path(path, &key), pruned);
                }
            }
            None if preserve || (properties.is_none() && additional.is_none() && schema.get("type").is_none()) => {}
            None => {
                map.remove(&key);
                pruned.push(child_path(path, &key));
            }
        }
    }
}

/// Validates `object` (without its metadata) against `schema`; returns
/// (field, message) pairs in the real server's wording.
pub fn validate(object: &Value, schema: &Value) -> Vec<(String, String)> {
    let mut errors = Vec::new();
    if let Some(map) = object.as_object() {
        check_object(map, schema, "", &mut errors, &["apiVersion", "kind", "metadata"]);
    }
    errors
}

/// The fields of `map` against an object `schema`, but `skipped`, which
/// another check owns (the metadata of the top-level object).
fn check_object(
    map: &Map<String, Value>,
    schema: &Value,
    path: &str,
    errors: &mut Vec<(String, String)>,
    skipped: &[&str],
) {
    let required = schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str);
    for key in required.filter(|key| !skipped.contains(key)) {
        if !map.contains_key(key) {
            errors.push((child_path(path, key), "Required value".into()));
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (key, child) in map.iter().filter(|(key, _)| !skipped.contains(&key.as_str())) {
        if let Some(property) = properties.and_then(|p| p.get(key)).or(additional) {
            check(child, property, &child_path(path, key), errors);
        }
    }
}

/// `pattern` compiled, once per process (a CRD's few patterns are checked
/// on every write); `None` for one that does not compile, which checks
/// nothing.
fn compiled(pattern: &str) -> Option<Arc<regex::Regex>> {
    static PATTERNS: LazyLock<Mutex<HashMap<String, Option<Arc<regex::Regex>>>>> = LazyLock::new(Mutex::default);
    let mut patterns = PATTERNS.lock().unwrap_or_else(PoisonError::into_inner);
    patterns.entry(pattern.to_owned()).or_insert_with(|| regex::Regex::new(pattern).ok().map(Arc::new)).clone()
}

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

fn check(value: &Value, schema: &Value, path: &str, errors: &mut Vec<(String, String)>) {
    if value.is_null() {
        if schema["nullable"].as_bool() != Some(true) && schema.get("type").is_some() {
            errors.push((
                path.into(),
                format!(
                    "Invalid value: \"null\": {path} in body must be of type {}",
                    schema["type"].as_str().unwrap_or("object")
                ),
            ));
        }
        return;
    }
    if let Some(expected) = schema["type"].as_str() {
        let int_or_string = schema["x-kubernetes-int-or-string"].as_bool() == Some(true);
        let ok = match expected {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string() || (int_or_string && value.is_i64()),
            "integer" => value.is_i64() || value.is_u64() || (int_or_string && value.is_string()),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            _ => true,
        };
        if !ok {
            let got = match value {
                Value::Object(_) => "object",
                Value::Array(_) => "array",
                Value::String(_) => "string",
                Value::Bool(_) => "boolean",
                Value::Number(number) if number.is_f64() => "number",
                _ => "integer",
            };
            errors.push((
                path.into(),
                format!("Invalid value: \"{got}\": {path} in body must be of type {expected}: \"{got}\""),
            ));
            return;
        }
    }
    if let Some(options) = schema["enum"].as_array()
        && !options.contains(value)
    {
        let list = options.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(", ");
        errors.push((path.into(), format!("Unsupported value: {value}: supported values: {list}")));
    }
    if let (Some(pattern), Some(text)) = (schema["pattern"].as_str(), value.as_str()) {
        let matches = compiled(pattern).is_none_or(|re| re.is_match(text));
        if !matches {
            errors.push((path.into(), format!("Invalid value: \"{text}\": {path} in body should match '{pattern}'")));
        }
    }
    if let Some(number) = value.as_f64() {
        if let Some(minimum) = schema["minimum"].as_f64()
            && number < minimum
        {
            errors.push((
                path.into(),
                format!("Invalid value: {number}: {path} in body should be greater than or equal to {minimum}"),
            ));
        }
        if let Some(maximum) = schema["maximum"].as_f64()
            && number > maximum
        {
            errors.push((
                path.into(),
                format!("Invalid value: {number}: {path} in body should be less than or equal to {maximum}"),
            ));
        }
    }
    match value {
        Value::Object(map) => check_object(map, schema, path, errors, &[]),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    check(item, item_schema, &format!("{path}[{index}]"), errors);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["selector"],
                    "properties": {
                        "selector": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "replicas": {"type": "integer", "default": 0, "minimum": 0},
                        "timeout": {"type": "string", "pattern": "^[0-9]+s$", "nullable": true},
                        "mode": {"type": "string", "enum": ["A", "B"]},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}}
                    }
                }
            }
        })
    }

    #[test]
    fn defaults_fill_missing_fields_and_unknown_fields_are_pruned() {
        let mut object = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a", "extra": 1},
            "spec": {"selector": {"anything": {"goes": 1}}, "bogus": true, "labels": {"a": "b"}}, "junk": 1});
        assert_eq!(default_and_prune(&mut object, &schema()), ["junk", "spec.bogus"]);
        assert_eq!(
            object,
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a", "extra": 1},
                "spec": {"selector": {"anything": {"goes": 1}}, "replicas": 0, "labels": {"a": "b"}}})
        );
    }

    #[test]
    fn validation_reports_each_field_in_the_real_wording() {
        let object = json!({"spec": {"replicas": -1, "timeout": "ten", "mode": "C", "labels": {"a": 1}}});
        let errors = validate(&object, &schema());
        let fields: Vec<&str> = errors.iter().map(|(field, _)| field.as_str()).collect();
        assert_eq!(fields, ["spec.selector", "spec.labels.a", "spec.mode", "spec.replicas", "spec.timeout"]);
        assert_eq!(errors[4].1, "Invalid value: \"ten\": spec.timeout in body should match '^[0-9]+s$'");
        assert_eq!(errors[0].1, "Required value");
    }
}
