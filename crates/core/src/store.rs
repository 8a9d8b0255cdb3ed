//! A pool pod's CN store lifecycle (DESIGN §2, "register", "recycle" and
//! "Store").
//!
//! The pod is the single source of truth: the store HAKeeper should hold
//! is derived from the pod alone.
//!
//! | pod phase | desired store |
//! |---|---|
//! | Bound | Working, labels from the pod's binding annotation (left as they are if the pod has none yet, e.g. bound by the Go operator) |
//! | any other | Draining, no labels |
//!
//! Labels are always written with `UpdateCNLabel` (replace), since an empty
//! `PatchCNStore` cannot clear them; the state with `PatchCNStore`. A store
//! that goes Working gets its labels first, so that it never serves a moment
//! with the last tenant's; a store that stops serving goes Draining first.
//! HAKeeper's own Drained counts as Draining.
//!
//! The phase transitions this controller makes:
//!
//! | from | when | to |
//! |---|---|---|
//! | Unknown | the store is registered (after the writes above reset what a previous pod of the same name left) | Idle (`Register`) |
//! | Draining | failed | Terminating |
//! | Draining | the drain timeout has passed since `reclaimed-at` | Terminating |
//! | Draining | drained (no sessions, pipelines or replicas) and `minDelay` has passed since `reclaimed-at`; delete-on-reclaim, pool deleting, or outdated / old revision | Terminating |
//! | Draining | drained and `minDelay` has passed, otherwise | Idle (`Recycle`) |
//!
//! A pod being deleted makes no transition. A Draining pod without
//! `reclaimed-at` (written by hand or by an older operator) recycles as soon
//! as it is drained and never times out. Retiring Idle pods belongs to the
//! pool plan ([`crate::pool`]).

use std::time::Duration;

use cnpool_api::PodPhase;
use cnpool_registry::{StoreLabels, WorkState, Workload};
use jiff::Timestamp;

use crate::binding::{Binding, BindingError};
use crate::model::{PodView, PoolView, StoreView, has_elapsed};

/// The store HAKeeper should hold for a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredStore {
    /// Working or Draining; never Unknown, which HAKeeper stores as Working.
    pub state: WorkState,
    /// The whole label map, or `None` to leave the labels as they are.
    pub labels: Option<StoreLabels>,
}

/// One write to a pod's store in HAKeeper.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreWrite {
    /// Replace the whole label map (`UpdateCNLabel`); an empty map clears it.
    ReplaceLabels(StoreLabels),
    /// Set the work state, labels untouched (`PatchCNStore` with no labels).
    SetState(WorkState),
}

/// A phase change of a pool pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodTransition {
    /// Unknown → Idle: the store is registered.
    Register,
    /// Draining → Idle: drained and rested.
    Recycle,
    /// Draining → Terminating.
    Terminate(TerminateReason),
}

impl PodTransition {
    /// The phase the transition requires (the write's guard).
    pub fn from(self) -> PodPhase {
        match self {
            Self::Register => PodPhase::Unknown,
            Self::Recycle | Self::Terminate(_) => PodPhase::Draining,
        }
    }

    /// The phase the transition writes.
    pub fn to(self) -> PodPhase {
        match self {
            Self::Register | Self::Recycle => PodPhase::Idle,
            Self::Terminate(_) => PodPhase::Terminating,
        }
    }
}

/// Why a draining pod is terminated rather than returned to Idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TerminateReason {
    /// The pod has failed.
    Failed,
    /// It did not drain within the pool's drain timeout.
    DrainTimeout,
    /// The pod asks to be deleted instead of reused.
    DeleteOnReclaim,
    /// Its pool is being deleted.
    PoolDeleting,
    /// It is of an old template, or marked outdated.
    Outdated,
}

impl TerminateReason {
    /// A stable identifier for Events and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Failed => "Failed",
            Self::DrainTimeout => "DrainTimeout",
            Self::DeleteOnReclaim => "DeleteOnReclaim",
            Self::PoolDeleting => "PoolDeleting",
            Self::Outdated => "Outdated",
        }
    }
}

/// What the CN-store controller does next for one pod: the store writes
/// first, in order, then the transition once they all succeeded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StorePlan {
    /// Writes to the pod's store, in this order.
    pub writes: Vec<StoreWrite>,
    /// The phase change to write on the pod afterwards (guarded on its phase).
    pub transition: Option<PodTransition>,
}

