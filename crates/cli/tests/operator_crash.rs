#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! The operator process SIGKILLed 20 times at pseudo-random moments while a
//! claim set scales 0 → 50 → 10, beside `cnpool dev --no-operator`: within
//! 60 s of the last kill everything converges, and an independent check of
//! every pod and claim write seen by watches finds no pod passed from one
//! owner to another, no two claims Bound to one pod, and no claim Bound to a
//! missing or foreign pod for longer than DESIGN §3's I2 bound (30 s). On
//! the embedded API server, or on a real one when `CNPOOL_E2E_KUBECONFIG`
//! names it.

#[path = "../../controllers/tests/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use cnpool_api::{CNClaimSet, labels};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{Cluster, Commit, Commits, claim_phase, eventually, label};

const CNPOOL: &str = env!("CARGO_BIN_EXE_cnpool");
const SET: &str = "tenants";
/// DESIGN §3, I2.
const TRUTH_BOUND: Duration = Duration::from_secs(30);

/// A fixed pseudo-random sequence of pauses (an LCG), so a failure replays
/// with the same kill moments.
struct Pauses(u64);

impl Pauses {
    fn next(&mut self) -> Duration {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        Duration::from_millis(300 + (self.0 >> 33) % 2700)
    }
}

async fn scale(sets: &Api<CNClaimSet>, replicas: i32) {
    let patch = Patch::Merge(json!({"spec": {"replicas": replicas}}));
    sets.patch_scale(SET, &PatchParams::default(), &patch).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_twenty_times_while_a_claim_set_scales_the_operator_converges_without_double_binding() {
    let cluster = Cluster::with_processes(CNPOOL).await;
    let commits = Commits::record(&cluster).await;
    cluster.create_pool(4, Some(60)).await;
    let sets: Api<CNClaimSet> = Api::namespaced(cluster.client.clone(), &cluster.ns);
    let set: CNClaimSet = serde_json::from_value(json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNClaimSet",
        "metadata": {"name": SET, "namespace": cluster.ns},
        "spec": {
            "replicas": 0,
            "template": {"spec": {"poolName": support::POOL, "selector": {"matchLabels": {"tier": "standard"}}}},
        },
    }))
    .unwrap();
    sets.create(&PostParams::default(), &set).await.unwrap();

    let mut pauses = Pauses(20_261_201);
    let mut instance = 0;
    cluster.start_operator(instance).await;
    for (replicas, kills) in [(50, 10), (10, 10)] {
        scale(&sets, replicas).await;
        for _ in 0..kills {
            tokio::time::sleep(pauses.next()).await;
            cluster.processes().kill_operators();
            instance += 1;
            cluster.start_operator(instance).await;
        }
    }
    let last_kill = Instant::now();

    eventually(
        "10 claims of the set Bound to 10 distinct pods that carry their UIDs",
        Duration::from_secs(60),
        || async {
            let claims = cluster.all_claims().await;
            let pods = cluster.pool_pods().await;
            let members: Vec<_> = claims
                .iter()
                .filter(|claim| {
                    claim.metadata.deletion_timestamp.is_none()
                        && claim.metadata.labels.as_ref().and_then(|l| l.get(labels::CLAIM_SET)).map(String::as_str)
                            == Some(SET)
                })
                .collect();
            let mut owned = BTreeSet::new();
            for claim in &members {
                let pod = pods.iter().find(|pod| pod.metadata.name.as_deref() == Some(claim.spec.pod_name.as_str()));
                if claim_phase(claim) == Some("Bound")
                    && pod.is_some_and(|pod| label(pod, labels::CLAIM_UID) == claim.metadata.uid.as_deref())
                {
                    owned.insert(claim.spec.pod_name.clone());
                }
            }
            if members.len() == 10 && owned.len() == 10 {
                Ok(())
            } else {
                Err(format!("{} members, {} owning", members.len(), owned.len()))
            }
        },
    )
    .await;
    eprintln!("converged {:?} after the last kill", last_kill.elapsed());
    let set = sets.get(SET).await.unwrap();
    let status = set.status.unwrap_or_default();
    assert_eq!((status.replicas, status.ready_replicas), (10, 10), "the set's status");

    let violations = history_violations(&commits.snapshot());
    assert!(violations.is_empty(), "{violations:#?}");
}

/// What the writes seen show that must never happen (see the file's docs).
fn history_violations(commits: &[std::sync::Arc<Commit>]) -> Vec<String> {
    let version = |commit: &Commit| commit.resource_version.parse::<u64>().unwrap_or(0);
    let mut ordered: Vec<&Commit> = commits.iter().map(|commit| commit.as_ref()).collect();
    ordered.sort_by_key(|commit| version(commit));

    let mut violations = Vec::new();
    // pod name → (pod UID, owner claim UID), as last written.
    let mut pods: HashMap<String, (String, Option<String>)> = HashMap::new();
    // claim name → (claim UID, pod name, recorded pod UID) while Bound.
    let mut bound: BTreeMap<String, (String, String, Option<String>)> = BTreeMap::new();
    // claim name → since when its Bound pod was not truthfully its own.
    let mut untrue_since: HashMap<String, Instant> = HashMap::new();
    let text = |value: &Value| value.as_str().map(str::to_owned);
    for commit in ordered {
        let object = &commit.object;
        let name = text(&object["metadata"]["name"]).unwrap_or_default();
        match commit.plural.as_str() {
            "pods" => {
                let uid = text(&object["metadata"]["uid"]).unwrap_or_default();
                let owner = text(&object["metadata"]["labels"][labels::CLAIM_UID]);
                if let Some((old_uid, Some(old_owner))) = pods.get(&name)
                    && *old_uid == uid
                    && owner.as_ref().is_some_and(|owner| owner != old_owner)
                {
                    violations.push(format!(
                        "pod {name} passed from claim {old_owner} to {owner:?} at version {}",
                        commit.resource_version
                    ));
                }
                match commit.change {
                    support::Change::Deleted => pods.remove(&name),
                    _ => pods.insert(name, (uid, owner)),
                };
            }
            "cnclaims" => {
                let live =
                    commit.change != support::Change::Deleted && object["metadata"]["deletionTimestamp"].is_null();
                if live && object["status"]["phase"] == "Bound" {
                    let entry = (
                        text(&object["metadata"]["uid"]).unwrap_or_default(),
                        text(&object["spec"]["podName"]).unwrap_or_default(),
                        text(&object["status"]["store"]["podUID"]),
                    );
                    bound.insert(name, entry);
                } else {
                    bound.remove(&name);
                    untrue_since.remove(&name);
                }
            }
            _ => continue,
        }
        let mut holders: HashMap<&str, &str> = HashMap::new();
        for (claim, (claim_uid, pod, pod_uid)) in &bound {
            if let Some(other) = holders.insert(pod.as_str(), claim.as_str()) {
                violations.push(format!(
                    "claims {other} and {claim} Bound to pod {pod} at version {}",
                    commit.resource_version
                ));
            }
            let truthful = pods.get(pod).is_some_and(|(uid, owner)| {
                owner.as_deref() == Some(claim_uid.as_str()) && pod_uid.as_ref().is_none_or(|recorded| recorded == uid)
            });
            if truthful {
                untrue_since.remove(claim);
            } else {
                let since = *untrue_since.entry(claim.clone()).or_insert(commit.seen_at);
                if commit.seen_at.duration_since(since) > TRUTH_BOUND {
                    violations
                        .push(format!("claim {claim} Bound to {pod}, which is not its own, for over {TRUTH_BOUND:?}"));
                }
            }
        }
    }
    violations.sort();
    violations.dedup();
    violations
}
