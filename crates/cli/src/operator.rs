//! `cnpool operator`: the controllers as their own process, against the
//! cluster of a kubeconfig (or the pod's in-cluster config) and the
//! MatrixOne cluster behind a HAKeeper discovery address; with health and
//! metrics endpoints, Lease-based leader election, the admission webhook and
//! shadow mode.
//!
//! Leader election only saves work: binding safety never depends on it
//! (DESIGN §2), so a second replica that briefly believes it leads cannot
//! bind two claims to one pod. Every replica serves the webhook and its
//! probes; only the leader runs the controllers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use cnpool_controllers::{CountRequestsLayer, Metrics, Telemetry};
use cnpool_morpc::{MorpcMetrics, MorpcOptions, MorpcRegistry};
use cnpool_registry::StoreRegistry;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use tokio::sync::watch;

use crate::probes;
use crate::shadow;

#[derive(clap::Args)]
pub struct OperatorArgs {
    /// Kubeconfig to use; without it, `$KUBECONFIG`, then the in-cluster
    /// service account.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// Watch and act in this namespace only; repeat it (or separate with
    /// commas) for several (default: all namespaces).
    #[arg(long, value_name = "NS", value_delimiter = ',')]
    namespace: Vec<String>,
    /// Reconciles run at once, per controller.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: u16,
    /// Client-side limit on Kubernetes API requests per second, on average
    /// (0: none).
    #[arg(long, default_value_t = 0)]
    qps: u32,
    /// With --qps: how many requests may go at once before the limit holds
    /// them back.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    burst: u32,
    /// `host:port` of the MatrixOne log set's discovery service of pools
    /// without `spec.deps`, e.g. `mo-log-discovery.mo.svc:32001`; HAKeeper
    /// is found through it. A pool with deps uses the HAKeeper they name
    /// (`externalLogSet.haKeeperEndpoint`, or its LogSet's
    /// `status.discovery`), through a client of its own per cluster.
    #[arg(long, value_name = "HOST:PORT")]
    hakeeper_discovery: String,
    /// How long a running pod's store may be missing from HAKeeper before
    /// its claim counts the pod as lost.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = go_duration)]
    store_missing_bound: Duration,
    /// How long an unowned pod's store may be missing from HAKeeper (from
    /// its CN container's start) before its pool makes another pod for the
    /// claims that wait, rather than have them wait out --store-missing-bound.
    /// Set it above the time your CNs take to register.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = go_duration)]
    store_registration_grace: Duration,
    /// How long a deleted pod waits for HAKeeper to remove its store
    /// before it is let go anyway.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = go_duration)]
    store_removal_timeout: Duration,
    /// How long a migration target's CN store must have served the claim
    /// before its source is released, so that the proxy routes new sessions
    /// to the target first.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = go_duration)]
    migration_propagation_delay: Duration,
    /// How often a settled object is looked at again regardless of events.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = go_duration)]
    resync: Duration,
    /// `/healthz` fails once a controller's watch has delivered nothing (no
    /// event, no relist, no renewed watch) for this long, or an object has
    /// waited this long for its reconcile while none finished. Each watch is
    /// renewed every third of it, so a quiet cluster stays healthy.
    #[arg(long, value_name = "DURATION", default_value = "3m", value_parser = stall_timeout)]
    stall_timeout: Duration,
    /// This instance's name, in Events and in the leader lease (default:
    /// `$POD_NAME`, else the host name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// `/healthz`, `/readyz` and `/metrics`, over plain HTTP.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
    probe_listen: SocketAddr,
    /// Elect one leader among the replicas through a Lease; only the leader
    /// runs the controllers.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    leader_elect: bool,
    #[arg(long, default_value = "cnpool-operator")]
    lease_name: String,
    /// The operator's own namespace, of its Lease and of its cutover record,
    /// the ConfigMap `cnpool-cutover` (default: `$POD_NAMESPACE`, else the
    /// kubeconfig's namespace).
    #[arg(long, env = "POD_NAMESPACE", value_name = "NS")]
    lease_namespace: Option<String>,
    /// How long a leader's lease lasts without renewal: a replica takes
    /// over at most this long after the leader died.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = go_duration)]
    lease_duration: Duration,
    /// Serve the validating admission webhook over TLS from this directory's
    /// `tls.crt` and `tls.key` (re-read when they change); without it no
    /// webhook is served.
    #[arg(long, value_name = "DIR")]
    webhook_cert_dir: Option<PathBuf>,
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:9443")]
    webhook_listen: SocketAddr,
    /// The user the API server names this operator as, the only one the
    /// webhook lets bind a claim (default: its ServiceAccount
    /// `system:serviceaccount:$POD_NAMESPACE:cnpool`).
    #[arg(long, value_name = "USER")]
    operator_user: Option<String>,
    /// Shadow mode: read and decide everything, write nothing (every write
    /// is sent with `dryRun=All`, HAKeeper is only read), and log each write
    /// it would have made, once.
    #[arg(long)]
    dry_run: bool,
}

