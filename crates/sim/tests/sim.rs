//! The simulator as a user runs it: one seed gives one trace, and the
//! checker sees what it is there to see.

use std::sync::Arc;
use std::time::Duration;

use cnpool_apiserver::{Event, EventType, StorageKey};
use cnpool_sim::checker::{Bounds, Checker, Invariant, OwnerLabel};
use cnpool_sim::ledger::Ledger;
use cnpool_sim::{Controllers, Keep, Scenario};
use serde_json::json;

/// A small pool with every fault on, short enough for a unit test.
const SMALL: &str = r#"
name: small
duration: 8m
settle: 12m
pool: {name: small, maxIdle: 1, maxPods: 6, drainTimeout: 2m, minDelay: 5s}
world: {startDelay: 3s, stopDelay: 1s, sessionLeaveDelay: 5s}
operators: 2
faults:
  conflictPerWrite: 0.05
  serverErrorPerRequest: 0.02
  timeoutLostPerWrite: 0.02
  timeoutAppliedPerWrite: 0.02
  maxWatchLag: 2s
  droppedWatchesPerMinute: 0.5
  operatorCrashesPerMinute: 0.3
  podCrashesPerMinute: 0.2
  podEvictionsPerMinute: 0.2
  storeVanishesPerMinute: 0.2
  registryErrorsPerMinute: 0.5
steps:
  - {at: 0s, createClaims: {count: 4, system: 1}}
  - {at: 3m, deleteClaims: {count: 2}}
  - {at: 3m10s, createClaims: {count: 2}}
  - {at: 5m, deleteBoundPods: {count: 1}}
"#;

#[test]
fn one_seed_gives_one_trace_and_another_seed_another() {
    let scenario = Scenario::from_yaml("small", SMALL).unwrap();
    let first = cnpool_sim::run(&scenario, 7, Controllers::Cnpool, Keep { trace: true, report: false }).unwrap();
    let again = cnpool_sim::run(&scenario, 7, Controllers::Cnpool, Keep { trace: true, report: false }).unwrap();
    assert!(first.trace.len() > 50, "a run of claims and faults commits writes: {} lines", first.trace.len());
    assert_eq!(first.trace, again.trace);
    assert_eq!(first.trace_digest, again.trace_digest);
    let other = cnpool_sim::run(&scenario, 8, Controllers::Cnpool, Keep::default()).unwrap();
    assert_ne!(first.trace_digest, other.trace_digest);
    assert!(first.faults.values().sum::<u64>() > 0, "faults were injected: {:?}", first.faults);
    assert!(first.virtual_time >= Duration::from_secs(20 * 60));
}

fn commit(resource_version: u64, plural: &str, object: serde_json::Value) -> Event {
    let storage = StorageKey { group: String::new(), plural: plural.into() };
    Event::new(resource_version, storage, EventType::Modified, None, object)
}

fn bound_claim(name: &str, uid: &str, pod: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"podName": pod},
        "status": {"phase": "Bound", "store": {"podName": pod}},
    })
}

/// A checker for a pool of at most 4 pods keeping 1 idle.
fn small_pool_checker() -> Checker {
    Checker::new(
        Bounds {
            pool: "small".into(),
            max_pods: 4,
            max_idle: 1,
            start_delay: Duration::from_secs(1),
            store_missing_bound: Duration::from_secs(30),
            owner_label: OwnerLabel::ClaimUid,
        },
        Arc::new(Ledger::new(false)),
    )
}

#[test]
fn two_claims_bound_to_one_pod_break_exclusivity_at_once() {
    let mut checker = small_pool_checker();
    let at = Duration::from_secs(5);
    checker.commit(&commit(1, "cnclaims", bound_claim("a", "uid-a", "pod-1")), at);
    checker.commit(&commit(2, "cnclaims", bound_claim("b", "uid-b", "pod-2")), at);
    assert!(checker.violations().is_empty());
    checker.commit(&commit(3, "cnclaims", bound_claim("b", "uid-b", "pod-1")), at);
    let found: Vec<_> = checker.violations().iter().map(|violation| violation.invariant).collect();
    assert_eq!(found, [Invariant::I1]);
}

#[test]
fn a_pod_naming_two_owners_breaks_exclusivity() {
    let mut checker = small_pool_checker();
    let at = Duration::from_secs(5);
    checker.commit(&commit(1, "cnclaims", bound_claim("a", "uid-a", "pod-1")), at);
    let pod = json!({
        "metadata": {"name": "pod-1", "namespace": "default", "uid": "pod-uid", "labels": {
            "pool.matrixorigin.io/phase": "Bound",
            "pool.matrixorigin.io/claim-uid": "uid-b",
            "pool.matrixorigin.io/claimed-by": "a",
        }},
    });
    checker.commit(&commit(2, "pods", pod), at);
    assert_eq!(checker.violations().len(), 1);
    assert_eq!(checker.violations()[0].invariant, Invariant::I1);
}
