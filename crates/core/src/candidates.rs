//! Which pods a claim may acquire, and in which order it tries them.
//!
//! A pod is eligible for claim C exactly when acquire's precondition holds on
//! it (DESIGN §2, "Guarded transitions"): phase Idle, no owner (neither
//! `claim-uid` nor `claimed-by`), not being deleted, not failed, of its
//! pool's current revision and not outdated, in C's pool when C names one,
//! and matched by C's selector. Two refinements: the pod C migrates away
//! from is never a candidate (a migration never takes its source back), and
//! a pool that is being deleted offers nothing.
//!
//! Candidates are tried previous owner first (`last-owner` = C's
//! `ownerName`), then oldest by full creation time, then by name, then by UID.

use std::cmp::Reverse;

use cnpool_api::PodPhase;
use cnpool_api::selector::selector_matches;
use jiff::Timestamp;

use crate::model::{ClaimView, PodView, PoolView};

/// Why a pod is not eligible for a claim, in the order they are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ineligible {
    /// It is the pod the claim migrates away from.
    IsSource,
    /// Its phase is not Idle.
    NotIdle,
    /// A claim owns it.
    Owned,
    /// It is being deleted.
    Deleting,
    /// It cannot serve.
    Failed,
    /// It carries `matrixorigin.io/store-cordon` or its node is cordoned:
    /// node maintenance wants tenants off it.
    Cordoned,
    /// It is in no pool, or not in the claim's pool.
    OtherPool,
    /// Its pool is unknown or being deleted.
    PoolUnavailable,
    /// It is of an old template or marked outdated.
    Outdated,
    /// The claim's selector does not match its labels.
    SelectorMismatch,
}

impl Ineligible {
    /// A stable identifier for conditions and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IsSource => "IsSource",
            Self::NotIdle => "NotIdle",
            Self::Owned => "Owned",
            Self::Deleting => "Deleting",
            Self::Failed => "Failed",
            Self::Cordoned => "Cordoned",
            Self::OtherPool => "OtherPool",
            Self::PoolUnavailable => "PoolUnavailable",
            Self::Outdated => "Outdated",
            Self::SelectorMismatch => "SelectorMismatch",
        }
    }

    /// What a person reads in a condition.
    pub fn message(self) -> &'static str {
        match self {
            Self::IsSource => "it is the pod this claim migrates away from",
            Self::NotIdle => "it is not Idle",
            Self::Owned => "another claim holds it",
            Self::Deleting => "it is being deleted",
            Self::Failed => "it has failed",
            Self::Cordoned => {
                "it is cordoned for maintenance (matrixorigin.io/store-cordon, or its node is unschedulable)"
            }
            Self::OtherPool => "it is not in the claim's pool",
            Self::PoolUnavailable => "its pool is unknown or being deleted",
            Self::Outdated => "it runs an old pool template",
            Self::SelectorMismatch => "the claim's selector does not match it",
        }
    }
}

/// Whether `claim` may acquire `pod`; `pools` are the pools whose current
/// revision the pod is checked against.
pub fn eligibility(claim: &ClaimView, pod: &PodView, pools: &[PoolView]) -> Result<(), Ineligible> {
    let check = |ok: bool, why: Ineligible| if ok { Ok(()) } else { Err(why) };
    check(!claim.is_source(&pod.name), Ineligible::IsSource)?;
    check(pod.phase == Some(PodPhase::Idle), Ineligible::NotIdle)?;
    check(!pod.has_owner(), Ineligible::Owned)?;
    check(!pod.deleting, Ineligible::Deleting)?;
    check(!pod.failed, Ineligible::Failed)?;
    check(!pod.cordoned, Ineligible::Cordoned)?;
    let pod_pool = pod.pool.as_deref().ok_or(Ineligible::OtherPool)?;
    check(claim.pool_name.as_deref().is_none_or(|wanted| wanted == pod_pool), Ineligible::OtherPool)?;
    let pool = pools.iter().find(|pool| pool.name == pod_pool && !pool.deleting).ok_or(Ineligible::PoolUnavailable)?;
    check(pod.is_current(pool), Ineligible::Outdated)?;
    check(selector_matches(&claim.selector, &pod.labels), Ineligible::SelectorMismatch)
}

/// Where a pod stands among a pool's pods once a claim's previous pods are
/// taken: oldest first by full creation time, then by name, then by UID.
/// The operator's index keeps Idle pods in this order, so that a claim reads
/// only the first few.
pub fn age_rank(pod: &PodView) -> (Timestamp, &str, &str) {
    (pod.created, pod.name.as_str(), pod.uid.as_str())
}

