#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! What `/healthz` answers (`Telemetry::health`) for the controllers running
//! on the embedded API server with a short stall timeout: a quiet operator,
//! which has nothing to do, stays healthy for several stall timeouts; one
//! whose CNPool watch hangs is reported wedged, naming that controller.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use cnpool_controllers::{Config, CountRequestsLayer, Telemetry};
use cnpool_registry::memory::MemoryRegistry;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use tokio::time::Instant;

const STALL: Duration = Duration::from_secs(3);

/// A client layer that, once `hang` is set, never answers a request to watch
/// CNPools: what an API server or a connection that hangs does.
#[derive(Clone)]
struct HangPoolWatches {
    hang: Arc<AtomicBool>,
}

impl<S> tower::Layer<S> for HangPoolWatches {
    type Service = Hanging<S>;

    fn layer(&self, inner: S) -> Hanging<S> {
        Hanging { inner, hang: Arc::clone(&self.hang) }
    }
}

#[derive(Clone)]
struct Hanging<S> {
    inner: S,
    hang: Arc<AtomicBool>,
}

impl<S, B> tower::Service<http::Request<B>> for Hanging<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let uri = request.uri();
        let pool_watch =
            uri.path().ends_with("/cnpools") && uri.query().is_some_and(|query| query.contains("watch=true"));
        if pool_watch && self.hang.load(Ordering::Relaxed) {
            return Box::pin(std::future::pending());
        }
        Box::pin(self.inner.call(request))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_operator_stays_healthy_and_a_hung_watch_is_reported_wedged() {
    let server = cnpool_apiserver::ApiServer::default();
    let crds: Api<CustomResourceDefinition> = Api::all(server.client());
    for crd in cnpool_api::crd::crds() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let telemetry = Telemetry::default().with_stall_timeout(STALL);
    let hang = Arc::new(AtomicBool::new(false));
    let service = tower::ServiceBuilder::new()
        .layer(CountRequestsLayer::new(&telemetry))
        .layer(HangPoolWatches { hang: Arc::clone(&hang) })
        .service(server.router());
    let client = kube::Client::new(service, "default");
    let config = Config { namespace: Some("default".into()), ..Config::default() };
    tokio::spawn(cnpool_controllers::run_observed(
        client,
        cnpool_controllers::Registries::shared("hakeeper.test:32001", MemoryRegistry::new()),
        config,
        telemetry.clone(),
        std::future::pending(),
    ));
    let start = Instant::now();
    while !telemetry.ready() {
        assert!(start.elapsed() < Duration::from_secs(10), "the caches were not listed within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Nothing to do, no event on any watch: only the renewed watches show
    // the controllers alive, for well over two stall timeouts.
    let quiet = Instant::now();
    while quiet.elapsed() < STALL * 2 + Duration::from_secs(1) {
        assert_eq!(telemetry.health.check(), Ok(()), "after {:?} of quiet", quiet.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The pool watch ends at its timeout (a second) and its renewal hangs.
    hang.store(true, Ordering::Relaxed);
    let wedged_at = Instant::now();
    let wedged = loop {
        if let Err(wedged) = telemetry.health.check() {
            break wedged;
        }
        assert!(wedged_at.elapsed() < STALL * 3, "still healthy {:?} after the pool watch hung", wedged_at.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(wedged_at.elapsed() >= STALL - Duration::from_secs(1), "reported wedged too soon: {wedged}");
    assert!(wedged.contains("CNPool controller") && wedged.contains("cnpools"), "{wedged}");
    assert_eq!(wedged.lines().count(), 1, "only the pool controller is wedged: {wedged}");
}
