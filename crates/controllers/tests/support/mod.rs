#![allow(dead_code)] // each test file uses a part of it
//! A cluster for the controllers' integration tests: an API server, the
//! simulated world and any number of operator instances, each with its own
//! client. The server is the embedded one, or — when `CNPOOL_E2E_KUBECONFIG`
//! names a kubeconfig — a real kube-apiserver reached over HTTPS, where each
//! cluster works in a fresh namespace of its own.
//!
//! The world and the operators run in the test's process ([`Cluster::new`]),
//! or as processes of the `cnpool` binary ([`Cluster::with_processes`]):
//! `cnpool dev --no-operator` and `cnpool operator`, talking morpc.
//! [`binding`] holds the scenarios that run both ways.

pub mod binding;
pub mod legacy;
mod processes;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cnpool_api::{CNClaim, CNClaimSet, CNPool, labels};
use cnpool_apiserver::ApiServer;
use cnpool_controllers::Config;
use cnpool_registry::memory::MemoryRegistry;
use cnpool_registry::{CnStore, StoreRegistry};
use cnpool_world::{World, WorldConfig};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchParams,
};
use kube::core::WatchEvent;
use serde_json::json;
use tokio::sync::watch;

pub const POOL: &str = "mo";
/// The HAKeeper of pools without deps (`--hakeeper-discovery`) for
/// in-process operators: the world's own registry.
pub const DEFAULT_HAKEEPER: &str = "hakeeper.test:32001";
const KUBECONFIG_VAR: &str = "CNPOOL_E2E_KUBECONFIG";
const OPERATOR_KUBECONFIG_VAR: &str = "CNPOOL_E2E_OPERATOR_KUBECONFIG";

/// Where a cluster's clients connect.
enum Target {
    Embedded(ApiServer),
    Real {
        kubeconfig: String,
    },
    /// The embedded server, served over HTTP by a `cnpool dev` process.
    ServedByDev {
        kubeconfig: PathBuf,
    },
}

impl Target {
    fn from_env() -> Self {
        match std::env::var(KUBECONFIG_VAR) {
            Ok(kubeconfig) => Self::Real { kubeconfig },
            Err(_) => Self::Embedded(ApiServer::default()),
        }
    }

    /// A client with connections of its own.
    async fn client(&self) -> kube::Client {
        match self {
            Self::Embedded(server) => server.client(),
            Self::Real { kubeconfig } => real_client(kubeconfig).await,
            Self::ServedByDev { kubeconfig } => real_client(kubeconfig).await,
        }
    }

    /// The kubeconfig operator processes use: on a real server the one
    /// `CNPOOL_E2E_OPERATOR_KUBECONFIG` names when set (CI's: the
    /// ServiceAccount bound to deploy/rbac), else the cluster's.
    fn operator_kubeconfig(&self) -> PathBuf {
        match self {
            Self::Embedded(_) => panic!("the in-process server has no kubeconfig"),
            Self::Real { kubeconfig } => {
                std::env::var_os(OPERATOR_KUBECONFIG_VAR).map_or_else(|| PathBuf::from(kubeconfig), PathBuf::from)
            }
            Self::ServedByDev { kubeconfig } => kubeconfig.clone(),
        }
    }
}

/// Who runs the simulated node side and the operators.
enum NodeSide {
    InProcess(World),
    Processes(processes::Processes),
}

async fn real_client(path: impl AsRef<Path>) -> kube::Client {
    kube::Client::try_from(real_config(path).await).expect("kube client")
}

fn client_without_retries(mut config: kube::Config) -> kube::Client {
    config.default_retry = false;
    kube::Client::try_from(config).expect("kube client")
}

async fn real_config(path: impl AsRef<Path>) -> kube::Config {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("the cluster's kubeconfig");
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("kube config")
}