/// Reads a flag's duration in Go's notation (`30s`, `1m30s`), as the CRDs do.
pub(crate) fn go_duration(text: &str) -> Result<Duration, cnpool_api::DurationError> {
    cnpool_api::GoDuration::new(text).parse()
}

/// A stall timeout: a duration of at least `MIN_STALL_TIMEOUT`.
fn stall_timeout(text: &str) -> Result<Duration, String> {
    let timeout = go_duration(text).map_err(|error| error.to_string())?;
    let least = cnpool_controllers::health::MIN_STALL_TIMEOUT;
    if timeout < least {
        return Err(format!("{text} is shorter than {}s: watches are renewed every third of it", least.as_secs()));
    }
    Ok(timeout)
}

pub async fn run(args: OperatorArgs) -> anyhow::Result<()> {
    let identity = match args.identity.clone() {
        Some(identity) => identity,
        None => hostname().context("--identity: no $POD_NAME and no host name; name this instance")?,
    };
    let mut metrics_registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(Metrics::register(&mut metrics_registry));
    let namespaces = scopes(&args.namespace)?;
    let morpc_metrics = MorpcMetrics::register(&mut metrics_registry);
    crate::process::register(&mut metrics_registry);
    let telemetry =
        Telemetry::for_scopes(Arc::clone(&metrics), namespaces.len()).with_stall_timeout(args.stall_timeout);
    let shadow = args.dry_run.then(|| Arc::new(shadow::Report::register(&mut metrics_registry)));
    let kube_config = kube_config(args.kubeconfig.as_deref()).await?;
    let default_namespace = kube_config.default_namespace.clone();
    let client = client(kube_config, &telemetry, (args.qps, args.burst), shadow.clone())?;
    check_discovery(&args.hakeeper_discovery)?;
    let withheld = shadow.clone();
    let registries = RegistryFactory {
        default_address: args.hakeeper_discovery.clone(),
        open: Arc::new(move |address: &str| {
            let client = MorpcRegistry::observed(MorpcOptions::new(address), morpc_metrics.clone());
            shadow::Registry::new(client, withheld.clone())
        }),
    };
    let config = cnpool_controllers::Config {
        workers: args.workers,
        store_missing_bound: args.store_missing_bound,
        store_registration_grace: args.store_registration_grace,
        store_removal_timeout: args.store_removal_timeout,
        migration_propagation_delay: args.migration_propagation_delay,
        resync: args.resync,
        instance: identity.clone(),
        operator_namespace: args.lease_namespace.clone().unwrap_or_else(|| default_namespace.clone()),
        hakeeper_discovery: args.hakeeper_discovery.clone(),
        ..shadow_timing(args.dry_run)
    };
    tracing::info!(
        identity = %identity,
        namespaces = %scope_names(&namespaces),
        workers = config.workers,
        hakeeper_discovery = %args.hakeeper_discovery,
        leader_elect = args.leader_elect,
        dry_run = args.dry_run,
        "cnpool operator starting"
    );
    let shutdown = shutdown_signal().boxed().shared();

    // The webhook first: claim creation fails closed while it is away.
    let mut servers = tokio::task::JoinSet::new();
    if let Some(dir) = &args.webhook_cert_dir {
        let user = match &args.operator_user {
            Some(user) => cnpool_webhook::OperatorIdentity::username(user.clone()),
            None => {
                let namespace = args.lease_namespace.as_deref().context(
                    "--webhook-cert-dir: name the operator's user with --operator-user, or set $POD_NAMESPACE",
                )?;
                cnpool_webhook::OperatorIdentity::service_account(namespace, "cnpool")
            }
        };
        let listener = std::net::TcpListener::bind(args.webhook_listen)
            .with_context(|| format!("--webhook-listen {}: cannot bind", args.webhook_listen))?;
        listener.set_nonblocking(true).context("webhook listener")?;
        let address = listener.local_addr().context("webhook listener")?;
        let tls = cnpool_webhook::TlsFiles { cert: dir.join("tls.crt"), key: dir.join("tls.key") };
        let app = cnpool_webhook::router(user);
        let serving = cnpool_webhook::serve_tls(listener, app, tls, Duration::from_secs(30), shutdown.clone());
        servers.spawn(async move { serving.await.context("the admission webhook") });
        tracing::info!(%address, "admission webhook listening");
    }
    let probe_listener = tokio::net::TcpListener::bind(args.probe_listen)
        .await
        .with_context(|| format!("--probe-listen {}: cannot bind", args.probe_listen))?;
    let probe_state = probes::State::new(metrics_registry, telemetry.clone(), args.leader_elect);
    let probes = probes::serve(probe_listener, probe_state.clone(), shutdown.clone());
    servers.spawn(async move { probes.await.context("the probe and metrics endpoints") });

    let controllers = async {
        if args.leader_elect {
            let namespace = args.lease_namespace.clone().unwrap_or(default_namespace);
            let lease =
                LeaseSettings { name: args.lease_name.clone(), namespace, identity, duration: args.lease_duration };
            let controllers = Controllers { client, registries, config, namespaces, telemetry };
            lead_then_run(controllers, probe_state, lease, shutdown).await
        } else {
            probe_state.set_standing_by(false);
            metrics.set_leader(true);
            Controllers { client, registries, config, namespaces, telemetry }.run(shutdown).await;
            Ok(())
        }
    };
    // A server that fails (a bad certificate, say) stops the operator rather
    // than leave it running without its webhook or probes.
    let mut controllers = std::pin::pin!(controllers);
    loop {
        tokio::select! {
            result = &mut controllers => break result?,
            Some(ended) = servers.join_next() => match ended {
                // It stopped for the shutdown.
                Ok(Ok(())) => {}
                Ok(Err(error)) => return Err(error),
                Err(error) => return Err(anyhow::Error::from(error).context("a server task failed")),
            },
        }
    }
    while let Some(ended) = servers.join_next().await {
        if let Ok(Err(error)) = ended {
            tracing::warn!(error = format!("{error:#}"), "a server stopped with an error");
        }
    }
    if let Some(report) = shadow {
        report.log_summary();
    }
    tracing::info!("cnpool operator stopped");
    Ok(())
}

