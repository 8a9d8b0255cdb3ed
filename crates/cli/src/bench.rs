//! `cnpool bench`: measurements that belong in benchmarks, not in tests.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

#[derive(clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    case: Case,
}

#[derive(clap::Subcommand)]
enum Case {
    /// The embedded API server in-process: merge-patch writes per second
    /// through a kube client, alone and with watchers attached.
    Apiserver {
        /// Writes per measurement.
        #[arg(long, default_value_t = 20_000)]
        writes: usize,
        /// Concurrent writers.
        #[arg(long, default_value_t = 8)]
        writers: usize,
        /// Watcher counts to measure, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "0,10,100")]
        watchers: Vec<usize>,
        /// Also write the results as JSON to this file.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.case {
        Case::Apiserver { writes, writers, watchers, json } => {
            let mut rows = Vec::new();
            println!(
                "{:>9} {:>9} {:>11} {:>10} {:>17} {:>12}",
                "watchers", "writes", "writes/s", "µs/write", "events delivered", "events/s"
            );
            for &watcher_count in &watchers {
                let row = apiserver_case(writes, writers.max(1), watcher_count).await?;
                println!(
                    "{:>9} {:>9} {:>11.0} {:>10.1} {:>17} {:>12.0}",
                    watcher_count,
                    writes,
                    row.writes_per_second,
                    row.micros_per_write,
                    row.events_delivered,
                    row.events_per_second
                );
                rows.push(json!({
                    "watchers": watcher_count, "writes": writes, "writers": writers,
                    "writes_per_second": row.writes_per_second, "micros_per_write": row.micros_per_write,
                    "events_delivered": row.events_delivered, "events_per_second": row.events_per_second,
                }));
            }
            if let Some(path) = json {
                std::fs::write(&path, serde_json::to_string_pretty(&rows)?)
                    .with_context(|| format!("--json {}: cannot write", path.display()))?;
            }
        }
    }
    Ok(())
}

struct Row {
    writes_per_second: f64,
    micros_per_write: f64,
    events_delivered: usize,
    events_per_second: f64,
}

async fn apiserver_case(writes: usize, writers: usize, watcher_count: usize) -> anyhow::Result<Row> {
    // History (and so each watcher's buffer) holds every write: the case
    // measures delivery cost, not how soon a slow watcher is cut off.
    let server = cnpool_apiserver::ApiServer::builder().history(writes + 1_024).build();
    let client = server.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for index in 0..writers {
        let map = ConfigMap {
            metadata: kube::api::ObjectMeta { name: Some(format!("bench-{index}")), ..Default::default() },
            ..Default::default()
        };
        api.create(&PostParams::default(), &map).await.context("creating the benchmark objects")?;
    }
    let expected = writes;
    let mut watchers = Vec::new();
    for _ in 0..watcher_count {
        let stream = api.watch(&WatchParams::default(), &server.resource_version().to_string()).await?;
        watchers.push(tokio::spawn(async move {
            let mut seen = 0usize;
            let mut stream = stream.boxed();
            while seen < expected {
                match tokio::time::timeout(Duration::from_secs(30), stream.next()).await {
                    Ok(Some(Ok(WatchEvent::Modified(_)))) => seen += 1,
                    Ok(Some(Ok(_))) => {}
                    _ => break,
                }
            }
            seen
        }));
    }
    let started = Instant::now();
    let per_writer = writes / writers;
    let mut tasks = Vec::new();
    for index in 0..writers {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..per_writer {
                let patch = json!({"data": {"round": round.to_string()}});
                api.patch(&format!("bench-{index}"), &PatchParams::default(), &Patch::Merge(&patch)).await?;
            }
            Ok::<_, kube::Error>(())
        }));
    }
    for task in tasks {
        task.await.context("a writer panicked")?.context("a benchmark write failed")?;
    }
    let mut delivered = 0;
    for watcher in watchers {
        delivered += watcher.await.context("a watcher panicked")?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let done = per_writer * writers;
    if watcher_count > 0 && delivered < done * watcher_count {
        anyhow::bail!("only {delivered} of {} watch events arrived", done * watcher_count);
    }
    Ok(Row {
        writes_per_second: done as f64 / elapsed,
        micros_per_write: elapsed * 1e6 / done as f64,
        events_delivered: delivered,
        events_per_second: delivered as f64 / elapsed,
    })
}
