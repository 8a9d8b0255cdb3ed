//! Readers from Kubernetes objects and HAKeeper's types into the core's
//! views ([`crate::model`]).
//!
//! Annotations the operator writes itself are read leniently: a
//! `reclaimed-at` that is not RFC 3339 reads as absent, a
//! `pod-deletion-cost` that is not an integer as 0. Whether a pod has
//! `failed` is read from its phase (Failed or Succeeded) only; a controller
//! that also judges container crashes sets the field itself. Whether the
//! pod's node is cordoned (`spec.unschedulable`) is not on the pod: the
//! caller, which watches Nodes, says so.

use std::collections::BTreeMap;
use std::time::Duration;

use cnpool_api::labels;
use cnpool_api::{
    CNClaim, CNClaimSet, CNPool, DurationError, GoDuration, OUTDATED_CONDITION, PodPhase, cn_label_map, cn_store_uuid,
};
use cnpool_registry::{CnStore, Workload};
use k8s_openapi::api::core::v1::Pod;

use crate::model::{ClaimSetView, ClaimView, MemberPod, MemberView, PodView, PoolView, StoreView};

/// Drain timeout of a pool that sets none.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Minimum delay before a drained CN is reused, for a pool that sets none.
pub const DEFAULT_MIN_DELAY: Duration = Duration::from_secs(15);

/// The operator's drain settings for pools whose spec says none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainDefaults {
    /// Drain timeout of a plain pod template's pool (a Go-shaped template
    /// has its own, [`cnpool_api::cnset::DEFAULT_STORE_DRAIN_TIMEOUT`]).
    pub timeout: Duration,
    /// Rest of a drained CN before it is Idle again.
    pub min_delay: Duration,
}

impl Default for DrainDefaults {
    fn default() -> Self {
        Self { timeout: DEFAULT_DRAIN_TIMEOUT, min_delay: DEFAULT_MIN_DELAY }
    }
}

/// Why an object could not be read into a view.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// A field the API server always sets is absent.
    #[error("{kind} has no {field}: read objects from the API server, or set {field} when building one by hand")]
    MissingField {
        /// The object's kind.
        kind: &'static str,
        /// The missing field's path.
        field: &'static str,
    },
    /// A duration in the pool's spec cannot be read.
    #[error("CNPool {pool}: {field}: {error}")]
    Duration {
        /// The pool's name.
        pool: String,
        /// The field's path.
        field: &'static str,
        /// What is wrong with it.
        error: DurationError,
    },
}

impl From<&CnStore> for StoreView {
    fn from(store: &CnStore) -> Self {
        Self { uuid: store.uuid.clone(), work_state: store.work_state, labels: store.labels.clone() }
    }
}

fn required<T: Clone>(value: Option<&T>, kind: &'static str, field: &'static str) -> Result<T, ConvertError> {
    value.cloned().ok_or(ConvertError::MissingField { kind, field })
}

fn non_empty(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_owned())
}

/// Reads a pod; `node_cordoned` says whether the node it runs on is marked
/// unschedulable (`kubectl cordon`, the first step of `kubectl drain`),
/// which the decisions treat as `matrixorigin.io/store-cordon`.
pub fn pod_view(pod: &Pod, node_cordoned: bool) -> Result<PodView, ConvertError> {
    let meta = &pod.metadata;
    let labels = meta.labels.clone().unwrap_or_default();
    let label = |key: &str| labels.get(key).and_then(|value| non_empty(value));
    let annotation = |key: &str| meta.annotations.as_ref().and_then(|annotations| annotations.get(key));
    let name: String = required(meta.name.as_ref(), "Pod", "metadata.name")?;
    let pod_phase = pod.status.as_ref().and_then(|status| status.phase.as_deref());
    let subdomain = pod.spec.as_ref().and_then(|spec| spec.subdomain.as_deref());
    Ok(PodView {
        uid: required(meta.uid.as_ref(), "Pod", "metadata.uid")?,
        created: required(meta.creation_timestamp.as_ref(), "Pod", "metadata.creationTimestamp")?.0,
        pool: label(labels::POOL_NAME),
        phase: labels.get(labels::PHASE).and_then(|phase| PodPhase::parse(phase)),
        claim_uid: label(labels::CLAIM_UID),
        claimed_by: label(labels::CLAIMED_BY),
        revision: label(labels::REVISION).or_else(|| go_cn_set_revision(&labels)),
        outdated: labels.contains_key(labels::OUTDATED),
        deleting: meta.deletion_timestamp.is_some(),
        failed: matches!(pod_phase, Some("Failed" | "Succeeded")),
        store_overdue: false,
        node: pod.spec.as_ref().and_then(|spec| spec.node_name.clone()),
        last_owner: label(labels::LAST_OWNER),
        delete_on_reclaim: annotation(labels::DELETE_ON_RECLAIM).is_some(),
        reclaimed_at: annotation(labels::RECLAIMED_AT).and_then(|time| time.parse().ok()),
        cordoned: node_cordoned || annotation(labels::STORE_CORDON).is_some(),
        // Hashing the name is the costly part of reading a pod: only for a
        // pod without the label.
        store_uuid: label(labels::CN_UUID)
            .or_else(|| subdomain.zip(meta.namespace.as_deref()).map(|(sub, ns)| cn_store_uuid(&name, sub, ns))),
        deletion_cost: annotation(labels::POD_DELETION_COST).and_then(|cost| cost.parse().ok()).unwrap_or(0),
        binding: annotation(labels::BINDING).cloned(),
        workload: annotation(labels::SCORE).and_then(|score| workload_of_score(score)),
        name,
        labels,
    })
}

