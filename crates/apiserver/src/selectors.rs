//! Label and field selectors in the text form of the API's query strings.

use serde_json::Value;

use crate::error::ApiError;

#[derive(Clone, Debug, PartialEq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed `labelSelector`: every requirement must hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelRequirement>);

/// Splits at commas outside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (index, ch) in text.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.into_iter().map(str::trim).filter(|part| !part.is_empty()).collect()
}

fn set_values(text: &str) -> Option<Vec<String>> {
    let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|value| value.trim().to_string()).collect())
}

impl LabelSelector {
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let bad =
            |part: &str| ApiError::bad_request(format!("unable to parse requirement: invalid label selector: {part}"));
        let mut requirements = Vec::new();
        for part in split_top_level(text) {
            let requirement = if let Some(key) = part.strip_prefix('!') {
                LabelRequirement::DoesNotExist(key.trim().to_string())
            } else if let Some((key, value)) = part.split_once("!=") {
                LabelRequirement::NotEquals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) = part.split_once("==").or_else(|| part.split_once('=')) {
                LabelRequirement::Equals(key.trim().into(), value.trim().into())
            } else if let Some((key, rest)) = part.split_once(" notin ") {
                LabelRequirement::NotIn(key.trim().into(), set_values(rest).ok_or_else(|| bad(part))?)
            } else if let Some((key, rest)) = part.split_once(" in ") {
                LabelRequirement::In(key.trim().into(), set_values(rest).ok_or_else(|| bad(part))?)
            } else if part.contains(char::is_whitespace) || part.contains('(') {
                return Err(bad(part));
            } else {
                LabelRequirement::Exists(part.to_string())
            };
            requirements.push(requirement);
        }
        Ok(Self(requirements))
    }

    /// Reads the structured form (`matchLabels`, `matchExpressions`) of a
    /// selector in an object, such as a PodDisruptionBudget's.
    pub fn from_object(selector: &Value) -> Result<Self, ApiError> {
        let bad = |what: &str| ApiError::bad_request(format!("invalid label selector: {what}"));
        let mut requirements = Vec::new();
        for (key, value) in selector["matchLabels"].as_object().into_iter().flatten() {
            let value = value.as_str().ok_or_else(|| bad(&format!("matchLabels.{key} is not a string")))?;
            requirements.push(LabelRequirement::Equals(key.clone(), value.to_owned()));
        }
        for expression in selector["matchExpressions"].as_array().into_iter().flatten() {
            let key = expression["key"].as_str().ok_or_else(|| bad("a matchExpression has no key"))?.to_owned();
            let values: Vec<String> = expression["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect();
            requirements.push(match expression["operator"].as_str() {
                Some("In") => LabelRequirement::In(key, values),
                Some("NotIn") => LabelRequirement::NotIn(key, values),
                Some("Exists") => LabelRequirement::Exists(key),
                Some("DoesNotExist") => LabelRequirement::DoesNotExist(key),
                other => return Err(bad(&format!("operator {other:?} of {key}"))),
            });
        }
        Ok(Self(requirements))
    }

    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let get = |key: &str| labels.get(key).and_then(Value::as_str);
        self.0.iter().all(|requirement| match requirement {
            LabelRequirement::Equals(key, value) => get(key) == Some(value.as_str()),
            LabelRequirement::NotEquals(key, value) => get(key) != Some(value.as_str()),
            LabelRequirement::In(key, values) => get(key).is_some_and(|v| values.iter().any(|x| x == v)),
            LabelRequirement::NotIn(key, values) => get(key).is_none_or(|v| !values.iter().any(|x| x == v)),
            LabelRequirement::Exists(key) => get(key).is_some(),
            LabelRequirement::DoesNotExist(key) => get(key).is_none(),
        })
    }
}

/// A parsed `fieldSelector`: `field=value` and `field!=value` terms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, String, bool)>);

impl FieldSelector {
    /// Only `metadata.name`, `metadata.namespace` and the resource's own
    /// `allowed` fields may be used; others are refused with 400, as the
    /// real server does.
    pub fn parse(text: &str, allowed: &[&str]) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for part in split_top_level(text) {
            let (field, value, equal) = if let Some((field, value)) = part.split_once("!=") {
                (field, value, false)
            } else if let Some((field, value)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (field, value, true)
            } else {
                return Err(ApiError::bad_request(format!("invalid selector: '{part}'; can't understand '{part}'")));
            };
            let field = field.trim();
            if !matches!(field, "metadata.name" | "metadata.namespace") && !allowed.contains(&field) {
                return Err(ApiError::bad_request(format!("field label not supported: {field}")));
            }
            terms.push((field.to_string(), value.trim().to_string(), equal));
        }
        Ok(Self(terms))
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, value, equal)| (field_value(object, field) == *value) == *equal)
    }
}

fn field_value(object: &Value, field: &str) -> String {
    let path = if field == "source" { "source.component" } else { field };
    let value = path.split('.').fold(object, |value, key| &value[key]);
    match value {
        Value::String(text) => text.clone(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => number.to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(labels: Value) -> Value {
        json!({"metadata": {"name": "p", "labels": labels}, "spec": {"nodeName": "n1"}})
    }

    #[test]
    fn every_set_based_form() {
        let object = pod(json!({"tier": "gold", "pool": "default"}));
        let cases = [
            ("tier=gold", true),
            ("tier==gold", true),
            ("tier!=gold", false),
            ("tier in (gold, silver)", true),
            ("tier notin (gold)", false),
            ("zone notin (a)", true),
            ("tier", true),
            ("!tier", false),
            ("!zone", true),
            ("tier in (gold),pool=default,!zone", true),
            ("tier in (silver),pool=default", false),
            ("", true),
        ];
        for (selector, expected) in cases {
            assert_eq!(LabelSelector::parse(selector).unwrap().matches(&object), expected, "{selector}");
        }
    }

    #[test]
    fn malformed_label_selectors_are_bad_requests() {
        for selector in ["tier in gold", "tier (x)", "a b"] {
            assert_eq!(LabelSelector::parse(selector).unwrap_err().code, 400, "{selector}");
        }
    }

    #[test]
    fn field_selectors_are_limited_to_what_the_resource_allows() {
        assert!(FieldSelector::parse("metadata.name=p", &[]).unwrap().matches(&pod(json!({}))));
        assert!(FieldSelector::parse("spec.nodeName=n1", &["spec.nodeName"]).unwrap().matches(&pod(json!({}))));
        assert!(!FieldSelector::parse("spec.nodeName!=n1", &["spec.nodeName"]).unwrap().matches(&pod(json!({}))));
        let error = FieldSelector::parse("spec.podName=x", &[]).unwrap_err();
        assert_eq!((error.code, error.message.as_str()), (400, "field label not supported: spec.podName"));
    }
}
