//! The `cnpool` command.

use std::io::Write;

use anyhow::Context;
use clap::{Parser, Subcommand};

// `dev`, `bench`, `sim` and `check` are the lab (feature `lab`, on by default); the
// operator image is built without them (Dockerfile).
#[cfg(feature = "lab")]
mod bench;
#[cfg(feature = "lab")]
mod check;
#[cfg(feature = "lab")]
mod dev;
mod doctor;
mod logs;
mod metrics_text;
mod operator;
mod probes;
mod process;
mod shadow;
#[cfg(feature = "lab")]
mod sim;

#[derive(Parser)]
#[command(name = "cnpool", version, about = "Warm MatrixOne CN pods, handed out exclusively to claims")]
struct Cli {
    /// How log lines are written (to stderr): `text` for people, `json` for
    /// a log pipeline (one flat object per line: `ts`, `level`, `msg`,
    /// `target` and the event's fields). `RUST_LOG` sets the level (default
    /// `info`).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CNPool, CNClaim and CNClaimSet CRDs as one multi-document
    /// YAML stream, e.g. `cnpool crd | kubectl apply -f -`.
    Crd,
    /// Serve an in-memory Kubernetes API (with cnpool's CRDs installed) on
    /// loopback and write a kubeconfig for it; runs until interrupted.
    #[cfg(feature = "lab")]
    Dev(dev::DevArgs),
    /// Audit a live cluster against cnpool's invariants (read-only), and with
    /// --fix repair it with the operator's own writes; exits 0 when nothing
    /// but information was found, 1 on findings, 2 when it cannot read.
    Doctor(doctor::DoctorArgs),
    /// Run the operator against a cluster and a MatrixOne cluster's HAKeeper,
    /// until SIGTERM or Ctrl-C.
    Operator(Box<operator::OperatorArgs>),
    /// Benchmarks; each prints a table (and JSON with --json).
    #[cfg(feature = "lab")]
    Bench(bench::BenchArgs),
    /// Simulate a scenario deterministically for many seeds and check the
    /// invariants; exits non-zero when one is broken.
    #[cfg(feature = "lab")]
    Sim(sim::SimArgs),
    /// Model-check the binding protocol: explore every reachable state of
    /// a small cluster; exits non-zero when a property is violated.
    #[cfg(feature = "lab")]
    Check(check::CheckArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // A benchmark prints tables: the operator it runs in-process logs only
    // what went wrong, unless RUST_LOG asks for more.
    let default_level = match cli.command {
        #[cfg(feature = "lab")]
        Command::Bench(_) => "warn",
        // A report goes to stdout; stderr says only what went wrong.
        Command::Doctor(_) => "warn",
        _ => "info",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // Colours only for a person at a terminal, never into a log file.
    let colours = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let subscriber = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(colours);
    match cli.log_format {
        LogFormat::Text => subscriber.init(),
        LogFormat::Json => subscriber.event_format(logs::FlatJson).init(),
    }
    match cli.command {
        Command::Crd => {
            let yaml = cnpool_api::crd::crds_yaml().context("rendering the CRDs as YAML")?;
            std::io::stdout().lock().write_all(yaml.as_bytes()).context("writing the CRDs to stdout")?;
        }
        #[cfg(feature = "lab")]
        Command::Dev(args) => dev::run(args).await?,
        Command::Operator(args) => operator::run(*args).await?,
        Command::Doctor(args) => {
            let code = doctor::run(args).await?;
            if code != 0 {
                std::process::exit(code);
            }
        }
        #[cfg(feature = "lab")]
        Command::Bench(args) => bench::run(args).await?,
        #[cfg(feature = "lab")]
        Command::Sim(args) => {
            // Each seed builds a runtime of its own, on a thread of its own.
            let passed = tokio::task::spawn_blocking(move || sim::run(args)).await??;
            if !passed {
                std::process::exit(1);
            }
        }
        #[cfg(feature = "lab")]
        Command::Check(args) => {
            // The checker's worker threads block: off the async runtime.
            match tokio::task::spawn_blocking(move || check::run(args)).await?? {
                check::Outcome::Holds => {}
                check::Outcome::Violated => std::process::exit(1),
                check::Outcome::Unfinished => std::process::exit(2),
            }
        }
    }
    Ok(())
}
