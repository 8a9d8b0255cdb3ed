use cnpool_api::{ClaimPhase, PodPhase};
use cnpool_registry::WorkState;
use proptest::prelude::*;

use super::*;
use crate::model::StoreView;
use crate::testing::*;

const NOW: i64 = 10_000;
const STORE_MISSING_BOUND: Duration = Duration::from_secs(60);
const PROPAGATION_DELAY: Duration = Duration::from_secs(15);
/// The operator's cutover time: after the claims of [`claim`] were created.
const CUTOVER: i64 = 5_000;

/// What the store controller last saw, owned so that a test can build it.
#[derive(Clone, Debug)]
enum Seen {
    Registered(StoreView),
    Missing(Timestamp),
    Unobserved,
}

/// One claim decision's inputs, owned.
#[derive(Clone, Debug)]
struct World {
    claim: ClaimView,
    owned: Vec<PodView>,
    /// All pods the claim could point at; `pointed` is looked up here.
    pods: Vec<PodView>,
    read: Read,
    store: Seen,
    pools: Vec<PoolView>,
    /// Since when the held pod's store has served, as the controller noted.
    serving_since: Option<Timestamp>,
    /// Whether the pool's rollout lets this claim start migrating.
    may_roll: bool,
    /// Whether a live read confirmed the claim current.
    claim_confirmed: bool,
    /// The pod this process acquired for the claim lately.
    acquired_lately: Option<String>,
    /// Whether HAKeeper's stores were listed in this reconcile.
    stores_listed: bool,
    /// Whether the pool's Idle pods were read as candidates.
    candidates_read: bool,
    /// The operator's cutover time, if known.
    adopt_legacy_before: Option<Timestamp>,
}

impl World {
    fn new(claim: ClaimView) -> Self {
        Self {
            claim,
            owned: Vec::new(),
            pods: Vec::new(),
            read: Read::Cached,
            store: Seen::Unobserved,
            pools: vec![pool()],
            serving_since: None,
            may_roll: false,
            claim_confirmed: false,
            acquired_lately: None,
            stores_listed: true,
            candidates_read: true,
            adopt_legacy_before: Some(at(CUTOVER)),
        }
    }

    /// A live read confirmed the claim as read current.
    fn confirmed(self) -> Self {
        Self { claim_confirmed: true, ..self }
    }

    /// This process acquired the pod `name` for the claim moments ago.
    fn acquired(self, name: &str) -> Self {
        let uid = self.pod(name).uid.clone();
        Self { acquired_lately: Some(uid), ..self }
    }

    /// The claim holds `pod`, which is also in the pool's pods.
    fn holding(mut self, pod: PodView) -> Self {
        self.owned.push(pod.clone());
        self.pods.push(pod);
        self
    }

    fn with_pod(mut self, pod: PodView) -> Self {
        self.pods.push(pod);
        self
    }

    fn live(self) -> Self {
        Self { read: Read::Live, ..self }
    }

    fn store(self, store: Seen) -> Self {
        Self { store, ..self }
    }

    fn serving_since(self, seconds: i64) -> Self {
        Self { serving_since: Some(at(seconds)), ..self }
    }

    fn step(&self) -> ClaimStep<'_> {
        self.decide(next_claim_step)
    }

    fn store_loss_due_in(&self) -> Option<Duration> {
        self.decide(|input| store_loss_due_in(input))
    }

    /// `decide` applied to this world's input.
    fn decide<'w, T>(&'w self, decide: impl for<'c> FnOnce(&ClaimInput<'w, 'c>) -> T) -> T {
        let store = match &self.store {
            Seen::Registered(store) => ObservedStore::Registered(store),
            Seen::Missing(since) => ObservedStore::Missing { since: *since },
            Seen::Unobserved => ObservedStore::Unobserved,
        };
        let pointed = self.claim.pointed_pod().and_then(|name| self.pods.iter().find(|pod| pod.name == name));
        let candidates: Vec<&PodView> = self.pods.iter().collect();
        decide(&ClaimInput {
            claim: &self.claim,
            owned: &self.owned,
            pointed,
            read: self.read,
            store,
            candidates: self.candidates_read.then_some(candidates.as_slice()),
            pools: &self.pools,
            now: at(NOW),
            store_missing_bound: STORE_MISSING_BOUND,
            source: self.claim.source_pod.as_ref().and_then(|name| self.pods.iter().find(|pod| pod.name == *name)),
            serving_since: self.serving_since,
            propagation_delay: PROPAGATION_DELAY,
            may_roll: self.may_roll,
            claim_confirmed: self.claim_confirmed,
            acquired_lately: self.acquired_lately.as_deref(),
            stores_listed: self.stores_listed,
            adopt_legacy_before: self.adopt_legacy_before,
        })
    }

    fn pod(&self, name: &str) -> &PodView {
        self.pods.iter().find(|pod| pod.name == name).unwrap()
    }
}

fn drain(pod: &PodView) -> Release<'_> {
    Release { pod, then: AfterRelease::Drain }
}

/// A claim bound to pod `p` with everything recorded, in `phase`.
fn settled(phase: ClaimPhase) -> World {
    let pod = bound_to(&claim(), idle_pod("p", 1));
    World::new(recording(claim(), &pod, phase)).holding(pod)
}

/// A claim the Go operator bound to `pod-x`: spec and `status.store.string`
/// name it, no UID anywhere.
fn go_claim(name: &str, uid: &str) -> ClaimView {
    ClaimView {
        name: name.into(),
        uid: uid.into(),
        pod_name: Some("pod-x".into()),
        recorded_pod_name: Some("pod-x".into()),
        phase: Some(ClaimPhase::Bound),
        ..claim()
    }
}

fn go_bound(claimed_by: &str) -> PodView {
    PodView { phase: Some(PodPhase::Bound), claimed_by: Some(claimed_by.into()), ..idle_pod("pod-x", 1) }
}

// Row 1.
#[test]
fn a_deleting_claim_without_finalizer_needs_nothing() {
    let world = World::new(ClaimView { deleting: true, has_finalizer: false, ..claim() });
    assert_eq!(world.step(), ClaimStep::InSync);
}

// Row 2.
#[test]
fn a_deleting_claim_read_from_the_cache_lists_its_pods_live_first() {
    let world = settled(ClaimPhase::Bound);
    let world = World { claim: ClaimView { deleting: true, ..world.claim.clone() }, ..world };
    assert_eq!(world.step(), ClaimStep::ConfirmFinalize);
}

// Row 3.
#[test]
fn finalize_releases_every_pod_carrying_the_uid_and_nothing_else() {
    let claim = ClaimView { deleting: true, source_pod: Some("source".into()), ..claim() };
    let world = World::new(claim.clone())
        .holding(bound_to(&claim, idle_pod("target", 1)))
        .holding(bound_to(&claim, idle_pod("source", 1)))
        .holding(PodView { failed: true, ..bound_to(&claim, idle_pod("crashed", 1)) })
        // A stale index entry: the pod now belongs to someone else.
        .holding(PodView { claim_uid: Some("uid-claim-b".into()), ..idle_pod("stolen", 1) })
        .live();
    let release = vec![
        Release { pod: world.pod("crashed"), then: AfterRelease::Retire },
        drain(world.pod("source")),
        drain(world.pod("target")),
    ];
    assert_eq!(world.step(), ClaimStep::Finalize { release });
}

// Row 4.
#[test]
fn the_finalizer_comes_first() {
    let world = settled(ClaimPhase::Bound);
    let world = World { claim: ClaimView { has_finalizer: false, ..world.claim.clone() }, ..world };
    assert_eq!(world.step(), ClaimStep::AddFinalizer);
}

#[test]
fn a_new_claim_acquires_before_its_finalizer_and_records_it_with_the_pointer() {
    let new = ClaimView { has_finalizer: false, ..claim() };
    let world = World::new(new.clone()).with_pod(idle_pod("spare", 1)).confirmed();
    assert_eq!(world.step(), ClaimStep::Acquire { candidates: vec![world.pod("spare")] });
    let held = bound_to(&new, idle_pod("spare", 1));
    let world = World::new(new).holding(held).acquired("spare");
    assert_eq!(world.step(), ClaimStep::Record(world.pod("spare")), "the record write adds the finalizer");
}

