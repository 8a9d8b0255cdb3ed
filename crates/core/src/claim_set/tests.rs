use cnpool_api::ClaimPhase;
use proptest::prelude::*;

use super::*;
use crate::model::MemberPod;
use crate::testing::at;

const SET: &str = "set";

fn set(replicas: u32) -> ClaimSetView {
    ClaimSetView { name: SET.into(), replicas, deleting: false }
}

/// A member in `phase`; Bound and Outdated members hold a pod named after them.
fn member(name: &str, phase: ClaimPhase) -> MemberView {
    let holds = matches!(phase, ClaimPhase::Bound | ClaimPhase::Outdated);
    MemberView {
        name: name.into(),
        uid: format!("uid-{name}"),
        phase: Some(phase),
        deleting: false,
        migrating: false,
        pod: holds.then(|| MemberPod { name: format!("pod-{name}"), deletion_cost: 0, created: at(100) }),
    }
}

fn on_pod(member: MemberView, deletion_cost: i32, created: i64) -> MemberView {
    let pod = MemberPod { name: format!("pod-{}", member.name), deletion_cost, created: at(created) };
    MemberView { pod: Some(pod), ..member }
}

fn none() -> Expectations {
    Expectations::default()
}

fn created(plan: &ClaimSetPlan<'_>) -> Vec<String> {
    plan.create.iter().map(|new| new.name.clone()).collect()
}

fn deleted(plan: &ClaimSetPlan<'_>) -> Vec<String> {
    plan.delete.iter().map(|member| member.name.clone()).collect()
}

#[test]
fn an_empty_set_creates_its_replicas_at_the_lowest_slots() {
    let plan = plan_claim_set(&set(3), &[], &none());
    assert_eq!(created(&plan), ["set-0", "set-1", "set-2"]);
    assert_eq!(plan.create.iter().map(|new| new.instance_id).collect::<Vec<_>>(), [0, 1, 2]);
    assert!(plan.delete.is_empty());
}

#[test]
fn new_members_fill_the_free_slots() {
    let members = [member("set-1", ClaimPhase::Bound), member("set-3", ClaimPhase::Pending)];
    let plan = plan_claim_set(&set(4), &members, &none());
    assert_eq!(created(&plan), ["set-0", "set-2"]);
}

#[test]
fn members_named_by_the_go_operator_count_and_keep_their_names() {
    // Two Go members: the set needs one more, and only slot 0 of 3 - 2 is
    // open to it, so that a stale view cannot add a second one in slot 1.
    let members = [member("set-x7k2p", ClaimPhase::Bound), member("set-q9w4z", ClaimPhase::Bound)];
    let plan = plan_claim_set(&set(3), &members, &none());
    assert_eq!(created(&plan), ["set-0"]);
    assert!(plan.delete.is_empty(), "Go members are kept");
}

#[test]
fn a_name_held_by_a_claim_being_deleted_is_not_free() {
    let members =
        [MemberView { deleting: true, ..member("set-0", ClaimPhase::Bound) }, member("set-1", ClaimPhase::Bound)];
    let plan = plan_claim_set(&set(3), &members, &none());
    assert_eq!(created(&plan), ["set-2"]);
}

#[test]
fn a_lost_member_is_deleted_and_replaced_in_a_free_slot() {
    let members = [member("set-0", ClaimPhase::Bound), member("set-x7k2p", ClaimPhase::Lost)];
    let plan = plan_claim_set(&set(2), &members, &none());
    assert_eq!(deleted(&plan), ["set-x7k2p"]);
    assert_eq!(created(&plan), ["set-1"], "the Go member's loss opens slot 1");
}

