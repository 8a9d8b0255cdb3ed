//! `cnpool dev`: a local cluster a newcomer can point kubectl at.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

#[derive(clap::Args)]
pub struct DevArgs {
    /// Address to serve the Kubernetes API on (plain HTTP, loopback only).
    #[arg(long, default_value = "127.0.0.1:8443")]
    listen: SocketAddr,
    /// Where to write a kubeconfig for kubectl and `cnpool operator`.
    #[arg(long, default_value = "cnpool-dev.kubeconfig")]
    kubeconfig: PathBuf,
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    if !args.listen.ip().is_loopback() {
        anyhow::bail!(
            "--listen {}: the dev server has no authentication, so it only listens on loopback; use 127.0.0.1:PORT",
            args.listen
        );
    }
    let server = cnpool_apiserver::ApiServer::default();
    install_crds(server.client()).await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("--listen {}: cannot bind; is the port in use?", args.listen))?;
    let address = listener.local_addr().context("reading the bound address")?;
    std::fs::write(&args.kubeconfig, kubeconfig(address))
        .with_context(|| format!("--kubeconfig {}: cannot write the kubeconfig", args.kubeconfig.display()))?;
    println!("cnpool dev: Kubernetes API on http://{address}");
    println!("  export KUBECONFIG={}", args.kubeconfig.display());
    println!("  kubectl apply -f examples/    # then: kubectl get cnclaims");
    tokio::select! {
        served = server.serve(listener) => served.context("serving the API")?,
        _ = tokio::signal::ctrl_c() => println!("cnpool dev: interrupted, stopping"),
    }
    Ok(())
}

/// The CRDs are there from the start, so that `kubectl apply -f examples/`
/// works at once.
async fn install_crds(client: kube::Client) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    for crd in cnpool_api::crd::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.create(&PostParams::default(), &crd).await.with_context(|| format!("installing CRD {name}"))?;
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
