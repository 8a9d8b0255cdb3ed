//! The Go shape of a CNPool's `spec.template` (a CNSetSpec) and `spec.deps`.
//!
//! Field names are the Go JSON names (reference §1). Every struct keeps the
//! keys it does not model in a flattened `rest` map, so that a Go object read
//! and written back loses nothing: the Go CRD marks these parts schemaless
//! (overlay, config, the embedded LogSet) or carries fields a pool ignores
//! (serviceType, cnLabels, updateStrategy, …), and a user who moves a pool
//! between operators must get back what they wrote. Kubernetes objects inside
//! the overlay are k8s-openapi types, which know every field of the Go
//! operator's Kubernetes 1.27 types.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::GoDuration;
use k8s_openapi::api::core::v1::{
    Affinity, Container, EnvFromSource, EnvVar, HostAlias, Lifecycle, LocalObjectReference, PersistentVolumeClaim,
    PodDNSConfig, PodSecurityContext, Probe, ResourceRequirements, SecurityContext, Toleration,
    TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The CNSet webhook's `scalingConfig.storeDrainTimeout` (reference §1): a
/// pool's CNs always drain, for this long unless the pool or its template
/// says otherwise.
pub const DEFAULT_STORE_DRAIN_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Keys a struct does not model, kept as read.
pub type Rest = BTreeMap<String, Value>;

/// A CNPool's `spec.template`: the Go operator's CNSetSpec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct CNSetTemplate {
    /// The CN image; its tag is the MatrixOne version unless
    /// `semanticVersion` says otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Changes to the rendered pod and its main container (env, volumes,
    /// probes, affinity, tolerations, pod labels, …), as in Go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schemaless")]
    pub overlay: Option<Overlay>,
    /// Required by the Go CRD; a pool ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Topology keys to spread the pods over (one constraint each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread: Vec<String>,
    /// The pods' node selector.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// CN settings merged into the generated config.toml: TOML text, or an
    /// object of TOML keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schemaless")]
    pub config: Option<Value>,
    /// Arguments of mo-service; the webhook's default when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_args: Vec<String>,
    /// GOMEMLIMIT as a percentage of the memory limit, in (0, 100].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_percent: Option<i64>,
    /// Whether the CN exports metrics to Prometheus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export_to_prometheus: Option<bool>,
    /// `Pod` or `Service`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prom_discovery_scheme: Option<String>,
    /// The MatrixOne version, when the image tag is not one (e.g. `1.2.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semantic_version: Option<String>,
    /// The Go operator version the template was written for; 1.3 and later
    /// turn Go's in-place gates on (reference §1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_version: Option<String>,
    /// Size of a memory filesystem the CN binary is copied to and run from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_fs_size: Option<K8sQuantity>,
    /// A per-pod data volume for the CN's disk cache (not created by
    /// cnpool yet: a pool with one is held with a condition saying so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_volume: Option<CacheVolume>,
    /// Memory and disk sizes of the CN's shared storage cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_storage_cache: Option<SharedStorageCache>,
    /// A Python UDF server run beside the CN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_udf_sidecar: Option<PythonUdfSidecar>,
    /// `TP` or `AP` (deprecated in Go).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Draining of released CNs (`storeDrainTimeout`, `minDelaySeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling_config: Option<ScalingConfig>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CacheVolume {
    /// The volume's size (a Kubernetes quantity, e.g. `100Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<K8sQuantity>,
    /// The storage class of the volume claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// Unused for CNs (as in Go).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_cache_size: Option<K8sQuantity>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SharedStorageCache {
    /// Memory for the S3 cache (default: half the memory request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_cache_size: Option<K8sQuantity>,
    /// Disk for the S3 cache (default: 90 % of the cache volume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_cache_size: Option<K8sQuantity>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PythonUdfSidecar {
    /// Whether the sidecar runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Its port (default 50051).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i64>,
    /// Its image (default `composer000/mo-python-udf-server:latest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Changes to the sidecar container, like the main container's overlay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schemaless")]
    pub overlay: Option<SidecarOverlay>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalingConfig {
    /// Forced on for pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_drain_enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_drain_timeout: Option<GoDuration>,
    /// A released CN drains at least this long (default 15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_delay_seconds: Option<i32>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

/// What the overlay changes on the main container (Go `MainContainerOverlay`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MainContainerOverlay {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_from: Option<Vec<EnvFromSource>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mounts: Option<Vec<VolumeMount>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<Probe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<Probe>,
    /// Accepted, and never applied (the Go operator does not apply it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_probe: Option<Probe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub main_container_security_context: Option<SecurityContext>,
}

/// The Python UDF sidecar's overlay: a main-container overlay.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SidecarOverlay {
    #[serde(flatten)]
    pub container: MainContainerOverlay,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

/// The template's `overlay` (Go `Overlay`): main container and pod changes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Overlay {
    #[serde(flatten)]
    pub container: MainContainerOverlay,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<Volume>>,
    /// Go adds these to the CloneSet only with a cache volume; cnpool does not
    /// create PVCs (see the crate docs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_claims: Option<Vec<PersistentVolumeClaim>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<Container>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar_containers: Option<Vec<Container>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_aliases: Option<Vec<HostAlias>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_config: Option<PodDNSConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_annotations: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_process_namespace: Option<bool>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

/// A CNPool's `spec.deps` in the Go shape (Go `CNSetDeps`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct PoolDeps {
    /// A LogSet object used as a reference: its `metadata.name` and
    /// `metadata.namespace` (default: the pool's) name the LogSet the
    /// pool's CNs join. cnpool's older form `{name, namespace}` is accepted too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schemaless")]
    pub log_set: Option<LogSet>,
    /// A HAKeeper outside the cluster's LogSets, by address; used when
    /// `logSet` is not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_log_set: Option<ExternalLogSet>,
    /// Only waited for by Go; kept as read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schemaless")]
    pub dn_set: Option<Value>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

impl PoolDeps {
    /// The namespace and name of the LogSet `logSet` names: its
    /// `metadata`, else the older `{name, namespace}`; the namespace
    /// defaults to the pool's. `None` without a named `logSet` (validation
    /// refuses a `logSet` without a name).
    pub fn log_set_key(&self, pool_namespace: &str) -> Option<(String, String)> {
        let log_set = self.log_set.as_ref()?;
        let non_empty = |text: &Option<String>| text.clone().filter(|text| !text.is_empty());
        let name = non_empty(&log_set.metadata.name).or_else(|| non_empty(&log_set.name))?;
        let namespace = non_empty(&log_set.metadata.namespace)
            .or_else(|| non_empty(&log_set.namespace))
            .unwrap_or_else(|| pool_namespace.to_owned());
        Some((namespace, name))
    }

    /// `externalLogSet.haKeeperEndpoint`, trimmed, when set and not empty:
    /// the HAKeeper address of a pool without a `logSet`.
    pub fn external_endpoint(&self) -> Option<&str> {
        let endpoint = self.external_log_set.as_ref()?.ha_keeper_endpoint.trim();
        (!endpoint.is_empty()).then_some(endpoint)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalLogSet {
    /// `host:port` of the HAKeeper (log service) of the MatrixOne cluster.
    #[serde(rename = "haKeeperEndpoint")]
    pub ha_keeper_endpoint: String,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

/// A `core.matrixorigin.io/v1alpha1` LogSet: the parts a pool reads, both in
/// `deps.logSet` (only the name and namespace count there) and as read from
/// the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogSet {
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// cnpool's older form of `deps.logSet` (`{name, namespace}`), still
    /// accepted there; `metadata.name` wins. Never set on a LogSet object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The older form's namespace; `metadata.namespace` wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<LogSetSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<LogSetStatus>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogSetSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_storage: Option<SharedStorageProvider>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SharedStorageProvider {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Provider>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_system: Option<FileSystemProvider>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Provider {
    #[serde(default)]
    pub path: String,
    /// `aws` (default) or `minio`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub region: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub endpoint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_ref: Option<CertificateRef>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct CertificateRef {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub files: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct FileSystemProvider {
    #[serde(default)]
    pub path: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogSetStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<LogSetDiscovery>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub rest: Rest,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct LogSetDiscovery {
    #[serde(default)]
    pub address: String,
    #[serde(default)]
    pub port: i32,
}

/// The Go CRD keeps these parts schemaless; so does cnpool's.
fn schemaless(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}