/// The controllers' requeue timing. After a write the controllers look again
/// soon, expecting their cache to show it; in shadow mode it never will, so
/// they look again only every 10 s, backing off to 5 min, instead of
/// repeating the same withheld decisions five times a second.
fn shadow_timing(dry_run: bool) -> cnpool_controllers::Config {
    let defaults = cnpool_controllers::Config::default();
    if !dry_run {
        return defaults;
    }
    cnpool_controllers::Config {
        requeue_min: Duration::from_secs(10),
        requeue_max: Duration::from_secs(300),
        ..defaults
    }
}

/// The namespaces `--namespace` names, each once, in order; none means all.
fn scopes(flags: &[String]) -> anyhow::Result<Vec<String>> {
    let mut namespaces: Vec<String> = Vec::new();
    for name in flags.iter().map(|name| name.trim()) {
        anyhow::ensure!(
            !name.is_empty(),
            "--namespace: an empty namespace name; name one, or leave the flag out for all"
        );
        if !namespaces.iter().any(|known| known == name) {
            namespaces.push(name.to_owned());
        }
    }
    Ok(namespaces)
}

fn scope_names(namespaces: &[String]) -> String {
    if namespaces.is_empty() { "(all)".to_owned() } else { namespaces.join(",") }
}

/// The controllers to run: over the whole cluster when `namespaces` is
/// empty, else one set per namespace, side by side (each with its own
/// watches and caches, all reporting to one telemetry), so that the
/// operator needs rights in those namespaces only.
struct Controllers<R> {
    client: kube::Client,
    registries: RegistryFactory<R>,
    config: cnpool_controllers::Config,
    namespaces: Vec<String>,
    telemetry: Telemetry,
}

