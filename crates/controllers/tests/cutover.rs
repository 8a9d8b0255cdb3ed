#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! Taking over a cluster the Go matrixone-operator ran.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use cnpool_api::{CNClaim, labels};
use cnpool_controllers::cutover;
use cnpool_registry::WorkState;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, PostParams};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_left_by_the_go_operator_are_repaired_on_start() {
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    legacy::leave_go_operator_state(&cluster).await;
    cluster.start_operator(0).await;

    let claims: Vec<CNClaim> =
        eventually("every claim Bound to a pod that carries its UID", Duration::from_secs(60), || async {
            let claims = cluster.all_claims().await;
            let pods = cluster.pool_pods().await;
            let mut seen = Vec::new();
            for claim in &claims {
                let pod = pods.iter().find(|pod| pod.metadata.name.as_deref() == Some(claim.spec.pod_name.as_str()));
                let owned = pod.is_some_and(|pod| label(pod, labels::CLAIM_UID) == claim.metadata.uid.as_deref());
                if claim_phase(claim) != Some("Bound") || !owned {
                    seen.push(format!(
                        "{}: {:?} on {}",
                        claim.metadata.name.clone().unwrap(),
                        claim_phase(claim),
                        claim.spec.pod_name
                    ));
                }
            }
            if seen.is_empty() { Ok(claims) } else { Err(seen.join(", ")) }
        })
        .await;

    let pod_of: BTreeMap<String, String> =
        claims.iter().map(|claim| (claim.metadata.name.clone().unwrap(), claim.spec.pod_name.clone())).collect();
    assert_eq!(pod_of["solo"], "mo-0", "a Go-bound pod is adopted, not replaced");
    assert_eq!(pod_of["other"], "mo-1");
    assert_eq!(pod_of["shared-a"], "mo-2", "the claim the pod's claimed-by names keeps it");
    assert_ne!(pod_of["shared-b"], "mo-2", "the other claim gets a pod of its own");
    let distinct: std::collections::BTreeSet<&String> = pod_of.values().collect();
    assert_eq!(distinct.len(), pod_of.len(), "one owner per pod: {pod_of:?}");

    assert_eq!(loss_reasons(&commits, "shared-b"), ["Misbound"]);
    assert_eq!(loss_reasons(&commits, "dangling"), ["PodDeleted"]);
    assert!(loss_reasons(&commits, "solo").is_empty(), "an adopted claim is never Lost");

    for (name, pod) in &pod_of {
        // Its CN registered under the UUID its DNS name gives: the Go pods'
        // subdomain is the pool's, a pod cnpool rendered has its own.
        let pod = cluster.pods().get(pod).await.unwrap();
        let store = cluster.registry().store(&cnpool_world::store_uuid(&pod).unwrap()).unwrap();
        assert_eq!(store.work_state, WorkState::Working);
        assert_eq!(store.labels, [("account".to_string(), vec![name.clone()])].into(), "{name}'s store");
    }
}

/// Writes the cutover record as cnpool's first start on this cluster left
/// it, at `time`.
async fn record_cutover(cluster: &Cluster, time: jiff::Timestamp) {
    let record: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": cutover::RECORD},
        "data": {cutover::KEY: time.to_string()},
    }))
    .unwrap();
    let records: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &cluster.ns);
    records.create(&PostParams::default(), &record).await.unwrap();
}

/// The cutover time the operator recorded, once it has.
async fn recorded_cutover(cluster: &Cluster) -> jiff::Timestamp {
    let records: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &cluster.ns);
    eventually("the cutover time recorded", Duration::from_secs(10), || async {
        let record = records.get_opt(cutover::RECORD).await.map_err(|e| e.to_string())?.ok_or("no record yet")?;
        let time = record.data.as_ref().and_then(|data| data.get(cutover::KEY)).ok_or("no time in it")?;
        time.parse::<jiff::Timestamp>().map_err(|e| e.to_string())
    })
    .await
}

/// Whether the pod is as the Go operator left it bound to `claim`: phase
/// Bound, `claimed-by` the claim, no UID.
fn go_bound_to(pod: &Pod, claim: &str) -> bool {
    label(pod, labels::PHASE) == Some("Bound")
        && label(pod, labels::CLAIMED_BY) == Some(claim)
        && label(pod, labels::CLAIM_UID).is_none()
}

