//! One store registry (a HAKeeper client) and one store listing per
//! MatrixOne cluster, keyed by the HAKeeper's `host:port`
//! ([`crate::clusters`]): opened when the first pool needs it, dropped when
//! no pool does, so that a cluster's HAKeeper being down stalls only its own
//! pools.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use crate::stores::StoreSnapshot;

/// One MatrixOne cluster as the operator sees it.
pub struct ClusterRegistry<R> {
    /// Its HAKeeper's `host:port`: the cluster's key, and what logs name.
    pub address: String,
    pub registry: R,
    /// Its HAKeeper's latest store listing.
    pub(crate) stores: Arc<StoreSnapshot>,
}

type Factory<R> = Box<dyn Fn(&str) -> R + Send + Sync>;

/// The open clusters, and how to open another.
pub struct Registries<R> {
    /// The HAKeeper of pools without `spec.deps` (`--hakeeper-discovery`).
    default_address: String,
    factory: Factory<R>,
    open: Mutex<BTreeMap<String, Arc<ClusterRegistry<R>>>>,
}

impl<R> Registries<R> {
    /// Clusters whose registries `factory` makes from a HAKeeper address;
    /// `default_address` serves pools without deps.
    pub fn new(default_address: impl Into<String>, factory: impl Fn(&str) -> R + Send + Sync + 'static) -> Self {
        Self { default_address: default_address.into(), factory: Box::new(factory), open: Mutex::default() }
    }

    /// Every cluster served by the one `registry` (the simulator's and the
    /// tests' single in-memory HAKeeper).
    pub fn shared(default_address: impl Into<String>, registry: R) -> Self
    where
        R: Clone + Send + Sync + 'static,
    {
        Self::new(default_address, move |_| registry.clone())
    }

    pub fn default_address(&self) -> &str {
        &self.default_address
    }

    fn open(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<ClusterRegistry<R>>>> {
        // Every critical section is one step on the map.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cluster of `address`, opened now if no pool needed it before.
    pub fn get(&self, address: &str) -> Arc<ClusterRegistry<R>> {
        let mut open = self.open();
        if let Some(cluster) = open.get(address) {
            return Arc::clone(cluster);
        }
        tracing::info!(cluster = address, "opening a HAKeeper client for a MatrixOne cluster");
        let cluster = Arc::new(ClusterRegistry {
            address: address.to_owned(),
            registry: (self.factory)(address),
            stores: Arc::default(),
        });
        open.insert(address.to_owned(), Arc::clone(&cluster));
        cluster
    }

    /// Opens the clusters of `wanted` not open yet and drops those no longer
    /// wanted; returns the open clusters.
    pub fn keep(&self, wanted: &BTreeSet<String>) -> Vec<Arc<ClusterRegistry<R>>> {
        self.open().retain(|address, _| {
            let kept = wanted.contains(address);
            if !kept {
                tracing::info!(cluster = %address, "dropping the HAKeeper client of a MatrixOne cluster no pool uses");
            }
            kept
        });
        wanted.iter().map(|address| self.get(address)).collect()
    }

    /// The addresses of the open clusters.
    pub fn addresses(&self) -> Vec<String> {
        self.open().keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn counting() -> (Registries<String>, Arc<AtomicUsize>) {
        let made = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&made);
        let registries = Registries::new("default:32001", move |address: &str| {
            counter.fetch_add(1, Ordering::Relaxed);
            format!("client of {address}")
        });
        (registries, made)
    }

    #[test]
    fn one_client_per_cluster_made_on_first_need_and_shared_after() {
        let (registries, made) = counting();
        let a = registries.get("a:32001");
        assert_eq!(a.registry, "client of a:32001");
        assert!(Arc::ptr_eq(&a, &registries.get("a:32001")), "the same client, and the same store listing");
        assert_eq!(made.load(Ordering::Relaxed), 1);
        let b = registries.get("b:32001");
        assert_eq!(b.registry, "client of b:32001");
        assert!(!Arc::ptr_eq(&a.stores, &b.stores), "each cluster has its own listing");
        assert_eq!(made.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_cluster_no_pool_wants_is_dropped_and_opened_afresh_when_wanted_again() {
        let (registries, made) = counting();
        registries.get("a:32001");
        registries.get("b:32001");
        let wanted: BTreeSet<String> = ["b:32001".to_owned(), "c:32001".to_owned()].into();
        let open: Vec<String> = registries.keep(&wanted).iter().map(|cluster| cluster.address.clone()).collect();
        assert_eq!(open, vec!["b:32001".to_owned(), "c:32001".to_owned()]);
        assert_eq!(registries.addresses(), open);
        assert_eq!(made.load(Ordering::Relaxed), 3, "b kept, c opened");
        registries.keep(&BTreeSet::new());
        assert!(registries.addresses().is_empty());
        registries.get("a:32001");
        assert_eq!(made.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn a_shared_registry_serves_every_address() {
        let registries = Registries::shared("default:32001", "memory".to_owned());
        assert_eq!(registries.default_address(), "default:32001");
        assert_eq!(registries.get("x:1").registry, "memory");
        assert_eq!(registries.get("y:2").registry, "memory");
    }
}
