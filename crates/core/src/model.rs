//! The decision core's own view of the world: plain values read from pods,
//! claims, pools and CN stores, decoupled from the Kubernetes objects they
//! come from (see [`crate::convert`] for the readers).

use std::collections::BTreeMap;
use std::time::Duration;

use cnpool_api::{ClaimPhase, PodPhase};
use cnpool_registry::{StoreLabels, WorkState, Workload};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A pool pod as the decisions need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`: another pod of the same name has another UID.
    pub uid: String,
    /// The `pool-name` label.
    pub pool: Option<String>,
    /// The `phase` label; `None` when absent or not a phase any operator writes.
    pub phase: Option<PodPhase>,
    /// The `claim-uid` label: the lock. The pod belongs to the claim with this UID.
    pub claim_uid: Option<String>,
    /// The `claimed-by` label (claim name), kept for the Go operator.
    pub claimed_by: Option<String>,
    /// The `revision` label: hash of the pool template the pod was made from.
    pub revision: Option<String>,
    /// The `outdated` label is present: never bound again.
    pub outdated: bool,
    /// The pod has a deletion timestamp.
    pub deleting: bool,
    /// The pod cannot serve: phase Failed or Succeeded, or its CN container
    /// crashes, as the controller judges.
    pub failed: bool,
    /// An unowned pod whose store HAKeeper has lacked for the registration
    /// grace (`Config::store_registration_grace`): it may still register,
    /// so it keeps its place until the store-missing bound fails it, but no
    /// waiting claim is left counting on it.
    pub store_overdue: bool,
    /// Creation time, to the second the API server records.
    pub created: Timestamp,
    /// All labels, for selector matching.
    pub labels: BTreeMap<String, String>,
    /// The node the pod is scheduled on.
    pub node: Option<String>,
    /// The `last-owner` label: `ownerName` of the previous claim.
    pub last_owner: Option<String>,
    /// The `delete-on-reclaim` annotation is present.
    pub delete_on_reclaim: bool,
    /// The `reclaimed-at` annotation: when the pod was last released.
    pub reclaimed_at: Option<Timestamp>,
    /// The `store-cordon` annotation is present, or the pod's node is
    /// cordoned (`spec.unschedulable`): node maintenance asks for the tenant
    /// to move away, and for the pod to be offered to no claim.
    pub cordoned: bool,
    /// UUID of the pod's CN store in HAKeeper.
    pub store_uuid: Option<String>,
    /// The `pod-deletion-cost` annotation, which carries the CN's session
    /// count; 0 when absent.
    pub deletion_cost: i32,
    /// The raw `binding` annotation (see [`crate::binding::Binding`]).
    pub binding: Option<String>,
    /// What still runs on the CN, from the `score` annotation the CN-store
    /// controller writes; `None` before it has written one.
    pub workload: Option<Workload>,
}

impl PodView {
    /// Whether any claim owns the pod, by UID (cnpool) or by name (the Go operator).
    pub fn has_owner(&self) -> bool {
        self.claim_uid.is_some() || self.claimed_by.is_some()
    }

    /// Whether the pod carries `claim_uid` as its lock.
    pub fn is_owned_by(&self, claim_uid: &str) -> bool {
        self.claim_uid.as_deref() == Some(claim_uid)
    }

    /// Whether the pod is of `pool`'s current template and not marked outdated.
    pub fn is_current(&self, pool: &PoolView) -> bool {
        !self.outdated && self.revision.as_deref() == Some(pool.current_revision.as_str())
    }
}

/// A CNClaim as the decisions need it.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimView {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`: the value of the `claim-uid` lock on its pods.
    pub uid: String,
    /// The claim has a deletion timestamp.
    pub deleting: bool,
    /// The claim carries cnpool's claim finalizer.
    pub has_finalizer: bool,
    /// `spec.ownerName`.
    pub owner_name: Option<String>,
    /// `spec.selector`.
    pub selector: LabelSelector,
    /// `spec.poolName`.
    pub pool_name: Option<String>,
    /// `spec.podName`: the claim's pointer (or, before anything is recorded,
    /// the pod it asks for).
    pub pod_name: Option<String>,
    /// `spec.sourcePod.podName`: the pod a migration moves away from.
    pub source_pod: Option<String>,
    /// `status.phase`.
    pub phase: Option<ClaimPhase>,
    /// The UID of the pod the claim recorded: its `recorded-pod` annotation's,
    /// else `status.store.podUID` (a claim an older cnpool recorded).
    pub recorded_pod_uid: Option<String>,
    /// The name in the same place, or the Go operator's `status.store.string`.
    pub recorded_pod_name: Option<String>,
    /// `status.store.podUID`: the pod the claim's status describes.
    pub status_pod_uid: Option<String>,
    /// `status.boundTime`.
    pub bound_time: Option<Timestamp>,
    /// `spec.cnLabels` as HAKeeper's label map.
    pub cn_labels: StoreLabels,
    /// `spec.additionalPodLabels`.
    pub additional_pod_labels: BTreeMap<String, String>,
    /// The claim set the claim belongs to (its `claimset` label).
    pub claim_set: Option<String>,
    /// `status.migrate.source`: the migration source's drain progress as
    /// last reported.
    pub drain_reported: Option<Workload>,
    /// Why the spec fails the validation the webhook runs; `None` when it
    /// passes. Nothing is done because of an invalid spec (DESIGN §2,
    /// "Inputs"): the webhook may be absent, fail open, or predate a rule.
    pub invalid: Option<cnpool_api::validation::Invalid>,
    /// `metadata.creationTimestamp`: whether the claim predates the
    /// operator's cutover, and so may adopt a pod the Go operator bound to
    /// its name.
    pub created: Option<Timestamp>,
    /// When the claim became Outdated: its `Outdated` condition's transition
    /// time while that is True; `None` otherwise (a claim the Go operator
    /// or an older cnpool marked Outdated has none yet).
    pub outdated_since: Option<Timestamp>,
}

