//! An in-memory HAKeeper, CN query service and TN lock service, for the
//! simulator and for tests.
//!
//! [`MemoryRegistry`] answers the [`StoreRegistry`] calls the way MatrixOne
//! does, quirks included (see the crate docs), and gives the simulated world
//! its side of the cluster: CNs that register and vanish, their workloads,
//! and faults injected on the simulator's schedule. It holds no clock and
//! draws no random numbers: everything that happens to it is decided by its
//! caller, so a seeded simulation replays identically.
//!
//! Re-registering a UUID that HAKeeper already knows keeps the stored labels
//! and work state and only refreshes the addresses. That is what MatrixOne's
//! HAKeeper does with the heartbeat of a CN it knows (a restarted pod of the
//! same name comes back under the same UUID), and it is why cnpool resets a
//! store's labels and state when it registers a pod (DESIGN §2, register).
//! A UUID seen for the first time starts Working with no labels, as in
//! MatrixOne.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::{CnStore, RegistryError, StoreLabels, StoreRegistry, WorkState, Workload};

/// The calls a fault can be injected into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CallKind {
    /// GetClusterDetails ([`StoreRegistry::list_stores`]).
    ListStores,
    /// PatchCNStore ([`StoreRegistry::patch_store`]).
    PatchStore,
    /// UpdateCNLabel ([`StoreRegistry::replace_labels`]).
    ReplaceLabels,
    /// DeleteCNStore ([`StoreRegistry::delete_store`]).
    DeleteStore,
    /// The CN query service ([`StoreRegistry::workload`]).
    Workload,
    /// The TN lock service's SetRestartService.
    SetRestartService,
    /// The TN lock service's RemainTxnInService.
    RemainTxnInService,
    /// The TN lock service's CanRestartService.
    CanRestartService,
}

impl CallKind {
    /// MatrixOne's name of the call, as used in error messages.
    pub fn call_name(self) -> &'static str {
        match self {
            Self::ListStores => "GetClusterDetails",
            Self::PatchStore => "PatchCNStore",
            Self::ReplaceLabels => "UpdateCNLabel",
            Self::DeleteStore => "DeleteCNStore",
            Self::Workload => "CN query service",
            Self::SetRestartService => "SetRestartService",
            Self::RemainTxnInService => "RemainTxnInService",
            Self::CanRestartService => "CanRestartService",
        }
    }
}

/// The addresses a CN announces when it registers (its heartbeat).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreAddresses {
    pub service_address: String,
    pub sql_address: String,
    pub lock_service_address: String,
    pub query_address: String,
}

/// Writes that HAKeeper accepted, per call. A write counts when it was
/// answered OK, including a delete of an unknown store (HAKeeper answers it
/// OK too); a write refused with an error or an injected fault does not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteCounts {
    pub patch_store: u64,
    pub replace_labels: u64,
    pub delete_store: u64,
}

impl WriteCounts {
    pub fn total(&self) -> u64 {
        self.patch_store + self.replace_labels + self.delete_store
    }
}

#[derive(Clone, Debug)]
struct StoreEntry {
    store: CnStore,
    workload: Workload,
}

/// One queued fault: fail the next `remaining` calls with `error`.
#[derive(Debug)]
struct Fault {
    remaining: u32,
    error: RegistryError,
}

#[derive(Debug, Default)]
struct State {
    stores: BTreeMap<String, StoreEntry>,
    faults: BTreeMap<CallKind, VecDeque<Fault>>,
    fired: BTreeMap<CallKind, u64>,
    writes: WriteCounts,
    /// Stores whose restart was announced to the lock service.
    restarting: BTreeSet<String>,
}

impl State {
    /// Takes the next injected error for `kind`, if one is queued.
    fn take_fault(&mut self, kind: CallKind) -> Option<RegistryError> {
        let queue = self.faults.get_mut(&kind)?;
        let fault = queue.front_mut()?;
        let error = fault.error.clone();
        fault.remaining = fault.remaining.saturating_sub(1);
        if fault.remaining == 0 {
            queue.pop_front();
        }
        *self.fired.entry(kind).or_default() += 1;
        Some(error)
    }

