//! The `cnpool` command.

use std::io::Write;

use anyhow::Context;
use clap::{Parser, Subcommand};

mod bench;
mod dev;
mod sim;

#[derive(Parser)]
#[command(name = "cnpool", version, about = "Warm MatrixOne CN pods, handed out exclusively to claims")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CNPool, CNClaim and CNClaimSet CRDs as one multi-document
    /// YAML stream, e.g. `cnpool crd | kubectl apply -f -`.
    Crd,
    /// Serve an in-memory Kubernetes API (with cnpool's CRDs installed) on
    /// loopback and write a kubeconfig for it; runs until interrupted.
    Dev(dev::DevArgs),
    /// Benchmarks; each prints a table (and JSON with --json).
    Bench(bench::BenchArgs),
    /// Simulate a scenario deterministically for many seeds and check the
    /// invariants; exits non-zero when one is broken.
    Sim(sim::SimArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    match Cli::parse().command {
        Command::Crd => {
            let yaml = cnpool_api::crd::crds_yaml().context("rendering the CRDs as YAML")?;
            std::io::stdout().lock().write_all(yaml.as_bytes()).context("writing the CRDs to stdout")?;
        }
        Command::Dev(args) => dev::run(args).await?,
        Command::Bench(args) => bench::run(args).await?,
        Command::Sim(args) => {
            // Each seed builds a runtime of its own, on a thread of its own.
            let passed = tokio::task::spawn_blocking(move || sim::run(args)).await??;
            if !passed {
                std::process::exit(1);
            }
        }
    }
    Ok(())
}
