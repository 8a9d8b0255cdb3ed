//! The migrations this process has seen under way, by claim UID.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use jiff::Timestamp;

use crate::clock::Clock;
use crate::metrics::Metrics;

/// A migration as this process saw it: kept in memory only, so that after a
/// restart the propagation delay starts again (later, never earlier).
struct Migration {
    /// When this process first saw the claim migrating.
    seen: Timestamp,
    /// The target pod's UID and when its store was first seen serving.
    serving: Option<(String, Timestamp)>,
}

/// Migrations under way, by claim UID, timed by `clock` and reported to
/// `metrics` (how many are in flight, how each ended and how long it took).
pub struct Migrations {
    by_claim: Mutex<BTreeMap<String, Migration>>,
    clock: Clock,
    metrics: Arc<Metrics>,
}

impl Migrations {
    pub fn new(clock: Clock, metrics: Arc<Metrics>) -> Self {
        Self { by_claim: Mutex::default(), clock, metrics }
    }

    fn by_claim(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Migration>> {
        // Every critical section is one step on plain data.
        self.by_claim.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that the claim `claim_uid` migrates and returns since when the
    /// store of `target` (its held pod's UID) has been seen serving.
    pub fn track(&self, claim_uid: &str, target: Option<&str>) -> Option<Timestamp> {
        let mut migrations = self.by_claim();
        let now = self.clock.now();
        let migration = migrations.entry(claim_uid.to_owned()).or_insert(Migration { seen: now, serving: None });
        let since = migration.serving.as_ref().filter(|(uid, _)| Some(uid.as_str()) == target).map(|(_, at)| *at);
        self.metrics.migrations_in_flight(migrations.len());
        since
    }

    /// Notes that the store of `target` serves the migrating claim now.
    pub fn target_serving(&self, claim_uid: &str, target: &str) {
        let now = self.clock.now();
        let mut migrations = self.by_claim();
        let migration = migrations.entry(claim_uid.to_owned()).or_insert(Migration { seen: now, serving: None });
        migration.serving = Some((target.to_owned(), now));
    }

    /// Forgets the claim's migration: `outcome` is `Completed`, `Refused`, `TargetLost` or `Lost`,
    /// or `None` when the claim went away mid-migration.
    pub fn end(&self, claim_uid: &str, outcome: Option<&'static str>) {
        let mut migrations = self.by_claim();
        let ended = migrations.remove(claim_uid);
        self.metrics.migrations_in_flight(migrations.len());
        if let (Some(migration), Some(outcome)) = (ended, outcome) {
            let took = self.clock.now().duration_since(migration.seen).as_secs_f64().max(0.0);
            self.metrics.migration_ended(outcome, took);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use jiff::SignedDuration;

    use super::*;

    /// Migrations on a clock that reads `seconds`.
    fn migrations(seconds: &Arc<AtomicI64>) -> Migrations {
        let seconds = Arc::clone(seconds);
        let clock =
            Clock::new(move || Timestamp::UNIX_EPOCH + SignedDuration::from_secs(seconds.load(Ordering::SeqCst)));
        Migrations::new(clock, Arc::default())
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_secs(seconds)
    }

    #[test]
    fn a_target_serves_since_it_was_first_noted_serving_and_only_that_target() {
        let seconds = Arc::new(AtomicI64::new(100));
        let migrations = migrations(&seconds);
        assert_eq!(migrations.track("claim-a", Some("pod-t")), None, "not seen serving yet");
        seconds.store(110, Ordering::SeqCst);
        migrations.target_serving("claim-a", "pod-t");
        seconds.store(130, Ordering::SeqCst);
        assert_eq!(migrations.track("claim-a", Some("pod-t")), Some(at(110)));
        assert_eq!(migrations.track("claim-a", Some("pod-u")), None, "another target has not served");
        assert_eq!(migrations.track("claim-b", Some("pod-t")), None, "keyed by the claim's UID");
    }

    #[test]
    fn an_ended_migration_starts_over_when_seen_again() {
        let seconds = Arc::new(AtomicI64::new(100));
        let migrations = migrations(&seconds);
        migrations.target_serving("claim-a", "pod-t");
        migrations.end("claim-a", Some("Completed"));
        assert_eq!(migrations.track("claim-a", Some("pod-t")), None);
        migrations.end("claim-a", None);
        migrations.end("claim-gone", None);
    }
}
