//! `cnpool dev`: a local cluster that moves — the embedded API server, the
//! operator and a simulated node side (kubelet, CN processes, HAKeeper) —
//! that a newcomer can point kubectl at; or, with `--cluster`, the operator
//! and the simulated node side against an existing cluster.
//!
//! The simulated HAKeeper is served over MatrixOne's morpc protocol on
//! loopback, and the operator — the one inside, or a `cnpool operator`
//! started beside `cnpool dev --no-operator` — talks to it with the same
//! client it uses against a real MatrixOne cluster. SIGUSR1 stops the
//! simulated HAKeeper (its state kept, as a restarted HAKeeper keeps its
//! log) and the next SIGUSR1 starts it again on the same port, to watch the
//! operator ride out an outage.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use cnpool_morpc::server::HaKeeperServer;
use cnpool_registry::memory::MemoryRegistry;
use futures::FutureExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
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
    /// Address to serve the simulated HAKeeper on (morpc over TCP, loopback
    /// only); it is also the log set's discovery address.
    #[arg(long, default_value = "127.0.0.1:32001")]
    hakeeper_listen: SocketAddr,
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

    let registry = cnpool_registry::memory::MemoryRegistry::new();
    let hakeeper = serve_hakeeper(args.hakeeper_listen, registry.clone()).await?;
    let discovery = hakeeper.local_addr().to_string();
    println!("cnpool dev: HAKeeper (morpc) on {discovery}; SIGUSR1 stops it, the next SIGUSR1 starts it again");
    let world_config = cnpool_world::WorldConfig { cn_query_services: true, ..Default::default() };
    let world = cnpool_world::World::new(client.clone(), registry.clone(), world_config);
    let mut tasks = vec![
        tokio::spawn(world.run(stopped())).boxed(),
        tokio::spawn(toggle_hakeeper_on_sigusr1(hakeeper, registry, stopped())).boxed(),
    ];
    if !args.no_operator {
        let config = cnpool_controllers::Config { namespace: args.namespace.clone(), ..Default::default() };
        let registry = crate::operator::morpc_registry(&discovery, cnpool_morpc::MorpcMetrics::default())?;
        tasks.push(tokio::spawn(cnpool_controllers::run(client, registry, config, stopped())).boxed());
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

async fn serve_hakeeper(address: SocketAddr, registry: MemoryRegistry) -> anyhow::Result<HaKeeperServer> {
    if !address.ip().is_loopback() {
        anyhow::bail!(
            "--hakeeper-listen {address}: the simulated HAKeeper only listens on loopback; use 127.0.0.1:PORT"
        );
    }
    HaKeeperServer::bind(address, registry)
        .await
        .with_context(|| format!("--hakeeper-listen {address}: cannot bind; is the port in use?"))
}

/// Stops and restarts the simulated HAKeeper on each SIGUSR1, on the port it
/// first bound, until `shutdown`.
async fn toggle_hakeeper_on_sigusr1(
    hakeeper: HaKeeperServer,
    registry: MemoryRegistry,
    shutdown: impl Future<Output = ()>,
) {
    let address = hakeeper.local_addr();
    let mut running = Some(hakeeper);
    let mut signals = match signal(SignalKind::user_defined1()) {
        Ok(signals) => signals,
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGUSR1; the simulated HAKeeper cannot be stopped");
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
                println!("cnpool dev: HAKeeper stopped (SIGUSR1 starts it again)");
                None
            }
            None => match HaKeeperServer::bind(address, registry.clone()).await {
                Ok(server) => {
                    println!("cnpool dev: HAKeeper started again on {address}");
                    Some(server)
                }
                Err(error) => {
                    println!("cnpool dev: HAKeeper cannot start again on {address}: {error}");
                    None
                }
            },
        };
    }
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
