use cnpool_api::PodPhase;
use proptest::prelude::*;

use super::*;
use crate::testing::{CLAIM_UID, at, idle_pod, pool};

fn pod(name: &str, phase: PodPhase) -> PodView {
    let owned = matches!(phase, PodPhase::Bound);
    PodView { phase: Some(phase), claim_uid: owned.then(|| CLAIM_UID.into()), ..idle_pod(name, 100) }
}

fn pool_of(max_idle: u32, max_pods: Option<u32>) -> PoolView {
    PoolView { max_idle, max_pods, ..pool() }
}

fn names(pods: &[&PodView]) -> Vec<String> {
    pods.iter().map(|pod| pod.name.clone()).collect()
}

#[test]
fn an_empty_pool_creates_max_idle_pods_at_the_lowest_ordinals() {
    let plan = plan_pool(&pool_of(2, Some(10)), &[], 0, &Expectations::default());
    assert_eq!(plan.create, ["pool-0", "pool-1"]);
    assert!(plan.retire.is_empty() && plan.delete.is_empty());
}

#[test]
fn pending_claims_are_added_to_max_idle() {
    // One pod in use, two idle, one claim waiting: 1 + 1 + 2 = 4 pods.
    let pods = [pod("pool-0", PodPhase::Bound), pod("pool-1", PodPhase::Idle), pod("pool-2", PodPhase::Idle)];
    let plan = plan_pool(&pool_of(2, Some(10)), &pods, 1, &Expectations::default());
    assert_eq!(plan.create, ["pool-3"]);
}

#[test]
fn new_names_fill_the_lowest_free_ordinals() {
    let pods = [pod("pool-0", PodPhase::Bound), pod("pool-2", PodPhase::Draining)];
    let plan = plan_pool(&pool_of(2, None), &pods, 0, &Expectations::default());
    assert_eq!(plan.create, ["pool-1", "pool-3"]);
}

#[test]
fn max_pods_caps_all_pods_whatever_their_names() {
    // Three allowed; two are taken by bound pods, one of them with a name
    // outside the ordinal scheme: one more pod, and only below ordinal 3.
    let pods = [pod("pool-0", PodPhase::Bound), pod("legacy-cn", PodPhase::Bound)];
    let plan = plan_pool(&pool_of(2, Some(3)), &pods, 0, &Expectations::default());
    assert_eq!(plan.create, ["pool-1"]);
}

#[test]
fn a_full_pool_creates_nothing_even_for_pending_claims() {
    let pods = [pod("pool-0", PodPhase::Bound), pod("pool-1", PodPhase::Terminating)];
    let plan = plan_pool(&pool_of(1, Some(2)), &pods, 3, &Expectations::default());
    assert!(plan.create.is_empty(), "a Terminating pod still holds its place");
}

#[test]
fn starting_pods_and_expected_creations_count_as_supply() {
    let pods = [pod("pool-0", PodPhase::Unknown)];
    let expected = Expectations { creations: ["pool-1".to_string()].into(), ..Default::default() };
    let plan = plan_pool(&pool_of(3, Some(10)), &pods, 0, &expected);
    assert_eq!(plan.create, ["pool-2"], "pool-1 is on its way and its name is taken");
}

#[test]
fn a_pod_whose_store_is_overdue_is_kept_but_not_counted_for_a_waiting_claim() {
    let overdue = PodView { store_overdue: true, ..pod("pool-0", PodPhase::Unknown) };
    let plan = plan_pool(&pool_of(0, Some(5)), std::slice::from_ref(&overdue), 1, &Expectations::default());
    assert_eq!(plan.create, ["pool-1"], "the claim gets a pod of its own");
    assert!(plan.retire.is_empty(), "the slow pod may yet register");
    let plan = plan_pool(&pool_of(0, Some(1)), std::slice::from_ref(&overdue), 1, &Expectations::default());
    assert!(plan.create.is_empty() && plan.retire.is_empty(), "it still holds its place under maxPods");
}

