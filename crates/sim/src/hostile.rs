//! The control plane's hostile specs (DESIGN §2 "Inputs", I8): what a
//! cluster without the webhook, or with objects stored before a limit
//! existed, can hold. Each draw is counted as a fault of its kind
//! ([`Hostile::fault`]); the checker's I8 and I1–I7 must hold whatever it
//! writes, and I4 does not wait for the claims it makes invalid.
//!
//! Specs a kube-apiserver's CRD schema refuses (negative numbers, operator
//! `Like`) are drawn too: the embedded server may not enforce the schema,
//! and a real cluster holds such objects when they were stored before the
//! schema said so. A huge `replicas` of a claim set is not drawn: it is a
//! valid request for that many claims, which no run could serve.

use std::sync::Arc;
use std::time::Duration;

use cnpool_api::{CNClaim, CNClaimSet, CNPool, ClaimPhase, labels};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::ledger::{Fault, Ledger, Reach};

/// One kind of hostile spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Hostile {
    /// A claim's `additionalPodLabels` carry `claim-uid` with another live
    /// claim's UID (one no claim has when it sees none).
    ClaimUidLabel,
    /// ... carry `phase`.
    PhaseLabel,
    /// ... carry `matrixorigin.io/owner`.
    OwnerLabel,
    /// ... carry `claimed-by` with another claim's name.
    ClaimedByLabel,
    /// ... carry an empty value, on an owner key or another.
    EmptyLabel,
    /// A claim's selector matches no pod of its pool.
    SelectorNothing,
    /// A claim's selector is empty: it matches every pod.
    SelectorAll,
    /// A claim's selector uses operator `Like`, which does not exist.
    OperatorLike,
    /// A claim set's `replicas`, or a pool's `maxIdle` or `maxPods`, is negative.
    NegativeNumber,
    /// A pool's `maxPods` or `maxIdle` is `i32::MAX`.
    HugeNumber,
    /// A claim set's template carries owner or phase labels for its claims' pods.
    SetOwnerLabels,
    /// A pool's `podLabels` carry owner or phase labels.
    PoolOwnerLabel,
    /// A claim's `additionalPodLabels` or selector is edited after its
    /// creation, before it is Bound.
    EditMidBind,
}

impl Hostile {
    pub const ALL: [Hostile; 13] = [
        Hostile::ClaimUidLabel,
        Hostile::PhaseLabel,
        Hostile::OwnerLabel,
        Hostile::ClaimedByLabel,
        Hostile::EmptyLabel,
        Hostile::SelectorNothing,
        Hostile::SelectorAll,
        Hostile::OperatorLike,
        Hostile::NegativeNumber,
        Hostile::HugeNumber,
        Hostile::SetOwnerLabels,
        Hostile::PoolOwnerLabel,
        Hostile::EditMidBind,
    ];

    /// The fault-table row that counts it.
    pub fn fault(self) -> Fault {
        match self {
            Hostile::ClaimUidLabel => Fault::ClaimUidLabel,
            Hostile::PhaseLabel => Fault::PhaseLabel,
            Hostile::OwnerLabel => Fault::OwnerLabel,
            Hostile::ClaimedByLabel => Fault::ClaimedByLabel,
            Hostile::EmptyLabel => Fault::EmptyLabel,
            Hostile::SelectorNothing => Fault::SelectorNothing,
            Hostile::SelectorAll => Fault::SelectorAll,
            Hostile::OperatorLike => Fault::OperatorLike,
            Hostile::NegativeNumber => Fault::NegativeNumber,
            Hostile::HugeNumber => Fault::HugeNumber,
            Hostile::SetOwnerLabels => Fault::SetOwnerLabels,
            Hostile::PoolOwnerLabel => Fault::PoolOwnerLabel,
            Hostile::EditMidBind => Fault::EditMidBind,
        }
    }
}

/// How long a hostile pool or claim set lives before the control plane
/// deletes it: short enough to end before the faults stop (hostile steps
/// come at least a minute before), so that the settle sees it gone.
const SHORT_LIFE: std::ops::RangeInclusive<u64> = 20..=50;