/// The pods of `pods` that `claim` may acquire, best first.
pub fn rank_candidates<'a>(
    claim: &ClaimView,
    pods: impl IntoIterator<Item = &'a PodView>,
    pools: &[PoolView],
) -> Vec<&'a PodView> {
    let mut candidates: Vec<&PodView> = pods.into_iter().filter(|pod| eligibility(claim, pod, pools).is_ok()).collect();
    candidates.sort_by_key(|pod| {
        let previous_owner = claim.owner_name.is_some() && pod.last_owner == claim.owner_name;
        (Reverse(previous_owner), age_rank(pod))
    });
    candidates
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::testing::*;

    #[test]
    fn an_idle_current_unowned_matching_pod_is_eligible() {
        assert_eq!(eligibility(&claim(), &idle_pod("p", 1), &[pool()]), Ok(()));
    }

    #[test]
    fn each_precondition_of_acquire_is_checked() {
        let pools = [pool()];
        let cases: Vec<(Ineligible, PodView, ClaimView)> = vec![
            (Ineligible::IsSource, idle_pod("p", 1), ClaimView { source_pod: Some("p".into()), ..claim() }),
            (Ineligible::NotIdle, PodView { phase: Some(PodPhase::Draining), ..idle_pod("p", 1) }, claim()),
            (Ineligible::NotIdle, PodView { phase: None, ..idle_pod("p", 1) }, claim()),
            (Ineligible::Owned, PodView { claim_uid: Some("x".into()), ..idle_pod("p", 1) }, claim()),
            (Ineligible::Owned, PodView { claimed_by: Some("x".into()), ..idle_pod("p", 1) }, claim()),
            (Ineligible::Deleting, PodView { deleting: true, ..idle_pod("p", 1) }, claim()),
            (Ineligible::Failed, PodView { failed: true, ..idle_pod("p", 1) }, claim()),
            (Ineligible::Cordoned, PodView { cordoned: true, ..idle_pod("p", 1) }, claim()),
            (Ineligible::Outdated, PodView { outdated: true, ..idle_pod("p", 1) }, claim()),
            (Ineligible::Outdated, PodView { revision: Some("old".into()), ..idle_pod("p", 1) }, claim()),
            (Ineligible::OtherPool, PodView { pool: None, ..idle_pod("p", 1) }, claim()),
            (Ineligible::OtherPool, idle_pod("p", 1), ClaimView { pool_name: Some("other".into()), ..claim() }),
            (Ineligible::PoolUnavailable, PodView { pool: Some("ghost".into()), ..idle_pod("p", 1) }, claim()),
            (
                Ineligible::SelectorMismatch,
                idle_pod("p", 1),
                ClaimView { selector: selector("tier", "gold"), ..claim() },
            ),
        ];
        for (expected, pod, claim) in cases {
            assert_eq!(eligibility(&claim, &pod, &pools), Err(expected), "{pod:?}");
        }
    }

    #[test]
    fn a_deleting_pool_offers_nothing() {
        let deleting = PoolView { deleting: true, ..pool() };
        assert_eq!(eligibility(&claim(), &idle_pod("p", 1), &[deleting]), Err(Ineligible::PoolUnavailable));
    }

    #[test]
    fn previous_owner_first_then_oldest_then_name() {
        let claim = ClaimView { owner_name: Some("tenant".into()), ..claim() };
        let pods = [
            idle_pod("young", 30),
            idle_pod("b-old", 10),
            idle_pod("a-old", 10),
            PodView { last_owner: Some("tenant".into()), ..idle_pod("returning", 50) },
            PodView { last_owner: Some("someone-else".into()), ..idle_pod("oldest", 1) },
        ];
        let names: Vec<&str> = rank_candidates(&claim, &pods, &[pool()]).iter().map(|pod| pod.name.as_str()).collect();
        assert_eq!(names, ["returning", "oldest", "a-old", "b-old", "young"]);
    }

    #[test]
    fn age_is_compared_on_the_full_timestamp_not_the_seconds_field() {
        // The Go operator compared creationTimestamp.Second(); 10:00:59 would
        // then rank after 10:01:00.
        let pods = [idle_pod("newer", 3_660), idle_pod("older", 3_659)];
        let names: Vec<&str> =
            rank_candidates(&claim(), &pods, &[pool()]).iter().map(|pod| pod.name.as_str()).collect();
        assert_eq!(names, ["older", "newer"]);
    }

    #[test]
    fn without_an_owner_name_no_pod_counts_as_previous_owner() {
        let pods = [idle_pod("old", 1), PodView { last_owner: None, ..idle_pod("new", 2) }];
        let first = rank_candidates(&claim(), &pods, &[pool()])[0];
        assert_eq!(first.name, "old");
    }

    proptest! {
        #[test]
        fn returns_exactly_the_eligible_pods(claim in any_claim(), pods in any_pods(), pools in any_pools()) {
            let ranked = rank_candidates(&claim, &pods, &pools);
            for pod in &ranked {
                prop_assert!(may_acquire(&claim, pod, &pools), "not eligible: {pod:?}");
            }
            let eligible = pods.iter().filter(|pod| may_acquire(&claim, pod, &pools)).count();
            prop_assert_eq!(ranked.len(), eligible, "an eligible pod is missing");
        }

        #[test]
        fn the_order_does_not_depend_on_the_input_order(
            claim in any_claim(),
            (pods, shuffled) in any_pods().prop_flat_map(|pods| (Just(pods.clone()), Just(pods).prop_shuffle())),
            pools in any_pools(),
        ) {
            let names = |pods: &[PodView]| -> Vec<String> {
                rank_candidates(&claim, pods, &pools).iter().map(|pod| pod.name.clone()).collect()
            };
            prop_assert_eq!(names(&pods), names(&shuffled));
        }

        #[test]
        fn each_candidate_ranks_no_lower_than_the_next(claim in any_claim(), pods in any_pods(), pools in any_pools()) {
            let ranked = rank_candidates(&claim, &pods, &pools);
            let previous = |pod: &PodView| claim.owner_name.is_some() && pod.last_owner == claim.owner_name;
            for pair in ranked.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                let in_order = (previous(a) && !previous(b))
                    || (previous(a) == previous(b)
                        && (a.created < b.created || (a.created == b.created && a.name < b.name)));
                prop_assert!(in_order, "{} ranked before {}", a.name, b.name);
            }
        }
    }
}
