//! What this process did so lately that its caches may not show it yet:
//! the pods it acquired (by pod UID), the pod each claim acquired (by claim
//! UID), and the rollouts it started (by pool). Kept in memory only.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::key::Key;

/// How long a pod just acquired is taken as such while the cache may lag.
pub(crate) const ACQUIRED_LATELY: Duration = Duration::from_secs(5);

/// How long a rollout just started is taken as under way while the cache
/// may lag.
const ROLLED_LATELY: Duration = Duration::from_secs(5);

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section is one step on plain data.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Notes by key, each forgotten `horizon` after it was made. The oldest
/// are dropped as new ones come, so a note costs the same beside ten
/// thousand others as beside none: sweeping the whole map at every note
/// made a burst of acquires quadratic in its size.
struct Notes<V> {
    by_key: BTreeMap<String, (V, Instant)>,
    /// Keys in the order they were noted, with when; a key noted again is
    /// in it twice, and only its latest note counts.
    in_order: VecDeque<(Instant, String)>,
    horizon: Duration,
}

impl<V> Notes<V> {
    fn new(horizon: Duration) -> Self {
        Self { by_key: BTreeMap::new(), in_order: VecDeque::new(), horizon }
    }

    fn note(&mut self, key: &str, value: V) {
        let now = Instant::now();
        while let Some((at, key)) = self.in_order.pop_front_if(|(at, _)| now.duration_since(*at) >= self.horizon) {
            if self.by_key.get(&key).is_some_and(|(_, noted)| *noted == at) {
                self.by_key.remove(&key);
            }
        }
        self.in_order.push_back((now, key.to_owned()));
        self.by_key.insert(key.to_owned(), (value, now));
    }

    fn forget(&mut self, key: &str) {
        self.by_key.remove(key);
    }

    /// What was noted of `key` less than `within` ago.
    fn within(&self, key: &str, within: Duration) -> Option<&V> {
        self.by_key.get(key).filter(|(_, at)| at.elapsed() < within).map(|(value, _)| value)
    }
}

/// Pods this process acquired lately, by pod UID: other claims skip them
/// while the cache still shows them Idle. Notes older than `horizon` are
/// forgotten.
pub struct PodsTakenLately(Mutex<Notes<()>>);

impl PodsTakenLately {
    pub fn new(horizon: Duration) -> Self {
        Self(Mutex::new(Notes::new(horizon)))
    }

    /// Notes the pod `pod_uid` as acquired now.
    pub fn note(&self, pod_uid: &str) {
        lock(&self.0).note(pod_uid, ());
    }

    /// Whether the pod `pod_uid` was acquired within [`ACQUIRED_LATELY`].
    pub fn contains(&self, pod_uid: &str) -> bool {
        lock(&self.0).within(pod_uid, ACQUIRED_LATELY).is_some()
    }

    /// Notes the pod `pod_uid` as acquired now, unless it already was
    /// lately: whether this caller may try to acquire it. Claims reconciled
    /// at once then try different pods instead of racing for the first Idle
    /// one, whose guarded write only one of them can win. A try that fails
    /// leaves the note, as a lost race does.
    pub fn reserve(&self, pod_uid: &str) -> bool {
        // One lock for the test and the note: two workers cannot both pass.
        let mut taken = lock(&self.0);
        if taken.within(pod_uid, ACQUIRED_LATELY).is_some() {
            return false;
        }
        taken.note(pod_uid, ());
        true
    }
}

/// Claims that acquired a pod lately, by claim UID, with the pod's UID and
/// when: until their caches show that pod, they take no other one. Notes
/// older than `horizon` are forgotten.
pub struct ClaimsTookLately(Mutex<Notes<String>>);

impl ClaimsTookLately {
    pub fn new(horizon: Duration) -> Self {
        Self(Mutex::new(Notes::new(horizon)))
    }

    /// The claim `claim_uid` acquired the pod `pod_uid` (or, with `None`,
    /// let go of what it held).
    pub fn note(&self, claim_uid: &str, pod_uid: Option<&str>) {
        let mut took = lock(&self.0);
        match pod_uid {
            Some(pod_uid) => took.note(claim_uid, pod_uid.to_owned()),
            None => took.forget(claim_uid),
        }
    }

