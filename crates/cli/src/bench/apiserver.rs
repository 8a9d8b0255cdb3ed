//! The embedded API server's own write and watch-delivery cost.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use super::Table;

#[derive(clap::Args)]
pub struct ApiserverArgs {
    /// Writes per measurement.
    #[arg(long, default_value_t = 20_000, value_parser = crate::bench::at_least_one::<usize>)]
    writes: usize,
    /// Concurrent writers.
    #[arg(long, default_value_t = 8, value_parser = crate::bench::at_least_one::<usize>)]
    writers: usize,
    /// Watcher counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,10,100")]
    watchers: Vec<usize>,
}

pub async fn run(args: &ApiserverArgs) -> anyhow::Result<Table> {
    let mut table = Table::new(
        "apiserver",
        "embedded API server, merge-patch writes through a kube client",
        &["watchers", "writes", "writes/s", "µs/write", "events delivered", "events/s"],
    );
    for &watcher_count in &args.watchers {
        let row = apiserver_case(args.writes, args.writers, watcher_count).await?;
        table.row(vec![
            json!(watcher_count),
            json!(args.writes),
            json!(row.writes_per_second.round()),
            json!(row.micros_per_write),
            json!(row.events_delivered),
            json!(row.events_per_second.round()),
        ]);
    }
    table.note(format!("{} concurrent writers", args.writers));
    Ok(table)
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
    create_targets(&api, writers).await?;
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
    let done = patch_targets(&api, writers, writes).await?;
    let mut delivered = 0;
    for watcher in watchers {
        delivered += watcher.await.context("a watcher panicked")?;
    }
    let elapsed = started.elapsed().as_secs_f64();
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

/// One ConfigMap per writer for [`patch_targets`], in `api`'s namespace.
pub(super) async fn create_targets(api: &Api<ConfigMap>, writers: usize) -> anyhow::Result<()> {
    for index in 0..writers {
        let map = ConfigMap {
            metadata: kube::api::ObjectMeta { name: Some(format!("bench-{index}")), ..Default::default() },
            ..Default::default()
        };
        api.create(&PostParams::default(), &map).await.context("creating the benchmark objects")?;
    }
    Ok(())
}

/// `writers` tasks merge-patch their own ConfigMap, `writes` in all (rounded
/// down to a multiple of `writers`); returns how many were made.
pub(super) async fn patch_targets(api: &Api<ConfigMap>, writers: usize, writes: usize) -> anyhow::Result<usize> {
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
    Ok(per_writer * writers)
}
