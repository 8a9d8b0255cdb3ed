//! `--fix`: the findings' writes, each one of the operator's own — the
//! guarded pod transition of `cnpool_controllers::ownership`, and the claim
//! writes that show a misbound claim Lost and let it bind again, each at
//! the resourceVersion the confirmation read. Safe beside a running
//! operator: a write whose guard fails (the object changed since it was
//! read) is reported as refused, never sent again.

use cnpool_api::CNClaim;
use cnpool_controllers::claim::{lost_status, rebind_spec};
use cnpool_controllers::ownership::{self, Outcome, Transition};
use cnpool_controllers::{is_not_found, is_stale};
use cnpool_core::claim::{AfterRelease, LossReason};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;

use crate::finding::{Finding, Owner, Write};
use crate::snapshot::Snapshot;

/// What became of one write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Applied {
    /// The write, as a person reads it.
    pub write: String,
    pub outcome: WriteOutcome,
    /// The server's answer when it refused or failed.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteOutcome {
    /// Written.
    Applied,
    /// The object changed (or went) since it was read: its guard refused
    /// the write. Run the doctor again.
    Refused,
    /// Nothing to write: the object read no longer needs it.
    NotNeeded,
    /// The server answered an error.
    Failed,
}

/// Carries out the writes of `findings` over the objects of `snapshot`
/// (the confirmation's read), in order, one attempt each.
pub async fn apply(client: &kube::Client, snapshot: &Snapshot, findings: &[Finding]) -> Vec<Applied> {
    let mut applied = Vec::new();
    let mut done: Vec<&Write> = Vec::new();
    for write in findings.iter().flat_map(|finding| &finding.fix.writes) {
        if done.contains(&write) {
            continue;
        }
        done.push(write);
        let (outcome, detail) = match write {
            Write::MarkMisbound { namespace, claim } => mark_misbound(client, snapshot, namespace, claim).await,
            Write::ReleasePod { namespace, pod, owner } => release(client, snapshot, namespace, pod, owner).await,
        };
        tracing::info!(write = %write, outcome = ?outcome, %detail, "doctor write");
        applied.push(Applied { write: write.to_string(), outcome, detail });
    }
    applied
}

fn find<'a, K: Resource>(objects: &'a [K], namespace: &str, name: &str) -> Option<&'a K> {
    objects.iter().find(|object| {
        object.meta().namespace.as_deref() == Some(namespace) && object.meta().name.as_deref() == Some(name)
    })
}

/// A refused guard (the object changed or went) is an outcome, as it is
/// for the operator.
fn answered(error: kube::Error) -> (WriteOutcome, String) {
    let refused = is_stale(&error) || is_not_found(&error);
    let outcome = if refused { WriteOutcome::Refused } else { WriteOutcome::Failed };
    (outcome, error.to_string())
}

async fn mark_misbound(
    client: &kube::Client,
    snapshot: &Snapshot,
    namespace: &str,
    name: &str,
) -> (WriteOutcome, String) {
    let Some(claim) = find(&snapshot.claims, namespace, name) else {
        return (WriteOutcome::Refused, "the claim is gone".to_owned());
    };
    let claims: Api<CNClaim> = Api::namespaced(client.clone(), namespace);
    let shown = match lost_status(claim, LossReason::Misbound, jiff::Timestamp::now()) {
        None => claim.clone(),
        Some(lost) => match claims.replace_status(name, &PostParams::default(), &lost).await {
            Ok(written) => written,
            Err(error) => return answered(error),
        },
    };
    if shown.spec.pod_name.is_empty() && shown.spec.node_name.is_empty() {
        return (WriteOutcome::Applied, String::new());
    }
    match claims.replace(&shown.name_any(), &PostParams::default(), &rebind_spec(&shown)).await {
        Ok(_) => (WriteOutcome::Applied, String::new()),
        Err(error) => answered(error),
    }
}

async fn release(
    client: &kube::Client,
    snapshot: &Snapshot,
    namespace: &str,
    name: &str,
    owner: &Owner,
) -> (WriteOutcome, String) {
    let Some(pod) = find::<Pod>(&snapshot.pods, namespace, name) else {
        return (WriteOutcome::Refused, "the pod is gone".to_owned());
    };
    let transition = match owner {
        Owner::ClaimUid(uid) => Transition::Release { claim_uid: uid, then: AfterRelease::Drain },
        Owner::GoClaimName(claim) => Transition::ReleaseLegacy { claim_name: claim, then: AfterRelease::Drain },
    };
    match ownership::transition(client, pod, transition, jiff::Timestamp::now()).await {
        Ok(Outcome::Applied(_)) => (WriteOutcome::Applied, String::new()),
        Ok(Outcome::Stale) => (WriteOutcome::Refused, "the pod changed since it was read".to_owned()),
        Ok(Outcome::NotApplicable) => (WriteOutcome::NotNeeded, "the pod no longer carries that owner".to_owned()),
        Err(error) => (WriteOutcome::Failed, error.to_string()),
    }
}
