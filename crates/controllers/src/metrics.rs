//! The operator's Prometheus metrics, and a client layer that counts every
//! Kubernetes API request by verb, resource and answer.
//!
//! What an operator team watches:
//! - `cnpool_reconciles_total{controller}` and
//!   `cnpool_reconcile_errors_total{controller,error}`;
//! - `cnpool_api_requests_total{verb,resource,code}` and
//!   `cnpool_api_conflicts_total{resource}` — a failed guard (409, or 422 for
//!   a JSON patch whose `test` failed) is a normal outcome, counted here and
//!   never logged as an error;
//! - `cnpool_claim_bind_seconds`, from a claim's creation to Bound;
//! - `cnpool_claims_lost_total{reason}`;
//! - `cnpool_pool_pods{namespace,pool,phase}`;
//! - `cnpool_leader`, 1 while this instance holds the leader lease.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::task::{Context as TaskContext, Poll};

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
    api_requests: Family<RequestLabels, Counter>,
    api_conflicts: Family<ResourceLabels, Counter>,
    claim_bind_seconds: Histogram,
    claims_lost: Family<ReasonLabels, Counter>,
    pool_pods: Family<PoolPhaseLabels, Gauge<i64, AtomicI64>>,
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
            api_requests: Family::default(),
            api_conflicts: Family::default(),
            claim_bind_seconds: Histogram::new(bind_buckets),
            claims_lost: Family::default(),
            pool_pods: Family::default(),
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

    fn api_answered(&self, verb: &'static str, resource: String, status: u16) {
        let write = !matches!(verb, "get" | "list" | "watch");
        if write && matches!(status, 409 | 422) {
            self.api_conflicts.get_or_create(&ResourceLabels { resource: resource.clone() }).inc();
        }
        self.api_requests.get_or_create(&RequestLabels { verb, resource, code: status.to_string() }).inc();
    }
}

/// The verb and resource (`pods`, `cnclaims/status`, ...) of an API request
/// path, as the API server's own metrics name them.
fn verb_and_resource(method: &http::Method, path: &str, query: Option<&str>) -> (&'static str, String) {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/GROUP/VERSION/...
    let rest = match segments.first() {
        Some(&"api") => segments.get(2..),
        Some(&"apis") => segments.get(3..),
        _ => None,
    }
    .unwrap_or_default();
    let rest = match rest {
        ["namespaces", _, resource, tail @ ..] => std::iter::once(*resource).chain(tail.iter().copied()).collect(),
        other => other.to_vec(),
    };
    let named = rest.len() >= 2;
    let resource = match rest.as_slice() {
        [] => "other".to_owned(),
        [resource] | [resource, _] => (*resource).to_owned(),
        [resource, _, subresource, ..] => format!("{resource}/{subresource}"),
    };
    let watching = query.is_some_and(|query| query.split('&').any(|pair| pair == "watch=true" || pair == "watch=1"));
    let verb = match *method {
        http::Method::GET if watching => "watch",
        http::Method::GET if named => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "other",
    };
    (verb, resource)
}

/// A tower layer for kube's client that counts each request in
/// [`Metrics`]: `ClientBuilder::with_layer(&CountRequests::layer(metrics))`.
#[derive(Clone, Debug)]
pub struct CountRequestsLayer {
    metrics: Arc<Metrics>,
}

impl CountRequestsLayer {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> tower::Layer<S> for CountRequestsLayer {
    type Service = CountRequests<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountRequests { inner, metrics: Arc::clone(&self.metrics) }
    }
}

/// See [`CountRequestsLayer`].
#[derive(Clone, Debug)]
pub struct CountRequests<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B, R> tower::Service<http::Request<B>> for CountRequests<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let (verb, resource) = verb_and_resource(request.method(), request.uri().path(), request.uri().query());
        let metrics = Arc::clone(&self.metrics);
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            if let Ok(response) = &answer {
                metrics.api_answered(verb, resource, response.status().as_u16());
            }
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(method: http::Method, uri: &str) -> (&'static str, String) {
        let uri: http::Uri = uri.parse().unwrap();
        verb_and_resource(&method, uri.path(), uri.query())
    }

    #[test]
    fn requests_are_named_as_the_api_server_names_them() {
        use http::Method;
        assert_eq!(classify(Method::GET, "/api/v1/pods?labelSelector=x"), ("list", "pods".into()));
        assert_eq!(classify(Method::GET, "/api/v1/pods?watch=true&resourceVersion=5"), ("watch", "pods".into()));
        assert_eq!(classify(Method::GET, "/api/v1/namespaces/ns/pods/p"), ("get", "pods".into()));
        assert_eq!(classify(Method::PATCH, "/api/v1/namespaces/ns/pods/p"), ("patch", "pods".into()));
        assert_eq!(
            classify(Method::PUT, "/apis/core.matrixorigin.io/v1alpha1/namespaces/ns/cnclaims/c/status"),
            ("update", "cnclaims/status".into())
        );
        assert_eq!(classify(Method::POST, "/apis/events.k8s.io/v1/namespaces/ns/events"), ("create", "events".into()));
        assert_eq!(classify(Method::DELETE, "/api/v1/namespaces/ns/pods/p"), ("delete", "pods".into()));
        assert_eq!(classify(Method::GET, "/apis/core.matrixorigin.io/v1alpha1/cnpools"), ("list", "cnpools".into()));
    }

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
