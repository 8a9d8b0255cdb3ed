//! A claim set's scale plan (DESIGN §2, "Claim set").
//!
//! A set keeps `replicas` member claims. The plan says which members to
//! create and which to delete; the claim controller binds the new ones and
//! releases the pods of the deleted ones.
//!
//! - **The name is the lock.** New members are named `<set>-<slot>`, the
//!   lowest free slot first, with slots below `replicas − extras`, where
//!   *extras* are the live members whose name is not such an open slot
//!   (members the Go operator named `<set>-<random>`, or slots left above
//!   the open ones by a scale-in; see [`open_slots`]). A name held by any object, even
//!   one being deleted, is not free. Extras only ever go away, so every
//!   view — however stale — counts at least as many extras as there are
//!   now, and every name it can pick lies below `replicas − extras now`:
//!   two operators acting at once on stale views cannot take the set above
//!   `replicas` live members (AlreadyExists stops the second creation of a
//!   name), as long as `replicas` does not shrink under them.
//! - **Lost** members are deleted (the claim controller releases their
//!   pods) and replaced, mid-migration or not: a Lost claim serves no one,
//!   and its finalizer releases whatever still carries its UID, the source
//!   included. A replacement needs a free name, so a member whose slot is
//!   still held by a claim being finalized waits for it to go.
//! - **Scale-in** deletes Pending members first, then Outdated ones, then
//!   Bound ones, each by its pod's deletion order (fewest sessions
//!   (`pod-deletion-cost`), then newest pod, then name); it never deletes a
//!   claim mid-migration (unless Lost), and never a Bound one while a
//!   Pending or Lost one is kept.
//! - **Rollout**: while any member is Outdated (its pod runs an old pool
//!   template), the set keeps one **surge** member beyond `replicas`, in
//!   slots below `replicas + 1`; once no member is Pending or Lost, the
//!   surplus is deleted in scale-in order, Outdated first. So a set rolls
//!   one member at a time and never has more than `replicas + 1` live
//!   members, even with two operators (the names lock the slots).
//! - A **deleting set** creates nothing; owner garbage collection deletes
//!   its members.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use cnpool_api::ClaimPhase;

use crate::model::{ClaimSetView, MemberView};
use crate::pool::Expectations;

/// A member to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewMember {
    /// `<set>-<instance id>`.
    pub name: String,
    /// The slot, recorded in the `claim.matrixorigin.io/instance-id` label.
    pub instance_id: u32,
}

/// What the claim set controller does next.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimSetPlan<'a> {
    /// Members to delete (with a UID precondition), before any creation.
    pub delete: Vec<&'a MemberView>,
    /// Members to create from the template, after the deletions.
    pub create: Vec<NewMember>,
}

impl ClaimSetPlan<'_> {
    /// Whether the plan asks for nothing.
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.delete.is_empty()
    }
}

/// The name of the member in `slot` of set `set`.
pub fn member_name(set: &str, slot: u32) -> String {
    format!("{set}-{slot}")
}

/// The slot below `replicas` that `name` stands for in set `set`, if any.
fn slot_of(set: &str, name: &str, replicas: u32) -> Option<u32> {
    let digits = name.strip_prefix(set)?.strip_prefix('-')?;
    // `<set>-01` is not the name of slot 1: only the canonical spelling is.
    let slot: u32 = digits.parse().ok()?;
    (member_name(set, slot) == name && slot < replicas).then_some(slot)
}

/// Whether a member can be deleted at all: not already going, not expected
/// gone, and not mid-migration unless Lost. A migrating claim that serves
/// its tenant is left to finish; a Lost one serves no one, and keeping it
/// would leave the set a member short for good.
fn deletable(member: &MemberView, expected: &Expectations) -> bool {
    let lost = member.phase == Some(ClaimPhase::Lost);
    !member.deleting && !expected.deletions.contains(&member.uid) && (lost || !member.migrating)
}

/// Scale-in rank: lower goes first.
fn rank(member: &MemberView) -> u8 {
    match member.phase {
        None | Some(ClaimPhase::Pending | ClaimPhase::Lost) => 0,
        Some(ClaimPhase::Outdated) => 1,
        Some(ClaimPhase::Bound) => 2,
    }
}

