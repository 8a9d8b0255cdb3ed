//! A template rollout as a user sees it: after the pool's template changes,
//! every claim ends on a pod of the new template — standalone claims moved
//! by the operator, a claim set's members replaced by surge — and the set
//! still has its replicas. The legacy model, which has neither template
//! revisions nor claim sets, refuses the scenario instead of running half of it.
#![allow(clippy::unwrap_used)] // a test fails by panicking

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use cnpool_api::labels;
use cnpool_apiserver::{Event, EventType};
use cnpool_sim::ledger::Ledger;
use cnpool_sim::{Controllers, Keep, Observer, RunError, Scenario};
use serde_json::Value;

const ROLLOUT: &str = r#"
name: small-rollout
duration: 6m
settle: 11m
pool: {name: small, maxIdle: 1, maxPods: 12, drainTimeout: 2m, minDelay: 2s}
world: {startDelay: 2s, stopDelay: 1s, sessionLeaveDelay: 3s}
steps:
  - {at: 0s, createClaims: {count: 3}}
  - {at: 0s, createClaimSet: {name: web, replicas: 4}}
  - {at: 90s, changeTemplate: {image: "matrixorigin/matrixone:sim-v2"}}
"#;

/// The last committed state of every object, and the revision of the
/// first pod.
#[derive(Default)]
struct LastState {
    objects: Mutex<BTreeMap<(String, String), Value>>,
    first_revision: Mutex<Option<String>>,
}

impl Observer for LastState {
    fn commit(&self, event: &Event, _: &Ledger) {
        let name = event.object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let key = (event.storage.plural.clone(), name);
        if let Some(revision) = label(&event.object, labels::REVISION) {
            self.first_revision.lock().unwrap().get_or_insert_with(|| revision.to_owned());
        }
        let mut objects = self.objects.lock().unwrap();
        match event.event_type {
            EventType::Deleted => objects.remove(&key),
            _ => objects.insert(key, event.object.clone()),
        };
    }
}

fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object.pointer("/metadata/labels").and_then(|labels| labels.get(key)).and_then(Value::as_str)
}

#[test]
fn after_a_template_change_every_claim_holds_a_pod_of_the_new_template() {
    let scenario = Scenario::from_yaml("small-rollout", ROLLOUT).unwrap();
    for seed in [1, 2] {
        let last = Arc::new(LastState::default());
        let outcome =
            cnpool_sim::run_observed(&scenario, seed, Controllers::Cnpool, Keep::default(), last.clone()).unwrap();
        let objects = last.objects.lock().unwrap();
        let of = |plural: &'static str| {
            objects.iter().filter(move |((kind, _), _)| kind == plural).map(|(_, object)| object)
        };
        let first_revision = last.first_revision.lock().unwrap().clone();
        let claims: Vec<&Value> = of("cnclaims").collect();
        assert_eq!(claims.len(), 7, "seed {seed}: three standalone claims and four members");
        let members = claims.iter().filter(|claim| label(claim, labels::CLAIM_SET) == Some("web")).count();
        assert_eq!(members, 4, "seed {seed}: the claim set keeps its replicas");
        let revisions: Vec<(String, String)> = claims
            .iter()
            .map(|claim| {
                let name = claim.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
                let phase = claim.pointer("/status/phase").and_then(Value::as_str).unwrap_or_default();
                assert_eq!(phase, "Bound", "seed {seed}: claim {name} after the rollout");
                let pod = claim.pointer("/spec/podName").and_then(Value::as_str).unwrap_or_default();
                let pod = objects.get(&("pods".to_owned(), pod.to_owned())).unwrap();
                (name.to_owned(), label(pod, labels::REVISION).unwrap_or_default().to_owned())
            })
            .collect();
        let current = &revisions[0].1;
        assert!(revisions.iter().all(|(_, revision)| revision == current), "seed {seed}: {revisions:?}");
        assert_ne!(first_revision.as_ref(), Some(current), "seed {seed}: the claims hold pods of the old template");
        assert!(
            of("pods").all(|pod| label(pod, labels::REVISION) == Some(current.as_str())),
            "seed {seed}: pods of the old template are left"
        );
        let violations: Vec<String> =
            outcome.violations.iter().map(|v| format!("{:?}: {}", v.invariant, v.detail)).collect();
        assert!(violations.is_empty(), "seed {seed}: {violations:?}");
    }
}

#[test]
fn the_legacy_model_refuses_steps_it_cannot_run() {
    let scenario = Scenario::from_yaml("small-rollout", ROLLOUT).unwrap();
    match cnpool_sim::run(&scenario, 1, Controllers::Legacy, Keep::default()) {
        Err(error @ RunError::Unsupported { .. }) => {
            let message = error.to_string();
            assert!(message.contains("step 2 (createClaimSet)") && message.contains("claim-set"), "{message}");
        }
        Err(other) => panic!("another error: {other}"),
        Ok(_) => panic!("the legacy model ran a scenario with a claim set"),
    }
}
