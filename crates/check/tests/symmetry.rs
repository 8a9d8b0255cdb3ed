//! The symmetry reduction is sound: exploring with it reaches exactly the
//! representatives of the states reached without it, the claims' swap maps
//! reachable states to reachable states with the same verdicts, and every
//! broken variant is caught, by the same property and as shortly, with it
//! and without.
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

/// `state` without the text of a write's violation, which names claims as
/// they were when it was written and is not renamed by the swap (its
/// property, which the verdicts read, is kept).
fn without_detail(mut state: State) -> State {
    if let Some((_, detail)) = &mut state.broken {
        detail.clear();
    }
    state
}

fn reduction_is_sound(config: &str, variant: Option<Variant>) {
    let full = CheckModel::new(Config::named(config).unwrap(), variant, false);
    let reduced = CheckModel::new(Config::named(config).unwrap(), variant, true);
    let Some(swap) = reduced.claim_swap().cloned() else {
        panic!("{config}: the configuration's two claims are not taken as interchangeable")
    };
    let every: HashSet<State> = reachable(&full).into_iter().map(without_detail).collect();
    let explored: HashSet<State> = reachable(&reduced).into_iter().map(without_detail).collect();
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
    reduction_is_sound("race", None);
    reduction_is_sound("twins", None);
    reduction_is_sound("forged-twins", None);
}

/// With the variant on, the labels that name the other claim reach the
/// pods (and each such write is a dead end, a violation).
#[test]
fn the_claims_symmetry_holds_when_labels_that_name_claims_reach_the_pods() {
    reduction_is_sound("forged-twins", Some(Variant::OwnerLabelsFromSpec));
}

#[test]
fn a_claims_swap_is_its_own_inverse_and_renames_every_identity() {
    for config in ["twins", "forged-twins"] {
        let model = CheckModel::new(Config::named(config).unwrap(), None, true);
        let swap = model.claim_swap().unwrap().clone();
        for state in reachable(&CheckModel::new(Config::named(config).unwrap(), None, false)) {
            let twin = model.swapped(&swap, &state);
            assert_eq!(model.swapped(&swap, &twin), state);
            // A claim's identity is in its name and UID, and in the values
            // of its labels that name a claim; nothing of the twin names the
            // claim the state gave it, unless the other claim does too.
            for claim in state.claims.values() {
                let renamed = twin.claims.get(&swap.text(&claim.name)).unwrap();
                assert_eq!(renamed.uid, swap.text(&claim.uid));
                for (key, value) in &claim.additional_pod_labels {
                    assert_eq!(renamed.additional_pod_labels.get(key), Some(&swap.text(value)), "{config}: {key}");
                }
            }
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
        ("forged-labels", Variant::OwnerLabelsFromSpec),
    ] {
        // The shortest path to a violation has one length with the
        // reduction and without: a path and its representatives' path are
        // as long.
        let caught = |symmetry: bool| {
            let options = Options { threads: 1, symmetry, ..Options::default() };
            let report = check(Config::named(config).unwrap(), Some(variant), &options).unwrap();
            assert!(report.violations.iter().all(|violation| violation.actions > 0), "{}", report.render());
            report.violations.into_iter().map(|violation| (violation.property, violation.actions)).collect::<Vec<_>>()
        };
        let with = caught(true);
        assert!(!with.is_empty(), "{variant:?} on {config} is not caught with the reduction");
        assert_eq!(with, caught(false), "{variant:?} on {config}");
    }
}
