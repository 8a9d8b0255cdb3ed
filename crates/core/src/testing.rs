//! Builders and proptest strategies shared by the unit tests.

use std::collections::BTreeMap;
use std::time::Duration;

use cnpool_api::{ClaimPhase, PodPhase};
use cnpool_registry::{StoreLabels, WorkState};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use proptest::prelude::*;

use crate::binding::Binding;
use crate::model::{ClaimView, PodView, PoolView, StoreView};

pub const CLAIM_NAME: &str = "a";
pub const CLAIM_UID: &str = "uid-claim-a";
pub const POOL: &str = "pool";
pub const REVISION: &str = "r1";

/// A time `seconds` after the epoch.
pub fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(seconds).unwrap()
}

pub fn pool() -> PoolView {
    PoolView {
        name: POOL.into(),
        current_revision: REVISION.into(),
        max_idle: 2,
        max_pods: Some(10),
        drain_timeout: Duration::from_secs(1800),
        min_delay: Duration::from_secs(15),
        reclaim_timeout: None,
        deleting: false,
        pod_labels: labels(&[("tier", "silver"), (cnpool_api::labels::POOL_NAME, POOL)]),
    }
}

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect()
}

pub fn selector(key: &str, value: &str) -> LabelSelector {
    LabelSelector { match_labels: Some(labels(&[(key, value)])), ..Default::default() }
}

/// An Idle, unowned pod of the current revision in [`POOL`], created at
/// second `created`.
pub fn idle_pod(name: &str, created: i64) -> PodView {
    PodView {
        name: name.into(),
        uid: format!("uid-{name}"),
        pool: Some(POOL.into()),
        phase: Some(PodPhase::Idle),
        claim_uid: None,
        claimed_by: None,
        revision: Some(REVISION.into()),
        outdated: false,
        deleting: false,
        failed: false,
        store_overdue: false,
        created: at(created),
        labels: labels(&[("tier", "silver")]),
        node: Some("node-1".into()),
        last_owner: None,
        delete_on_reclaim: false,
        reclaimed_at: None,
        cordoned: false,
        store_uuid: Some(format!("store-{name}")),
        deletion_cost: 0,
        binding: None,
        workload: None,
    }
}

/// A claim with its finalizer, nothing recorded, no request.
pub fn claim() -> ClaimView {
    ClaimView {
        name: CLAIM_NAME.into(),
        uid: CLAIM_UID.into(),
        deleting: false,
        has_finalizer: true,
        owner_name: None,
        selector: LabelSelector::default(),
        pool_name: None,
        pod_name: None,
        source_pod: None,
        phase: Some(ClaimPhase::Pending),
        recorded_pod_uid: None,
        recorded_pod_name: None,
        status_pod_uid: None,
        bound_time: None,
        cn_labels: store_labels(&[("account", &["acme"])]),
        additional_pod_labels: labels(&[("team", "blue")]),
        claim_set: None,
        drain_reported: None,
        invalid: None,
        created: Some(at(0)),
        outdated_since: None,
    }
}

pub fn store_labels(pairs: &[(&str, &[&str])]) -> StoreLabels {
    pairs.iter().map(|(key, values)| (key.to_string(), values.iter().map(ToString::to_string).collect())).collect()
}

/// `pod` as acquire leaves it for `claim`: Bound, owned, with the claim's
/// binding annotation and additional labels.
pub fn bound_to(claim: &ClaimView, pod: PodView) -> PodView {
    let mut labels = pod.labels.clone();
    labels.extend(claim.additional_pod_labels.clone());
    PodView {
        phase: Some(PodPhase::Bound),
        claim_uid: Some(claim.uid.clone()),
        claimed_by: Some(claim.name.clone()),
        binding: Some(Binding::of_claim(claim).render()),
        labels,
        ..pod
    }
}

/// `claim` with `pod` recorded in spec and status, in `phase`.
pub fn recording(claim: ClaimView, pod: &PodView, phase: ClaimPhase) -> ClaimView {
    ClaimView {
        pod_name: Some(pod.name.clone()),
        recorded_pod_uid: Some(pod.uid.clone()),
        recorded_pod_name: Some(pod.name.clone()),
        status_pod_uid: Some(pod.uid.clone()),
        phase: Some(phase),
        ..claim
    }
}