#[test]
fn a_lost_member_holding_the_only_slot_is_replaced_once_it_is_gone() {
    let lost = [member("set-0", ClaimPhase::Lost), member("set-1", ClaimPhase::Bound)];
    let plan = plan_claim_set(&set(2), &lost, &none());
    assert_eq!(deleted(&plan), ["set-0"]);
    assert!(plan.create.is_empty(), "set-0 still holds its name until its finalizer is done");
    let going = [MemberView { deleting: true, ..lost[0].clone() }, lost[1].clone()];
    assert!(plan_claim_set(&set(2), &going, &none()).is_empty(), "nothing to do while it goes");
    let gone = [lost[1].clone()];
    assert_eq!(created(&plan_claim_set(&set(2), &gone, &none())), ["set-0"]);
}

#[test]
fn scale_in_takes_pending_then_outdated_then_bound_by_pod_deletion_order() {
    let members = [
        on_pod(member("set-0", ClaimPhase::Bound), 5, 100),
        on_pod(member("set-1", ClaimPhase::Bound), 0, 100),
        on_pod(member("set-2", ClaimPhase::Bound), 0, 200),
        on_pod(member("set-3", ClaimPhase::Outdated), 9, 100),
        member("set-4", ClaimPhase::Pending),
        member("set-5", ClaimPhase::Bound),
    ];
    let plan = plan_claim_set(&set(1), &members, &none());
    // Pending, Outdated, then Bound by fewest sessions, newest pod, name.
    assert_eq!(deleted(&plan), ["set-4", "set-3", "set-2", "set-1", "set-5"]);
    assert!(plan.create.is_empty());
}

#[test]
fn scale_in_never_deletes_a_claim_mid_migration() {
    let members = [
        MemberView { migrating: true, ..member("set-0", ClaimPhase::Bound) },
        member("set-1", ClaimPhase::Bound),
        member("set-2", ClaimPhase::Bound),
    ];
    let plan = plan_claim_set(&set(0), &members, &none());
    assert_eq!(deleted(&plan), ["set-1", "set-2"]);
}

#[test]
fn scale_in_never_deletes_a_claim_mid_migration_whatever_its_phase_but_lost() {
    let members = [
        MemberView { migrating: true, ..member("set-0", ClaimPhase::Pending) },
        MemberView { migrating: true, ..member("set-1", ClaimPhase::Outdated) },
        member("set-2", ClaimPhase::Bound),
    ];
    let plan = plan_claim_set(&set(0), &members, &none());
    assert_eq!(deleted(&plan), ["set-2"]);
}

#[test]
fn a_member_lost_mid_migration_is_deleted_and_replaced_once_it_is_gone() {
    let lost =
        [MemberView { migrating: true, ..member("set-0", ClaimPhase::Lost) }, member("set-1", ClaimPhase::Bound)];
    let plan = plan_claim_set(&set(2), &lost, &none());
    assert_eq!(deleted(&plan), ["set-0"], "a Lost claim serves no one, migrating or not");
    assert!(plan.create.is_empty(), "set-0 still holds its name until its finalizer is done");
    let gone = [lost[1].clone()];
    assert_eq!(created(&plan_claim_set(&set(2), &gone, &none())), ["set-0"]);
}

#[test]
fn a_member_lost_mid_migration_goes_before_a_bound_one_on_scale_in() {
    let members =
        [member("set-0", ClaimPhase::Bound), MemberView { migrating: true, ..member("set-1", ClaimPhase::Lost) }];
    let plan = plan_claim_set(&set(1), &members, &none());
    assert_eq!(deleted(&plan), ["set-1"]);
    assert!(plan.create.is_empty());
}

#[test]
fn scale_in_prefers_pending_members_to_bound_ones() {
    let members = [member("set-0", ClaimPhase::Bound), member("set-1", ClaimPhase::Pending)];
    let plan = plan_claim_set(&set(1), &members, &none());
    assert_eq!(deleted(&plan), ["set-1"]);
}