    fn store_mut(&mut self, uuid: &str) -> Result<&mut StoreEntry, RegistryError> {
        self.stores.get_mut(uuid).ok_or_else(|| RegistryError::StoreNotFound { uuid: uuid.to_owned() })
    }
}

/// An in-memory MatrixOne cluster side: HAKeeper's CN stores, their query
/// services and the TN lock service. Cloning it shares the same cluster.
#[derive(Clone, Debug, Default)]
pub struct MemoryRegistry {
    state: Arc<Mutex<State>>,
}

impl MemoryRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every mutation below is a single step on plain data, so the state a
    /// panicking holder left behind is still consistent: recover it rather
    /// than spread the panic to every other user of the registry.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    // --- the world's side -------------------------------------------------

    /// A CN starts and registers (its first heartbeat). A known UUID keeps
    /// its labels and work state and takes the new addresses; a new one
    /// starts Working with no labels.
    pub fn register_store(&self, uuid: &str, addresses: StoreAddresses) {
        let mut state = self.state();
        let entry = state.stores.entry(uuid.to_owned()).or_insert_with(|| StoreEntry {
            store: CnStore { uuid: uuid.to_owned(), work_state: WorkState::Working, ..CnStore::default() },
            workload: Workload::default(),
        });
        entry.store.service_address = addresses.service_address;
        entry.store.sql_address = addresses.sql_address;
        entry.store.lock_service_address = addresses.lock_service_address;
        entry.store.query_address = addresses.query_address;
    }

    /// A store vanishes from HAKeeper (its heartbeats stopped long enough).
    /// Not a write by the operator, so not counted. Returns whether it existed.
    pub fn remove_store(&self, uuid: &str) -> bool {
        let mut state = self.state();
        state.restarting.remove(uuid);
        state.stores.remove(uuid).is_some()
    }

    /// Sets what still runs on a CN. Returns false when the store is unknown.
    pub fn set_workload(&self, uuid: &str, workload: Workload) -> bool {
        match self.state().stores.get_mut(uuid) {
            Some(entry) => {
                entry.workload = workload;
                true
            }
            None => false,
        }
    }

    /// One store as HAKeeper holds it now.
    pub fn store(&self, uuid: &str) -> Option<CnStore> {
        self.state().stores.get(uuid).map(|entry| entry.store.clone())
    }

    /// Reads one store as HAKeeper holds it now, without copying it.
    pub fn inspect_store<T>(&self, uuid: &str, read: impl FnOnce(Option<&CnStore>) -> T) -> T {
        read(self.state().stores.get(uuid).map(|entry| &entry.store))
    }

    /// The workload set for a store, without going through fault injection.
    pub fn store_workload(&self, uuid: &str) -> Option<Workload> {
        self.state().stores.get(uuid).map(|entry| entry.workload)
    }

    /// Makes the next `count` calls of `kind` fail with `error`. Faults
    /// queued for one kind fire in the order they were queued.
    pub fn fail_next(&self, kind: CallKind, count: u32, error: RegistryError) {
        if count == 0 {
            return;
        }
        self.state().faults.entry(kind).or_default().push_back(Fault { remaining: count, error });
    }

    /// Makes the next `count` calls of `kind` fail with `error`, in place of
    /// whatever is left of faults queued for it: a passing outage rather
    /// than a debt that the next caller pays, however much later.
    pub fn fail_next_only(&self, kind: CallKind, count: u32, error: RegistryError) {
        self.state().faults.remove(&kind);
        self.fail_next(kind, count, error);
    }

    /// Drops every queued fault.
    pub fn clear_faults(&self) {
        self.state().faults.clear();
    }

    /// How many injected faults have fired for `kind`.
    pub fn faults_fired(&self, kind: CallKind) -> u64 {
        self.state().fired.get(&kind).copied().unwrap_or(0)
    }

    /// Writes accepted so far, per call.
    pub fn write_counts(&self) -> WriteCounts {
        self.state().writes
    }

    /// Whether the lock service was told that this store will restart.
    pub fn restart_announced(&self, uuid: &str) -> bool {
        self.state().restarting.contains(uuid)
    }

    // --- the TN lock service ----------------------------------------------

    /// SetRestartService: the lock service stops giving the store new lock
    /// tables. Answers OK for any service id, as the TN does.
    pub fn set_restart_service(&self, uuid: &str) -> Result<bool, RegistryError> {
        let mut state = self.state();
        if let Some(error) = state.take_fault(CallKind::SetRestartService) {
            return Err(error);
        }
        state.restarting.insert(uuid.to_owned());
        Ok(true)
    }

    /// RemainTxnInService: transactions still holding locks on the store.
    /// The simulation takes each open session to hold one; an unknown store
    /// holds none.
    pub fn remain_txn_in_service(&self, uuid: &str) -> Result<i32, RegistryError> {
        let mut state = self.state();
        if let Some(error) = state.take_fault(CallKind::RemainTxnInService) {
            return Err(error);
        }
        Ok(remaining_txns(&state, uuid))
    }

    /// CanRestartService: true once the restart was announced and no
    /// transaction remains.
    pub fn can_restart_service(&self, uuid: &str) -> Result<bool, RegistryError> {
        let mut state = self.state();
        if let Some(error) = state.take_fault(CallKind::CanRestartService) {
            return Err(error);
        }
        Ok(state.restarting.contains(uuid) && remaining_txns(&state, uuid) == 0)
    }

    // --- HAKeeper and the query service, synchronously ----------------------

    /// [`StoreRegistry::list_stores`] without the future, for callers that
    /// are not async (the morpc server's handlers, the simulator).
    pub fn list_stores_now(&self) -> Result<Vec<CnStore>, RegistryError> {
        let mut state = self.state();
        if let Some(error) = state.take_fault(CallKind::ListStores) {
            return Err(error);
        }
        Ok(state.stores.values().map(|entry| entry.store.clone()).collect())
    }

    /// [`StoreRegistry::patch_store`], synchronously.
    pub fn patch_store_now(
        &self,
        uuid: &str,
        work_state: WorkState,
        labels: &StoreLabels,
    ) -> Result<(), RegistryError> {
        let mut state = self.state();
        if let Some(error) = state.take_fault(CallKind::PatchStore) {
            return Err(error);
        }
        let entry = state.store_mut(uuid)?;
        // HAKeeper stores a patch's Unknown (0) as Working.
        entry.store.work_state = if work_state == WorkState::Unknown { WorkState::Working } else { work_state };
        // An empty label map in a patch means "labels unchanged".
        if !labels.is_empty() {
            entry.store.labels = labels.clone();
        }
        state.writes.patch_store += 1;
        Ok(())
    }

    /// [`StoreRegistry::replace_labels`], synchronously.
    pub fn replace_labels_now(&self, uuid: &str, labels: &StoreLabels) -> Result<(), RegistryError> {
        let mut state = self.state();
        if let Some(error) = state.take_fault(CallKind::ReplaceLabels) {
            return Err(error);
        }
        state.store_mut(uuid)?.store.labels = labels.clone();
        state.writes.replace_labels += 1;
        Ok(())
    }

    /// [`StoreRegistry::delete_store`], synchronously.
    pub fn delete_store_now(&self, uuid: &str) -> Result<(), RegistryError> {
        let mut state = self.state();
        if let Some(error) = state.take_fault(CallKind::DeleteStore) {
            return Err(error);
        }
        state.stores.remove(uuid);
        state.restarting.remove(uuid);
        state.writes.delete_store += 1;
        Ok(())
    }

    /// The workload a store's query service reports. A store that is gone
    /// has no query service to answer: that is a connection failure, never
    /// a workload of zero.
    pub fn workload_now(&self, uuid: &str, query_address: &str) -> Result<Workload, RegistryError> {
        let mut state = self.state();
        if let Some(error) = state.take_fault(CallKind::Workload) {
            return Err(error);
        }
        state.stores.get(uuid).map(|entry| entry.workload).ok_or_else(|| RegistryError::Connection {
            call: CallKind::Workload.call_name(),
            address: query_address.to_owned(),
            detail: format!("CN {uuid} is not running"),
        })
    }
}

