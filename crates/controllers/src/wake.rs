//! Who a change wakes. Each handler compares the object before and after
//! and wakes only the objects whose decision the changed fields feed, so
//! that, for instance, stats annotations never wake the pool or claim
//! controllers and a controller's own status write costs no extra
//! reconcile of its neighbours.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cnpool_api::{CNClaim, CNClaimSet, CNPool, ClaimPhase, labels};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::cache::{Change, controlling_set, holds_a_pod, still_served, waits_for_pod};
use crate::context::Context;
use crate::key::{Key, key_of};

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Annotations the store controller writes for observers only.
const STATS: [&str; 3] = [labels::SCORE, labels::POD_DELETION_COST, labels::CONNECTIONS];

/// What the claim decisions read of a pod.
fn claim_facts(pod: &Pod) -> impl PartialEq + '_ {
    (
        pod.metadata.uid.as_deref(),
        &pod.metadata.labels,
        pod.metadata.deletion_timestamp.is_some(),
        annotation(pod, labels::BINDING),
        annotation(pod, labels::STORE_CORDON).is_some(),
        pod.status.as_ref().and_then(|status| status.phase.as_deref()),
        pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref()),
    )
}

/// What the pool plan reads of a pod.
fn pool_facts(pod: &Pod) -> impl PartialEq + '_ {
    (
        pod.metadata.uid.as_deref(),
        label(pod, labels::PHASE),
        label(pod, labels::CLAIM_UID),
        label(pod, labels::CLAIMED_BY),
        label(pod, labels::REVISION),
        label(pod, labels::OUTDATED),
        annotation(pod, labels::STORE_CORDON).is_some(),
        pod.metadata.deletion_timestamp.is_some(),
        pod.status.as_ref().and_then(|status| status.phase.as_deref()),
        // A pod scheduled onto a cordoned node is retired.
        pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref()),
    )
}

/// What the store controller reads of a pod: all but the stats it writes.
fn store_facts(pod: &Pod) -> impl PartialEq + '_ {
    let annotations: Option<Vec<(&String, &String)>> = pod
        .metadata
        .annotations
        .as_ref()
        .map(|map| map.iter().filter(|(key, _)| !STATS.contains(&key.as_str())).collect());
    (
        pod.metadata.uid.as_deref(),
        &pod.metadata.labels,
        annotations,
        pod.metadata.deletion_timestamp.is_some(),
        &pod.metadata.finalizers,
        pod.status.as_ref().and_then(|status| status.phase.as_deref()),
        pod.status.as_ref().and_then(|status| status.pod_ip.as_deref()),
    )
}

fn changed<'a, T: PartialEq>(change: Change<'a, Pod>, facts: impl Fn(&'a Pod) -> T) -> bool {
    match change {
        (Some(old), Some(new)) => facts(old) != facts(new),
        _ => true,
    }
}

pub fn pod_changed<R>(ctx: &Context<R>, change: Change<'_, Pod>) {
    let (old, new) = change;
    let Some(any) = new.or(old) else { return };
    let (namespace, name) = key_of(any.as_ref());
    if let (Some(pool), Some(uid)) = (label(any, labels::POOL_NAME), any.metadata.uid.as_deref()) {
        ctx.expected.shown(&(namespace.clone(), pool.to_owned()), &name, uid);
    }
    let owner_of =
        |pod: Option<&'_ Arc<Pod>>| pod.and_then(|pod| label(pod.as_ref(), labels::CLAIM_UID)).map(str::to_owned);
    if new.is_some() && owner_of(old) != owner_of(new) {
        ctx.wake.pod_now(&namespace, &name);
    } else if changed(change, store_facts) {
        ctx.wake.pod(&namespace, &name);
    }
    if changed(change, pool_facts) {
        for pool in
            [old, new].into_iter().flatten().filter_map(|pod| label(pod, labels::POOL_NAME)).collect::<BTreeSet<_>>()
        {
            ctx.wake.pool(&namespace, pool);
        }
    }
    if changed(change, claim_facts) {
        // A version the claim controller wrote is no news to the claim whose
        // reconcile wrote it (the pod's owner before or after): it went on
        // from what the write returned.
        let echo = new.is_some_and(|pod| ctx.claim_pod_writes.made(pod));
        wake_claims_of(ctx, &namespace, &name, [old, new].into_iter().flatten(), echo);
        let became_idle = new.and_then(|pod| label(pod, labels::PHASE)) == Some("Idle")
            && old.and_then(|pod| label(pod, labels::PHASE)) != Some("Idle");
        if became_idle && let Some(pod) = new {
            wake_waiting_claims(ctx, pod);
        }
    }
}