#[test]
fn a_rollout_adds_one_surge_member_and_deletes_an_outdated_one_once_it_is_bound() {
    let old = [member("set-0", ClaimPhase::Outdated), member("set-1", ClaimPhase::Outdated)];
    let plan = plan_claim_set(&set(2), &old, &none());
    assert_eq!(created(&plan), ["set-2"], "one surge member, in the slot above the replicas");
    assert!(plan.delete.is_empty());

    let binding = [old[0].clone(), old[1].clone(), member("set-2", ClaimPhase::Pending)];
    assert!(plan_claim_set(&set(2), &binding, &none()).is_empty(), "the surge binds before anything goes");

    let bound = [old[0].clone(), old[1].clone(), member("set-2", ClaimPhase::Bound)];
    let plan = plan_claim_set(&set(2), &bound, &none());
    assert_eq!(deleted(&plan).len(), 1);
    assert!(plan.delete.iter().all(|member| member.phase == Some(ClaimPhase::Outdated)), "an Outdated one goes");
    assert!(plan.create.is_empty());

    let rolled = [member("set-0", ClaimPhase::Bound), member("set-2", ClaimPhase::Bound)];
    assert!(plan_claim_set(&set(2), &rolled, &none()).is_empty(), "no surge once nothing is Outdated");
}

#[test]
fn a_deleting_set_creates_nothing() {
    let deleting = ClaimSetView { deleting: true, ..set(3) };
    assert!(plan_claim_set(&deleting, &[member("set-0", ClaimPhase::Bound)], &none()).create.is_empty());
}

#[test]
fn expected_creations_are_counted_and_their_names_taken() {
    let expected = Expectations { creations: ["set-0".to_string()].into(), ..none() };
    let plan = plan_claim_set(&set(2), &[], &expected);
    assert_eq!(created(&plan), ["set-1"]);
}

#[test]
fn a_member_expected_gone_is_not_counted_nor_deleted_again() {
    let members = [member("set-0", ClaimPhase::Pending), member("set-1", ClaimPhase::Bound)];
    let expected = Expectations { deletions: ["uid-set-0".to_string()].into(), ..none() };
    let plan = plan_claim_set(&set(1), &members, &expected);
    assert!(plan.is_empty(), "{plan:?}");
}

#[test]
fn only_canonical_slot_names_below_replicas_are_slots() {
    assert_eq!(slot_of(SET, "set-1", 3), Some(1));
    assert_eq!(slot_of(SET, "set-01", 3), None);
    assert_eq!(slot_of(SET, "set-3", 3), None);
    assert_eq!(slot_of(SET, "settle-1", 3), None);
    assert_eq!(slot_of(SET, "set-x7k2p", 3), None);
}

const NAMES: [&str; 8] = ["set-0", "set-1", "set-2", "set-3", "set-5", "set-01", "set-x7k2p", "set-q9w4z"];

fn any_phase() -> impl Strategy<Value = Option<ClaimPhase>> {
    let phases = [ClaimPhase::Pending, ClaimPhase::Bound, ClaimPhase::Lost, ClaimPhase::Outdated];
    prop_oneof![1 => Just(None), 6 => proptest::sample::select(phases.to_vec()).prop_map(Some)]
}

fn any_member(name: &'static str) -> impl Strategy<Value = MemberView> {
    (any_phase(), proptest::bool::weighted(0.15), proptest::bool::weighted(0.15), 0..3i32, 0..3i64).prop_map(
        move |(phase, deleting, migrating, cost, created)| {
            let holds = matches!(phase, Some(ClaimPhase::Bound | ClaimPhase::Outdated));
            MemberView {
                phase,
                deleting,
                migrating,
                pod: holds.then(|| MemberPod {
                    name: format!("pod-{name}"),
                    deletion_cost: cost,
                    created: at(created),
                }),
                ..member(name, ClaimPhase::Pending)
            }
        },
    )
}

fn any_members() -> impl Strategy<Value = Vec<MemberView>> {
    proptest::sample::subsequence(NAMES.to_vec(), 0..=NAMES.len())
        .prop_flat_map(|names| names.into_iter().map(any_member).collect::<Vec<_>>())
}

