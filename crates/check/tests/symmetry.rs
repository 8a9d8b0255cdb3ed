//! The symmetry reduction is sound: exploring with it reaches exactly the
//! representatives of the states reached without it, the claims' swap maps
//! reachable states to reachable states with the same verdicts, and every
//! broken variant is caught, by the same property, with it and without.
#![allow(clippy::unwrap_used)]
// a test fails by panicking
// A state's objects memoise their views in cells that take no part in
// equality or hashing (objects.rs), so states are sound set members.
#![allow(clippy::mutable_key_type)]

use std::collections::{HashSet, VecDeque};

use cnpool_check::model::{CheckModel, State};
use cnpool_check::{Config, Options, Variant, check};
use stateright::Model;

/// Every state reachable in `model` (breadth first, as the checker goes).
fn reachable(model: &CheckModel) -> HashSet<State> {
    let mut seen: HashSet<State> = model.init_states().into_iter().collect();
    let mut pending: VecDeque<State> = seen.iter().cloned().collect();
    let mut actions = Vec::new();
    while let Some(state) = pending.pop_front() {
        model.actions(&state, &mut actions);
        for action in actions.drain(..) {
            if let Some(next) = model.next_state(&state, action)
                && seen.insert(next.clone())
            {
                pending.push_back(next);
            }
        }
    }
    seen
}

/// Whether each property holds in `state`.
fn verdicts(model: &CheckModel, state: &State) -> Vec<bool> {
    model.properties().iter().map(|property| (property.condition)(model, state)).collect()
}

fn reduction_is_sound(config: &str) {
    let full = CheckModel::new(Config::named(config).unwrap(), None, false);
    let reduced = CheckModel::new(Config::named(config).unwrap(), None, true);
    let Some(swap) = reduced.claim_swap().cloned() else {
        panic!("{config}: the configuration's two claims are not taken as interchangeable")
    };
    let every = reachable(&full);
    let explored = reachable(&reduced);
    assert!(explored.len() < every.len(), "{config}: {} states reduced to {}", every.len(), explored.len());
    for state in &every {
        let twin = full.swapped(&swap, state);
        assert!(every.contains(&twin), "{config}: the claims' swap of a reachable state is not reachable: {state:#?}");
        assert_eq!(verdicts(&full, state), verdicts(&full, &twin), "{config}: twins judged apart: {state:#?}");
    }
    let representatives = |states: &HashSet<State>| -> HashSet<State> {
        states.iter().map(|state| reduced.representative(state).0).collect()
    };
    assert!(
        representatives(&every) == representatives(&explored),
        "{config}: the reduced exploration does not reach the representatives of every state"
    );
}

#[test]
fn the_claims_symmetry_loses_no_state_and_no_verdict() {
    reduction_is_sound("race");
    reduction_is_sound("twins");
}

#[test]
fn a_claims_swap_is_its_own_inverse_and_renames_every_identity() {
    let model = CheckModel::new(Config::named("twins").unwrap(), None, true);
    let swap = model.claim_swap().unwrap().clone();
    for state in reachable(&CheckModel::new(Config::named("twins").unwrap(), None, false)) {
        let twin = model.swapped(&swap, &state);
        assert_eq!(model.swapped(&swap, &twin), state);
        // A claim's identity is in its name and UID; nothing of the twin
        // names the claim the state gave it, unless the other claim does too.
        for claim in state.claims.values() {
            let renamed = twin.claims.get(&swap.text(&claim.name)).unwrap();
            assert_eq!(renamed.uid, swap.text(&claim.uid));
        }
    }
}

#[test]
fn every_variant_is_caught_by_the_same_property_with_the_reduction_and_without() {
    for (config, variant) in [
        ("race", Variant::UnguardedAcquire),
        ("pair", Variant::LostWithoutLiveRead),
        ("pair", Variant::AdoptKeepsExtras),
        ("prebound", Variant::StoreFromClaim),
    ] {
        // The lengths are not compared: stateright's breadth-first checker
        // lets a later, longer path to a violation of the same property
        // replace the first within a block of states, so "shortest" is
        // nearly so with or without the reduction.
        let caught = |symmetry: bool| {
            let options = Options { threads: 1, symmetry, ..Options::default() };
            let report = check(Config::named(config).unwrap(), Some(variant), &options).unwrap();
            assert!(report.violations.iter().all(|violation| violation.actions > 0), "{}", report.render());
            report.violations.into_iter().map(|violation| violation.property).collect::<Vec<_>>()
        };
        let with = caught(true);
        assert!(!with.is_empty(), "{variant:?} on {config} is not caught with the reduction");
        assert_eq!(with, caught(false), "{variant:?} on {config}");
    }
}
