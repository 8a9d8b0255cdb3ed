#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! Migration end to end (DESIGN §2, "Migrate"): a claim moves to a named pod
//! or to one the operator chooses, its source drains back to Idle, and a
//! target that belongs to another claim is refused without any pod changing
//! owner. The controllers run in this process on the embedded API server, or
//! on a real kube-apiserver when `CNPOOL_E2E_KUBECONFIG` is set (support).

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use cnpool_api::{CNClaim, labels};
use cnpool_world::WorldConfig;
use kube::api::{Patch, PatchParams};
use prometheus_client::registry::Registry;
use serde_json::json;
use support::{Cluster, Commits, bound_pod, eventually, label};

/// Starts a migration of `claim` away from `source`, to `target` (empty: the
/// operator chooses), as a user or a control plane would: one merge patch.
/// An operator-chosen target removes `spec.podName` (`null`): kube-apiserver
/// 1.20 refuses an empty string written into a CRD's string field.
async fn migrate(cluster: &Cluster, claim: &str, source: &str, target: &str) {
    let target = if target.is_empty() { serde_json::Value::Null } else { json!(target) };
    let patch = json!({"spec": {"sourcePod": {"podName": source}, "podName": target}});
    cluster.claims().patch(claim, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("start the migration");
}

/// Waits for an Idle pool pod other than `source`, a target to move to.
async fn idle_pod_other_than(cluster: &Cluster, source: &str) -> String {
    eventually("an Idle pod to move to", Duration::from_secs(30), || async {
        let pods = cluster.pool_pods().await;
        let idle = pods
            .iter()
            .find(|pod| label(pod, labels::PHASE) == Some("Idle") && pod.metadata.name.as_deref() != Some(source));
        idle.and_then(|pod| pod.metadata.name.clone()).ok_or_else(|| "none yet".to_string())
    })
    .await
}

/// Waits until `claim` has finished migrating: `sourcePod` removed, Bound to
/// a pod other than `source` that carries its UID. Returns that pod's name.
async fn migrated(cluster: &Cluster, claim: &str, source: &str) -> String {
    eventually(&format!("{claim} migrated off {source}"), Duration::from_secs(120), || async {
        let current: CNClaim = cluster.claims().get(claim).await.map_err(|e| e.to_string())?;
        if current.spec.source_pod.is_some() || current.phase().map(|phase| phase.as_str()) != Some("Bound") {
            let pods: Vec<String> = cluster
                .pool_pods()
                .await
                .iter()
                .map(|pod| format!("{:?} {:?}", pod.metadata.name, pod.metadata.labels))
                .collect();
            return Err(format!("{} {:?}", serde_json::to_string(&current).unwrap_or_default(), pods));
        }
        let target = current.spec.pod_name.clone();
        let pod = cluster.pods().get(&target).await.map_err(|e| e.to_string())?;
        let uid = current.metadata.uid.clone().unwrap_or_default();
        match label(&pod, labels::CLAIM_UID) {
            Some(owner) if owner == uid && target != source => Ok(target),
            owner => Err(format!("target {target} owned by {owner:?}")),
        }
    })
    .await
}

/// Waits until `pod` has drained back to Idle with no owner, by its
/// committed states (the pool may retire it at once as a surplus Idle pod);
/// while it is still there, its store must carry no labels.
async fn drained_to_idle(cluster: &Cluster, commits: &Commits, pod: &str) {
    eventually(&format!("{pod} Idle again"), Duration::from_secs(60), || async {
        let states = commits.states_of("pods", pod);
        let phases: Vec<Option<&str>> =
            states.iter().map(|state| state["metadata"]["labels"][labels::PHASE].as_str()).collect();
        let drained =
            states.iter().skip_while(|state| state["metadata"]["labels"][labels::PHASE] != "Draining").any(|state| {
                state["metadata"]["labels"][labels::PHASE] == "Idle"
                    && state["metadata"]["labels"][labels::CLAIM_UID].is_null()
            });
        if !drained {
            return Err(format!("phases so far {phases:?}"));
        }
        let Ok(current) = cluster.pods().get(pod).await else { return Ok(()) };
        let store = match label(&current, labels::CN_UUID) {
            Some(uuid) => cluster.store(uuid).await,
            None => None,
        };
        match store {
            Some(store) if !store.labels.is_empty() && label(&current, labels::PHASE) == Some("Idle") => {
                Err(format!("an Idle pod whose store keeps labels {:?}", store.labels))
            }
            _ => Ok(()),
        }
    })
    .await;
}

fn condition(claim: &CNClaim, type_: &str) -> Option<(String, String, String)> {
    let conditions = &claim.status.as_ref()?.conditions;
    let found = conditions.iter().find(|condition| condition.type_ == type_)?;
    Some((found.status.clone(), found.reason.clone(), found.message.clone()))
}

/// The claim UIDs each pod carried, over every committed write: a pod that
/// changed owner shows two, unless it passed through no owner between them.
fn owners_in_order(commits: &Commits, pod: &str) -> Vec<Option<String>> {
    let mut owners: Vec<Option<String>> = Vec::new();
    for state in commits.states_of("pods", pod) {
        let owner = state["metadata"]["labels"][labels::CLAIM_UID].as_str().map(str::to_owned);
        if owners.last() != Some(&owner) {
            owners.push(owner);
        }
    }
    owners
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_migrates_to_a_named_pod_and_its_source_drains_back_to_idle() {
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    cluster.start_operator(0).await;
    cluster.create_pool(2, Some(6)).await;
    cluster.create_claim("tenant", &[("account", "acme")], &[]).await;
    let (source, _) = bound_pod(&cluster, "tenant").await;
    let target = idle_pod_other_than(&cluster, &source).await;

    migrate(&cluster, "tenant", &source, &target).await;
    assert_eq!(migrated(&cluster, "tenant", &source).await, target, "the claim moved to the pod it named");
    drained_to_idle(&cluster, &commits, &source).await;

    let claim = cluster.claims().get("tenant").await.unwrap();
    let target_pod = cluster.pods().get(&target).await.unwrap();
    let store = cluster.store(label(&target_pod, labels::CN_UUID).unwrap()).await.expect("the target's store");
    assert_eq!(store.labels.get("account").map(|values| values.join(",")).as_deref(), Some("acme"));
    let recorded = claim.status.as_ref().and_then(|status| status.store.as_ref()).unwrap();
    assert_eq!(recorded.pod_uid, target_pod.metadata.uid, "the claim records its new pod");
    assert!(claim.status.as_ref().unwrap().migrate.is_none(), "drain progress is cleared once done");
    let (status, reason, _) = condition(&claim, "Migration").expect("a Migration condition");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Migrated"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_migrates_to_a_pod_the_operator_chooses() {
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    cluster.start_operator(0).await;
    cluster.create_pool(1, Some(6)).await;
    cluster.create_claim("tenant", &[("account", "acme")], &[]).await;
    let (source, _) = bound_pod(&cluster, "tenant").await;

    migrate(&cluster, "tenant", &source, "").await;
    let target = migrated(&cluster, "tenant", &source).await;
    assert_ne!(target, source);
    drained_to_idle(&cluster, &commits, &source).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_target_owned_by_another_claim_is_refused_and_no_pod_changes_owner() {
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    cluster.start_operator(0).await;
    cluster.create_pool(1, Some(6)).await;
    cluster.create_claim("thief", &[("account", "a")], &[]).await;
    cluster.create_claim("victim", &[("account", "b")], &[]).await;
    let (thief_pod, _) = bound_pod(&cluster, "thief").await;
    let (victim_pod, _) = bound_pod(&cluster, "victim").await;

    migrate(&cluster, "thief", &thief_pod, &victim_pod).await;
    let refused = eventually("the migration refused", Duration::from_secs(30), || async {
        let claim: CNClaim = cluster.claims().get("thief").await.map_err(|e| e.to_string())?;
        match condition(&claim, "Migration") {
            Some((status, reason, message)) if status == "False" && reason == "MigrationRefused" => {
                Ok((claim, message))
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (claim, message) = refused;
    assert!(claim.spec.source_pod.is_none(), "the refusal clears sourcePod");
    assert_eq!(claim.spec.pod_name, thief_pod, "the claim stays on its own pod");
    assert!(message.contains(&victim_pod), "the condition names the target: {message}");
    assert_eq!(claim.phase().map(|phase| phase.as_str()), Some("Bound"));

    // Settle, then judge every committed write of both pods.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let victim_uid = cluster.claims().get("victim").await.unwrap().metadata.uid;
    let thief_uid = claim.metadata.uid;
    assert_eq!(owners_in_order(&commits, &victim_pod).last(), Some(&victim_uid), "the target stayed its owner's");
    assert_eq!(owners_in_order(&commits, &thief_pod).last(), Some(&thief_uid), "the source stayed the claim's");
    for pod in [&victim_pod, &thief_pod] {
        let owners: BTreeSet<Option<String>> = owners_in_order(&commits, pod).into_iter().flatten().map(Some).collect();
        assert_eq!(owners.len(), 1, "{pod} had one owner throughout: {owners:?}");
    }
    assert_eq!(bound_pod(&cluster, "victim").await.0, victim_pod, "the other claim kept its pod");
}

/// Node maintenance: `matrixorigin.io/store-cordon` on a Bound pod makes
/// cnpool migrate its claim to another pod first; the drained pod is then
/// retired rather than offered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_cordon_on_a_bound_pod_migrates_its_claim_off_it() {
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    cluster.start_operator(0).await;
    cluster.create_pool(1, Some(6)).await;
    cluster.create_claim("tenant", &[("account", "acme")], &[]).await;
    let (cordoned, _) = bound_pod(&cluster, "tenant").await;

    let cordon = json!({"metadata": {"annotations": {labels::STORE_CORDON: "maintenance"}}});
    cluster.pods().patch(&cordoned, &PatchParams::default(), &Patch::Merge(&cordon)).await.expect("cordon the pod");
    let target = migrated(&cluster, "tenant", &cordoned).await;
    assert_ne!(target, cordoned);
    eventually("the cordoned pod retired", Duration::from_secs(60), || async {
        let phases: Vec<Option<String>> = commits
            .states_of("pods", &cordoned)
            .iter()
            .map(|state| state["metadata"]["labels"][labels::PHASE].as_str().map(str::to_owned))
            .collect();
        let gone = cluster.pods().get_opt(&cordoned).await.map_err(|e| e.to_string())?.is_none();
        let retired = phases.iter().any(|phase| phase.as_deref() == Some("Terminating"));
        if retired || gone { Ok(()) } else { Err(format!("phases {phases:?}")) }
    })
    .await;
    let events: kube::Api<k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(cluster.client.clone(), &cluster.ns);
    let listed = events.list(&kube::api::ListParams::default().fields("involvedObject.name=tenant")).await.unwrap();
    let reasons: Vec<String> = listed.items.iter().filter_map(|event| event.reason.clone()).collect();
    assert!(reasons.iter().any(|reason| reason == "MigrationStarted"), "{reasons:?}");
}

/// Every log line of this test process, as text without colours.
fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&logs);
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter("info")
            .with_ansi(false)
            .with_writer(move || Sink(Arc::clone(&sink)))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber of this process");
        logs
    })
    .clone()
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The claim controller's finished reconciles, as `/metrics` reports them.
fn claim_reconciles(registry: &Registry) -> u64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    let line = text.lines().find(|line| line.starts_with("cnpool_reconciles_total{controller=\"CNClaim\"}"));
    line.and_then(|line| line.rsplit(' ').next()?.parse().ok()).unwrap_or(0)
}

/// DESIGN §3 (I5): one migration costs at most 20 reconciles, 10 writes and
/// 10 log lines of its claim. The source's sessions take 60 s to leave; the
/// operator runs with its production requeue timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_migration_with_a_60s_drain_costs_at_most_20_reconciles_10_writes_and_10_log_lines() {
    const CLAIM: &str = "measured-tenant";
    let logs = captured_logs();
    let drain = Duration::from_secs(60);
    let cluster = Cluster::with_world(WorldConfig { session_leave_delay: drain, ..WorldConfig::default() }).await;
    let commits = Commits::record(&cluster).await;
    let mut registry = Registry::default();
    let metrics = Arc::new(cnpool_controllers::Metrics::register(&mut registry));
    let config = cnpool_controllers::Config {
        requeue_min: Duration::from_millis(200),
        requeue_max: Duration::from_secs(30),
        ..support::operator_config(cluster.namespace(), 0)
    };
    cluster.start_operator_observed(config, cnpool_controllers::Telemetry::new(metrics)).await;
    cluster.create_pool(1, Some(4)).await;
    // Longer than the drain, so that the source goes back to Idle.
    let timeout = json!({"spec": {"strategy": {"drainStrategy": {"timeout": "5m"}}}});
    cluster.pools().patch(support::POOL, &PatchParams::default(), &Patch::Merge(&timeout)).await.unwrap();
    cluster.create_claim(CLAIM, &[("account", "acme")], &[]).await;
    let (source, _) = bound_pod(&cluster, CLAIM).await;
    // Settled: the claim's own store wait is behind it.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let reconciles_before = claim_reconciles(&registry);
    let logs_before = logs.lock().unwrap().len();
    let commits_before = commits.snapshot().len();
    let started = std::time::Instant::now();
    migrate(&cluster, CLAIM, &source, "").await;
    let target = migrated(&cluster, CLAIM, &source).await;
    let took = started.elapsed();
    drained_to_idle(&cluster, &commits, &source).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let reconciles = claim_reconciles(&registry) - reconciles_before;
    let lines: Vec<String> = String::from_utf8_lossy(&logs.lock().unwrap()[logs_before..])
        .lines()
        .filter(|line| line.contains(&format!("claim={CLAIM}")))
        .map(str::to_owned)
        .collect();
    let uid = cluster.claims().get(CLAIM).await.unwrap().metadata.uid.unwrap();
    // The claim's writes: its own object (but the patch that started the
    // migration), and every change of a pod's owner to or from it.
    let writes: Vec<String> = commits.snapshot()[commits_before..]
        .iter()
        .filter(|commit| {
            let owner =
                |state: &serde_json::Value| state["metadata"]["labels"][labels::CLAIM_UID].as_str().map(str::to_owned);
            match commit.plural.as_str() {
                "cnclaims" => commit.object["metadata"]["name"] == CLAIM,
                "pods" => {
                    let before = commit.old.as_ref().and_then(owner);
                    let after = owner(&commit.object);
                    before != after
                        && (before.as_deref() == Some(uid.as_str()) || after.as_deref() == Some(uid.as_str()))
                }
                _ => false,
            }
        })
        .map(|commit| format!("{} {}", commit.plural, commit.object["metadata"]["name"]))
        .collect();
    let writes = writes.len() - 1; // the migration's start is the user's write
    println!(
        "one migration {source} -> {target} with a {drain:?} drain: done in {took:?}; {reconciles} reconciles, \
         {writes} writes, {} log lines of the claim",
        lines.len()
    );
    for line in &lines {
        println!("  {line}");
    }
    assert!(took >= drain, "the source drained for its {drain:?}: {took:?}");
    assert!(reconciles <= 20, "{reconciles} reconciles");
    assert!(writes <= 10, "{writes} writes");
    assert!(lines.len() <= 10, "{} log lines", lines.len());
}

/// A target lost before the source is released sends the claim back to its
/// source, which still serves the tenant: no Lost, no rebinding, the source
/// never changes owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_target_is_lost_mid_migration_falls_back_to_its_source() {
    let cluster = Cluster::new().await;
    let commits = Commits::record(&cluster).await;
    // A long propagation delay holds the migration between its target's
    // record and its source's release, where the target is lost.
    let config = cnpool_controllers::Config {
        migration_propagation_delay: Duration::from_secs(600),
        ..support::operator_config(cluster.namespace(), 0)
    };
    cluster.start_operator_observed(config, cnpool_controllers::Telemetry::default()).await;
    cluster.create_pool(2, Some(6)).await;
    cluster.create_claim("tenant", &[("account", "acme")], &[]).await;
    let (source, source_uid) = bound_pod(&cluster, "tenant").await;
    let target = idle_pod_other_than(&cluster, &source).await;
    migrate(&cluster, "tenant", &source, &target).await;
    eventually("the target recorded and serving the claim", Duration::from_secs(30), || async {
        let claim: CNClaim = cluster.claims().get("tenant").await.map_err(|e| e.to_string())?;
        let shown =
            claim.status.as_ref().and_then(|status| status.store.as_ref()).and_then(|store| store.pod_uid.clone());
        let target_uid = cluster.pods().get(&target).await.map_err(|e| e.to_string())?.metadata.uid;
        if claim.spec.source_pod.is_some() && shown == target_uid {
            Ok(())
        } else {
            Err(format!("status shows {shown:?}"))
        }
    })
    .await;

    cluster.pods().delete(&target, &Default::default()).await.unwrap();
    let (claim, message) = eventually("the claim back on its source", Duration::from_secs(30), || async {
        let claim: CNClaim = cluster.claims().get("tenant").await.map_err(|e| e.to_string())?;
        match condition(&claim, "Migration") {
            Some((status, reason, message)) if status == "False" && reason == "TargetLost" => Ok((claim, message)),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(claim.spec.source_pod.is_none(), "the fallback clears sourcePod");
    assert_eq!(claim.spec.pod_name, source, "the claim points at its source again");
    assert!(message.contains(&target) && message.contains(&source), "the condition names both pods: {message}");
    eventually("the status describes the source again", Duration::from_secs(30), || async {
        let (pod, uid) = bound_pod(&cluster, "tenant").await;
        if (pod.as_str(), uid.as_str()) == (source.as_str(), source_uid.as_str()) { Ok(()) } else { Err(pod) }
    })
    .await;
    let claim = cluster.claims().get("tenant").await.unwrap();
    let owner = claim.metadata.uid.clone();
    // Idle, then the claim's from its acquire on: never released.
    assert_eq!(owners_in_order(&commits, &source), vec![None, owner], "the source never left the claim");
    assert!(support::loss_reasons(&commits, "tenant").is_empty(), "the claim was never Lost");
}

/// A template rollout moves one standalone claim of a pool at a time; a
/// claim Outdated for the pool's `reclaimTimeout` moves regardless. Here a
/// user's migration holds the pool's pace (its source drains for 30 s), so
/// the other claim waits Outdated, saying since when, until a reclaim
/// timeout it has already outlived is set: it moves at once, while the
/// first migration still runs, onto a pod of the new template.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outdated_claim_past_its_pools_reclaim_timeout_moves_whatever_the_rollouts_pace() {
    let cluster =
        Cluster::with_world(WorldConfig { session_leave_delay: Duration::from_secs(30), ..WorldConfig::default() })
            .await;
    cluster.start_operator(0).await;
    cluster.create_pool(2, Some(8)).await;
    let timeout = json!({"spec": {"strategy": {"drainStrategy": {"timeout": "5m"}}}});
    cluster.pools().patch(support::POOL, &PatchParams::default(), &Patch::Merge(&timeout)).await.unwrap();
    cluster.create_claim("pacer", &[("account", "first")], &[]).await;
    cluster.create_claim("waiter", &[("account", "second")], &[]).await;
    let (pacer_source, _) = bound_pod(&cluster, "pacer").await;
    let (waiter_pod, _) = bound_pod(&cluster, "waiter").await;
    migrate(&cluster, "pacer", &pacer_source, "").await;
    let migrating = |claim: &CNClaim| claim.spec.source_pod.is_some();
    eventually("pacer on its target, its source draining", Duration::from_secs(30), || async {
        let pacer = cluster.claims().get("pacer").await.map_err(|e| e.to_string())?;
        let moved = pacer.spec.pod_name != pacer_source && !pacer.spec.pod_name.is_empty();
        if migrating(&pacer) && moved { Ok(()) } else { Err(format!("{:?}", pacer.spec)) }
    })
    .await;

    let revision = |pod: &k8s_openapi::api::core::v1::Pod| label(pod, labels::REVISION).map(str::to_owned);
    let old_revision = revision(&cluster.pods().get(&waiter_pod).await.unwrap());
    let template = json!({"spec": {"template": {"image": "matrixorigin/matrixone:1.2.1"}}});
    cluster.pools().patch(support::POOL, &PatchParams::default(), &Patch::Merge(&template)).await.unwrap();
    eventually("waiter Outdated, saying since when", Duration::from_secs(30), || async {
        let waiter = cluster.claims().get("waiter").await.map_err(|e| e.to_string())?;
        match (support::claim_phase(&waiter), condition(&waiter, "Outdated")) {
            (Some("Outdated"), Some((status, reason, _))) if status == "True" && reason == "OldTemplate" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // The pace: one migration per pool at a time, and the pacer's runs.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (pacer, waiter) = (cluster.claims().get("pacer").await.unwrap(), cluster.claims().get("waiter").await.unwrap());
    assert!(migrating(&pacer), "the pacer's source still drains: {:?}", pacer.spec);
    assert!(!migrating(&waiter) && waiter.spec.pod_name == waiter_pod, "the waiter waits its turn: {:?}", waiter.spec);

    let reclaim = json!({"spec": {"strategy": {"updateStrategy": {"reclaimTimeout": "2s"}}}});
    cluster.pools().patch(support::POOL, &PatchParams::default(), &Patch::Merge(&reclaim)).await.unwrap();
    eventually("waiter migrating off its old pod while the pacer still migrates", Duration::from_secs(10), || async {
        let waiter = cluster.claims().get("waiter").await.map_err(|e| e.to_string())?;
        let pacer = cluster.claims().get("pacer").await.map_err(|e| e.to_string())?;
        match (&waiter.spec.source_pod, migrating(&pacer)) {
            (Some(source), true) if source.pod_name == waiter_pod => Ok(()),
            (source, pacer) => Err(format!("waiter's source {source:?}, pacer migrating: {pacer}")),
        }
    })
    .await;
    let target = migrated(&cluster, "waiter", &waiter_pod).await;
    let new_revision = revision(&cluster.pods().get(&target).await.unwrap());
    assert!(new_revision.is_some() && new_revision != old_revision, "the waiter is on a pod of the new template");
    let waiter = cluster.claims().get("waiter").await.unwrap();
    let (status, reason, _) = condition(&waiter, "Outdated").expect("the condition stays, False");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "CurrentTemplate"));
}