/// How each set of controllers opens its clients, one per MatrixOne
/// cluster its pools use: each set (a namespace, a leadership term) keeps
/// its own, so that a set dropping a cluster closes nothing another uses.
struct RegistryFactory<R> {
    /// `--hakeeper-discovery`: pools without deps.
    default_address: String,
    open: Arc<dyn Fn(&str) -> R + Send + Sync>,
}

impl<R: 'static> RegistryFactory<R> {
    fn registries(&self) -> cnpool_controllers::Registries<R> {
        let open = Arc::clone(&self.open);
        cnpool_controllers::Registries::new(self.default_address.clone(), move |address: &str| open(address))
    }
}

impl<R: StoreRegistry + 'static> Controllers<R> {
    /// Runs them until `shutdown`.
    async fn run(&self, shutdown: Shared<BoxFuture<'static, ()>>) {
        self.telemetry.restart();
        let scoped: Vec<Option<String>> =
            if self.namespaces.is_empty() { vec![None] } else { self.namespaces.iter().cloned().map(Some).collect() };
        let sets = scoped.into_iter().map(|namespace| {
            let config = cnpool_controllers::Config { namespace, ..self.config.clone() };
            cnpool_controllers::run_observed(
                self.client.clone(),
                self.registries.registries(),
                config,
                self.telemetry.clone(),
                shutdown.clone(),
            )
        });
        futures::future::join_all(sets).await;
    }
}

struct LeaseSettings {
    name: String,
    namespace: String,
    identity: String,
    duration: Duration,
}

