//! events.k8s.io/v1 events are core/v1 events under other field names; the
//! real server stores one and shows both, so `kubectl describe` (core/v1)
//! shows what kube-rs's recorder (events.k8s.io/v1) wrote.

use serde_json::{Map, Value, json};

fn moved(from: &mut Map<String, Value>, to: &mut Map<String, Value>, pairs: &[(&str, &str)]) {
    for (source, target) in pairs {
        if let Some(value) = from.remove(*source) {
            to.insert(target.to_string(), value);
        }
    }
}

pub fn core_to_events_v1(object: Value) -> Value {
    let Value::Object(mut core) = object else { return object };
    let mut out = Map::new();
    moved(
        &mut core,
        &mut out,
        &[
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
        ],
    );
    Value::Object(out)
}

pub fn events_v1_to_core(object: Value) -> Value {
    let Value::Object(mut v1) = object else { return object };
    let mut out = Map::new();
    let series = v1.get("series").cloned();
    moved(
        &mut v1,
        &mut out,
        &[
            ("metadata", "metadata"),
            ("regarding", "involvedObject"),
            ("note", "message"),
            ("reason", "reason"),
            ("type", "type"),
            ("action", "action"),
            ("related", "related"),
            ("eventTime", "eventTime"),
            ("series", "series"),
            ("reportingController", "reportingComponent"),
            ("reportingInstance", "reportingInstance"),
            ("deprecatedSource", "source"),
            ("deprecatedFirstTimestamp", "firstTimestamp"),
            ("deprecatedLastTimestamp", "lastTimestamp"),
            ("deprecatedCount", "count"),
        ],
    );
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
