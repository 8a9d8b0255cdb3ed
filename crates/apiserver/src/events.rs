//! events.k8s.io/v1 events are core/v1 events under other field names; the
//! real server stores one and shows both, so `kubectl describe` (core/v1)
//! shows what kube-rs's recorder (events.k8s.io/v1) wrote.

use serde_json::{Map, Value, json};

/// core/v1 field → events.k8s.io/v1 field.
const FIELDS: [(&str, &str); 15] = [
    ("metadata", "metadata"),
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reason", "reason"),
    ("type", "type"),
    ("action", "action"),
    ("related", "related"),
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("reportingComponent", "reportingController"),
    ("reportingInstance", "reportingInstance"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename(from: Map<String, Value>, rename: impl Fn(&str) -> Option<&'static str>) -> Map<String, Value> {
    from.into_iter().filter_map(|(key, value)| rename(&key).map(|to| (to.to_string(), value))).collect()
}

pub fn core_to_events_v1(object: Value) -> Value {
    let Value::Object(core) = object else { return object };
    Value::Object(rename(core, |key| FIELDS.iter().find(|(c, _)| *c == key).map(|(_, v1)| *v1)))
}

pub fn events_v1_to_core(object: Value) -> Value {
    let Value::Object(v1) = object else { return object };
    let series = v1.get("series").cloned();
    let mut out = rename(v1, |key| FIELDS.iter().find(|(_, v)| *v == key).map(|(core, _)| *core));
    if !out.contains_key("source")
        && let Some(component) = out.get("reportingComponent").cloned()
    {
        out.insert("source".into(), json!({"component": component}));
    }
    if let Some(series) = series {
        out.insert("count".into(), series["count"].clone());
        out.insert("lastTimestamp".into(), series["lastObservedTime"].clone());
    }
    if !out.contains_key("involvedObject") {
        out.insert("involvedObject".into(), json!({}));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_events_v1_event_reads_back_unchanged_through_core() {
        let v1 = json!({
            "metadata": {"name": "e1", "namespace": "default"},
            "regarding": {"kind": "CNClaim", "name": "c1", "namespace": "default", "uid": "u1"},
            "note": "bound to cn-0",
            "reason": "Bound",
            "type": "Normal",
            "action": "Acquire",
            "eventTime": "2026-11-29T10:00:00.000000Z",
            "reportingController": "cnpool",
            "reportingInstance": "cnpool-0",
        });
        let core = events_v1_to_core(v1.clone());
        assert_eq!(core["involvedObject"]["name"], "c1");
        assert_eq!(core["message"], "bound to cn-0");
        assert_eq!(core["source"]["component"], "cnpool");
        let mut back = core_to_events_v1(core);
        back.as_object_mut().unwrap().remove("deprecatedSource");
        assert_eq!(back, v1);
    }
}
