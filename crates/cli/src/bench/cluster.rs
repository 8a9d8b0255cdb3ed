//! Cases with the operator as its own process: `cnpool operator` beside a
//! `cnpool dev --no-operator` (the simulated kubelet, CNs and HAKeeper over
//! morpc), both children of this process, killed when the case ends
//! (also on error). Their logs go to a directory the table names.
//!
//! - [`real`] (B2): a burst of binds against a real kube-apiserver.
//! - [`memory`] (B5): the operator's peak RSS over large caches.
//! - [`serial`] (B6): claims bound one at a time from a warm pool, against
//!   a real kube-apiserver.

mod ceiling;
mod memory;
mod real;
mod serial;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use cnpool_api::{CNClaim, CNPool, CNPoolStatus, ClaimPhase};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

pub(super) use crate::metrics_text::Metrics;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub use memory::{MemoryArgs, memory};
pub use real::{RealArgs, real};
pub use serial::{SerialArgs, serial};

/// The operator's request counter.
pub(super) const OPERATOR_REQUESTS: &str = "cnpool_api_requests_total";

/// The pool every case fills and binds from.
pub(super) const POOL: &str = "bench";

/// A child process of the case, killed (and reaped) when dropped.
pub(super) struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Starts `cnpool ARGS`, its stdout and stderr to `logs/NAME.log`.
    fn start(name: &'static str, args: &[String], logs: &Path) -> anyhow::Result<Self> {
        let binary = std::env::current_exe().context("finding the cnpool binary to start")?;
        let log = logs.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(binary)
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(file.try_clone().with_context(|| format!("opening {} twice", log.display()))?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting cnpool {name}"))?;
        Ok(Self { name, child, log })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails, naming the log, if the process has exited.
    fn ensure_running(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait().with_context(|| format!("checking on cnpool {}", self.name))? {
            None => Ok(()),
            Some(status) => anyhow::bail!("cnpool {} exited ({status}); see {}", self.name, self.log.display()),
        }
    }

    /// The process's peak resident set (VmHWM), in MiB.
    fn peak_rss_mib(&self) -> anyhow::Result<f64> {
        let path = format!("/proc/{}/status", self.pid());
        let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let kib = status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .with_context(|| format!("{path} has no VmHWM line"))?;
        Ok(kib / 1024.0)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback address no one listens on now, for a child to bind.
fn free_port() -> anyhow::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free loopback port")?;
    listener.local_addr().context("finding a free loopback port")
}

/// A directory for the case's logs, named after the case and this process.
fn log_dir(case: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("cnpool-bench-{case}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Polls `check` every 200 ms until it answers `Some`, failing after
/// `within` with `what` and the last thing `check` saw. `process`, when
/// given, must keep running meanwhile.
pub(super) async fn wait_for<T, F, Fut>(
    what: &str,
    within: Duration,
    mut process: Option<&mut Process>,
    mut check: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    loop {
        if let Some(process) = process.as_deref_mut() {
            process.ensure_running().with_context(|| format!("waiting for {what}"))?;
        }
        match check().await {
            Ok(value) => return Ok(value),
            Err(seen) if started.elapsed() > within => {
                anyhow::bail!("{what}: not within {}s; last seen: {seen}", within.as_secs())
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The simulated node side: `cnpool dev --no-operator`, against the cluster
/// of a kubeconfig or serving the embedded API server itself.
struct NodeSide {
    process: Process,
    /// The simulated HAKeeper's address (morpc), the operator's discovery address.
    discovery: SocketAddr,
}

impl NodeSide {
    /// Starts it against the cluster of `kubeconfig`.
    async fn against(kubeconfig: &Path, logs: &Path) -> anyhow::Result<Self> {
        Self::start(&["--cluster".to_owned(), kubeconfig.display().to_string()], logs).await
    }

    /// Starts it serving the embedded API server on loopback, its
    /// kubeconfig written to `kubeconfig`.
    async fn serving(kubeconfig: &Path, logs: &Path) -> anyhow::Result<Self> {
        let api = ["--listen".to_owned(), free_port()?.to_string()];
        Self::start(&[&api[..], &["--kubeconfig".to_owned(), kubeconfig.display().to_string()]].concat(), logs).await
    }

    async fn start(api: &[String], logs: &Path) -> anyhow::Result<Self> {
        let discovery = free_port()?;
        let mut args = vec!["dev".to_owned(), "--no-operator".to_owned(), "--hakeeper-listen".to_owned()];
        args.push(discovery.to_string());
        args.extend_from_slice(api);
        let mut process = Process::start("dev", &args, logs)?;
        // HAKeeper binds after the CRDs are installed and the kubeconfig is
        // written, just before the node side starts.
        wait_for("the simulated HAKeeper", Duration::from_secs(60), Some(&mut process), || async {
            tokio::net::TcpStream::connect(discovery).await.map(drop).map_err(|error| error.to_string())
        })
        .await?;
        Ok(Self { process, discovery })
    }
}

/// A `cnpool operator` process, scoped to one namespace, without leader
/// election (the embedded server has no server-side apply, and one
/// replica needs none).
struct Operator {
    process: Process,
    probes: SocketAddr,
}

/// How a note names the operator's `--workers`.
fn workers_flag(workers: Option<u16>) -> String {
    workers.map_or_else(|| "at its default --workers".to_owned(), |workers| format!("--workers {workers}"))
}

impl Operator {
    async fn start(
        kubeconfig: &Path,
        namespace: &str,
        node_side: &NodeSide,
        workers: Option<u16>,
        logs: &Path,
    ) -> anyhow::Result<Self> {
        let probes = free_port()?;
        let mut args = [
            "operator",
            "--kubeconfig",
            &kubeconfig.display().to_string(),
            "--namespace",
            namespace,
            "--hakeeper-discovery",
            &node_side.discovery.to_string(),
            "--leader-elect=false",
            "--identity",
            "cnpool-bench",
            "--probe-listen",
            &probes.to_string(),
        ]
        .map(str::to_owned)
        .to_vec();
        // Without a number, the operator's own default.
        if let Some(workers) = workers {
            args.extend(["--workers".to_owned(), workers.to_string()]);
        }
        let process = Process::start("operator", &args, logs)?;
        let mut operator = Self { process, probes };
        let address = operator.probes;
        wait_for(
            "the operator's caches listed (/readyz)",
            Duration::from_secs(300),
            Some(&mut operator.process),
            || async move {
                match http_get(address, "/readyz").await {
                    Ok((200, _)) => Ok(()),
                    Ok((code, body)) => Err(format!("{code} {}", body.trim())),
                    Err(error) => Err(format!("{error:#}")),
                }
            },
        )
        .await?;
        Ok(operator)
    }

    /// The operator's /metrics, failing if it has exited.
    async fn metrics(&mut self) -> anyhow::Result<Metrics> {
        self.process.ensure_running()?;
        scrape(self.probes).await
    }
}

/// The /metrics of the operator whose probes are at `probes`.
async fn scrape(probes: SocketAddr) -> anyhow::Result<Metrics> {
    match http_get(probes, "/metrics").await? {
        (200, body) => Ok(Metrics(body)),
        (code, body) => anyhow::bail!("the operator's /metrics answered {code}: {}", body.trim()),
    }
}

/// A plain HTTP/1.0 GET: the status code and the body.
async fn http_get(address: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let mut stream =
        tokio::net::TcpStream::connect(address).await.with_context(|| format!("connecting to {address}"))?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.with_context(|| format!("GET {address}{path}"))?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.with_context(|| format!("GET {address}{path}: reading"))?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("GET {address}{path}: no status line in {head:?}"))?;
    Ok((code, body.to_owned()))
}

/// What a case against a real kube-apiserver runs in: the CRDs installed, a
/// namespace of its own, and the node side and the operator (at `workers`,
/// or its own default) as child processes, logging to `logs`. Fields drop in
/// order, so the operator stops before the node side it talks to.
struct RealCluster {
    client: kube::Client,
    namespace: String,
    logs: PathBuf,
    operator: Operator,
    node_side: NodeSide,
}

impl RealCluster {
    async fn start(kubeconfig: &Path, case: &str, workers: Option<u16>) -> anyhow::Result<Self> {
        let logs = log_dir(case)?;
        let config = crate::operator::kube_config(Some(kubeconfig)).await?;
        let client = kube::Client::try_from(config).context("--kubeconfig: building the Kubernetes client")?;
        crate::dev::install_crds(client.clone()).await?;
        let namespace = fresh_namespace(&client).await?;
        let node_side = NodeSide::against(kubeconfig, &logs).await?;
        let operator = Operator::start(kubeconfig, &namespace, &node_side, workers, &logs).await?;
        Ok(Self { client, namespace, logs, operator, node_side })
    }
}

/// A namespace of its own for the run, once pods can be created in it (a
/// 1.20 server refuses them until the default ServiceAccount has a token),
/// with the CRDs served.
async fn fresh_namespace(client: &kube::Client) -> anyhow::Result<String> {
    let seconds = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    let name = format!("cnpool-bench-{seconds}");
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
    wait_for("the namespace's default ServiceAccount token", Duration::from_secs(60), None, || async {
        let account = accounts.get_opt("default").await.map_err(|error| error.to_string())?;
        match account.and_then(|account| account.secrets).filter(|secrets| !secrets.is_empty()) {
            Some(_) => Ok(()),
            None => Err("no token yet".to_owned()),
        }
    })
    .await?;
    let pools: Api<CNPool> = Api::namespaced(client.clone(), &name);
    wait_for("the CRDs served", Duration::from_secs(60), None, || async {
        pools.list(&ListParams::default().limit(1)).await.map(drop).map_err(|error| error.to_string())
    })
    .await?;
    Ok(name)
}

/// Creates the pool the cases bind from: `size` warm pods and no more
/// (maxIdle = maxPods = size), so that binding them all makes no new pods.
pub(super) async fn create_pool(client: &kube::Client, namespace: &str, size: usize) -> anyhow::Result<()> {
    create_pool_of(client, namespace, size, Some(size)).await
}

/// Creates the pool with `max_idle` warm pods and at most `max_pods`.
pub(super) async fn create_pool_of(
    client: &kube::Client,
    namespace: &str,
    max_idle: usize,
    max_pods: Option<usize>,
) -> anyhow::Result<()> {
    let pool: CNPool = serde_json::from_value(json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNPool",
        "metadata": {"name": POOL, "namespace": namespace},
        "spec": {
            "template": {"image": "matrixorigin/matrixone:bench", "semanticVersion": "1.2.0"},
            "podLabels": {"tier": "standard"},
            "strategy": {"scaleStrategy": {"maxIdle": max_idle, "maxPods": max_pods}},
        },
    }))
    .context("building the pool")?;
    let pools: Api<CNPool> = Api::namespaced(client.clone(), namespace);
    pools.create(&PostParams::default(), &pool).await.context("creating the pool")?;
    Ok(())
}

/// Creates claims 0..`claims`, `creators` at a time; returns each one's
/// name and when its create was sent.
async fn create_claims(
    client: &kube::Client,
    namespace: &str,
    claims: usize,
    creators: usize,
) -> anyhow::Result<Vec<(String, Instant)>> {
    let api: Api<CNClaim> = Api::namespaced(client.clone(), namespace);
    futures::stream::iter(0..claims)
        .map(|index| {
            let api = api.clone();
            async move {
                let claim = claim(namespace, index)?;
                let sent = Instant::now();
                api.create(&PostParams::default(), &claim).await.with_context(|| format!("creating claim {index}"))?;
                Ok::<_, anyhow::Error>((claim_name(index), sent))
            }
        })
        .buffer_unordered(creators)
        .try_collect()
        .await
}

/// Claim `index` of a case: nominated to the pool, with a CN label of its
/// own, as a tenant's claim has.
pub(super) fn claim(namespace: &str, index: usize) -> anyhow::Result<CNClaim> {
    serde_json::from_value(json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNClaim",
        "metadata": {"name": claim_name(index), "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"tier": "standard"}},
            "poolName": POOL,
            "cnLabels": [{"key": "account", "values": [format!("tenant-{index}")]}],
            "ownerName": format!("tenant-{index}"),
        },
    }))
    .context("building a claim")
}

pub(super) fn claim_name(index: usize) -> String {
    format!("bench-{index:05}")
}

/// A count of the pool's status to wait for.
#[derive(Clone, Copy, Debug)]
pub(super) enum PoolCount {
    Idle,
    Bound,
}

impl PoolCount {
    pub(super) fn of(self, status: &CNPoolStatus) -> i32 {
        match self {
            Self::Idle => status.idle,
            Self::Bound => status.bound,
        }
    }
}

/// Waits until the pool's status counts `expected` pods as `count` says,
/// the operator's `process`, when it has one of its own, running meanwhile.
pub(super) async fn wait_for_pool(
    client: &kube::Client,
    namespace: &str,
    process: Option<&mut Process>,
    count: PoolCount,
    expected: usize,
    within: Duration,
) -> anyhow::Result<()> {
    let pools: Api<CNPool> = Api::namespaced(client.clone(), namespace);
    let what = format!("{expected} {count:?} pods in pool {namespace}/{POOL}");
    wait_for(&what, within, process, || async {
        let pool = pools.get(POOL).await.map_err(|error| error.to_string())?;
        let status = pool.status.unwrap_or_default();
        let seen = count.of(&status);
        if usize::try_from(seen).is_ok_and(|seen| seen == expected) {
            Ok(())
        } else {
            Err(format!("{seen} {count:?} of {} pods", status.replicas))
        }
    })
    .await
}

/// The `q` quantile of `sorted` (nearest rank).
pub(super) fn quantile(latencies: &[Duration], q: f64) -> f64 {
    let mut sorted: Vec<f64> = latencies.iter().map(Duration::as_secs_f64).collect();
    sorted.sort_by(f64::total_cmp);
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.saturating_sub(1)).copied().unwrap_or(f64::NAN)
}

pub(super) struct Burst {
    /// From the first create sent to the last claim seen Bound.
    pub(super) elapsed: Duration,
    /// Each claim's, from its create sent to its watch event showing Bound.
    pub(super) latencies: Vec<Duration>,
}

/// Creates `claims` claims, `creators` at a time, and times each from the
/// create sent to the watch event that shows it Bound.
pub(super) async fn burst(
    client: &kube::Client,
    namespace: &str,
    claims: usize,
    creators: usize,
) -> anyhow::Result<Burst> {
    let api: Api<CNClaim> = Api::namespaced(client.clone(), namespace);
    let listed = api.list(&ListParams::default().limit(1)).await.context("listing claims")?;
    let version = listed.metadata.resource_version.unwrap_or_default();
    let events = api.watch(&WatchParams::default(), &version).await.context("watching claims")?;
    let watching = tokio::spawn(bound_times(events.boxed(), claims, Duration::from_secs(120)));
    let started = Instant::now();
    let created = match create_claims(client, namespace, claims, creators).await {
        Ok(created) => created,
        Err(error) => {
            watching.abort();
            return Err(error);
        }
    };
    let bound = watching.await.context("the claim watch panicked")??;
    let mut latencies = Vec::new();
    for (name, sent) in created {
        let at = bound.get(&name).with_context(|| format!("claim {name} was not seen Bound"))?;
        latencies.push(at.saturating_duration_since(sent));
    }
    let last = bound.values().max().copied().unwrap_or(started);
    Ok(Burst { elapsed: last.saturating_duration_since(started), latencies })
}

type ClaimEvents = futures::stream::BoxStream<'static, Result<WatchEvent<CNClaim>, kube::Error>>;

/// When each claim was first seen Bound, until `claims` have been.
async fn bound_times(
    mut events: ClaimEvents,
    claims: usize,
    within: Duration,
) -> anyhow::Result<HashMap<String, Instant>> {
    let deadline = tokio::time::Instant::now() + within;
    let mut bound = HashMap::new();
    while bound.len() < claims {
        let event = tokio::time::timeout_at(deadline, events.next()).await.map_err(|_| {
            anyhow::anyhow!("only {} of {claims} claims Bound within {}s", bound.len(), within.as_secs())
        })?;
        match event {
            Some(Ok(WatchEvent::Added(claim) | WatchEvent::Modified(claim))) => {
                if claim.phase() == Some(ClaimPhase::Bound) {
                    let name = claim.metadata.name.unwrap_or_default();
                    bound.entry(name).or_insert_with(Instant::now);
                }
            }
            Some(Ok(WatchEvent::Error(status))) => anyhow::bail!("the claim watch failed: {}", status.message),
            Some(Ok(_)) => {}
            Some(Err(error)) => return Err(anyhow::Error::from(error).context("the claim watch failed")),
            None => anyhow::bail!("the claim watch ended with {} of {claims} claims Bound", bound.len()),
        }
    }
    Ok(bound)
}
