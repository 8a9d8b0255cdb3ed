#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! CNClaimSets: scaling through the spec and the scale subresource, Lost
//! members replaced, and two operators that never take a set above its
//! replicas.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cnpool_api::{CNClaim, CNClaimSet, labels};
use cnpool_registry::Workload;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

const SET: &str = "tenant";

fn sets(cluster: &Cluster) -> Api<CNClaimSet> {
    Api::namespaced(cluster.client.clone(), &cluster.ns)
}

async fn create_set(cluster: &Cluster, replicas: i32) {
    let set: CNClaimSet = serde_json::from_value(json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNClaimSet",
        "metadata": {"name": SET, "namespace": cluster.ns},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": {"app": SET}},
                "spec": {
                    "selector": {"matchLabels": {"tier": "standard"}},
                    "poolName": POOL,
                    "cnLabels": [{"key": "account", "values": [SET]}],
                },
            },
        },
    }))
    .unwrap();
    sets(cluster).create(&PostParams::default(), &set).await.expect("create claim set");
}

/// What `kubectl scale cnclaimset` sends: a merge patch of the scale
/// subresource.
async fn scale(cluster: &Cluster, replicas: i32) {
    let patch = Patch::Merge(json!({"spec": {"replicas": replicas}}));
    sets(cluster).patch_scale(SET, &PatchParams::default(), &patch).await.expect("patch /scale");
}

/// The set's members that are not being deleted, by name.
async fn members(cluster: &Cluster) -> BTreeMap<String, CNClaim> {
    let selector = format!("{}={SET}", labels::CLAIM_SET);
    let claims = cluster.claims().list(&ListParams::default().labels(&selector)).await.expect("list members");
    claims
        .items
        .into_iter()
        .filter(|claim| claim.metadata.deletion_timestamp.is_none())
        .map(|claim| (claim.metadata.name.clone().unwrap(), claim))
        .collect()
}

/// Waits until the set has exactly `replicas` members, no other, each Bound
/// to a pod of its own, and says so in its status; returns member → pod.
async fn converged(cluster: &Cluster, replicas: usize) -> BTreeMap<String, String> {
    eventually(&format!("{replicas} Bound members"), Duration::from_secs(60), || async {
        let selector = format!("{}={SET}", labels::CLAIM_SET);
        let all = cluster.claims().list(&ListParams::default().labels(&selector)).await.map_err(|e| e.to_string())?;
        if all.items.len() != replicas {
            return Err(format!("{} claims", all.items.len()));
        }
        let members = members(cluster).await;
        let pods: BTreeMap<String, String> = members
            .iter()
            .filter(|(_, claim)| claim_phase(claim) == Some("Bound"))
            .map(|(name, claim)| (name.clone(), claim.spec.pod_name.clone()))
            .collect();
        let distinct: BTreeSet<&String> = pods.values().collect();
        if pods.len() != replicas || distinct.len() != replicas {
            return Err(format!("Bound on pods {pods:?}"));
        }
        let status = sets(cluster).get_status(SET).await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        let expected = i32::try_from(replicas).unwrap();
        if (status.replicas, status.ready_replicas, status.claims.len()) != (expected, expected, replicas) {
            return Err(format!("status {} replicas, {} ready", status.replicas, status.ready_replicas));
        }
        Ok(pods)
    })
    .await
}