fn remaining_txns(state: &State, uuid: &str) -> i32 {
    state.stores.get(uuid).map(|entry| i32::try_from(entry.workload.sessions).unwrap_or(i32::MAX)).unwrap_or(0)
}

impl StoreRegistry for MemoryRegistry {
    async fn list_stores(&self) -> Result<Vec<CnStore>, RegistryError> {
        self.list_stores_now()
    }

    async fn patch_store(&self, uuid: &str, state: WorkState, labels: &StoreLabels) -> Result<(), RegistryError> {
        self.patch_store_now(uuid, state, labels)
    }

    async fn replace_labels(&self, uuid: &str, labels: &StoreLabels) -> Result<(), RegistryError> {
        self.replace_labels_now(uuid, labels)
    }

    async fn delete_store(&self, uuid: &str) -> Result<(), RegistryError> {
        self.delete_store_now(uuid)
    }

    async fn workload(&self, store: &CnStore) -> Result<Workload, RegistryError> {
        self.workload_now(&store.uuid, &store.query_address)
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;

    /// The registry never awaits anything, so one poll finishes each call.
    fn now<T>(future: impl Future<Output = T>) -> T {
        match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(value) => value,
            Poll::Pending => panic!("MemoryRegistry calls complete without waiting"),
        }
    }

