//! The simulator's power (DESIGN §4): each deliberately broken variant of
//! cnpool's protocol (`cnpool_controllers::sabotage`, compiled only for
//! these tests) breaks the invariant it endangers within 200 seeds of a
//! small scenario made for it, and the same seed with the correct protocol
//! does not break that invariant, so the catch is the variant's.
//!
//! `cargo test -p cnpool-sim --test broken_variants -- --nocapture` prints
//! the seed that caught each variant and what the checker said.
#![allow(clippy::unwrap_used)] // a test fails by panicking

use std::ops::RangeInclusive;

use cnpool_controllers::sabotage::{self, Variant};
use cnpool_sim::checker::Invariant;
use cnpool_sim::{Controllers, Keep, Scenario};

const SEEDS: RangeInclusive<u64> = 1..=200;

/// Two replicas whose pod caches lag: both offer the same oldest Idle pod
/// to different claims at once, and only the acquire's guard stops the
/// second from taking it.
const RACING_REPLICAS: &str = r#"
name: racing-replicas
duration: 5m
settle: 2m
pool: {name: pool, maxIdle: 2, maxPods: 10, drainTimeout: 2m, minDelay: 5s}
world: {startDelay: 3s, stopDelay: 1s, sessionLeaveDelay: 5s}
operators: 2
faults: {maxWatchLag: 2s}
steps:
  - {at: 0s, createClaims: {count: 4}}
  - {at: 1m, createClaims: {count: 3}}
  - {at: 2m, deleteClaims: {count: 3}}
  - {at: 2m10s, createClaims: {count: 3}}
"#;

/// Two replicas whose caches lag: one replica's cache still shows a pod
/// Idle that the other has already given to a claim.
const LAGGING_REPLICA: &str = r#"
name: lagging-replica
duration: 3m
settle: 2m
pool: {name: pool, maxIdle: 2, maxPods: 8, drainTimeout: 2m, minDelay: 5s}
world: {startDelay: 3s, stopDelay: 1s, sessionLeaveDelay: 5s}
operators: 2
faults: {maxWatchLag: 2s}
steps:
  - {at: 0s, createClaims: {count: 4}}
  - {at: 1m, createClaims: {count: 2}}
"#;

/// Acquires whose answer is lost after they were applied, and two replicas
/// binding the same claim: a claim ends up holding two pods.
const LOST_ANSWERS: &str = r#"
name: lost-answers
duration: 4m
settle: 2m
pool: {name: pool, maxIdle: 2, maxPods: 10, drainTimeout: 2m, minDelay: 5s}
world: {startDelay: 3s, stopDelay: 1s, sessionLeaveDelay: 5s}
operators: 2
faults: {maxWatchLag: 1s, timeoutAppliedPerWrite: 0.05}
steps:
  - {at: 0s, createClaims: {count: 4}}
  - {at: 1m, createClaims: {count: 3}}
"#;

/// One operator, no fault but watch lag: claims bind one after another.
const CALM_POOL: &str = r#"
name: calm-pool
duration: 2m
settle: 2m
pool: {name: pool, maxIdle: 2, maxPods: 8, drainTimeout: 2m, minDelay: 5s}
world: {startDelay: 3s, stopDelay: 1s, sessionLeaveDelay: 5s}
operators: 1
faults: {maxWatchLag: 2s}
steps:
  - {at: 0s, createClaims: {count: 4}}
  - {at: 1m, createClaims: {count: 2}}
"#;

/// One operator, no fault but watch lag: claims bind, then specs whose
/// `additionalPodLabels` carry another live claim's UID as `claim-uid`
/// (a new claim's, or a live claim's edited to) come in.
const FORGED_OWNER: &str = r#"
name: forged-owner
duration: 3m
settle: 2m
pool: {name: pool, maxIdle: 2, maxPods: 10, drainTimeout: 2m, minDelay: 5s}
world: {startDelay: 3s, stopDelay: 1s, sessionLeaveDelay: 5s}
operators: 1
faults: {maxWatchLag: 1s}
steps:
  - {at: 0s, createClaims: {count: 3}}
  - {at: 40s, hostile: claimUidLabel}
  - {at: 1m20s, hostile: claimUidLabel}
  - {at: 2m, hostile: claimUidLabel}
"#;

/// What the checker found against `invariant` in one run of `seed`, with
/// `variant` on (or the correct protocol).
fn breaches(scenario: &Scenario, seed: u64, variant: Option<Variant>, invariant: Invariant) -> Vec<String> {
    let run = || cnpool_sim::run(scenario, seed, Controllers::Cnpool, Keep::default()).unwrap();
    let outcome = match variant {
        Some(variant) => sabotage::with(variant, run),
        None => run(),
    };
    let found = outcome.violations.into_iter().filter(|violation| violation.invariant == invariant);
    found.map(|violation| format!("{:.0}s {}", violation.at_seconds, violation.detail)).collect()
}

/// Finds the first seed of [`SEEDS`] on which `variant` breaks
/// `invariant`, and checks that the correct protocol keeps it on that seed.
fn caught(yaml: &str, variant: Variant, invariant: Invariant) {
    let scenario = Scenario::from_yaml("broken_variants.rs", yaml).unwrap();
    let caught = SEEDS.clone().find_map(|seed| {
        let found = breaches(&scenario, seed, Some(variant), invariant);
        (!found.is_empty()).then_some((seed, found))
    });
    let Some((seed, found)) = caught else {
        panic!("{variant:?} broke no {invariant:?} in seeds {SEEDS:?} of {}", scenario.name);
    };
    let correct = breaches(&scenario, seed, None, invariant);
    assert!(correct.is_empty(), "seed {seed} breaks {invariant:?} with the correct protocol too: {correct:?}");
    eprintln!("{variant:?}: {invariant:?} at seed {seed} of {}: {}", scenario.name, found[0]);
}

#[test]
fn an_unguarded_acquire_binds_one_pod_to_two_claims() {
    caught(RACING_REPLICAS, Variant::UnguardedAcquire, Invariant::I1);
}

#[test]
fn a_loss_taken_from_the_cache_is_refuted_by_the_server() {
    caught(LAGGING_REPLICA, Variant::LostWithoutLiveRead, Invariant::I2);
}

#[test]
fn an_adopt_that_keeps_extra_pods_leaks_them() {
    caught(LOST_ANSWERS, Variant::AdoptKeepsExtras, Invariant::I3);
}

#[test]
fn a_store_written_from_the_claim_keeps_new_claims_waiting() {
    caught(CALM_POOL, Variant::StoreFromClaim, Invariant::I4);
}

#[test]
fn labels_from_a_spec_that_reach_the_owner_keys_forge_an_owner() {
    caught(FORGED_OWNER, Variant::OwnerLabelsFromSpec, Invariant::I8);
}