/// What the control plane needs to write hostile specs.
#[derive(Clone)]
pub struct ControlPlane {
    pub client: kube::Client,
    pub ledger: Arc<Ledger>,
    pub namespace: &'static str,
    /// The scenario's pool, whose claims these are.
    pub pool: String,
}

impl ControlPlane {
    /// Writes one hostile spec of `kind`; `serial` names what it creates.
    pub async fn act(&self, kind: Hostile, serial: u32, rng: &mut fastrand::Rng) {
        let claims = self.live_claims().await;
        match kind {
            Hostile::ClaimUidLabel
            | Hostile::PhaseLabel
            | Hostile::OwnerLabel
            | Hostile::ClaimedByLabel
            | Hostile::EmptyLabel => {
                // Half the draws edit a live claim, Bound or not (its pod's
                // labels are rewritten from its spec), half create one.
                let target = rng.bool().then(|| pick(rng, &claims)).flatten();
                let others: Vec<&CNClaim> = claims.iter().filter(|claim| Some(*claim) != target).collect();
                let labels = hostile_labels(kind, &others, rng);
                let spec = json!({"additionalPodLabels": labels});
                self.write_claim(kind, target, serial, spec).await;
            }
            Hostile::SelectorNothing | Hostile::SelectorAll | Hostile::OperatorLike => {
                let target = rng.bool().then(|| pick(rng, &claims)).flatten();
                // A merge patch: `matchLabels: null` removes the pool's label.
                let selector = match kind {
                    Hostile::SelectorNothing => json!({"matchLabels": {"tier": "none-such"}}),
                    Hostile::SelectorAll => json!({"matchLabels": null}),
                    _ => json!({"matchExpressions": [{"key": "tier", "operator": "Like", "values": ["standard"]}]}),
                };
                self.write_claim(kind, target, serial, json!({"selector": selector})).await;
            }
            Hostile::NegativeNumber if rng.bool() => {
                let replicas = -rng.i32(1..=5);
                self.create_set(kind, serial, replicas, json!({}), rng).await;
            }
            Hostile::NegativeNumber => {
                let (max_idle, max_pods) = if rng.bool() { (-rng.i32(1..=3), 2) } else { (1, -rng.i32(1..=3)) };
                self.create_pool(kind, serial, max_idle, max_pods, json!({}), rng).await;
            }
            Hostile::HugeNumber => {
                let (max_idle, max_pods) = if rng.bool() { (1, i32::MAX) } else { (i32::MAX, 2) };
                self.create_pool(kind, serial, max_idle, max_pods, json!({}), rng).await;
            }
            Hostile::SetOwnerLabels => {
                let others: Vec<&CNClaim> = claims.iter().collect();
                let kinds = [Hostile::ClaimUidLabel, Hostile::ClaimedByLabel, Hostile::PhaseLabel, Hostile::OwnerLabel];
                let labels = hostile_labels(kinds[rng.usize(..kinds.len())], &others, rng);
                self.create_set(kind, serial, rng.i32(1..=2), labels, rng).await;
            }
            Hostile::PoolOwnerLabel => {
                let others: Vec<&CNClaim> = claims.iter().collect();
                let kinds = [Hostile::ClaimUidLabel, Hostile::ClaimedByLabel, Hostile::PhaseLabel, Hostile::OwnerLabel];
                let labels = hostile_labels(kinds[rng.usize(..kinds.len())], &others, rng);
                self.create_pool(kind, serial, 1, 2, labels, rng).await;
            }
            Hostile::EditMidBind => {
                let name = format!("edited-{serial:03}");
                if self.create_claim(&name, json!({})).await {
                    let wait = Duration::from_millis(rng.u64(0..=2000));
                    let edit = match rng.u32(0..4) {
                        0 => json!({"additionalPodLabels": {"team": "blue"}}),
                        1 => json!({"selector": {"matchLabels": {"tier": "none-such"}}}),
                        2 => json!({"selector": {"matchLabels": null}}),
                        _ => {
                            let others: Vec<&CNClaim> = claims.iter().collect();
                            json!({"additionalPodLabels": hostile_labels(Hostile::ClaimUidLabel, &others, rng)})
                        }
                    };
                    tokio::spawn(self.clone().edit_before_bound(name, wait, edit));
                }
            }
        }
    }