#[test]
fn a_pod_whose_store_is_overdue_stands_in_for_the_idle_reserve_only() {
    let overdue = PodView { store_overdue: true, ..pod("pool-0", PodPhase::Idle) };
    let plan = plan_pool(&pool_of(1, Some(5)), std::slice::from_ref(&overdue), 0, &Expectations::default());
    assert!(plan.is_empty(), "no claim waits: the reserve may wait for it");
    let plan = plan_pool(&pool_of(1, Some(5)), std::slice::from_ref(&overdue), 1, &Expectations::default());
    assert_eq!(plan.create, ["pool-1"]);
    let pods = [pod("pool-1", PodPhase::Idle), overdue];
    let plan = plan_pool(&pool_of(1, Some(5)), &pods, 0, &Expectations::default());
    assert!(plan.is_empty(), "a serving pod is never retired in favour of an overdue one: {plan:?}");
}

#[test]
fn an_expected_creation_already_seen_is_not_counted_twice() {
    let pods = [pod("pool-0", PodPhase::Idle)];
    let expected = Expectations { creations: ["pool-0".to_string()].into(), ..Default::default() };
    let plan = plan_pool(&pool_of(2, Some(10)), &pods, 0, &expected);
    assert_eq!(plan.create, ["pool-1"]);
}

#[test]
fn a_pod_expected_gone_is_neither_supply_nor_retired_again() {
    let pods = [pod("pool-0", PodPhase::Idle), pod("pool-1", PodPhase::Idle)];
    let expected = Expectations { deletions: ["uid-pool-0".to_string()].into(), ..Default::default() };
    let plan = plan_pool(&pool_of(1, Some(10)), &pods, 0, &expected);
    assert!(plan.retire.is_empty() && plan.create.is_empty(), "{plan:?}");
}

#[test]
fn old_revision_idle_pods_are_retired_and_replaced() {
    let old = PodView { revision: Some("old".into()), ..pod("pool-0", PodPhase::Idle) };
    let pods = [old, pod("pool-1", PodPhase::Idle)];
    let plan = plan_pool(&pool_of(2, Some(10)), &pods, 0, &Expectations::default());
    assert_eq!(names(&plan.retire), ["pool-0"]);
    assert_eq!(plan.create, ["pool-2"]);
}

#[test]
fn failed_and_outdated_idle_pods_are_retired() {
    let pods = [
        PodView { failed: true, ..pod("pool-0", PodPhase::Idle) },
        PodView { outdated: true, ..pod("pool-1", PodPhase::Unknown) },
    ];
    let plan = plan_pool(&pool_of(0, Some(10)), &pods, 0, &Expectations::default());
    assert_eq!(names(&plan.retire), ["pool-0", "pool-1"]);
}

#[test]
fn old_revision_pods_in_use_are_left_alone() {
    let pods = [PodView { revision: Some("old".into()), ..pod("pool-0", PodPhase::Bound) }];
    let plan = plan_pool(&pool_of(0, Some(10)), &pods, 0, &Expectations::default());
    assert!(plan.is_empty());
}

#[test]
fn scale_in_retires_idle_pods_with_fewest_sessions_then_newest_then_name() {
    let pods = [
        PodView { deletion_cost: 5, created: at(300), ..pod("busy", PodPhase::Idle) },
        PodView { created: at(100), ..pod("old", PodPhase::Idle) },
        PodView { created: at(200), ..pod("new-b", PodPhase::Idle) },
        PodView { created: at(200), ..pod("new-a", PodPhase::Idle) },
        pod("starting", PodPhase::Unknown),
        pod("serving", PodPhase::Bound),
        pod("draining", PodPhase::Draining),
    ];
    let plan = plan_pool(&pool_of(1, Some(20)), &pods, 0, &Expectations::default());
    // Supply is 5 (four Idle, one starting); the target is 1.
    assert_eq!(names(&plan.retire), ["new-a", "new-b", "old", "busy"]);
    assert!(plan.create.is_empty());
}

#[test]
fn lowering_max_pods_retires_idle_pods_down_to_the_room_left() {
    let pods = [pod("pool-0", PodPhase::Bound), pod("pool-1", PodPhase::Idle), pod("pool-2", PodPhase::Idle)];
    let plan = plan_pool(&pool_of(2, Some(2)), &pods, 0, &Expectations::default());
    assert_eq!(plan.retire.len(), 1);
}

#[test]
fn a_deleting_pool_retires_its_idle_and_starting_pods_at_once_and_keeps_bound_ones() {
    let pods = [
        pod("pool-0", PodPhase::Idle),
        pod("pool-1", PodPhase::Unknown),
        pod("pool-2", PodPhase::Bound),
        pod("pool-3", PodPhase::Draining),
    ];
    let deleting = PoolView { deleting: true, ..pool_of(2, Some(10)) };
    let plan = plan_pool(&deleting, &pods, 4, &Expectations::default());
    assert_eq!(names(&plan.retire), ["pool-0", "pool-1"]);
    assert!(plan.create.is_empty());
}