// Rows 11 and 13c: guard (1), the claim is read live before a take.
#[test]
fn a_claim_read_from_the_cache_takes_a_pod_only_once_confirmed_current() {
    let world = World::new(claim()).with_pod(idle_pod("spare", 1));
    // Another replica may have recorded a pod on this claim already.
    assert_eq!(world.step(), ClaimStep::ConfirmCurrent);
    let acquire = ClaimStep::Acquire { candidates: vec![world.pod("spare")] };
    assert_eq!(world.clone().confirmed().step(), acquire);
    assert_eq!(world.clone().live().step(), acquire);
    // Nothing to take: nothing to confirm either.
    assert_eq!(World::new(claim()).step(), ClaimStep::Acquire { candidates: vec![] });

    let requested = ClaimView { pod_name: Some("spare".into()), ..claim() };
    let world = World::new(requested).with_pod(idle_pod("spare", 1));
    assert_eq!(world.step(), ClaimStep::ConfirmCurrent);
    assert_eq!(world.clone().confirmed().step(), ClaimStep::AcquirePreBound(world.pod("spare")));
}

// Row 13a: guard (2), no second pod while the first is not in the cache.
#[test]
fn a_claim_that_took_a_pod_moments_ago_waits_for_the_cache_to_show_it() {
    let world = World::new(claim()).with_pod(idle_pod("taken", 1)).with_pod(idle_pod("spare", 2)).confirmed();
    let world = world.acquired("taken");
    assert_eq!(world.step(), ClaimStep::AwaitAcquired);
    // The cache shows it: the claim holds it and records it.
    let claim = claim();
    let taken = bound_to(&claim, idle_pod("taken", 1));
    let world = World::new(claim).holding(taken).with_pod(idle_pod("spare", 2)).acquired("taken");
    assert_eq!(world.step(), ClaimStep::Record(world.pod("taken")));
}

#[test]
fn a_migration_source_taken_lately_is_no_reason_to_wait() {
    let world = waiting_for_a_target().with_pod(idle_pod("spare", 2)).acquired("source").confirmed();
    assert_eq!(world.step(), ClaimStep::Acquire { candidates: vec![world.pod("spare")] });
}

// Row 13r.
#[test]
fn the_pool_is_read_only_when_the_claim_is_about_to_take_a_pod() {
    let unread = |world: World| World { candidates_read: false, ..world };
    assert_eq!(unread(World::new(claim()).with_pod(idle_pod("spare", 1))).step(), ClaimStep::ReadCandidates);
    // A claim that holds its pod, or asks for a named one, needs no candidates.
    assert_eq!(
        unread(settled(ClaimPhase::Bound)).store(Seen::Registered(serving_store(&claim()))).step(),
        ClaimStep::InSync
    );
    let requested = ClaimView { pod_name: Some("spare".into()), ..claim() };
    let world = unread(World::new(requested).with_pod(idle_pod("spare", 1)).confirmed());
    assert_eq!(world.step(), ClaimStep::AcquirePreBound(world.pod("spare")));
}

// Row 14a: guard (3), a pod is recorded from the cache only when just acquired.
#[test]
fn a_pod_the_cache_shows_as_ours_is_recorded_only_on_a_live_read_unless_just_acquired() {
    let claim = claim();
    let world = World::new(claim.clone()).holding(bound_to(&claim, idle_pod("held", 1)));
    // Maybe one the claim held before the cache fell behind, released since.
    assert_eq!(world.step(), ClaimStep::ConfirmRecord);
    assert_eq!(world.clone().live().step(), ClaimStep::Record(world.pod("held")));
    assert_eq!(world.clone().acquired("held").step(), ClaimStep::Record(world.pod("held")));
}

// Rows 8 and 16: guard (4), a store is missing only on a listing of this reconcile.
#[test]
fn a_loss_for_a_missing_store_is_written_only_on_a_fresh_store_listing() {
    let world = settled(ClaimPhase::Bound).store(Seen::Missing(at(NOW - 61))).live();
    let unlisted = World { stores_listed: false, ..world.clone() };
    assert_eq!(unlisted.step(), ClaimStep::RefreshStores);
    let retire = Release { pod: world.pod("p"), then: AfterRelease::Retire };
    assert_eq!(world.step(), ClaimStep::MarkLost { reason: LossReason::StoreMissing, release: vec![retire] });
    // Other losses need no listing.
    let deleting = PodView { deleting: true, ..bound_to(&claim(), idle_pod("p", 1)) };
    let world = World::new(recording(claim(), &deleting, ClaimPhase::Bound)).holding(deleting).live();
    let world = World { stores_listed: false, ..world };
    assert!(matches!(world.step(), ClaimStep::MarkLost { reason: LossReason::PodDeleting, .. }));
}

// Row i: nothing is done because of an invalid spec.
#[test]
fn an_invalid_claim_takes_no_pod_and_says_why() {
    let world = World::new(hostile_claim()).with_pod(idle_pod("spare", 1)).confirmed();
    assert_eq!(world.step(), ClaimStep::ReportInvalid);
    let requested = ClaimView { pod_name: Some("spare".into()), ..hostile_claim() };
    assert_eq!(World::new(requested).with_pod(idle_pod("spare", 1)).confirmed().step(), ClaimStep::ReportInvalid);
}

#[test]
fn an_invalid_claim_keeps_the_pod_it_holds_and_its_labels_are_not_rewritten() {
    let hostile = hostile_claim();
    let pod = bound_to(&claim(), idle_pod("p", 1));
    let world = World::new(recording(hostile.clone(), &pod, ClaimPhase::Bound))
        .holding(pod)
        .store(Seen::Registered(serving_store(&hostile)));
    // The pod lacks the spec's (reserved) label: a valid claim would rewrite it.
    assert_eq!(world.step(), ClaimStep::ReportInvalid);
    // Its pod deleted, it is still lost (and then not rebound).
    let deleting = World { owned: vec![PodView { deleting: true, ..world.owned[0].clone() }], ..world.clone() };
    let deleting = World { pods: deleting.owned.clone(), ..deleting };
    assert_eq!(deleting.step(), ClaimStep::ConfirmLost(LossReason::PodDeleting));
    let lost = World::new(ClaimView { phase: Some(ClaimPhase::Lost), ..world.claim.clone() });
    assert_eq!(lost.step(), ClaimStep::ReportInvalid, "a Lost invalid claim is not rebound");
}

#[test]
fn an_invalid_go_era_claim_keeps_its_pod_by_name_and_is_not_lost() {
    let go = ClaimView { invalid: hostile_claim().invalid, ..go_claim("a", CLAIM_UID) };
    let pod = PodView { phase: Some(PodPhase::Bound), claimed_by: Some("a".into()), ..idle_pod("pod-x", 1) };
    let world = World::new(go).with_pod(pod).live();
    assert_eq!(world.step(), ClaimStep::ReportInvalid);
}

#[test]
fn whatever_the_step_a_missing_store_under_a_served_claim_is_decided_again_when_its_bound_runs_out() {
    let missing = |world: World, seconds_ago: i64| world.store(Seen::Missing(at(NOW - seconds_ago)));
    let bound = missing(settled(ClaimPhase::Bound), 20);
    assert_eq!(bound.store_loss_due_in(), Some(Duration::from_secs(40)));
    assert_eq!(missing(settled(ClaimPhase::Bound), 60).store_loss_due_in(), None, "due now: the step is the loss");
    let serving = settled(ClaimPhase::Bound).store(Seen::Registered(serving_store(&claim())));
    assert_eq!(serving.store_loss_due_in(), None);
    // An invalid claim asked to migrate waits, reporting its spec, while the
    // store of the source its tenant runs on is missing (seed 1461 of the
    // random scenarios found the loss 5 s late).
    let source = bound_to(&claim(), idle_pod("source", 1));
    let hostile = ClaimView {
        source_pod: Some("source".into()),
        pod_name: Some("target".into()),
        ..recording(hostile_claim(), &source, ClaimPhase::Bound)
    };
    let world = World::new(hostile).holding(source).with_pod(idle_pod("target", 2)).confirmed();
    let world = missing(world, 30);
    assert_eq!(world.step(), ClaimStep::ReportInvalid);
    assert_eq!(world.store_loss_due_in(), Some(Duration::from_secs(30)));
}

