//! The CNClaimSet controller: keeps `spec.replicas` member claims made from
//! `spec.template`, replaces Lost members, scales in in the core's order
//! ([`cnpool_core::claim_set`]) and reports the members in status, with the
//! label selector the scale subresource (`kubectl scale`, an HPA) reads.
//!
//! Members are the claims whose controller owner reference names the set's
//! UID. A new member is named `<set>-<instance id>`: the name is the lock
//! that keeps even two operators from exceeding `replicas`. It carries the
//! template's labels and annotations, `matrixorigin.io/claimset=<set>` and
//! `claim.matrixorigin.io/instance-id=<id>`, the template's spec with
//! `ownerName` defaulting to the set's name, and an owner reference to the
//! set (controller), so that garbage collection deletes the members when
//! the set goes. Members are deleted with a UID precondition; the claim
//! controller's finalizer then releases their pods.
//!
//! A set whose spec fails validation (DESIGN §2, "Inputs") creates and
//! deletes no members: its status says which field to fix.

use std::sync::Arc;

use cnpool_api::validation::validate_claim_set_spec;
use cnpool_api::{CNClaim, CNClaimSet, CNClaimSetStatus, ClaimPhase, labels};
use cnpool_core::claim_set::{ClaimSetPlan, NewMember, plan_claim_set};
use cnpool_core::convert::{claim_set_view, member_view};
use cnpool_core::model::MemberView;
use cnpool_registry::StoreRegistry;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use crate::conditions::{self, Wanted};
use crate::context::Context;
use crate::error::{Error, is_already_exists, is_not_found, is_stale};
use crate::key::{Key, Kind, key_of};
use crate::validity::{Verdict, ready_condition};

/// What an invalid set does not do, as its condition says.
const HELD_BACK: &str = "the set creates and deletes no claims; its claims keep their pods";

/// The selector, as text, of a set's members and of the pods they hold:
/// acquire puts the claim's `claimset` label on its pod and release takes
/// it off, so the same selector finds the set's claims and its Bound pods
/// (what an HPA reads metrics from).
pub fn member_selector(set: &str) -> String {
    format!("{}={set}", labels::CLAIM_SET)
}

pub async fn reconcile<R: StoreRegistry + 'static>(
    set: Arc<CNClaimSet>,
    ctx: Arc<Context<R>>,
) -> Result<Action, Error> {
    let key = key_of(set.as_ref());
    ctx.wake.reconciling(Kind::ClaimSet, &key.0, &key.1, ctx.claim_sets.holds_version(&set));
    // Validation comes first, whatever the webhook let through: members
    // made from an invalid template would carry what it holds.
    let verdict = Verdict::of(validate_claim_set_spec(&set.spec), HELD_BACK);
    let raw_members = ctx.claims.of_claim_set(&set.uid().unwrap_or_default());
    if !verdict.valid {
        let mut live: Vec<&CNClaim> =
            raw_members.iter().map(AsRef::as_ref).filter(|claim| claim.metadata.deletion_timestamp.is_none()).collect();
        live.sort_by_key(|claim| claim.name_any());
        if !write_status(&ctx, &set, &live, 0, &verdict).await? {
            return Ok(Action::requeue(ctx.after_stale_refusal()));
        }
        // The fix wakes the set through its watch.
        ctx.backoff.settled(Kind::ClaimSet, &key);
        return Ok(Action::requeue(ctx.config.resync));
    }
    let view = claim_set_view(&set)?;
    let members: Vec<MemberView> =
        raw_members.iter().map(|claim| read_member(&ctx, claim)).collect::<Result<_, _>>()?;
    let expected = ctx.expected_members.outstanding(
        &key,
        |name| members.iter().any(|member| member.name == name),
        |uid| members.iter().any(|member| member.uid == uid && !member.deleting),
    );
    let plan = plan_claim_set(&view, &members, &expected);
    let busy = !plan.is_empty();
    let created = execute(&ctx, &set, &key, &plan).await?;

    let gone = |claim: &CNClaim| {
        let uid = claim.uid().unwrap_or_default();
        claim.metadata.deletion_timestamp.is_some()
            || expected.deletions.contains(&uid)
            || plan.delete.iter().any(|member| member.uid == uid)
    };
    let mut live: Vec<&CNClaim> = raw_members.iter().map(AsRef::as_ref).filter(|claim| !gone(claim)).collect();
    live.sort_by_key(|claim| claim.name_any());
    let reported = write_status(&ctx, &set, &live, expected.creations.len() + created, &verdict).await?;

    if !reported {
        return Ok(Action::requeue(ctx.after_stale_refusal()));
    }
    if busy || !expected.creations.is_empty() || !expected.deletions.is_empty() {
        // Its creations and deletions show up as member events, which wake
        // the set; polling for them only adds reconciles (a rollout's surge
        // polled each one from 200 ms up). The requeue is a safety net.
        return Ok(Action::requeue(ctx.config.requeue_max));
    }
    ctx.backoff.settled(Kind::ClaimSet, &key);
    Ok(Action::requeue(ctx.config.resync))
}