/// Wakes the claims that point at the pod `namespace/name` or own one of
/// its versions `seen`; with `but_owners`, not those that own one.
fn wake_claims_of<'a, R>(
    ctx: &Context<R>,
    namespace: &str,
    name: &str,
    seen: impl Iterator<Item = &'a Arc<Pod>>,
    but_owners: bool,
) {
    let mut claims: BTreeSet<String> = ctx.claims.pointing_at(namespace, name);
    for uid in seen.filter_map(|pod| label(pod, labels::CLAIM_UID)) {
        if let Some(claim) = ctx.claims.by_uid(uid) {
            if but_owners {
                claims.remove(&claim.name_any());
            } else {
                claims.insert(claim.name_any());
            }
        }
    }
    for claim in &claims {
        ctx.wake.claim(namespace, claim);
    }
}

/// Node `node` was cordoned or uncordoned: its pods read differently, so
/// their claims and pools decide again.
pub fn node_changed<R>(ctx: &Context<R>, node: &str) {
    let cordoned = ctx.nodes.contains(node);
    let pods = ctx.pods.on_node(node);
    let mut pools: BTreeSet<(String, &str)> = BTreeSet::new();
    for pod in &pods {
        let (namespace, name) = key_of(pod.as_ref());
        wake_claims_of(ctx, &namespace, &name, std::iter::once(pod), false);
        if let Some(pool) = label(pod, labels::POOL_NAME) {
            pools.insert((namespace, pool));
        }
    }
    for (namespace, pool) in pools {
        ctx.wake.pool(&namespace, pool);
    }
    let pods = pods.len();
    if cordoned {
        tracing::info!(node, pods, "node cordoned: its claims migrate off it, its Idle pods are retired");
    } else {
        tracing::info!(node, pods, "node schedulable again");
    }
}

/// The Idle pod `pod` can be taken: wake as many claims that wait for a pod
/// like it as its pool has Idle pods, so that new pods are taken at once
/// rather than at the claims' next backoff. Only claims that could take it
/// count: a wake spent on an invalid claim, or one whose selector does not
/// match, would leave a waiting one asleep. (The runtime merges repeated
/// wakes of a claim.)
fn wake_waiting_claims<R>(ctx: &Context<R>, pod: &Pod) {
    let (namespace, _) = key_of(pod);
    let Some(pool) = label(pod, labels::POOL_NAME) else { return };
    let no_labels = BTreeMap::new();
    let pod_labels = pod.metadata.labels.as_ref().unwrap_or(&no_labels);
    let idle = ctx.pods.count_in_pool_phase(&namespace, pool, "Idle");
    if idle == 0 {
        return;
    }
    let candidates = ctx.claims.may_wait_in_pool(&namespace, pool);
    let waiting = candidates.iter().filter(|claim| {
        let holds = claim
            .uid()
            .is_none_or(|uid| holds_a_pod(claim, &ctx.pods.owned_by(&uid), ctx.claims_took_lately.pod(&uid).is_some()));
        waits_for_pod(claim, pool, pod_labels, holds)
    });
    // A tenant without a CN first; one still served by its migration
    // source can wait for the next pod. The scan stops once `idle` of the
    // first kind are found.
    let (mut without_cn, mut served) = (Vec::new(), Vec::new());
    for claim in waiting {
        if !still_served(claim) {
            without_cn.push(claim);
            if without_cn.len() == idle {
                break;
            }
        } else if served.len() < idle {
            served.push(claim);
        }
    }
    for claim in without_cn.into_iter().chain(served).take(idle) {
        ctx.wake.claim(&namespace, &claim.name_any());
    }
}

/// Wakes the Outdated standalone claims of `pool` that do not migrate yet.
fn wake_outdated_claims<R>(ctx: &Context<R>, namespace: &str, pool: &str) {
    let outdated = ctx.claims.in_pool(namespace, pool).into_iter().filter(|claim| {
        claim.phase() == Some(ClaimPhase::Outdated)
            && claim.spec.source_pod.is_none()
            && claim.metadata.deletion_timestamp.is_none()
            && controlling_set(claim).is_none()
    });
    for claim in outdated {
        ctx.wake.claim(namespace, &claim.name_any());
    }
}

