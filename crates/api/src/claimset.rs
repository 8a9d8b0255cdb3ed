//! `CNClaimSet`: a scalable set of identical claims, wire-compatible with the
//! Go matrixone-operator's object of the same name.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::claim::{CNClaimSpec, CNClaimStatus};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "core.matrixorigin.io",
    version = "v1alpha1",
    kind = "CNClaimSet",
    namespaced,
    status = "CNClaimSetStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "cncs",
    category = "matrixone",
    doc = "A set of identical CNClaims kept at `replicas`; scalable with `kubectl scale` and an HPA.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.labelSelector"
    ),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
/// How many claims the set keeps, and what each looks like.
#[serde(rename_all = "camelCase")]
pub struct CNClaimSetSpec {
    /// How many claims the set keeps. The CRD refuses a negative value: the
    /// scale subresource already does, so no stored set can carry one. The
    /// other limits (a pool's maxIdle and maxPods, a selector's operator) are
    /// left to the operator's validation: kube-apiserver 1.20 checks every
    /// update against the whole schema, so an object stored before such a
    /// limit could no longer have its finalizers removed (docs/install.md).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub replicas: i32,
    /// The claims to create.
    pub template: CNClaimTemplate,
    /// Selects the set's claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// Template of the set's claims.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CNClaimTemplate {
    /// Labels and annotations of each claim (its name is the set's, with a
    /// suffix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<EmbeddedMetadata>,
    /// The spec of each claim.
    pub spec: CNClaimSpec,
}

/// The parts of object metadata a template may carry.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddedMetadata {
    /// Ignored: each claim is named after the set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Labels put on each claim.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations put on each claim.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
/// The set's claims as the operator last saw them.
#[serde(rename_all = "camelCase")]
pub struct CNClaimSetStatus {
    /// Claims that exist.
    #[serde(default)]
    pub replicas: i32,
    /// Claims that are Bound or Outdated (holding a serving pod).
    #[serde(default)]
    pub ready_replicas: i32,
    /// Status of each claim of the set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<CNClaimStatus>,
    /// Label selector, as text, of the set's bound pods (for the scale
    /// subresource and an HPA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    /// Deprecated: kept for clients of the Go operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<String>,
    /// Standard conditions saying how the set stands.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
