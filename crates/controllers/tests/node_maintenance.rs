#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! Node maintenance end to end (docs/migration.md, "Node maintenance"):
//! `kubectl cordon` of a Bound pod's node migrates its claim to a pod on
//! another node, and the pool's PodDisruptionBudget refuses the eviction
//! (`kubectl drain`) of a Bound pod while letting Idle and released pods go.
//! The controllers run in this process on the embedded API server, or on a
//! real kube-apiserver when `CNPOOL_E2E_KUBECONFIG` is set (support), where
//! no disruption controller runs, as in CI.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cnpool_api::{CNClaim, labels};
use cnpool_world::WorldConfig;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{Cluster, Commits, bound_pod, eventually, label};

/// Node names no other run or test uses (Nodes are cluster-wide).
fn node_names(count: usize) -> Vec<String> {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    (0..count).map(|index| format!("cnpool-e2e-{}-{run}-node-{index}", std::process::id())).collect()
}

/// Nodes made for one test, deleted when it ends.
struct Nodes {
    api: Api<Node>,
    names: Vec<String>,
}

impl Nodes {
    async fn create(cluster: &Cluster, names: &[String]) -> Self {
        let api: Api<Node> = Api::all(cluster.client.clone());
        for name in names {
            let node: Node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
            api.create(&PostParams::default(), &node).await.expect("create a node");
        }
        Self { api, names: names.to_vec() }
    }

    /// `kubectl cordon`: returns the resourceVersion of the write.
    async fn cordon(&self, name: &str) -> u64 {
        let cordon = json!({"spec": {"unschedulable": true}});
        let node = self.api.patch(name, &PatchParams::default(), &Patch::Merge(&cordon)).await.expect("cordon");
        node.metadata.resource_version.and_then(|version| version.parse().ok()).expect("a resourceVersion")
    }

    async fn delete(self) {
        for name in &self.names {
            let _ = self.api.delete(name, &DeleteParams::default()).await;
        }
    }
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordoning_the_node_of_a_bound_pod_migrates_its_claim_to_another_node() {
    let names = node_names(2);
    let (drained, spare) = (names[0].clone(), names[1].clone());
    let cluster = Cluster::with_world(WorldConfig { nodes: names.clone(), ..WorldConfig::default() }).await;
    let nodes = Nodes::create(&cluster, &names).await;
    let commits = Commits::record(&cluster).await;
    cluster.start_operator(0).await;
    cluster.create_pool(1, Some(6)).await;
    let claim = cluster.create_claim("tenant", &[("account", "acme")], &[]).await;
    let (source, _) = bound_pod(&cluster, "tenant").await;
    let source_pod = cluster.pods().get(&source).await.unwrap();
    assert_eq!(node_of(&source_pod), Some(drained.as_str()), "the world fills the first node first");

    let cordoned_at = nodes.cordon(&drained).await;
    let target = eventually("tenant migrated off the cordoned node", Duration::from_secs(120), || async {
        let current: CNClaim = cluster.claims().get("tenant").await.map_err(|e| e.to_string())?;
        let done = current.spec.source_pod.is_none()
            && current.phase().map(|phase| phase.as_str()) == Some("Bound")
            && current.spec.pod_name != source;
        if !done {
            return Err(serde_json::to_string(&current.spec).unwrap_or_default());
        }
        Ok(current.spec.pod_name.clone())
    })
    .await;
    let target_pod = cluster.pods().get(&target).await.unwrap();
    assert_eq!(node_of(&target_pod), Some(spare.as_str()));
    assert_eq!(label(&target_pod, labels::CLAIM_UID), claim.metadata.uid.as_deref());

    // The source is released, and — being on a cordoned node — retired
    // rather than offered again.
    eventually("the source released and retired", Duration::from_secs(60), || async {
        let states = commits.states_of("pods", &source);
        let phases: Vec<Option<&str>> =
            states.iter().map(|state| state["metadata"]["labels"][labels::PHASE].as_str()).collect();
        let released = states.iter().any(|state| {
            state["metadata"]["labels"][labels::PHASE] == "Draining"
                && state["metadata"]["labels"][labels::CLAIM_UID].is_null()
        });
        let gone = cluster.pods().get_opt(&source).await.map_err(|e| e.to_string())?.is_none();
        if released && (gone || phases.contains(&Some("Terminating"))) { Ok(()) } else { Err(format!("{phases:?}")) }
    })
    .await;

    // After the cordon, no pod of the cordoned node was given an owner.
    let version = |commit: &support::Commit| commit.resource_version.parse::<u64>().unwrap_or(0);
    let acquired_on_drained: Vec<String> = commits
        .snapshot()
        .iter()
        .filter(|commit| commit.plural == "pods" && version(commit) > cordoned_at)
        .filter(|commit| commit.object["spec"]["nodeName"] == drained.as_str())
        .filter(|commit| {
            let owner = |state: &serde_json::Value| state["metadata"]["labels"][labels::CLAIM_UID].as_str().is_some();
            owner(&commit.object) && !commit.old.as_ref().is_some_and(owner)
        })
        .map(|commit| commit.object["metadata"]["name"].to_string())
        .collect();
    assert!(acquired_on_drained.is_empty(), "pods of the cordoned node acquired: {acquired_on_drained:?}");
    nodes.delete().await;
}

/// Evicts `pod` as `kubectl drain` does (policy/v1beta1, which every server
/// from 1.20 on accepts), once; the API status code when refused.
async fn evict(cluster: &Cluster, pod: &str) -> Result<(), u16> {
    let eviction = json!({
        "apiVersion": "policy/v1beta1", "kind": "Eviction",
        "metadata": {"name": pod, "namespace": cluster.namespace()},
    });
    let client = cluster.client_without_retries().await;
    let pods: Api<DynamicObject> = Api::namespaced_with(client, cluster.namespace(), &ApiResource::erase::<Pod>(&()));
    match pods.create_subresource::<_, serde_json::Value>("eviction", pod, &PostParams::default(), &eviction).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(status.code),
        Err(other) => panic!("evict {pod}: {other}"),
    }
}