/// The store of a pod bound to `claim`, serving with its labels.
pub fn serving_store(claim: &ClaimView) -> StoreView {
    StoreView { uuid: "store".into(), work_state: WorkState::Working, labels: claim.cn_labels.clone() }
}

/// A few pod names, so that generated claims and pods refer to each other.
pub const POD_NAMES: [&str; 5] = ["pod-0", "pod-1", "pod-2", "pod-3", "pod-4"];

fn maybe<T: Clone + std::fmt::Debug + 'static>(values: &[T]) -> impl Strategy<Value = Option<T>> + use<T> {
    proptest::option::of(proptest::sample::select(values.to_vec()))
}

/// `common` most of the time, else anything of `rare`, else nothing.
fn mostly(common: &str, rare: &[&str]) -> impl Strategy<Value = Option<String>> + use<> {
    let rare: Vec<String> = rare.iter().map(ToString::to_string).collect();
    prop_oneof![
        4 => Just(Some(common.to_string())),
        1 => proptest::sample::select(rare).prop_map(Some),
        1 => Just(None),
    ]
}

fn any_pod_phase() -> impl Strategy<Value = Option<PodPhase>> {
    prop_oneof![
        4 => Just(Some(PodPhase::Idle)),
        3 => Just(Some(PodPhase::Bound)),
        3 => maybe(&PodPhase::ALL),
    ]
}

/// One generated pod; `index` picks its name, so names are unique.
fn any_pod(index: usize) -> impl Strategy<Value = PodView> {
    let claim_uid = prop_oneof![3 => Just(None), 2 => Just(Some(CLAIM_UID.to_string())), 1 => Just(Some("uid-claim-b".to_string()))];
    let claimed_by =
        prop_oneof![3 => Just(None), 1 => Just(Some(CLAIM_NAME.to_string())), 1 => Just(Some("b".to_string()))];
    let tier = proptest::sample::select(vec!["gold", "silver"]);
    let last_owner = maybe(&["tenant".to_string(), "someone".to_string()]);
    let flags = proptest::collection::vec(proptest::bool::weighted(0.1), 7);
    let placement = (mostly(REVISION, &["old"]), mostly(POOL, &["other"]));
    (any_pod_phase(), claim_uid, claimed_by, placement, tier, last_owner, flags, 0..4i64, 0..3i32).prop_map(
        move |(phase, claim_uid, claimed_by, (revision, pool), tier, last_owner, flags, created, cost)| {
            let name = POD_NAMES[index];
            let suffix = if flags[5] { "-new" } else { "" };
            PodView {
                uid: format!("uid-{name}{suffix}"),
                phase,
                claim_uid,
                claimed_by,
                revision,
                pool,
                outdated: flags[0],
                deleting: flags[1],
                failed: flags[2],
                delete_on_reclaim: flags[3],
                cordoned: flags[4],
                store_overdue: flags[6],
                last_owner,
                labels: labels(&[("tier", tier)]),
                deletion_cost: cost,
                ..idle_pod(name, created)
            }
        },
    )
}

/// Up to five pods with distinct names.
pub fn any_pods() -> impl Strategy<Value = Vec<PodView>> {
    proptest::sample::subsequence((0..POD_NAMES.len()).collect::<Vec<_>>(), 0..=POD_NAMES.len())
        .prop_flat_map(|indices| indices.into_iter().map(any_pod).collect::<Vec<_>>())
}

pub fn any_pools() -> impl Strategy<Value = Vec<PoolView>> {
    (proptest::bool::weighted(0.1), maybe(&[false, true])).prop_map(|(deleting, other)| {
        let mut pools = vec![PoolView { deleting, ..pool() }];
        if let Some(deleting) = other {
            pools.push(PoolView { name: "other".into(), deleting, ..pool() });
        }
        pools
    })
}