fn names(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|slot| format!("{SET}-{slot}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_2_6_3_keeps_distinct_pods_and_removes_the_members_cheapest_to_lose() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(2, Some(12)).await;
    create_set(&cluster, 2).await;
    let two = converged(&cluster, 2).await;
    assert_eq!(two.keys().cloned().collect::<Vec<_>>(), names(0..2));

    scale(&cluster, 6).await;
    let six = converged(&cluster, 6).await;
    assert_eq!(six.keys().cloned().collect::<Vec<_>>(), names(0..6));
    assert_eq!(six[&format!("{SET}-0")], two[&format!("{SET}-0")], "scale-out leaves bound members alone");

    // Tenants on members 1, 3 and 5 have sessions: their pods cost more to
    // delete, so scale-in takes the others.
    let busy = ["1", "3", "5"].map(|slot| format!("{SET}-{slot}"));
    let all_pods = cluster.pool_pods().await;
    for member in &busy {
        let pod = all_pods.iter().find(|pod| pod.metadata.name.as_deref() == Some(six[member].as_str())).unwrap();
        let uuid = label(pod, labels::CN_UUID).unwrap();
        assert!(cluster.registry().set_workload(uuid, Workload { sessions: 4, ..Workload::default() }));
    }
    eventually("the busy pods' deletion cost", Duration::from_secs(20), || async {
        let pods = cluster.pool_pods().await;
        let costs: Vec<Option<&str>> = busy
            .iter()
            .map(|member| {
                let pod = pods.iter().find(|pod| pod.metadata.name.as_deref() == Some(six[member].as_str()));
                pod.and_then(|pod| pod.metadata.annotations.as_ref()?.get(labels::POD_DELETION_COST))
                    .map(String::as_str)
            })
            .collect();
        if costs.iter().all(|cost| *cost == Some("4")) { Ok(()) } else { Err(format!("{costs:?}")) }
    })
    .await;

    scale(&cluster, 3).await;
    let three = converged(&cluster, 3).await;
    assert_eq!(three.keys().cloned().collect::<Vec<_>>(), busy.to_vec(), "the members with sessions stay");
    for member in &busy {
        assert_eq!(three[member], six[member], "{member} keeps its pod");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hpa_style_write_of_the_scale_subresource_scales_the_set() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    cluster.create_pool(2, Some(10)).await;
    create_set(&cluster, 1).await;
    converged(&cluster, 1).await;

    // What an HPA writes: the Scale it read, with new replicas, guarded by
    // its resourceVersion.
    let mut scale = sets(&cluster).get_scale(SET).await.expect("read /scale");
    scale.spec.get_or_insert_default().replicas = Some(4);
    sets(&cluster).replace_scale(SET, &PostParams::default(), &scale).await.expect("replace /scale");
    converged(&cluster, 4).await;

    let scale = sets(&cluster).get_scale(SET).await.expect("read /scale");
    let status = scale.status.expect("scale status");
    assert_eq!(status.replicas, 4);
    let selector = status.selector.expect("the scale subresource carries a selector");
    assert_eq!(selector, format!("{}={SET}", labels::CLAIM_SET));
    let selected = cluster.pods().list(&ListParams::default().labels(&selector)).await.unwrap().items;
    assert_eq!(phase_count(&selected, "Bound"), 4, "the selector finds the set's Bound pods, for an HPA's metrics");
    let member_uids: BTreeSet<String> =
        members(&cluster).await.values().filter_map(|claim| claim.metadata.uid.clone()).collect();
    for pod in &selected {
        let owner = label(pod, labels::CLAIM_UID).unwrap_or_default();
        assert!(member_uids.contains(owner), "{:?} is held by a member of the set", pod.metadata.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_member_is_replaced_by_a_new_claim_on_another_pod() {
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    cluster.start_operator(0).await;
    cluster.create_pool(2, Some(10)).await;
    create_set(&cluster, 2).await;
    let before = converged(&cluster, 2).await;
    let victim = format!("{SET}-1");
    let old_uid = members(&cluster).await[&victim].metadata.uid.clone().unwrap();

    let old_pod_uid = cluster.pods().get(&before[&victim]).await.unwrap().metadata.uid;
    // The pod goes away under its tenant.
    let grace = DeleteParams::default().grace_period(0);
    cluster.pods().delete(&before[&victim], &grace).await.expect("delete the bound pod");

    let after = eventually("the lost member replaced", Duration::from_secs(60), || async {
        let pods = converged(&cluster, 2).await;
        // The old member may still show Bound before its loss is seen, and
        // between the old member's deletion and its replacement there is
        // none: only a member of another UID is the replacement.
        match members(&cluster).await.get(&victim).and_then(|claim| claim.metadata.uid.clone()) {
            Some(uid) if uid != old_uid => Ok(pods),
            Some(_) => Err("the old claim is still there".into()),
            None => Err("no replacement yet".into()),
        }
    })
    .await;
    assert_eq!(after[&format!("{SET}-0")], before[&format!("{SET}-0")], "the healthy member keeps its pod");
    // By the UID the replacement recorded: the pool may have made a new pod
    // of the same name meanwhile.
    let replacement = &members(&cluster).await[&victim];
    let new_pod_uid = replacement.status.as_ref().and_then(|status| status.store.as_ref()?.pod_uid.clone());
    assert!(new_pod_uid.is_some(), "the replacement recorded its pod");
    assert_ne!(new_pod_uid, old_pod_uid, "the replacement holds another pod");
    // The recorder's watch may lag the reads above.
    let reasons = eventually("the old member seen Lost", Duration::from_secs(10), || async {
        let reasons = loss_reasons(&commits, &victim);
        if reasons.is_empty() { Err("not yet".to_string()) } else { Ok(reasons) }
    })
    .await;
    assert_eq!(reasons.len(), 1, "the old member went Lost once before it was replaced: {reasons:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_operators_scaling_0_to_20_never_exceed_replicas() {
    const REPLICAS: i32 = 20;
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    cluster.start_operator(0).await;
    cluster.start_operator(1).await;
    cluster.create_pool(2, Some(30)).await;
    create_set(&cluster, 0).await;
    for replicas in [3, 9, REPLICAS] {
        scale(&cluster, replicas).await;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    converged(&cluster, REPLICAS as usize).await;

    // Every committed write of the set and its claims, in resourceVersion
    // order across the two watches: the set's live members never outnumber
    // the replicas it had at that moment.
    let mut history = commits.snapshot();
    history.sort_by_key(|commit| commit.resource_version.parse::<u64>().expect("a numeric resourceVersion"));
    let mut live: BTreeSet<String> = BTreeSet::new();
    let mut replicas = 0;
    let mut peak = 0;
    for commit in history {
        let name = commit.object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        match commit.plural.as_str() {
            "cnclaimsets" => replicas = replicas.max(commit.object["spec"]["replicas"].as_i64().unwrap_or(0)),
            "cnclaims" => {
                let going =
                    commit.change == Change::Deleted || !commit.object["metadata"]["deletionTimestamp"].is_null();
                if going {
                    live.remove(&name);
                } else {
                    live.insert(name);
                }
            }
            _ => continue,
        }
        peak = peak.max(live.len());
        assert!(
            live.len() as i64 <= replicas,
            "rv {}: {} live members, {replicas} replicas",
            commit.resource_version,
            live.len()
        );
    }
    assert_eq!(peak, REPLICAS as usize);
}

/// A pool template change rolls a claim set of 5 onto pods of the new
/// template one surge member at a time, and migrates a standalone claim
/// off its old pod; the pool never exceeds maxPods and the set never holds
/// more than replicas + 1 live members.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_change_rolls_a_set_of_5_one_surge_at_a_time_and_migrates_a_standalone_claim() {
    const MAX_PODS: usize = 10;
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    cluster.start_operator(0).await;
    cluster.create_pool(1, Some(MAX_PODS as i32)).await;
    create_set(&cluster, 5).await;
    cluster.create_claim("standalone", &[("account", "solo")], &[]).await;
    converged(&cluster, 5).await;
    let (standalone_pod, _) = bound_pod(&cluster, "standalone").await;
    let revision_of = |pod: &k8s_openapi::api::core::v1::Pod| label(pod, labels::REVISION).map(str::to_owned);
    let old = revision_of(&cluster.pods().get(&standalone_pod).await.unwrap());

    let template = json!({"spec": {"template": {"image": "matrixorigin/matrixone:1.2.1"}}});
    cluster.pools().patch(POOL, &PatchParams::default(), &Patch::Merge(&template)).await.expect("change the template");

    eventually("every claim Bound on a pod of the new template", Duration::from_secs(120), || async {
        let mut claims: Vec<CNClaim> = members(&cluster).await.into_values().collect();
        if claims.len() != 5 {
            return Err(format!("{} members", claims.len()));
        }
        claims.push(cluster.claims().get("standalone").await.map_err(|e| e.to_string())?);
        for claim in &claims {
            let name = claim.metadata.name.clone().unwrap_or_default();
            if claim_phase(claim) != Some("Bound") || claim.spec.source_pod.is_some() {
                return Err(format!("{name}: {:?}, migrating {:?}", claim_phase(claim), claim.spec.source_pod));
            }
            let pod = cluster.pods().get(&claim.spec.pod_name).await.map_err(|e| e.to_string())?;
            if revision_of(&pod) == old {
                return Err(format!("{name} still on {} of the old template", claim.spec.pod_name));
            }
        }
        Ok(())
    })
    .await;

    let mut history = commits.snapshot();
    history.sort_by_key(|commit| commit.resource_version.parse::<u64>().expect("a numeric resourceVersion"));
    let (mut pods, mut set_members) = (BTreeSet::new(), BTreeSet::new());
    let (mut peak_pods, mut peak_members) = (0, 0);
    for commit in history {
        let name = commit.object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        match commit.plural.as_str() {
            // A pod counts toward maxPods until it is gone.
            "pods" if commit.change == Change::Deleted => drop(pods.remove(&name)),
            "pods" => drop(pods.insert(name)),
            "cnclaims" if commit.object["metadata"]["labels"][labels::CLAIM_SET] == SET => {
                let going =
                    commit.change == Change::Deleted || !commit.object["metadata"]["deletionTimestamp"].is_null();
                if going {
                    set_members.remove(&name)
                } else {
                    set_members.insert(name)
                };
            }
            _ => continue,
        }
        peak_pods = peak_pods.max(pods.len());
        peak_members = peak_members.max(set_members.len());
    }
    assert!(peak_pods <= MAX_PODS, "{peak_pods} pods at once, maxPods {MAX_PODS}");
    assert!(peak_members <= 6, "{peak_members} live members at once for 5 replicas");
    assert_eq!(peak_members, 6, "the set rolled with a surge member");
}

/// A member whose source pod goes while it migrates, before it holds a
/// target, is Lost with `sourcePod` still set: the set replaces it like
/// any Lost member, and the replacement binds a pod of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_lost_mid_migration_is_replaced() {
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    cluster.start_operator(0).await;
    // No Idle pod and no room for one: the migration waits for a target.
    cluster.create_pool(0, Some(1)).await;
    create_set(&cluster, 1).await;
    let before = converged(&cluster, 1).await;
    let victim = format!("{SET}-0");
    let source = before[&victim].clone();
    let old_uid = members(&cluster).await[&victim].metadata.uid.clone().unwrap();

    // An operator-chosen target: `spec.podName` removed (kube-apiserver 1.20
    // refuses an empty string there).
    let migrate = json!({"spec": {"sourcePod": {"podName": source}, "podName": null}});
    cluster.claims().patch(&victim, &PatchParams::default(), &Patch::Merge(&migrate)).await.expect("start migrating");
    let grace = DeleteParams::default().grace_period(0);
    cluster.pods().delete(&source, &grace).await.expect("delete the source pod");

    let after = eventually("the member replaced", Duration::from_secs(60), || async {
        let pods = converged(&cluster, 1).await;
        match members(&cluster).await.get(&victim).and_then(|claim| claim.metadata.uid.clone()) {
            Some(uid) if uid != old_uid => Ok(pods),
            _ => Err("not replaced yet".to_string()),
        }
    })
    .await;
    let replacement = &members(&cluster).await[&victim];
    assert!(replacement.spec.source_pod.is_none(), "the replacement migrates nothing");
    let pod_uid = |claim: &CNClaim| claim.status.as_ref().and_then(|status| status.store.as_ref()?.pod_uid.clone());
    assert!(pod_uid(replacement).is_some(), "the replacement recorded its pod: {after:?}");
    // The scenario is the one meant: the old member was Lost while it still
    // named its source (the recorder's watch may lag the reads above).
    eventually("the old member seen Lost mid-migration", Duration::from_secs(10), || async {
        let states = commits.states_of("cnclaims", &victim);
        let lost_migrating = states.iter().any(|claim| {
            claim["metadata"]["uid"] == old_uid.as_str()
                && claim["status"]["phase"] == "Lost"
                && claim["spec"]["sourcePod"]["podName"] == source.as_str()
        });
        if lost_migrating { Ok(()) } else { Err(format!("{} states", states.len())) }
    })
    .await;
}
