//! `cnpool bench`: measurements that belong in benchmarks, not in tests.
//! Each case prints a table and, with `--json FILE`, writes the same
//! figures as JSON (docs/benchmarks.md holds a run's output).

mod apiserver;
mod cluster;
mod inprocess;
mod table;

use std::path::{Path, PathBuf};

use anyhow::Context;

pub use table::Table;

#[derive(clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    case: Case,
    /// Also write the results as JSON to this file.
    #[arg(long, global = true)]
    json: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
enum Case {
    /// The embedded API server in-process: merge-patch writes per second
    /// through a kube client, alone and with watchers attached.
    Apiserver(apiserver::ApiserverArgs),
    /// B1: claims created at once onto as many warm Idle pods, cnpool and
    /// the legacy model in the simulator: binds/s, traffic per bind.
    Burst(inprocess::BurstArgs),
    /// B2: a burst of binds against a real kube-apiserver (`--kubeconfig`),
    /// the operator as its own process, against the server's raw write
    /// ceiling measured in the same run.
    Real(cluster::RealArgs),
    /// B3: Bound claims through a virtual hour with nothing changing:
    /// writes, reconciles per object, log lines.
    Steady(inprocess::SteadyArgs),
    /// B4: one migration with a drain: its claim's reconciles, writes and
    /// log lines, cnpool and the legacy model.
    Migration(inprocess::MigrationArgs),
    /// B5: the operator process's peak RSS with 1,000 and 10,000 pods and
    /// as many claims in its caches (on `cnpool dev`'s embedded server).
    Memory(cluster::MemoryArgs),
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    // An interrupted case drops its future, and with it the processes it
    // started (each is killed when dropped).
    let tables = tokio::select! {
        tables = run_case(&args.case) => tables?,
        () = crate::operator::shutdown_signal() => anyhow::bail!("interrupted; the case's processes are stopped"),
    };
    for table in &tables {
        table.print();
    }
    if let Some(path) = &args.json {
        write_json(path, &tables)?;
    }
    Ok(())
}

async fn run_case(case: &Case) -> anyhow::Result<Vec<Table>> {
    Ok(match case {
        Case::Apiserver(case) => vec![apiserver::run(case).await?],
        Case::Burst(case) => vec![inprocess::burst(case).await?],
        Case::Real(case) => vec![cluster::real(case).await?],
        Case::Steady(case) => vec![inprocess::steady(case).await?],
        Case::Migration(case) => vec![inprocess::migration(case).await?],
        Case::Memory(case) => vec![cluster::memory(case).await?],
    })
}

fn write_json(path: &Path, tables: &[Table]) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(tables)?;
    std::fs::write(path, json).with_context(|| format!("--json {}: cannot write", path.display()))
}
