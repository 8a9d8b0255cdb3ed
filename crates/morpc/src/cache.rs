//! The store cache: the last GetClusterDetails answer, refreshed on an
//! interval and on demand, so that reads of the cluster do not each cost a
//! HAKeeper round trip. The Go operator refreshes every 15 s.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use cnpool_registry::RegistryError;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use crate::hakeeper::{ClusterView, HaKeeperClient};

#[derive(Debug)]
struct Cached {
    view: Arc<ClusterView>,
    fetched_at: Instant,
}

/// The cluster as HAKeeper last described it.
#[derive(Debug)]
pub struct StoreCache {
    hakeeper: Arc<HaKeeperClient>,
    max_age: Duration,
    call_timeout: Duration,
    cached: RwLock<Option<Cached>>,
}

impl StoreCache {
    /// A cache whose answers are at most `max_age` old; each refresh gives
    /// HAKeeper `call_timeout`.
    pub fn new(hakeeper: Arc<HaKeeperClient>, max_age: Duration, call_timeout: Duration) -> Self {
        Self { hakeeper, max_age, call_timeout, cached: RwLock::new(None) }
    }

    /// The cluster, from the cache when it is fresh enough, else from HAKeeper.
    pub async fn get(&self) -> Result<Arc<ClusterView>, RegistryError> {
        match self.fresh() {
            Some(view) => Ok(view),
            None => self.refresh().await,
        }
    }

    /// Asks HAKeeper now and keeps the answer.
    pub async fn refresh(&self) -> Result<Arc<ClusterView>, RegistryError> {
        let view = Arc::new(self.hakeeper.cluster(Instant::now() + self.call_timeout).await?);
        *self.cached.write().unwrap_or_else(PoisonError::into_inner) =
            Some(Cached { view: Arc::clone(&view), fetched_at: Instant::now() });
        Ok(view)
    }

    /// The last answer, however old, without asking HAKeeper.
    pub fn last(&self) -> Option<Arc<ClusterView>> {
        self.read(|cached| Arc::clone(&cached.view))
    }

    /// Forgets the last answer, so that the next [`StoreCache::get`] asks
    /// HAKeeper: after a write, the cache must not contradict it.
    pub fn invalidate(&self) {
        *self.cached.write().unwrap_or_else(PoisonError::into_inner) = None;
    }

    fn fresh(&self) -> Option<Arc<ClusterView>> {
        self.read(|cached| (cached.fetched_at.elapsed() < self.max_age).then(|| Arc::clone(&cached.view))).flatten()
    }

    fn read<T>(&self, f: impl FnOnce(&Cached) -> T) -> Option<T> {
        // The cache is a plain value; a panic elsewhere leaves it usable.
        self.cached.read().unwrap_or_else(PoisonError::into_inner).as_ref().map(f)
    }

    /// Refreshes the cache every `interval` until the returned guard is
    /// dropped. A failed refresh keeps the previous answer; the HAKeeper
    /// client logs the state changes.
    pub fn spawn_refresher(self: &Arc<Self>, interval: Duration) -> Refresher {
        let cache = Arc::clone(self);
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let _ = cache.refresh().await;
            }
        });
        Refresher { task }
    }
}

/// Stops the periodic refresh when dropped.
#[derive(Debug)]
pub struct Refresher {
    task: JoinHandle<()>,
}

impl Drop for Refresher {
    fn drop(&mut self) {
        self.task.abort();
    }
}
