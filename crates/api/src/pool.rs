//! `CNPool`: a pool of warm CN pods created from a template.
//!
//! A Go operator's CNPool applies unchanged: `spec.template` is its CNSetSpec
//! (rendered into pods the way the Go operator renders a CN, see
//! cnpool-render) and `spec.deps` its `logSet` object / `externalLogSet`.
//! Differences from the Go operator's CNPool (reference/matrixone-pool-api.md):
//! - `spec.podTemplate` is new: a plain Kubernetes pod template, for users
//!   without MatrixOne's CNSet. A pool sets exactly one of the two.
//! - `spec.deps.logSet` also accepts cnpool's older `{name, namespace}`, and
//!   `externalLogSet.haKeeperEndpoint` (never read by Go) is the HAKeeper of
//!   pools that use it.
//! - `spec.strategy.drainStrategy` is new: drain timeout and minimum delay
//!   were operator-wide settings in Go.
//! - `status` is filled in (it was empty in Go).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cnset::{CNSetTemplate, PoolDeps};
use crate::common::GoDuration;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "core.matrixorigin.io",
    version = "v1alpha1",
    kind = "CNPool",
    namespaced,
    status = "CNPoolStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "cnpl",
    category = "matrixone",
    doc = "A pool of warm MatrixOne CN pods handed out exclusively to CNClaims.",
    printcolumn(name = "Idle", type_ = "integer", json_path = ".status.idle"),
    printcolumn(name = "Bound", type_ = "integer", json_path = ".status.bound"),
    printcolumn(name = "Pending", type_ = "integer", json_path = ".status.pendingClaims"),
    printcolumn(name = "Max", type_ = "integer", json_path = ".spec.strategy.scaleStrategy.maxPods"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Draining", type_ = "integer", json_path = ".status.draining", priority = 1),
    printcolumn(name = "Revision", type_ = "string", json_path = ".status.currentRevision", priority = 1)
)]
/// The pods a pool keeps: their template and labels, where their CN stores
/// register, and how many stay warm.
#[serde(rename_all = "camelCase")]
pub struct CNPoolSpec {
    /// The CN template in the Go operator's shape (a CNSetSpec: image,
    /// resources, config, overlay, …), rendered into pods the way the Go
    /// operator renders a CN. Set this or `podTemplate`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<CNSetTemplate>,
    /// A plain Kubernetes pod template for the pool's CN pods, for clusters
    /// without MatrixOne's CNSet; the operator adds its own labels, the
    /// headless Service's subdomain and the CN store finalizer. Set this or
    /// `template`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::pod_template")]
    pub pod_template: Option<PodTemplateSpec>,
    /// Labels put on every pod of the pool; claims select pods by them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_labels: BTreeMap<String, String>,
    /// Where the pool's CN stores are registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deps: Option<PoolDeps>,
    /// How the pool scales, rolls a new template out and drains released
    /// CNs.
    #[serde(default)]
    pub strategy: PoolStrategy,
}

impl CNPoolSpec {
    /// The labels the template puts on pods: `podTemplate.metadata.labels`,
    /// or the Go-shaped template's `overlay.podLabels`.
    pub fn template_labels(&self) -> BTreeMap<String, String> {
        let from_pod_template =
            self.pod_template.as_ref().and_then(|template| template.metadata.as_ref()?.labels.clone());
        let from_overlay = self.template.as_ref().and_then(|template| template.overlay.as_ref()?.pod_labels.clone());
        from_pod_template.or(from_overlay).unwrap_or_default()
    }
}

impl CNPool {
    /// The labels every pod of the pool carries whatever its phase or owner:
    /// the template's, the pool's `podLabels`, and the pool's name. A
    /// claim's selector matches the pool's pods exactly when it matches
    /// these.
    pub fn pod_labels(&self) -> BTreeMap<String, String> {
        let mut pod_labels = self.spec.template_labels();
        pod_labels.extend(self.spec.pod_labels.clone());
        pod_labels.insert(crate::labels::POOL_NAME.to_owned(), self.metadata.name.clone().unwrap_or_default());
        pod_labels
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
/// How the pool scales, rolls out and drains.
#[serde(rename_all = "camelCase")]
pub struct PoolStrategy {
    /// How many pods the pool keeps.
    #[serde(default)]
    pub scale_strategy: ScaleStrategy,
    /// How claims on pods of an old template move to current ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
    /// How a released CN drains before it is Idle again or terminated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_strategy: Option<DrainStrategy>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
/// How many pods the pool keeps.
#[serde(rename_all = "camelCase")]
pub struct ScaleStrategy {
    /// Idle pods kept warm beyond those in use and those pending claims need.
    #[serde(default)]
    pub max_idle: i32,
    /// Upper bound on the pool's pods; unset means no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
/// How claims on pods of an old template move to current ones.
#[serde(rename_all = "camelCase")]
pub struct UpdateStrategy {
    /// How long a claim on a pod of an old template may stay before the
    /// operator migrates it regardless (Go duration, e.g. `1h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_timeout: Option<GoDuration>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
/// How a released CN drains before it is Idle again or terminated.
#[serde(rename_all = "camelCase")]
pub struct DrainStrategy {
    /// A draining CN that still has work after this long is terminated
    /// (default `30m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<GoDuration>,
    /// A drained CN returns to Idle no sooner than this after its release
    /// (default `15s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_delay: Option<GoDuration>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
/// The pool's pods by phase, as the operator last counted them.
#[serde(rename_all = "camelCase")]
pub struct CNPoolStatus {
    /// All pods of the pool.
    #[serde(default)]
    pub replicas: i32,
    /// Pods warm and free, ready to be claimed.
    #[serde(default)]
    pub idle: i32,
    /// Pods held by a claim.
    #[serde(default)]
    pub bound: i32,
    /// Pods released by their claim, draining their sessions before they
    /// are Idle again or terminated.
    #[serde(default)]
    pub draining: i32,
    /// Pods being deleted (their CN store removed from HAKeeper first).
    #[serde(default)]
    pub terminating: i32,
    /// Claims nominated to the pool and waiting for a pod.
    #[serde(default)]
    pub pending_claims: i32,
    /// Revision hash of the current template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,
    /// Standard conditions saying how the pool stands.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
