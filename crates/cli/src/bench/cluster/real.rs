//! B2: a burst of binds against a real kube-apiserver, the operator as its
//! own process, set against the server's raw write ceiling measured in the
//! same run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use serde_json::json;

use super::ceiling::bind_mix_ceiling;
use super::{
    Metrics, OPERATOR_REQUESTS, PoolCount, RealCluster, burst, create_pool, quantile, wait_for_pool, workers_flag,
};
use crate::bench::Table;
use crate::bench::apiserver::{create_targets, patch_targets};

#[derive(clap::Args)]
pub struct RealArgs {
    /// Kubeconfig of the cluster; its user needs cluster-admin rights (the
    /// case installs the CRDs and creates a namespace), and the operator
    /// process uses it too.
    #[arg(long, value_name = "PATH")]
    kubeconfig: PathBuf,
    /// Claims in the burst; as many warm pods wait for them.
    #[arg(long, default_value_t = 500, value_parser = crate::bench::at_least_one::<usize>)]
    claims: usize,
    /// Claims being created at once.
    #[arg(long, default_value_t = 32, value_parser = crate::bench::at_least_one::<usize>)]
    creators: usize,
    /// The operator's `--workers` (default: the operator's own default).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: Option<u16>,
    /// Concurrent writers measuring the raw write ceiling.
    #[arg(long, default_value_t = 16, value_parser = crate::bench::at_least_one::<usize>)]
    ceiling_writers: usize,
    /// Merge patches measuring the raw write ceiling.
    #[arg(long, default_value_t = 8_000, value_parser = crate::bench::at_least_one::<usize>)]
    ceiling_writes: usize,
}

impl RealArgs {
    pub fn kubeconfig(&self) -> &std::path::Path {
        &self.kubeconfig
    }
}

/// Fraction of the ceiling-bound bind rate the operator should reach.
const RATE_TARGET: f64 = 0.7;
/// Claim created → Bound, 99th percentile, seconds.
const P99_TARGET: f64 = 2.0;

