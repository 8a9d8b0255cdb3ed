//! Read-your-own-writes for objects this process writes in steps.
//!
//! A claim is written several times on its way to Bound (finalizer, record,
//! status), and a reconcile may end between two of those writes, waiting for
//! a store. The next reconcile starts from the cache, which may still hold a
//! version from before this process's last write: every write decided from
//! it is refused as stale, and the claim goes round until the watch catches
//! up. So each successful write is remembered with the resourceVersions it
//! superseded; a cached object at one of those versions is replaced by the
//! written one. resourceVersions are only compared for equality (they are
//! opaque), and anything the cache shows that this process did not
//! supersede — the written version itself, or someone else's later write —
//! is taken as it is, and the memory dropped.
//!
//! The same memory tells the watch which events are only the echo of this
//! process's own writes: the reconcile that wrote a version went on from
//! what the write returned and decided on it, so its event need not wake
//! the object again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kube::{Resource, ResourceExt};
use tokio::time::Instant;

pub struct OwnWrites<K> {
    horizon: Duration,
    /// By object UID, and when the entries past the horizon were last dropped.
    written: Mutex<(BTreeMap<String, Written<K>>, Instant)>,
}

struct Written<K> {
    /// Versions older than `latest` that this process wrote over.
    superseded: Vec<String>,
    /// The versions this process's writes made, `latest`'s among them.
    made: Vec<String>,
    latest: Arc<K>,
    at: Instant,
}

impl<K: Resource> OwnWrites<K> {
    /// Remembers writes for `horizon`: a cache that lags longer than that
    /// is only followed, not corrected.
    pub fn new(horizon: Duration) -> Self {
        Self { horizon, written: Mutex::new((BTreeMap::new(), Instant::now())) }
    }

    /// This process wrote `written` over the version `read` (the one its
    /// write was conditional on).
    pub fn wrote(&self, read: Option<&str>, written: K) {
        let (Some(uid), Some(read)) = (written.uid(), read) else { return };
        let mut guard = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let (map, pruned) = &mut *guard;
        // Entries past the horizon are dropped once per horizon, not on
        // every write: a burst of writes would sweep the whole map each time.
        let now = Instant::now();
        if now.duration_since(*pruned) >= self.horizon {
            map.retain(|_, entry| now.duration_since(entry.at) < self.horizon);
            *pruned = now;
        }
        let (mut superseded, mut made) = match map.remove(&uid) {
            // A write over its own last write: the cache may be at any of them.
            Some(entry) if entry.latest.resource_version().as_deref() == Some(read) => (entry.superseded, entry.made),
            _ => (Vec::new(), Vec::new()),
        };
        superseded.push(read.to_owned());
        made.extend(written.resource_version());
        map.insert(uid, Written { superseded, made, latest: Arc::new(written), at: now });
    }

    /// Whether `seen` is a version this process's own writes made (within
    /// the horizon): the reconcile that wrote it has decided on it already.
    pub fn made(&self, seen: &K) -> bool {
        let (Some(uid), Some(version)) = (seen.uid(), seen.resource_version()) else { return false };
        let guard = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        guard.0.get(&uid).is_some_and(|entry| entry.at.elapsed() < self.horizon && entry.made.contains(&version))
    }

    /// The freshest version known of `cached`: this process's own last
    /// write while the cache still shows a version it wrote over.
    pub fn freshest(&self, cached: Arc<K>) -> Arc<K> {
        let (Some(uid), Some(version)) = (cached.uid(), cached.resource_version()) else { return cached };
        let mut guard = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let map = &mut guard.0;
        match map.get(&uid) {
            Some(entry) if entry.at.elapsed() < self.horizon && entry.superseded.contains(&version) => {
                Arc::clone(&entry.latest)
            }
            Some(_) => {
                map.remove(&uid);
                cached
            }
            None => cached,
        }
    }
}

#[cfg(test)]
mod tests {
    use cnpool_api::CNClaim;

    use super::*;

    fn claim(version: &str, pod: &str) -> CNClaim {
        let mut claim = CNClaim::new("tenant", Default::default());
        claim.metadata.uid = Some("uid-1".into());
        claim.metadata.resource_version = Some(version.into());
        claim.spec.pod_name = pod.into();
        claim
    }

    fn writes() -> OwnWrites<CNClaim> {
        OwnWrites::new(Duration::from_secs(30))
    }

    #[test]
    fn a_cache_behind_the_own_write_reads_the_write() {
        let writes = writes();
        writes.wrote(Some("10"), claim("11", "mo-1"));
        let seen = writes.freshest(Arc::new(claim("10", "")));
        assert_eq!(seen.resource_version().as_deref(), Some("11"));
        assert_eq!(seen.spec.pod_name, "mo-1");
    }

    #[test]
    fn a_cache_behind_two_own_writes_reads_the_last() {
        let writes = writes();
        writes.wrote(Some("10"), claim("11", "mo-1"));
        writes.wrote(Some("11"), claim("12", "mo-2"));
        for behind in ["10", "11"] {
            assert_eq!(writes.freshest(Arc::new(claim(behind, ""))).spec.pod_name, "mo-2");
        }
    }

    #[test]
    fn a_cache_that_caught_up_or_shows_another_writer_is_taken_as_it_is() {
        for shown in ["11", "15"] {
            let writes = writes();
            writes.wrote(Some("10"), claim("11", "mo-1"));
            assert_eq!(writes.freshest(Arc::new(claim(shown, "other"))).spec.pod_name, "other");
            // Forgotten: a later stale view is not corrected any more.
            assert_eq!(writes.freshest(Arc::new(claim("10", "old"))).spec.pod_name, "old");
        }
    }

    #[test]
    fn a_write_over_someone_elses_version_forgets_the_older_ones() {
        let writes = writes();
        writes.wrote(Some("10"), claim("11", "mo-1"));
        // Someone wrote 12 over 11; this process then wrote 13 over 12.
        writes.wrote(Some("12"), claim("13", "mo-3"));
        assert_eq!(writes.freshest(Arc::new(claim("12", ""))).spec.pod_name, "mo-3");
        assert_eq!(writes.freshest(Arc::new(claim("10", "old"))).spec.pod_name, "old");
    }

    #[test]
    fn the_versions_this_process_made_are_its_own_and_no_other() {
        let writes = writes();
        writes.wrote(Some("10"), claim("11", "mo-1"));
        writes.wrote(Some("11"), claim("12", "mo-2"));
        assert!(writes.made(&claim("11", "mo-1")) && writes.made(&claim("12", "mo-2")));
        assert!(!writes.made(&claim("10", "")), "the version first read is someone else's");
        assert!(!writes.made(&claim("13", "other")));
        // Someone wrote 13; this process then wrote 14 over it.
        writes.wrote(Some("13"), claim("14", "mo-4"));
        assert!(writes.made(&claim("14", "mo-4")));
        assert!(!writes.made(&claim("12", "mo-2")), "a chain another writer broke is forgotten");
    }

    #[tokio::test(start_paused = true)]
    async fn writes_older_than_the_horizon_are_not_applied() {
        let writes = writes();
        writes.wrote(Some("10"), claim("11", "mo-1"));
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(!writes.made(&claim("11", "mo-1")));
        assert_eq!(writes.freshest(Arc::new(claim("10", "old"))).spec.pod_name, "old");
    }
}
