#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! `cnpool doctor` as a user runs it: its own process, against a cluster
//! with no operator running, reaching the simulated HAKeeper of
//! `cnpool dev --no-operator` over morpc. On the embedded API server, or on
//! a real one when `CNPOOL_E2E_KUBECONFIG` names it.

#[path = "../../controllers/tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use cnpool_api::{CNClaim, cn_store_uuid, labels};
use cnpool_registry::StoreLabels;
use futures::StreamExt;
use kube::api::PostParams;
use serde_json::Value;
use support::{Cluster, POOL, claim_phase, eventually, label, legacy};

const CNPOOL: &str = env!("CARGO_BIN_EXE_cnpool");

/// One run of `cnpool doctor --json`.
struct Run {
    code: i32,
    report: Value,
    /// The verbs of the doctor's requests in the API server's audit log,
    /// when the server keeps one (`CNPOOL_E2E_AUDIT_LOG`, ci/kube/start.sh).
    audited: Option<BTreeSet<String>>,
}

/// Runs `cnpool doctor --json` (and `extra`) on `cluster`.
async fn doctor(cluster: &Cluster, extra: &[&str]) -> Run {
    let audit_log =
        std::env::var_os("CNPOOL_E2E_AUDIT_LOG").filter(|_| std::env::var_os("CNPOOL_E2E_KUBECONFIG").is_some());
    let audited_before = audit_log.as_ref().map(|log| std::fs::metadata(log).map_or(0, |meta| meta.len()));
    let output = tokio::process::Command::new(CNPOOL)
        .arg("doctor")
        .arg("--kubeconfig")
        .arg(cluster.operator_kubeconfig())
        .args(["--namespace", cluster.namespace(), "--json"])
        .args(["--hakeeper-discovery", &cluster.processes().discovery])
        .args(extra)
        .output()
        .await
        .expect("run cnpool doctor");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|error| {
        panic!("doctor's JSON ({error}): {stdout}\nstderr: {}", String::from_utf8_lossy(&output.stderr))
    });
    let audited = match (audit_log, audited_before) {
        (Some(log), Some(from)) => Some(audited_verbs(&log, from).await),
        _ => None,
    };
    Run { code: output.status.code().expect("doctor exited"), report, audited }
}

/// The verbs of the requests with the doctor's User-Agent that the audit
/// log at `log` recorded after byte `from`. The server writes an event
/// once the response is complete: wait until the count settles.
async fn audited_verbs(log: &std::ffi::OsStr, from: u64) -> BTreeSet<String> {
    let read = || {
        let text = std::fs::read(log).expect("the API server's audit log");
        let since = text.get(usize::try_from(from).unwrap()..).unwrap_or_default().to_vec();
        String::from_utf8_lossy(&since)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|event| event["userAgent"].as_str().is_some_and(|agent| agent.starts_with("cnpool-doctor/")))
            .map(|event| event["verb"].as_str().unwrap_or("?").to_owned())
            .collect::<Vec<String>>()
    };
    let mut seen = read();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = read();
        if now.len() == seen.len() {
            return now.into_iter().collect();
        }
        seen = now;
    }
}

/// Each finding (not information) as `check: kind/name, ...`, objects sorted.
fn findings(report: &Value) -> BTreeSet<String> {
    let findings = report["findings"].as_array().expect("findings");
    findings
        .iter()
        .filter(|finding| finding["severity"] == "finding")
        .map(|finding| {
            let mut objects: Vec<String> = finding["objects"]
                .as_array()
                .expect("objects")
                .iter()
                .map(|object| format!("{}/{}", object["kind"].as_str().unwrap(), object["name"].as_str().unwrap()))
                .collect();
            objects.sort();
            format!("{}: {}", finding["check"].as_str().unwrap(), objects.join(", "))
        })
        .collect()
}

/// The report's JSON Schema, as docs/runbook.md documents it.
fn documented_schema() -> Value {
    let runbook = include_str!("../../../docs/runbook.md");
    let section = runbook.split("## First: `cnpool doctor`").nth(1).expect("the doctor's section of the runbook");
    let block = section.split("```json\n").nth(1).and_then(|rest| rest.split("\n```").next()).expect("its schema");
    serde_json::from_str(block).expect("the runbook's schema is JSON")
}

