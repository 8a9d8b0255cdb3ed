//! `meta.k8s.io/v1 Table` responses, what `kubectl get` prints.

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::meta;
use crate::resources::{Column, ResourceInfo};

/// What a row carries besides its cells (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(text: Option<&str>) -> Self {
        match text {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

pub fn table(
    res: &ResourceInfo,
    objects: &[Value],
    list_metadata: Value,
    now: Timestamp,
    include: IncludeObject,
) -> Value {
    let mut definitions = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name of the object", "priority": 0}),
    ];
    definitions.extend(res.columns.iter().map(|column| {
        json!({"name": column.name, "type": column.type_, "format": "", "description": column.description, "priority": column.priority})
    }));
    let rows: Vec<Value> = objects.iter().map(|object| row(res, object, now, include)).collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

fn row(res: &ResourceInfo, object: &Value, now: Timestamp, include: IncludeObject) -> Value {
    let mut cells = vec![json!(meta::name(object))];
    cells.extend(res.columns.iter().map(|column| cell(res, column, object, now)));
    let mut row = json!({"cells": cells});
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            row["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": object["metadata"],
            });
        }
        IncludeObject::Object => row["object"] = object.clone(),
    }
    row
}

fn cell(res: &ResourceInfo, column: &Column, object: &Value, now: Timestamp) -> Value {
    if column.json_path.is_empty() {
        return computed_cell(res, &column.name, object);
    }
    let values = json_path(object, &column.json_path);
    let Some(first) = values.first() else { return Value::Null };
    match column.type_.as_str() {
        "date" => first
            .as_str()
            .and_then(|text| text.parse::<Timestamp>().ok())
            .map(|time| json!(human_duration(now.as_second() - time.as_second())))
            .unwrap_or(Value::Null),
        "integer" | "number" | "boolean" => (*first).clone(),
        _ if values.len() > 1 => {
            json!(values.iter().map(|v| plain(v)).collect::<Vec<_>>().join(","))
        }
        _ => json!(plain(first)),
    }
}

fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Columns the real server computes rather than reads.
fn computed_cell(res: &ResourceInfo, name: &str, object: &Value) -> Value {
    let statuses = object["status"]["containerStatuses"].as_array().cloned().unwrap_or_default();
    match (res.plural.as_str(), name) {
        ("pods", "Ready") => {
            let total = object["spec"]["containers"].as_array().map_or(0, Vec::len);
            let ready = statuses.iter().filter(|s| s["ready"].as_bool() == Some(true)).count();
            json!(format!("{ready}/{total}"))
        }
        ("pods", "Status") if meta::is_deleting(object) => json!("Terminating"),
        ("pods", "Status") => object["status"]["phase"].clone(),
        ("pods", "Restarts") => json!(statuses.iter().filter_map(|s| s["restartCount"].as_i64()).sum::<i64>()),
        ("events", "Object") => {
            let involved = &object["involvedObject"];
            let (kind, name) =
                (involved["kind"].as_str().unwrap_or_default(), involved["name"].as_str().unwrap_or_default());
            json!(format!("{}/{name}", kind.to_lowercase()))
        }
        ("nodes", "Status") => {
            let ready = object["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            let mut status = if ready { "Ready".to_string() } else { "NotReady".to_string() };
            if object["spec"]["unschedulable"].as_bool() == Some(true) {
                status.push_str(",SchedulingDisabled");
            }
            json!(status)
        }
        _ => Value::Null,
    }
}

/// The values a simple JSONPath selects: `.a.b`, `.a[0].b`, `.a[*].b` and
/// `.a[?(@.type=="Ready")].status` — the forms printer columns use.
pub fn json_path<'a>(object: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut current = vec![object];
    for step in split_path(path) {
        let mut next = Vec::new();
        for value in current {
            match step {
                Step::Field(name) => next.extend(value.get(name)),
                Step::Index(index) => next.extend(value.get(index)),
                Step::All => next.extend(value.as_array().into_iter().flatten()),
                Step::Filter(key, expected) => next
                    .extend(value.as_array().into_iter().flatten().filter(|item| item[key].as_str() == Some(expected))),
            }
        }
        current = next;
    }
    current.into_iter().filter(|value| !value.is_null()).collect()
}

enum Step<'a> {
    Field(&'a str),
    Index(usize),
    All,
    Filter(&'a str, &'a str),
}

fn split_path(path: &str) -> Vec<Step<'_>> {
    let mut steps = Vec::new();
    let mut rest = path.trim().trim_start_matches('{').trim_end_matches('}');
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            if end > 0 {
                steps.push(Step::Field(&after[..end]));
            }
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']').unwrap_or(after.len());
            let inside = &after[..end];
            if inside == "*" {
                steps.push(Step::All);
            } else if let Ok(index) = inside.parse() {
                steps.push(Step::Index(index));
            } else if let Some((key, value)) =
                inside.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')).and_then(|f| f.split_once("=="))
            {
                steps.push(Step::Filter(key.trim(), value.trim().trim_matches(['"', '\''])));
            }
            rest = after.get(end + 1..).unwrap_or_default();
        } else {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            steps.push(Step::Field(&rest[..end]));
            rest = &rest[end..];
        }
    }
    steps
}

/// A duration as kubectl prints ages: `45s`, `3m12s`, `25m`, `5h3m`, `3d4h`, `2y10d`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{h}h", hours / 24),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return match (hours / 24) % 365 {
            0 => format!("{}y", hours / 24 / 365),
            d => format!("{}y{d}d", hours / 24 / 365),
        };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_print_like_kubectl() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (192, "3m12s"),
            (300, "5m"),
            (1500, "25m"),
            (18_180, "5h3m"),
            (100_800, "28h"),
            (273_600, "3d4h"),
            (63_072_000 + 864_000, "2y10d"),
        ];
        for (seconds, expected) in cases {
            assert_eq!(human_duration(seconds), expected, "{seconds}");
        }
    }

    #[test]
    fn json_paths_of_printer_columns() {
        let object = json!({"spec": {"podName": "cn-0"}, "status": {"conditions": [
            {"type": "Bound", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(json_path(&object, ".spec.podName"), [&json!("cn-0")]);
        assert_eq!(json_path(&object, ".status.conditions[1].type"), [&json!("Ready")]);
        assert_eq!(json_path(&object, ".status.conditions[?(@.type==\"Ready\")].status"), [&json!("True")]);
        assert_eq!(json_path(&object, ".status.conditions[*].type").len(), 2);
        assert!(json_path(&object, ".spec.nodeName").is_empty());
    }
}
