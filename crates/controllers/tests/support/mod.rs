#![allow(dead_code)] // each test file uses a part of it
//! A cluster for the controllers' integration tests: the embedded API
//! server, the simulated world and any number of operator instances, each
//! with its own client.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cnpool_api::{CNClaim, CNPool, labels};
use cnpool_apiserver::{ApiServer, Event};
use cnpool_controllers::Config;
use cnpool_registry::memory::MemoryRegistry;
use cnpool_world::{World, WorldConfig};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tokio::sync::watch;

pub const NS: &str = "default";
pub const POOL: &str = "mo";

pub struct Cluster {
    pub server: ApiServer,
    pub client: kube::Client,
    pub world: World,
    stop: watch::Sender<bool>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

pub fn operator_config(instance: usize) -> Config {
    Config {
        namespace: Some(NS.into()),
        workers: 4,
        requeue_min: Duration::from_millis(50),
        requeue_max: Duration::from_secs(2),
        resync: Duration::from_secs(60),
        registry_poll: Duration::from_millis(100),
        store_missing_bound: Duration::from_secs(1),
        store_removal_timeout: Duration::from_secs(5),
        drain_poll: Duration::from_millis(100),
        stats_interval: Duration::from_secs(1),
        drain_timeout: Duration::from_secs(60),
        drain_min_delay: Duration::from_millis(300),
        acquire_attempts: 3,
        instance: format!("cnpool-{instance}"),
    }
}

fn stopped(stop: &watch::Sender<bool>) -> impl Future<Output = ()> + Send + 'static {
    let mut rx = stop.subscribe();
    async move {
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

impl Cluster {
    /// A cluster with the CRDs installed and the world running; no operator yet.
    pub async fn new() -> Self {
        let server = ApiServer::default();
        let client = server.client();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in cnpool_api::crd::crds() {
            crds.create(&PostParams::default(), &crd).await.expect("install CRD");
        }
        let (stop, _) = watch::channel(false);
        let world = World::new(server.client(), MemoryRegistry::new(), WorldConfig::default());
        tokio::spawn(world.clone().run(stopped(&stop)));
        Self { server, client, world, stop }
    }

    /// Starts one operator instance with its own client.
    pub fn start_operator(&self, instance: usize) {
        let run = cnpool_controllers::run(
            self.server.client(),
            self.world.registry().clone(),
            operator_config(instance),
            stopped(&self.stop),
        );
        tokio::spawn(run);
    }

    pub fn registry(&self) -> &MemoryRegistry {
        self.world.registry()
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    pub fn claims(&self) -> Api<CNClaim> {
        Api::namespaced(self.client.clone(), NS)
    }

    pub fn pools(&self) -> Api<CNPool> {
        Api::namespaced(self.client.clone(), NS)
    }

    pub async fn create_pool(&self, max_idle: i32, max_pods: Option<i32>) {
        let pool: CNPool = serde_json::from_value(json!({
            "apiVersion": "core.matrixorigin.io/v1alpha1",
            "kind": "CNPool",
            "metadata": {"name": POOL, "namespace": NS},
            "spec": {
                "template": {"spec": {"containers": [{"name": "cn", "image": "matrixorigin/matrixone:test"}]}},
                "podLabels": {"tier": "standard"},
                "strategy": {
                    "scaleStrategy": {"maxIdle": max_idle, "maxPods": max_pods},
                    "drainStrategy": {"minDelay": "300ms", "timeout": "60s"},
                },
            },
        }))
        .expect("pool");
        self.pools().create(&PostParams::default(), &pool).await.expect("create pool");
    }

    pub async fn create_claim(&self, name: &str, cn_labels: &[(&str, &str)], additional: &[(&str, &str)]) -> CNClaim {
        let cn_labels: Vec<_> = cn_labels.iter().map(|(k, v)| json!({"key": k, "values": [v]})).collect();
        let additional: BTreeMap<_, _> = additional.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let claim: CNClaim = serde_json::from_value(json!({
            "apiVersion": "core.matrixorigin.io/v1alpha1",
            "kind": "CNClaim",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "selector": {"matchLabels": {"tier": "standard"}},
                "poolName": POOL,
                "cnLabels": cn_labels,
                "additionalPodLabels": additional,
                "ownerName": format!("owner-{name}"),
            },
        }))
        .expect("claim");
        self.claims().create(&PostParams::default(), &claim).await.expect("create claim")
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

/// Every write the API server commits from its creation on, kept in order.
#[derive(Clone, Default)]
pub struct Commits {
    events: Arc<Mutex<Vec<Arc<Event>>>>,
}

impl Commits {
    /// Starts recording `server`'s commits.
    pub fn record(server: &ApiServer) -> Self {
        let commits = Self::default();
        let mut receiver = server.commits();
        let events = commits.events.clone();
        tokio::spawn(async move {
            loop {
                match receiver.recv().await {
                    Ok(event) => events.lock().unwrap().push(event),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                        panic!("the commit recorder fell {missed} writes behind")
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        commits
    }

    pub fn snapshot(&self) -> Vec<Arc<Event>> {
        self.events.lock().unwrap().clone()
    }

    /// The committed states of objects of `plural` named `name`, in order.
    pub fn states_of(&self, plural: &str, name: &str) -> Vec<serde_json::Value> {
        self.snapshot()
            .iter()
            .filter(|event| event.storage.plural == plural && event.object["metadata"]["name"] == name)
            .map(|event| event.object.clone())
            .collect()
    }
}
