//! The indexed caches the controllers read, one watch per kind.
//!
//! Each kind has one informer ([`inform`]) that feeds both kube-runtime's
//! store (which the controller runtime reads objects from) and this
//! module's indexes, and reports every change as (old, new) to a handler
//! that decides whom it wakes. Indexes:
//! - pods by pool and phase, by claim UID, by CN store UUID, by node;
//! - claims by UID, by `spec.podName`, by `spec.sourcePod`, by pool and
//!   by the claim set that controls them;
//! - pools, with the revision of their current template;
//! - claim sets, by key only.
//!
//! Pods are kept cut down to what is read of them ([`trim_pod`]); claims,
//! pools and claim sets whole, as a claim's writes replace the object read.
//!
//! No decision lists every object of a kind. Maps are ordered, so that
//! whatever walks them (a relist, a wake) does so in the same order in
//! every process: the simulator replays a seed byte for byte.

mod informer;
mod objects;
mod pods;

pub use informer::{Cache, Change, Index, Progress, inform};
pub use objects::{
    ClaimIndex, ClaimSets, Claims, NoIndex, PoolIndex, Pools, controlling_set, holds_a_pod, still_served, waits_for_pod,
};
pub use pods::{AgeRank, IdlePod, PodIndex, Pods, age_rank_of, trim as trim_pod};
