//! B1 on the operator's own runtime: the kube-runtime controllers as
//! `cnpool dev` runs them, on this process's multi-threaded tokio runtime,
//! against the embedded API server called in-process, beside the simulated
//! node side (kubelet, CNs, an in-memory HAKeeper). Its wall-clock binds/s
//! is what the operator does with this machine's cores while the server,
//! the node side and the client creating the claims share them; the
//! simulator's figure (one thread, paused clock, the checker on) is not.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use cnpool_controllers::{CountRequestsLayer, Metrics};
use cnpool_registry::memory::MemoryRegistry;
use tokio::sync::watch;

use super::cluster::{self, PoolCount};

/// The namespace the case runs in.
const NAMESPACE: &str = "default";

/// What one burst on the runtime measured.
pub struct RuntimeBurst {
    pub claims: usize,
    /// From the first create sent to the last claim seen Bound.
    pub elapsed: Duration,
    /// Each claim's, from its create sent to the watch event showing it Bound.
    pub latencies: Vec<Duration>,
    /// The operator's requests and writes in the burst (Events included).
    pub requests: f64,
    pub writes: f64,
    pub event_writes: f64,
    /// CPU time the whole process spent in the burst: operator, server,
    /// node side and the claims' creation.
    pub cpu: Duration,
    pub workers: u16,
}

impl RuntimeBurst {
    pub fn binds_per_second(&self) -> f64 {
        self.claims as f64 / self.elapsed.as_secs_f64()
    }

    pub fn per_bind(&self, count: f64) -> f64 {
        count / self.claims as f64
    }

    /// The `q` quantile of the claims' created → Bound times, in seconds.
    pub fn latency(&self, q: f64) -> f64 {
        cluster::quantile(&self.latencies, q)
    }
}

/// `claims` warm Idle pods, then `claims` claims created at once; every
/// part stopped when the case ends.
pub async fn burst(claims: usize) -> anyhow::Result<RuntimeBurst> {
    let (stop, _) = watch::channel(false);
    let stopped = || {
        let mut receiver = stop.subscribe();
        async move {
            let _ = receiver.wait_for(|stopped| *stopped).await;
        }
    };
    let measured = measure(claims, stopped).await;
    let _ = stop.send(true);
    // The simulator's runs that follow can take many minutes at 10,000:
    // this much is known already (on stderr, beside the table on stdout).
    if let Ok(run) = &measured {
        eprintln!(
            "runtime burst of {claims}: {:.0} binds/s, {:.2} ms CPU/bind, p99 {:.2} s",
            run.binds_per_second(),
            run.per_bind(run.cpu.as_secs_f64() * 1_000.0),
            run.latency(0.99),
        );
    }
    measured
}

async fn measure<S, F>(claims: usize, stopped: S) -> anyhow::Result<RuntimeBurst>
where
    S: Fn() -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let server = cnpool_apiserver::ApiServer::default();
    let client = server.client();
    crate::dev::install_crds(client.clone()).await?;
    let registry = MemoryRegistry::new();
    let world = cnpool_world::World::new(client.clone(), registry.clone(), cnpool_world::WorldConfig::default());
    tokio::spawn(world.run(stopped()));

    let mut metrics_registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(Metrics::register(&mut metrics_registry));
    let telemetry = cnpool_controllers::Telemetry::new(metrics);
    let operator_client =
        kube::Client::new(tower::Layer::layer(&CountRequestsLayer::new(&telemetry), server.router()), NAMESPACE);
    let config = cnpool_controllers::Config { namespace: Some(NAMESPACE.to_owned()), ..Default::default() };
    let workers = config.workers;
    let registries = cnpool_controllers::Registries::shared("bench-hakeeper:32001", registry);
    tokio::spawn(cnpool_controllers::run_observed(operator_client, registries, config, telemetry, stopped()));

    cluster::create_pool(&client, NAMESPACE, claims).await?;
    cluster::wait_for_pool(&client, NAMESPACE, None, PoolCount::Idle, claims, Duration::from_secs(300)).await?;
    let before = fill_settled(&metrics_registry).await?;
    let cpu_before = process_cpu()?;
    let burst = cluster::burst(&client, NAMESPACE, claims, claims).await?;
    let cpu = process_cpu()?.saturating_sub(cpu_before);
    // The last binds' trailing writes (the pool's status) belong to the burst.
    cluster::wait_for_pool(&client, NAMESPACE, None, PoolCount::Bound, claims, Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = scrape(&metrics_registry)?;
    let requests = cluster::OPERATOR_REQUESTS;
    let event_writes = |metrics: &cluster::Metrics| {
        metrics
            .write_samples(requests)
            .filter(|(labels, _)| labels.get("resource") == Some("events"))
            .map(|(_, n)| n)
            .sum::<f64>()
    };
    Ok(RuntimeBurst {
        claims,
        elapsed: burst.elapsed,
        latencies: burst.latencies,
        requests: after.total(requests) - before.total(requests),
        writes: after.writes(requests) - before.writes(requests),
        event_writes: event_writes(&after) - event_writes(&before),
        cpu,
        workers,
    })
}

/// How long the operator must write nothing for the fill to be over.
const QUIET: Duration = Duration::from_secs(1);

/// The operator's metrics once the fill's tail (the pool's status, its
/// Events) is written: Idle pods are counted before those writes land, and
/// a burst started under them measured the fill too.
async fn fill_settled(registry: &prometheus_client::registry::Registry) -> anyhow::Result<cluster::Metrics> {
    let started = std::time::Instant::now();
    let mut last = scrape(registry)?;
    loop {
        tokio::time::sleep(QUIET).await;
        let now = scrape(registry)?;
        let written = now.writes(cluster::OPERATOR_REQUESTS) - last.writes(cluster::OPERATOR_REQUESTS);
        if written == 0.0 {
            return Ok(now);
        }
        if started.elapsed() > Duration::from_secs(60) {
            anyhow::bail!("the operator still wrote after the pool's fill, {written} writes in the last {QUIET:?}");
        }
        last = now;
    }
}

fn scrape(registry: &prometheus_client::registry::Registry) -> anyhow::Result<cluster::Metrics> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).context("encoding the operator's metrics")?;
    Ok(cluster::Metrics(text))
}

/// CPU time (user and system) this process has used so far.
fn process_cpu() -> anyhow::Result<Duration> {
    let seconds = crate::process::cpu_seconds().context("reading /proc/self/stat")?;
    Ok(Duration::from_secs_f64(seconds))
}
