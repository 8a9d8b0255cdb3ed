//! Growing requeue delays per object, one series per reason to wait.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::Config;
use crate::key::{Key, Kind};

/// Which delay series a requeue draws from. They grow apart: a write
/// refused right after a long wait retries at the shortest delay, and the
/// refusals of a busy moment do not stretch a later wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Series {
    Failure,
    Wait,
    Refused,
}

/// How many delays each (controller, object, series) has drawn since it
/// last settled, and where each series starts.
pub struct Backoff {
    counters: Mutex<BTreeMap<(Kind, Key, Series), u32>>,
    /// The first delay of each series, and the longest of all.
    failure: Duration,
    wait: Duration,
    refused: Duration,
    max: Duration,
}

impl Backoff {
    /// Doubling up to `requeue_max`, without jitter: failures from
    /// `requeue_min`, waits from `registry_poll` (what they wait for wakes
    /// the object when it comes, and HAKeeper shows it no sooner), refusals
    /// from `wake_interval` (a watch event wakes the object no sooner).
    pub fn new(config: &Config) -> Self {
        Self {
            counters: Mutex::default(),
            failure: config.requeue_min,
            wait: config.registry_poll,
            refused: config.wake_interval,
            max: config.requeue_max,
        }
    }

    /// The next delay after a failure of `key` (an error, a write refused
    /// for a reason no watch event follows); [`Self::settled`] resets it.
    pub fn failure(&self, kind: Kind, key: &Key) -> Duration {
        self.next_delay(kind, key, Series::Failure)
    }

    /// The next delay while `key` waits for something its watches wake it
    /// for (capacity, a store, a drain); [`Self::settled`] resets it.
    pub fn wait(&self, kind: Kind, key: &Key) -> Duration {
        self.next_delay(kind, key, Series::Wait)
    }

    /// The next delay after a write of `key` was refused because what it
    /// was decided from changed since it was read: the watch brings the newer
    /// version and wakes the object, so this is only the net for a refusal
    /// that no change follows (a server's own 409); [`Self::settled`] resets
    /// it. Retried at the failure pace instead, an object read from a lagging
    /// cache was refused again at 200 ms, 400 ms, 800 ms, … until the watch
    /// caught up: most of a minute's reconciles where two replicas contend.
    pub fn refused(&self, kind: Kind, key: &Key) -> Duration {
        self.next_delay(kind, key, Series::Refused)
    }

    fn next_delay(&self, kind: Kind, key: &Key, series: Series) -> Duration {
        let first = match series {
            Series::Failure => self.failure,
            Series::Wait => self.wait,
            Series::Refused => self.refused,
        };
        let mut counters = self.counters();
        let attempts = counters.entry((kind, key.clone(), series)).or_insert(0);
        let delay = first.saturating_mul(1 << (*attempts).min(16));
        *attempts += 1;
        delay.min(self.max)
    }

    /// Forgets `key`'s delays: it made progress.
    pub fn settled(&self, kind: Kind, key: &Key) {
        let mut counters = self.counters();
        for series in [Series::Failure, Series::Wait, Series::Refused] {
            counters.remove(&(kind, key.clone(), series));
        }
    }

    fn counters(&self) -> std::sync::MutexGuard<'_, BTreeMap<(Kind, Key, Series), u32>> {
        // Every critical section is one step on plain data.
        self.counters.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff() -> Backoff {
        Backoff::new(&Config {
            requeue_min: Duration::from_millis(200),
            registry_poll: Duration::from_secs(2),
            wake_interval: Duration::from_secs(1),
            requeue_max: Duration::from_secs(10),
            ..Config::default()
        })
    }

    fn key(name: &str) -> Key {
        ("ns".to_owned(), name.to_owned())
    }

    #[test]
    fn each_series_doubles_from_its_own_start_up_to_requeue_max() {
        let backoff = backoff();
        let failures: Vec<u64> = (0..8).map(|_| backoff.failure(Kind::Claim, &key("a")).as_millis() as u64).collect();
        assert_eq!(failures, [200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]);
        assert_eq!(backoff.wait(Kind::Claim, &key("a")), Duration::from_secs(2), "waits start over: another series");
        assert_eq!(backoff.wait(Kind::Claim, &key("a")), Duration::from_secs(4));
        assert_eq!(backoff.refused(Kind::Claim, &key("a")), Duration::from_secs(1));
        assert_eq!(backoff.refused(Kind::Claim, &key("a")), Duration::from_secs(2));
        assert_eq!(backoff.failure(Kind::Pool, &key("a")), Duration::from_millis(200), "another controller's own");
        assert_eq!(backoff.failure(Kind::Claim, &key("b")), Duration::from_millis(200), "another object's own");
    }

    #[test]
    fn settled_resets_every_series_of_that_object_only() {
        let backoff = backoff();
        for _ in 0..3 {
            backoff.failure(Kind::Claim, &key("a"));
            backoff.wait(Kind::Claim, &key("a"));
            backoff.refused(Kind::Claim, &key("a"));
            backoff.failure(Kind::Claim, &key("b"));
        }
        backoff.settled(Kind::Claim, &key("a"));
        assert_eq!(backoff.failure(Kind::Claim, &key("a")), Duration::from_millis(200));
        assert_eq!(backoff.wait(Kind::Claim, &key("a")), Duration::from_secs(2));
        assert_eq!(backoff.refused(Kind::Claim, &key("a")), Duration::from_secs(1));
        assert_eq!(backoff.failure(Kind::Claim, &key("b")), Duration::from_millis(1600), "b did not settle");
    }
}
