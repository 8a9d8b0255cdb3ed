//! `cnpool bench`: measurements that belong in benchmarks, not in tests.
//! Each case prints a table and, with `--json FILE`, writes the same
//! figures as JSON (docs/benchmarks.md holds a run's output).

mod apiserver;
mod cluster;
mod inprocess;
mod runtime;
mod table;

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::json;

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
    /// B1 at several burst sizes (default 1,000 and 10,000): CPU per bind
    /// at each, cnpool on its runtime and in the simulator, the legacy model
    /// in the simulator. Takes about half an hour, most of it the legacy
    /// model at 10,000.
    Scaling(inprocess::ScalingArgs),
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
    /// B6: claims created one at a time onto a warm pool of a real
    /// kube-apiserver (`--kubeconfig`), the operator as its own process at
    /// its defaults: how long a tenant waits for a CN (p50, p99).
    Serial(cluster::SerialArgs),
    /// B1 to B6 one after another with their defaults, then one table of
    /// every figure that has a target. B2 and B6 need a real kube-apiserver
    /// (`--kubeconfig`; ci/bench/all.sh starts one and stops it).
    All(AllArgs),
}

#[derive(clap::Args)]
struct AllArgs {
    #[command(flatten)]
    real: cluster::RealArgs,
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
        Case::Scaling(case) => vec![inprocess::scaling(case).await?],
        Case::Real(case) => vec![cluster::real(case).await?],
        Case::Steady(case) => vec![inprocess::steady(case).await?],
        Case::Migration(case) => vec![inprocess::migration(case).await?],
        Case::Memory(case) => vec![cluster::memory(case).await?],
        Case::Serial(case) => vec![cluster::serial(case).await?],
        Case::All(case) => {
            let mut tables = vec![
                inprocess::burst(&defaults()?).await?,
                cluster::real(&case.real).await?,
                inprocess::steady(&defaults()?).await?,
                inprocess::migration(&defaults()?).await?,
                cluster::memory(&defaults()?).await?,
                cluster::serial(&parsed(&["--kubeconfig".into(), case.real.kubeconfig().into()])?).await?,
            ];
            tables.push(targets(&tables));
            tables
        }
    })
}

/// A count flag's value (claims, pods, writers, writes): a case given 0
/// would measure nothing, so 0 is refused with the flag's name rather than
/// quietly run as 1.
fn at_least_one<T>(text: &str) -> Result<T, String>
where
    T: std::str::FromStr + From<u8> + PartialOrd,
    T::Err: std::fmt::Display,
{
    let count: T = text.parse().map_err(|error| format!("{error}"))?;
    if count < T::from(1) {
        return Err("0 would measure nothing; give 1 or more".to_owned());
    }
    Ok(count)
}

/// A case's arguments as its command line's defaults give them.
fn defaults<A: clap::Args + clap::FromArgMatches>() -> anyhow::Result<A> {
    parsed(&[])
}

/// A case's arguments from `args`, its defaults for the rest.
fn parsed<A: clap::Args + clap::FromArgMatches>(args: &[std::ffi::OsString]) -> anyhow::Result<A> {
    let command = A::augment_args(clap::Command::new("case"));
    let line = std::iter::once("case".into()).chain(args.iter().cloned());
    let matches = command.try_get_matches_from::<_, std::ffi::OsString>(line).context("a case's arguments")?;
    A::from_arg_matches(&matches).context("a case's arguments")
}

/// Every figure of `tables` that has a target, case by case.
fn targets(tables: &[Table]) -> Table {
    let mut summary = Table::new("all", "every figure with a target", &["case", "measure", "value", "target", "met"]);
    let mut missed = 0;
    for (case, check) in tables.iter().flat_map(|table| table.checks.iter().map(|check| (&table.case, check))) {
        missed += usize::from(!check.met);
        let met = if check.met { "yes" } else { "NO" };
        summary.row(vec![json!(case), json!(check.measure), check.value.clone(), json!(check.target), json!(met)]);
    }
    summary.note(format!("{missed} target(s) missed; docs/benchmarks.md says why"));
    summary
}

fn write_json(path: &Path, tables: &[Table]) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(tables)?;
    std::fs::write(path, json).with_context(|| format!("--json {}: cannot write", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_lists_every_target_and_counts_the_missed_ones() {
        let mut burst = Table::new("burst", "B1", &["measure"]);
        burst.check("binds/s (wall)", json!(78.0), "≥ 2000".to_owned(), false);
        burst.check("writes/bind", json!(3.0), "≤ 3".to_owned(), true);
        let mut memory = Table::new("memory", "B5", &["pods"]);
        memory.check("peak RSS MiB, 1000 pods", json!(50.3), "≤ 64".to_owned(), true);
        let summary = targets(&[burst, Table::new("steady", "B3", &["measure"]), memory]);
        let rows: Vec<(String, String)> = summary
            .rows
            .iter()
            .map(|row| (row[0].as_str().unwrap_or_default().to_owned(), row[4].as_str().unwrap_or_default().to_owned()))
            .collect();
        assert_eq!(
            rows,
            [("burst".into(), "NO".into()), ("burst".into(), "yes".into()), ("memory".into(), "yes".into())]
        );
        assert_eq!(summary.notes, ["1 target(s) missed; docs/benchmarks.md says why"]);
    }

    #[derive(clap::Args)]
    struct Sample {
        #[arg(long, default_value_t = 1_000)]
        claims: u32,
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        pods: Vec<usize>,
    }

    #[test]
    fn a_count_of_zero_is_refused_with_the_flag_named() {
        for line in [&["--claims", "0"][..], &["--claims", "1000,0"]] {
            let args: Vec<std::ffi::OsString> = line.iter().map(Into::into).collect();
            let refused = parsed::<inprocess::ScalingArgs>(&args).err().map(|error| format!("{error:#}"));
            let message = refused.unwrap_or_default();
            assert!(message.contains("--claims") && message.contains("give 1 or more"), "{line:?}: {message}");
        }
        assert!(parsed::<inprocess::BurstArgs>(&["--claims".into(), "1".into()]).is_ok(), "1 is a count");
    }

    #[test]
    fn a_case_run_by_all_takes_its_command_line_defaults() {
        let sample: Sample = defaults().expect("defaults parse");
        assert_eq!((sample.claims, sample.pods), (1_000, vec![1_000, 10_000]));
    }
}