// Row 8t: a lost target sends the claim back to its still-serving source.
fn migrating_to(target: PodView) -> World {
    let claim = claim();
    let source = bound_to(&claim, idle_pod("source", 1));
    let target = bound_to(&claim, target);
    let migrating = ClaimView {
        pod_name: Some("target".into()),
        source_pod: Some("source".into()),
        ..recording(claim, &target, ClaimPhase::Bound)
    };
    World::new(migrating).holding(source).holding(target)
}

#[test]
fn a_migration_whose_target_is_lost_falls_back_to_its_source() {
    let world = migrating_to(PodView { deleting: true, ..idle_pod("target", 2) });
    assert_eq!(world.step(), ClaimStep::ConfirmLost(LossReason::PodDeleting));
    let world = world.live();
    let expected =
        ClaimStep::FallBackToSource { reason: LossReason::PodDeleting, release: vec![drain(world.pod("target"))] };
    assert_eq!(world.step(), expected);
    // A target gone altogether: nothing to release.
    let gone = migrating_to(idle_pod("target", 2));
    let gone = World { owned: vec![gone.pod("source").clone()], pods: vec![gone.pod("source").clone()], ..gone }.live();
    assert_eq!(gone.step(), ClaimStep::FallBackToSource { reason: LossReason::PodDeleted, release: vec![] });
}

#[test]
fn an_invalid_claim_whose_target_is_lost_still_falls_back_to_its_source() {
    // The spec turned invalid mid-migration: the claim must not stay Bound
    // to a target that is gone.
    let world = migrating_to(idle_pod("target", 2));
    let claim = ClaimView { invalid: hostile_claim().invalid, ..world.claim.clone() };
    let gone = World { owned: vec![world.pod("source").clone()], pods: vec![world.pod("source").clone()], ..world };
    let gone = World { claim, ..gone }.live();
    assert_eq!(gone.step(), ClaimStep::FallBackToSource { reason: LossReason::PodDeleted, release: vec![] });
}

#[test]
fn a_migration_that_lost_its_source_too_is_lost() {
    let world = migrating_to(PodView { failed: true, ..idle_pod("target", 2) });
    let source = PodView { deleting: true, ..world.pod("source").clone() };
    let pods = vec![source, world.pod("target").clone()];
    let world = World { owned: pods.clone(), pods, ..world }.live();
    let retire = Release { pod: world.pod("target"), then: AfterRelease::Retire };
    assert_eq!(world.step(), ClaimStep::MarkLost { reason: LossReason::PodFailed, release: vec![retire] });
}

// Row 10m: found by the model checker (cnpool check --config migration).
#[test]
fn a_lost_claim_whose_source_was_released_ends_its_migration_and_can_retake_that_pod() {
    // The target is lost after the source was released (row 22): the source
    // has drained back to Idle, and it is the only pod free.
    let world = migrating_to(PodView { deleting: true, ..idle_pod("target", 2) });
    let world = World {
        owned: vec![world.pod("target").clone()],
        pods: vec![idle_pod("source", 1), world.pod("target").clone()],
        ..world
    }
    .live();
    let lost = ClaimStep::MarkLost { reason: LossReason::PodDeleting, release: vec![drain(world.pod("target"))] };
    assert_eq!(world.step(), lost, "no source to fall back to: the tenant has lost its CN");
    let lost = ClaimView { phase: Some(ClaimPhase::Lost), ..world.claim.clone() };
    let world = World::new(lost).with_pod(idle_pod("source", 1));
    assert_eq!(world.step(), ClaimStep::AbandonMigration, "the released source no longer pins the claim");
    let ended = World { claim: ClaimView { source_pod: None, ..world.claim.clone() }, ..world };
    assert_eq!(ended.step(), ClaimStep::Rebind);
    let rebinding = World { claim: ClaimView { pod_name: None, ..ended.claim.clone() }, ..ended }.confirmed();
    assert_eq!(rebinding.step(), ClaimStep::Acquire { candidates: vec![rebinding.pod("source")] });
}

#[test]
fn a_lost_claim_keeps_a_source_that_is_still_its_own() {
    // The target was lost while the source was deleting: the claim is Lost,
    // and the source is released only once a new target serves (row 22).
    let world = migrating_to(idle_pod("target", 2));
    let source = PodView { deleting: true, ..world.pod("source").clone() };
    let lost = ClaimView { phase: Some(ClaimPhase::Lost), ..world.claim.clone() };
    let world = World::new(lost).holding(source);
    assert_eq!(world.step(), ClaimStep::Rebind);
}

// Row 5.
#[test]
fn adopt_keeps_the_named_pod_and_releases_the_others() {
    let claim = ClaimView { pod_name: Some("p-c".into()), ..claim() };
    let world = World::new(claim.clone())
        .holding(bound_to(&claim, idle_pod("p-b", 1)))
        .holding(bound_to(&claim, idle_pod("p-c", 1)))
        .holding(bound_to(&claim, idle_pod("p-a", 1)));
    // Decided on a live read only: a lagging cache may show another spec.podName.
    assert_eq!(world.step(), ClaimStep::ConfirmRecord);
    let world = world.live();
    let expected =
        ClaimStep::Adopt { keep: world.pod("p-c"), release: vec![drain(world.pod("p-a")), drain(world.pod("p-b"))] };
    assert_eq!(world.step(), expected);
}

#[test]
fn adopt_keeps_the_lowest_name_when_spec_names_none_of_them() {
    let world = World::new(claim())
        .holding(bound_to(&claim(), idle_pod("p-b", 1)))
        .holding(bound_to(&claim(), idle_pod("p-a", 1)))
        .live();
    assert_eq!(world.step(), ClaimStep::Adopt { keep: world.pod("p-a"), release: vec![drain(world.pod("p-b"))] });
}

#[test]
fn the_migration_source_is_not_held_so_never_adopted_back() {
    let source = bound_to(&claim(), idle_pod("source", 1));
    let target = bound_to(&claim(), idle_pod("target", 1));
    let migrating = ClaimView {
        pod_name: Some("target".into()),
        source_pod: Some("source".into()),
        ..recording(claim(), &source, ClaimPhase::Bound)
    };
    let world = World::new(migrating).holding(source).holding(target).acquired("target");
    assert_eq!(world.step(), ClaimStep::Record(world.pod("target")));
}

// Row 6.
#[test]
fn a_pod_the_go_operator_bound_to_this_claim_is_adopted_once() {
    let world = World::new(go_claim("a", CLAIM_UID)).with_pod(go_bound("a"));
    assert_eq!(world.step(), ClaimStep::AdoptLegacy(world.pod("pod-x")));
}

#[test]
fn of_two_claims_on_one_go_bound_pod_the_one_claimed_by_names_keeps_it() {
    let pod = go_bound("a");
    let keeper = World::new(go_claim("a", CLAIM_UID)).with_pod(pod.clone());
    assert_eq!(keeper.step(), ClaimStep::AdoptLegacy(keeper.pod("pod-x")));
    let loser = World::new(go_claim("b", "uid-claim-b")).with_pod(pod.clone());
    assert_eq!(loser.step(), ClaimStep::ConfirmLost(LossReason::Misbound));
    assert_eq!(loser.live().step(), ClaimStep::MarkLost { reason: LossReason::Misbound, release: vec![] });
    // Still Misbound once the keeper has adopted it.
    let adopted = PodView { claim_uid: Some(CLAIM_UID.into()), ..pod };
    let loser = World::new(go_claim("b", "uid-claim-b")).with_pod(adopted).live();
    assert_eq!(loser.step(), ClaimStep::MarkLost { reason: LossReason::Misbound, release: vec![] });
}

