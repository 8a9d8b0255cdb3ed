//! `cnpool dev`: a local cluster that moves — the embedded API server, the
//! operator and a simulated node side (kubelet, CN processes, HAKeeper) —
//! that a newcomer can point kubectl at; or, with `--cluster`, the operator
//! and the simulated node side against an existing cluster.
//!
//! Two simulated MatrixOne clusters, each with its HAKeeper served over
//! MatrixOne's morpc protocol on loopback, and the operator — the one
//! inside, or a `cnpool operator` started beside `cnpool dev
//! --no-operator` — talks to them with the same client it uses against a
//! real MatrixOne cluster. Each cluster has a LogSet (`mo` and `mo-b` in
//! namespace `default`, under a stand-in for matrixone-operator's LogSet
//! CRD) whose `status.discovery` is its HAKeeper, so that a pool's
//! `spec.deps.logSet` picks its cluster (examples/); a pool without deps
//! uses the first one (`--hakeeper-discovery`), and each CN registers in its
//! pool's cluster. SIGUSR1 stops the first HAKeeper, SIGUSR2 the second
//! (state kept, as a restarted HAKeeper keeps its log), and the same signal
//! starts it again on the same port, to watch the operator ride out one
//! cluster's outage while the other's pools go on.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use cnpool_morpc::server::HaKeeperServer;
use cnpool_morpc::{MorpcMetrics, MorpcOptions, MorpcRegistry};
use cnpool_registry::memory::MemoryRegistry;
use futures::FutureExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

#[derive(clap::Args)]
pub struct DevArgs {
    /// Address to serve the Kubernetes API on (plain HTTP, loopback only).
    #[arg(long, default_value = "127.0.0.1:8443")]
    listen: SocketAddr,
    /// Where to write a kubeconfig for kubectl and `cnpool operator`.
    #[arg(long, default_value = "cnpool-dev.kubeconfig")]
    kubeconfig: PathBuf,
    /// Run the operator and the simulated node side against the cluster of
    /// this kubeconfig instead of serving an embedded one.
    #[arg(long, value_name = "KUBECONFIG")]
    cluster: Option<PathBuf>,
    /// Only the API server and the simulated node side; no operator.
    #[arg(long)]
    no_operator: bool,
    /// Namespace the operator watches (default: all).
    #[arg(long)]
    namespace: Option<String>,
    /// Address to serve the first simulated HAKeeper on (morpc over TCP,
    /// loopback only); it is also the discovery address of LogSet `mo`, and
    /// the HAKeeper of pools without deps.
    #[arg(long, default_value = "127.0.0.1:32001")]
    hakeeper_listen: SocketAddr,
    /// Address to serve the second simulated MatrixOne cluster's HAKeeper
    /// on; the discovery address of LogSet `mo-b`.
    #[arg(long, default_value = "127.0.0.1:32002")]
    second_hakeeper_listen: SocketAddr,
}