pub fn claim_changed<R>(ctx: &Context<R>, (old, new): Change<'_, CNClaim>) {
    let Some(any) = new.or(old) else { return };
    let (namespace, name) = key_of(any.as_ref());
    let set = any.labels().get(labels::CLAIM_SET).filter(|set| !set.is_empty());
    if let (Some(set), Some(uid)) = (set, any.metadata.uid.as_deref()) {
        ctx.expected_members.shown(&(namespace.clone(), set.clone()), &name, uid);
    }
    let facts = |claim: &Arc<CNClaim>| {
        (
            claim.metadata.generation,
            claim.metadata.finalizers.clone(),
            claim.metadata.deletion_timestamp.is_some(),
            claim.metadata.labels.clone(),
            claim.annotations().get(labels::RECORDED_POD).cloned(),
            claim.status.clone(),
            claim.spec.clone(),
        )
    };
    let differs = match (old, new) {
        (Some(old), Some(new)) => facts(old) != facts(new),
        _ => true,
    };
    if !differs {
        return;
    }
    // The echo of this process's own write: the reconcile that wrote it
    // went on from what the write returned.
    if new.is_some_and(|new| !ctx.claim_writes.made(new)) {
        ctx.wake.claim(&namespace, &name);
    }
    // The set it belongs to counts it, orders it for scale-in and reports
    // its status: all but its labels, finalizers and generation feed that.
    let set_facts = |claim: &Arc<CNClaim>| {
        (
            claim.metadata.deletion_timestamp.is_some(),
            claim.status.clone(),
            claim.spec.pod_name.clone(),
            claim.spec.source_pod.clone(),
        )
    };
    let set_differs = match (old, new) {
        (Some(old), Some(new)) => set_facts(old) != set_facts(new) || controlling_set(old) != controlling_set(new),
        _ => true,
    };
    if set_differs {
        let sets: BTreeSet<&str> = [old, new]
            .into_iter()
            .flatten()
            .filter_map(|claim| controlling_set(claim))
            .map(|set| set.name.as_str())
            .collect();
        for set in sets {
            ctx.wake.claim_set(&namespace, set);
        }
    }
    // Pending counts of the pools it is nominated to.
    let mut pools: BTreeSet<String> = BTreeSet::new();
    for claim in [old, new].into_iter().flatten() {
        if claim.spec.pool_name.is_empty() {
            let same_namespace =
                ctx.pools.all().into_iter().filter(|(pool, _)| pool.namespace().as_deref() == Some(&namespace));
            pools.extend(same_namespace.map(|(pool, _)| pool.name_any()));
        } else {
            pools.insert(claim.spec.pool_name.clone());
        }
    }
    for pool in &pools {
        ctx.wake.pool(&namespace, pool);
    }
    // A migration over (or its claim gone): the pool's Outdated standalone
    // claims, which wait for no migration to run in their pool, may start
    // the next one now rather than at their resync.
    let migrated = old.is_some_and(|claim| claim.spec.source_pod.is_some())
        && new.is_none_or(|claim| claim.spec.source_pod.is_none());
    if migrated && !any.spec.pool_name.is_empty() {
        wake_outdated_claims(ctx, &namespace, &any.spec.pool_name);
    }
    // A claim going away: its pods are checked for orphans, the pod it
    // points at too (a pod the Go operator bound to it carries no UID).
    let going = new.is_none_or(|claim| claim.metadata.deletion_timestamp.is_some());
    if going && let Some(uid) = any.uid() {
        for pod in ctx.pods.owned_by(&uid) {
            ctx.wake.pod(&namespace, &pod.name_any());
        }
        if !any.spec.pod_name.is_empty() {
            ctx.wake.pod(&namespace, &any.spec.pod_name);
        }
    }
}