/// Whether `pod` is gone or being deleted.
async fn going(cluster: &Cluster, pod: &str) -> bool {
    match cluster.pods().get_opt(pod).await.expect("read the pod") {
        None => true,
        Some(pod) => pod.metadata.deletion_timestamp.is_some(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_a_bound_pod_is_refused_while_idle_and_released_pods_are_evicted() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(2, Some(6)).await;
    cluster.create_claim("tenant", &[("account", "acme")], &[]).await;
    let (bound, _) = bound_pod(&cluster, "tenant").await;

    // The pool's budget, owned by the pool so that it goes with it.
    let pool_uid = cluster.pools().get(support::POOL).await.unwrap().metadata.uid;
    eventually("the pool's PodDisruptionBudget", Duration::from_secs(30), || async {
        for version in ["v1", "v1beta1"] {
            let resource = ApiResource {
                group: "policy".into(),
                version: version.into(),
                api_version: format!("policy/{version}"),
                kind: "PodDisruptionBudget".into(),
                plural: "poddisruptionbudgets".into(),
            };
            let budgets: Api<DynamicObject> =
                Api::namespaced_with(cluster.client.clone(), cluster.namespace(), &resource);
            let Ok(Some(budget)) = budgets.get_opt(&format!("{}-bound", support::POOL)).await else { continue };
            let owner = budget.metadata.owner_references.iter().flatten().next().map(|owner| owner.uid.clone());
            return if owner == pool_uid { Ok(()) } else { Err(format!("owned by {owner:?}")) };
        }
        Err("none yet".into())
    })
    .await;

    assert_eq!(evict(&cluster, &bound).await, Err(429), "a Bound pod's eviction is refused");
    assert!(!going(&cluster, &bound).await, "the Bound pod stays");
    assert_eq!(bound_pod(&cluster, "tenant").await.0, bound, "the claim keeps its pod");

    let idle = eventually("an Idle pod", Duration::from_secs(30), || async {
        let pods = cluster.pool_pods().await;
        let idle = pods.iter().find(|pod| label(pod, labels::PHASE) == Some("Idle"));
        idle.and_then(|pod| pod.metadata.name.clone()).ok_or_else(|| "none yet".to_string())
    })
    .await;
    assert_eq!(evict(&cluster, &idle).await, Ok(()), "an Idle pod may be evicted");
    assert!(going(&cluster, &idle).await, "the evicted Idle pod is being deleted");

    // Released, the pod is no longer guarded.
    cluster.claims().delete("tenant", &DeleteParams::default()).await.expect("delete the claim");
    eventually("the released pod evicted", Duration::from_secs(60), || async {
        let pod = cluster.pods().get(&bound).await.map_err(|e| e.to_string())?;
        if label(&pod, labels::PHASE) == Some("Bound") {
            return Err("still Bound".into());
        }
        evict(&cluster, &bound).await.map_err(|code| format!("eviction refused with {code}"))
    })
    .await;
    assert!(going(&cluster, &bound).await, "the released pod is being deleted");
}