#[test]
fn a_claim_created_since_the_cutover_does_not_inherit_the_go_pod_of_its_name() {
    // Deleted and created again under the Go claim's name, asking for its pod.
    for created in [CUTOVER, CUTOVER + 1] {
        let recreated = ClaimView {
            created: Some(at(created)),
            phase: None,
            recorded_pod_name: None,
            ..go_claim("a", "uid-recreated")
        };
        let world = World::new(recreated).with_pod(go_bound("a"));
        assert_eq!(world.step(), ClaimStep::ReportUnavailable(Unavailable::Ineligible(Ineligible::NotIdle)));
    }
}

// Row 6w.
#[test]
fn without_a_known_cutover_a_go_claim_waits_and_keeps_its_pod() {
    let world = World { adopt_legacy_before: None, ..World::new(go_claim("a", CLAIM_UID)).with_pod(go_bound("a")) };
    for world in [world.clone(), world.live()] {
        assert_eq!(world.step(), ClaimStep::ReportUnavailable(Unavailable::CutoverUnknown));
    }
    // A claim that does not point at a Go-bound pod has no reason to wait.
    let fresh = World { adopt_legacy_before: None, ..World::new(claim()).with_pod(idle_pod("p", 1)) };
    assert_eq!(fresh.step(), ClaimStep::ConfirmCurrent);
}

#[test]
fn the_migration_source_is_never_adopted_even_as_legacy() {
    let claim = ClaimView { source_pod: Some("pod-x".into()), ..go_claim("a", CLAIM_UID) };
    let world = World::new(claim).with_pod(go_bound("a"));
    assert!(!matches!(world.step(), ClaimStep::AdoptLegacy(_)), "{:?}", world.step());
}

// Rows 7 and 8.
#[test]
fn a_recorded_pod_gone_from_the_cache_is_confirmed_live_before_lost() {
    let world = settled(ClaimPhase::Bound);
    let world = World { owned: vec![], pods: vec![], ..world };
    assert_eq!(world.step(), ClaimStep::ConfirmLost(LossReason::PodDeleted));
    assert_eq!(world.live().step(), ClaimStep::MarkLost { reason: LossReason::PodDeleted, release: vec![] });
}

#[test]
fn a_go_claim_pointing_at_a_deleted_pod_goes_lost() {
    let world = World::new(go_claim("a", CLAIM_UID)).live();
    assert_eq!(world.step(), ClaimStep::MarkLost { reason: LossReason::PodDeleted, release: vec![] });
}

#[test]
fn each_way_of_losing_an_unheld_pod_has_its_reason() {
    let recorded = bound_to(&claim(), idle_pod("p", 1));
    let cases = [
        // Even Bound and claimed-by this claim, as the Go operator would
        // stamp it: another pod than the one recorded is not adopted.
        (PodView { uid: "uid-p-new".into(), claim_uid: None, ..recorded.clone() }, LossReason::PodReplaced),
        (PodView { claim_uid: Some("uid-claim-b".into()), ..recorded.clone() }, LossReason::OwnedByOther),
        (PodView { claim_uid: None, claimed_by: None, ..recorded.clone() }, LossReason::PodReleased),
    ];
    for (pod, reason) in cases {
        let world = World::new(recording(claim(), &recorded, ClaimPhase::Bound)).with_pod(pod).live();
        assert_eq!(world.step(), ClaimStep::MarkLost { reason, release: vec![] }, "{reason:?}");
    }
}

#[test]
fn a_claim_that_records_nothing_loses_nothing() {
    // Lost applies only to a pod whose UID the claim recorded: a Pending
    // claim pointing at a missing pod has made a request, not lost a pod.
    let world = World::new(ClaimView { pod_name: Some("gone".into()), ..claim() }).live();
    assert_eq!(world.step(), ClaimStep::ReportUnavailable(Unavailable::NotFound));
}

// Row 9.
#[test]
fn a_lost_claim_of_a_set_waits_to_be_replaced() {
    let world = World::new(ClaimView { claim_set: Some("set".into()), ..settled(ClaimPhase::Lost).claim });
    assert_eq!(world.step(), ClaimStep::InSync);
}

// Row 10.
#[test]
fn a_lost_standalone_claim_clears_its_pointer_then_binds_again() {
    let lost = settled(ClaimPhase::Lost).claim;
    assert_eq!(World::new(lost.clone()).step(), ClaimStep::Rebind);
    let cleared = ClaimView { pod_name: None, ..lost };
    let world = World::new(cleared).with_pod(idle_pod("fresh", 1)).confirmed();
    assert_eq!(world.step(), ClaimStep::Acquire { candidates: vec![world.pod("fresh")] });
}

// Row 11.
#[test]
fn a_pre_bound_claim_acquires_exactly_its_pod() {
    let claim = ClaimView { pod_name: Some("wanted".into()), ..claim() };
    let world = World::new(claim).with_pod(idle_pod("older", 0)).with_pod(idle_pod("wanted", 5)).confirmed();
    assert_eq!(world.step(), ClaimStep::AcquirePreBound(world.pod("wanted")));
}

#[test]
fn a_migration_target_is_taken_by_acquire() {
    let source = bound_to(&claim(), idle_pod("source", 1));
    let migrating = ClaimView {
        pod_name: Some("target".into()),
        source_pod: Some("source".into()),
        ..recording(claim(), &source, ClaimPhase::Bound)
    };
    let world = World::new(migrating).holding(source).with_pod(idle_pod("target", 1)).confirmed();
    assert_eq!(world.step(), ClaimStep::AcquirePreBound(world.pod("target")));
}

// Row 12.
#[test]
fn a_pre_bound_pod_held_by_another_claim_is_reported_not_taken() {
    let claim = ClaimView { pod_name: Some("wanted".into()), ..claim() };
    let taken =
        PodView { phase: Some(PodPhase::Bound), claim_uid: Some("uid-claim-b".into()), ..idle_pod("wanted", 1) };
    let world = World::new(claim).with_pod(taken).live();
    assert_eq!(world.step(), ClaimStep::ReportUnavailable(Unavailable::Ineligible(Ineligible::NotIdle)));
}

#[test]
fn a_migration_target_in_the_wrong_pool_is_refused() {
    let source = bound_to(&claim(), idle_pod("source", 1));
    let migrating = ClaimView {
        pod_name: Some("target".into()),
        source_pod: Some("source".into()),
        pool_name: Some(POOL.into()),
        ..recording(claim(), &source, ClaimPhase::Bound)
    };
    let elsewhere = PodView { pool: Some("other".into()), ..idle_pod("target", 1) };
    let world = World::new(migrating).holding(source).with_pod(elsewhere);
    assert_eq!(world.step(), ClaimStep::ConfirmRefusal, "refused only on a live read");
    assert_eq!(world.live().step(), ClaimStep::RefuseMigration(Unavailable::Ineligible(Ineligible::OtherPool)));
}

/// A claim migrating from `source` (which it holds) to `target`, which it
/// holds and has recorded, its store serving.
fn migrated_to_target() -> World {
    let source = bound_to(&claim(), idle_pod("source", 1));
    let target = bound_to(&claim(), idle_pod("target", 2));
    let migrating = ClaimView { source_pod: Some("source".into()), ..recording(claim(), &target, ClaimPhase::Bound) };
    let serving = serving_store(&migrating);
    World::new(migrating).holding(source).holding(target).store(Seen::Registered(serving))
}

#[test]
fn a_named_target_owned_by_another_claim_refuses_the_migration() {
    let source = bound_to(&claim(), idle_pod("source", 1));
    let migrating = ClaimView {
        pod_name: Some("target".into()),
        source_pod: Some("source".into()),
        ..recording(claim(), &source, ClaimPhase::Bound)
    };
    let taken = PodView { phase: Some(PodPhase::Bound), claim_uid: Some("uid-b".into()), ..idle_pod("target", 1) };
    let world = World::new(migrating).holding(source).with_pod(taken).live();
    assert_eq!(world.step(), ClaimStep::RefuseMigration(Unavailable::Ineligible(Ineligible::NotIdle)));
}

#[test]
fn naming_the_source_as_its_own_target_is_refused() {
    let source = bound_to(&claim(), idle_pod("source", 1));
    let migrating = ClaimView { source_pod: Some("source".into()), ..recording(claim(), &source, ClaimPhase::Bound) };
    let world = World::new(migrating).holding(source).live();
    assert!(matches!(world.step(), ClaimStep::RefuseMigration(_)), "{:?}", world.step());
}

