//! [`MorpcRegistry`]: the store registry of a real MatrixOne cluster, over
//! morpc.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use cnpool_registry::{CnStore, RegistryError, StoreLabels, StoreRegistry, WorkState, Workload};
use tokio::time::Instant;

use crate::cache::StoreCache;
use crate::conn::ConnectionOptions;
use crate::hakeeper::{HaKeeperClient, HaKeeperOptions};
use crate::lock::LockClient;
use crate::metrics::MorpcMetrics;
use crate::query::{QueryClient, SessionCounting};

/// How to reach one MatrixOne cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MorpcOptions {
    pub hakeeper: HaKeeperOptions,
    /// Deadline of each registry call, retries included (the Go operator's 10 s).
    pub call_timeout: Duration,
    /// How old a [`StoreRegistry::list_stores`] answer may be. Every write
    /// through this registry makes the next read ask HAKeeper.
    pub store_cache_max_age: Duration,
    /// Connections to the CN query services and the TN lock service.
    pub service_connection: ConnectionOptions,
    pub session_counting: SessionCounting,
}

impl MorpcOptions {
    /// Defaults for the log set whose discovery service is at `discovery_address`.
    pub fn new(discovery_address: impl Into<String>) -> Self {
        Self {
            hakeeper: HaKeeperOptions::new(discovery_address),
            call_timeout: Duration::from_secs(10),
            store_cache_max_age: Duration::from_secs(1),
            service_connection: ConnectionOptions::lock_or_query(),
            session_counting: SessionCounting::default(),
        }
    }
}

/// The [`StoreRegistry`] of a MatrixOne cluster. Cloning shares the
/// connections and the cache.
#[derive(Clone, Debug)]
pub struct MorpcRegistry {
    hakeeper: Arc<HaKeeperClient>,
    cache: Arc<StoreCache>,
    query: Arc<QueryClient>,
    lock: Arc<LockClient>,
    call_timeout: Duration,
}

impl MorpcRegistry {
    pub fn new(options: MorpcOptions) -> Self {
        Self::observed(options, MorpcMetrics::default())
    }

    /// A registry that counts every call it makes in `calls`.
    pub fn observed(options: MorpcOptions, calls: MorpcMetrics) -> Self {
        let hakeeper = Arc::new(HaKeeperClient::observed(options.hakeeper, calls.clone()));
        let cache = Arc::new(StoreCache::new(Arc::clone(&hakeeper), options.store_cache_max_age, options.call_timeout));
        Self {
            hakeeper,
            cache,
            query: Arc::new(QueryClient::observed(
                options.service_connection.clone(),
                options.session_counting,
                calls.clone(),
            )),
            lock: Arc::new(LockClient::observed(options.service_connection, calls)),
            call_timeout: options.call_timeout,
        }
    }

    pub fn hakeeper(&self) -> &HaKeeperClient {
        &self.hakeeper
    }

    /// The cache behind [`StoreRegistry::list_stores`]; refresh it on an
    /// interval with [`StoreCache::spawn_refresher`].
    pub fn store_cache(&self) -> &Arc<StoreCache> {
        &self.cache
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.call_timeout
    }

    /// The lock service of the cluster's TN, as HAKeeper lists it.
    pub async fn lock_service_address(&self) -> Result<String, RegistryError> {
        let view = self.cache.get().await?;
        view.lock_service_addresses.first().cloned().ok_or_else(|| RegistryError::Protocol {
            call: "GetClusterDetails",
            detail: "HAKeeper lists no TN with a lock service address".to_owned(),
        })
    }

    /// Tells the TN lock service that the CN `uuid` will restart, so that
    /// its lock tables move elsewhere (MatrixOne 1.2 and later).
    pub async fn set_restart_service(&self, uuid: &str) -> Result<bool, RegistryError> {
        let address = self.lock_service_address().await?;
        self.lock.set_restart_service(&address, uuid, self.deadline()).await
    }

    /// Transactions of the CN `uuid` that still hold locks.
    pub async fn remain_txn_in_service(&self, uuid: &str) -> Result<i32, RegistryError> {
        let address = self.lock_service_address().await?;
        self.lock.remain_txn_in_service(&address, uuid, self.deadline()).await
    }

    /// Whether the CN `uuid` has handed all its locks over.
    pub async fn can_restart_service(&self, uuid: &str) -> Result<bool, RegistryError> {
        let address = self.lock_service_address().await?;
        self.lock.can_restart_service(&address, uuid, self.deadline()).await
    }
}

impl StoreRegistry for MorpcRegistry {
    async fn list_stores(&self) -> Result<Vec<CnStore>, RegistryError> {
        let view = self.cache.get().await?;
        let live: HashSet<&str> = view.cn_stores.iter().map(|store| store.query_address.as_str()).collect();
        self.query.retain(|address| live.contains(address));
        Ok(view.cn_stores.clone())
    }

    async fn patch_store(&self, uuid: &str, state: WorkState, labels: &StoreLabels) -> Result<(), RegistryError> {
        let result = self.hakeeper.patch_cn_store(uuid, state, labels, self.deadline()).await;
        // Even a failed write may have landed (a timeout): never serve the old view after it.
        self.cache.invalidate();
        result
    }

    async fn replace_labels(&self, uuid: &str, labels: &StoreLabels) -> Result<(), RegistryError> {
        let result = self.hakeeper.update_cn_label(uuid, labels, self.deadline()).await;
        self.cache.invalidate();
        result
    }

    async fn delete_store(&self, uuid: &str) -> Result<(), RegistryError> {
        let result = self.hakeeper.delete_cn_store(uuid, self.deadline()).await;
        self.cache.invalidate();
        match result {
            // HAKeeper answers OK for an unknown store; should one ever say
            // 20101 instead, the store is gone all the same.
            Err(RegistryError::StoreNotFound { .. }) => Ok(()),
            other => other,
        }
    }

    async fn workload(&self, store: &CnStore) -> Result<Workload, RegistryError> {
        self.query.workload(&store.query_address, self.deadline()).await
    }
}
