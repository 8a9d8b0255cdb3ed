//! Label selector matching, by kube's [`Selector`] so that a claim selects
//! what the API server would.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

/// Whether `labels` satisfy every term of `selector`. An empty selector
/// matches everything. A selector kube cannot read (an unknown operator, In
/// or NotIn without values) matches nothing, so a malformed selector can
/// never widen what a claim may take; validation names the bad field.
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    Selector::try_from(selector.clone()).is_ok_and(|selector| selector.matches(labels))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn requirement(key: &str, operator: &str, values: Option<&[&str]>) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: values.map(|values| values.iter().map(ToString::to_string).collect()),
        }
    }

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelector {
        LabelSelector { match_expressions: Some(vec![requirement(key, operator, Some(values))]), ..Default::default() }
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
    fn match_labels_and_expressions_must_all_hold() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("pool", "default")])),
            match_expressions: Some(vec![
                requirement("tier", "In", Some(&["gold", "silver"])),
                requirement("zone", "NotIn", Some(&["b"])),
                requirement("cn", "Exists", None),
                requirement("cordoned", "DoesNotExist", None),
            ]),
        };
        let fits = [("pool", "default"), ("tier", "gold"), ("zone", "a"), ("cn", "")];
        assert!(selector_matches(&selector, &labels(&fits)));
        for (broken, why) in [
            ([("pool", "other"), ("tier", "gold"), ("zone", "a"), ("cn", "")], "matchLabels"),
            ([("pool", "default"), ("tier", "bronze"), ("zone", "a"), ("cn", "")], "In"),
            ([("pool", "default"), ("tier", "gold"), ("zone", "b"), ("cn", "")], "NotIn"),
            ([("pool", "default"), ("tier", "gold"), ("zone", "a"), ("x", "")], "Exists"),
            ([("pool", "default"), ("tier", "gold"), ("cn", ""), ("cordoned", "")], "DoesNotExist"),
        ] {
            assert!(!selector_matches(&selector, &labels(&broken)), "{why} fails, so the selector does");
        }
    }

    #[test]
    fn a_selector_kube_cannot_read_matches_nothing() {
        let gold = labels(&[("tier", "gold")]);
        assert!(!selector_matches(&expression("tier", "Like", &["gold"]), &gold));
        let without_values = |operator| LabelSelector {
            match_expressions: Some(vec![requirement("tier", operator, None)]),
            ..Default::default()
        };
        assert!(!selector_matches(&without_values("In"), &gold));
        assert!(!selector_matches(&without_values("NotIn"), &labels(&[])), "not even the keys NotIn would allow");
    }

    #[test]
    fn the_empty_selector_matches_everything() {
        assert!(selector_matches(&LabelSelector::default(), &labels(&[])));
    }
}
