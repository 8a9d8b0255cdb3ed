//! `cnpool doctor`: audits a live cluster against cnpool's invariants
//! (crates/doctor), prints the findings, and exits 0 (nothing but
//! information), 1 (findings) or 2 (the cluster could not be read).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use cnpool_controllers::{CountRequestsLayer, Telemetry};
use cnpool_doctor::{Report, Scope, Settings};
use cnpool_morpc::{MorpcOptions, MorpcRegistry};

use crate::metrics_text::Metrics;
use crate::operator::{check_discovery, go_duration, kube_config};

#[derive(clap::Args)]
pub struct DoctorArgs {
    /// Kubeconfig to use; without it, `$KUBECONFIG`, then the in-cluster
    /// service account.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// Audit this namespace only (default: all namespaces).
    #[arg(long, value_name = "NS")]
    namespace: Option<String>,
    /// The operator's namespace, where its cutover record is (default: the
    /// kubeconfig's namespace, as the operator's `--lease-namespace`).
    #[arg(long, value_name = "NS")]
    operator_namespace: Option<String>,
    /// `host:port` of the log set's discovery service of pools without
    /// `spec.deps`: the operator's own `--hakeeper-discovery`. Pools with
    /// deps use the HAKeeper they name, as the operator does.
    #[arg(long, value_name = "HOST:PORT")]
    hakeeper_discovery: Option<String>,
    /// Reach the HAKeeper that pools resolve to at RESOLVED (their deps, or
    /// --hakeeper-discovery) at LOCAL instead, e.g. a port-forward on a
    /// laptop: `--hakeeper-address mo-log-discovery.mo.svc:32001=127.0.0.1:32001`.
    /// Repeat it for several clusters.
    #[arg(long, value_name = "RESOLVED=LOCAL", value_parser = address_mapping)]
    hakeeper_address: Vec<(String, String)>,
    /// Print the report as JSON (schema in docs/runbook.md).
    #[arg(long)]
    json: bool,
    /// Repair what can be repaired with the operator's own writes, and say
    /// what needs the operator or a person.
    #[arg(long)]
    fix: bool,
    /// The operator's `--store-missing-bound`.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = go_duration)]
    store_missing_bound: Duration,
    /// How long after its deletion a claim or claim set may still be held
    /// by a finalizer; pods and pools get their pool's drain timeout on top.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = go_duration)]
    finalizer_bound: Duration,
}

/// What the doctor's requests carry as their User-Agent.
const USER_AGENT: &str = concat!("cnpool-doctor/", env!("CARGO_PKG_VERSION"));

/// Runs the audit; the process's exit code.
pub async fn run(args: DoctorArgs) -> anyhow::Result<i32> {
    for discovery in args.hakeeper_discovery.iter().chain(args.hakeeper_address.iter().map(|(_, local)| local)) {
        check_discovery(discovery)?;
    }
    let mut config = match kube_config(args.kubeconfig.as_deref()).await {
        Ok(config) => config,
        Err(error) => return Ok(cannot_read(args.json, &format!("{error:#}"))),
    };
    // The API server's audit log tells the doctor's requests apart.
    config.headers.push((http::header::USER_AGENT, http::HeaderValue::from_static(USER_AGENT)));
    let operator_namespace = args.operator_namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(cnpool_controllers::Metrics::register(&mut registry));
    let telemetry = Telemetry::new(metrics);
    let client = kube::client::ClientBuilder::try_from(config)
        .context("building the Kubernetes client")?
        .with_layer(&CountRequestsLayer::new(&telemetry))
        .build();
    let scope = Scope {
        namespace: args.namespace.clone(),
        operator_namespace,
        hakeeper_discovery: args.hakeeper_discovery,
        hakeeper_addresses: args.hakeeper_address.into_iter().collect(),
    };
    let settings = Settings {
        store_missing_bound: args.store_missing_bound,
        finalizer_bound: args.finalizer_bound,
        ..Settings::default()
    };
    let hakeeper = |address: &str| {
        let mut options = MorpcOptions::new(address);
        // A person waits for the answer: a HAKeeper that does not answer
        // is reported soon.
        options.call_timeout = Duration::from_secs(5);
        MorpcRegistry::new(options)
    };
    match cnpool_doctor::run(&client, &scope, &hakeeper, &settings, args.fix).await {
        Ok(mut report) => {
            report.requests = requests_by_verb(&registry);
            print(&report, args.json)?;
            Ok(report.summary.exit_code)
        }
        Err(error) => Ok(cannot_read(args.json, &error.to_string())),
    }
}

/// Says why the cluster could not be read; exit code 2.
fn cannot_read(json: bool, why: &str) -> i32 {
    if json {
        println!("{}", serde_json::json!({"schemaVersion": cnpool_doctor::report::SCHEMA_VERSION, "error": why}));
    }
    eprintln!("cnpool doctor: the cluster could not be read: {why}");
    2
}

fn address_mapping(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((resolved, local)) if !resolved.is_empty() && !local.is_empty() => {
            Ok((resolved.to_owned(), local.to_owned()))
        }
        _ => Err(format!("{text:?}: expected RESOLVED=LOCAL, two host:port addresses")),
    }
}

fn print(report: &Report, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report).context("encoding the report as JSON")?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

/// The requests the client sent, by verb, from its own counters.
fn requests_by_verb(registry: &prometheus_client::registry::Registry) -> std::collections::BTreeMap<String, u64> {
    let mut text = String::new();
    let mut counts = std::collections::BTreeMap::new();
    if prometheus_client::encoding::text::encode(&mut text, registry).is_err() {
        return counts;
    }
    for (labels, value) in Metrics(text).samples("cnpool_api_requests_total") {
        if let Some(verb) = labels.get("verb") {
            // Counters are whole numbers.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let value = value as u64;
            *counts.entry(verb.to_owned()).or_default() += value;
        }
    }
    counts
}
