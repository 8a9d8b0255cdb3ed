//! The legacy model (the Go operator's algorithm) on a small, fault-free
//! scenario, beside cnpool's controllers on the same seeds: the Go pod
//! reconcile turns a started pod Idle only at its next 30 s requeue after
//! the 15 s store cache has seen the store, so the first claims wait past
//! the liveness bound (I4); a store that vanishes under a bound CN leaves
//! the Go claim Bound to a CN that cannot serve (I2). cnpool keeps both.
//! (Both break I5 here, so it is not compared.)
#![allow(clippy::unwrap_used)] // a test fails by panicking

use cnpool_sim::checker::Invariant;
use cnpool_sim::{Controllers, Keep, Scenario};

const VANISHING_STORE: &str = r#"
name: vanishing-store
duration: 3m
settle: 11m
pool: {name: small, maxIdle: 1, maxPods: 6, drainTimeout: 2m, minDelay: 5s}
world: {startDelay: 3s, stopDelay: 1s, sessionLeaveDelay: 5s}
steps:
  - {at: 0s, createClaims: {count: 3}}
  - {at: 90s, vanishStores: {count: 1}}
"#;

fn broken(controllers: Controllers, seed: u64) -> Vec<Invariant> {
    let scenario = Scenario::from_yaml("vanishing-store", VANISHING_STORE).unwrap();
    let outcome = cnpool_sim::run(&scenario, seed, controllers, Keep::default()).unwrap();
    let mut found: Vec<Invariant> = outcome.violations.iter().map(|violation| violation.invariant).collect();
    found.dedup();
    found
}

#[test]
fn the_go_algorithm_breaks_liveness_and_truthfulness_where_cnpool_keeps_them() {
    for seed in [1, 2] {
        let legacy = broken(Controllers::Legacy, seed);
        let cnpool = broken(Controllers::Cnpool, seed);
        for invariant in [Invariant::I2, Invariant::I4] {
            assert!(legacy.contains(&invariant), "seed {seed}: the legacy model kept {invariant:?}: {legacy:?}");
            assert!(!cnpool.contains(&invariant), "seed {seed}: cnpool broke {invariant:?}: {cnpool:?}");
        }
    }
}

#[test]
fn a_legacy_seed_replays_byte_for_byte() {
    // The Go caches list in map order; the model reads them in name order
    // so that a failing seed can be replayed.
    let scenario = Scenario::from_yaml("vanishing-store", VANISHING_STORE).unwrap();
    let keep = Keep { trace: true, report: false };
    let first = cnpool_sim::run(&scenario, 3, Controllers::Legacy, keep).unwrap();
    let again = cnpool_sim::run(&scenario, 3, Controllers::Legacy, keep).unwrap();
    assert!(first.trace.len() > 50, "claims were bound and released: {} lines", first.trace.len());
    assert_eq!(first.trace, again.trace);
}
