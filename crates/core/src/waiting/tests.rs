use cnpool_api::PodPhase;
use proptest::prelude::*;

use super::*;
use crate::pool::{Expectations, occupancy, plan_pool};
use crate::testing::*;

fn pool_of(name: &str, max_pods: Option<u32>) -> PoolView {
    let mut pod_labels = pool().pod_labels;
    pod_labels.insert(cnpool_api::labels::POOL_NAME.into(), name.into());
    PoolView { name: name.into(), max_pods, pod_labels, ..pool() }
}

fn bound(name: &str) -> PodView {
    PodView { phase: Some(PodPhase::Bound), claim_uid: Some("uid-other".into()), ..idle_pod(name, 1) }
}

fn starting(name: &str) -> PodView {
    PodView { phase: Some(PodPhase::Unknown), ..idle_pod(name, 1) }
}

/// The reason `claim` is given with `pods` in [`POOL`] (and none elsewhere).
fn wait_of(claim: &ClaimView, pools: &[PoolView], pods: &[PodView], hakeeper: Reachability) -> ClaimWait {
    why_no_pod(
        claim,
        pools,
        |pool| if pool.name == POOL { occupancy(pool, pods) } else { Occupancy::default() },
        |_| hakeeper,
    )
}

#[test]
fn a_selector_or_pool_name_that_matches_no_pool_says_so_and_asks_for_a_fix() {
    let gold = ClaimView { selector: selector("tier", "gold"), ..claim() };
    let wait = wait_of(&gold, &[pool()], &[], Reachability::Reachable);
    assert_eq!(wait, ClaimWait::NoPoolMatches { pool_name: None });
    assert!(wait.needs_action() && wait.message().contains("spec.selector"), "{}", wait.message());

    let elsewhere = ClaimView { pool_name: Some("ghost".into()), ..claim() };
    let wait = wait_of(&elsewhere, &[pool()], &[], Reachability::Reachable);
    assert_eq!(wait.reason(), "NoPoolMatches");
    assert!(wait.message().contains("ghost"), "the message names the pool asked for: {}", wait.message());

    let deleting = PoolView { deleting: true, ..pool() };
    assert_eq!(wait_of(&claim(), &[deleting], &[], Reachability::Reachable).reason(), "NoPoolMatches");
    assert_eq!(wait_of(&claim(), &[], &[], Reachability::Reachable).reason(), "NoPoolMatches");
}

#[test]
fn a_pool_with_its_max_pods_in_use_names_itself_and_its_limit() {
    let full = pool_of(POOL, Some(2));
    let wait = wait_of(&claim(), &[full], &[bound("p-0"), bound("p-1")], Reachability::Reachable);
    assert_eq!(wait, ClaimWait::PoolAtMaxPods { pool: POOL.into(), max_pods: 2 });
    assert!(wait.needs_action());
    let message = wait.message();
    assert!(message.contains(&format!("pool {POOL}")) && message.contains("maxPods 2"), "{message}");
}

#[test]
fn a_pool_with_room_or_a_starting_pod_scales_out_and_asks_nothing_of_anyone() {
    let full_but_starting = [bound("p-0"), starting("p-1")];
    let wait = wait_of(&claim(), &[pool_of(POOL, Some(2))], &full_but_starting, Reachability::Reachable);
    assert_eq!(wait, ClaimWait::PoolScalingOut { pool: POOL.into(), max_pods: Some(2) });
    assert!(!wait.needs_action());
    assert!(wait.message().contains("maxPods 2"), "{}", wait.message());

    let room = wait_of(&claim(), &[pool_of(POOL, Some(3))], &[bound("p-0")], Reachability::Reachable);
    assert_eq!(room.reason(), "PoolScalingOut");
    let unbounded = wait_of(&claim(), &[pool_of(POOL, None)], &[bound("p-0")], Reachability::Unknown);
    assert!(unbounded.message().contains("no maxPods"), "{}", unbounded.message());
}

#[test]
fn pods_on_their_way_out_do_not_keep_a_pool_at_max_pods() {
    let deleting = PodView { deleting: true, ..bound("p-1") };
    let outdated = PodView { outdated: true, ..idle_pod("p-2", 1) };
    let terminating = PodView { phase: Some(PodPhase::Terminating), ..idle_pod("p-3", 1) };
    let pods = [bound("p-0"), deleting, outdated, terminating];
    let wait = wait_of(&claim(), &[pool_of(POOL, Some(2))], &pods, Reachability::Reachable);
    assert_eq!(wait.reason(), "PoolScalingOut", "the pool replaces them");
}