/// Waits for the lease, runs the controllers while it is held, and stands
/// by again when it is lost, until `shutdown`; then gives the lease up so
/// that another replica takes over at once.
async fn lead_then_run<R: StoreRegistry + 'static>(
    controllers: Controllers<R>,
    probes: probes::State,
    lease: LeaseSettings,
    shutdown: Shared<BoxFuture<'static, ()>>,
) -> anyhow::Result<()> {
    let telemetry = controllers.telemetry.clone();
    let seconds = lease.duration.as_secs().max(2);
    let manager = kube_lease_manager::LeaseManagerBuilder::new(controllers.client.clone(), &lease.name)
        .with_namespace(&lease.namespace)
        .with_identity(&lease.identity)
        .with_duration(seconds)
        // Renew with a third of the lease left, so one slow renewal is no loss.
        .with_grace((seconds / 3).max(1))
        .build()
        .await
        .with_context(|| {
            format!(
                "leader election: cannot use Lease {}/{} (on a server without server-side apply, such as \
                 cnpool dev's, run with --leader-elect=false)",
                lease.namespace, lease.name
            )
        })?;
    let (mut leading, election) = manager.watch().await;
    let mut shutdown_seen = std::pin::pin!(shutdown.clone());
    loop {
        tracing::info!(lease = %lease.name, identity = %lease.identity, "standing by for the leader lease");
        tokio::select! {
            () = &mut shutdown_seen => break,
            changed = leading.wait_for(|leads| *leads) => if changed.is_err() { break },
        }
        tracing::info!(lease = %lease.name, identity = %lease.identity, "leading: controllers start");
        telemetry.metrics.set_leader(true);
        probes.set_standing_by(false);
        let (stop, _) = watch::channel(false);
        let stopped = {
            let mut stopped = stop.subscribe();
            async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            }
        };
        let running = controllers.run(stopped.boxed().shared());
        let mut running = std::pin::pin!(running);
        let lost = tokio::select! {
            () = &mut shutdown_seen => false,
            _ = leading.wait_for(|leads| !*leads) => true,
            () = &mut running => false,
        };
        let _ = stop.send(true);
        running.await;
        telemetry.metrics.set_leader(false);
        probes.set_standing_by(true);
        if !lost {
            break;
        }
        tracing::warn!(lease = %lease.name, identity = %lease.identity, "lost the leader lease: controllers stopped");
    }
    drop(leading);
    match election.await {
        Ok(Ok(manager)) => {
            if let Err(error) = manager.release().await {
                tracing::warn!(%error, "could not give the leader lease up; the next leader waits for it to expire");
            }
        }
        Ok(Err(error)) => tracing::warn!(%error, "leader election ended with an error"),
        Err(error) => tracing::warn!(%error, "leader election task failed"),
    }
    Ok(())
}

/// Refuses a `--hakeeper-discovery` that is not `host:port`.
pub(crate) fn check_discovery(discovery: &str) -> anyhow::Result<()> {
    let valid = discovery.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !valid {
        anyhow::bail!(
            "--hakeeper-discovery {discovery:?}: expected host:port of the log set's discovery service, \
             e.g. mo-log-discovery.mo.svc:32001"
        );
    }
    Ok(())
}

/// The client configuration of `kubeconfig`, else of `$KUBECONFIG`, else
/// of the in-cluster service account.
pub async fn kube_config(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Config> {
    match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}: cannot read the kubeconfig", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("--kubeconfig {}: the current context is unusable", path.display()))
        }
        None => kube::Config::infer()
            .await
            .context("no cluster to talk to: pass --kubeconfig, set KUBECONFIG, or run in a pod"),
    }
}

/// A client that counts its requests in `telemetry` (and tells its health of
/// each renewed watch), keeps to `qps` on
/// average with bursts of `burst` (qps 0: no limit), and in shadow mode
/// sends every write as a dry run.
fn client(
    config: kube::Config,
    telemetry: &Telemetry,
    (qps, burst): (u32, u32),
    shadow: Option<Arc<shadow::Report>>,
) -> anyhow::Result<kube::Client> {
    // A window of `burst` requests per `burst / qps` seconds.
    let limit = (qps > 0).then(|| {
        let window = Duration::from_secs_f64(f64::from(burst) / f64::from(qps));
        tower::limit::RateLimitLayer::new(u64::from(burst), window)
    });
    let builder = kube::client::ClientBuilder::try_from(config).context("building the Kubernetes client")?;
    let builder = builder.with_layer(&CountRequestsLayer::new(telemetry));
    let builder = builder.with_layer(&shadow::DryRunLayer::new(shadow));
    let builder = builder.with_layer(&tower::util::option_layer(limit));
    Ok(builder.build())
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
}

/// Completes on SIGTERM (how Kubernetes stops a pod) or Ctrl-C.
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; stopping on Ctrl-C only");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = terminate => tracing::info!("SIGTERM: stopping"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: stopping"),
    }
}
