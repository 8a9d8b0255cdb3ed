//! A pool's scale plan (DESIGN §2, "Pool").
//!
//! The pool keeps `pending claims + maxIdle` pods of its current revision
//! ready (Idle, or Unknown while they start), beside the pods in use, with
//! at most `maxPods` pods in all — every pod that still exists counts,
//! whatever its phase, and so does every creation issued but not yet seen.
//!
//! - **Supply**: unowned, healthy, not deleting, phase Idle or Unknown, of
//!   the current revision, not outdated and not cordoned
//!   (`matrixorigin.io/store-cordon`, or on a cordoned node); plus expected
//!   creations.
//! - **Stale**: unowned, not deleting, phase Idle or Unknown, but of an old
//!   revision, outdated, cordoned or failed. Always retired; never supply.
//! - **Scale-in** retires Idle supply pods only, fewest sessions
//!   (`pod-deletion-cost`) first, then newest, then by name.
//! - **Terminating** unowned pods not yet deleting are deleted.
//! - A **deleting pool** creates nothing and retires all its unowned
//!   Idle/Unknown pods at once; bound pods keep serving until released.
//!
//! New pods are named `<pool>-<ordinal>`, lowest free ordinal first, with
//! ordinals below `maxPods` when it is set: the name is the lock
//! (AlreadyExists), so even two operators acting on stale views at once
//! cannot make the pool exceed `maxPods`.

use std::collections::BTreeSet;

use cnpool_api::PodPhase;

use crate::model::{PodView, PoolView};
use crate::waiting::Occupancy;

/// Writes issued by this process that its cache has not shown yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expectations {
    /// Names of pods created but not yet seen.
    pub creations: BTreeSet<String>,
    /// UIDs of pods retired or deleted whose new state is not yet seen.
    pub deletions: BTreeSet<String>,
}

/// What the pool controller does next.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolPlan<'a> {
    /// Names of pods to create from the template.
    pub create: Vec<String>,
    /// Pods to retire: phase Terminating (guarded on phase and no owner),
    /// then deletion.
    pub retire: Vec<&'a PodView>,
    /// Terminating pods to delete (with a UID precondition).
    pub delete: Vec<&'a PodView>,
}

impl PoolPlan<'_> {
    /// Whether the plan asks for nothing.
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.retire.is_empty() && self.delete.is_empty()
    }
}

/// What the pool plan makes of one pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Ready or starting, current, its store not overdue: counts toward the
    /// idle target.
    Supply,
    /// Idle or starting, but of no use: retire.
    Stale,
    /// Terminating and not yet deleting: delete.
    Doomed,
    /// Current and Idle or starting, but HAKeeper has lacked its store for
    /// the registration grace: it may yet register, so it is kept and stands
    /// in for the idle reserve (the first to go when that shrinks), but no
    /// waiting claim counts on it;
    /// the pool makes another for them while there is room.
    Overdue,
    /// In use, on its way out, or expected gone: only occupies room.
    Occupant,
}

fn role(pool: &PoolView, pod: &PodView, expected: &Expectations) -> Role {
    if pod.has_owner() || pod.deleting || expected.deletions.contains(&pod.uid) {
        return Role::Occupant;
    }
    match pod.phase {
        // A cordoned pod is offered to no claim (node maintenance wants it empty).
        Some(PodPhase::Idle | PodPhase::Unknown)
            if pod.is_current(pool) && !pod.failed && !pod.cordoned && !pool.deleting =>
        {
            if pod.store_overdue {
                Role::Overdue
            } else {
                Role::Supply
            }
        }
        Some(PodPhase::Idle | PodPhase::Unknown) => Role::Stale,
        Some(PodPhase::Terminating) => Role::Doomed,
        _ => Role::Occupant,
    }
}