#[test]
fn of_several_matching_pools_one_with_room_is_named_before_one_at_max_pods() {
    let pools = [pool_of(POOL, Some(1)), pool_of("zzz", Some(4))];
    let wait = wait_of(&claim(), &pools, &[bound("p-0")], Reachability::Reachable);
    assert_eq!(wait, ClaimWait::PoolScalingOut { pool: "zzz".into(), max_pods: Some(4) });
}

#[test]
fn hakeeper_unreachable_comes_after_a_spec_that_names_no_pool_and_before_capacity() {
    let wait = wait_of(&claim(), &[pool_of(POOL, Some(1))], &[bound("p-0")], Reachability::Unreachable);
    assert_eq!(wait, ClaimWait::HAKeeperUnreachable { pool: Some(POOL.into()) });
    assert!(wait.needs_action() && wait.message().contains(POOL), "{}", wait.message());
    let gold = ClaimView { selector: selector("tier", "gold"), ..claim() };
    assert_eq!(wait_of(&gold, &[pool()], &[], Reachability::Unreachable).reason(), "NoPoolMatches");
}

#[test]
fn a_pool_whose_hakeeper_is_down_is_passed_over_for_one_of_another_cluster() {
    let pools = [pool_of(POOL, Some(1)), pool_of("zzz", Some(4))];
    let only_zzz_answers = |pool: &PoolView| match pool.name.as_str() {
        "zzz" => Reachability::Reachable,
        _ => Reachability::Unreachable,
    };
    let wait = why_no_pod(&claim(), &pools, |_| Occupancy::default(), only_zzz_answers);
    assert_eq!(wait, ClaimWait::PoolScalingOut { pool: "zzz".into(), max_pods: Some(4) });
    let wait = why_no_pod(&claim(), &pools, |_| Occupancy::default(), |_| Reachability::Unreachable);
    assert_eq!(wait, ClaimWait::HAKeeperUnreachable { pool: Some(POOL.into()) }, "none answers: the first is named");
}

#[test]
fn a_held_pod_waits_for_its_store_unless_hakeeper_does_not_answer() {
    let pod = bound("p-0");
    let wait = why_store_waits(&pod, Reachability::Reachable);
    assert_eq!(wait, ClaimWait::WaitingForStore { pod: "p-0".into(), pool: POOL.into() });
    assert!(!wait.needs_action() && wait.message().contains("p-0") && wait.message().contains(POOL));
    assert_eq!(why_store_waits(&pod, Reachability::Unknown).reason(), "WaitingForStore", "no judgement yet");
    assert_eq!(why_store_waits(&pod, Reachability::Unreachable).reason(), "HAKeeperUnreachable");
}

#[test]
fn every_reason_is_distinct() {
    let all = [
        ClaimWait::NoPoolMatches { pool_name: None },
        ClaimWait::HAKeeperUnreachable { pool: None },
        ClaimWait::PoolAtMaxPods { pool: POOL.into(), max_pods: 1 },
        ClaimWait::PoolScalingOut { pool: POOL.into(), max_pods: None },
        ClaimWait::WaitingForStore { pod: "p".into(), pool: POOL.into() },
    ];
    let reasons: std::collections::BTreeSet<&str> = all.iter().map(ClaimWait::reason).collect();
    assert_eq!(reasons.len(), all.len());
}

proptest! {
    /// What the claim is told agrees with what its pool does: a pool said
    /// to be at maxPods creates no pod, however many claims wait; one said
    /// to scale out, with nothing Idle or starting to offer, creates one.
    #[test]
    fn the_claims_word_agrees_with_the_pools_plan(pods in any_pods(), max_pods in 0..6u32, pending in 1..4u32) {
        let pool = pool_of(POOL, Some(max_pods));
        let pods: Vec<PodView> = pods.into_iter().filter(|pod| pod.pool.as_deref() == Some(POOL)).collect();
        let plan = plan_pool(&pool, &pods, pending, &Expectations::default());
        let wait = wait_of(&claim(), std::slice::from_ref(&pool), &pods, Reachability::Reachable);
        let free = |pod: &PodView| {
            !pod.has_owner() && matches!(pod.phase, Some(PodPhase::Idle | PodPhase::Unknown))
        };
        let all_usable = pods.iter().all(|pod| {
            !pod.deleting && !pod.failed && !pod.cordoned && pod.is_current(&pool)
                && pod.phase != Some(PodPhase::Terminating)
        });
        match wait {
            ClaimWait::PoolAtMaxPods { .. } => prop_assert!(plan.create.is_empty(), "{plan:?}"),
            ClaimWait::PoolScalingOut { .. } if all_usable && !pods.iter().any(free) => {
                prop_assert!(!plan.create.is_empty(), "said to scale out, but the plan is {plan:?}")
            }
            ClaimWait::PoolScalingOut { .. } => {}
            other => prop_assert!(false, "unexpected {other:?}"),
        }
    }

}