    fn labels(pairs: &[(&str, &[&str])]) -> StoreLabels {
        pairs.iter().map(|(k, vs)| (k.to_string(), vs.iter().map(|v| v.to_string()).collect())).collect()
    }

    fn addresses(host: &str) -> StoreAddresses {
        StoreAddresses {
            service_address: format!("{host}:6001"),
            sql_address: format!("{host}:6001"),
            lock_service_address: format!("{host}:6003"),
            query_address: format!("{host}:19998"),
        }
    }

    fn registry_with(uuid: &str) -> MemoryRegistry {
        let registry = MemoryRegistry::new();
        registry.register_store(uuid, addresses("cn-0"));
        registry
    }

    #[test]
    fn a_new_store_starts_working_without_labels() {
        let registry = registry_with("u1");
        let stores = now(registry.list_stores()).unwrap();
        assert_eq!(stores.len(), 1);
        assert_eq!(stores[0].uuid, "u1");
        assert_eq!(stores[0].work_state, WorkState::Working);
        assert!(stores[0].labels.is_empty());
        assert_eq!(stores[0].query_address, "cn-0:19998");
    }

    #[test]
    fn re_registering_keeps_labels_and_state_and_takes_new_addresses() {
        let registry = registry_with("u1");
        now(registry.patch_store("u1", WorkState::Draining, &labels(&[("tenant", &["a"])]))).unwrap();
        registry.register_store("u1", addresses("cn-0-restarted"));
        let store = registry.store("u1").unwrap();
        assert_eq!(store.work_state, WorkState::Draining);
        assert_eq!(store.labels, labels(&[("tenant", &["a"])]));
        assert_eq!(store.query_address, "cn-0-restarted:19998");
    }

    #[test]
    fn a_patch_with_state_unknown_is_stored_as_working() {
        let registry = registry_with("u1");
        now(registry.patch_store("u1", WorkState::Draining, &StoreLabels::new())).unwrap();
        now(registry.patch_store("u1", WorkState::Unknown, &StoreLabels::new())).unwrap();
        assert_eq!(registry.store("u1").unwrap().work_state, WorkState::Working);
    }