#[test]
fn terminating_pods_are_deleted_unless_owned_or_already_deleting() {
    let pods = [
        pod("pool-0", PodPhase::Terminating),
        PodView { deleting: true, ..pod("pool-1", PodPhase::Terminating) },
        PodView { claim_uid: Some("x".into()), ..pod("pool-2", PodPhase::Terminating) },
    ];
    let plan = plan_pool(&pool_of(0, Some(10)), &pods, 0, &Expectations::default());
    assert_eq!(names(&plan.delete), ["pool-0"]);
}

#[test]
fn without_max_pods_there_is_no_cap() {
    let plan = plan_pool(&pool_of(3, None), &[], 20, &Expectations::default());
    assert_eq!(plan.create.len(), 23);
    assert_eq!(plan.create.last().map(String::as_str), Some("pool-22"));
}

const NAMES: [&str; 8] = ["pool-0", "pool-1", "pool-2", "pool-3", "pool-5", "pool-9", "legacy", "pool-01"];

fn any_pool_pod(name: &'static str) -> impl Strategy<Value = PodView> {
    let phase = proptest::option::of(proptest::sample::select(PodPhase::ALL.to_vec()));
    let flags = proptest::collection::vec(proptest::bool::weighted(0.15), 6);
    (phase, flags, 0..3i32, 0..5i64).prop_map(move |(phase, flags, cost, created)| {
        let in_use = matches!(phase, Some(PodPhase::Bound));
        PodView {
            phase,
            claim_uid: (in_use != flags[0]).then(|| CLAIM_UID.into()),
            revision: Some(if flags[1] { "old" } else { crate::testing::REVISION }.into()),
            deleting: flags[2],
            failed: flags[3],
            outdated: flags[4],
            store_overdue: flags[5],
            deletion_cost: cost,
            ..idle_pod(name, created)
        }
    })
}

fn any_pool_pods() -> impl Strategy<Value = Vec<PodView>> {
    proptest::sample::subsequence(NAMES.to_vec(), 0..=NAMES.len())
        .prop_flat_map(|names| names.into_iter().map(any_pool_pod).collect::<Vec<_>>())
}

fn any_pool() -> impl Strategy<Value = PoolView> {
    (0..4u32, proptest::option::of(0..7u32), proptest::bool::weighted(0.2))
        .prop_map(|(max_idle, max_pods, deleting)| PoolView { deleting, ..pool_of(max_idle, max_pods) })
}

fn any_expectations(pods: &[PodView]) -> impl Strategy<Value = Expectations> + use<> {
    let uids: Vec<String> = pods.iter().map(|pod| pod.uid.clone()).collect();
    let creations = proptest::sample::subsequence(NAMES.map(String::from).to_vec(), 0..3);
    let deletions = proptest::sample::subsequence(uids.clone(), 0..=uids.len().min(2));
    (creations, deletions).prop_map(|(creations, deletions)| Expectations {
        creations: creations.into_iter().collect(),
        deletions: deletions.into_iter().collect(),
    })
}

fn any_world() -> impl Strategy<Value = (PoolView, Vec<PodView>, u32, Expectations)> {
    (any_pool(), any_pool_pods(), 0..4u32).prop_flat_map(|(pool, pods, pending)| {
        let expected = any_expectations(&pods);
        (Just(pool), Just(pods), Just(pending), expected)
    })
}

/// The world after the plan and every expectation have taken effect, and
/// every starting pod but those whose store is overdue has registered.
fn apply(pool: &PoolView, pods: &[PodView], plan: &PoolPlan<'_>, expected: &Expectations) -> Vec<PodView> {
    let gone = |pod: &PodView| {
        expected.deletions.contains(&pod.uid)
            || plan.retire.iter().chain(&plan.delete).any(|removed| removed.uid == pod.uid)
    };
    let mut world: Vec<PodView> = pods.iter().filter(|pod| !gone(pod)).cloned().collect();
    let existing: BTreeSet<String> = world.iter().map(|pod| pod.name.clone()).collect();
    let new = expected.creations.iter().chain(&plan.create).filter(|name| !existing.contains(*name));
    world.extend(new.map(|name| PodView { revision: Some(pool.current_revision.clone()), ..idle_pod(name, 10) }));
    for pod in &mut world {
        if pod.phase == Some(PodPhase::Unknown) && !pod.failed && !pod.store_overdue {
            pod.phase = Some(PodPhase::Idle);
        }
    }
    world
}

