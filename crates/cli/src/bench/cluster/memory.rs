//! B5: the operator process's peak RSS with large caches. The embedded API
//! server (`cnpool dev --no-operator`) hosts the objects; the operator
//! fills the pool itself and binds a claim to every pod, as a full pool
//! in production got there, and is then restarted over the full caches.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use super::{
    NodeSide, Operator, PoolCount, create_claims, create_pool, log_dir, scrape, wait_for, wait_for_pool, workers_flag,
};
use crate::bench::Table;

#[derive(clap::Args)]
pub struct MemoryArgs {
    /// Pod counts to measure, comma-separated; each run has as many claims.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000", value_parser = crate::bench::at_least_one::<usize>)]
    pods: Vec<usize>,
    /// The operator's `--workers` (default: the operator's own default).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: Option<u16>,
    /// Claims being created at once.
    #[arg(long, default_value_t = 32, value_parser = crate::bench::at_least_one::<usize>)]
    creators: usize,
}

/// Peak RSS targets, MiB, by pod count.
const TARGETS: [(usize, f64); 2] = [(1_000, 64.0), (10_000, 256.0)];

/// Where the objects live: the embedded server's default namespace.
const NAMESPACE: &str = "default";

pub async fn memory(args: &MemoryArgs) -> anyhow::Result<Table> {
    let mut table = Table::new(
        "memory",
        "B5: peak RSS of the operator process, N pods and N claims in its caches",
        &["pods", "claims", "operator", "peak RSS MiB", "target MiB", "met", "seconds"],
    );
    let mut logs = Vec::new();
    for &pods in &args.pods {
        let dir = log_dir(&format!("memory-{pods}"))?;
        let run = measure(pods, args, &dir).await?;
        let target = TARGETS.iter().find(|(count, _)| *count == pods).map(|(_, mib)| *mib);
        for (operator, peak, seconds) in [
            ("filled the pool, bound every claim", run.filled, run.fill_seconds),
            ("restarted over the full caches", run.restarted, run.restart_seconds),
        ] {
            let met = target.map(|target| peak <= target);
            let peak = (peak * 10.0).round() / 10.0;
            if let (Some(target), Some(met)) = (target, met) {
                table.check(&format!("peak RSS MiB, {pods} pods, {operator}"), json!(peak), format!("≤ {target}"), met);
            }
            table.row(vec![
                json!(pods),
                json!(pods),
                json!(operator),
                json!(peak),
                json!(target),
                json!(met),
                json!(seconds.round()),
            ]);
        }
        logs.push(dir.display().to_string());
    }
    table.note("peak RSS is VmHWM of /proc/PID/status, read once the operator's reconciles have gone quiet");
    table.note(format!(
        "the restarted operator is read after its /readyz (caches listed) and its cnpool_pool_pods metric counting \
         every pod Bound; operator {}",
        workers_flag(args.workers)
    ));
    table.note(format!("logs in {}", logs.join(", ")));
    Ok(table)
}

struct Run {
    filled: f64,
    fill_seconds: f64,
    restarted: f64,
    restart_seconds: f64,
}

async fn measure(pods: usize, args: &MemoryArgs, logs: &Path) -> anyhow::Result<Run> {
    let kubeconfig = logs.join("kubeconfig");
    let mut node_side = NodeSide::serving(&kubeconfig, logs).await?;
    let config = crate::operator::kube_config(Some(&kubeconfig)).await?;
    let client = kube::Client::try_from(config).context("building a client of cnpool dev's API")?;
    // A generous bound, for a busy machine: the pods start one by one.
    let within = Duration::from_secs(120) + Duration::from_millis(50) * u32::try_from(pods).unwrap_or(u32::MAX);

    let started = Instant::now();
    let mut operator = Operator::start(&kubeconfig, NAMESPACE, &node_side, args.workers, logs).await?;
    create_pool(&client, NAMESPACE, pods).await?;
    wait_for_pool(&client, NAMESPACE, Some(&mut operator.process), PoolCount::Idle, pods, within).await?;
    create_claims(&client, NAMESPACE, pods, args.creators).await?;
    wait_for_pool(&client, NAMESPACE, Some(&mut operator.process), PoolCount::Bound, pods, within).await?;
    settle(&mut operator, pods).await?;
    let filled = operator.process.peak_rss_mib()?;
    let fill_seconds = started.elapsed().as_secs_f64();
    drop(operator);

    let started = Instant::now();
    let mut operator = Operator::start(&kubeconfig, NAMESPACE, &node_side, args.workers, logs).await?;
    let cached = format!("the restarted operator's pool_pods metric counting {pods} Bound");
    let probes = operator.probes;
    wait_for(&cached, within, Some(&mut operator.process), || async move {
        let metrics = scrape(probes).await.map_err(|error| format!("{error:#}"))?;
        let bound: f64 = metrics
            .samples("cnpool_pool_pods")
            .filter(|(labels, _)| labels.get("phase") == Some("Bound"))
            .map(|(_, value)| value)
            .sum();
        if bound as usize == pods { Ok(()) } else { Err(format!("{bound} Bound")) }
    })
    .await?;
    settle(&mut operator, pods).await?;
    let restarted = operator.process.peak_rss_mib()?;
    let restart_seconds = started.elapsed().as_secs_f64();
    node_side.process.ensure_running()?;
    Ok(Run { filled, fill_seconds, restarted, restart_seconds })
}

/// Waits until the operator's reconciles have gone quiet: fewer than one
/// per hundred objects (at least ten) in two seconds.
async fn settle(operator: &mut Operator, pods: usize) -> anyhow::Result<()> {
    let quiet = (pods / 100).max(10) as f64;
    let started = Instant::now();
    let mut last = operator.metrics().await?.total("cnpool_reconciles_total");
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = operator.metrics().await?.total("cnpool_reconciles_total");
        if now - last < quiet {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(300) {
            anyhow::bail!("the operator's reconciles did not go quiet within 300s ({} in the last 2s)", now - last);
        }
        last = now;
    }
}
