//! The operator's Prometheus metrics, and a client layer that counts every
//! Kubernetes API request by verb, resource and answer.
//!
//! What an operator team watches (docs/operator.md has the full table):
//! - `cnpool_reconciles_total{controller}`,
//!   `cnpool_reconcile_errors_total{controller,error}` and the histogram
//!   `cnpool_reconcile_duration_seconds{controller}`;
//! - `cnpool_queue_depth{controller}`: objects a change has woken and handed
//!   to the controller runtime whose reconcile has not started yet (see
//!   the `health` module; the runtime's own requeues, which wait for their
//!   time rather than for a worker, are not counted);
//! - `cnpool_api_requests_total{verb,resource,code}` and
//!   `cnpool_api_conflicts_total{resource}` — a failed guard (409, or 422 for
//!   a JSON patch whose `test` failed) is a normal outcome, counted here and
//!   never logged as an error;
//! - `cnpool_claim_bind_seconds`, from a claim's creation to Bound;
//! - `cnpool_claims_lost_total{reason}`;
//! - `cnpool_pool_pods{namespace,pool,phase}` and
//!   `cnpool_pool_pending_claims{namespace,pool}`, from each pool's status;
//! - `cnpool_migrations_in_flight`, `cnpool_migrations_total{outcome}`,
//!   `cnpool_migration_seconds`;
//! - `cnpool_leader`, 1 while this instance holds the leader lease;
//! - `cnpool_build_info{version}`, always 1.
//!
//! HAKeeper and the CN/TN services count their own calls
//! (`cnpool_morpc_requests_total`, `cnpool_morpc_request_errors_total`, in
//! `cnpool_morpc`), and the binary adds the `process_*` metrics.

use std::sync::atomic::AtomicI64;

use cnpool_api::CNPoolStatus;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    controller: &'static str,
    error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: &'static str,
    resource: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    namespace: String,
    pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolPhaseLabels {
    namespace: String,
    pool: String,
    phase: &'static str,
}

/// The metrics; [`Metrics::register`] adds them to a registry to be served.
/// `Default` gives unregistered ones, for runs nobody scrapes.
#[derive(Debug)]
pub struct Metrics {
    reconciles: Family<ControllerLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: Family<ControllerLabels, Histogram>,
    queue_depth: Family<ControllerLabels, Gauge<i64, AtomicI64>>,
    api_requests: Family<RequestLabels, Counter>,
    api_conflicts: Family<ResourceLabels, Counter>,
    claim_bind_seconds: Histogram,
    claims_lost: Family<ReasonLabels, Counter>,
    pool_pods: Family<PoolPhaseLabels, Gauge<i64, AtomicI64>>,
    pool_pending_claims: Family<PoolLabels, Gauge<i64, AtomicI64>>,
    leader: Gauge<i64, AtomicI64>,
    migrations_in_flight: Gauge<i64, AtomicI64>,
    migrations: Family<OutcomeLabels, Counter>,
    migration_seconds: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        // From 50 ms (a warm pod at hand) to ~7 min (a cold start behind a
        // full pool).
        let bind_buckets = prometheus_client::metrics::histogram::exponential_buckets(0.05, 2.0, 14);
        Self {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(|| {
                // From 1 ms (a settled object) to ~30 s (HAKeeper calls at
                // their deadline).
                Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 16))
            }),
            queue_depth: Family::default(),
            api_requests: Family::default(),
            api_conflicts: Family::default(),
            claim_bind_seconds: Histogram::new(bind_buckets),
            claims_lost: Family::default(),
            pool_pods: Family::default(),
            pool_pending_claims: Family::default(),
            leader: Gauge::default(),
            migrations_in_flight: Gauge::default(),
            migrations: Family::default(),
            // From 1 s (an idle source) to ~9 h (a drain that runs to its timeout).
            migration_seconds: Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(1.0, 2.0, 16)),
        }
    }
}