#[test]
fn an_unnamed_target_is_chosen_from_the_pool_but_never_the_source() {
    let source = bound_to(&claim(), idle_pod("source", 1));
    let migrating = ClaimView {
        pod_name: None,
        source_pod: Some("source".into()),
        ..recording(claim(), &source, ClaimPhase::Bound)
    };
    let world = World::new(migrating).holding(source).with_pod(idle_pod("spare", 3)).confirmed();
    assert_eq!(world.step(), ClaimStep::Acquire { candidates: vec![world.pod("spare")] });
}

/// A claim migrating away from `source`, which it holds, to a pod cnpool
/// chooses; no target taken yet (the pool has no room).
fn waiting_for_a_target() -> World {
    let source = bound_to(&claim(), idle_pod("source", 1));
    let migrating = ClaimView {
        pod_name: None,
        source_pod: Some("source".into()),
        ..recording(claim(), &source, ClaimPhase::Bound)
    };
    World::new(migrating).holding(source)
}

// Row 8s.
#[test]
fn a_migration_waiting_for_a_target_loses_a_source_whose_store_vanished_and_retires_it() {
    let world = waiting_for_a_target().store(Seen::Missing(at(NOW - 60)));
    assert_eq!(world.step(), ClaimStep::ConfirmLost(LossReason::StoreMissing));
    let world = world.live();
    let retire = Release { pod: world.pod("source"), then: AfterRelease::Retire };
    assert_eq!(world.step(), ClaimStep::MarkLost { reason: LossReason::StoreMissing, release: vec![retire] });
    // Within the bound it keeps waiting for a target.
    let world = waiting_for_a_target().store(Seen::Missing(at(NOW - 59)));
    assert_eq!(world.step(), ClaimStep::Acquire { candidates: vec![] });
}

#[test]
fn a_migration_waiting_for_a_target_loses_a_deleted_source() {
    let world = World { owned: vec![], pods: vec![], ..waiting_for_a_target() };
    assert_eq!(world.step(), ClaimStep::ConfirmLost(LossReason::PodDeleted));
    assert_eq!(world.live().step(), ClaimStep::MarkLost { reason: LossReason::PodDeleted, release: vec![] });
}

#[test]
fn a_migration_that_lost_its_source_ends_and_binds_again_as_a_lost_claim() {
    let world = waiting_for_a_target();
    let lost = ClaimView { phase: Some(ClaimPhase::Lost), ..world.claim.clone() };
    let world = World { claim: lost, owned: vec![], pods: vec![], ..world }.with_pod(idle_pod("spare", 3)).confirmed();
    assert_eq!(world.step(), ClaimStep::AbandonMigration);
    let ended = World { claim: ClaimView { source_pod: None, ..world.claim.clone() }, ..world };
    assert_eq!(ended.step(), ClaimStep::Acquire { candidates: vec![ended.pod("spare")] });
}

#[test]
fn the_source_is_kept_until_the_target_has_served_for_the_propagation_delay() {
    let world = migrated_to_target();
    assert_eq!(world.step(), ClaimStep::NoteTargetServing(world.pod("target")), "serving not yet noted");
    let waited = world.clone().serving_since(NOW - 5);
    assert_eq!(waited.step(), ClaimStep::WaitToReleaseSource(Duration::from_secs(10)));
    let served = world.clone().serving_since(NOW - 15);
    assert_eq!(served.step(), ClaimStep::ReleaseSource(drain(served.pod("source"))));
    let unserved = World {
        store: Seen::Registered(StoreView { work_state: WorkState::Draining, ..serving_store(&world.claim) }),
        ..served
    };
    assert_eq!(unserved.step(), ClaimStep::WaitForStore(None), "a target whose store stopped serving keeps the source");
}

#[test]
fn a_deleting_source_is_released_at_once() {
    let mut world = migrated_to_target().serving_since(NOW - 1);
    for pod in world.owned.iter_mut().chain(world.pods.iter_mut()).filter(|pod| pod.name == "source") {
        pod.deleting = true;
    }
    assert_eq!(world.step(), ClaimStep::ReleaseSource(drain(world.pod("source"))));
}

#[test]
fn a_draining_source_is_reported_when_its_workload_changes_and_then_completes() {
    let released = |workload: Option<Workload>, phase: PodPhase| {
        let mut world = migrated_to_target().serving_since(NOW - 60);
        world.owned.retain(|pod| pod.name != "source");
        for pod in world.pods.iter_mut().filter(|pod| pod.name == "source") {
            *pod = PodView { phase: Some(phase), claim_uid: None, claimed_by: None, workload, ..pod.clone() };
        }
        world
    };
    let busy = Workload { sessions: 3, pipelines: 1, replicas: 0 };
    let world = released(Some(busy), PodPhase::Draining);
    assert_eq!(world.step(), ClaimStep::ReportDrain(busy));
    let reported = World { claim: ClaimView { drain_reported: Some(busy), ..world.claim.clone() }, ..world };
    assert_eq!(reported.step(), ClaimStep::WaitForDrain, "unchanged progress is not written again");
    assert_eq!(released(None, PodPhase::Draining).step(), ClaimStep::WaitForDrain);
    for done in [PodPhase::Idle, PodPhase::Terminating] {
        assert_eq!(released(Some(busy), done).step(), ClaimStep::CompleteMigration, "{done:?}");
    }
    let taken = {
        let mut world = released(None, PodPhase::Bound);
        for pod in world.pods.iter_mut().filter(|pod| pod.name == "source") {
            pod.claim_uid = Some("uid-b".into());
        }
        world
    };
    assert_eq!(taken.step(), ClaimStep::CompleteMigration, "a source another claim took is no longer ours");
    let gone = World {
        pods: released(None, PodPhase::Draining).pods.into_iter().filter(|pod| pod.name != "source").collect(),
        ..released(None, PodPhase::Draining)
    };
    assert_eq!(gone.step(), ClaimStep::CompleteMigration);
}

#[test]
fn a_bound_claim_on_a_cordoned_pod_starts_a_migration_away_from_it() {
    let world = settled(ClaimPhase::Bound);
    let serving = serving_store(&world.claim);
    let mut world = world.store(Seen::Registered(serving));
    for pod in world.owned.iter_mut().chain(world.pods.iter_mut()) {
        pod.cordoned = true;
    }
    assert_eq!(world.step(), ClaimStep::StartMigration(world.pod("p"), MigrationCause::Cordoned));
    // Once migrating, the cordoned pod is the source and never a target.
    let migrating =
        World { claim: ClaimView { source_pod: Some("p".into()), pod_name: None, ..world.claim.clone() }, ..world };
    assert!(matches!(migrating.step(), ClaimStep::Acquire { candidates } if candidates.is_empty()));
}

#[test]
fn a_template_change_marks_the_claim_outdated_and_rolls_a_standalone_one_when_the_pool_allows() {
    let world = settled(ClaimPhase::Bound);
    let serving = serving_store(&world.claim);
    let mut old = world.store(Seen::Registered(serving));
    for pod in old.owned.iter_mut().chain(old.pods.iter_mut()) {
        pod.revision = Some("r0".into());
    }
    assert_eq!(old.step(), ClaimStep::MarkOutdated);
    let unmarked = World { claim: ClaimView { phase: Some(ClaimPhase::Outdated), ..old.claim.clone() }, ..old.clone() };
    assert_eq!(unmarked.step(), ClaimStep::MarkOutdated, "an Outdated claim that does not say since when records it");
    let outdated =
        World { claim: ClaimView { outdated_since: Some(at(NOW - 5)), ..unmarked.claim.clone() }, ..unmarked.clone() };
    assert_eq!(outdated.step(), ClaimStep::AwaitRollout(None), "waits for the pool's rollout bound");
    let rolling = World { may_roll: true, ..outdated.clone() };
    assert_eq!(rolling.step(), ClaimStep::StartMigration(rolling.pod("p"), MigrationCause::Outdated));
    let member =
        World { claim: ClaimView { claim_set: Some("set".into()), ..rolling.claim.clone() }, ..rolling.clone() };
    assert_eq!(member.step(), ClaimStep::InSync, "a claim set rolls its members by surge");
    // On a current pod again (after its migration), it shows Bound.
    let current = World {
        claim: outdated.claim.clone(),
        ..settled(ClaimPhase::Bound).store(Seen::Registered(serving_store(&outdated.claim)))
    };
    assert_eq!(current.step(), ClaimStep::MarkBound);
}