    #[test]
    fn a_patch_with_no_labels_leaves_the_labels_alone() {
        let registry = registry_with("u1");
        now(registry.patch_store("u1", WorkState::Working, &labels(&[("tenant", &["a"])]))).unwrap();
        now(registry.patch_store("u1", WorkState::Draining, &StoreLabels::new())).unwrap();
        let store = registry.store("u1").unwrap();
        assert_eq!(store.work_state, WorkState::Draining);
        assert_eq!(store.labels, labels(&[("tenant", &["a"])]));
    }

    #[test]
    fn a_patch_with_labels_replaces_the_whole_map() {
        let registry = registry_with("u1");
        now(registry.patch_store("u1", WorkState::Working, &labels(&[("tenant", &["a"]), ("zone", &["z1"])]))).unwrap();
        now(registry.patch_store("u1", WorkState::Working, &labels(&[("tenant", &["b"])]))).unwrap();
        assert_eq!(registry.store("u1").unwrap().labels, labels(&[("tenant", &["b"])]));
    }

    #[test]
    fn replacing_labels_with_an_empty_map_clears_them() {
        let registry = registry_with("u1");
        now(registry.patch_store("u1", WorkState::Working, &labels(&[("tenant", &["a"])]))).unwrap();
        now(registry.replace_labels("u1", &StoreLabels::new())).unwrap();
        let store = registry.store("u1").unwrap();
        assert!(store.labels.is_empty());
        assert_eq!(store.work_state, WorkState::Working, "UpdateCNLabel does not touch the state");
    }

    #[test]
    fn writes_to_an_unknown_store_answer_store_not_found_and_count_nothing() {
        let registry = MemoryRegistry::new();
        let missing = RegistryError::StoreNotFound { uuid: "nope".into() };
        assert_eq!(now(registry.patch_store("nope", WorkState::Working, &StoreLabels::new())), Err(missing.clone()));
        assert_eq!(now(registry.replace_labels("nope", &labels(&[("k", &["v"])]))), Err(missing));
        assert_eq!(registry.write_counts(), WriteCounts::default());
        assert!(registry.store("nope").is_none(), "a write must not create a store");
    }

    #[test]
    fn deleting_an_unknown_store_succeeds() {
        let registry = MemoryRegistry::new();
        assert_eq!(now(registry.delete_store("nope")), Ok(()));
        assert_eq!(registry.write_counts().delete_store, 1);
    }

    #[test]
    fn deleting_a_store_removes_it() {
        let registry = registry_with("u1");
        now(registry.delete_store("u1")).unwrap();
        assert!(now(registry.list_stores()).unwrap().is_empty());
        assert_eq!(
            now(registry.patch_store("u1", WorkState::Working, &StoreLabels::new())),
            Err(RegistryError::StoreNotFound { uuid: "u1".into() })
        );
    }

    #[test]
    fn writes_are_counted_per_call() {
        let registry = registry_with("u1");
        now(registry.patch_store("u1", WorkState::Working, &StoreLabels::new())).unwrap();
        now(registry.patch_store("u1", WorkState::Draining, &StoreLabels::new())).unwrap();
        now(registry.replace_labels("u1", &StoreLabels::new())).unwrap();
        now(registry.delete_store("u1")).unwrap();
        assert_eq!(registry.write_counts(), WriteCounts { patch_store: 2, replace_labels: 1, delete_store: 1 });
        assert_eq!(registry.write_counts().total(), 4);
    }

    #[test]
    fn a_vanished_store_is_gone_and_its_workload_is_an_error_not_zero() {
        let registry = registry_with("u1");
        let store = registry.store("u1").unwrap();
        assert!(registry.remove_store("u1"));
        assert!(!registry.remove_store("u1"));
        assert!(now(registry.list_stores()).unwrap().is_empty());
        assert!(matches!(now(registry.workload(&store)), Err(RegistryError::Connection { .. })));
        assert_eq!(registry.write_counts(), WriteCounts::default(), "a vanishing store is not an operator write");
    }

    #[test]
    fn the_workload_is_what_the_world_set() {
        let registry = registry_with("u1");
        let store = registry.store("u1").unwrap();
        assert_eq!(now(registry.workload(&store)), Ok(Workload::default()));
        let busy = Workload { sessions: 3, pipelines: 1, replicas: 2 };
        assert!(registry.set_workload("u1", busy));
        assert_eq!(now(registry.workload(&store)), Ok(busy));
        assert!(!registry.set_workload("nope", busy));
    }

