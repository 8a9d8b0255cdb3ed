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
        if is_core_pods(res) {
            // kubectl drain evicts only where discovery lists this; else it deletes.
            listed.push(json!({"name": "pods/eviction", "singularName": "", "namespaced": true,
                "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]}));
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

/// Whether `res` is core/v1 pods, which have the eviction subresource.
pub fn is_core_pods(res: &ResourceInfo) -> bool {
    res.group.is_empty() && res.plural == "pods"
}

/// `/openapi/v3`: one document per group-version.
pub fn openapi_v3_root(resources: &[Arc<ResourceInfo>]) -> Value {
    let mut paths = serde_json::Map::new();
    for res in resources {
        let key = group_version_path(&res.group, &res.version);
        paths.insert(key.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{key}")}));
    }
    json!({"paths": paths})
}

fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

/// The OpenAPI v3 document of one group-version. It declares what kubectl
/// looks for before it validates on the client: the `fieldValidation`
/// parameter, so `kubectl apply` leaves validation to the server (which
/// then refuses unknown fields under `fieldValidation=Strict`).
pub fn openapi_v3_group_version(resources: &[Arc<ResourceInfo>], group: &str, version: &str) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for res in resources.iter().filter(|res| res.group == group && res.version == version) {
        let gvk = json!({"group": res.group, "version": res.version, "kind": res.kind});
        let parameters = json!([
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}}
        ]);
        let operation = |verb: &str| {
            json!({
                "operationId": format!("{verb}{}", res.kind),
                "parameters": parameters,
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": verb,
                "x-kubernetes-group-version-kind": gvk,
            })
        };
        let base = format!("/{}", group_version_path(&res.group, &res.version));
        let collection = if res.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", res.plural)
        } else {
            format!("{base}/{}", res.plural)
        };
        paths.insert(collection.clone(), json!({"get": operation("list"), "post": operation("post")}));
        paths.insert(
            format!("{collection}/{{name}}"),
            json!({"get": operation("get"), "put": operation("put"), "patch": operation("patch"), "delete": operation("delete")}),
        );
        let schema_name = format!("{}.{}.{}", reverse_domain(&res.group), res.version, res.kind);
        let mut schema = res.schema.clone().unwrap_or_else(|| json!({"type": "object"}));
        schema["x-kubernetes-group-version-kind"] = json!([gvk]);
        schemas.insert(schema_name, schema);
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0+cnpool-embedded"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// `core.matrixorigin.io` → `io.matrixorigin.core`, as the real server names schemas.
fn reverse_domain(group: &str) -> String {
    if group.is_empty() {
        return "io.k8s.api.core".into();
    }
    group.split('.').rev().collect::<Vec<_>>().join(".")
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
