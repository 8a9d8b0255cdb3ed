//! Label selector matching, as the API server does it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `labels` satisfy every term of `selector`. An empty selector
/// matches everything; an unknown operator matches nothing, so a malformed
/// selector can never widen what a claim may take.
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_match = selector.match_labels.iter().flatten().all(|(key, value)| labels.get(key) == Some(value));
    labels_match
        && selector.match_expressions.iter().flatten().all(|requirement| {
            let values = requirement.values.as_deref().unwrap_or_default();
            let value = labels.get(&requirement.key);
            match requirement.operator.as_str() {
                "In" => value.is_some_and(|value| values.contains(value)),
                "NotIn" => value.is_none_or(|value| !values.contains(value)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.into(),
                operator: operator.into(),
                values: Some(values.iter().map(ToString::to_string).collect()),
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn match_labels_need_every_pair() {
        let selector =
            LabelSelector { match_labels: Some(labels(&[("pool", "default"), ("zone", "a")])), ..Default::default() };
        assert!(selector_matches(&selector, &labels(&[("pool", "default"), ("zone", "a"), ("x", "y")])));
        assert!(!selector_matches(&selector, &labels(&[("pool", "default")])));
        assert!(!selector_matches(&selector, &labels(&[("pool", "default"), ("zone", "b")])));
    }

    #[test]
    fn set_based_operators() {
        let pod = labels(&[("tier", "gold")]);
        assert!(selector_matches(&expression("tier", "In", &["gold", "silver"]), &pod));
        assert!(!selector_matches(&expression("tier", "In", &["silver"]), &pod));
        assert!(selector_matches(&expression("tier", "NotIn", &["silver"]), &pod));
        assert!(!selector_matches(&expression("tier", "NotIn", &["gold"]), &pod));
        assert!(selector_matches(&expression("zone", "NotIn", &["a"]), &pod), "NotIn matches an absent key");
        assert!(selector_matches(&expression("tier", "Exists", &[]), &pod));
        assert!(!selector_matches(&expression("tier", "DoesNotExist", &[]), &pod));
        assert!(selector_matches(&expression("zone", "DoesNotExist", &[]), &pod));
    }

    #[test]
    fn an_unknown_operator_matches_nothing() {
        assert!(!selector_matches(&expression("tier", "Like", &["gold"]), &labels(&[("tier", "gold")])));
    }

    #[test]
    fn the_empty_selector_matches_everything() {
        assert!(selector_matches(&LabelSelector::default(), &labels(&[])));
    }
}
