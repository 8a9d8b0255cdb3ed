//! The CN store registry: what cnpool reads from and writes to MatrixOne's
//! HAKeeper, and the CN query service's drain counters.
//!
//! HAKeeper has no lock of its own. cnpool therefore writes it from exactly
//! one place, the CN-store controller, and only with state derived from a
//! pod version it has just read (DESIGN §2, "Store"). This crate is the seam
//! between that controller and the two implementations: the morpc client
//! that talks to a real MatrixOne, and the in-memory registry of the
//! simulator ([`memory::MemoryRegistry`]), which must keep HAKeeper's quirks:
//! - a [`StoreRegistry::patch_store`] with state Unknown (0) is stored as
//!   Working, so Draining must always be sent explicitly;
//! - `patch_store` with an empty label map leaves the labels as they were;
//!   only [`StoreRegistry::replace_labels`] with an empty map clears them;
//! - an unknown store answers error 20101, surfaced as
//!   [`RegistryError::StoreNotFound`]; deleting an unknown store succeeds.

use std::collections::BTreeMap;
use std::future::Future;

pub mod memory;

/// Labels of a CN store: each key carries a list of values.
pub type StoreLabels = BTreeMap<String, Vec<String>>;

/// HAKeeper's work state of a CN store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WorkState {
    #[default]
    Unknown,
    Working,
    Draining,
    Drained,
}

impl WorkState {
    /// The number HAKeeper uses on the wire and in `status.store.workState`.
    pub fn code(self) -> i32 {
        match self {
            Self::Unknown => 0,
            Self::Working => 1,
            Self::Draining => 2,
            Self::Drained => 3,
        }
    }

    /// Reads a wire code; an unknown code reads as `Unknown`, which no
    /// decision treats as serving.
    pub fn from_code(code: i32) -> Self {
        match code {
            1 => Self::Working,
            2 => Self::Draining,
            3 => Self::Drained,
            _ => Self::Unknown,
        }
    }
}

/// One CN store as HAKeeper reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CnStore {
    pub uuid: String,
    pub service_address: String,
    pub sql_address: String,
    pub lock_service_address: String,
    pub query_address: String,
    pub work_state: WorkState,
    pub labels: StoreLabels,
}

/// What still runs on a CN. It may be recycled when all three are zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Workload {
    /// Client sessions that came through the proxy.
    pub sessions: u64,
    /// Running pipelines.
    pub pipelines: u64,
    /// Shard replicas the CN still hosts.
    pub replicas: u64,
}

impl Workload {
    pub fn is_idle(&self) -> bool {
        self.sessions == 0 && self.pipelines == 0 && self.replicas == 0
    }
}

/// Why a registry call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// HAKeeper does not know the store (error 20101).
    #[error("CN store {uuid} does not exist in HAKeeper")]
    StoreNotFound { uuid: String },
    /// No HAKeeper leader could be found (error 20417 or discovery failed).
    #[error("no HAKeeper is reachable: {detail}")]
    NoHaKeeper { detail: String },
    /// The call did not finish before its deadline; it may or may not have
    /// taken effect.
    #[error("{call} timed out")]
    Timeout { call: &'static str },
    /// The connection failed or broke.
    #[error("{call}: connection to {address} failed: {detail}")]
    Connection { call: &'static str, address: String, detail: String },
    /// The service answered with an error of its own.
    #[error("{call}: MatrixOne answered error {code}: {message}")]
    Remote { call: &'static str, code: u32, message: String },
    /// The answer could not be decoded.
    #[error("{call}: malformed answer: {detail}")]
    Protocol { call: &'static str, detail: String },
}

impl RegistryError {
    /// A short, fixed label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::StoreNotFound { .. } => "store_not_found",
            Self::NoHaKeeper { .. } => "no_hakeeper",
            Self::Timeout { .. } => "timeout",
            Self::Connection { .. } => "connection",
            Self::Remote { .. } => "remote",
            Self::Protocol { .. } => "protocol",
        }
    }

    /// Whether trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        !matches!(self, Self::StoreNotFound { .. })
    }
}

/// One MatrixOne cluster's CN stores.
///
/// Methods are `async` and `Send` so that controllers can run them on a
/// multi-threaded runtime.
pub trait StoreRegistry: Send + Sync {
    /// All CN stores HAKeeper knows, with state, labels and addresses
    /// (GetClusterDetails).
    fn list_stores(&self) -> impl Future<Output = Result<Vec<CnStore>, RegistryError>> + Send;

    /// Sets a store's work state, and its labels when `labels` is not empty
    /// (PatchCNStore). An empty map leaves the labels as they were.
    fn patch_store(
        &self,
        uuid: &str,
        state: WorkState,
        labels: &StoreLabels,
    ) -> impl Future<Output = Result<(), RegistryError>> + Send;

    /// Replaces a store's whole label map; an empty map clears it
    /// (UpdateCNLabel).
    fn replace_labels(
        &self,
        uuid: &str,
        labels: &StoreLabels,
    ) -> impl Future<Output = Result<(), RegistryError>> + Send;

    /// Removes a store (DeleteCNStore). Removing an unknown store succeeds.
    fn delete_store(&self, uuid: &str) -> impl Future<Output = Result<(), RegistryError>> + Send;

    /// Sessions, pipelines and replicas still on the CN, from its query
    /// service. An error answer is an error, never a count of zero.
    fn workload(&self, store: &CnStore) -> impl Future<Output = Result<Workload, RegistryError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_state_codes_round_trip_and_unknown_codes_do_not_serve() {
        for state in [WorkState::Unknown, WorkState::Working, WorkState::Draining, WorkState::Drained] {
            assert_eq!(WorkState::from_code(state.code()), state);
        }
        assert_eq!(WorkState::from_code(7), WorkState::Unknown);
    }

    #[test]
    fn only_a_missing_store_is_permanent() {
        assert!(!RegistryError::StoreNotFound { uuid: "u".into() }.is_transient());
        assert!(RegistryError::Timeout { call: "PatchCNStore" }.is_transient());
        assert!(RegistryError::NoHaKeeper { detail: "20417".into() }.is_transient());
    }

    #[test]
    fn a_workload_is_idle_only_when_everything_is_zero() {
        assert!(Workload::default().is_idle());
        assert!(!Workload { sessions: 1, ..Default::default() }.is_idle());
        assert!(!Workload { pipelines: 1, ..Default::default() }.is_idle());
        assert!(!Workload { replicas: 1, ..Default::default() }.is_idle());
    }
}
