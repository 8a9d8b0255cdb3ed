//! `CNClaim`: a request for one CN pod from a pool, wire-compatible with the
//! Go matrixone-operator's object of the same name.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CNLabel, PodRef};

/// What a claim asks for. The operator writes `podName`, `nodeName` and
/// `poolName` once it binds; users write `podName` only to pre-bind at
/// creation or, together with `sourcePod`, to start a migration.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "core.matrixorigin.io",
    version = "v1alpha1",
    kind = "CNClaim",
    namespaced,
    status = "CNClaimStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "cncl",
    category = "matrixone",
    doc = "A claim on one warm MatrixOne CN pod from a CNPool, held exclusively until the claim is deleted.",
    printcolumn(name = "Pod", type_ = "string", json_path = ".spec.podName"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Pool", type_ = "string", json_path = ".spec.poolName"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.nodeName", priority = 1),
    printcolumn(name = "Owner", type_ = "string", json_path = ".spec.ownerName", priority = 1)
)]
#[serde(rename_all = "camelCase")]
pub struct CNClaimSpec {
    /// The pod this claim is bound to (or, at creation, the pod it asks for).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_name: String,
    /// Node of the bound pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// The pod being migrated away from; `podName` is then the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_pod: Option<PodRef>,
    /// Which pool pods qualify.
    pub selector: LabelSelector,
    /// Labels published on the CN store in HAKeeper while bound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cn_labels: Vec<CNLabel>,
    /// Recorded on the pod as `matrixorigin.io/owner` while bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_name: Option<String>,
    /// Labels put on the pod while bound. Keys under `pool.matrixorigin.io/`,
    /// `matrixorigin.io/` and `matrixone.cloud/` are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub additional_pod_labels: BTreeMap<String, String>,
    /// The pool this claim is nominated to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pool_name: String,
}

/// The claim condition that is True while the claim's pod runs an old
/// template of its pool; its `lastTransitionTime` is when the claim became
/// Outdated, from which the pool's `reclaimTimeout` counts.
pub const OUTDATED_CONDITION: &str = "Outdated";

/// Where a claim stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ClaimPhase {
    /// Waiting for a pod.
    Pending,
    /// Holding a pod whose CN store serves with the claim's labels.
    Bound,
    /// The pod it held is gone or no longer its own; a new one is found.
    Lost,
    /// Holding a pod of an old pool template; it will be moved.
    Outdated,
}

impl ClaimPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Bound => "Bound",
            Self::Lost => "Lost",
            Self::Outdated => "Outdated",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
/// Where the claim stands and what it holds, as the operator last saw it.
#[serde(rename_all = "camelCase")]
pub struct CNClaimStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ClaimPhase>,
    /// The CN store of the bound pod, as last observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<CNStoreStatus>,
    /// When the claim was first bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_time: Option<Time>,
    /// Drain progress of the source pod during a migration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrate: Option<MigrateStatus>,
    /// Standard conditions saying why the claim is where it is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The bound pod's CN store, as HAKeeper last showed it.
//
// `workState` stays the number the Go operator writes, so that objects of
// either operator read the same; cnpool writes its name beside it as
// `workStateName`, derived from the number whenever the status is written
// (never read back: the number is the truth). Hence the hand-written
// `Serialize` below, around the derived one (`remote = "Self"`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(remote = "Self", rename_all = "camelCase")]
#[schemars(rename = "CNStoreStatus", transform = describe_work_state_name)]
pub struct CNStoreStatus {
    /// The CN store's UUID in HAKeeper (the pod's `matrixorigin.io/cn-uuid`).
    #[serde(rename = "serviceID", default, skip_serializing_if = "Option::is_none")]
    pub service_id: Option<String>,
    /// The CN's lock service address, as HAKeeper lists it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_service_address: Option<String>,
    /// The CN's pipeline (service) address, as HAKeeper lists it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_service_address: Option<String>,
    /// Where the CN serves SQL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql_address: Option<String>,
    /// The CN's query service address (session and pipeline counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_address: Option<String>,
    /// HAKeeper work state: 0 Unknown, 1 Working, 2 Draining, 3 Drained
    /// (its name is in `workStateName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_state: Option<i32>,
    /// The labels HAKeeper holds for the store (the claim's CN labels once
    /// it serves the claim).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<CNLabel>,
    /// When the store was first seen serving this claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_time: Option<Time>,
    /// The pod name under the Go operator's key. The Go type gives its pod
    /// name field the JSON key `string`; read it, write `podName` beside it.
    #[serde(rename = "string", default, skip_serializing_if = "Option::is_none")]
    pub legacy_pod_name: Option<String>,
    /// The bound pod's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    /// UID of the bound pod: a pod recreated under the same name is another
    /// pod, and the claim notices.
    #[serde(rename = "podUID", default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
}

impl CNStoreStatus {
    /// The recorded pod name, from `podName` or else the Go operator's key.
    pub fn pod_name(&self) -> Option<&str> {
        self.pod_name.as_deref().or(self.legacy_pod_name.as_deref())
    }

    /// Records the pod name under both keys, so that the Go operator and
    /// older clients still read it.
    pub fn set_pod_name(&mut self, name: &str) {
        self.pod_name = Some(name.to_owned());
        self.legacy_pod_name = Some(name.to_owned());
    }

    /// The name of `work_state` (`Working`, ...); none for a number HAKeeper
    /// does not define.
    pub fn work_state_name(&self) -> Option<&'static str> {
        WORK_STATES.get(usize::try_from(self.work_state?).ok()?).copied()
    }
}

/// HAKeeper's work states, by number (reference/hakeeper-protocol.md).
const WORK_STATES: [&str; 4] = ["Unknown", "Working", "Draining", "Drained"];

impl Serialize for CNStoreStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Named<'a> {
            #[serde(flatten, serialize_with = "fields")]
            status: &'a CNStoreStatus,
            #[serde(skip_serializing_if = "Option::is_none")]
            work_state_name: Option<&'static str>,
        }
        fn fields<S: serde::Serializer>(status: &&CNStoreStatus, serializer: S) -> Result<S::Ok, S::Error> {
            CNStoreStatus::serialize(status, serializer)
        }
        Named { status: self, work_state_name: self.work_state_name() }.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CNStoreStatus {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // The derived reading: `workStateName` is ignored like any unknown key.
        CNStoreStatus::deserialize(deserializer)
    }
}

/// Adds `workStateName`, which only the hand-written `Serialize` writes, to
/// the schema.
fn describe_work_state_name(schema: &mut schemars::Schema) {
    let name = serde_json::json!({
        "description": "The name of `workState`: Unknown, Working, Draining or Drained. Written by cnpool from \
                        the number; absent on objects the Go operator wrote.",
        "type": "string",
        "enum": WORK_STATES,
    });
    if let Some(properties) = schema.get_mut("properties").and_then(serde_json::Value::as_object_mut) {
        properties.insert("workStateName".to_owned(), name);
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrateStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Workload>,
}

/// What still runs on a CN: it may be recycled when all three are zero.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Workload {
    /// Client sessions still open on the CN.
    #[serde(default)]
    pub connections: i64,
    /// Query pipelines still running on it.
    #[serde(default)]
    pub pipelines: i64,
    /// Shard replicas it still hosts.
    #[serde(default)]
    pub replicas: i64,
}

impl CNClaim {
    pub fn phase(&self) -> Option<ClaimPhase> {
        self.status.as_ref().and_then(|status| status.phase)
    }
}