/// What a claim recorded: (UID, name). Mostly a consistent pair.
fn any_record() -> impl Strategy<Value = (Option<String>, Option<String>)> {
    let name = proptest::sample::select(POD_NAMES.to_vec());
    prop_oneof![
        2 => Just((None, None)),
        4 => name.clone().prop_map(|name| (Some(format!("uid-{name}")), Some(name.to_string()))),
        1 => name.clone().prop_map(|name| (None, Some(name.to_string()))),
        1 => (maybe(&["uid-gone".to_string(), "uid-pod-0".to_string()]), maybe(&POD_NAMES.map(String::from))),
    ]
}

pub fn any_claim() -> impl Strategy<Value = ClaimView> {
    let names = || maybe(&POD_NAMES.map(String::from));
    let phases = maybe(&[ClaimPhase::Pending, ClaimPhase::Bound, ClaimPhase::Lost, ClaimPhase::Outdated]);
    let pointer = proptest::sample::select(vec![0, 0, 1, 2]);
    let flags = proptest::collection::vec(any::<bool>(), 5);
    let lifecycle = (proptest::bool::weighted(0.15), proptest::bool::weighted(0.1), proptest::bool::weighted(0.15));
    (any_record(), pointer, names(), proptest::option::weighted(0.2, names()), phases, flags, lifecycle).prop_map(
        |(
            (recorded_uid, recorded_name),
            pointer,
            other_name,
            source_pod,
            phase,
            flags,
            (deleting, unfinalized, hostile),
        )| {
            // Usually spec.podName names the recorded pod; sometimes another, or none.
            let pod_name = match pointer {
                0 => recorded_name.clone().or(other_name),
                1 => other_name,
                _ => None,
            };
            ClaimView {
                deleting,
                has_finalizer: !unfinalized,
                owner_name: flags[0].then(|| "tenant".into()),
                selector: if flags[1] { selector("tier", "gold") } else { LabelSelector::default() },
                pool_name: flags[2].then(|| POOL.into()),
                claim_set: flags[3].then(|| "set".into()),
                pod_name,
                source_pod: source_pod.flatten(),
                phase,
                // The status usually describes the recorded pod; a claim
                // recorded but not yet Bound has no status of it.
                status_pod_uid: recorded_uid.clone().filter(|_| flags[4]),
                recorded_pod_uid: recorded_uid,
                recorded_pod_name: recorded_name,
                ..if hostile { hostile_claim() } else { claim() }
            }
        },
    )
}

/// A claim whose spec names another claim's UID among its additional pod
/// labels, as a user, an old operator or a bug could write it.
pub fn hostile_claim() -> ClaimView {
    let mut claim = claim();
    claim.additional_pod_labels.insert(cnpool_api::labels::CLAIM_UID.into(), "uid-claim-b".into());
    claim.invalid = Some(cnpool_api::validation::Invalid(vec![cnpool_api::validation::FieldError {
        field: format!("spec.additionalPodLabels[{}]", cnpool_api::labels::CLAIM_UID),
        problem: "uses a prefix reserved for the operator's ownership and pool labels".into(),
        fix: "choose a key outside pool.matrixorigin.io/".into(),
    }]));
    claim
}

/// Acquire's precondition restated independently of `eligibility`.
pub fn may_acquire(claim: &ClaimView, pod: &PodView, pools: &[PoolView]) -> bool {
    let pool = pools.iter().find(|pool| Some(&pool.name) == pod.pool.as_ref());
    pod.phase == Some(PodPhase::Idle)
        && pod.claim_uid.is_none()
        && pod.claimed_by.is_none()
        && !pod.deleting
        && !pod.failed
        && !pod.cordoned
        && !pod.outdated
        && pool.is_some_and(|pool| !pool.deleting && pod.revision.as_ref() == Some(&pool.current_revision))
        && claim.pool_name.as_ref().is_none_or(|name| Some(name) == pod.pool.as_ref())
        && claim.source_pod.as_ref() != Some(&pod.name)
        && cnpool_api::selector::selector_matches(&claim.selector, &pod.labels)
}