/// The revision of a pod the Go operator rendered through its CN set
/// `<pool>-<hash>` (reference §0): the hash, which is what cnpool's revision
/// of a Go-shaped template is, so that at cutover a Go pod of the current
/// template is current and one of an older CN set is Outdated.
fn go_cn_set_revision(labels: &BTreeMap<String, String>) -> Option<String> {
    if labels.get(labels::COMPONENT).map(String::as_str) != Some(labels::CN_SET_COMPONENT) {
        return None;
    }
    let pool = labels.get(labels::POOL_NAME)?;
    let hash = labels.get(labels::INSTANCE)?.strip_prefix(pool.as_str())?.strip_prefix('-')?;
    non_empty(hash)
}

/// Reads a claim.
pub fn claim_view(claim: &CNClaim) -> Result<ClaimView, ConvertError> {
    let meta = &claim.metadata;
    let spec = &claim.spec;
    let status = claim.status.as_ref();
    let store = status.and_then(|status| status.store.as_ref());
    let bound_time = status.and_then(|status| status.bound_time.as_ref()).or(store.and_then(|s| s.bound_time.as_ref()));
    let status_pod_uid = store.and_then(|store| store.pod_uid.as_deref()).and_then(non_empty);
    // A value not of the form `name/uid` (edited by hand) records nothing,
    // and the claim falls back on its status.
    let recorded = meta
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(labels::RECORDED_POD))
        .and_then(|value| value.split_once('/'))
        .filter(|(name, uid)| !name.is_empty() && !uid.is_empty());
    Ok(ClaimView {
        name: required(meta.name.as_ref(), "CNClaim", "metadata.name")?,
        uid: required(meta.uid.as_ref(), "CNClaim", "metadata.uid")?,
        deleting: meta.deletion_timestamp.is_some(),
        has_finalizer: meta.finalizers.iter().flatten().any(|finalizer| finalizer == labels::CLAIM_FINALIZER),
        owner_name: spec.owner_name.as_deref().and_then(non_empty),
        selector: spec.selector.clone(),
        pool_name: non_empty(&spec.pool_name),
        pod_name: non_empty(&spec.pod_name),
        source_pod: spec.source_pod.as_ref().and_then(|source| non_empty(&source.pod_name)),
        phase: claim.phase(),
        recorded_pod_uid: recorded.map(|(_, uid)| uid.to_owned()).or_else(|| status_pod_uid.clone()),
        recorded_pod_name: match recorded {
            Some((name, _)) => non_empty(name),
            None => store.and_then(|store| store.pod_name()).and_then(non_empty),
        },
        status_pod_uid,
        bound_time: bound_time.map(|time| time.0),
        cn_labels: cn_label_map(&spec.cn_labels),
        additional_pod_labels: spec.additional_pod_labels.clone(),
        claim_set: meta.labels.as_ref().and_then(|labels| labels.get(labels::CLAIM_SET)).and_then(|set| non_empty(set)),
        invalid: cnpool_api::validation::validate_claim_spec(spec).err(),
        drain_reported: status.and_then(|status| status.migrate.as_ref()?.source).map(|source| Workload {
            sessions: u64::try_from(source.connections).unwrap_or(0),
            pipelines: u64::try_from(source.pipelines).unwrap_or(0),
            replicas: u64::try_from(source.replicas).unwrap_or(0),
        }),
        created: meta.creation_timestamp.as_ref().map(|time| time.0),
        outdated_since: status
            .and_then(|status| status.conditions.iter().find(|condition| condition.type_ == OUTDATED_CONDITION))
            .filter(|condition| condition.status == "True")
            .map(|condition| condition.last_transition_time.0),
    })
}