pub fn error_policy<R>(set: Arc<CNClaimSet>, error: &Error, ctx: Arc<Context<R>>) -> Action {
    let delay = ctx.backoff.failure(Kind::ClaimSet, &key_of(set.as_ref()));
    tracing::warn!(claim_set = %set.name_any(), error = %error, kind = error.metric_label(), ?delay, "claim set reconcile failed");
    Action::requeue(delay)
}

/// Reads a member with the pod it holds, if the cache has that pod and it
/// carries the member's UID (scale-in reads the pod's deletion order).
fn read_member<R: Send + Sync>(ctx: &Context<R>, claim: &CNClaim) -> Result<MemberView, Error> {
    let uid = claim.uid();
    let namespace = claim.namespace().unwrap_or_default();
    let pod = Some(&claim.spec.pod_name)
        .filter(|name| !name.is_empty())
        .and_then(|name| ctx.pods.get(&(namespace, name.clone())))
        .map(|pod| ctx.observer().read_pod(&pod))
        .transpose()?
        .filter(|pod| pod.claim_uid.is_some() && pod.claim_uid == uid);
    Ok(member_view(claim, pod.as_ref())?)
}

/// Deletes, then creates, as planned; publishes one Event per kind of
/// change. Returns how many members it created.
async fn execute<R>(ctx: &Context<R>, set: &CNClaimSet, key: &Key, plan: &ClaimSetPlan<'_>) -> Result<usize, Error> {
    let mut replaced = Vec::new();
    let mut scaled_in = Vec::new();
    for member in &plan.delete {
        if delete_member(ctx, key, member).await? {
            let lost = member.phase == Some(ClaimPhase::Lost);
            if lost { &mut replaced } else { &mut scaled_in }.push(member.name.as_str());
        }
    }
    let mut created = Vec::new();
    for new in &plan.create {
        if create_member(ctx, set, key, new).await? {
            created.push(new.name.as_str());
        }
    }
    let set_ref = set.object_ref(&());
    if !replaced.is_empty() {
        let note = format!("deleted Lost claims {}, to be replaced", replaced.join(", "));
        ctx.event(&set_ref, true, "ReplacingLost", "Delete", note);
    }
    if !scaled_in.is_empty() {
        ctx.event(&set_ref, false, "ScaledIn", "Delete", format!("deleted claims {}", scaled_in.join(", ")));
    }
    if !created.is_empty() {
        ctx.event(&set_ref, false, "ScaledOut", "Create", format!("created claims {}", created.join(", ")));
    }
    Ok(created.len())
}

/// Deletes a member guarded by its UID; `false` when it was gone or
/// replaced already.
async fn delete_member<R>(ctx: &Context<R>, key: &Key, member: &MemberView) -> Result<bool, Error> {
    let claims: Api<CNClaim> = Api::namespaced(ctx.client.clone(), &key.0);
    let params = DeleteParams {
        preconditions: Some(Preconditions { uid: Some(member.uid.clone()), resource_version: None }),
        ..DeleteParams::default()
    };
    match claims.delete(&member.name, &params).await {
        Ok(_) => {
            let phase = member.phase.map(ClaimPhase::as_str);
            tracing::info!(claim_set = %key.1, claim = %member.name, phase, "deleted member claim");
            ctx.expected_members.deletion(key, &member.uid);
            Ok(true)
        }
        Err(error) if is_stale(&error) || is_not_found(&error) => Ok(false),
        Err(error) => Err(Error::kube("delete claim", &member.name, error)),
    }
}