/// One simulated MatrixOne cluster: its LogSet's name, its HAKeeper's
/// state, and the signal that stops and starts its HAKeeper.
struct SimulatedCluster {
    log_set: &'static str,
    registry: MemoryRegistry,
    hakeeper: HaKeeperServer,
    signal: (SignalKind, &'static str),
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    let (stop, _) = watch::channel(false);
    let stopped = || {
        let mut receiver = stop.subscribe();
        async move {
            let _ = receiver.wait_for(|stopped| *stopped).await;
        }
    };
    let (client, serving) = match &args.cluster {
        Some(path) => (cluster_client(path).await?, None),
        None => {
            let (client, serving) = serve_embedded(&args).await?;
            (client, Some(serving))
        }
    };
    install_crds(client.clone()).await?;

    let first = simulate_cluster("mo", args.hakeeper_listen, "--hakeeper-listen", SIGUSR1).await?;
    let second = simulate_cluster("mo-b", args.second_hakeeper_listen, "--second-hakeeper-listen", SIGUSR2).await?;
    let discovery = first.hakeeper.local_addr().to_string();
    println!("cnpool dev: HAKeeper (morpc) on {discovery}; SIGUSR1 stops it, the next SIGUSR1 starts it again");
    println!(
        "cnpool dev: second MatrixOne cluster's HAKeeper (morpc) on {}; SIGUSR2 stops it, the next SIGUSR2 starts it \
         again",
        second.hakeeper.local_addr()
    );
    publish_log_sets(&client, &[&first, &second]).await?;
    let world_config = cnpool_world::WorldConfig { cn_query_services: true, ..Default::default() };
    let world = cnpool_world::World::new(client.clone(), first.registry.clone(), world_config)
        .with_cluster(second.hakeeper.local_addr().to_string(), second.registry.clone());
    let mut tasks = vec![tokio::spawn(world.run(stopped())).boxed()];
    for cluster in [first, second] {
        tasks.push(tokio::spawn(toggle_hakeeper_on_signal(cluster, stopped())).boxed());
    }
    if !args.no_operator {
        let config = cnpool_controllers::Config { namespace: args.namespace.clone(), ..Default::default() };
        let registries = cnpool_controllers::Registries::new(discovery, |address: &str| {
            MorpcRegistry::observed(MorpcOptions::new(address), MorpcMetrics::default())
        });
        tasks.push(tokio::spawn(cnpool_controllers::run(client, registries, config, stopped())).boxed());
        println!("cnpool dev: operator and simulated node side running");
    } else {
        println!("cnpool dev: simulated node side running (no operator); start one with");
        println!("  cnpool operator --kubeconfig KUBECONFIG --hakeeper-discovery {discovery}");
    }
    match serving {
        Some(serving) => tokio::select! {
            served = serving => served.context("serving the API")?,
            _ = tokio::signal::ctrl_c() => println!("cnpool dev: interrupted, stopping"),
        },
        None => {
            tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
            println!("cnpool dev: interrupted, stopping");
        }
    }
    let _ = stop.send(true);
    for task in tasks {
        // A task that panicked has already said so; stopping goes on.
        let _ = task.await;
    }
    Ok(())
}

async fn cluster_client(path: &std::path::Path) -> anyhow::Result<kube::Client> {
    let config = crate::operator::kube_config(Some(path)).await.context("--cluster")?;
    kube::Client::try_from(config).context("--cluster: building the Kubernetes client")
}

const SIGUSR1: (SignalKind, &str) = (SignalKind::user_defined1(), "SIGUSR1");
const SIGUSR2: (SignalKind, &str) = (SignalKind::user_defined2(), "SIGUSR2");

/// A simulated MatrixOne cluster whose HAKeeper serves on `address` (the
/// value of `flag`), stopped and started by `signal`.
async fn simulate_cluster(
    log_set: &'static str,
    address: SocketAddr,
    flag: &str,
    signal: (SignalKind, &'static str),
) -> anyhow::Result<SimulatedCluster> {
    if !address.ip().is_loopback() {
        anyhow::bail!("{flag} {address}: the simulated HAKeeper only listens on loopback; use 127.0.0.1:PORT");
    }
    let registry = MemoryRegistry::new();
    let hakeeper = HaKeeperServer::bind(address, registry.clone())
        .await
        .with_context(|| format!("{flag} {address}: cannot bind; is the port in use?"))?;
    Ok(SimulatedCluster { log_set, registry, hakeeper, signal })
}

/// Stops and restarts the cluster's simulated HAKeeper on each of its
/// signal, on the port it first bound, until `shutdown`.
async fn toggle_hakeeper_on_signal(cluster: SimulatedCluster, shutdown: impl Future<Output = ()>) {
    let SimulatedCluster { log_set, registry, hakeeper, signal: (kind, name) } = cluster;
    let address = hakeeper.local_addr();
    // The first cluster's lines are the ones scripts and tests have read.
    let which = if log_set == "mo" { String::new() } else { format!(" of LogSet {log_set}") };
    let mut running = Some(hakeeper);
    let mut signals = match signal(kind) {
        Ok(signals) => signals,
        Err(error) => {
            tracing::warn!(%error, signal = name, "cannot listen for the signal; this simulated HAKeeper cannot be stopped");
            shutdown.await;
            return;
        }
    };
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = signals.recv() => {}
        }
        running = match running.take() {
            Some(server) => {
                server.shutdown().await;
                println!("cnpool dev: HAKeeper{which} stopped ({name} starts it again)");
                None
            }
            None => match HaKeeperServer::bind(address, registry.clone()).await {
                Ok(server) => {
                    println!("cnpool dev: HAKeeper{which} started again on {address}");
                    Some(server)
                }
                Err(error) => {
                    println!("cnpool dev: HAKeeper{which} cannot start again on {address}: {error}");
                    None
                }
            },
        };
    }
}

/// The namespace of the dev LogSets: the one `kubectl apply -f examples/`
/// puts the example pools in.
const LOG_SET_NAMESPACE: &str = "default";
/// Marks the LogSets `cnpool dev` made, so that it replaces only those.
const DEV_MANAGED: (&str, &str) = ("app.kubernetes.io/managed-by", "cnpool-dev");

