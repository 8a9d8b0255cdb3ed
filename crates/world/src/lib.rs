//! The simulated node side of a cnpool cluster: what a kubelet and the CN
//! processes it runs would do, against any Kubernetes API (the embedded one
//! in tests, `cnpool dev` and the simulator).
//!
//! - **Start**: a pool pod (labelled `pool-name`) is scheduled and started
//!   `start_delay` after the world first sees it: bound to the first of the
//!   world's nodes whose Node object is not cordoned (`spec.unschedulable`;
//!   a node without a Node object counts as schedulable), then
//!   status Running and Ready with a container start time and a pod IP;
//!   then its CN registers its store with HAKeeper under the UUID its DNS
//!   name gives ([`cnpool_api::cn_store_uuid`]).
//! - **Sessions**: a CN whose pod turns Bound gets `sessions_per_cn`
//!   sessions; once the pod is no longer Bound they leave after
//!   `session_leave_delay`.
//! - **Stop**: a pod being deleted has its containers stopped after
//!   `stop_delay`, which ends its CN (its store leaves HAKeeper); once no
//!   finalizer holds the pod any more, the world completes the graceful
//!   deletion with a delete of grace period 0, as a kubelet does.
//! - **Clusters**: a CN registers with the HAKeeper of its pool's MatrixOne
//!   cluster, as its pool's `spec.deps` names it
//!   ([`cnpool_api::hakeeper::hakeeper_source`]): the world's registry for
//!   pools without deps and for clusters it was not given
//!   ([`World::with_cluster`]).
//! - **Faults**: [`World::crash`] fails a CN's pod, [`World::vanish_store`]
//!   drops a store from HAKeeper while its pod runs.
//! - **Query services**: with `cn_query_services`, each running CN serves
//!   MatrixOne's query service over morpc on a loopback port and registers
//!   that address, so that an operator using the real morpc client can read
//!   its drain counters (`cnpool dev`). The pod IPs are made up and never
//!   dialled.
//!
//! Nothing here draws random numbers: delays are parameters, pod IPs come
//! from a counter, so the same inputs give the same writes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cnpool_api::CNPool;
use cnpool_api::hakeeper::{HaKeeperSource, hakeeper_source, log_set_discovery, log_set_resource};
use cnpool_api::labels;
use cnpool_morpc::server::{ServerHandle, bind_query_service};
use cnpool_registry::Workload;
use cnpool_registry::memory::{MemoryRegistry, StoreAddresses};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

/// Delays of the simulated kubelet and CNs.
#[derive(Clone, Debug)]
pub struct WorldConfig {
    /// From a pod's creation to its CN registering.
    pub start_delay: Duration,
    /// From a pod's deletion to its containers having stopped.
    pub stop_delay: Duration,
    /// From a CN leaving phase Bound to its sessions having left.
    pub session_leave_delay: Duration,
    /// Sessions a bound CN carries.
    pub sessions_per_cn: u64,
    /// The nodes pods are scheduled to, in order of preference: a pod goes
    /// to the first one that is not cordoned.
    pub nodes: Vec<String>,
    /// Whether each running CN serves its query service over morpc on
    /// loopback (see the crate docs).
    pub cn_query_services: bool,
}

impl Default for WorldConfig {
    fn default() -> Self {
        Self {
            start_delay: Duration::from_millis(200),
            stop_delay: Duration::from_millis(100),
            session_leave_delay: Duration::from_millis(300),
            sessions_per_cn: 2,
            nodes: vec!["sim-node-0".into()],
            cn_query_services: false,
        }
    }
}