pub fn pool_changed<R>(ctx: &Context<R>, (old, new): Change<'_, CNPool>) {
    let Some(any) = new.or(old) else { return };
    let (namespace, name) = key_of(any.as_ref());
    let facts = |pool: &Arc<CNPool>| {
        (pool.metadata.generation, pool.metadata.finalizers.clone(), pool.metadata.deletion_timestamp.is_some())
    };
    // A status that another replica wrote from its caches is corrected by
    // this one's view now, not at the next resync.
    let differs = match (old, new) {
        (Some(old), Some(new)) => {
            facts(old) != facts(new) || (old.status != new.status && !ctx.pool_status_writes.made(new))
        }
        _ => true,
    };
    if differs && new.is_some() {
        ctx.wake.pool(&namespace, &name);
    }
    // A new template makes the pool's bound claims Outdated: they look again.
    if let (Some(old), Some(new)) = (old, new)
        && (old.spec.template != new.spec.template || old.spec.pod_template != new.spec.pod_template)
    {
        for claim in ctx.claims.in_pool(&namespace, &name) {
            ctx.wake.claim(&namespace, &claim.name_any());
        }
    }
    // A new reclaim timeout may end the wait of its Outdated claims now.
    if let (Some(old), Some(new)) = (old, new)
        && old.spec.strategy.update_strategy != new.spec.strategy.update_strategy
    {
        wake_outdated_claims(ctx, &namespace, &name);
    }
}

pub fn claim_set_changed<R>(ctx: &Context<R>, (old, new): Change<'_, CNClaimSet>) {
    let Some(any) = new.or(old) else { return };
    let (namespace, name) = key_of(any.as_ref());
    // Its own status writes change none of these.
    let facts = |set: &Arc<CNClaimSet>| (set.metadata.generation, set.metadata.deletion_timestamp.is_some());
    let differs = match (old, new) {
        (Some(old), Some(new)) => facts(old) != facts(new),
        _ => true,
    };
    if differs && new.is_some() {
        ctx.wake.claim_set(&namespace, &name);
    }
}

/// HAKeeper's entry for `uuid` changed: wake its pod and the pod's claim,
/// and for an Idle pod its pool (which retires one whose store is missing)
/// and the claims waiting for one (an Idle pod whose store this process had
/// not listed yet was not offered to them; nothing else wakes them when it
/// is, and a claim that has waited long sleeps for up to `requeue_max`).
/// The CN store `uuid` changed (in a listing, or by the write of the pod
/// `written_for`, whose reconcile needs no wake for it).
pub fn store_changed<R>(ctx: &Context<R>, uuid: &str, written_for: Option<&Key>) {
    for (namespace, name) in ctx.pods.with_store(uuid) {
        if written_for.is_none_or(|(of_namespace, of_name)| (of_namespace, of_name) != (&namespace, &name)) {
            ctx.wake.pod(&namespace, &name);
        }
        let Some(pod) = ctx.pods.get(&(namespace.clone(), name)) else { continue };
        if label(&pod, labels::PHASE) == Some("Idle")
            && let Some(pool) = label(&pod, labels::POOL_NAME)
        {
            ctx.wake.pool(&namespace, pool);
            wake_waiting_claims(ctx, &pod);
        }
        if let Some(claim) = label(&pod, labels::CLAIM_UID).and_then(|uid| ctx.claims.by_uid(uid)) {
            ctx.wake.claim_store_changed(&namespace, &claim.name_any());
        }
    }
}

/// HAKeeper turned reachable or unreachable (`reachability`): every pool
/// reports it in its conditions, and every claim not yet served says it in
/// its own when that is why it waits.
pub fn hakeeper_changed<R>(ctx: &Context<R>, reachability: cnpool_core::waiting::Reachability) {
    tracing::debug!(?reachability, "waking the pools and the claims not yet served");
    pools_and_waiting_claims(ctx);
}

/// The LogSets changed: a pool's HAKeeper may have been found, or moved.
pub fn log_sets_changed<R>(ctx: &Context<R>) {
    tracing::debug!("LogSets changed: waking the pools and the claims not yet served");
    pools_and_waiting_claims(ctx);
}

/// Every pool, and every claim not yet served: what says whether a pool's
/// HAKeeper answers. Pools of other clusters are woken too; their
/// conditions do not change, so that costs them no write.
fn pools_and_waiting_claims<R>(ctx: &Context<R>) {
    for (pool, _) in ctx.pools.all() {
        let (namespace, name) = key_of(pool.as_ref());
        ctx.wake.pool(&namespace, &name);
    }
    let waiting: Vec<Key> = ctx.claims.with(|objects, _| {
        objects
            .iter()
            .filter(|(_, claim)| !matches!(claim.phase(), Some(ClaimPhase::Bound | ClaimPhase::Outdated)))
            .map(|(key, _)| key.clone())
            .collect()
    });
    for (namespace, name) in waiting {
        ctx.wake.claim(&namespace, &name);
    }
}
