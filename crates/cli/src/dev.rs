//! `cnpool dev`: a local cluster that moves — the embedded API server, the
//! operator and a simulated node side (kubelet, CN processes, HAKeeper) —
//! that a newcomer can point kubectl at; or, with `--cluster`, the operator
//! and the simulated node side against an existing cluster.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use futures::FutureExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
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
    let world = cnpool_world::World::new(client.clone(), registry.clone(), cnpool_world::WorldConfig::default());
    let mut tasks = vec![tokio::spawn(world.run(stopped())).boxed()];
    if !args.no_operator {
        let config = cnpool_controllers::Config { namespace: args.namespace.clone(), ..Default::default() };
        tasks.push(tokio::spawn(cnpool_controllers::run(client, registry, config, stopped())).boxed());
        println!("cnpool dev: operator and simulated node side running");
    } else {
        println!("cnpool dev: simulated node side running (no operator)");
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
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("--cluster {}: cannot read the kubeconfig", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .with_context(|| format!("--cluster {}: the kubeconfig's current context is unusable", path.display()))?;
    kube::Client::try_from(config).context("building a client for --cluster")
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
async fn install_crds(client: kube::Client) -> anyhow::Result<()> {
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
