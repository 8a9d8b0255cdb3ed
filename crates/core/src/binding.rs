//! The `pool.matrixorigin.io/binding` annotation a bound pod carries.
//!
//! Acquire records on the pod what the claim asked for, so that the CN store
//! is written from the pod alone (DESIGN §2, "Store") and release removes
//! exactly the labels acquire added. Its text is JSON:
//!
//! ```json
//! {"additionalLabelKeys":["team"],"cnLabels":{"account":["acme"],"role":["ap","tp"]}}
//! ```
//!
//! - `cnLabels`: the CN labels to publish on the store, key → values;
//! - `additionalLabelKeys`: the keys of `additionalPodLabels` acquire put on
//!   the pod.
//!
//! Both may be absent (read as empty). Fields this version does not know are
//! ignored, so a newer operator may add some.

use std::collections::BTreeSet;

use cnpool_registry::StoreLabels;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::model::ClaimView;

/// What a bound pod records about its claim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Binding {
    /// Labels for the pod's CN store while bound.
    #[serde(default)]
    pub cn_labels: StoreLabels,
    /// Keys of the claim's additional pod labels put on the pod.
    #[serde(default)]
    pub additional_label_keys: BTreeSet<String>,
}

/// Why a binding annotation could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "annotation {annotation} is not valid: {detail}; expected JSON like \
     {{\"cnLabels\":{{\"key\":[\"value\"]}},\"additionalLabelKeys\":[\"key\"]}} \
     (remove the annotation and the claim controller rewrites it)",
    annotation = cnpool_api::labels::BINDING
)]
pub struct BindingError {
    /// What the JSON parser objected to.
    pub detail: String,
}

impl Binding {
    /// The binding a claim's spec asks for.
    pub fn of_claim(claim: &ClaimView) -> Self {
        Self {
            cn_labels: claim.cn_labels.clone(),
            additional_label_keys: claim.applicable_pod_labels().map(|(key, _)| key.clone()).collect(),
        }
    }

    /// Reads the annotation's text.
    pub fn parse(text: &str) -> Result<Self, BindingError> {
        serde_json::from_str(text).map_err(|error| BindingError { detail: error.to_string() })
    }

    /// The annotation's text: keys in a fixed order, so that an unchanged
    /// binding renders to the same bytes and costs no write.
    pub fn render(&self) -> String {
        let labels: Map<String, Value> =
            self.cn_labels.iter().map(|(key, values)| (key.clone(), Value::from(values.clone()))).collect();
        let keys: Vec<Value> = self.additional_label_keys.iter().cloned().map(Value::from).collect();
        // Inserted alphabetically, so the text is the same whether or not
        // serde_json preserves insertion order.
        let mut object = Map::new();
        object.insert("additionalLabelKeys".into(), Value::Array(keys));
        object.insert("cnLabels".into(), Value::Object(labels));
        Value::Object(object).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Binding {
        Binding {
            cn_labels: [
                ("role".to_string(), vec!["ap".to_string(), "tp".to_string()]),
                ("account".to_string(), vec!["acme".to_string()]),
            ]
            .into_iter()
            .collect(),
            additional_label_keys: ["team".to_string()].into_iter().collect(),
        }
    }

    #[test]
    fn renders_the_documented_format() {
        // Written by hand from the module doc: object keys sorted, label
        // keys sorted, values in the claim's order, no whitespace.
        let expected = r#"{"additionalLabelKeys":["team"],"cnLabels":{"account":["acme"],"role":["ap","tp"]}}"#;
        assert_eq!(sample().render(), expected);
    }

    #[test]
    fn parses_what_it_renders_and_hand_written_text() {
        assert_eq!(Binding::parse(&sample().render()), Ok(sample()));
        let hand_written = r#"{ "cnLabels": {"role": ["ap", "tp"], "account": ["acme"]},
                                "additionalLabelKeys": ["team"], "futureField": 1 }"#;
        assert_eq!(Binding::parse(hand_written), Ok(sample()));
    }

    #[test]
    fn absent_fields_read_as_empty() {
        assert_eq!(Binding::parse("{}"), Ok(Binding::default()));
        assert_eq!(Binding::default().render(), r#"{"additionalLabelKeys":[],"cnLabels":{}}"#);
    }

    #[test]
    fn malformed_text_is_an_error_that_names_the_annotation() {
        for text in ["", "not json", r#"{"cnLabels":["role"]}"#, r#"{"additionalLabelKeys":"team"}"#] {
            let error = Binding::parse(text).unwrap_err();
            assert!(error.to_string().contains("pool.matrixorigin.io/binding"), "{text}: {error}");
        }
    }
}