pub struct Cluster {
    target: Target,
    pub ns: String,
    pub client: kube::Client,
    node_side: NodeSide,
    stop: watch::Sender<bool>,
    /// Namespaces a scenario made beside `ns`.
    others: Mutex<Vec<String>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Target::Real { kubeconfig } = &self.target {
            // Drop cannot await, and this runtime's clients cannot be driven
            // from inside it: clean up from a thread with a runtime and a
            // client of its own.
            let kubeconfig = kubeconfig.clone();
            let mut namespaces = vec![self.ns.clone()];
            namespaces.extend(self.others.lock().unwrap().drain(..));
            let cleanup = std::thread::spawn(move || {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
                runtime.block_on(async {
                    for ns in &namespaces {
                        let _ = tokio::time::timeout(Duration::from_secs(30), delete_namespace(&kubeconfig, ns)).await;
                    }
                });
            });
            let _ = cleanup.join();
        }
    }
}

/// Deletes `ns`, best effort: also removes the finalizers of its objects,
/// since no operator is left to remove them, and ends its pods' graceful
/// deletion, since no kubelet (the world) is left to confirm it.
async fn delete_namespace(kubeconfig: &str, ns: &str) {
    let client = real_client(kubeconfig).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(ns, &Default::default()).await;
    let no_finalizers = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    for resource in watched_resources() {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        let Ok(objects) = api.list(&ListParams::default()).await else { continue };
        for object in objects.items {
            if let Some(name) = object.metadata.name.filter(|_| object.metadata.finalizers.is_some()) {
                let _ = api.patch(&name, &PatchParams::default(), &no_finalizers).await;
            }
        }
    }
    let pods: Api<Pod> = Api::namespaced(client, ns);
    let _ = pods.delete_collection(&DeleteParams::default().grace_period(0), &ListParams::default()).await;
}

/// Deletes the cutover record an earlier test's operator processes left in
/// their own namespace (shared between tests on a real server: the one of
/// their kubeconfig), so that this cluster's operators record theirs afresh
/// after the objects a scenario leaves as the Go operator did.
async fn forget_cutover(target: &Target) {
    let operator_ns = real_config(target.operator_kubeconfig()).await.default_namespace;
    let records: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(target.client().await, &operator_ns);
    match records.delete(cnpool_controllers::cutover::RECORD, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(error) => panic!("delete the cutover record in {operator_ns}: {error}"),
    }
}

pub fn operator_config(ns: &str, instance: usize) -> Config {
    Config {
        namespace: Some(ns.into()),
        workers: 4,
        requeue_min: Duration::from_millis(50),
        requeue_max: Duration::from_secs(2),
        resync: Duration::from_secs(60),
        registry_poll: Duration::from_millis(100),
        store_missing_bound: Duration::from_secs(1),
        store_removal_timeout: Duration::from_secs(5),
        drain_poll: Duration::from_millis(100),
        drain_poll_max: Duration::from_secs(1),
        stats_interval: Duration::from_secs(1),
        drain_timeout: Duration::from_secs(60),
        drain_min_delay: Duration::from_millis(300),
        acquire_attempts: 3,
        migration_propagation_delay: Duration::from_millis(500),
        wake_interval: Duration::from_millis(50),
        pool_wake_interval: Duration::from_millis(200),
        instance: format!("cnpool-{instance}"),
        // The cluster's own namespace: each cluster is cnpool's first start.
        operator_namespace: ns.into(),
        ..Config::default()
    }
}