// Rows 20x, 20w.
#[test]
fn an_outdated_standalone_claim_migrates_once_the_pools_reclaim_timeout_has_passed_whatever_the_pace() {
    let mut world = settled(ClaimPhase::Outdated);
    let serving = serving_store(&world.claim);
    world = world.store(Seen::Registered(serving));
    for pod in world.owned.iter_mut().chain(world.pods.iter_mut()) {
        pod.revision = Some("r0".into());
    }
    world.pools[0].reclaim_timeout = Some(Duration::from_secs(3600));
    let since = |seconds_ago: i64, world: &World| World {
        claim: ClaimView { outdated_since: Some(at(NOW - seconds_ago)), ..world.claim.clone() },
        ..world.clone()
    };
    assert_eq!(since(600, &world).step(), ClaimStep::AwaitRollout(Some(Duration::from_secs(3000))));
    for seconds_ago in [3600, 3601, 100_000] {
        let due = since(seconds_ago, &world);
        assert_eq!(
            due.step(),
            ClaimStep::StartMigration(due.pod("p"), MigrationCause::ReclaimTimeout),
            "{seconds_ago}"
        );
    }
    let member =
        World { claim: ClaimView { claim_set: Some("set".into()), ..since(7200, &world).claim }, ..world.clone() };
    assert_eq!(member.step(), ClaimStep::InSync, "a claim set rolls its members by surge");
    // A clock behind the condition's time waits the whole timeout, no more.
    assert_eq!(since(-60, &world).step(), ClaimStep::AwaitRollout(Some(Duration::from_secs(3600))));
}

// Row 13.
#[test]
fn an_unbound_claim_gets_the_eligible_pods_best_first() {
    let world = World::new(claim())
        .with_pod(idle_pod("young", 9))
        .with_pod(PodView { deleting: true, ..idle_pod("leaving", 0) })
        .with_pod(idle_pod("old", 1))
        .confirmed();
    assert_eq!(world.step(), ClaimStep::Acquire { candidates: vec![world.pod("old"), world.pod("young")] });
}

#[test]
fn an_empty_pool_offers_no_candidates() {
    assert_eq!(World::new(claim()).step(), ClaimStep::Acquire { candidates: vec![] });
}

// Row 14.
#[test]
fn a_pod_acquired_but_not_recorded_is_recorded() {
    let world = World::new(claim()).holding(bound_to(&claim(), idle_pod("p", 1))).acquired("p");
    assert_eq!(world.step(), ClaimStep::Record(world.pod("p")));
}

// Row 14c.
#[test]
fn a_claim_seen_holding_another_pod_than_it_records_reads_live_before_repointing() {
    let recorded = bound_to(&claim(), idle_pod("recorded", 1));
    let other = bound_to(&claim(), idle_pod("other", 2));
    let world = World::new(recording(claim(), &recorded, ClaimPhase::Bound)).holding(other);
    assert_eq!(world.step(), ClaimStep::ConfirmRecord);
    let world = world.live();
    assert_eq!(world.step(), ClaimStep::Record(world.pod("other")));
}

#[test]
fn a_lost_claim_seen_holding_its_deleting_pod_reads_live_instead_of_recording_it_again() {
    // Lost, `spec.podName` cleared to bind again, while the pod cache still
    // shows the released pod with the claim's UID.
    let lost = PodView { deleting: true, ..bound_to(&claim(), idle_pod("lost", 1)) };
    let recorded = recording(claim(), &lost, ClaimPhase::Lost);
    let world = World::new(ClaimView { pod_name: None, ..recorded }).holding(lost);
    assert_eq!(world.step(), ClaimStep::ConfirmRecord);
}

#[test]
fn a_status_record_without_the_spec_pointer_is_completed() {
    let world = settled(ClaimPhase::Pending);
    let world = World { claim: ClaimView { pod_name: None, ..world.claim.clone() }, ..world }.live();
    assert_eq!(world.step(), ClaimStep::Record(world.pod("p")));
}

// Rows 15 and 16.
#[test]
fn a_held_pod_that_is_deleting_or_failed_is_lost_and_released() {
    let base = settled(ClaimPhase::Bound);
    let deleting = World { owned: vec![PodView { deleting: true, ..base.owned[0].clone() }], ..base.clone() };
    assert_eq!(deleting.step(), ClaimStep::ConfirmLost(LossReason::PodDeleting));
    let deleting = deleting.live();
    let expected = ClaimStep::MarkLost { reason: LossReason::PodDeleting, release: vec![drain(&deleting.owned[0])] };
    assert_eq!(deleting.step(), expected);

    let failed = World { owned: vec![PodView { failed: true, ..base.owned[0].clone() }], ..base }.live();
    let retire = Release { pod: &failed.owned[0], then: AfterRelease::Retire };
    assert_eq!(failed.step(), ClaimStep::MarkLost { reason: LossReason::PodFailed, release: vec![retire] });
}

#[test]
fn a_store_missing_longer_than_the_bound_loses_the_pod_and_retires_it() {
    let world = settled(ClaimPhase::Bound).store(Seen::Missing(at(NOW - 60)));
    assert_eq!(world.step(), ClaimStep::ConfirmLost(LossReason::StoreMissing));
    let world = world.live();
    // Not drained: there is no store to drain, and the pool needs the room.
    let retire = Release { pod: &world.owned[0], then: AfterRelease::Retire };
    let expected = ClaimStep::MarkLost { reason: LossReason::StoreMissing, release: vec![retire] };
    assert_eq!(world.step(), expected);
}

#[test]
fn a_claim_not_yet_bound_does_not_wait_out_the_bound_for_a_missing_store() {
    // Nothing serves a tenant there yet: the claim takes another pod at once.
    let world = settled(ClaimPhase::Pending).store(Seen::Missing(at(NOW)));
    assert_eq!(world.step(), ClaimStep::ConfirmLost(LossReason::StoreMissing));
    let world = settled(ClaimPhase::Bound).store(Seen::Missing(at(NOW)));
    assert_eq!(world.step(), ClaimStep::WaitForStore(Some(Duration::from_secs(60))));
}

#[test]
fn a_store_missing_within_the_bound_is_waited_for() {
    let world = settled(ClaimPhase::Bound).store(Seen::Missing(at(NOW - 59)));
    // One second of the 60 s bound is left: the claim looks again then.
    assert_eq!(world.step(), ClaimStep::WaitForStore(Some(Duration::from_secs(1))));
}

#[test]
fn a_store_missing_since_before_its_pod_existed_counts_from_the_pod() {
    let mut world = settled(ClaimPhase::Bound).store(Seen::Missing(at(0)));
    world.owned[0].created = at(NOW - 30);
    assert_eq!(world.step(), ClaimStep::WaitForStore(Some(Duration::from_secs(30))));
}