proptest! {
    #[test]
    fn never_plans_more_pods_than_max_pods((pool, pods, pending, expected) in any_world()) {
        let plan = plan_pool(&pool, &pods, pending, &expected);
        let names: BTreeSet<&str> = pods.iter().map(|pod| pod.name.as_str()).collect();
        let awaited = expected.creations.iter().filter(|name| !names.contains(name.as_str())).count();
        let before = pods.len() + awaited;
        if let Some(max) = pool.max_pods {
            let max = max as usize;
            prop_assert!(plan.create.is_empty() || before + plan.create.len() <= max, "{before} + {:?} > {max}", plan.create);
        }
        for name in &plan.create {
            prop_assert!(!names.contains(name.as_str()) && !expected.creations.contains(name), "{name} is taken");
            let ordinal: u32 = name.strip_prefix("pool-").and_then(|ordinal| ordinal.parse().ok()).unwrap();
            prop_assert!(pool.max_pods.is_none_or(|max| ordinal < max), "{name} is beyond maxPods");
        }
        let unique: BTreeSet<&String> = plan.create.iter().collect();
        prop_assert_eq!(unique.len(), plan.create.len());
    }

    #[test]
    fn retires_only_unowned_idle_or_starting_pods_and_deletes_only_terminating_ones(
        (pool, pods, pending, expected) in any_world()
    ) {
        let plan = plan_pool(&pool, &pods, pending, &expected);
        for pod in &plan.retire {
            prop_assert!(matches!(pod.phase, Some(PodPhase::Idle | PodPhase::Unknown)), "retired {pod:?}");
            prop_assert!(!pod.has_owner() && !pod.deleting, "retired {pod:?}");
        }
        for pod in &plan.delete {
            prop_assert!(pod.phase == Some(PodPhase::Terminating) && !pod.has_owner(), "deleted {pod:?}");
        }
        if pool.deleting {
            prop_assert!(plan.create.is_empty());
        }
    }

    #[test]
    fn converges_to_a_fixed_point_with_the_idle_target((pool, pods, pending, expected) in any_world()) {
        let pool = PoolView { deleting: false, ..pool };
        let mut world = apply(&pool, &pods, &plan_pool(&pool, &pods, pending, &expected), &expected);
        let none = Expectations::default();
        for _ in 0..3 {
            let next = apply(&pool, &world, &plan_pool(&pool, &world, pending, &none), &none);
            world = next;
        }
        let plan = plan_pool(&pool, &world, pending, &none);
        prop_assert!(plan.is_empty(), "still planning {plan:?} for {world:?}");
        let usable = |pod: &&PodView| {
            matches!(pod.phase, Some(PodPhase::Idle | PodPhase::Unknown)) && !pod.has_owner() && !pod.deleting
                && !pod.failed && !pod.outdated && pod.revision.as_ref() == Some(&pool.current_revision)
        };
        let idle = world.iter().filter(usable).filter(|pod| !pod.store_overdue).count() as u32;
        let overdue = world.iter().filter(usable).filter(|pod| pod.store_overdue).count() as u32;
        // Overdue pods may only fill the idle reserve: every waiting claim
        // gets a pod that serves, as far as maxPods allows.
        let standing_in = overdue.min(pool.max_idle.saturating_sub(idle));
        let others = world.len() as u32 - idle - standing_in;
        let room = pool.max_pods.map_or(u32::MAX, |max| max.saturating_sub(others));
        prop_assert_eq!(idle + standing_in, (pending + pool.max_idle).min(room));
        // An overdue pod holds its place under maxPods (replacing it would
        // restart a registration that may just be slow), so the claims get
        // serving pods as far as the room left beside every other pod allows.
        let room_for_claims = pool.max_pods.map_or(u32::MAX, |max| max.saturating_sub(world.len() as u32 - idle));
        prop_assert!(idle >= pending.min(room_for_claims), "{idle} serving Idle pods for {pending} waiting claims");
    }
}