    async fn live_claims(&self) -> Vec<CNClaim> {
        let claims: Api<CNClaim> = Api::namespaced(self.client.clone(), self.namespace);
        let listed = claims.list(&ListParams::default()).await.map(|list| list.items).unwrap_or_default();
        listed.into_iter().filter(|claim| claim.metadata.deletion_timestamp.is_none()).collect()
    }

    /// Merges `spec` into `target`'s spec, or creates a claim with it.
    async fn write_claim(&self, kind: Hostile, target: Option<&CNClaim>, serial: u32, spec: Value) {
        let claims: Api<CNClaim> = Api::namespaced(self.client.clone(), self.namespace);
        let Some(target) = target.and_then(|claim| claim.metadata.name.clone()) else {
            let name = format!("hostile-{serial:03}");
            self.count(kind, &name, format_args!("create claim {name} with {spec}"));
            self.create_claim(&name, spec).await;
            return;
        };
        self.count(kind, &target, format_args!("edit claim {target}: {spec}"));
        let patch = json!({"spec": spec});
        if let Err(error) = claims.patch(&target, &PatchParams::default(), &Patch::Merge(&patch)).await {
            tracing::debug!(%error, claim = target, "control plane: hostile edit refused");
        }
    }

    /// Creates a claim of the pool, as the scenario's claims are, with
    /// `spec` merged over theirs; whether it was created.
    async fn create_claim(&self, name: &str, spec: Value) -> bool {
        let mut object = json!({
            "apiVersion": "core.matrixorigin.io/v1alpha1",
            "kind": "CNClaim",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "selector": {"matchLabels": {"tier": "standard"}},
                "poolName": self.pool,
                "cnLabels": [{"key": "account", "values": [name]}],
                "ownerName": format!("owner-{name}"),
            },
        });
        merge(&mut object["spec"], spec);
        let Ok(claim) = serde_json::from_value::<CNClaim>(object) else { return false };
        let claims: Api<CNClaim> = Api::namespaced(self.client.clone(), self.namespace);
        match claims.create(&PostParams::default(), &claim).await {
            Ok(_) => true,
            Err(error) => {
                tracing::debug!(%error, claim = name, "control plane: hostile claim refused");
                false
            }
        }
    }

    /// [`Hostile::EditMidBind`]: `wait` after its creation, edits the
    /// claim's spec if it is not Bound yet (and counts the draw only then).
    async fn edit_before_bound(self, name: String, wait: Duration, edit: Value) {
        tokio::time::sleep(wait).await;
        let claims: Api<CNClaim> = Api::namespaced(self.client.clone(), self.namespace);
        let Ok(claim) = claims.get(&name).await else { return };
        if claim.phase() == Some(ClaimPhase::Bound) || claim.metadata.deletion_timestamp.is_some() {
            return;
        }
        self.count(Hostile::EditMidBind, &name, format_args!("edit claim {name} before Bound: {edit}"));
        let patch = json!({"spec": edit});
        if let Err(error) = claims.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            tracing::debug!(%error, claim = name, "control plane: edit refused");
        }
    }

    /// A claim set of the pool with `replicas`, whose claims' pods get
    /// `pod_labels`; deleted again a little later.
    async fn create_set(&self, kind: Hostile, serial: u32, replicas: i32, pod_labels: Value, rng: &mut fastrand::Rng) {
        let name = format!("hostile-set-{serial:03}");
        self.count(kind, &name, format_args!("create claim set {name} of {replicas}, pod labels {pod_labels}"));
        let object = json!({
            "apiVersion": "core.matrixorigin.io/v1alpha1",
            "kind": "CNClaimSet",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "replicas": replicas,
                "template": {"spec": {
                    "selector": {"matchLabels": {"tier": "standard"}},
                    "poolName": self.pool,
                    "cnLabels": [{"key": "account", "values": [name]}],
                    "additionalPodLabels": pod_labels,
                }},
            },
        });
        let Ok(set) = serde_json::from_value::<CNClaimSet>(object) else { return };
        let sets: Api<CNClaimSet> = Api::namespaced(self.client.clone(), self.namespace);
        if let Err(error) = sets.create(&PostParams::default(), &set).await {
            tracing::debug!(%error, claim_set = name, "control plane: hostile claim set refused");
            return;
        }
        tokio::spawn(delete_later(sets, name, Duration::from_secs(rng.u64(SHORT_LIFE))));
    }

    /// A second pool, of at most a few pods, with these numbers and
    /// `pod_labels` beside its own; deleted again a little later.
    async fn create_pool(
        &self,
        kind: Hostile,
        serial: u32,
        max_idle: i32,
        max_pods: i32,
        pod_labels: Value,
        rng: &mut fastrand::Rng,
    ) {
        let name = format!("hostile-pool-{serial:03}");
        self.count(
            kind,
            &name,
            format_args!("create pool {name}: maxIdle {max_idle}, maxPods {max_pods}, pod labels {pod_labels}"),
        );
        let mut labels = json!({"tier": "hostile"});
        merge(&mut labels, pod_labels);
        let object = json!({
            "apiVersion": "core.matrixorigin.io/v1alpha1",
            "kind": "CNPool",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "template": {"image": "matrixorigin/matrixone:sim", "semanticVersion": "1.2.0"},
                "podLabels": labels,
                "strategy": {
                    "scaleStrategy": {"maxIdle": max_idle, "maxPods": max_pods},
                    "drainStrategy": {"minDelay": "1s", "timeout": "30s"},
                },
            },
        });
        let Ok(pool) = serde_json::from_value::<CNPool>(object) else { return };
        let pools: Api<CNPool> = Api::namespaced(self.client.clone(), self.namespace);
        if let Err(error) = pools.create(&PostParams::default(), &pool).await {
            tracing::debug!(%error, pool = name, "control plane: hostile pool refused");
            return;
        }
        tokio::spawn(delete_later(pools, name, Duration::from_secs(rng.u64(SHORT_LIFE))));
    }

    fn count(&self, kind: Hostile, name: &str, detail: std::fmt::Arguments<'_>) {
        let reach = Reach::Object { name: name.to_owned(), lasting: Duration::ZERO };
        self.ledger.fault(kind.fault(), reach, detail);
    }
}

