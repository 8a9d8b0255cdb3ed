//! The model checker on tiny configurations (seconds each): the correct
//! protocol passes, and each broken variant is caught with a counterexample
//! trace.
#![allow(clippy::unwrap_used)] // a test fails by panicking

use cnpool_check::model::{OWNER_KEYS, WRITES};
use cnpool_check::{Config, Options, Report, Variant, check};

fn run(config: &str, variant: Option<Variant>) -> Report {
    check(Config::named(config).unwrap(), variant, &Options::default()).unwrap()
}

fn passes(config: &str) {
    let report = run(config, None);
    eprintln!("{}", report.render());
    assert!(report.violations.is_empty(), "{}", report.render());
    assert!(report.unique_states > 100, "the check explored too little: {}", report.render());
}

/// The variant breaks `property` on `config`, with a trace of the path.
fn caught(config: &str, variant: Variant, property: &str) {
    let report = run(config, Some(variant));
    eprintln!("{}", report.render());
    let violation = report.violations.iter().find(|violation| violation.property == property);
    let Some(violation) = violation else {
        panic!("{variant:?} broke no {property:?} on {config}: {}", report.render());
    };
    assert!(violation.actions > 0 && violation.trace.len() >= violation.actions, "{}", report.render());
    assert!(!violation.detail.is_empty(), "{}", report.render());
}

#[test]
fn the_small_configurations_pass() {
    passes("race");
    passes("pair");
    passes("prebound");
}

/// A claim whose migration target is lost after its source was released
/// binds again, its old source included (the core's row 10m): before, it
/// kept that pod as its source, which it can never take, and stayed Lost.
#[test]
fn a_claim_that_lost_its_target_after_releasing_its_source_binds_again() {
    passes("lost-migration");
}

/// A claim whose `additionalPodLabels` name another claim in the owner
/// keys is refused (its spec fails validation), whatever the replicas'
/// caches show and whichever claim is deleted and created again; the other
/// claim binds, and no pod's owner keys are ever the spec's.
#[test]
fn a_claim_whose_labels_forge_another_claims_ownership_is_refused() {
    passes("forged-labels");
}

#[test]
fn an_unguarded_acquire_hands_a_pod_from_one_claim_to_another() {
    caught("race", Variant::UnguardedAcquire, WRITES);
}

#[test]
fn a_loss_taken_from_the_cache_is_refuted_by_the_server() {
    caught("pair", Variant::LostWithoutLiveRead, WRITES);
}

#[test]
fn an_adopt_that_keeps_extra_pods_leaks_them() {
    caught("pair", Variant::AdoptKeepsExtras, "I2 I3 I7 recover and claims bind");
}

#[test]
fn a_store_written_from_the_claim_serves_the_wrong_tenant() {
    caught("prebound", Variant::StoreFromClaim, "I2 I3 I7 recover and claims bind");
}

#[test]
fn labels_from_a_spec_that_reach_the_owner_keys_forge_an_owner() {
    caught("forged-labels", Variant::OwnerLabelsFromSpec, OWNER_KEYS);
}