fn stopped(stop: &watch::Sender<bool>) -> impl Future<Output = ()> + Send + 'static {
    let mut rx = stop.subscribe();
    async move {
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

/// A namespace name no earlier run used.
fn fresh_namespace() -> String {
    static CLUSTERS: AtomicUsize = AtomicUsize::new(0);
    let millis = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
    format!("e2e-{}-{}-{}", std::process::id(), CLUSTERS.fetch_add(1, Ordering::Relaxed), millis % 1_000_000)
}

/// Creates namespace `ns` and, on a real server (`real`), waits until pods
/// can be created in it.
async fn create_namespace(client: &kube::Client, ns: &str, real: bool) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace");
    namespaces.create(&PostParams::default(), &namespace).await.expect("create the test namespace");
    if !real {
        return;
    }
    // Admission rejects pods until the namespace's default service account
    // has its token (the controller manager adds both).
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    eventually("the default service account has a token", Duration::from_secs(30), || async {
        let account = accounts.get_opt("default").await.map_err(|e| e.to_string())?;
        match account.and_then(|account| account.secrets).filter(|secrets| !secrets.is_empty()) {
            Some(_) => Ok(()),
            None => Err("no token yet".into()),
        }
    })
    .await;
}

/// Installs the CRDs (replacing any older version) and waits until they are served.
async fn install_crds(client: &kube::Client, ns: &str) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for mut crd in cnpool_api::crd::crds() {
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.reason == "AlreadyExists" => {
                let name = crd.metadata.name.clone().expect("CRD name");
                crd.metadata.resource_version = crds.get(&name).await.expect("installed CRD").metadata.resource_version;
                crds.replace(&name, &PostParams::default(), &crd).await.expect("update CRD");
            }
            Err(other) => panic!("install CRD: {other}"),
        }
    }
    eventually("the CRDs served", Duration::from_secs(30), || async {
        for resource in watched_resources() {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
            api.list(&ListParams::default().limit(1)).await.map_err(|e| format!("{}: {e}", resource.plural))?;
        }
        Ok(())
    })
    .await;
}

/// An in-process operator's clients: each HAKeeper address opens the
/// world's registry of that cluster.
fn registries_of(world: &World) -> cnpool_controllers::Registries<MemoryRegistry> {
    let world = world.clone();
    cnpool_controllers::Registries::new(DEFAULT_HAKEEPER, move |address: &str| world.cluster_registry(address))
}

impl Cluster {
    /// A cluster with the CRDs installed and the world running in this
    /// process; no operator yet.
    pub async fn new() -> Self {
        Self::with_world(WorldConfig::default()).await
    }

    /// [`Cluster::new`] with the simulated kubelet and CNs set up as `config` says.
    pub async fn with_world(config: WorldConfig) -> Self {
        Self::with_hakeepers(config, &[]).await
    }

    /// [`Cluster::with_world`] with a simulated HAKeeper of its own for each
    /// MatrixOne cluster of `addresses` (pools whose deps name one register
    /// their CNs there; [`World::cluster_registry`]).
    pub async fn with_hakeepers(config: WorldConfig, addresses: &[&str]) -> Self {
        let target = Target::from_env();
        let (stop, _) = watch::channel(false);
        // The world watches the pods of all namespaces; on a real server the
        // tests run one at a time, so it sees only this cluster's.
        let world = addresses
            .iter()
            .fold(World::new(target.client().await, MemoryRegistry::new(), config), |world, address| {
                world.with_cluster(*address, MemoryRegistry::new())
            });
        tokio::spawn(world.clone().run(stopped(&stop)));
        Self::with_node_side(target, NodeSide::InProcess(world), stop).await
    }

    /// A cluster whose node side is a `cnpool dev --no-operator` process of
    /// `binary`, serving the embedded API itself unless
    /// `CNPOOL_E2E_KUBECONFIG` names a real server; its operators are
    /// `cnpool operator` processes.
    pub async fn with_processes(binary: &str) -> Self {
        static DEVS: AtomicUsize = AtomicUsize::new(0);
        let tag = format!("{}-{}", std::process::id(), DEVS.fetch_add(1, Ordering::Relaxed));
        let (target, node_side) = match Target::from_env() {
            Target::Real { kubeconfig } => {
                let api = processes::Api::Cluster { kubeconfig: &kubeconfig };
                let node_side = processes::Processes::start(binary, api, &tag);
                let target = Target::Real { kubeconfig };
                forget_cutover(&target).await;
                (target, node_side)
            }
            _ => {
                let kubeconfig = std::env::temp_dir().join(format!("cnpool-e2e-{tag}.kubeconfig"));
                let node_side =
                    processes::Processes::start(binary, processes::Api::ServedByDev { kubeconfig: &kubeconfig }, &tag);
                (Target::ServedByDev { kubeconfig }, node_side)
            }
        };
        let (stop, _) = watch::channel(false);
        Self::with_node_side(target, NodeSide::Processes(node_side), stop).await
    }

