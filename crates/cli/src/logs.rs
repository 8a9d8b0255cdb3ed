//! Log lines as JSON for a log pipeline (`--log-format json`): one flat
//! object per line, `{"ts":"2026-12-05T10:00:00.123456Z","level":"info",
//! "msg":"claim bound","target":"cnpool_controllers::claim::status",
//! "claim":"c1",...}`: the time in RFC 3339 (UTC), the level in lower case,
//! and the event's fields at the top level beside them (a field that would
//! take one of those four names is dropped rather than replace it).

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The formatter of `--log-format json`.
pub struct FlatJson;

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut ts = String::new();
        SystemTime.format_time(&mut Writer::new(&mut ts))?;
        let mut fields = Fields::default();
        event.record(&mut fields);
        let metadata = event.metadata();
        let mut line = Map::new();
        line.insert("ts".into(), Value::String(ts));
        line.insert("level".into(), Value::String(metadata.level().as_str().to_ascii_lowercase()));
        line.insert("msg".into(), fields.0.remove("message").unwrap_or_else(|| Value::String(String::new())));
        line.insert("target".into(), Value::String(metadata.target().to_owned()));
        for (key, value) in fields.0 {
            line.entry(key).or_insert(value);
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// An event's fields as JSON values: numbers and booleans as such, the rest
/// as the text the field's `%` or `?` gives.
#[derive(Default)]
struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0.insert(field.name().into(), value.to_string().into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().into(), format!("{value:?}").into());
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex, PoisonError};

    use super::*;

    /// Lines written, for the subscriber under test.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logged(emit: impl FnOnce()) -> Value {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt().event_format(FlatJson).with_writer(move || writer.clone()).finish();
        tracing::subscriber::with_default(subscriber, emit);
        let bytes = captured.0.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let text = String::from_utf8(bytes).unwrap_or_default();
        assert_eq!(text.lines().count(), 1, "{text}");
        serde_json::from_str(&text).unwrap_or_default()
    }

    #[test]
    fn an_event_is_one_flat_object_with_ts_level_and_msg() {
        let error = std::io::Error::other("connection refused");
        let line = logged(|| tracing::warn!(pool = "mo", pods = 3, leading = true, %error, "scaled out"));
        assert_eq!(line["level"], "warn");
        assert_eq!(line["msg"], "scaled out");
        assert_eq!((&line["pool"], &line["pods"], &line["leading"]), (&"mo".into(), &3.into(), &true.into()));
        assert_eq!(line["error"], "connection refused");
        let ts = line["ts"].as_str().unwrap_or_default();
        assert!(ts.len() > 20 && ts.ends_with('Z') && ts.contains('T'), "RFC 3339 in UTC: {ts}");
        assert!(line.get("fields").is_none(), "nothing nested: {line}");
    }

    #[test]
    fn a_field_cannot_replace_the_line_s_own_keys() {
        let line = logged(|| tracing::info!(level = "forged", "message"));
        assert_eq!(line["level"], "info");
    }
}
