//! `cnpool check`: explores every reachable state of a small cluster running
//! the binding protocol (crates/check, docs/model-checking.md) and prints
//! what it explored and any violation with its shortest trace.

use anyhow::Context;
use cnpool_check::{Config, Variant};

#[derive(clap::Args)]
pub struct CheckArgs {
    /// The cluster to explore: two-replicas, migration, cutover or small.
    #[arg(long)]
    config: String,
    /// A deliberately broken variant of the protocol, which must be caught:
    /// unguarded-acquire, lost-without-live-read, adopt-keeps-extras or
    /// store-from-claim.
    #[arg(long)]
    variant: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Breadth-first worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

/// Runs the check; `false` when a property is violated.
pub fn run(args: CheckArgs) -> anyhow::Result<bool> {
    let config = Config::named(&args.config)?;
    let variant = args.variant.as_deref().map(Variant::parse).transpose()?;
    let report = cnpool_check::check(config, variant, args.threads)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).context("rendering the report as JSON")?);
    } else {
        print!("{}", report.render());
    }
    Ok(report.violations.is_empty())
}
