//! `cnpool bench`: measurements that belong in benchmarks, not in tests.
//! Each case prints a table and, with `--json FILE`, writes the same
//! figures as JSON (docs/benchmarks.md holds a run's output).

mod apiserver;
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
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let tables = match &args.case {
        Case::Apiserver(case) => vec![apiserver::run(case).await?],
    };
    for table in &tables {
        table.print();
    }
    if let Some(path) = &args.json {
        write_json(path, &tables)?;
    }
    Ok(())
}

fn write_json(path: &Path, tables: &[Table]) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(tables)?;
    std::fs::write(path, json).with_context(|| format!("--json {}: cannot write", path.display()))
}