/// Checks `value` against the subset of JSON Schema the runbook uses
/// (type, enum, required, properties, additionalProperties, items); the
/// path and what is wrong, for each violation.
fn violations(schema: &Value, value: &Value, path: &str, found: &mut Vec<String>) {
    let type_of = |value: &Value| match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(number) if number.is_i64() || number.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let types: Vec<&str> = match &schema["type"] {
        Value::String(one) => vec![one.as_str()],
        Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && !types.contains(&type_of(value)) {
        found.push(format!("{path}: {value} is not of type {types:?}"));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array().filter(|allowed| !allowed.contains(value)) {
        found.push(format!("{path}: {value} is not one of {allowed:?}"));
    }
    if let Value::Object(fields) = value {
        for required in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if !fields.contains_key(required) {
                found.push(format!("{path}: no {required}"));
            }
        }
        for (key, field) in fields {
            match (schema["properties"].get(key), &schema["additionalProperties"]) {
                (Some(field_schema), _) => violations(field_schema, field, &format!("{path}.{key}"), found),
                (None, Value::Bool(false)) => found.push(format!("{path}: {key} is not documented")),
                (None, Value::Object(_)) => {
                    violations(&schema["additionalProperties"], field, &format!("{path}.{key}"), found);
                }
                (None, _) => {}
            }
        }
    }
    if let (Value::Array(items), Some(item_schema)) = (value, schema.get("items")) {
        for (at, item) in items.iter().enumerate() {
            violations(item_schema, item, &format!("{path}[{at}]"), found);
        }
    }
}

fn follows_the_documented_schema(report: &Value) {
    let mut found = Vec::new();
    violations(&documented_schema(), report, "report", &mut found);
    assert!(found.is_empty(), "the report differs from docs/runbook.md's schema: {found:#?}\n{report:#}");
}

/// The verbs of every request the doctor counted.
fn verbs(report: &Value) -> BTreeSet<String> {
    report["requests"].as_object().expect("requests").keys().cloned().collect()
}

const READS: [&str; 3] = ["get", "list", "watch"];

/// The doctor sent nothing but reads: by its own count and, on a real
/// server, by the server's audit log.
fn read_only(run: &Run) {
    let verbs = verbs(&run.report);
    assert!(!verbs.is_empty(), "the doctor counts its requests: {}", run.report);
    let writes: Vec<&String> = verbs.iter().filter(|verb| !READS.contains(&verb.as_str())).collect();
    assert!(writes.is_empty(), "a read-only doctor sent {writes:?}: {}", run.report["requests"]);
    if let Some(audited) = &run.audited {
        assert!(!audited.is_empty(), "the audit log shows the doctor's requests");
        assert!(audited.iter().all(|verb| READS.contains(&verb.as_str())), "the server saw {audited:?}");
    }
}

/// The freetier-01 incident's state, as the Go operator left it: found
/// exactly, with nothing written; `--fix` repairs the misbound claim and
/// the orphan; the operator started afterwards heals the rest within 60 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_incidents_state_is_found_exactly_repaired_by_fix_and_healed_by_the_operator() {
    let cluster = Cluster::with_processes(CNPOOL).await;
    let ns = cluster.namespace().to_owned();
    // mo-2 is named by shared-a (its claimed-by) and shared-b; dangling
    // points at mo-9, which is gone.
    legacy::leave_go_operator_state(&cluster).await;
    // Another tenant's labels on mo-1's store: solo's, while other owns mo-1.
    let solo: StoreLabels = [("account".to_string(), vec!["solo".to_string()])].into();
    cluster.label_store(&cn_store_uuid("mo-1", POOL, &ns), &solo).await;
    // An orphan: bound by the Go operator to a claim that is gone.
    cluster.pods().create(&PostParams::default(), &legacy::go_pod(&ns, "mo-3", "ghost")).await.unwrap();

    let run = doctor(&cluster, &[]).await;
    let (code, report) = (run.code, &run.report);
    let expected: BTreeSet<String> = [
        "shared-pod: CNClaim/shared-a, CNClaim/shared-b, Pod/mo-2".to_string(),
        "lost-pod: CNClaim/dangling, Pod/mo-9".to_string(),
        format!(
            "foreign-store-labels: CNClaim/other, CNClaim/solo, CNStore/{}, Pod/mo-1",
            cn_store_uuid("mo-1", POOL, &ns)
        ),
        "orphan-pod: Pod/mo-3".to_string(),
    ]
    .into();
    assert_eq!(findings(report), expected, "{report:#}");
    assert_eq!(code, 1, "findings exit 1");
    follows_the_documented_schema(report);
    assert_eq!(report["summary"]["findings"], 4);
    read_only(&run);
    let adopted: BTreeSet<String> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|finding| finding["check"] == "legacy-binding")
        .map(|finding| finding["objects"][0]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(adopted, ["other", "shared-a", "solo"].map(String::from).into(), "what cutover adopts is listed");

    let fix = doctor(&cluster, &["--fix"]).await;
    let fixed = &fix.report;
    assert_eq!(fix.code, 1, "the findings it fixed were there: {fixed:#}");
    follows_the_documented_schema(fixed);
    if let Some(audited) = &fix.audited {
        // The server saw the claim writes and the pod patch.
        assert!(audited.contains("update") && audited.contains("patch"), "the server saw {audited:?}");
    }
    let outcomes: BTreeSet<String> = fixed["fixes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|fix| format!("{} {}", fix["outcome"].as_str().unwrap(), fix["write"].as_str().unwrap()))
        .collect();
    assert_eq!(
        outcomes,
        [
            format!("applied CNClaim {ns}/shared-b: status Lost (Misbound), then spec.podName cleared"),
            format!("applied Pod {ns}/mo-3: guarded release from the Go operator's claimed-by ghost"),
        ]
        .into(),
        "{fixed:#}"
    );
    let claims = cluster.all_claims().await;
    let named: Vec<&str> =
        claims.iter().map(|claim| claim.spec.pod_name.as_str()).filter(|pod| !pod.is_empty()).collect();
    let distinct: BTreeSet<&str> = named.iter().copied().collect();
    assert_eq!(named.len(), distinct.len(), "no pod is named by two claims: {named:?}");
    let shared_b = claims.iter().find(|claim| claim.metadata.name.as_deref() == Some("shared-b")).unwrap();
    assert_eq!(claim_phase(shared_b), Some("Lost"));
    let condition = shared_b.status.as_ref().unwrap().conditions.iter().find(|c| c.type_ == "Bound").unwrap();
    assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", "Misbound"));
    let orphan = cluster.pods().get("mo-3").await.unwrap();
    assert_eq!(label(&orphan, labels::CLAIMED_BY), None, "the orphan is released");
    assert_eq!(label(&orphan, labels::PHASE), Some("Draining"));

    cluster.start_operator(0).await;
    let healed = eventually("a clean doctor run after the operator started", Duration::from_secs(60), || async {
        let run = doctor(&cluster, &[]).await;
        if run.code == 0 { Ok(run) } else { Err(format!("exit {}: {:?}", run.code, findings(&run.report))) }
    })
    .await;
    assert!(findings(&healed.report).is_empty());
    read_only(&healed);
}

/// 1,000 claims Bound by the operator, which is then stopped: the doctor
/// reports nothing at all and only reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_cluster_of_a_thousand_bound_claims_reports_nothing() {
    const CLAIMS: usize = 1000;
    let cluster = Cluster::with_processes(CNPOOL).await;
    cluster.start_operator(0).await;
    cluster.create_pool(0, Some(i32::try_from(CLAIMS).unwrap())).await;
    futures::stream::iter(0..CLAIMS)
        .for_each_concurrent(16, |n| {
            let cluster = &cluster;
            async move {
                let name = format!("tenant-{n}");
                cluster.create_claim(&name, &[("account", &name)], &[]).await;
            }
        })
        .await;
    eventually("every claim Bound", Duration::from_secs(600), || async {
        let claims: Vec<CNClaim> = cluster.all_claims().await;
        let bound = claims.iter().filter(|claim| claim_phase(claim) == Some("Bound")).count();
        if bound == CLAIMS { Ok(()) } else { Err(format!("{bound} of {CLAIMS} Bound")) }
    })
    .await;
    cluster.processes().kill_operators();

    let run = doctor(&cluster, &[]).await;
    let report = &run.report;
    assert_eq!(report["findings"], Value::Array(Vec::new()), "{report:#}");
    assert_eq!(run.code, 0);
    follows_the_documented_schema(report);
    assert_eq!(report["read"]["claims"], CLAIMS);
    assert!(report["read"]["pods"].as_u64().unwrap() >= CLAIMS as u64, "{}", report["read"]);
    read_only(&run);
}

/// The schema check fails on what the runbook does not document.
#[test]
fn the_schema_check_refuses_a_report_the_runbook_does_not_describe() {
    let report = serde_json::json!({
        "schemaVersion": 1, "namespace": null, "unread": [], "fixes": [], "requests": {"get": 1},
        "read": {"pods": 0, "claims": 0, "claimSets": 0, "pools": 0, "stores": 0},
        "summary": {"findings": 0, "information": 0, "exitCode": 0},
        "findings": [],
    });
    let mut found = Vec::new();
    violations(&documented_schema(), &report, "report", &mut found);
    assert!(found.is_empty(), "{found:?}");
    let mut tampered = report.clone();
    tampered["summary"]["exitCode"] = serde_json::json!(3);
    tampered["findings"] = serde_json::json!([{"check": "shared-pod"}]);
    tampered["extra"] = serde_json::json!(true);
    violations(&documented_schema(), &tampered, "report", &mut found);
    assert_eq!(found.len(), 8, "exit code, extra, and six fields of the finding: {found:#?}");
}