/// The plan for `pod`, whose store HAKeeper reports as `store` (or not at
/// all) and whose drain counters read `workload` (or could not be read).
pub fn plan_store(
    pod: &PodView,
    store: Option<&StoreView>,
    workload: Option<Workload>,
    now: Timestamp,
    pool: &PoolView,
) -> Result<StorePlan, BindingError> {
    let writes = match store {
        Some(observed) => store_writes(&desired_store(pod)?, observed),
        None => Vec::new(),
    };
    Ok(StorePlan { writes, transition: next_transition(pod, store.is_some(), workload, now, pool) })
}

/// The store HAKeeper should hold for `pod`, from its phase and binding.
pub fn desired_store(pod: &PodView) -> Result<DesiredStore, BindingError> {
    if pod.phase != Some(PodPhase::Bound) {
        return Ok(DesiredStore { state: WorkState::Draining, labels: Some(StoreLabels::new()) });
    }
    let labels = pod.binding.as_deref().map(Binding::parse).transpose()?.map(|binding| binding.cn_labels);
    Ok(DesiredStore { state: WorkState::Working, labels })
}

/// The writes that turn `observed` into `desired`; none when they agree.
pub fn store_writes(desired: &DesiredStore, observed: &StoreView) -> Vec<StoreWrite> {
    let labels = desired.labels.as_ref().filter(|labels| **labels != observed.labels);
    let label_write = labels.map(|labels| StoreWrite::ReplaceLabels(labels.clone()));
    let state_agrees = observed.work_state == desired.state
        || (desired.state == WorkState::Draining && observed.work_state == WorkState::Drained);
    let state_write = (!state_agrees).then_some(StoreWrite::SetState(desired.state));
    let ordered =
        if desired.state == WorkState::Working { [label_write, state_write] } else { [state_write, label_write] };
    ordered.into_iter().flatten().collect()
}

/// The pod's next phase change, if any.
pub fn next_transition(
    pod: &PodView,
    store_registered: bool,
    workload: Option<Workload>,
    now: Timestamp,
    pool: &PoolView,
) -> Option<PodTransition> {
    if pod.deleting {
        return None;
    }
    match pod.phase {
        Some(PodPhase::Unknown) if store_registered && !pod.failed => Some(PodTransition::Register),
        Some(PodPhase::Draining) => recycle(pod, workload, now, pool),
        _ => None,
    }
}

fn recycle(pod: &PodView, workload: Option<Workload>, now: Timestamp, pool: &PoolView) -> Option<PodTransition> {
    let terminate = |reason| Some(PodTransition::Terminate(reason));
    if pod.failed {
        return terminate(TerminateReason::Failed);
    }
    if pod.reclaimed_at.is_some_and(|released| has_elapsed(released, now, pool.drain_timeout)) {
        return terminate(TerminateReason::DrainTimeout);
    }
    let rested = pod.reclaimed_at.is_none_or(|released| has_elapsed(released, now, pool.min_delay));
    if !(rested && workload.is_some_and(|workload| workload.is_idle())) {
        return None;
    }
    if pod.delete_on_reclaim {
        terminate(TerminateReason::DeleteOnReclaim)
    } else if pool.deleting {
        terminate(TerminateReason::PoolDeleting)
    } else if !pod.is_current(pool) {
        terminate(TerminateReason::Outdated)
    } else {
        Some(PodTransition::Recycle)
    }
}

/// How long to wait before looking at a draining pod again. While the pod
/// rests (`min_delay` from its release) only a change its watch delivers (a
/// failure, a deletion) can end the drain, so it is looked at when the rest
/// ends; after that at half the drain's age — a drain that lasts is looked at
/// ever less often, so that a slow drain costs a few reconciles a minute
/// rather than one per `poll`. Never sooner than `poll`, never later than
/// `max`, and no later than its rest's end or its drain's timeout.
pub fn drain_recheck(pod: &PodView, now: Timestamp, pool: &PoolView, poll: Duration, max: Duration) -> Duration {
    let Some(released) = pod.reclaimed_at else { return poll };
    let age = now.duration_since(released).unsigned_abs();
    let deadlines = [pool.min_delay, pool.drain_timeout].into_iter().filter_map(|after| after.checked_sub(age));
    let until_deadline = deadlines.filter(|left| !left.is_zero()).min().unwrap_or(Duration::MAX);
    let paced = if age < pool.min_delay { Duration::MAX } else { age / 2 };
    paced.min(until_deadline).min(max).max(poll)
}

#[cfg(test)]
mod tests;