// Row 17.
#[test]
fn a_held_pod_whose_binding_differs_from_the_spec_is_rewritten() {
    let base = settled(ClaimPhase::Bound).store(Seen::Registered(serving_store(&claim())));
    let mut old_labels = base.owned[0].clone();
    old_labels.binding = Some(r#"{"cnLabels":{"account":["old"]}}"#.into());
    let mut no_binding = base.owned[0].clone();
    no_binding.binding = None;
    let mut missing_label = base.owned[0].clone();
    missing_label.labels.remove("team");
    let mut not_bound = base.owned[0].clone();
    not_bound.phase = Some(PodPhase::Draining);
    for pod in [old_labels, no_binding, missing_label, not_bound] {
        let world = World { owned: vec![pod], ..base.clone() };
        assert_eq!(world.step(), ClaimStep::RewriteBinding(&world.owned[0]));
    }
}

// Row 18.
#[test]
fn bound_is_shown_only_once_the_store_serves_with_the_claims_labels() {
    let wrong_labels = StoreView { labels: store_labels(&[("account", &["other"])]), ..serving_store(&claim()) };
    let draining = StoreView { work_state: WorkState::Draining, ..serving_store(&claim()) };
    for store in [Seen::Registered(wrong_labels), Seen::Registered(draining), Seen::Unobserved] {
        assert_eq!(settled(ClaimPhase::Pending).store(store).step(), ClaimStep::WaitForStore(None));
    }
}

// Row 19.
#[test]
fn a_serving_store_makes_the_claim_bound() {
    let serving = Seen::Registered(serving_store(&claim()));
    assert_eq!(settled(ClaimPhase::Pending).store(serving.clone()).step(), ClaimStep::MarkBound);
    assert_eq!(settled(ClaimPhase::Lost).store(serving).step(), ClaimStep::MarkBound, "still ours and healthy");
}

#[test]
fn a_recorded_pod_is_shown_in_status_once_its_store_serves() {
    let serving = Seen::Registered(serving_store(&claim()));
    for phase in [ClaimPhase::Bound, ClaimPhase::Outdated] {
        let world = settled(phase).store(serving.clone());
        let unshown = World { claim: ClaimView { status_pod_uid: None, ..world.claim.clone() }, ..world.clone() };
        assert_eq!(unshown.step(), ClaimStep::MarkBound, "{phase:?}");
        let another = ClaimView { status_pod_uid: Some("uid-source".into()), ..world.claim.clone() };
        assert_eq!(World { claim: another, ..world }.step(), ClaimStep::MarkBound, "{phase:?}");
    }
    let waiting = settled(ClaimPhase::Bound);
    let waiting = World { claim: ClaimView { status_pod_uid: None, ..waiting.claim.clone() }, ..waiting };
    assert_eq!(waiting.step(), ClaimStep::WaitForStore(None), "not before it serves");
}

// Row 20.
#[test]
fn a_bound_claim_whose_store_serves_costs_nothing() {
    let world = settled(ClaimPhase::Bound).store(Seen::Registered(serving_store(&claim())));
    assert_eq!(world.step(), ClaimStep::InSync);
    // A pod without a revision label (the Go operator's) is of no known
    // template: the claim keeps whichever phase it shows, so a cutover
    // writes nothing and rolls nothing.
    for phase in [ClaimPhase::Bound, ClaimPhase::Outdated] {
        let mut world = World { may_roll: true, ..settled(phase).store(Seen::Registered(serving_store(&claim()))) };
        for pod in world.owned.iter_mut().chain(world.pods.iter_mut()) {
            pod.revision = None;
        }
        assert_eq!(world.step(), ClaimStep::InSync, "{phase:?}");
    }
}

#[test]
fn reasons_have_stable_names_and_messages() {
    let reasons = [
        LossReason::PodDeleted,
        LossReason::PodReplaced,
        LossReason::OwnedByOther,
        LossReason::PodReleased,
        LossReason::PodDeleting,
        LossReason::PodFailed,
        LossReason::StoreMissing,
        LossReason::Misbound,
    ];
    let names: Vec<&str> = reasons.iter().map(|reason| reason.as_str()).collect();
    assert_eq!(
        names,
        [
            "PodDeleted",
            "PodReplaced",
            "OwnedByOther",
            "PodReleased",
            "PodDeleting",
            "PodFailed",
            "StoreMissing",
            "Misbound"
        ]
    );
    let messages: std::collections::BTreeSet<&str> = reasons.iter().map(|reason| reason.message()).collect();
    assert_eq!(messages.len(), reasons.len(), "each reason reads differently");
}

fn any_seen(claim: &ClaimView) -> impl Strategy<Value = Seen> + use<> {
    let serving = serving_store(claim);
    prop_oneof![
        3 => Just(Seen::Registered(serving.clone())),
        1 => Just(Seen::Registered(StoreView { work_state: WorkState::Draining, ..serving })),
        1 => (NOW - 120..NOW).prop_map(|since| Seen::Missing(at(since))),
        1 => Just(Seen::Unobserved),
    ]
}

fn any_world() -> impl Strategy<Value = World> {
    (any_claim(), any_pods(), any_pools()).prop_flat_map(|(claim, pods, pools)| {
        let mask = proptest::collection::vec(proptest::bool::weighted(0.8), pods.len());
        let bindings = proptest::collection::vec(proptest::bool::weighted(0.7), pods.len());
        let read = proptest::sample::select(vec![Read::Cached, Read::Live]);
        let serving_since = proptest::option::of(NOW - 30..NOW);
        let timing = (serving_since, any::<bool>());
        // What this reconcile confirmed beyond the cache, and the pod this
        // process took lately (an index into the pods, maybe past the end).
        let guards = (any::<bool>(), proptest::option::of(0..pods.len() + 1), any::<bool>());
        (Just(claim.clone()), Just(pods), Just(pools), mask, bindings, read, any_seen(&claim), (timing, guards))
            .prop_map(|(claim, mut pods, pools, mask, bindings, read, store, ((serving_since, may_roll), guards))| {
                let (claim_confirmed, acquired, stores_listed) = guards;
                let acquired_lately =
                    acquired.map(|index| pods.get(index).map_or("uid-gone".to_owned(), |pod| pod.uid.clone()));
                for (pod, with_binding) in pods.iter_mut().zip(bindings) {
                    if with_binding {
                        pod.binding = Some(Binding::of_claim(&claim).render());
                        pod.labels.extend(claim.additional_pod_labels.clone());
                    }
                }
                // `owned` is an index lookup: usually the pods carrying the
                // UID, sometimes stale.
                let owned = pods.iter().zip(mask).filter(|(_, picked)| *picked).map(|(pod, _)| pod.clone()).collect();
                World {
                    claim,
                    owned,
                    pods,
                    read,
                    store,
                    pools,
                    serving_since: serving_since.map(at),
                    may_roll,
                    claim_confirmed,
                    acquired_lately,
                    stores_listed,
                    candidates_read: true,
                    adopt_legacy_before: Some(at(CUTOVER)),
                }
            })
    })
}

fn ours(world: &World, pod: &PodView) -> bool {
    pod.claim_uid.as_deref() == Some(world.claim.uid.as_str())
}

fn not_source(world: &World, pod: &PodView) -> bool {
    world.claim.source_pod.as_deref() != Some(pod.name.as_str())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn never_acquires_a_pod_that_is_not_eligible(world in any_world()) {
        // The same world as a fresh request: nothing recorded, nothing held
        // but what spec.podName may name.
        let request = ClaimView {
            deleting: false,
            has_finalizer: true,
            phase: Some(ClaimPhase::Pending),
            recorded_pod_uid: None,
            recorded_pod_name: None,
            status_pod_uid: None,
            ..world.claim.clone()
        };
        let request = World { claim: request, owned: vec![], ..world.clone() };
        for world in [world, request] {
            match world.step() {
                ClaimStep::Acquire { candidates } => {
                    for pod in candidates {
                        prop_assert!(may_acquire(&world.claim, pod, &world.pools), "{pod:?}");
                    }
                }
                ClaimStep::AcquirePreBound(pod) => {
                    prop_assert!(may_acquire(&world.claim, pod, &world.pools), "{pod:?}");
                }
                _ => {}
            }
        }
    }

    #[test]
    fn adopts_records_and_rewrites_only_its_own_pods(world in any_world()) {
        match world.step() {
            ClaimStep::Adopt { keep: pod, .. } | ClaimStep::Record(pod) | ClaimStep::RewriteBinding(pod) => {
                prop_assert!(ours(&world, pod) && not_source(&world, pod), "{pod:?}");
            }
            ClaimStep::AdoptLegacy(pod) => {
                prop_assert_eq!(pod.phase, Some(PodPhase::Bound));
                prop_assert_eq!(pod.claimed_by.as_ref(), Some(&world.claim.name));
                prop_assert_eq!(pod.claim_uid.as_ref(), None);
                prop_assert_eq!(world.claim.pod_name.as_ref(), Some(&pod.name));
                prop_assert!(world.claim.recorded_pod_uid.as_ref().is_none_or(|uid| *uid == pod.uid));
                prop_assert!(not_source(&world, pod));
            }
            _ => {}
        }
    }

    #[test]
    fn a_claim_created_at_or_after_the_cutover_never_adopts(
        world in any_world(),
        created in proptest::option::of(0..NOW),
        cutover in proptest::option::of(0..NOW),
        go_bound_pointed in any::<bool>(),
    ) {
        let mut world = World {
            claim: ClaimView { created: created.map(at), ..world.claim.clone() },
            adopt_legacy_before: cutover.map(at),
            ..world
        };
        // Often the pointed pod is one the Go operator bound to this name.
        if go_bound_pointed && let Some(name) = world.claim.pointed_pod().map(str::to_owned) {
            let name_claim = world.claim.name.clone();
            for pod in world.pods.iter_mut().filter(|pod| pod.name == name) {
                *pod = PodView { phase: Some(PodPhase::Bound), claimed_by: Some(name_claim.clone()), claim_uid: None, ..pod.clone() };
            }
        }
        if let ClaimStep::AdoptLegacy(_) = world.step() {
            prop_assert!(created.zip(cutover).is_some_and(|(created, cutover)| created < cutover));
        }
    }

    #[test]
    fn a_source_is_released_only_once_its_target_has_served_for_the_delay(world in any_world()) {
        if let ClaimStep::ReleaseSource(release) = world.step() {
            prop_assert!(world.claim.is_source(&release.pod.name));
            let since = world.serving_since.expect("a target noted as serving");
            let delay = SignedDuration::try_from(PROPAGATION_DELAY).unwrap();
            prop_assert!(release.pod.deleting || release.pod.failed || at(NOW).duration_since(since) >= delay);
            prop_assert!(matches!(&world.store, Seen::Registered(store) if store.work_state == WorkState::Working));
        }
    }

    #[test]
    fn never_releases_a_pod_that_is_not_its_own(world in any_world()) {
        let released = match world.step() {
            ClaimStep::Adopt { release, .. } | ClaimStep::Finalize { release } | ClaimStep::MarkLost { release, .. } => {
                release
            }
            ClaimStep::ReleaseSource(release) => vec![release],
            ClaimStep::FallBackToSource { release, .. } => release,
            _ => vec![],
        };
        for release in released {
            prop_assert!(ours(&world, release.pod), "{:?}", release.pod);
        }
    }

    #[test]
    fn finalize_releases_every_pod_it_was_shown_carrying_its_uid(world in any_world()) {
        if let ClaimStep::Finalize { release } = world.step() {
            for pod in world.owned.iter().filter(|pod| ours(&world, pod)) {
                prop_assert!(release.iter().any(|release| release.pod.uid == pod.uid), "kept {pod:?}");
            }
        }
    }

    #[test]
    fn without_its_finalizer_a_claim_only_reads_takes_and_records_a_pod(world in any_world()) {
        // Anything else (releasing, adopting, losing, migrating) would leave
        // pods behind if the claim were deleted meanwhile.
        if !world.claim.has_finalizer && !world.claim.deleting {
            let step = world.step();
            prop_assert!(
                step.only_reads()
                    || matches!(
                        step,
                        ClaimStep::AddFinalizer
                            | ClaimStep::Acquire { .. }
                            | ClaimStep::AcquirePreBound(_)
                            | ClaimStep::Record(_)
                    ),
                "{step:?}"
            );
        }
    }

    #[test]
    fn a_pod_is_taken_only_by_a_claim_confirmed_current(world in any_world()) {
        let step = world.step();
        if matches!(&step, ClaimStep::Acquire { candidates } if !candidates.is_empty())
            || matches!(step, ClaimStep::AcquirePreBound(_))
        {
            prop_assert!(world.read == Read::Live || world.claim_confirmed, "{step:?}");
        }
    }

    #[test]
    fn no_second_pod_while_the_one_taken_lately_is_not_seen(world in any_world()) {
        if let ClaimStep::Acquire { candidates } = world.step()
            && !candidates.is_empty()
            && let Some(taken) = &world.acquired_lately
        {
            prop_assert!(world.owned.iter().any(|pod| pod.uid == *taken));
        }
    }

    #[test]
    fn a_pod_is_recorded_from_the_cache_only_if_just_acquired(world in any_world()) {
        if let ClaimStep::Record(pod) = world.step()
            && world.read == Read::Cached
        {
            prop_assert_eq!(world.acquired_lately.as_deref(), Some(pod.uid.as_str()));
        }
    }

    #[test]
    fn a_store_is_lost_only_on_a_listing_of_this_reconcile(world in any_world()) {
        if let ClaimStep::MarkLost { reason: LossReason::StoreMissing, .. } = world.step() {
            prop_assert!(world.stores_listed);
        }
    }

    #[test]
    fn an_invalid_claim_takes_rewrites_rebinds_and_starts_no_migration(world in any_world()) {
        if world.claim.invalid.is_some() && !world.claim.deleting {
            let step = world.step();
            prop_assert!(
                !matches!(
                    step,
                    ClaimStep::Acquire { .. }
                        | ClaimStep::AcquirePreBound(_)
                        | ClaimStep::AdoptLegacy(_)
                        | ClaimStep::RewriteBinding(_)
                        | ClaimStep::Rebind
                        | ClaimStep::StartMigration(..)
                        | ClaimStep::MarkBound
                ),
                "{step:?}"
            );
        }
    }

    #[test]
    fn a_migration_falls_back_only_to_a_source_that_is_still_ours(world in any_world()) {
        if let ClaimStep::FallBackToSource { .. } = world.step() {
            prop_assert_eq!(world.read, Read::Live);
            let source = world.claim.source_pod.as_deref().and_then(|name| world.pods.iter().find(|pod| pod.name == name));
            prop_assert!(source.is_some_and(|pod| ours(&world, pod) && !pod.deleting && !pod.failed));
        }
    }

    #[test]
    fn a_lost_claim_never_waits_on_a_source_it_no_longer_holds(world in any_world(), source in 0..POD_NAMES.len() + 1) {
        // A Lost standalone claim holding nothing, migrating from a pod that
        // is not its own (or gone): were it to keep that pod as its source,
        // it could never take it back, the one Idle pod as it may be.
        let uid = world.claim.uid.clone();
        let mut world = world;
        for pod in world.pods.iter_mut().chain(world.owned.iter_mut()) {
            if pod.claim_uid.as_deref() == Some(uid.as_str()) {
                pod.claim_uid = None;
            }
        }
        let source = world.pods.get(source).map_or_else(|| "gone".to_owned(), |pod| pod.name.clone());
        world.claim = ClaimView {
            phase: Some(ClaimPhase::Lost),
            source_pod: Some(source),
            claim_set: None,
            deleting: false,
            has_finalizer: true,
            invalid: None,
            created: None,
            ..world.claim.clone()
        };
        prop_assert_eq!(world.step(), ClaimStep::AbandonMigration);
    }

    #[test]
    fn lost_only_on_a_live_read(world in any_world()) {
        if let ClaimStep::MarkLost { .. } = world.step() {
            prop_assert_eq!(world.read, Read::Live);
        }
    }

    #[test]
    fn a_deleting_claim_only_finalizes(world in any_world()) {
        let world = World { claim: ClaimView { deleting: true, ..world.claim.clone() }, ..world };
        let step = world.step();
        prop_assert!(
            matches!(step, ClaimStep::Finalize { .. } | ClaimStep::ConfirmFinalize | ClaimStep::InSync),
            "{step:?}"
        );
    }

    #[test]
    fn the_same_input_read_live_never_loses_what_the_cache_would_not_question(world in any_world()) {
        // A live read only confirms: MarkLost on a live read implies that
        // the cached read of the same input asked to confirm that very loss.
        let live = World { read: Read::Live, ..world.clone() };
        if let ClaimStep::MarkLost { reason, .. } = live.step() {
            let cached = World { read: Read::Cached, ..world };
            prop_assert_eq!(cached.step(), ClaimStep::ConfirmLost(reason));
        }
    }
}