/// Waits until the pod `name` is released: no owner, Draining or Idle.
async fn released(cluster: &Cluster, name: &str, within: Duration) {
    eventually(&format!("{name} released"), within, || async {
        let pod = cluster.pods().get(name).await.map_err(|e| e.to_string())?;
        let unowned = label(&pod, labels::CLAIMED_BY).is_none() && label(&pod, labels::CLAIM_UID).is_none();
        match label(&pod, labels::PHASE) {
            Some("Draining" | "Idle") if unowned => Ok(()),
            phase => Err(format!("{phase:?}, claimed-by {:?}", label(&pod, labels::CLAIMED_BY))),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_binding_is_kept_while_a_claim_of_its_name_exists_and_a_recreated_claim_does_not_inherit_it() {
    let cluster = Cluster::new().await;
    // cnpool first started an hour ago; since then "solo" was deleted and
    // created again, asking for the pod the Go operator had bound to it.
    let cutover = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() - 3600).unwrap();
    record_cutover(&cluster, cutover).await;
    cluster.create_pool(1, Some(10)).await;
    for (pod, claim) in [("mo-0", "solo"), ("mo-1", "gone")] {
        cluster.pods().create(&PostParams::default(), &legacy::go_pod(&cluster.ns, pod, claim)).await.unwrap();
    }
    let mut recreated = cluster.create_claim("solo", &[("account", "solo")], &[]).await;
    recreated.spec.pod_name = "mo-0".into();
    cluster.claims().replace("solo", &PostParams::default(), &recreated).await.unwrap();
    let commits = Commits::record(&cluster).await;
    cluster.start_operator(0).await;
    cluster.start_operator(1).await;

    // No claim is named "gone": its pod goes back to the pool.
    released(&cluster, "mo-1", Duration::from_secs(15)).await;
    // The new "solo" is told the pod is not to be had, and does not take it.
    eventually("solo told mo-0 is not available", Duration::from_secs(15), || async {
        let claim = cluster.claims().get("solo").await.map_err(|e| e.to_string())?;
        let conditions = claim.status.as_ref().map(|status| status.conditions.clone()).unwrap_or_default();
        match conditions.iter().find(|condition| condition.type_ == "Bound") {
            Some(bound) if bound.status == "False" && bound.message.contains("mo-0") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let solo = cluster.claims().get("solo").await.unwrap();
    assert_ne!(claim_phase(&solo), Some("Bound"));
    for state in commits.states_of("pods", "mo-0") {
        let pod: Pod = serde_json::from_value(state).unwrap();
        assert!(go_bound_to(&pod, "solo"), "mo-0 kept as the Go operator bound it: {:?}", pod.metadata.labels);
    }
    assert!(go_bound_to(&cluster.pods().get("mo-0").await.unwrap(), "solo"));
    assert_eq!(recorded_cutover(&cluster).await, cutover, "the record is never rewritten");

    // Once no claim of its name exists, the Go pod goes back to the pool.
    cluster.claims().delete("solo", &Default::default()).await.unwrap();
    released(&cluster, "mo-0", Duration::from_secs(15)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_go_era_claim_keeps_its_pod() {
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    cluster.create_pool(1, Some(10)).await;
    for (pod, claim) in [("mo-0", "solo"), ("mo-1", "odd")] {
        cluster.pods().create(&PostParams::default(), &legacy::go_pod(&cluster.ns, pod, claim)).await.unwrap();
    }
    cluster.create_claim("solo", &[("account", "solo")], &[]).await;
    // The Go operator never validated: a reserved key in its additional labels.
    let odd = cluster.create_claim("odd", &[("account", "odd")], &[("matrixorigin.io/tier", "gold")]).await;
    for (claim, pod) in [("solo", "mo-0"), ("odd", "mo-1")] {
        legacy::go_bind(&cluster, claim, pod).await;
    }
    cluster.start_operator(0).await;

    let cutover = recorded_cutover(&cluster).await;
    let created = odd.metadata.creation_timestamp.clone().unwrap().0;
    assert!(created < cutover, "recorded at the operator's first start, after the Go-era claims");
    eventually("solo adopted its Go-bound pod", Duration::from_secs(30), || async {
        let pod = cluster.pods().get("mo-0").await.map_err(|e| e.to_string())?;
        let solo = cluster.claims().get("solo").await.map_err(|e| e.to_string())?;
        match label(&pod, labels::CLAIM_UID) {
            uid if uid == solo.metadata.uid.as_deref() => Ok(()),
            uid => Err(format!("claim-uid {uid:?}")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Whether cnpool adopts it or leaves it unadopted until its spec is
    // fixed, the tenant keeps its CN: Bound, claimed by "odd", never
    // released, nor given another owner.
    let odd_uid = odd.metadata.uid.clone().unwrap();
    let states = commits.states_of("pods", "mo-1");
    for state in states.iter().chain([&serde_json::to_value(cluster.pods().get("mo-1").await.unwrap()).unwrap()]) {
        let pod: Pod = serde_json::from_value(state.clone()).unwrap();
        assert_eq!(label(&pod, labels::PHASE), Some("Bound"), "{:?}", pod.metadata.labels);
        assert_eq!(label(&pod, labels::CLAIMED_BY), Some("odd"));
        assert!(label(&pod, labels::CLAIM_UID).is_none_or(|uid| uid == odd_uid), "{:?}", pod.metadata.labels);
    }
    assert_eq!(cluster.claims().get("odd").await.unwrap().spec.pod_name, "mo-1");
    assert!(loss_reasons(&commits, "odd").is_empty(), "an invalid Go-era claim is not Lost");
}

/// The CN set the Go operator made for the template
/// `{image: matrixorigin/matrixone:1.1.0}` of pool [`POOL`] (reference §0's
/// worked example), and one of an older template.
fn go_cn_sets() -> (String, String) {
    (format!("{POOL}-5d7c6d9c8d"), format!("{POOL}-4f8b2c6d9k"))
}

/// Whether `pod` is of the CN set `cn_set`, by Go's instance label or by
/// cnpool's revision label.
fn of_cn_set(pod: &Pod, cn_set: &str) -> bool {
    label(pod, "matrixorigin.io/instance") == Some(cn_set)
        || label(pod, labels::REVISION).is_some_and(|revision| cn_set == format!("{POOL}-{revision}"))
}

fn condition_status<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|condition| condition.type_ == type_).map(|condition| condition.status.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_rendered_pool_is_taken_over_in_place_and_only_its_old_cn_sets_pods_leave_by_migration() {
    let cluster = Cluster::new().await;
    // The pool as written for the Go operator, and the pods its CN sets'
    // CloneSets left: one bound and one idle of the current template, one
    // bound of an older one.
    let pool: cnpool_api::CNPool = serde_json::from_value(serde_json::json!({
        "metadata": {"name": POOL, "namespace": cluster.ns},
        "spec": {
            "template": {"image": "matrixorigin/matrixone:1.1.0", "replicas": 0},
            "podLabels": {"tier": "standard"},
            "strategy": {
                "scaleStrategy": {"maxIdle": 1, "maxPods": 10},
                "drainStrategy": {"minDelay": "300ms", "timeout": "60s"},
            },
        },
    }))
    .unwrap();
    cluster.pools().create(&PostParams::default(), &pool).await.unwrap();
    let (current, older) = go_cn_sets();
    let (kept, idle, old) = (format!("{current}-cn-x8k2p"), format!("{current}-cn-b7q4z"), format!("{older}-cn-m2n5w"));
    let clone_sets = [legacy::go_clone_set(&cluster, &current).await, legacy::go_clone_set(&cluster, &older).await];
    let (of_current, of_older) = ((current.as_str(), clone_sets[0].as_str()), (older.as_str(), clone_sets[1].as_str()));
    for (pod, cn_set, phase, claim) in [
        (&kept, of_current, "Bound", Some("tenant")),
        (&idle, of_current, "Idle", None),
        (&old, of_older, "Bound", Some("laggard")),
    ] {
        let pod = legacy::go_cn_set_pod(&cluster.ns, pod, cn_set, phase, claim);
        cluster.pods().create(&PostParams::default(), &pod).await.unwrap();
    }
    for (claim, pod) in [("tenant", &kept), ("laggard", &old)] {
        cluster.create_claim(claim, &[("account", claim)], &[]).await;
        legacy::go_bind(&cluster, claim, pod).await;
    }
    let mut uids = BTreeMap::new();
    for (pod, claim) in [(&kept, Some("tenant")), (&idle, None), (&old, Some("laggard"))] {
        let object = cluster.pods().get(pod).await.unwrap();
        let uuid = label(&object, labels::CN_UUID).unwrap().to_owned();
        eventually(&format!("{pod}'s CN registered"), Duration::from_secs(10), || async {
            cluster.store(&uuid).await.map(|_| ()).ok_or_else(|| "not yet".to_string())
        })
        .await;
        if let Some(claim) = claim {
            cluster.label_store(&uuid, &[("account".to_string(), vec![claim.to_string()])].into()).await;
        }
        uids.insert(pod.clone(), object.metadata.uid.clone().unwrap());
    }
    // Kruise had the bound pod mid-lifecycle: its gates say False.
    let mut conditions = cluster.pods().get(&kept).await.unwrap().status.unwrap().conditions.unwrap_or_default();
    for gate in ["KruisePodReady", "InPlaceUpdateReady"] {
        conditions.push(serde_json::from_value(serde_json::json!({"type": gate, "status": "False"})).unwrap());
    }
    let status = serde_json::json!({"status": {"conditions": conditions}});
    cluster.pods().patch_status(&kept, &Default::default(), &kube::api::Patch::Merge(&status)).await.unwrap();

    let commits = Commits::record(&cluster).await;
    cluster.start_operator(0).await;

    // The current template's pods are taken over where they are: released
    // from the CloneSet (no garbage collection reaches them), the bound one
    // adopted by its claim, kruise's gates answered.
    let tenant = cluster.claims().get("tenant").await.unwrap().metadata.uid.unwrap();
    eventually("the current CN set's pods taken over", Duration::from_secs(60), || async {
        let mut waiting = Vec::new();
        for pod in [&kept, &idle] {
            let object = cluster.pods().get(pod).await.map_err(|e| e.to_string())?;
            if object.metadata.owner_references.as_ref().is_some_and(|owners| !owners.is_empty()) {
                waiting.push(format!("{pod} still owned by {:?}", object.metadata.owner_references));
            }
            if pod == &kept {
                if label(&object, labels::CLAIM_UID) != Some(tenant.as_str()) {
                    waiting.push(format!("{pod} not adopted: {:?}", object.metadata.labels));
                }
                for gate in ["KruisePodReady", "InPlaceUpdateReady"] {
                    if condition_status(&object, gate) != Some("True") {
                        waiting.push(format!("{pod}'s {gate} is {:?}", condition_status(&object, gate)));
                    }
                }
            }
        }
        if waiting.is_empty() { Ok(()) } else { Err(waiting.join("; ")) }
    })
    .await;

    // Deleting the current CN set's CloneSet, as deleting the Go CN set
    // does, deletes none of its pods.
    let clone_sets = legacy::schemaless_kind(&cluster, "apps.kruise.io", "CloneSet", "clonesets").await;
    clone_sets.delete(&format!("{current}-cn"), &Default::default()).await.unwrap();

    // The older CN set's bound pod is Outdated: its claim migrates to a pod
    // of the current template, and the pod leaves.
    let target = eventually("laggard migrated to the current template", Duration::from_secs(120), || async {
        let claim = cluster.claims().get("laggard").await.map_err(|e| e.to_string())?;
        let pod = cluster.pods().get(&claim.spec.pod_name).await.map_err(|e| e.to_string())?;
        let owned = label(&pod, labels::CLAIM_UID) == claim.metadata.uid.as_deref();
        match (claim_phase(&claim), of_cn_set(&pod, &current) && owned, &claim.spec.source_pod) {
            (Some("Bound"), true, None) => Ok(claim.spec.pod_name.clone()),
            other => Err(format!("{other:?} on {}", claim.spec.pod_name)),
        }
    })
    .await;
    assert_ne!(target, old);
    eventually(&format!("{old} gone"), Duration::from_secs(120), || async {
        match cluster.pods().get_opt(&old).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(pod) => Err(format!("{:?}", pod.metadata.labels)),
        }
    })
    .await;
    let moved = commits.states_of("cnclaims", "laggard");
    assert!(
        moved.iter().any(|claim| claim["spec"]["sourcePod"]["podName"] == old.as_str()),
        "laggard left {old} by migration"
    );

    // No pod of the current template was deleted, restarted or given
    // another owner; the tenant never lost its CN.
    for pod in [&kept, &idle] {
        let now = cluster.pods().get(pod).await.unwrap();
        assert_eq!(now.metadata.uid.as_ref(), uids.get(pod), "{pod} is the pod the Go operator made");
        for state in commits.states_of("pods", pod) {
            let state: Pod = serde_json::from_value(state).unwrap();
            assert!(state.metadata.deletion_timestamp.is_none(), "{pod} was deleted");
            if pod == &kept {
                assert_eq!(label(&state, labels::CLAIMED_BY), Some("tenant"), "{:?}", state.metadata.labels);
                assert_eq!(label(&state, labels::PHASE), Some("Bound"));
            }
        }
    }
    assert!(loss_reasons(&commits, "tenant").is_empty() && loss_reasons(&commits, "laggard").is_empty());
    assert_eq!(cluster.claims().get("tenant").await.unwrap().spec.pod_name, kept);
}