/// The pod a claim has recorded as its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordedPod<'a> {
    /// Recorded by cnpool: the pod's UID and name.
    ByUid {
        /// `status.store.podUID`.
        uid: &'a str,
        /// `status.store.podName` (or `string`).
        name: Option<&'a str>,
    },
    /// Recorded by the Go operator: phase Bound (or Outdated) and the pod's
    /// name, but no UID.
    ByName {
        /// `status.store.string`.
        name: &'a str,
    },
}

impl<'a> RecordedPod<'a> {
    /// The recorded pod's name, if known.
    pub fn name(self) -> Option<&'a str> {
        match self {
            Self::ByUid { name, .. } => name,
            Self::ByName { name } => Some(name),
        }
    }
}

impl ClaimView {
    /// The pod the claim recorded, if any.
    pub fn recorded_pod(&self) -> Option<RecordedPod<'_>> {
        if let Some(uid) = self.recorded_pod_uid.as_deref() {
            return Some(RecordedPod::ByUid { uid, name: self.recorded_pod_name.as_deref() });
        }
        let holding = matches!(self.phase, Some(ClaimPhase::Bound | ClaimPhase::Outdated));
        match self.recorded_pod_name.as_deref() {
            Some(name) if holding => Some(RecordedPod::ByName { name }),
            _ => None,
        }
    }

    /// The additional pod labels acquire may put on a pod: those of
    /// `spec.additionalPodLabels` outside the operator's reserved prefixes,
    /// whatever the spec holds, so that no spec can write an owner or phase.
    pub fn applicable_pod_labels(&self) -> impl Iterator<Item = (&String, &String)> {
        self.additional_pod_labels.iter().filter(|(key, _)| !cnpool_api::labels::is_reserved(key))
    }

    /// Whether `name` is the pod this claim migrates away from.
    pub fn is_source(&self, name: &str) -> bool {
        self.source_pod.as_deref() == Some(name)
    }

    /// The pod a decision on this claim reads by name, besides the pods
    /// carrying its UID: the recorded pod (to tell how it was lost), unless
    /// that is the migration source; otherwise the pod `spec.podName` names
    /// (a pre-bound request or a migration target). In steady state both
    /// are `spec.podName`.
    pub fn pointed_pod(&self) -> Option<&str> {
        let recorded = self.recorded_pod().and_then(|recorded| recorded.name());
        recorded.filter(|name| !self.is_source(name)).or(self.pod_name.as_deref())
    }
}

