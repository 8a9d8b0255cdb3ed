//! The binding core's end-to-end scenarios (DESIGN §2): the claim, pool and
//! store controllers against a cluster, whichever runs them — in this
//! process (tests/binding.rs) or as `cnpool operator` processes beside
//! `cnpool dev --no-operator` (the cnpool crate's tests/operator_process.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cnpool_api::labels;
use cnpool_registry::WorkState;

use super::*;

pub const BIND: Duration = Duration::from_secs(30);

fn labels_of(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<String>> {
    pairs.iter().map(|(k, v)| (k.to_string(), vec![v.to_string()])).collect()
}

pub async fn claims_bind_to_distinct_pods_whose_stores_carry_their_labels(cluster: &Cluster) {
    cluster.start_operator(0).await;
    cluster.create_pool(2, Some(10)).await;

    eventually("the pool keeps 2 Idle pods", BIND, || async {
        let pods = cluster.pool_pods().await;
        let idle = phase_count(&pods, "Idle");
        if idle == 2 && pods.len() == 2 { Ok(()) } else { Err(format!("{idle} Idle of {}", pods.len())) }
    })
    .await;

    let wishes: [(&str, &[(&str, &str)]); 3] =
        [("alpha", &[("account", "acme")]), ("beta", &[("account", "globex"), ("role", "tp")]), ("gamma", &[])];
    for (name, cn_labels) in wishes {
        cluster.create_claim(name, cn_labels, &[("team", name)]).await;
    }

    let bound = eventually("3 claims Bound to 3 distinct pods", BIND, || async {
        let claims = cluster.all_claims().await;
        let bound: BTreeMap<String, String> = claims
            .iter()
            .filter(|claim| claim_phase(claim) == Some("Bound"))
            .map(|claim| (claim.metadata.name.clone().unwrap(), claim.spec.pod_name.clone()))
            .collect();
        let distinct: BTreeSet<&String> = bound.values().collect();
        if bound.len() == 3 && distinct.len() == 3 { Ok(bound) } else { Err(format!("{bound:?}")) }
    })
    .await;

    eventually("the pool refills to 2 Idle pods", BIND, || async {
        let pods = cluster.pool_pods().await;
        let idle = phase_count(&pods, "Idle");
        if idle == 2 { Ok(()) } else { Err(format!("{idle} Idle")) }
    })
    .await;

    let pods = cluster.pool_pods().await;
    let claims = cluster.all_claims().await;
    for (name, cn_labels) in wishes {
        let claim = claims.iter().find(|claim| claim.metadata.name.as_deref() == Some(name)).unwrap();
        let pod = pods.iter().find(|pod| pod.metadata.name.as_ref() == Some(&bound[name])).unwrap();
        assert_eq!(label(pod, labels::CLAIM_UID), claim.metadata.uid.as_deref(), "{name}'s pod carries its UID");
        assert_eq!(label(pod, labels::PHASE), Some("Bound"));
        assert_eq!(label(pod, "team"), Some(name), "{name}'s additional pod label");
        let store = cluster.store(label(pod, labels::CN_UUID).unwrap()).await.expect("store registered");
        assert_eq!(store.work_state, WorkState::Working, "{name}'s store serves");
        assert_eq!(store.labels, labels_of(cn_labels), "{name}'s store carries exactly its CN labels");
        let recorded = claim.status.as_ref().and_then(|status| status.store.as_ref()).unwrap();
        assert_eq!(recorded.pod_uid, pod.metadata.uid, "{name} recorded its pod's UID");
    }
    // `kubectl describe cnpool` tells why the pool grew.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(cluster.client.clone(), &cluster.ns);
    eventually("the pool's ScaledOut Events", BIND, || async {
        let selector = format!("involvedObject.kind=CNPool,involvedObject.name={POOL}");
        let listed = events.list(&ListParams::default().fields(&selector)).await.map_err(|e| e.to_string())?;
        let reasons: Vec<String> = listed.items.iter().filter_map(|event| event.reason.clone()).collect();
        if reasons.iter().any(|reason| reason == "ScaledOut") { Ok(()) } else { Err(format!("{reasons:?}")) }
    })
    .await;
}

pub async fn a_claim_whose_pod_is_deleted_or_whose_store_vanishes_is_lost_then_rebound(cluster: &Cluster) {
    let commits = Commits::record(cluster).await;
    cluster.start_operator(0).await;
    cluster.create_pool(1, Some(4)).await;
    cluster.create_claim("tenant", &[("account", "acme")], &[]).await;
    let (first_pod, first_uid) = bound_pod(cluster, "tenant").await;

    cluster.pods().delete(&first_pod, &Default::default()).await.unwrap();
    let (second_pod, second_uid) = eventually("tenant rebound to another pod", BIND, || async {
        let (pod, uid) = bound_pod(cluster, "tenant").await;
        if uid != first_uid { Ok((pod, uid)) } else { Err(format!("still on {pod}")) }
    })
    .await;
    seen_lost(&commits, "tenant", "saying its pod was deleted", |reasons| {
        reasons.iter().any(|reason| reason == "PodDeleting" || reason == "PodDeleted")
    })
    .await;
    assert_ne!(second_uid, first_uid, "a pod being deleted is never bound again");
    // One loss is one Lost write: the pod it still had to release, gone by
    // the time it was released, once made the claim write Lost again (and
    // count the loss, and publish its Event) on every step of a reconcile.
    let first_record = format!("{first_pod}/{first_uid}");
    let second_record = format!("{second_pod}/{second_uid}");
    let recorded = |claim: &serde_json::Value| claim["metadata"]["annotations"][labels::RECORDED_POD].clone();
    let lost_writes = eventually("the recorder has seen the claim rebound", Duration::from_secs(10), || async {
        let states = commits.states_of("cnclaims", "tenant");
        if !states.iter().any(|claim| recorded(claim) == second_record.as_str()) {
            return Err(format!("{} versions", states.len()));
        }
        // Rebinding clears spec.podName: what is left on the first pod
        // with phase Lost are the loss's own writes.
        Ok(states
            .iter()
            .filter(|claim| {
                claim["status"]["phase"] == "Lost"
                    && recorded(claim) == first_record.as_str()
                    && claim["spec"]["podName"] == first_pod.as_str()
            })
            .count())
    })
    .await;
    assert_eq!(lost_writes, 1, "versions of the claim shown Lost on {first_pod}");

    let pod = cluster.pods().get(&second_pod).await.unwrap();
    assert!(cluster.vanish_store(label(&pod, labels::CN_UUID).unwrap()).await);
    eventually("tenant rebound after its store vanished", BIND, || async {
        let (pod, uid) = bound_pod(cluster, "tenant").await;
        if uid != second_uid { Ok(()) } else { Err(format!("still on {pod}")) }
    })
    .await;
    seen_lost(&commits, "tenant", "last for StoreMissing", |reasons| {
        reasons.last().map(String::as_str) == Some("StoreMissing")
    })
    .await;
}

/// Waits until the recorder has seen `claim` go Lost as `expected` says
/// (its watch may lag the reads that saw what followed).
async fn seen_lost(commits: &Commits, claim: &str, what: &str, expected: impl Fn(&[String]) -> bool) {
    eventually(&format!("{claim} seen Lost {what}"), Duration::from_secs(10), || async {
        let reasons = loss_reasons(commits, claim);
        if expected(&reasons) { Ok(()) } else { Err(format!("{reasons:?}")) }
    })
    .await;
}

pub async fn a_deleted_claim_releases_its_pod_which_drains_back_to_idle_with_a_clean_store(cluster: &Cluster) {
    let commits = Commits::record(cluster).await;
    cluster.start_operator(0).await;
    // One pod only, so that the released pod is neither retired by scale-in
    // nor replaced.
    cluster.create_pool(1, Some(1)).await;
    cluster.create_claim("tenant", &[("account", "acme")], &[("team", "a")]).await;
    let (pod_name, pod_uid) = bound_pod(cluster, "tenant").await;
    let pod = cluster.pods().get(&pod_name).await.unwrap();
    let uuid = label(&pod, labels::CN_UUID).unwrap().to_owned();

    cluster.claims().delete("tenant", &Default::default()).await.unwrap();
    eventually("the claim is gone", BIND, || async {
        match cluster.claims().get_opt("tenant").await.unwrap() {
            None => Ok(()),
            Some(claim) => Err(format!("finalizers {:?}", claim.metadata.finalizers)),
        }
    })
    .await;
    let pod = eventually("the released pod is Idle again", BIND, || async {
        let pod = cluster.pods().get(&pod_name).await.map_err(|e| e.to_string())?;
        if label(&pod, labels::PHASE) == Some("Idle") {
            Ok(pod)
        } else {
            Err(format!("{:?}", label(&pod, labels::PHASE)))
        }
    })
    .await;
    assert_eq!(pod.metadata.uid.as_deref(), Some(pod_uid.as_str()), "the same pod returned to the pool");
    assert_eq!(label(&pod, labels::CLAIM_UID), None);
    assert_eq!(label(&pod, "team"), None, "the claim's additional label left with it");
    assert_eq!(label(&pod, labels::LAST_OWNER), Some("owner-tenant"));

    // The recorder's watch may lag the read that saw the pod Idle.
    let phases = eventually("the recorder has seen the pod Idle again", Duration::from_secs(10), || async {
        let phases = commits
            .states_of("pods", &pod_name)
            .iter()
            .filter_map(|pod| pod["metadata"]["labels"][labels::PHASE].as_str().map(str::to_owned))
            .fold(Vec::<String>::new(), |mut seen, phase| {
                if seen.last() != Some(&phase) {
                    seen.push(phase);
                }
                seen
            });
        if phases.len() > 1 && phases.last().map(String::as_str) == Some("Idle") {
            Ok(phases)
        } else {
            Err(format!("{phases:?}"))
        }
    })
    .await;
    assert_eq!(phases, ["Unknown", "Idle", "Bound", "Draining", "Idle"], "the pod's phases");

    let store = cluster.store(&uuid).await.expect("the CN still runs");
    assert_eq!(store.work_state, WorkState::Draining, "an unowned CN does not serve");
    assert!(store.labels.is_empty(), "no labels of the deleted claim remain: {:?}", store.labels);
    let labelled: Vec<_> = cluster.stores().await.into_iter().filter(|store| !store.labels.is_empty()).collect();
    assert!(labelled.is_empty(), "no store is labelled for a deleted claim: {labelled:?}");
}

pub async fn a_settled_cluster_costs_no_writes(cluster: &Cluster) {
    cluster.start_operator(0).await;
    cluster.create_pool(2, Some(10)).await;
    for name in ["alpha", "beta"] {
        cluster.create_claim(name, &[("account", name)], &[]).await;
    }
    for name in ["alpha", "beta"] {
        bound_pod(cluster, name).await;
    }
    eventually("the pool settles with 2 Idle pods", BIND, || async {
        let pods = cluster.pool_pods().await;
        let idle = phase_count(&pods, "Idle");
        if idle == 2 && pods.len() == 4 { Ok(()) } else { Err(format!("{idle} Idle of {}", pods.len())) }
    })
    .await;
    // Let the last stats and status writes land, then watch for a while:
    // several registry polls, drain polls and stats refreshes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let commits = Commits::record(cluster).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes = commits.summaries();
    assert!(writes.is_empty(), "steady state wrote: {writes:?}");
}

/// A claim whose `additionalPodLabels` name another claim's UID under the
/// owner key, with no webhook to refuse it: the operator refuses it itself,
/// and no pod changes owner or phase because of it.
pub async fn a_claim_whose_labels_name_another_claims_uid_takes_nothing(cluster: &Cluster) {
    cluster.start_operator(0).await;
    cluster.create_pool(3, Some(10)).await;
    cluster.create_claim("alpha", &[("account", "acme")], &[]).await;
    let (alpha_pod, _) = bound_pod(cluster, "alpha").await;
    let alpha_uid = cluster.claims().get("alpha").await.unwrap().metadata.uid.unwrap();
    let owner_key = labels::CLAIM_UID;
    let mallory = cluster.create_claim("mallory", &[], &[(owner_key, alpha_uid.as_str())]).await;
    let mallory_uid = mallory.metadata.uid.clone().unwrap();

    let message = eventually("mallory says its spec is invalid", BIND, || async {
        let claim = cluster.claims().get("mallory").await.map_err(|e| e.to_string())?;
        let conditions = claim.status.as_ref().map(|status| status.conditions.clone()).unwrap_or_default();
        match conditions.iter().find(|condition| condition.type_ == "Bound") {
            Some(bound) if bound.status == "False" && bound.reason == "InvalidSpec" => Ok(bound.message.clone()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(message.contains(&format!("spec.additionalPodLabels[{owner_key}]")), "{message}");
    assert!(message.contains("choose a key outside"), "the message says how to fix it: {message}");
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(cluster.client.clone(), &cluster.ns);
    eventually("one InvalidSpec Warning Event for mallory", BIND, || async {
        let selector = "involvedObject.kind=CNClaim,involvedObject.name=mallory";
        let listed = events.list(&ListParams::default().fields(selector)).await.map_err(|e| e.to_string())?;
        let warnings: Vec<_> = listed
            .items
            .iter()
            .filter(|event| event.reason.as_deref() == Some("InvalidSpec") && event.type_.as_deref() == Some("Warning"))
            .collect();
        if warnings.len() == 1 { Ok(()) } else { Err(format!("{} InvalidSpec Warnings", warnings.len())) }
    })
    .await;

    // Give the operator every chance to act on it: it must not.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let pods = cluster.pool_pods().await;
        let owners: Vec<(&str, Option<&str>)> =
            pods.iter().map(|pod| (pod.metadata.name.as_deref().unwrap_or_default(), label(pod, owner_key))).collect();
        let alphas: Vec<&str> =
            owners.iter().filter(|(_, uid)| *uid == Some(alpha_uid.as_str())).map(|(n, _)| *n).collect();
        assert_eq!(alphas, vec![alpha_pod.as_str()], "only alpha's own pod carries alpha's UID: {owners:?}");
        assert!(owners.iter().all(|(_, uid)| *uid != Some(mallory_uid.as_str())), "mallory took a pod: {owners:?}");
        assert_eq!(phase_count(&pods, "Draining"), 0, "no pod drained because of mallory");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let alpha = cluster.claims().get("alpha").await.unwrap();
    assert_eq!((claim_phase(&alpha), alpha.spec.pod_name.as_str()), (Some("Bound"), alpha_pod.as_str()));

    // Fixed, it binds like any claim.
    let mut fixed = cluster.claims().get("mallory").await.unwrap();
    fixed.spec.additional_pod_labels.clear();
    cluster.claims().replace("mallory", &Default::default(), &fixed).await.unwrap();
    let (mallory_pod, _) = bound_pod(cluster, "mallory").await;
    assert_ne!(mallory_pod, alpha_pod);
}
