//! Small types shared by the three resources.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A label to publish on a CN store in HAKeeper: one key, several values.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct CNLabel {
    /// The label's key.
    pub key: String,
    /// Its values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// Turns CN labels into HAKeeper's label map. A key given twice keeps the
/// values of its last entry, as a Go map built in order would.
pub fn cn_label_map(labels: &[CNLabel]) -> BTreeMap<String, Vec<String>> {
    labels.iter().map(|label| (label.key.clone(), label.values.clone())).collect()
}

/// A pod by name, with the node it ran on.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodRef {
    /// The pod's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_name: String,
    /// The node it ran on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
}

/// A duration in Go's notation (`90s`, `1h30m`, `500ms`), as the Go operator
/// writes `metav1.Duration`. The text is kept as written so that objects
/// round-trip unchanged; [`GoDuration::parse`] reads it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(transparent)]
pub struct GoDuration(#[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$|^0$"))] pub String);

/// Why a [`GoDuration`] could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{text}` is not a duration: write a number with a unit, e.g. `30s`, `15m` or `1h30m` (units ns, us, ms, s, m, h)"
)]
pub struct DurationError {
    pub text: String,
}

impl GoDuration {
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// Reads the text the way Go's `time.ParseDuration` does, except that
    /// negative durations, which no setting here can use, are refused.
    pub fn parse(&self) -> Result<Duration, DurationError> {
        parse_go_duration(&self.0).ok_or_else(|| DurationError { text: self.0.clone() })
    }
}

fn parse_go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    let mut total_ns: u128 = 0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let unit_ns: u128 = match unit {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return None;
        }
        let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
        let mut value = whole.checked_mul(unit_ns)?;
        let mut scale = unit_ns;
        for digit in fraction.chars() {
            scale /= 10;
            value += u128::from(digit.to_digit(10)?) * scale;
        }
        total_ns = total_ns.checked_add(value)?;
        rest = tail;
    }
    let secs = u64::try_from(total_ns / 1_000_000_000).ok()?;
    Some(Duration::new(secs, (total_ns % 1_000_000_000) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_like_go() {
        let cases = [
            ("0", Duration::ZERO),
            ("15s", Duration::from_secs(15)),
            ("1h30m", Duration::from_secs(5400)),
            ("1.5h", Duration::from_secs(5400)),
            ("500ms", Duration::from_millis(500)),
            ("2m3.5s", Duration::from_millis(123_500)),
            ("10us", Duration::from_micros(10)),
        ];
        for (text, expected) in cases {
            assert_eq!(GoDuration::new(text).parse(), Ok(expected), "{text}");
        }
    }

    #[test]
    fn malformed_durations_are_refused_with_an_example() {
        for text in ["", "15", "s", "1d", "-5s", "1h 30m", "."] {
            let err = GoDuration::new(text).parse().unwrap_err();
            assert!(err.to_string().contains("e.g. `30s`"), "{text}: {err}");
        }
    }

    #[test]
    fn a_repeated_cn_label_key_keeps_its_last_values() {
        let labels = [
            CNLabel { key: "role".into(), values: vec!["a".into()] },
            CNLabel { key: "role".into(), values: vec!["b".into()] },
        ];
        assert_eq!(cn_label_map(&labels).get("role"), Some(&vec!["b".to_string()]));
    }
}