/// The member claim `new` of `set`, from the set's template.
fn member_claim(set: &CNClaimSet, new: &NewMember) -> CNClaim {
    let (namespace, set_name) = key_of(set);
    let template = &set.spec.template;
    let meta = template.metadata.clone().unwrap_or_default();
    let mut member_labels = meta.labels;
    member_labels.insert(labels::CLAIM_SET.to_owned(), set_name.clone());
    member_labels.insert(labels::INSTANCE_ID.to_owned(), new.instance_id.to_string());
    let mut spec = template.spec.clone();
    if spec.owner_name.as_deref().is_none_or(str::is_empty) {
        spec.owner_name = Some(set_name);
    }
    // Each member binds a pod of its own: a template cannot name one, nor
    // start a migration.
    spec.pod_name.clear();
    spec.node_name.clear();
    spec.source_pod = None;
    CNClaim {
        metadata: ObjectMeta {
            name: Some(new.name.clone()),
            namespace: Some(namespace),
            labels: Some(member_labels),
            annotations: (!meta.annotations.is_empty()).then_some(meta.annotations),
            owner_references: set.controller_owner_ref(&()).map(|owner| vec![owner]),
            // Born with the claim finalizer: a member the set deletes at once
            // (a scale-in, a surge ending) still releases what it took, before
            // the set may create another under its name.
            finalizers: Some(vec![labels::CLAIM_FINALIZER.to_owned()]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}

/// Creates a member; `false` when its name was taken (by another worker or
/// operator: the name is the lock).
async fn create_member<R>(ctx: &Context<R>, set: &CNClaimSet, key: &Key, new: &NewMember) -> Result<bool, Error> {
    let claims: Api<CNClaim> = Api::namespaced(ctx.client.clone(), &key.0);
    match claims.create(&PostParams::default(), &member_claim(set, new)).await {
        Ok(created) => {
            tracing::info!(claim_set = %key.1, claim = %new.name, instance_id = new.instance_id, "created member claim");
            ctx.expected_members.creation(key, &new.name, created.metadata.uid.as_deref().unwrap_or_default());
            Ok(true)
        }
        Err(error) if is_already_exists(&error) => {
            tracing::debug!(claim_set = %key.1, claim = %new.name, "claim exists already");
            Ok(false)
        }
        Err(error) => Err(Error::kube("create claim", &new.name, error)),
    }
}

/// Writes the set's status when it differs: `live` are the members not
/// going away, `awaited` the creations the cache does not show yet, and
/// `verdict` the `Ready` condition. `false` when the set changed since it
/// was read (often by this controller's previous status write, not yet in
/// the cache): the set is then looked at again soon, since its own status
/// writes wake nothing.
async fn write_status<R>(
    ctx: &Context<R>,
    set: &CNClaimSet,
    live: &[&CNClaim],
    awaited: usize,
    verdict: &Verdict,
) -> Result<bool, Error> {
    let current = set.status.clone().unwrap_or_default();
    let mut conditions = current.conditions.clone();
    let ready = live.iter().filter(|claim| matches!(claim.phase(), Some(ClaimPhase::Bound | ClaimPhase::Outdated)));
    let ready = ready.count();
    let progress = Progress::of(set, live, awaited, ready);
    progress.apply(&mut conditions, verdict, set.metadata.generation, ctx.now());
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let status = CNClaimSetStatus {
        replicas: count(live.len() + awaited),
        ready_replicas: count(ready),
        claims: live.iter().map(|claim| claim.status.clone().unwrap_or_default()).collect(),
        label_selector: Some(member_selector(&set.name_any())),
        pod_selector: current.pod_selector.clone(),
        conditions,
        observed_generation: set.metadata.generation,
    };
    if status == current {
        return Ok(true);
    }
    let mut updated = set.clone();
    updated.status = Some(status);
    let sets: Api<CNClaimSet> = Api::namespaced(ctx.client.clone(), set.namespace().as_deref().unwrap_or_default());
    match sets.replace_status(&set.name_any(), &PostParams::default(), &updated).await {
        Ok(_) => {
            verdict.announce(ctx, &set.object_ref(&()), ready_condition(&current.conditions)).await;
            Ok(true)
        }
        Err(error) if is_not_found(&error) => Ok(true),
        Err(error) if is_stale(&error) => Ok(false),
        Err(error) => Err(Error::kube("write status of", format!("CNClaimSet {}", set.name_any()), error)),
    }
}

/// The `Progressing` condition: a rollout or a scale under way.
pub const PROGRESSING_CONDITION: &str = "Progressing";

/// How far a set is from what its spec asks, as its `Ready` and
/// `Progressing` conditions say. The counts are the set's own: only its
/// members change them.
struct Progress {
    /// `spec.replicas`.
    wanted: usize,
    /// Members not going away, and creations the cache does not show yet.
    members: usize,
    /// Members Bound or Outdated.
    ready: usize,
    /// Members on an old template, or migrating.
    moving: usize,
}

impl Progress {
    fn of(set: &CNClaimSet, live: &[&CNClaim], awaited: usize, ready: usize) -> Self {
        let moving = live
            .iter()
            .filter(|claim| claim.phase() == Some(ClaimPhase::Outdated) || claim.spec.source_pod.is_some())
            .count();
        let wanted = usize::try_from(set.spec.replicas).unwrap_or(0);
        Self { wanted, members: live.len() + awaited, ready, moving }
    }

    /// Sets `Ready` (all wanted members served, unless the spec is
    /// invalid) and, for a valid spec, `Progressing`.
    fn apply(&self, conditions: &mut Vec<Condition>, verdict: &Verdict, generation: Option<i64>, now: Timestamp) {
        // A surge's extra members, or a scale-in's, do not make a set unready.
        let all_ready = self.ready >= self.wanted;
        let message = format!("{} of {} claims are Bound", self.ready, self.wanted);
        let reason = if all_ready { "AllClaimsBound" } else { "ClaimsNotBound" };
        verdict.apply(conditions, (all_ready, reason, &message), generation, now);
        if !verdict.valid {
            return;
        }
        let (status, reason, message) = if self.moving > 0 {
            ("True", "RollingOut", format!("{} claims move to pods of their pool's current template", self.moving))
        } else if self.members != self.wanted {
            ("True", "Scaling", format!("scaling from {} to {} claims", self.members, self.wanted))
        } else {
            ("False", "Settled", format!("the set has its {} claims and none moves", self.wanted))
        };
        let wanted = Wanted { type_: PROGRESSING_CONDITION, status, reason, message: &message };
        conditions::set(conditions, wanted, generation, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shown<'a>(conditions: &'a [Condition], type_: &str) -> (&'a str, &'a str) {
        let condition = conditions::find(conditions, type_).unwrap();
        (condition.status.as_str(), condition.reason.as_str())
    }

    #[test]
    fn ready_and_progressing_follow_the_members() {
        let now = Timestamp::UNIX_EPOCH;
        let valid = Verdict::of(Ok(()), "x");
        let mut conditions = Vec::new();
        let scaling = Progress { wanted: 3, members: 1, ready: 1, moving: 0 };
        scaling.apply(&mut conditions, &valid, Some(1), now);
        assert_eq!(shown(&conditions, "Ready"), ("False", "ClaimsNotBound"));
        assert_eq!(shown(&conditions, PROGRESSING_CONDITION), ("True", "Scaling"));
        let rolling = Progress { wanted: 3, members: 4, ready: 3, moving: 1 };
        rolling.apply(&mut conditions, &valid, Some(1), now);
        assert_eq!(shown(&conditions, PROGRESSING_CONDITION), ("True", "RollingOut"));
        let settled = Progress { wanted: 3, members: 3, ready: 3, moving: 0 };
        settled.apply(&mut conditions, &valid, Some(1), now);
        assert_eq!(shown(&conditions, "Ready"), ("True", "AllClaimsBound"));
        assert_eq!(shown(&conditions, PROGRESSING_CONDITION), ("False", "Settled"));
        let invalid = Verdict::of(Err(cnpool_api::validation::Invalid(Vec::new())), "x");
        settled.apply(&mut conditions, &invalid, Some(2), now);
        assert_eq!(shown(&conditions, "Ready"), ("False", "InvalidSpec"));
        assert_eq!(shown(&conditions, PROGRESSING_CONDITION), ("False", "Settled"), "left as it was");
    }

    #[test]
    fn a_member_is_made_from_the_template_and_owned_by_the_set() {
        let set: CNClaimSet = serde_json::from_value(json!({
            "apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "CNClaimSet",
            "metadata": {"name": "tenant", "namespace": "ns", "uid": "uid-set"},
            "spec": {"replicas": 2, "template": {
                "metadata": {"labels": {"app": "tenant"}, "annotations": {"note": "x"}},
                "spec": {"selector": {"matchLabels": {"tier": "gold"}}, "podName": "pinned", "poolName": "mo"},
            }},
        }))
        .unwrap();
        let claim = member_claim(&set, &NewMember { name: "tenant-1".into(), instance_id: 1 });
        let claim_labels = claim.metadata.labels.clone().unwrap();
        assert_eq!(claim_labels.get("app").map(String::as_str), Some("tenant"));
        assert_eq!(claim_labels.get(labels::CLAIM_SET).map(String::as_str), Some("tenant"));
        assert_eq!(claim_labels.get(labels::INSTANCE_ID).map(String::as_str), Some("1"));
        assert_eq!(claim.spec.owner_name.as_deref(), Some("tenant"));
        assert_eq!(claim.spec.pool_name, "mo");
        assert!(claim.spec.pod_name.is_empty(), "members bind pods of their own");
        let owner = &claim.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.uid.as_str(), owner.controller), ("uid-set", Some(true)));
        assert!(crate::cache::controlling_set(&claim).is_some());
    }
}
