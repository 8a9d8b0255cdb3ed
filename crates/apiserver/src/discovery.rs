//! Discovery documents: what kubectl and kube-rs ask before anything else.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::resources::ResourceInfo;

/// The Kubernetes version the embedded server answers to: the API it
/// follows is that of k8s-openapi's `v1_33` feature.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0+cnpool-embedded",
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "2026-11-01T00:00:00Z",
        "goVersion": "",
        "compiler": "rustc",
        "platform": "linux/amd64"
    })
}

pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    })
}

/// Groups with their versions, the preferred (first registered) one first.
fn groups(resources: &[Arc<ResourceInfo>]) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for res in resources.iter().filter(|res| !res.group.is_empty()) {
        let versions = groups.entry(res.group.clone()).or_default();
        if !versions.contains(&res.version) {
            versions.push(res.version.clone());
        }
    }
    for versions in groups.values_mut() {
        versions.sort_by_key(|version| std::cmp::Reverse(version_priority(version)));
    }
    groups
}

/// Kubernetes version order: GA before beta before alpha, higher first.
fn version_priority(version: &str) -> (u8, u32, u32) {
    let rest = version.trim_start_matches('v');
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    let (stage, minor) = if let Some(n) = tail.strip_prefix("beta") {
        (1, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (0, n.parse().unwrap_or(0))
    } else {
        (2, 0)
    };
    (stage, major, minor)
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let listed: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v})).collect();
    json!({"name": name, "versions": listed, "preferredVersion": listed.first().cloned().unwrap_or(Value::Null)})
}

pub fn group_list(resources: &[Arc<ResourceInfo>]) -> Value {
    let groups: Vec<Value> = groups(resources).iter().map(|(name, versions)| group_json(name, versions)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(resources: &[Arc<ResourceInfo>], name: &str) -> Option<Value> {
    let groups = groups(resources);
    let versions = groups.get(name)?;
    let mut document = group_json(name, versions);
    document["kind"] = json!("APIGroup");
    document["apiVersion"] = json!("v1");
    Some(document)
}

const VERBS: [&str; 8] = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

pub fn resource_list(resources: &[Arc<ResourceInfo>], group: &str, version: &str) -> Option<Value> {
    let matching: Vec<&Arc<ResourceInfo>> =
        resources.iter().filter(|res| res.group == group && res.version == version).collect();
    if matching.is_empty() {
        return None;
    }
    let mut listed = Vec::new();
    for res in matching {
        let mut entry = json!({
            "name": res.plural,
            "singularName": res.singular,
            "namespaced": res.namespaced,
            "kind": res.kind,
            "verbs": VERBS,
        });
        if !res.short_names.is_empty() {
            entry["shortNames"] = json!(res.short_names);
        }
        if !res.categories.is_empty() {
            entry["categories"] = json!(res.categories);
        }
        listed.push(entry);
        if res.status {
            listed.push(
                json!({"name": format!("{}/status", res.plural), "singularName": "", "namespaced": res.namespaced,
                "kind": res.kind, "verbs": ["get", "patch", "update"]}),
            );
        }
        if res.scale.is_some() {
            listed.push(
                json!({"name": format!("{}/scale", res.plural), "singularName": "", "namespaced": res.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}),
            );
        }
    }
    let group_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": listed}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ga_versions_are_preferred_over_beta() {
        let mut versions = vec!["v1beta1".to_string(), "v1".to_string(), "v1alpha1".to_string(), "v2".to_string()];
        versions.sort_by_key(|version| std::cmp::Reverse(version_priority(version)));
        assert_eq!(versions, ["v2", "v1", "v1beta1", "v1alpha1"]);
    }
}
