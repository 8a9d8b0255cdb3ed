//! Deliberately broken variants of the binding protocol (DESIGN §4), so that
//! the simulator's tests can show it catches each one.
//!
//! This module exists only with the `sabotage` feature, which cnpool-sim's
//! dev-dependencies and the model checker (cnpool-check, a crate of the
//! binary's lab) enable. The operator's build, without the lab, never has it
//! (ci/lab-free-build.sh checks): there the controllers compile to exactly
//! their correct code. In a lab build a variant is off unless switched on,
//! for the current thread only, inside [`with`]: the simulator runs each
//! seed on its own thread (a current-thread runtime), so seeds run in
//! parallel by the test harness do not interfere, and `cnpool check
//! --variant` switches it on around each step of its model, whatever worker
//! thread takes the step.

use std::cell::Cell;

use cnpool_core::claim::{ClaimInput, ClaimStep, next_claim_step};
use cnpool_core::convert::claim_view;
use cnpool_core::model::{ClaimView, PodView, Read, StoreView};
use cnpool_core::store::{DesiredStore, StorePlan, store_writes};
use cnpool_registry::{StoreLabels, WorkState};

use crate::context::Context;

/// One way to break the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Acquire sends its write without the `test` operations that pin the
    /// pod's `phase`, `claim-uid` and `claimed-by` as read: a pod another
    /// claim took since the cache showed it Idle is taken over.
    UnguardedAcquire,
    /// A claim whose recorded pod looks lost in the cache is marked Lost on
    /// that cached view, without the live read that would refute it.
    LostWithoutLiveRead,
    /// A claim holding several pods keeps them all: it goes on with the one
    /// adopt would keep and never releases the others.
    AdoptKeepsExtras,
    /// The CN-store controller writes a pod's store from the claim that
    /// points at the pod (`spec.podName`): Working with that claim's CN
    /// labels, else Draining with none, whatever the pod itself says.
    StoreFromClaim,
    /// The controllers act on a claim whose spec fails validation, and the
    /// guarded write lets its `additionalPodLabels` overwrite owner and
    /// phase keys: a claim naming another claim's UID there hands its pod
    /// to that claim (I8).
    OwnerLabelsFromSpec,
}

thread_local! {
    static ACTIVE: Cell<Option<Variant>> = const { Cell::new(None) };
}

/// Runs `run` with `variant` switched on for this thread, and off again
/// afterwards (also when `run` panics).
pub fn with<T>(variant: Variant, run: impl FnOnce() -> T) -> T {
    struct Restore(Option<Variant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            ACTIVE.with(|active| active.set(self.0));
        }
    }
    let _restore = Restore(ACTIVE.with(|active| active.replace(Some(variant))));
    run()
}

/// Whether `variant` is on for this thread.
pub(crate) fn active(variant: Variant) -> bool {
    ACTIVE.with(|active| active.get() == Some(variant))
}

/// [`Variant::AdoptKeepsExtras`]: of the pods carrying the claim's UID, the
/// decision sees only the one adopt would keep, so the others are never
/// released (the migration source is left as it is). Public, as
/// [`ignore_validation`] and [`loss_from_cache`], for the model checker,
/// which calls them where the claim controller does.
pub fn hide_extra_pods(claim: &ClaimView, owned: Vec<PodView>) -> Vec<PodView> {
    if !active(Variant::AdoptKeepsExtras) {
        return owned;
    }
    let held = |pod: &PodView| pod.is_owned_by(&claim.uid) && !claim.is_source(&pod.name);
    let mut holding: Vec<&PodView> = owned.iter().filter(|pod| held(pod)).collect();
    if holding.len() < 2 {
        return owned;
    }
    holding.sort_by_key(|pod| (pod.name.as_str(), pod.uid.as_str()));
    let keep = cnpool_core::claim::pod_to_keep(claim, &holding).uid.clone();
    owned.into_iter().filter(|pod| !held(pod) || pod.uid == keep).collect()
}

/// [`Variant::LostWithoutLiveRead`]: a loss the decision would confirm by
/// a live read is decided again as if the cache were that read. Public, as
/// [`hide_extra_pods`].
pub fn loss_from_cache<'a>(step: ClaimStep<'a>, input: &ClaimInput<'a, '_>) -> ClaimStep<'a> {
    match step {
        ClaimStep::ConfirmLost(_) if active(Variant::LostWithoutLiveRead) => {
            next_claim_step(&ClaimInput { read: Read::Live, stores_listed: true, ..*input })
        }
        step => step,
    }
}

/// [`Variant::OwnerLabelsFromSpec`]: the claim is read as if its spec were
/// valid.
pub fn ignore_validation(mut claim: ClaimView) -> ClaimView {
    if active(Variant::OwnerLabelsFromSpec) {
        claim.invalid = None;
    }
    claim
}

/// [`Variant::StoreFromClaim`]: replaces the plan's store writes with those
/// that make the store what the claims in the cache say of the pod.
pub(crate) fn store_from_claim<R>(
    ctx: &Context<R>,
    namespace: &str,
    pod: &PodView,
    observed: Option<&StoreView>,
    mut plan: StorePlan,
) -> StorePlan {
    let Some(observed) = observed.filter(|_| active(Variant::StoreFromClaim)) else {
        return plan;
    };
    let claimant = ctx
        .claims
        .pointing_at(namespace, &pod.name)
        .into_iter()
        .filter_map(|name| ctx.claims.get(&(namespace.to_owned(), name)))
        .find(|claim| claim.spec.pod_name == pod.name);
    let desired = match claimant.as_deref().map(claim_view) {
        Some(Ok(claim)) => DesiredStore { state: WorkState::Working, labels: Some(claim.cn_labels) },
        _ => DesiredStore { state: WorkState::Draining, labels: Some(StoreLabels::new()) },
    };
    plan.writes = store_writes(&desired, observed);
    plan
}