    #[test]
    fn injected_faults_fire_exactly_n_times_in_order_and_are_counted() {
        let registry = registry_with("u1");
        let timeout = RegistryError::Timeout { call: "PatchCNStore" };
        let no_hakeeper = RegistryError::NoHaKeeper { detail: "20417".into() };
        registry.fail_next(CallKind::PatchStore, 2, timeout.clone());
        registry.fail_next(CallKind::PatchStore, 1, no_hakeeper.clone());
        let patch = || now(registry.patch_store("u1", WorkState::Draining, &StoreLabels::new()));
        assert_eq!(patch(), Err(timeout.clone()));
        assert_eq!(patch(), Err(timeout));
        assert_eq!(patch(), Err(no_hakeeper));
        assert_eq!(patch(), Ok(()));
        assert_eq!(registry.faults_fired(CallKind::PatchStore), 3);
        assert_eq!(registry.faults_fired(CallKind::ListStores), 0);
        assert_eq!(registry.write_counts().patch_store, 1, "failed calls are not writes");
        assert_eq!(registry.store("u1").unwrap().work_state, WorkState::Draining);
    }

    #[test]
    fn a_fault_only_hits_its_own_kind_and_can_be_cleared() {
        let registry = registry_with("u1");
        registry.fail_next(CallKind::Workload, 5, RegistryError::Timeout { call: "CN query service" });
        assert!(now(registry.list_stores()).is_ok());
        let store = registry.store("u1").unwrap();
        assert!(now(registry.workload(&store)).is_err());
        registry.clear_faults();
        assert!(now(registry.workload(&store)).is_ok());
        registry.fail_next(CallKind::DeleteStore, 0, RegistryError::Timeout { call: "DeleteCNStore" });
        assert!(now(registry.delete_store("u1")).is_ok(), "a fault for zero calls is no fault");
    }

    #[test]
    fn clones_share_one_cluster() {
        let registry = MemoryRegistry::new();
        let clone = registry.clone();
        clone.register_store("u1", addresses("cn-0"));
        assert!(registry.store("u1").is_some());
    }

    #[test]
    fn a_poisoned_lock_does_not_take_the_registry_down() {
        let registry = registry_with("u1");
        let clone = registry.clone();
        let _ = std::thread::spawn(move || {
            let _guard = clone.state.lock();
            panic!("a holder panics");
        })
        .join();
        assert!(registry.state.is_poisoned());
        assert_eq!(now(registry.list_stores()).unwrap().len(), 1);
    }

    #[test]
    fn the_lock_service_allows_a_restart_once_announced_and_no_transaction_remains() {
        let registry = registry_with("u1");
        registry.set_workload("u1", Workload { sessions: 2, ..Workload::default() });
        assert_eq!(registry.can_restart_service("u1"), Ok(false), "not announced yet");
        assert_eq!(registry.set_restart_service("u1"), Ok(true));
        assert!(registry.restart_announced("u1"));
        assert_eq!(registry.remain_txn_in_service("u1"), Ok(2));
        assert_eq!(registry.can_restart_service("u1"), Ok(false), "transactions remain");
        registry.set_workload("u1", Workload::default());
        assert_eq!(registry.remain_txn_in_service("u1"), Ok(0));
        assert_eq!(registry.can_restart_service("u1"), Ok(true));
    }

    #[test]
    fn lock_service_calls_take_injected_faults() {
        let registry = registry_with("u1");
        let error = RegistryError::Remote { call: "SetRestartService", code: 20101, message: "boom".into() };
        registry.fail_next(CallKind::SetRestartService, 1, error.clone());
        assert_eq!(registry.set_restart_service("u1"), Err(error));
        assert!(!registry.restart_announced("u1"));
        assert_eq!(registry.set_restart_service("u1"), Ok(true));
    }
}