/// Makes each cluster's LogSet say where its HAKeeper is (installing the
/// stand-in LogSet CRD where none is), as matrixone-operator's LogSet
/// controller would. A LogSet of that name `cnpool dev` did not make is left
/// alone, with a line saying so.
async fn publish_log_sets(client: &kube::Client, clusters: &[&SimulatedCluster]) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let stand_in = cnpool_api::crd::log_set_stand_in();
    let name = stand_in.metadata.name.clone().unwrap_or_default();
    if crds.get_opt(&name).await.with_context(|| format!("reading CRD {name}"))?.is_none() {
        crds.create(&PostParams::default(), &stand_in).await.with_context(|| format!("installing CRD {name}"))?;
    }
    let log_sets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), LOG_SET_NAMESPACE, &cnpool_api::hakeeper::log_set_resource());
    for cluster in clusters {
        let wanted = log_set(cluster.log_set, cluster.hakeeper.local_addr());
        // A CRD just created may take a moment to be served.
        let current = retry_while_not_served(|| log_sets.get_opt(cluster.log_set)).await?;
        let writing = || format!("writing LogSet {LOG_SET_NAMESPACE}/{}", cluster.log_set);
        match current {
            None => {}
            // Made again rather than replaced: without a status subresource
            // (the stand-in) every change of the status raises the
            // generation, and Synced would then name an older one.
            Some(current) if current.labels().get(DEV_MANAGED.0).map(String::as_str) == Some(DEV_MANAGED.1) => {
                log_sets.delete(cluster.log_set, &DeleteParams::default()).await.with_context(writing)?;
            }
            Some(_) => {
                println!(
                    "cnpool dev: LogSet {LOG_SET_NAMESPACE}/{} exists and is not cnpool dev's; left as it is",
                    cluster.log_set
                );
                continue;
            }
        };
        log_sets.create(&PostParams::default(), &wanted).await.with_context(writing)?;
        // matrixone-operator's own CRD has a status subresource, which drops
        // the status a create carries: it is written there too. The
        // stand-in has none (404), and kept it.
        let status = json!({"status": wanted.data["status"]});
        match log_sets.patch_status(cluster.log_set, &PatchParams::default(), &Patch::Merge(&status)).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error).with_context(writing),
        }
    }
    Ok(())
}

/// Calls `read` until the LogSet kind is served (at most 10 s).
async fn retry_while_not_served<T, F, Fut>(read: F) -> anyhow::Result<T>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match read().await {
            Err(kube::Error::Api(status)) if status.code == 404 && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            result => return result.context("reading the dev LogSets"),
        }
    }
}

/// The LogSet `name` of a simulated cluster whose HAKeeper is at `hakeeper`,
/// Ready and Synced as matrixone-operator leaves a running one.
fn log_set(name: &str, hakeeper: SocketAddr) -> DynamicObject {
    let ready = |type_: &str| {
        // observedGeneration: the pool controller, as Go, waits for Synced
        // at the LogSet's generation, which stays 1 (its spec never changes).
        json!({"type": type_, "status": "True", "reason": type_, "message": "simulated by cnpool dev",
               "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1})
    };
    let mut object = DynamicObject::new(name, &cnpool_api::hakeeper::log_set_resource()).within(LOG_SET_NAMESPACE);
    object.metadata.labels = Some([(DEV_MANAGED.0.to_owned(), DEV_MANAGED.1.to_owned())].into());
    object.data = json!({
        "spec": {"replicas": 1},
        "status": {
            "discovery": {"address": hakeeper.ip().to_string(), "port": hakeeper.port()},
            "conditions": [ready("Ready"), ready("Synced")],
        },
    });
    object
}

type Serving = futures::future::BoxFuture<'static, std::io::Result<()>>;

async fn serve_embedded(args: &DevArgs) -> anyhow::Result<(kube::Client, Serving)> {
    if !args.listen.ip().is_loopback() {
        anyhow::bail!(
            "--listen {}: the dev server has no authentication, so it only listens on loopback; use 127.0.0.1:PORT",
            args.listen
        );
    }
    let server = cnpool_apiserver::ApiServer::default();
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("--listen {}: cannot bind; is the port in use?", args.listen))?;
    let address = listener.local_addr().context("reading the bound address")?;
    std::fs::write(&args.kubeconfig, kubeconfig(address))
        .with_context(|| format!("--kubeconfig {}: cannot write the kubeconfig", args.kubeconfig.display()))?;
    println!("cnpool dev: Kubernetes API on http://{address}");
    println!("  export KUBECONFIG={}", args.kubeconfig.display());
    println!("  kubectl apply -f examples/    # then: kubectl get cnclaims");
    let client = server.client();
    let serving = async move { server.serve(listener).await }.boxed();
    Ok((client, serving))
}

/// The CRDs are there from the start (created, or updated to this
/// version's), so that `kubectl apply -f examples/` works at once.
pub(crate) async fn install_crds(client: kube::Client) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    for crd in cnpool_api::crd::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let exists = api.get_opt(&name).await.with_context(|| format!("reading CRD {name}"))?;
        let result = match exists {
            None => api.create(&Default::default(), &crd).await,
            Some(current) => {
                let mut desired = crd.clone();
                desired.metadata.resource_version = current.metadata.resource_version;
                api.replace(&name, &Default::default(), &desired).await
            }
        };
        result.with_context(|| format!("installing CRD {name}"))?;
    }
    Ok(())
}

fn kubeconfig(address: SocketAddr) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: cnpool-dev
  cluster:
    server: http://{address}
users:
- name: cnpool-dev
  user: {{}}
contexts:
- name: cnpool-dev
  context:
    cluster: cnpool-dev
    user: cnpool-dev
    namespace: default
current-context: cnpool-dev
"
    )
}