/// The counts of a `score` annotation (`{"sessionCount": …, "pipelineCount":
/// …, "replicaCount": …}`); `None` when it is not of that shape, so that a
/// hand-edited annotation reads as unknown rather than as drained.
fn workload_of_score(score: &str) -> Option<Workload> {
    let value: serde_json::Value = serde_json::from_str(score).ok()?;
    let count = |key: &str| value.get(key)?.as_u64();
    Some(Workload {
        sessions: count("sessionCount")?,
        pipelines: count("pipelineCount")?,
        replicas: count("replicaCount")?,
    })
}

/// Reads a claim set.
pub fn claim_set_view(set: &CNClaimSet) -> Result<ClaimSetView, ConvertError> {
    Ok(ClaimSetView {
        name: required(set.metadata.name.as_ref(), "CNClaimSet", "metadata.name")?,
        // Validation refuses negative values; should one slip through, it
        // reads as 0, which creates nothing.
        replicas: u32::try_from(set.spec.replicas).unwrap_or(0),
        deleting: set.metadata.deletion_timestamp.is_some(),
    })
}

/// Reads a member claim of a claim set and, when the cache has it, the pod
/// it holds.
pub fn member_view(claim: &CNClaim, pod: Option<&PodView>) -> Result<MemberView, ConvertError> {
    let meta = &claim.metadata;
    Ok(MemberView {
        name: required(meta.name.as_ref(), "CNClaim", "metadata.name")?,
        uid: required(meta.uid.as_ref(), "CNClaim", "metadata.uid")?,
        phase: claim.phase(),
        deleting: meta.deletion_timestamp.is_some(),
        migrating: claim.spec.source_pod.as_ref().is_some_and(|source| !source.pod_name.is_empty()),
        pod: pod.map(|pod| MemberPod {
            name: pod.name.clone(),
            deletion_cost: pod.deletion_cost,
            created: pod.created,
        }),
    })
}

/// How long a released CN of `pool` may drain before it is terminated:
/// `spec.strategy.drainStrategy.timeout`; else, for a Go-shaped template,
/// its `scalingConfig.storeDrainTimeout` or the CNSet webhook's 5 minutes
/// (reference §1, §6); else (a plain pod template) `default`. A malformed
/// duration is named by its field.
fn drain_timeout(
    pool: &CNPool,
    strategy: Option<&GoDuration>,
    default: Duration,
) -> Result<Duration, (&'static str, DurationError)> {
    let template = pool.spec.template.as_ref();
    let from_template = template.and_then(|template| template.scaling_config.as_ref()?.store_drain_timeout.as_ref());
    match (strategy, from_template) {
        (Some(timeout), _) => timeout.parse().map_err(|error| ("spec.strategy.drainStrategy.timeout", error)),
        (None, Some(timeout)) => {
            timeout.parse().map_err(|error| ("spec.template.scalingConfig.storeDrainTimeout", error))
        }
        (None, None) if template.is_some() => Ok(cnpool_api::cnset::DEFAULT_STORE_DRAIN_TIMEOUT),
        (None, None) => Ok(default),
    }
}

/// Reads a pool whose current template hashes to `current_revision`;
/// `defaults` serve where its spec says nothing.
pub fn pool_view(pool: &CNPool, current_revision: &str, defaults: DrainDefaults) -> Result<PoolView, ConvertError> {
    let name: String = required(pool.metadata.name.as_ref(), "CNPool", "metadata.name")?;
    let scale = &pool.spec.strategy.scale_strategy;
    let drain = pool.spec.strategy.drain_strategy.as_ref();
    let parse = |text: &GoDuration, field| {
        text.parse().map_err(|error| ConvertError::Duration { pool: name.clone(), field, error })
    };
    let duration = |value: Option<&GoDuration>, field, default| value.map_or(Ok(default), |text| parse(text, field));
    let reclaim = pool.spec.strategy.update_strategy.as_ref().and_then(|update| update.reclaim_timeout.as_ref());
    Ok(PoolView {
        reclaim_timeout: reclaim.map(|text| parse(text, "spec.strategy.updateStrategy.reclaimTimeout")).transpose()?,
        drain_timeout: drain_timeout(pool, drain.and_then(|drain| drain.timeout.as_ref()), defaults.timeout)
            .map_err(|(field, error)| ConvertError::Duration { pool: name.clone(), field, error })?,
        min_delay: duration(
            drain.and_then(|drain| drain.min_delay.as_ref()),
            "spec.strategy.drainStrategy.minDelay",
            defaults.min_delay,
        )?,
        current_revision: current_revision.to_owned(),
        // Validation refuses negative values; should one slip through, it
        // reads as 0, which creates nothing.
        max_idle: u32::try_from(scale.max_idle).unwrap_or(0),
        max_pods: scale.max_pods.map(|max| u32::try_from(max).unwrap_or(0)),
        deleting: pool.metadata.deletion_timestamp.is_some(),
        pod_labels: pool.pod_labels(),
        name,
    })
}

#[cfg(test)]
mod tests;