pub async fn real(args: &RealArgs) -> anyhow::Result<Table> {
    let claims = args.claims;
    let RealCluster { client, namespace, logs, mut operator, node_side } =
        RealCluster::start(&args.kubeconfig, "real", args.workers).await?;

    let ceiling = write_ceiling(&client, &namespace, args.ceiling_writers, args.ceiling_writes).await?;
    create_pool(&client, &namespace, claims).await?;
    wait_for_pool(&client, &namespace, Some(&mut operator.process), PoolCount::Idle, claims, Duration::from_secs(600))
        .await?;

    let (operator_before, server_before) = (operator.metrics().await?, server_metrics(&client).await?);
    let burst = burst(&client, &namespace, claims, args.creators).await?;
    // The last binds' trailing writes (the pool's status) belong to the burst.
    wait_for_pool(&client, &namespace, Some(&mut operator.process), PoolCount::Bound, claims, Duration::from_secs(60))
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (operator_after, server_after) = (operator.metrics().await?, server_metrics(&client).await?);
    drop(operator);
    // With the operator stopped, the same requests from a plain client.
    let mix = bind_mix_ceiling(&client, &namespace, args.creators).await?;
    drop(node_side);

    let operator_writes = operator_after.writes(OPERATOR_REQUESTS) - operator_before.writes(OPERATOR_REQUESTS);
    let writes_per_bind = operator_writes / claims as f64;
    let ceiling_binds = ceiling / (writes_per_bind + 1.0);
    let binds_per_second = claims as f64 / burst.elapsed.as_secs_f64();
    let fraction = binds_per_second / ceiling_binds;
    let (p50, p99) = (quantile(&burst.latencies, 0.5), quantile(&burst.latencies, 0.99));
    let server_writes = server_after.writes(SERVER_REQUESTS) - server_before.writes(SERVER_REQUESTS);

    let mut table = Table::new(
        "real",
        "B2: burst bind against a real kube-apiserver, the operator as its own process",
        &["measure", "value", "target", "met"],
    );
    let row = |table: &mut Table, measure: &str, value: f64, target: Option<(String, bool)>| {
        if let Some((target, met)) = &target {
            table.check(measure, json!(round(value)), target.clone(), *met);
        }
        let (target, met) = target.map_or((json!(null), json!(null)), |(target, met)| (json!(target), json!(met)));
        table.row(vec![json!(measure), json!(round(value)), target, met]);
    };
    row(&mut table, "claims (and warm pods)", claims as f64, None);
    row(&mut table, "raw write ceiling, writes/s", ceiling, None);
    row(&mut table, "operator writes per bind", writes_per_bind, None);
    row(&mut table, "ceiling ÷ (writes per bind + 1), binds/s", ceiling_binds, None);
    row(&mut table, "binds/s", binds_per_second, None);
    let rate_target = (format!("≥ {RATE_TARGET}"), fraction >= RATE_TARGET);
    row(&mut table, "binds/s ÷ (ceiling ÷ (writes per bind + 1))", fraction, Some(rate_target));
    row(&mut table, "bind-mix ceiling (a plain client, a bind's requests), binds/s", mix.binds_per_second, None);
    row(&mut table, "binds/s ÷ bind-mix ceiling", binds_per_second / mix.binds_per_second, None);
    row(&mut table, "created → Bound p50, s", p50, None);
    row(&mut table, "created → Bound p99, s", p99, Some((format!("≤ {P99_TARGET}"), p99 <= P99_TARGET)));
    row(&mut table, "server writes/s in the burst (all clients)", server_writes / burst.elapsed.as_secs_f64(), None);
    table.note(format!(
        "burst: {claims} claims created {} at a time, all Bound {:.2}s after the first create; operator {}",
        args.creators,
        burst.elapsed.as_secs_f64(),
        workers_flag(args.workers)
    ));
    table.note(format!(
        "ceiling: {} merge patches of ConfigMaps by {} concurrent writers before the pool existed",
        args.ceiling_writes, args.ceiling_writers
    ));
    table.note(format!("operator writes in the burst: {}", write_breakdown(&operator_before, &operator_after)));
    table.note(format!(
        "bind-mix ceiling: after the burst, the operator stopped, {} sequences {} at a time of a claim create, \
         its GET, a guarded JSON patch of a pod's labels, the claim's update (recorded pod, spec.podName, \
         finalizer), its status update (a Bound status) and an Event; the operator's watches are gone meanwhile, \
         so the server does a little less per bind than in the burst",
        mix.sequences, args.creators
    ));
    table.note(format!(
        "namespace {namespace} is left behind (its pods and claims hold finalizers); logs in {}",
        logs.display()
    ));
    table.note("the operator uses the kubeconfig's user (cluster-admin), not a ServiceAccount");
    Ok(table)
}

/// The kube-apiserver's request counter.
const SERVER_REQUESTS: &str = "apiserver_request_total";

/// Rounds to three significant decimals, enough for every figure here.
fn round(value: f64) -> f64 {
    (value * 1_000.0).round() / 1_000.0
}

/// The operator's writes between two scrapes, by verb and resource.
fn write_breakdown(before: &Metrics, after: &Metrics) -> String {
    let by_kind = |metrics: &Metrics| {
        let mut writes: BTreeMap<String, f64> = BTreeMap::new();
        for (labels, value) in metrics.write_samples(OPERATOR_REQUESTS) {
            let kind = format!("{} {}", labels.get("verb").unwrap_or("?"), labels.get("resource").unwrap_or("?"));
            *writes.entry(kind).or_default() += value;
        }
        writes
    };
    let before = by_kind(before);
    let parts: Vec<String> = by_kind(after)
        .into_iter()
        .map(|(kind, count)| (count - before.get(&kind).copied().unwrap_or_default(), kind))
        .filter(|(count, _)| *count > 0.0)
        .map(|(count, kind)| format!("{kind} {count}"))
        .collect();
    parts.join(", ")
}

/// The kube-apiserver's own metrics.
async fn server_metrics(client: &kube::Client) -> anyhow::Result<Metrics> {
    let request = http::Request::get("/metrics").body(Vec::new()).context("building GET /metrics")?;
    let text = client.request_text(request).await.context("GET /metrics of the kube-apiserver")?;
    Ok(Metrics(text))
}

/// Merge patches per second a plain client gets from the server.
async fn write_ceiling(client: &kube::Client, namespace: &str, writers: usize, writes: usize) -> anyhow::Result<f64> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    create_targets(&maps, writers).await?;
    let started = Instant::now();
    let done = patch_targets(&maps, writers, writes).await?;
    Ok(done as f64 / started.elapsed().as_secs_f64())
}
