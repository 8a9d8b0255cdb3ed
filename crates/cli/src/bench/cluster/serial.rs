//! B6: how long a tenant waits for a warm CN. Claims are created one at a
//! time against a pool that keeps `--max-idle` pods warm, each once the
//! previous one is Bound and the pool is warm again, against a real
//! kube-apiserver with the operator as its own process at its defaults.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use cnpool_api::{CNClaim, ClaimPhase};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use super::{Operator, POOL, RealCluster, claim, claim_name, create_pool_of, quantile, wait_for};
use crate::bench::Table;

#[derive(clap::Args)]
pub struct SerialArgs {
    /// Kubeconfig of the cluster; its user needs cluster-admin rights (the
    /// case installs the CRDs and creates a namespace), and the operator
    /// process uses it too.
    #[arg(long, value_name = "PATH")]
    kubeconfig: PathBuf,
    /// Claims, created one after another.
    #[arg(long, default_value_t = 100, value_parser = crate::bench::at_least_one::<usize>)]
    claims: usize,
    /// The pool's `maxIdle`: the warm pods each claim finds.
    #[arg(long, default_value_t = 5, value_parser = crate::bench::at_least_one::<usize>)]
    max_idle: usize,
}

/// Claim created → Bound, targets in seconds.
const P50_TARGET: f64 = 0.030;
const P99_TARGET: f64 = 0.150;

pub async fn serial(args: &SerialArgs) -> anyhow::Result<Table> {
    let (claims, max_idle) = (args.claims, args.max_idle);
    let RealCluster { client, namespace, logs, mut operator, node_side } =
        RealCluster::start(&args.kubeconfig, "serial", None).await?;
    create_pool_of(&client, &namespace, max_idle, None).await?;
    let warm = Duration::from_secs(300);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    wait_for_idle_pods(&pods, &mut operator, max_idle, warm).await?;

    let api: Api<CNClaim> = Api::namespaced(client.clone(), &namespace);
    let mut latencies = Vec::with_capacity(claims);
    let listed = api.list(&ListParams::default().limit(1)).await.context("listing claims")?;
    let mut version = listed.metadata.resource_version.unwrap_or_default();
    let mut events = api.watch(&WatchParams::default(), &version).await.context("watching claims")?.boxed();
    for index in 0..claims {
        let sent = Instant::now();
        api.create(&PostParams::default(), &claim(&namespace, index)?)
            .await
            .with_context(|| format!("creating claim {index}"))?;
        let name = claim_name(index);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let event = tokio::time::timeout_at(deadline, events.next())
                .await
                .map_err(|_| anyhow::anyhow!("claim {name} not Bound within 60 s"))?;
            match event {
                Some(Ok(WatchEvent::Added(seen) | WatchEvent::Modified(seen))) => {
                    version = seen.metadata.resource_version.clone().unwrap_or(version);
                    if seen.metadata.name.as_deref() == Some(name.as_str()) && seen.phase() == Some(ClaimPhase::Bound) {
                        latencies.push(sent.elapsed());
                        break;
                    }
                }
                Some(Ok(WatchEvent::Error(status))) => anyhow::bail!("the claim watch failed: {}", status.message),
                Some(Ok(_)) => {}
                Some(Err(error)) => return Err(anyhow::Error::from(error).context("the claim watch failed")),
                // The server ends a watch after its timeout: go on from
                // the last version seen.
                None => {
                    events =
                        api.watch(&WatchParams::default(), &version).await.context("watching claims again")?.boxed();
                }
            }
        }
        // The next tenant finds the pool warm again, as tenants arriving
        // one by one do. Its pods say so at once (the pool's status lags).
        wait_for_idle_pods(&pods, &mut operator, max_idle, warm).await?;
    }
    drop(operator);
    drop(node_side);

    let (p50, p90, p99) = (quantile(&latencies, 0.5), quantile(&latencies, 0.9), quantile(&latencies, 0.99));
    let worst = quantile(&latencies, 1.0);
    let mut table = Table::new(
        "serial",
        "B6: claims bound one at a time from a warm pool, real kube-apiserver, the operator at its defaults",
        &["measure", "value", "target", "met"],
    );
    let millis = |seconds: f64| (seconds * 10_000.0).round() / 10.0;
    for (measure, value, target) in [
        ("created → Bound p50, ms", p50, Some(P50_TARGET)),
        ("created → Bound p90, ms", p90, None),
        ("created → Bound p99, ms", p99, Some(P99_TARGET)),
        ("created → Bound max, ms", worst, None),
    ] {
        match target {
            Some(target) => {
                let (text, met) = (format!("≤ {}", millis(target)), value <= target);
                table.check(measure, json!(millis(value)), text.clone(), met);
                table.row(vec![json!(measure), json!(millis(value)), json!(text), json!(met)]);
            }
            None => table.row(vec![json!(measure), json!(millis(value)), json!(null), json!(null)]),
        }
    }
    table.note(format!(
        "{claims} claims, each created once the previous one was Bound (seen by a watch) and the pool had \
         {max_idle} Idle pods again; operator at its default --workers"
    ));
    table.note(format!("namespace {namespace} is left behind; logs in {}", logs.display()));
    Ok(table)
}

/// Waits until the pool has `count` pods labelled Idle, by a list of them.
async fn wait_for_idle_pods(
    pods: &Api<Pod>,
    operator: &mut Operator,
    count: usize,
    within: Duration,
) -> anyhow::Result<()> {
    let idle = ListParams::default().labels(&format!(
        "{}={POOL},{}=Idle",
        cnpool_api::labels::POOL_NAME,
        cnpool_api::labels::PHASE
    ));
    let what = format!("{count} Idle pods in pool {POOL}");
    wait_for(&what, within, Some(&mut operator.process), || async {
        let listed = pods.list(&idle).await.map_err(|error| error.to_string())?;
        if listed.items.len() >= count { Ok(()) } else { Err(format!("{} Idle", listed.items.len())) }
    })
    .await
}