/// The set's plan. `members` are the claims the set controls (by owner
/// reference), whatever their state; `expected` holds this process's
/// creations (names) and deletions (UIDs) not yet seen.
pub fn plan_claim_set<'a>(set: &ClaimSetView, members: &'a [MemberView], expected: &Expectations) -> ClaimSetPlan<'a> {
    let mut delete: Vec<&MemberView> =
        members.iter().filter(|member| member.phase == Some(ClaimPhase::Lost) && deletable(member, expected)).collect();
    let kept = |member: &&MemberView| {
        !member.deleting
            && !expected.deletions.contains(&member.uid)
            && !delete.iter().any(|doomed| std::ptr::eq(*doomed, *member))
    };
    let remaining: Vec<&MemberView> = members.iter().filter(kept).collect();
    let held: BTreeSet<&str> = members.iter().map(|member| member.name.as_str()).collect();
    let awaited: BTreeSet<&str> =
        expected.creations.iter().map(String::as_str).filter(|name| !held.contains(name)).collect();

    // A rollout adds one surge member while any member is Outdated, and
    // keeps it until it binds; only then is an Outdated one deleted.
    let outdated = remaining.iter().any(|member| member.phase == Some(ClaimPhase::Outdated));
    let surge = u32::from(outdated && !set.deleting);
    let binding = remaining.iter().any(|member| rank(member) == 0) || !awaited.is_empty();
    let wanted = u64::from(set.replicas) + u64::from(surge);
    // A scale-in beyond the surge goes straight down to `replicas`.
    let in_surge = remaining.len() as u64 <= wanted;
    let kept = u64::from(set.replicas) + u64::from(surge == 1 && binding && in_surge);
    let live = remaining.len() as u64 + awaited.len() as u64;
    let mut create = Vec::new();
    if live < wanted && !set.deleting {
        let slots = open_slots(set, &remaining, set.replicas + surge);
        create = (0..slots)
            .map(|slot| NewMember { name: member_name(&set.name, slot), instance_id: slot })
            .filter(|new| !held.contains(new.name.as_str()) && !awaited.contains(new.name.as_str()))
            .take(usize::try_from(wanted - live).unwrap_or(usize::MAX))
            .collect();
    } else if remaining.len() as u64 > kept {
        // Creations still on their way are left out: they arrive Pending,
        // and are deleted then rather than a Bound member now.
        let excess = usize::try_from(remaining.len() as u64 - kept).unwrap_or(usize::MAX);
        delete.extend(scale_in_order(&remaining, expected).into_iter().take(excess));
    }
    ClaimSetPlan { delete, create }
}

/// How many slots new members may take: `limit − extras` (`limit` is
/// `replicas`, plus one during a rollout's surge), where extras are the
/// members outside those slots. Members in slots at or above that
/// bound (left by a scale-in and a scale-out since) are extras too, so the
/// bound is the fixed point, reached from `replicas` downwards.
fn open_slots(set: &ClaimSetView, remaining: &[&MemberView], limit: u32) -> u32 {
    let mut slots = limit;
    loop {
        let extras = remaining
            .iter()
            .filter(|member| slot_of(&set.name, &member.name, limit).is_none_or(|slot| slot >= slots))
            .count();
        let bound = limit.saturating_sub(u32::try_from(extras).unwrap_or(u32::MAX));
        if bound >= slots {
            return slots;
        }
        slots = bound;
    }
}

/// The members scale-in may delete, in the order it deletes them.
fn scale_in_order<'a>(remaining: &[&'a MemberView], expected: &Expectations) -> Vec<&'a MemberView> {
    let mut order: Vec<&MemberView> = remaining.iter().copied().filter(|member| deletable(member, expected)).collect();
    order.sort_by_key(|member| {
        let pod = member.pod.as_ref();
        (
            rank(member),
            pod.map(|pod| pod.deletion_cost),
            Reverse(pod.map(|pod| pod.created)),
            pod.map(|pod| pod.name.as_str()),
            member.name.as_str(),
        )
    });
    order
}

#[cfg(test)]
mod tests;
