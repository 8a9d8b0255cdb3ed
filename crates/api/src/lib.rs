//! The cnpool API: the `CNPool`, `CNClaim` and `CNClaimSet` custom resources
//! (group `core.matrixorigin.io/v1alpha1`), the pod labels that carry the
//! binding protocol, the CN store UUID of a pod, and spec validation.
//!
//! CNClaim and CNClaimSet are wire-compatible with the Go
//! matrixone-operator: objects it wrote deserialize unchanged and serialize
//! back without loss.

// kube's derive takes one `printcolumn(...)` per column, which this lint
// mistakes for repeated attributes.
#![allow(clippy::duplicated_attributes)]

mod claim;
mod claimset;
pub mod cnset;
mod common;
pub mod crd;
pub mod hakeeper;
pub mod labels;
mod pool;
mod schema;
pub mod selector;
mod store_uuid;
pub mod validation;

pub use claim::{
    CNClaim, CNClaimSpec, CNClaimStatus, CNStoreStatus, ClaimPhase, MigrateStatus, OUTDATED_CONDITION, Workload,
};
pub use claimset::{CNClaimSet, CNClaimSetSpec, CNClaimSetStatus, CNClaimTemplate, EmbeddedMetadata};
pub use cnset::{CNSetTemplate, ExternalLogSet, LogSet, PoolDeps};
pub use common::{CNLabel, DurationError, GoDuration, PodRef, cn_label_map};
pub use pool::{CNPool, CNPoolSpec, CNPoolStatus, DrainStrategy, PoolStrategy, ScaleStrategy, UpdateStrategy};
pub use store_uuid::cn_store_uuid;

/// The pool phase of a pod, carried in its [`labels::PHASE`] label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PodPhase {
    /// Created; its CN store is not registered yet.
    Unknown,
    /// Registered, unowned, offered to claims.
    Idle,
    /// Owned by exactly one claim.
    Bound,
    /// Released; waiting for sessions to leave.
    Draining,
    /// On its way out; never offered again.
    Terminating,
}

impl PodPhase {
    pub const ALL: [PodPhase; 5] = [Self::Unknown, Self::Idle, Self::Bound, Self::Draining, Self::Terminating];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "Unknown",
            Self::Idle => "Idle",
            Self::Bound => "Bound",
            Self::Draining => "Draining",
            Self::Terminating => "Terminating",
        }
    }

    /// Reads a phase label; `None` for a value no operator writes.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|phase| phase.as_str() == text)
    }
}

impl std::fmt::Display for PodPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