impl Metrics {
    /// New metrics, registered under the `cnpool_` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        let registry = registry.sub_registry_with_prefix("cnpool");
        registry.register("reconciles", "Reconciles finished, per controller", metrics.reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, per controller and kind of error",
            metrics.reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Seconds each reconcile took, per controller",
            metrics.reconcile_duration.clone(),
        );
        registry.register(
            "queue_depth",
            "Objects woken by a change and handed to the controller runtime whose reconcile has not started yet, \
             per controller (the runtime's timed requeues are not counted)",
            metrics.queue_depth.clone(),
        );
        registry.register(
            "api_requests",
            "Kubernetes API requests, per verb, resource and HTTP status",
            metrics.api_requests.clone(),
        );
        registry.register(
            "api_conflicts",
            "Writes refused because their guard no longer held (409, or 422 for a failed JSON-patch test)",
            metrics.api_conflicts.clone(),
        );
        registry.register(
            "claim_bind_seconds",
            "Seconds from a claim's creation to its first Bound",
            metrics.claim_bind_seconds.clone(),
        );
        registry.register("claims_lost", "Claims that lost their pod, per reason", metrics.claims_lost.clone());
        registry.register("pool_pods", "Pods of each pool, per phase", metrics.pool_pods.clone());
        registry.register(
            "pool_pending_claims",
            "Claims waiting for a pod of each pool, as its status last counted them",
            metrics.pool_pending_claims.clone(),
        );
        let build_info: Family<BuildLabels, Gauge<i64, AtomicI64>> = Family::default();
        build_info.get_or_create(&BuildLabels { version: env!("CARGO_PKG_VERSION") }).set(1);
        registry.register("build_info", "Always 1; the labels say which cnpool this is", build_info);
        registry.register("leader", "1 while this instance holds the leader lease", metrics.leader.clone());
        registry.register(
            "migrations_in_flight",
            "Claims migrating (spec.sourcePod set) as this instance last saw them",
            metrics.migrations_in_flight.clone(),
        );
        registry.register(
            "migrations",
            "Migrations ended, per outcome (Completed, Refused, TargetLost, Lost)",
            metrics.migrations.clone(),
        );
        registry.register(
            "migration_seconds",
            "Seconds from a migration first seen to its source released and drained",
            metrics.migration_seconds.clone(),
        );
        metrics
    }

    pub(crate) fn reconciled(&self, controller: &'static str, error: Option<&'static str>) {
        self.reconciles.get_or_create(&ControllerLabels { controller }).inc();
        if let Some(error) = error {
            self.reconcile_errors.get_or_create(&ErrorLabels { controller, error }).inc();
        }
    }

    /// A reconcile of `controller` took `seconds`.
    pub(crate) fn reconcile_took(&self, controller: &'static str, seconds: f64) {
        self.reconcile_duration.get_or_create(&ControllerLabels { controller }).observe(seconds);
    }

    /// `change` more (or, negative, fewer) objects of `controller` wait for
    /// their reconcile to start. The sum over every namespace's controllers.
    pub(crate) fn queue_changed(&self, controller: &'static str, change: i64) {
        self.queue_depth.get_or_create(&ControllerLabels { controller }).inc_by(change);
    }

    pub(crate) fn claim_bound_after(&self, seconds: f64) {
        self.claim_bind_seconds.observe(seconds);
    }

    pub(crate) fn claim_lost(&self, reason: &'static str) {
        self.claims_lost.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub(crate) fn pool_observed(&self, namespace: &str, pool: &str, status: Option<&CNPoolStatus>) {
        for (phase, count) in [
            ("Idle", status.map(|s| s.idle)),
            ("Bound", status.map(|s| s.bound)),
            ("Draining", status.map(|s| s.draining)),
            ("Terminating", status.map(|s| s.terminating)),
        ] {
            let labels = PoolPhaseLabels { namespace: namespace.to_owned(), pool: pool.to_owned(), phase };
            match count {
                Some(count) => {
                    self.pool_pods.get_or_create(&labels).set(i64::from(count));
                }
                // A pool that is gone leaves no stale series behind.
                None => {
                    self.pool_pods.remove(&labels);
                }
            }
        }
        let labels = PoolLabels { namespace: namespace.to_owned(), pool: pool.to_owned() };
        match status {
            Some(status) => {
                self.pool_pending_claims.get_or_create(&labels).set(i64::from(status.pending_claims));
            }
            None => {
                self.pool_pending_claims.remove(&labels);
            }
        }
    }

    pub(crate) fn migrations_in_flight(&self, count: usize) {
        self.migrations_in_flight.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    pub(crate) fn migration_ended(&self, outcome: &'static str, seconds: f64) {
        self.migrations.get_or_create(&OutcomeLabels { outcome }).inc();
        if outcome == "Completed" {
            self.migration_seconds.observe(seconds);
        }
    }

    /// Whether this instance leads now.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    pub(crate) fn api_answered(&self, verb: &'static str, resource: String, status: u16) {
        let write = !matches!(verb, "get" | "list" | "watch");
        if write && matches!(status, 409 | 422) {
            self.api_conflicts.get_or_create(&ResourceLabels { resource: resource.clone() }).inc();
        }
        self.api_requests.get_or_create(&RequestLabels { verb, resource, code: status.to_string() }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_refused_writes_count_as_conflicts() {
        let metrics = Metrics::default();
        metrics.api_answered("patch", "pods".into(), 422);
        metrics.api_answered("update", "cnclaims/status".into(), 409);
        metrics.api_answered("get", "pods".into(), 409);
        metrics.api_answered("patch", "pods".into(), 200);
        let conflicts =
            |resource: &str| metrics.api_conflicts.get_or_create(&ResourceLabels { resource: resource.into() }).get();
        assert_eq!(conflicts("pods"), 1);
        assert_eq!(conflicts("cnclaims/status"), 1);
    }

    #[test]
    fn a_deleted_pool_leaves_no_series() {
        let metrics = Metrics::default();
        let status = CNPoolStatus { idle: 2, bound: 3, ..Default::default() };
        metrics.pool_observed("ns", "mo", Some(&status));
        let idle = PoolPhaseLabels { namespace: "ns".into(), pool: "mo".into(), phase: "Idle" };
        assert_eq!(metrics.pool_pods.get_or_create(&idle).get(), 2);
        metrics.pool_observed("ns", "mo", None);
        let mut registry = Registry::default();
        registry.register("pool_pods", "", metrics.pool_pods.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(!text.contains("pool=\"mo\""), "{text}");
    }
}