    async fn with_node_side(target: Target, node_side: NodeSide, stop: watch::Sender<bool>) -> Self {
        let client = target.client().await;
        let ns = match &target {
            Target::Embedded(_) | Target::ServedByDev { .. } => "default".to_owned(),
            Target::Real { .. } => {
                let ns = fresh_namespace();
                create_namespace(&client, &ns, true).await;
                ns
            }
        };
        install_crds(&client, &ns).await;
        Self { target, ns, client, node_side, stop, others: Mutex::default() }
    }

    /// Starts one operator instance with its own client (its own process,
    /// for a cluster [`Cluster::with_processes`]).
    pub async fn start_operator(&self, instance: usize) {
        self.start_operator_with(instance, &[]).await;
    }

    /// [`Cluster::start_operator`], with `cnpool operator` flags `extra`
    /// for a cluster of processes.
    pub async fn start_operator_with(&self, instance: usize, extra: &[&str]) {
        match &self.node_side {
            NodeSide::InProcess(world) => {
                let run = cnpool_controllers::run(
                    self.target.client().await,
                    registries_of(world),
                    operator_config(&self.ns, instance),
                    stopped(&self.stop),
                );
                tokio::spawn(run);
            }
            NodeSide::Processes(processes) => {
                processes.start_operator(&self.target.operator_kubeconfig(), &self.ns, instance, extra)
            }
        }
    }

    /// Starts an in-process operator with `config`, reporting to `telemetry`.
    pub async fn start_operator_observed(&self, config: Config, telemetry: cnpool_controllers::Telemetry) {
        let run = cnpool_controllers::run_observed(
            self.target.client().await,
            registries_of(self.world()),
            config,
            telemetry,
            stopped(&self.stop),
        );
        tokio::spawn(run);
    }

    /// The kubeconfig the operators of this cluster use (for other
    /// processes of the `cnpool` binary, such as `cnpool doctor`).
    pub fn operator_kubeconfig(&self) -> PathBuf {
        self.target.operator_kubeconfig()
    }

    /// A client that answers a refusal at once: kube's default client
    /// retries a 429 (a refused eviction) up to 15 times, honouring the
    /// server's Retry-After (10 s from kube-apiserver 1.20), for minutes.
    pub async fn client_without_retries(&self) -> kube::Client {
        match &self.target {
            Target::Embedded(server) => server.client(),
            Target::Real { kubeconfig } => client_without_retries(real_config(kubeconfig).await),
            Target::ServedByDev { kubeconfig } => client_without_retries(real_config(kubeconfig).await),
        }
    }

    /// The cluster's namespace.
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// The in-process world, for scenarios that reach into it.
    pub fn world(&self) -> &World {
        match &self.node_side {
            NodeSide::InProcess(world) => world,
            NodeSide::Processes(_) => panic!("this scenario needs the in-process world"),
        }
    }

    /// The in-process HAKeeper, for scenarios that reach into it.
    pub fn registry(&self) -> &MemoryRegistry {
        self.world().registry()
    }

    /// The processes of a cluster [`Cluster::with_processes`].
    pub fn processes(&self) -> &processes::Processes {
        match &self.node_side {
            NodeSide::InProcess(_) => panic!("this scenario needs a cluster of processes"),
            NodeSide::Processes(processes) => processes,
        }
    }

