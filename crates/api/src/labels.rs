//! Every pod label, annotation, finalizer and condition key cnpool reads or
//! writes, in one place. Keys shared with the Go matrixone-operator keep its
//! spelling (reference/matrixone-pool-api.md) so that a cluster can move
//! between the two without relabelling.

/// Pool phase of a pod: [`PodPhase`](crate::PodPhase) as text.
pub const PHASE: &str = "pool.matrixorigin.io/phase";
/// Name of the owning claim; kept for the Go operator and for humans. The
/// lock is [`CLAIM_UID`], not this.
pub const CLAIMED_BY: &str = "pool.matrixorigin.io/claimed-by";
/// Pool of a pod, and the pool a claim is nominated to.
pub const POOL_NAME: &str = "pool.matrixorigin.io/pool-name";
/// A pod created directly rather than through a CNSet.
pub const DIRECT_POD: &str = "pool.matrixorigin.io/direct-pod";
/// UID of the owning claim. A pod belongs to claim C exactly when this label
/// equals C's UID: it is the lock every ownership write tests.
pub const CLAIM_UID: &str = "pool.matrixorigin.io/claim-uid";
/// Hash of the pool template the pod was created from.
pub const REVISION: &str = "pool.matrixorigin.io/revision";

/// The owning claim's `spec.ownerName` while bound.
pub const OWNER: &str = "matrixorigin.io/owner";
/// `ownerName` of the last claim that held the pod (previous-owner priority).
pub const LAST_OWNER: &str = "matrixorigin.io/last-owner";
/// Claim set of the owning claim; also set on the set's claims.
pub const CLAIM_SET: &str = "matrixorigin.io/claimset";
/// Instance id of a claim within its claim set.
pub const INSTANCE_ID: &str = "claim.matrixorigin.io/instance-id";
/// A pod of an old template revision: never bound again.
pub const OUTDATED: &str = "matrixorigin.io/outdated";
/// The CN store UUID of a pod.
pub const CN_UUID: &str = "matrixone.cloud/cn-uuid";
/// The CN set a CN pod belongs to: `<pool>-<CNSet hash>` for a pool's pods,
/// the Go operator's and those cnpool renders from a Go-shaped template.
pub const INSTANCE: &str = "matrixorigin.io/instance";
/// The kind of MatrixOne component a pod runs; [`CN_SET_COMPONENT`] for CNs.
pub const COMPONENT: &str = "matrixorigin.io/component";
/// [`COMPONENT`] of a CN pod.
pub const CN_SET_COMPONENT: &str = "CNSet";
/// The namespace of the MatrixOne object a pod belongs to.
pub const INSTANCE_NAMESPACE: &str = "matrixorigin.io/namespace";

/// Annotation `Pooling` marking pods managed by a pool.
pub const MANAGEMENT_POLICY: &str = "pool.matrixorigin.io/management-policy";
/// Value of [`MANAGEMENT_POLICY`] on pool pods.
pub const MANAGEMENT_POLICY_POOLING: &str = "Pooling";
/// Annotation: delete the pod instead of returning it to Idle on release.
pub const DELETE_ON_RECLAIM: &str = "matrixorigin.io/delete-on-reclaim";
/// Annotation: RFC 3339 time of the last release.
pub const RECLAIMED_AT: &str = "matrixorigin.io/reclaimed-at";
/// Annotation: JSON drain statistics (sessions, pipelines, replicas, start).
pub const SCORE: &str = "matrixorigin.io/score";
/// Annotation read by ReplicaSet-style scale-in; cnpool sets it to sessions.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// Annotation: sessions plus pipelines.
pub const CONNECTIONS: &str = "matrixorigin.io/connections";
/// Annotation `Up` once the CN store is registered.
pub const CN_STATE: &str = "matrixorigin.io/cn-state";
/// Annotation: when the current drain started.
pub const STORE_DRAINING_START: &str = "matrixorigin.io/store-draining-start";
/// Annotation set on drains that take longer than five minutes.
pub const DIAGNOSE_DRAINING: &str = "matrixorigin.io/diagnos-draining";
/// Annotation asking for the pod's tenant to be moved away (node maintenance).
pub const STORE_CORDON: &str = "matrixorigin.io/store-cordon";
/// Annotation: lock hand-over to the lock service is under way.
pub const LOCK_RESTART: &str = "matrixorigin.io/lock-restart";
/// Annotation on a bound pod: the claim's CN labels and which additional pod
/// label keys acquire applied, so that release removes exactly those and the
/// store is written from the pod alone.
pub const BINDING: &str = "pool.matrixorigin.io/binding";
/// Claim annotation: the pod the claim recorded, as `<pod name>/<pod UID>`.
/// It is written with `spec.podName` and the finalizer, in one write, so a
/// claim knows which pod it holds before its status shows it (the status
/// is written once, when the claim is Bound).
pub const RECORDED_POD: &str = "pool.matrixorigin.io/recorded-pod";

/// Pod finalizer: the CN store is removed from HAKeeper before the pod goes.
pub const CN_DRAINING_FINALIZER: &str = "matrixorigin.io/cn-draining";
/// Pod readiness gate and condition type: the CN is registered and serving.
pub const CN_STORE_CONDITION: &str = "matrixorigin.io/cn-store";
/// Readiness gates of the Go operator's pods that OpenKruise answered; a
/// pod's gates cannot be removed, so cnpool answers them for pods it took
/// over (docs/cutover.md).
pub const KRUISE_READINESS_GATES: [&str; 2] = ["KruisePodReady", "InPlaceUpdateReady"];
/// Pod annotation: the Go workload (`<Kind>/<name>`) cnpool released the pod
/// from at cutover, so that a workload taking it back is told, not fought.
pub const RELEASED_FROM: &str = "pool.matrixorigin.io/released-from";
/// Finalizer on claims: pods are released before the claim goes.
pub const CLAIM_FINALIZER: &str = "pool.matrixorigin.io/claim";
/// Finalizer on pools: bound pods keep serving until their claims let go.
pub const POOL_FINALIZER: &str = "pool.matrixorigin.io/pool";

/// Label prefixes users may not set through `additionalPodLabels`: they carry
/// ownership and pool bookkeeping, and a user-supplied value could forge the
/// lock.
pub const RESERVED_PREFIXES: [&str; 3] = ["pool.matrixorigin.io/", "matrixorigin.io/", "matrixone.cloud/"];

/// Whether `key` falls under one of [`RESERVED_PREFIXES`].
pub fn is_reserved(key: &str) -> bool {
    RESERVED_PREFIXES.iter().any(|prefix| key.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_labels_are_reserved() {
        for key in [PHASE, CLAIMED_BY, CLAIM_UID, POOL_NAME, REVISION, OWNER, CLAIM_SET, CN_UUID] {
            assert!(is_reserved(key), "{key} must not be settable by users");
        }
    }

    #[test]
    fn ordinary_and_look_alike_keys_are_not_reserved() {
        for key in ["app", "team.example.com/tier", "xmatrixorigin.io/a", "claim.matrixorigin.io/instance-id"] {
            assert!(!is_reserved(key), "{key}");
        }
    }
}