async fn delete_later<K>(api: Api<K>, name: String, after: Duration)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    tokio::time::sleep(after).await;
    let _ = api.delete(&name, &DeleteParams::default()).await;
}

fn pick<'a>(rng: &mut fastrand::Rng, claims: &'a [CNClaim]) -> Option<&'a CNClaim> {
    (!claims.is_empty()).then(|| &claims[rng.usize(..claims.len())])
}

/// The labels of a reserved-key kind: another claim's UID or name where
/// the kind names an owner (one no claim has when `others` is empty).
fn hostile_labels(kind: Hostile, others: &[&CNClaim], rng: &mut fastrand::Rng) -> Value {
    let other = (!others.is_empty()).then(|| others[rng.usize(..others.len())]);
    let uid = other.and_then(|claim| claim.metadata.uid.clone()).unwrap_or_else(|| "no-such-claim-uid".into());
    let name = other.and_then(|claim| claim.metadata.name.clone()).unwrap_or_else(|| "mallory".into());
    match kind {
        Hostile::ClaimUidLabel => json!({labels::CLAIM_UID: uid}),
        Hostile::ClaimedByLabel => json!({labels::CLAIMED_BY: name}),
        Hostile::PhaseLabel => {
            let phases = ["Idle", "Bound", "Draining", "Terminating"];
            json!({labels::PHASE: phases[rng.usize(..phases.len())]})
        }
        Hostile::OwnerLabel => json!({labels::OWNER: "mallory"}),
        _ => {
            let keys = [labels::CLAIM_UID, labels::CLAIMED_BY, labels::PHASE, "team"];
            json!({keys[rng.usize(..keys.len())]: ""})
        }
    }
}

/// JSON merge (RFC 7386) of `patch` into `target`.
fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(&key);
                } else {
                    merge(target.entry(key).or_insert(Value::Null), value);
                }
            }
        }
        (target, patch) => *target = patch,
    }
}