fn any_world() -> impl Strategy<Value = (ClaimSetView, Vec<MemberView>, Expectations)> {
    (0..7u32, proptest::bool::weighted(0.1), any_members()).prop_flat_map(|(replicas, deleting, members)| {
        let uids: Vec<String> = members.iter().map(|member| member.uid.clone()).collect();
        let creations = proptest::sample::subsequence(NAMES.map(String::from).to_vec(), 0..3);
        let deletions = proptest::sample::subsequence(uids.clone(), 0..=uids.len().min(2));
        let expected = (creations, deletions).prop_map(|(creations, deletions)| Expectations {
            creations: creations.into_iter().collect(),
            deletions: deletions.into_iter().collect(),
        });
        (Just(ClaimSetView { deleting, ..set(replicas) }), Just(members), expected)
    })
}

/// Members not being deleted, as the API server counts them.
fn live(members: &[MemberView]) -> usize {
    members.iter().filter(|member| !member.deleting).count()
}

/// The members once the plan has been applied on the server: deleted
/// members are going, created ones exist (Pending). A creation whose name
/// is taken fails with AlreadyExists; a deletion of a member whose UID
/// changed or that is gone fails its precondition.
fn apply(members: &[MemberView], plan: &ClaimSetPlan<'_>) -> Vec<MemberView> {
    let mut world = members.to_vec();
    for doomed in &plan.delete {
        if let Some(member) = world.iter_mut().find(|member| member.uid == doomed.uid) {
            member.deleting = true;
        }
    }
    for new in &plan.create {
        if !world.iter().any(|member| member.name == new.name) {
            world.push(member(&new.name, ClaimPhase::Pending));
        }
    }
    world
}

/// Members being deleted finish going.
fn finalized(members: Vec<MemberView>) -> Vec<MemberView> {
    members.into_iter().filter(|member| !member.deleting).collect()
}

