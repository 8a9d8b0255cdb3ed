//! `cnpool check`: explores every reachable state of a small cluster running
//! the binding protocol (crates/check, docs/model-checking.md) and prints
//! what it explored and any violation with its shortest trace.

use anyhow::Context;
use cnpool_check::{Config, Options, Variant};

#[derive(clap::Args)]
pub struct CheckArgs {
    /// The cluster to explore: two-replicas, migration, cutover, small or
    /// forged-labels (and the tests' tiny ones: race, pair, prebound,
    /// lost-migration, twins, forged-twins).
    #[arg(long)]
    config: String,
    /// A deliberately broken variant of the protocol, which must be caught:
    /// unguarded-acquire, lost-without-live-read, adopt-keeps-extras,
    /// store-from-claim or owner-labels-from-spec.
    #[arg(long)]
    variant: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Breadth-first worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Stop after this many seconds; the report then says the space was
    /// not explored to the end (and the exit status is 2).
    #[arg(long)]
    timeout: Option<u64>,
    /// Print the counts to stderr every ten seconds.
    #[arg(long)]
    progress: bool,
    /// Explore without the symmetry reduction (replicas, interchangeable
    /// claims): to measure or check the reduction itself.
    #[arg(long)]
    no_symmetry: bool,
}

/// How a check ended, as the exit status says it.
pub enum Outcome {
    /// Every reachable state explored, no violation: exit 0.
    Holds,
    /// A property is violated: exit 1.
    Violated,
    /// Stopped by `--timeout` before the end, no violation so far: exit 2.
    Unfinished,
}

/// Runs the check.
pub fn run(args: CheckArgs) -> anyhow::Result<Outcome> {
    let config = Config::named(&args.config)?;
    let variant = args.variant.as_deref().map(Variant::parse).transpose()?;
    let options = Options {
        threads: args.threads,
        timeout: args.timeout.map(std::time::Duration::from_secs),
        progress: args.progress,
        symmetry: !args.no_symmetry,
    };
    let report = cnpool_check::check(config, variant, &options)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).context("rendering the report as JSON")?);
    } else {
        print!("{}", report.render());
    }
    Ok(match (report.violations.is_empty(), report.exhaustive) {
        (false, _) => Outcome::Violated,
        (true, true) => Outcome::Holds,
        (true, false) => Outcome::Unfinished,
    })
}