    /// The store `uuid` as HAKeeper has it now.
    pub async fn store(&self, uuid: &str) -> Option<CnStore> {
        self.stores().await.into_iter().find(|store| store.uuid == uuid)
    }

    /// Every store HAKeeper has now.
    pub async fn stores(&self) -> Vec<CnStore> {
        match &self.node_side {
            NodeSide::InProcess(world) => world.registry().list_stores_now().expect("the in-memory HAKeeper"),
            NodeSide::Processes(processes) => processes.registry.list_stores().await.expect("HAKeeper over morpc"),
        }
    }

    /// Replaces the labels of the store `uuid`, as a tenant's CN had them.
    pub async fn label_store(&self, uuid: &str, labels: &cnpool_registry::StoreLabels) {
        match &self.node_side {
            NodeSide::InProcess(world) => world.registry().replace_labels_now(uuid, labels).expect("UpdateCNLabel"),
            NodeSide::Processes(processes) => {
                processes.registry.replace_labels(uuid, labels).await.expect("UpdateCNLabel over morpc")
            }
        }
    }

    /// Drops the store `uuid` from HAKeeper while its pod runs; returns
    /// whether it was registered.
    pub async fn vanish_store(&self, uuid: &str) -> bool {
        match &self.node_side {
            NodeSide::InProcess(world) => world.vanish_store(uuid),
            NodeSide::Processes(processes) => {
                let known = self.store(uuid).await.is_some();
                processes.registry.delete_store(uuid).await.expect("DeleteCNStore over morpc");
                known
            }
        }
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn claims(&self) -> Api<CNClaim> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn pools(&self) -> Api<CNPool> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Creates another namespace for the scenario, named after this
    /// cluster's with `suffix`; deleted with the cluster on a real server.
    pub async fn another_namespace(&self, suffix: &str) -> String {
        let ns = format!("{}-{suffix}", self.ns);
        create_namespace(&self.client, &ns, matches!(self.target, Target::Real { .. })).await;
        self.others.lock().unwrap().push(ns.clone());
        ns
    }

    pub async fn create_pool(&self, max_idle: i32, max_pods: Option<i32>) {
        self.create_pool_in(&self.ns, max_idle, max_pods).await;
    }

    /// [`Cluster::create_pool`] in namespace `ns`.
    pub async fn create_pool_in(&self, ns: &str, max_idle: i32, max_pods: Option<i32>) {
        let pool: CNPool = serde_json::from_value(json!({
            "apiVersion": "core.matrixorigin.io/v1alpha1",
            "kind": "CNPool",
            "metadata": {"name": POOL, "namespace": ns},
            "spec": {
                "template": {"image": "matrixorigin/matrixone:1.2.0"},
                "podLabels": {"tier": "standard"},
                "strategy": {
                    "scaleStrategy": {"maxIdle": max_idle, "maxPods": max_pods},
                    "drainStrategy": {"minDelay": "300ms", "timeout": "60s"},
                },
            },
        }))
        .expect("pool");
        let pools: Api<CNPool> = Api::namespaced(self.client.clone(), ns);
        pools.create(&PostParams::default(), &pool).await.expect("create pool");
    }

    pub async fn create_claim(&self, name: &str, cn_labels: &[(&str, &str)], additional: &[(&str, &str)]) -> CNClaim {
        self.create_claim_in(&self.ns, name, cn_labels, additional).await
    }

    /// [`Cluster::create_claim`] in namespace `ns`.
    pub async fn create_claim_in(
        &self,
        ns: &str,
        name: &str,
        cn_labels: &[(&str, &str)],
        additional: &[(&str, &str)],
    ) -> CNClaim {
        let cn_labels: Vec<_> = cn_labels.iter().map(|(k, v)| json!({"key": k, "values": [v]})).collect();
        let additional: BTreeMap<_, _> = additional.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let claim: CNClaim = serde_json::from_value(json!({
            "apiVersion": "core.matrixorigin.io/v1alpha1",
            "kind": "CNClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "selector": {"matchLabels": {"tier": "standard"}},
                "poolName": POOL,
                "cnLabels": cn_labels,
                "additionalPodLabels": additional,
                "ownerName": format!("owner-{name}"),
            },
        }))
        .expect("claim");
        let claims: Api<CNClaim> = Api::namespaced(self.client.clone(), ns);
        claims.create(&PostParams::default(), &claim).await.expect("create claim")
    }