/// Why a world-side action failed.
#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    #[error("pod {namespace}/{name}: {source}")]
    Kube {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// What the world remembers of one pod, by UID.
#[derive(Debug, Default)]
struct PodState {
    start_scheduled: bool,
    stop_scheduled: bool,
    stopped: bool,
    bound: bool,
    /// Bumped on every Bound/unbound change, so a delayed session departure
    /// does not undo a later bind.
    binding_epoch: u64,
    /// The CN's query service while it runs; dropping it stops it.
    query_service: Option<ServerHandle>,
    /// The HAKeeper the CN registered with, once started.
    registry: Option<MemoryRegistry>,
}

#[derive(Default)]
struct State {
    pods: HashMap<String, PodState>,
    next_ip: u32,
    /// Names of the Nodes whose `spec.unschedulable` is true.
    cordoned_nodes: HashSet<String>,
}

/// Where the world reads the time of day it writes into pod status.
type Now = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// The simulated kubelet and CN processes of one cluster. Clones share it.
#[derive(Clone)]
pub struct World {
    client: kube::Client,
    registry: MemoryRegistry,
    /// The HAKeepers of other MatrixOne clusters, by `host:port`.
    clusters: Arc<BTreeMap<String, MemoryRegistry>>,
    config: Arc<WorldConfig>,
    state: Arc<Mutex<State>>,
    now: Now,
}

impl World {
    pub fn new(client: kube::Client, registry: MemoryRegistry, config: WorldConfig) -> Self {
        Self {
            client,
            registry,
            clusters: Arc::default(),
            config: Arc::new(config),
            state: Arc::default(),
            now: Arc::new(Timestamp::now),
        }
    }

    /// CNs of pools whose deps name the HAKeeper at `address` register in
    /// `registry`.
    pub fn with_cluster(mut self, address: impl Into<String>, registry: MemoryRegistry) -> Self {
        Arc::make_mut(&mut self.clusters).insert(address.into(), registry);
        self
    }

    /// Reads the time of day from `now` instead of the system clock (the
    /// simulator's virtual clock).
    pub fn with_clock(mut self, now: impl Fn() -> Timestamp + Send + Sync + 'static) -> Self {
        self.now = Arc::new(now);
        self
    }

    /// The time of day at second precision, as Kubernetes writes times: a
    /// guard that compares a status read back as `k8s_openapi` types with
    /// the stored JSON must see the same text.
    fn now(&self) -> String {
        let now = (self.now)();
        Timestamp::from_second(now.as_second()).unwrap_or(now).to_string()
    }

    /// The HAKeeper the CNs of pools without deps register with.
    pub fn registry(&self) -> &MemoryRegistry {
        &self.registry
    }

    /// The HAKeeper at `address`: the one of the cluster given for it
    /// ([`Self::with_cluster`]), else the world's own.
    pub fn cluster_registry(&self, address: &str) -> MemoryRegistry {
        self.clusters.get(address).cloned().unwrap_or_else(|| self.registry.clone())
    }

    /// The HAKeeper the CN of the pod `uid` registered with.
    fn registry_of(&self, uid: Option<&str>) -> MemoryRegistry {
        let state = self.state();
        let registered = uid.and_then(|uid| state.pods.get(uid)).and_then(|entry| entry.registry.clone());
        registered.unwrap_or_else(|| self.registry.clone())
    }

    /// The HAKeeper of the pod's pool's cluster, read from its pool and
    /// LogSet now; the world's own when it was given no other cluster.
    async fn cluster_of(&self, pod: &Pod) -> MemoryRegistry {
        if self.clusters.is_empty() {
            return self.registry.clone();
        }
        match self.cluster_address(pod).await {
            Some(address) => self.cluster_registry(&address),
            None => self.registry.clone(),
        }
    }

    async fn cluster_address(&self, pod: &Pod) -> Option<String> {
        let namespace = pod.metadata.namespace.as_deref()?;
        let pool_name = pod.metadata.labels.as_ref()?.get(labels::POOL_NAME)?;
        let pools: Api<CNPool> = Api::namespaced(self.client.clone(), namespace);
        let pool = pools.get_opt(pool_name).await.ok()??;
        match hakeeper_source(&pool) {
            HaKeeperSource::Endpoint(endpoint) => Some(endpoint.to_owned()),
            HaKeeperSource::Default => None,
            HaKeeperSource::LogSet(namespace, name) => {
                let log_sets: Api<DynamicObject> =
                    Api::namespaced_with(self.client.clone(), &namespace, &log_set_resource());
                log_set_discovery(&log_sets.get_opt(&name).await.ok()??.data)
            }
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update is one step on plain data: a panicked holder left it
        // consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs the world until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let config = watcher::Config::default().labels(labels::POOL_NAME);
        let mut events = watcher(pods, config).default_backoff().boxed();
        let nodes: Api<Node> = Api::all(self.client.clone());
        let mut node_events = watcher(nodes, watcher::Config::default()).default_backoff().boxed();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                event = node_events.next() => match event {
                    Some(Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node))) => self.observe_node(&node),
                    Some(Ok(watcher::Event::Delete(node))) => self.forget_node(&node),
                    Some(Ok(_)) => {}
                    Some(Err(error)) => tracing::debug!(%error, "world: node watch failed; retrying"),
                    None => return,
                },
                event = events.next() => match event {
                    Some(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => self.observe(pod),
                    Some(Ok(watcher::Event::Delete(pod))) => self.forget(&pod),
                    Some(Ok(_)) => {}
                    Some(Err(error)) => tracing::debug!(%error, "world: pod watch failed; retrying"),
                    None => return,
                },
            }
        }
    }

    fn observe(&self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else { return };
        let deleting = pod.metadata.deletion_timestamp.is_some();
        let bound =
            pod.metadata.labels.as_ref().and_then(|l| l.get(labels::PHASE)).map(String::as_str) == Some("Bound");
        let no_finalizers = pod.metadata.finalizers.as_ref().is_none_or(Vec::is_empty);
        let mut state = self.state();
        let entry = state.pods.entry(uid).or_default();
        let start = !entry.start_scheduled && !deleting;
        entry.start_scheduled |= start;
        let stop = deleting && !entry.stop_scheduled;
        entry.stop_scheduled |= stop;
        let finish = deleting && entry.stopped && no_finalizers;
        let binding_changed = bound != entry.bound && !deleting;
        if binding_changed {
            entry.bound = bound;
            entry.binding_epoch += 1;
        }
        let epoch = entry.binding_epoch;
        let ip = state.next_ip;
        if start {
            state.next_ip += 1;
        }
        drop(state);
        let pod = Arc::new(pod);
        if start {
            tokio::spawn(self.clone().start(pod.clone(), ip));
        }
        if stop {
            tokio::spawn(self.clone().stop(pod.clone()));
        }
        if finish {
            tokio::spawn(self.clone().finish_deletion(pod.clone()));
        }
        if binding_changed && let Some(uuid) = store_uuid(&pod) {
            if bound {
                self.registry_of(pod.metadata.uid.as_deref())
                    .set_workload(&uuid, Workload { sessions: self.config.sessions_per_cn, ..Workload::default() });
            } else {
                tokio::spawn(self.clone().sessions_leave(pod.metadata.uid.clone().unwrap_or_default(), uuid, epoch));
            }
        }
    }

    /// Notes whether `node` is cordoned.
    fn observe_node(&self, node: &Node) {
        let Some(name) = node.metadata.name.clone() else { return };
        let mut state = self.state();
        if node.spec.as_ref().and_then(|spec| spec.unschedulable) == Some(true) {
            state.cordoned_nodes.insert(name);
        } else {
            state.cordoned_nodes.remove(&name);
        }
    }

    fn forget_node(&self, node: &Node) {
        if let Some(name) = node.metadata.name.as_deref() {
            self.state().cordoned_nodes.remove(name);
        }
    }

    /// The node a new pod goes to: the first of the world's nodes not
    /// cordoned, or — as a scheduler would leave a pod Pending, which the
    /// world does not model — the first one when all are.
    fn pick_node(&self) -> String {
        let state = self.state();
        let schedulable = self.config.nodes.iter().find(|node| !state.cordoned_nodes.contains(*node));
        schedulable.or(self.config.nodes.first()).cloned().unwrap_or_default()
    }

    fn forget(&self, pod: &Pod) {
        let registry = self.registry_of(pod.metadata.uid.as_deref());
        if let Some(uid) = pod.metadata.uid.as_deref() {
            self.state().pods.remove(uid);
        }
        // A CN whose pod is gone no longer heartbeats.
        if let Some(uuid) = store_uuid(pod) {
            registry.remove_store(&uuid);
        }
    }

    async fn start(self, pod: Arc<Pod>, ip: u32) {
        tokio::time::sleep(self.config.start_delay).await;
        let (namespace, name) = identity(&pod);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        if let Err(error) = self.schedule(&pod, &namespace, &name).await {
            tracing::debug!(pod = %name, %error, "world: pod went away before it was scheduled");
            return;
        }
        let now = self.now();
        let pod_ip = format!("10.0.{}.{}", ip / 250, ip % 250 + 1);
        let status = json!({"status": {
            "phase": "Running",
            "podIP": pod_ip,
            "startTime": now,
            "conditions": [
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "True", "lastTransitionTime": now},
            ],
            "containerStatuses": [{
                "name": "cn", "ready": true, "started": true, "restartCount": 0,
                "image": "matrixorigin/matrixone", "imageID": "",
                "state": {"running": {"startedAt": now}},
            }],
        }});
        if let Err(error) = pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await {
            tracing::debug!(pod = %name, %error, "world: pod went away before it started");
            return;
        }
        if let Some(uuid) = store_uuid(&pod) {
            let registry = self.cluster_of(&pod).await;
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            // A pod that went away meanwhile registers nothing the world must remember.
            if let Some(entry) = self.state().pods.get_mut(&uid) {
                entry.registry = Some(registry.clone());
            }
            let address = |port: u16| format!("{pod_ip}:{port}");
            let query_address = match self.start_query_service(&pod, &uuid, &registry).await {
                Some(served) => served,
                None => address(19998),
            };
            registry.register_store(
                &uuid,
                StoreAddresses {
                    service_address: address(6001),
                    sql_address: address(6001),
                    lock_service_address: address(6003),
                    query_address,
                },
            );
            tracing::debug!(pod = %name, store = %uuid, "world: CN started and registered");
        }
    }

    /// Serves the CN's query service on loopback when the world is set to;
    /// returns the address it serves on.
    async fn start_query_service(&self, pod: &Pod, uuid: &str, registry: &MemoryRegistry) -> Option<String> {
        if !self.config.cn_query_services {
            return None;
        }
        let service = match bind_query_service("127.0.0.1:0", registry.clone(), uuid).await {
            Ok(service) => service,
            Err(error) => {
                tracing::warn!(store = %uuid, %error, "world: cannot serve the CN's query service on loopback");
                return None;
            }
        };
        let address = service.local_addr().to_string();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        // A pod that went away meanwhile drops the service with its entry.
        if let Some(entry) = self.state().pods.get_mut(&uid) {
            entry.query_service = Some(service);
        }
        Some(address)
    }

    /// Assigns the pod to a node ([`Self::pick_node`]) as a scheduler does:
    /// through the `binding` subresource, since a real API server refuses to change
    /// `spec.nodeName` of an existing pod; where the server has no such
    /// subresource (the embedded one), by patching `spec.nodeName`.
    async fn schedule(&self, pod: &Pod, namespace: &str, name: &str) -> Result<(), kube::Error> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let node = self.pick_node();
        let binding = json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        let bindings: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &ApiResource::erase::<Pod>(&()));
        match bindings.create_subresource::<_, DynamicObject>("binding", name, &PostParams::default(), &binding).await {
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 405 => {
                let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
                let schedule = json!({"metadata": {"uid": uid}, "spec": {"nodeName": node}});
                pods.patch(name, &PatchParams::default(), &Patch::Merge(&schedule)).await.map(drop)
            }
            result => result.map(drop),
        }
    }

    async fn stop(self, pod: Arc<Pod>) {
        tokio::time::sleep(self.config.stop_delay).await;
        if let Some(uuid) = store_uuid(&pod) {
            self.registry_of(pod.metadata.uid.as_deref()).remove_store(&uuid);
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if let Some(entry) = self.state().pods.get_mut(&uid) {
            entry.stopped = true;
            entry.query_service = None;
        }
        // Read the pod again: its finalizers may be gone by now.
        let (namespace, name) = identity(&pod);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        if let Ok(Some(current)) = pods.get_opt(&name).await
            && current.metadata.uid.as_deref() == Some(uid.as_str())
            && current.metadata.finalizers.as_ref().is_none_or(Vec::is_empty)
        {
            self.finish_deletion(Arc::new(current)).await;
        }
    }

    async fn finish_deletion(self, pod: Arc<Pod>) {
        let (namespace, name) = identity(&pod);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
            ..DeleteParams::default()
        };
        if let Err(error) = pods.delete(&name, &params).await {
            tracing::debug!(pod = %name, %error, "world: final deletion refused");
        }
    }

    async fn sessions_leave(self, pod_uid: String, uuid: String, epoch: u64) {
        tokio::time::sleep(self.config.session_leave_delay).await;
        let still_unbound = self.state().pods.get(&pod_uid).is_some_and(|entry| entry.binding_epoch == epoch);
        if still_unbound {
            self.registry_of(Some(&pod_uid)).set_workload(&uuid, Workload::default());
        }
    }

    /// The CN of a pod crashes for good: its pod turns Failed and its store
    /// leaves HAKeeper.
    pub async fn crash(&self, namespace: &str, name: &str) -> Result<(), WorldError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let kube_error = |source| WorldError::Kube { namespace: namespace.into(), name: name.into(), source };
        let pod = pods.get(name).await.map_err(kube_error)?;
        let now = self.now();
        let status = json!({"status": {
            "phase": "Failed",
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}],
            "containerStatuses": [{
                "name": "cn", "ready": false, "started": false, "restartCount": 0,
                "image": "matrixorigin/matrixone", "imageID": "",
                "state": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": now}},
            }],
        }});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.map_err(kube_error)?;
        if let Some(uuid) = store_uuid(&pod) {
            self.registry_of(pod.metadata.uid.as_deref()).remove_store(&uuid);
        }
        if let Some(uid) = pod.metadata.uid.as_deref()
            && let Some(entry) = self.state().pods.get_mut(uid)
        {
            entry.query_service = None;
        }
        Ok(())
    }

    /// A store drops out of HAKeeper while its pod goes on running. Returns
    /// whether it was registered.
    pub fn vanish_store(&self, uuid: &str) -> bool {
        let mut removed = self.registry.remove_store(uuid);
        for registry in self.clusters.values() {
            removed |= registry.remove_store(uuid);
        }
        removed
    }
}

fn identity(pod: &Pod) -> (String, String) {
    (pod.metadata.namespace.clone().unwrap_or_default(), pod.metadata.name.clone().unwrap_or_default())
}

/// The UUID the pod's CN registers under: from its DNS name, as MatrixOne's
/// start script computes it — `POD_NAME.HEADLESS_SERVICE_NAME.NAMESPACE.svc`
/// from its environment (POD_NAME and NAMESPACE are the pod's own, by field
/// reference) where the pod sets HEADLESS_SERVICE_NAME, as a Go-rendered CN
/// does; else from its subdomain. Never from a label.
pub fn store_uuid(pod: &Pod) -> Option<String> {
    let name = pod.metadata.name.as_deref()?;
    let namespace = pod.metadata.namespace.as_deref()?;
    let spec = pod.spec.as_ref()?;
    let from_env = spec
        .containers
        .iter()
        .flat_map(|container| container.env.iter().flatten())
        .find_map(|var| (var.name == "HEADLESS_SERVICE_NAME").then_some(var.value.as_deref()).flatten());
    let headless = from_env.or(spec.subdomain.as_deref())?;
    Some(cnpool_api::cn_store_uuid(name, headless, namespace))
}