/// The pool's plan. `pods` are the pool's pods; `pending_claims` counts the
/// claims waiting for a pod of this pool.
pub fn plan_pool<'a>(
    pool: &PoolView,
    pods: &'a [PodView],
    pending_claims: u32,
    expected: &Expectations,
) -> PoolPlan<'a> {
    let with_role = |wanted: Role| pods.iter().filter(move |pod| role(pool, pod, expected) == wanted);
    let mut retire: Vec<&PodView> = with_role(Role::Stale).collect();
    let delete: Vec<&PodView> = with_role(Role::Doomed).collect();
    let existing: BTreeSet<&str> = pods.iter().map(|pod| pod.name.as_str()).collect();
    let awaited: BTreeSet<&str> =
        expected.creations.iter().map(String::as_str).filter(|name| !existing.contains(name)).collect();
    let supply: Vec<&PodView> = with_role(Role::Supply).collect();
    let overdue: Vec<&PodView> = with_role(Role::Overdue).collect();

    let occupied = pods.len() as u64 + awaited.len() as u64;
    // Overdue pods fill what the good ones leave of the idle reserve, never
    // a waiting claim's place, and never push a good pod out by scale-in.
    let good = supply.len() as u64 + awaited.len() as u64;
    let standing_in = (overdue.len() as u64).min(u64::from(pool.max_idle).saturating_sub(good));
    let ready = good + standing_in;
    let room = pool.max_pods.map_or(u64::MAX, |max| u64::from(max).saturating_sub(occupied - ready));
    let wanted = if pool.deleting { 0 } else { u64::from(pending_claims) + u64::from(pool.max_idle) };
    let target = wanted.min(room);

    let mut create = Vec::new();
    if ready < target {
        let taken = existing.union(&awaited).copied().collect();
        create = free_names(pool, &taken, target - ready);
    } else {
        // Scale-in takes the pods standing in first.
        let standing_in = overdue.iter().copied().take(usize::try_from(standing_in).unwrap_or(usize::MAX));
        let surplus = standing_in.chain(scale_in_order(&supply));
        retire.extend(surplus.take(usize::try_from(ready - target).unwrap_or(usize::MAX)));
    }
    PoolPlan { create, retire, delete }
}

/// How full `pool` is, as its pods `pods` show: what a claim that finds no
/// Idle pod is told ([`crate::waiting`]), and the pool's `AtMaxPods`
/// condition.
pub fn occupancy(pool: &PoolView, pods: &[PodView]) -> Occupancy {
    let none_expected = Expectations::default();
    let mut occupancy = Occupancy::default();
    for pod in pods {
        match role(pool, pod, &none_expected) {
            Role::Stale | Role::Doomed => {}
            _ if pod.deleting => {}
            role => {
                occupancy.staying += 1;
                if role == Role::Supply && pod.phase == Some(PodPhase::Unknown) {
                    occupancy.starting += 1;
                }
            }
        }
    }
    occupancy
}

/// Idle supply pods in the order scale-in retires them.
fn scale_in_order<'a>(supply: &[&'a PodView]) -> Vec<&'a PodView> {
    let mut idle: Vec<&PodView> = supply.iter().copied().filter(|pod| pod.phase == Some(PodPhase::Idle)).collect();
    idle.sort_by_key(|pod| (pod.deletion_cost, std::cmp::Reverse(pod.created), pod.name.as_str()));
    idle
}

/// Up to `count` names `<pool>-<ordinal>` not in `taken`, lowest ordinal
/// first, ordinals below `maxPods` when it is set.
fn free_names(pool: &PoolView, taken: &BTreeSet<&str>, count: u64) -> Vec<String> {
    let limit = pool.max_pods.map_or(u64::MAX, u64::from);
    (0..limit)
        .map(|ordinal| format!("{}-{ordinal}", pool.name))
        .filter(|name| !taken.contains(name.as_str()))
        .take(usize::try_from(count).unwrap_or(usize::MAX))
        .collect()
}

#[cfg(test)]
mod tests;