    /// The UID of the pod the claim `claim_uid` acquired within
    /// [`ACQUIRED_LATELY`].
    pub fn pod(&self, claim_uid: &str) -> Option<String> {
        lock(&self.0).within(claim_uid, ACQUIRED_LATELY).cloned()
    }
}

/// When this process last started a rollout migration, by pool key.
#[derive(Default)]
pub struct Rollouts(Mutex<BTreeMap<Key, Instant>>);

impl Rollouts {
    /// Notes that a rollout migration of pool `namespace/pool` just started.
    pub fn started(&self, namespace: &str, pool: &str) {
        lock(&self.0).insert((namespace.to_owned(), pool.to_owned()), Instant::now());
    }

    /// Whether this process started a rollout migration in the pool so
    /// lately that the cache may not show it yet.
    pub fn lately(&self, namespace: &str, pool: &str) -> bool {
        let key = (namespace.to_owned(), pool.to_owned());
        lock(&self.0).get(&key).is_some_and(|at| at.elapsed() < ROLLED_LATELY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HORIZON: Duration = Duration::from_secs(30);

    #[tokio::test(start_paused = true)]
    async fn a_reservation_blocks_a_second_one_within_acquired_lately_and_not_after() {
        let taken = PodsTakenLately::new(HORIZON);
        assert!(taken.reserve("pod-a"));
        assert!(!taken.reserve("pod-a"), "reserved already");
        assert!(taken.contains("pod-a") && !taken.contains("pod-b"));
        assert!(taken.reserve("pod-b"), "another pod is free");
        tokio::time::advance(ACQUIRED_LATELY).await;
        assert!(!taken.contains("pod-a"));
        assert!(taken.reserve("pod-a"), "the reservation ran out");
    }

    #[tokio::test(start_paused = true)]
    async fn a_noted_pod_is_taken_lately_until_acquired_lately_is_over() {
        let taken = PodsTakenLately::new(HORIZON);
        taken.note("pod-a");
        tokio::time::advance(ACQUIRED_LATELY - Duration::from_millis(1)).await;
        assert!(taken.contains("pod-a") && !taken.reserve("pod-a"));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!taken.contains("pod-a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_claim_took_its_pod_lately_until_it_lets_go_or_acquired_lately_is_over() {
        let took = ClaimsTookLately::new(HORIZON);
        took.note("claim-a", Some("pod-a"));
        took.note("claim-b", Some("pod-b"));
        assert_eq!(took.pod("claim-a").as_deref(), Some("pod-a"), "keyed by the claim's UID");
        assert_eq!(took.pod("pod-a"), None, "not by the pod's");
        took.note("claim-b", None);
        assert_eq!(took.pod("claim-b"), None, "let go");
        tokio::time::advance(ACQUIRED_LATELY).await;
        assert_eq!(took.pod("claim-a"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn notes_past_the_horizon_are_forgotten_and_a_note_made_again_counts_from_then() {
        let mut notes = Notes::new(HORIZON);
        notes.note("pod-a", ());
        notes.note("pod-b", ());
        tokio::time::advance(HORIZON / 2).await;
        notes.note("pod-a", ());
        tokio::time::advance(HORIZON / 2).await;
        notes.note("pod-c", ());
        let kept: Vec<&str> = notes.by_key.keys().map(String::as_str).collect();
        assert_eq!(kept, ["pod-a", "pod-c"], "pod-b is past the horizon, pod-a was noted again");
        tokio::time::advance(HORIZON / 2).await;
        notes.note("pod-d", ());
        let kept: Vec<&str> = notes.by_key.keys().map(String::as_str).collect();
        assert_eq!(kept, ["pod-c", "pod-d"]);
        assert_eq!(notes.in_order.len(), 2, "the queue holds nothing forgotten");
    }

    #[tokio::test(start_paused = true)]
    async fn a_rollout_is_under_way_lately_in_its_own_pool_only() {
        let rollouts = Rollouts::default();
        rollouts.started("ns", "pool-a");
        assert!(rollouts.lately("ns", "pool-a"));
        assert!(!rollouts.lately("ns", "pool-b") && !rollouts.lately("other", "pool-a"));
        tokio::time::advance(ROLLED_LATELY).await;
        assert!(!rollouts.lately("ns", "pool-a"));
    }
}