proptest! {
    #[test]
    fn never_plans_more_live_members_than_replicas_plus_a_rollouts_surge((set, members, expected) in any_world()) {
        let plan = plan_claim_set(&set, &members, &expected);
        let held: BTreeSet<&str> = members.iter().map(|member| member.name.as_str()).collect();
        let rolling = members.iter().any(|member| member.phase == Some(ClaimPhase::Outdated) && !member.deleting);
        let bound = set.replicas + u32::from(rolling);
        for new in &plan.create {
            prop_assert!(!held.contains(new.name.as_str()) && !expected.creations.contains(&new.name), "{} is taken", new.name);
            prop_assert!(new.instance_id < bound && new.name == member_name(SET, new.instance_id));
        }
        if !plan.create.is_empty() {
            let awaited = expected.creations.iter().filter(|name| !held.contains(name.as_str())).count();
            let kept = members.iter().filter(|member| !member.deleting && !expected.deletions.contains(&member.uid)).count();
            let after = kept - plan.delete.len() + awaited + plan.create.len();
            prop_assert!(after <= bound as usize, "{after} live members for {} replicas", set.replicas);
        }
        if set.deleting {
            prop_assert!(plan.create.is_empty());
        }
    }

    #[test]
    fn deletes_lost_members_and_scale_in_never_takes_a_migrating_or_a_bound_one_before_pending_or_lost(
        (set, members, expected) in any_world()
    ) {
        let plan = plan_claim_set(&set, &members, &expected);
        for doomed in &plan.delete {
            let lost = doomed.phase == Some(ClaimPhase::Lost);
            prop_assert!((lost || !doomed.migrating) && !doomed.deleting && !expected.deletions.contains(&doomed.uid), "deleted {doomed:?}");
        }
        if plan.delete.iter().any(|doomed| doomed.phase == Some(ClaimPhase::Bound)) {
            let kept_unbound = members.iter().filter(|member| deletable(member, &expected))
                .filter(|member| matches!(member.phase, None | Some(ClaimPhase::Pending | ClaimPhase::Lost)))
                .find(|member| !plan.delete.iter().any(|doomed| doomed.uid == member.uid));
            prop_assert!(kept_unbound.is_none(), "deleted a Bound member and kept {kept_unbound:?}");
        }
        // Every Lost member not already going is deleted, mid-migration or not.
        let going = |member: &MemberView| member.deleting || expected.deletions.contains(&member.uid);
        for lost in members.iter().filter(|member| member.phase == Some(ClaimPhase::Lost) && !going(member)) {
            prop_assert!(plan.delete.iter().any(|doomed| doomed.uid == lost.uid), "kept Lost {lost:?}");
        }
    }

    #[test]
    fn converges_to_replicas_live_members((set, members) in (0..7u32, any_members()).prop_map(|(r, m)| (set(r), m))) {
        // Step one acts; claims being deleted finish; step two fills the
        // names they held (a rollout's surge takes two more); then nothing
        // is left to do.
        let mut world = members;
        for _ in 0..4 {
            world = finalized(apply(&world, &plan_claim_set(&set, &world, &none())));
        }
        let plan = plan_claim_set(&set, &world, &none());
        prop_assert!(plan.is_empty(), "still planning {plan:?} for {world:?}");
        // A rollout's surge member stays Pending here (nothing binds it),
        // so a set with an Outdated member may hold one more.
        prop_assert!(world.iter().all(|member| member.phase != Some(ClaimPhase::Lost)), "a Lost member stayed: {world:?}");
        let stuck = world.iter().filter(|member| member.migrating).count();
        let surge = usize::from(world.iter().any(|member| member.phase == Some(ClaimPhase::Outdated)));
        let count = live(&world);
        let wanted = set.replicas as usize;
        prop_assert!(count == wanted || count == wanted + surge || (count > wanted && count - stuck <= wanted + surge),
            "{count} live members for {} replicas ({stuck} migrating)", set.replicas);
    }

    /// Two operators each plan on a view of the set taken at some earlier
    /// step and write to the server in any interleaving, while members are
    /// bound, lost and finalized and `replicas` grows: the server never holds
    /// more live members than `replicas`, plus one surge member while a
    /// member is Outdated.
    #[test]
    fn two_operators_on_stale_views_never_exceed_replicas_plus_one(
        start in 0..4u32,
        initial in any_members(),
        steps in proptest::collection::vec((0..6u8, 0..2usize, 0..8usize), 1..60),
    ) {
        // Each object has a UID of its own: creations below get fresh ones.
        let mut world: Vec<MemberView> =
            initial.into_iter().map(|member| MemberView { uid: format!("{}-initial", member.uid), ..member }).collect();
        let mut replicas = start.max(live(&world) as u32);
        let mut views: [(u32, Vec<MemberView>); 2] = [(replicas, world.clone()), (replicas, world.clone())];
        let mut uids = 0;
        for (action, operator, pick) in steps {
            match action {
                0 => views[operator] = (replicas, world.clone()),
                1 | 2 => {
                    let (seen_replicas, seen) = &views[operator];
                    let plan = plan_claim_set(&set(*seen_replicas), seen, &none());
                    world = apply(&world, &plan);
                    // A new object of an old name is another claim.
                    for member in world.iter_mut().filter(|member| member.uid == format!("uid-{}", member.name)) {
                        uids += 1;
                        member.uid = format!("uid-{}-{uids}", member.name);
                    }
                }
                3 => {
                    let index = pick % world.len().max(1);
                    if let Some(member) = world.get_mut(index) {
                        member.phase = Some(if member.phase == Some(ClaimPhase::Bound) { ClaimPhase::Lost } else { ClaimPhase::Bound });
                    }
                }
                4 => {
                    let index = pick % world.len().max(1);
                    if world.get(index).is_some_and(|member| member.deleting) {
                        world.remove(index);
                    }
                }
                _ => replicas += u32::from(pick % 2 == 0),
            }
            prop_assert!(live(&world) <= replicas as usize + 1, "{} live members for {replicas} replicas: {world:?}", live(&world));
        }
    }
}