/// A CNPool as the decisions need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolView {
    /// `metadata.name`: also the prefix of its pods' names.
    pub name: String,
    /// Revision hash of the pool's current pod template.
    pub current_revision: String,
    /// Idle pods kept warm beyond those in use and those pending claims need.
    pub max_idle: u32,
    /// Upper bound on the pool's pods; `None` for no bound.
    pub max_pods: Option<u32>,
    /// A draining CN still busy after this long is terminated.
    pub drain_timeout: Duration,
    /// A drained CN returns to Idle no sooner than this after its release.
    pub min_delay: Duration,
    /// `updateStrategy.reclaimTimeout`: a standalone claim Outdated this long
    /// migrates whatever the rollout's pace; `None` for no limit.
    pub reclaim_timeout: Option<Duration>,
    /// The pool has a deletion timestamp.
    pub deleting: bool,
    /// The labels every pod of the pool carries ([`cnpool_api::CNPool::pod_labels`]):
    /// a claim's selector matches the pool's pods exactly when it matches
    /// these.
    pub pod_labels: BTreeMap<String, String>,
}

/// A CNClaimSet as its scale plan needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimSetView {
    /// `metadata.name`: also the prefix of its members' names.
    pub name: String,
    /// `spec.replicas`; a negative value reads as 0.
    pub replicas: u32,
    /// The set has a deletion timestamp.
    pub deleting: bool,
}

/// A member claim of a claim set, as the set's scale plan needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    /// `metadata.name`: the lock on its slot.
    pub name: String,
    /// `metadata.uid`: the precondition of its deletion.
    pub uid: String,
    /// `status.phase`.
    pub phase: Option<ClaimPhase>,
    /// The claim has a deletion timestamp.
    pub deleting: bool,
    /// `spec.sourcePod` is set: a migration is under way.
    pub migrating: bool,
    /// The pod the claim holds, when the cache has it.
    pub pod: Option<MemberPod>,
}

/// What scale-in reads of a member's pod: its deletion order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberPod {
    /// `metadata.name`.
    pub name: String,
    /// The `pod-deletion-cost` annotation (the CN's sessions); 0 when absent.
    pub deletion_cost: i32,
    /// `metadata.creationTimestamp`.
    pub created: Timestamp,
}

/// A CN store as HAKeeper reports it, reduced to what decisions compare.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreView {
    /// The store's UUID, derived from its pod's DNS name.
    pub uuid: String,
    /// HAKeeper's work state.
    pub work_state: WorkState,
    /// HAKeeper's labels for the store.
    pub labels: StoreLabels,
}

/// What is known of a pod's CN store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObservedStore<'a> {
    /// HAKeeper lists the store.
    Registered(&'a StoreView),
    /// HAKeeper's list lacks the store, continuously since `since` (the
    /// controller remembers when it first noticed).
    Missing {
        /// When the store was first seen missing.
        since: Timestamp,
    },
    /// HAKeeper could not be asked (unreachable, or not listed yet): no
    /// judgement either way.
    Unobserved,
}

/// Where the inputs of a decision were read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// From the informer cache, which may lag.
    Cached,
    /// From the API server, bypassing the cache.
    Live,
}

/// Whether at least `bound` has passed from `since` to `now`. A bound too
/// large to represent never passes.
pub(crate) fn has_elapsed(since: Timestamp, now: Timestamp, bound: Duration) -> bool {
    SignedDuration::try_from(bound).is_ok_and(|bound| now.duration_since(since) >= bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elapsed_time_is_measured_from_since_to_now() {
        let since = Timestamp::from_second(1_000).unwrap();
        let now = Timestamp::from_second(1_015).unwrap();
        assert!(has_elapsed(since, now, Duration::from_secs(15)));
        assert!(!has_elapsed(since, now, Duration::from_secs(16)));
        assert!(!has_elapsed(now, since, Duration::ZERO), "a time in the future has not elapsed");
        assert!(!has_elapsed(since, now, Duration::MAX), "an unrepresentable bound never passes");
    }
}
