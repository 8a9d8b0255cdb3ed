//! The `cnpool` command.

use std::io::Write;

use anyhow::Context;
use clap::{Parser, Subcommand};

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
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crd => {
            let yaml = cnpool_api::crd::crds_yaml().context("rendering the CRDs as YAML")?;
            std::io::stdout().lock().write_all(yaml.as_bytes()).context("writing the CRDs to stdout")?;
        }
    }
    Ok(())
}