    pub async fn pool_pods(&self) -> Vec<Pod> {
        let selector = format!("{}={POOL}", labels::POOL_NAME);
        self.pods().list(&ListParams::default().labels(&selector)).await.expect("list pods").items
    }

    pub async fn all_claims(&self) -> Vec<CNClaim> {
        self.claims().list(&ListParams::default()).await.expect("list claims").items
    }
}

pub fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

pub fn phase_count(pods: &[Pod], phase: &str) -> usize {
    pods.iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none() && label(pod, labels::PHASE) == Some(phase))
        .count()
}

pub fn claim_phase(claim: &CNClaim) -> Option<&'static str> {
    claim.phase().map(|phase| phase.as_str())
}

/// Waits until the claim `name` is Bound and returns its pod's name and UID.
pub async fn bound_pod(cluster: &Cluster, name: &str) -> (String, String) {
    eventually(&format!("{name} Bound"), Duration::from_secs(30), || async {
        let claim = cluster.claims().get(name).await.map_err(|e| e.to_string())?;
        let recorded = claim.status.as_ref().and_then(|status| status.store.as_ref());
        match (claim_phase(&claim), recorded.and_then(|store| store.pod_uid.clone())) {
            (Some("Bound"), Some(uid)) => Ok((claim.spec.pod_name.clone(), uid)),
            (phase, _) => Err(format!("phase {phase:?}")),
        }
    })
    .await
}

/// The reasons of the Lost states the claim `name` went through, in order,
/// each once per stretch.
pub fn loss_reasons(commits: &Commits, name: &str) -> Vec<String> {
    commits
        .states_of("cnclaims", name)
        .iter()
        .filter(|claim| claim["status"]["phase"] == "Lost")
        .filter_map(|claim| {
            let conditions = claim["status"]["conditions"].as_array()?;
            conditions.iter().find(|c| c["type"] == "Bound")?["reason"].as_str().map(str::to_owned)
        })
        .fold(Vec::new(), |mut reasons, reason| {
            if reasons.last() != Some(&reason) {
                reasons.push(reason);
            }
            reasons
        })
}

