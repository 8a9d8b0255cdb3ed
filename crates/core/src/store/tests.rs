use std::time::Duration;

use cnpool_api::PodPhase;
use proptest::prelude::*;

use super::*;
use crate::testing::{at, idle_pod, pool, store_labels};

const NOW: i64 = 10_000;

fn pod_in(phase: PodPhase) -> PodView {
    PodView { phase: Some(phase), ..idle_pod("pool-0", 100) }
}

fn bound_with(binding: &str) -> PodView {
    PodView { binding: Some(binding.into()), ..pod_in(PodPhase::Bound) }
}

fn store(state: WorkState, labels: StoreLabels) -> StoreView {
    StoreView { uuid: "store-pool-0".into(), work_state: state, labels }
}

fn draining_since(released: i64) -> PodView {
    PodView { reclaimed_at: Some(at(released)), ..pod_in(PodPhase::Draining) }
}

fn idle_workload() -> Option<Workload> {
    Some(Workload::default())
}

fn transition(pod: &PodView, workload: Option<Workload>, pool: &PoolView) -> Option<PodTransition> {
    next_transition(pod, true, workload, at(NOW), pool)
}

#[test]
fn a_bound_pod_wants_its_recorded_labels_written_before_working() {
    let pod = bound_with(r#"{"cnLabels":{"account":["acme"]},"additionalLabelKeys":[]}"#);
    let stale = store(WorkState::Draining, store_labels(&[("account", &["previous-tenant"])]));
    let plan = plan_store(&pod, Some(&stale), None, at(NOW), &pool()).unwrap();
    assert_eq!(
        plan.writes,
        [StoreWrite::ReplaceLabels(store_labels(&[("account", &["acme"])])), StoreWrite::SetState(WorkState::Working)]
    );
    assert_eq!(plan.transition, None);
}

#[test]
fn a_bound_pod_without_a_binding_keeps_the_labels_it_has() {
    // A pod the Go operator bound: its store already carries the tenant's
    // labels, which must not be wiped before the claim records them.
    let pod = pod_in(PodPhase::Bound);
    let desired = desired_store(&pod).unwrap();
    assert_eq!(desired, DesiredStore { state: WorkState::Working, labels: None });
    let serving = store(WorkState::Working, store_labels(&[("account", &["acme"])]));
    assert!(store_writes(&desired, &serving).is_empty());
}

#[test]
fn a_malformed_binding_is_an_error_not_a_guess() {
    let error = plan_store(&bound_with("{not json"), Some(&StoreView::default()), None, at(NOW), &pool()).unwrap_err();
    assert!(error.to_string().contains("pool.matrixorigin.io/binding"), "{error}");
}

#[test]
fn a_released_pod_stops_serving_first_then_loses_its_labels() {
    let serving = store(WorkState::Working, store_labels(&[("account", &["acme"])]));
    let plan = plan_store(&draining_since(NOW), Some(&serving), Some(Workload::default()), at(NOW), &pool()).unwrap();
    assert_eq!(plan.writes, [StoreWrite::SetState(WorkState::Draining), StoreWrite::ReplaceLabels(StoreLabels::new())]);
}

#[test]
fn drained_counts_as_draining() {
    let drained = store(WorkState::Drained, StoreLabels::new());
    assert!(plan_store(&pod_in(PodPhase::Idle), Some(&drained), None, at(NOW), &pool()).unwrap().writes.is_empty());
}

#[test]
fn an_absent_store_gets_no_writes() {
    let plan = plan_store(&bound_with("{}"), None, None, at(NOW), &pool()).unwrap();
    assert_eq!(plan, StorePlan::default());
}

#[test]
fn a_starting_pod_registers_once_its_store_is_listed_after_a_reset() {
    // The store still shows what a previous pod of the same name left.
    let left_over = store(WorkState::Working, store_labels(&[("account", &["old"])]));
    let plan = plan_store(&pod_in(PodPhase::Unknown), Some(&left_over), None, at(NOW), &pool()).unwrap();
    assert_eq!(plan.writes, [StoreWrite::SetState(WorkState::Draining), StoreWrite::ReplaceLabels(StoreLabels::new())]);
    assert_eq!(plan.transition, Some(PodTransition::Register));
    assert_eq!((PodTransition::Register.from(), PodTransition::Register.to()), (PodPhase::Unknown, PodPhase::Idle));
}

#[test]
fn a_starting_pod_waits_for_its_store() {
    assert_eq!(next_transition(&pod_in(PodPhase::Unknown), false, None, at(NOW), &pool()), None);
}

#[test]
fn a_pod_being_deleted_makes_no_transition() {
    let deleting = PodView { deleting: true, ..pod_in(PodPhase::Unknown) };
    assert_eq!(transition(&deleting, None, &pool()), None);
    let deleting = PodView { deleting: true, ..draining_since(0) };
    assert_eq!(transition(&deleting, idle_workload(), &pool()), None);
}

#[test]
fn a_drained_pod_returns_to_idle_once_the_minimum_delay_has_passed() {
    // pool(): minDelay 15 s.
    assert_eq!(transition(&draining_since(NOW - 15), idle_workload(), &pool()), Some(PodTransition::Recycle));
    assert_eq!(transition(&draining_since(NOW - 14), idle_workload(), &pool()), None);
}

#[test]
fn a_busy_or_unreadable_drain_waits() {
    let busy = Some(Workload { sessions: 1, ..Default::default() });
    assert_eq!(transition(&draining_since(NOW - 60), busy, &pool()), None);
    assert_eq!(transition(&draining_since(NOW - 60), None, &pool()), None, "unknown counters are not zero");
}

#[test]
fn a_drain_past_its_timeout_terminates_even_with_sessions() {
    // pool(): drain timeout 30 min.
    let busy = Some(Workload { pipelines: 2, ..Default::default() });
    let expected = Some(PodTransition::Terminate(TerminateReason::DrainTimeout));
    assert_eq!(transition(&draining_since(NOW - 1800), busy, &pool()), expected);
    assert_eq!(transition(&draining_since(NOW - 1799), busy, &pool()), None);
}

#[test]
fn drained_pods_that_must_not_be_reused_terminate() {
    let rested = NOW - 60;
    let cases = [
        (PodView { delete_on_reclaim: true, ..draining_since(rested) }, pool(), TerminateReason::DeleteOnReclaim),
        (draining_since(rested), PoolView { deleting: true, ..pool() }, TerminateReason::PoolDeleting),
        (PodView { outdated: true, ..draining_since(rested) }, pool(), TerminateReason::Outdated),
        (PodView { revision: Some("old".into()), ..draining_since(rested) }, pool(), TerminateReason::Outdated),
    ];
    for (pod, pool, reason) in cases {
        assert_eq!(transition(&pod, idle_workload(), &pool), Some(PodTransition::Terminate(reason)), "{reason:?}");
    }
}

#[test]
fn a_failed_draining_pod_terminates_at_once() {
    let failed = PodView { failed: true, ..draining_since(NOW) };
    let busy = Some(Workload { sessions: 3, ..Default::default() });
    assert_eq!(transition(&failed, busy, &pool()), Some(PodTransition::Terminate(TerminateReason::Failed)));
}

#[test]
fn without_reclaimed_at_a_drain_recycles_when_drained_and_never_times_out() {
    let unmarked = pod_in(PodPhase::Draining);
    assert_eq!(transition(&unmarked, idle_workload(), &pool()), Some(PodTransition::Recycle));
    let busy = Some(Workload { replicas: 1, ..Default::default() });
    let long_after = next_transition(&unmarked, true, busy, at(NOW + 1_000_000), &pool());
    assert_eq!(long_after, None);
}

#[test]
fn bound_idle_and_terminating_pods_stay_put() {
    for phase in [PodPhase::Bound, PodPhase::Idle, PodPhase::Terminating] {
        let pod = PodView { reclaimed_at: Some(at(0)), ..pod_in(phase) };
        assert_eq!(transition(&pod, idle_workload(), &pool()), None, "{phase}");
    }
}

#[test]
fn an_enormous_drain_timeout_never_fires() {
    let patient = PoolView { drain_timeout: Duration::MAX, ..pool() };
    assert_eq!(transition(&draining_since(0), Some(Workload { sessions: 1, ..Default::default() }), &patient), None);
}

fn any_store_labels() -> impl Strategy<Value = StoreLabels> {
    proptest::collection::btree_map("[a-c]", proptest::collection::vec("[x-z]", 0..2), 0..3)
}

fn any_state() -> impl Strategy<Value = WorkState> {
    proptest::sample::select(vec![WorkState::Unknown, WorkState::Working, WorkState::Draining, WorkState::Drained])
}

fn any_store_pod() -> impl Strategy<Value = PodView> {
    let phase = proptest::option::of(proptest::sample::select(PodPhase::ALL.to_vec()));
    let binding = proptest::option::of(
        any_store_labels()
            .prop_map(|cn_labels| Binding { cn_labels, additional_label_keys: Default::default() }.render()),
    );
    (phase, binding).prop_map(|(phase, binding)| PodView { phase, binding, ..idle_pod("pool-0", 100) })
}

const POLL: Duration = Duration::from_secs(2);
const POLL_MAX: Duration = Duration::from_secs(20);

#[test]
fn a_long_drain_is_looked_at_a_few_times_a_minute() {
    // Follow the rechecks of a drain that never ends, from its release on.
    let slow = PoolView { min_delay: Duration::from_secs(10), drain_timeout: Duration::from_secs(300), ..pool() };
    let pod = draining_since(NOW);
    let mut elapsed = Duration::ZERO;
    let mut looks_by_minute = [0_u32; 5];
    while elapsed < Duration::from_secs(300) {
        looks_by_minute[(elapsed.as_secs() / 60) as usize] += 1;
        elapsed += drain_recheck(&pod, at(NOW) + elapsed, &slow, POLL, POLL_MAX);
    }
    assert!(looks_by_minute[0] <= 10, "first minute: {looks_by_minute:?}");
    assert!(looks_by_minute[1..].iter().all(|looks| *looks <= 3), "later minutes: {looks_by_minute:?}");
    // The rest's end (10 s) and the timeout (300 s) are looked at on time,
    // and nothing in between: a resting drain cannot end unless its watch
    // says so.
    let rechecks = |from: u64| drain_recheck(&pod, at(NOW) + Duration::from_secs(from), &slow, POLL, POLL_MAX);
    assert_eq!(rechecks(0), Duration::from_secs(10));
    assert_eq!(rechecks(7), Duration::from_secs(3));
    assert_eq!(rechecks(290), Duration::from_secs(10));
}

#[test]
fn a_drain_without_a_release_time_is_polled() {
    let pod = pod_in(PodPhase::Draining);
    assert_eq!(drain_recheck(&pod, at(NOW), &pool(), POLL, POLL_MAX), POLL);
}

proptest! {
    #[test]
    fn a_drain_recheck_is_between_the_poll_and_its_cap_and_never_overshoots_a_deadline(
        age in 0_u64..4000, min_delay in 0_u64..600, timeout in 0_u64..4000
    ) {
        let slow = PoolView {
            min_delay: Duration::from_secs(min_delay),
            drain_timeout: Duration::from_secs(timeout),
            ..pool()
        };
        let now = at(NOW) + Duration::from_secs(age);
        let wait = drain_recheck(&draining_since(NOW), now, &slow, POLL, POLL_MAX);
        prop_assert!(wait >= POLL && wait <= POLL_MAX);
        for deadline in [min_delay, timeout].into_iter().filter(|deadline| *deadline > age) {
            prop_assert!(wait <= POLL.max(Duration::from_secs(deadline - age)));
        }
    }

    #[test]
    fn a_pod_that_is_not_bound_never_wants_labels(pod in any_store_pod()) {
        prop_assume!(pod.phase != Some(PodPhase::Bound));
        let desired = desired_store(&pod).unwrap();
        prop_assert_eq!(desired.labels, Some(StoreLabels::new()));
        prop_assert_eq!(desired.state, WorkState::Draining);
    }

    #[test]
    fn no_write_when_the_store_already_agrees(pod in any_store_pod(), other_labels in any_store_labels()) {
        let desired = desired_store(&pod).unwrap();
        let labels = desired.labels.clone().unwrap_or(other_labels);
        let observed = StoreView { uuid: "u".into(), work_state: desired.state, labels };
        prop_assert_eq!(store_writes(&desired, &observed), Vec::new());
    }

    #[test]
    fn the_writes_bring_any_store_to_agreement(
        pod in any_store_pod(), state in any_state(), labels in any_store_labels()
    ) {
        let desired = desired_store(&pod).unwrap();
        let mut observed = StoreView { uuid: "u".into(), work_state: state, labels };
        for write in store_writes(&desired, &observed) {
            match write {
                StoreWrite::ReplaceLabels(labels) => observed.labels = labels,
                StoreWrite::SetState(state) => {
                    prop_assert_ne!(state, WorkState::Unknown, "HAKeeper stores Unknown as Working");
                    observed.work_state = state;
                }
            }
        }
        prop_assert_eq!(store_writes(&desired, &observed), Vec::new());
    }
}