/// Polls `check` until it answers `Some`, or fails after `within` saying
/// what was awaited and what `check` last saw.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        match check().await {
            Ok(value) => return value,
            Err(seen) if start.elapsed() > within => panic!("{what}: not within {within:?}; last seen: {seen}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// The kinds the operator writes (besides Events), which `Commits` watches.
fn watched_resources() -> [ApiResource; 5] {
    [
        ApiResource::erase::<Pod>(&()),
        ApiResource::erase::<Service>(&()),
        ApiResource::erase::<CNPool>(&()),
        ApiResource::erase::<CNClaim>(&()),
        ApiResource::erase::<CNClaimSet>(&()),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Added,
    Modified,
    Deleted,
}

/// One committed write as a watch reported it.
pub struct Commit {
    pub plural: String,
    pub change: Change,
    pub resource_version: String,
    pub object: serde_json::Value,
    /// The object's state before this write, from the previous event.
    pub old: Option<serde_json::Value>,
    /// When the recorder saw it (a watch's lag after the write).
    pub seen_at: Instant,
}

/// Every write to the cluster's namespace from the recording's start on,
/// in order per kind: a watch of each kind the operator writes, started at
/// the resourceVersion of an initial list, so that no event is missed.
#[derive(Clone, Default)]
pub struct Commits {
    commits: Arc<Mutex<Vec<Arc<Commit>>>>,
    /// Why a watch stopped before the recording's end, if it did.
    broken: Arc<Mutex<Option<String>>>,
}

impl Commits {
    /// Starts recording the writes to `cluster`'s namespace; every write
    /// after this returns is recorded.
    pub async fn record(cluster: &Cluster) -> Self {
        let commits = Self::default();
        for resource in watched_resources() {
            let api: Api<DynamicObject> = Api::namespaced_with(cluster.target.client().await, &cluster.ns, &resource);
            let listed = api.list(&ListParams::default()).await.expect("initial list");
            let version = listed.metadata.resource_version.clone().expect("the list's resourceVersion");
            let known: HashMap<String, serde_json::Value> = listed
                .items
                .into_iter()
                .map(|object| (object.metadata.name.clone().unwrap_or_default(), to_json(&object)))
                .collect();
            tokio::spawn(commits.clone().follow(api, resource.plural, version, known));
        }
        commits
    }

    async fn follow(
        self,
        api: Api<DynamicObject>,
        plural: String,
        mut version: String,
        mut known: HashMap<String, serde_json::Value>,
    ) {
        // The server ends a watch after its timeout; the next one resumes
        // at the last version seen.
        loop {
            let mut events = match api.watch(&WatchParams::default().timeout(240), &version).await {
                Ok(events) => events.boxed(),
                Err(error) => return self.break_off(format!("{plural}: watch from {version}: {error}")),
            };
            while let Some(event) = events.next().await {
                let (change, object) = match event {
                    Ok(WatchEvent::Added(object)) => (Change::Added, object),
                    Ok(WatchEvent::Modified(object)) => (Change::Modified, object),
                    Ok(WatchEvent::Deleted(object)) => (Change::Deleted, object),
                    Ok(WatchEvent::Bookmark(bookmark)) => {
                        version = bookmark.metadata.resource_version;
                        continue;
                    }
                    Ok(WatchEvent::Error(status)) => {
                        return self.break_off(format!("{plural}: watch from {version}: {status:?}"));
                    }
                    Err(error) => return self.break_off(format!("{plural}: watch from {version}: {error}")),
                };
                let name = object.metadata.name.clone().unwrap_or_default();
                version = object.metadata.resource_version.clone().unwrap_or_default();
                let object = to_json(&object);
                let old = match change {
                    Change::Deleted => known.remove(&name),
                    Change::Added | Change::Modified => known.insert(name, object.clone()),
                };
                let seen_at = Instant::now();
                let commit =
                    Commit { plural: plural.clone(), change, resource_version: version.clone(), object, old, seen_at };
                self.commits.lock().unwrap().push(Arc::new(commit));
            }
        }
    }

    fn break_off(&self, why: String) {
        *self.broken.lock().unwrap() = Some(why);
    }

    /// The writes recorded so far; fails if a watch broke off, since then
    /// writes may be missing.
    pub fn snapshot(&self) -> Vec<Arc<Commit>> {
        if let Some(why) = self.broken.lock().unwrap().as_ref() {
            panic!("the commit recorder missed writes: {why}");
        }
        self.commits.lock().unwrap().clone()
    }

    /// Each write recorded so far as `plural name change`.
    pub fn summaries(&self) -> Vec<String> {
        self.snapshot()
            .iter()
            .map(|commit| format!("{} {} {:?}", commit.plural, commit.object["metadata"]["name"], commit.change))
            .collect()
    }

    /// The committed states of objects of `plural` named `name`, in order.
    pub fn states_of(&self, plural: &str, name: &str) -> Vec<serde_json::Value> {
        self.snapshot()
            .iter()
            .filter(|commit| commit.plural == plural && commit.object["metadata"]["name"] == name)
            .map(|commit| commit.object.clone())
            .collect()
    }
}

fn to_json(object: &DynamicObject) -> serde_json::Value {
    serde_json::to_value(object).unwrap_or_default()
}
