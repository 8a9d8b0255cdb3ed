//! Who a change wakes. Each handler compares the object before and after
//! and wakes only the objects whose decision the changed fields feed, so
//! that, for instance, stats annotations never wake the pool or claim
//! controllers and a controller's own status write costs no extra
//! reconcile of its neighbours.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cnpool_api::{CNClaim, CNClaimSet, CNPool, ClaimPhase, labels};
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::cache::{Change, Key, controlling_set, key_of};
use crate::context::{Context, Kind};

/// The receiving ends, taken once by [`crate::run`].
pub struct Triggers {
    pub claims: UnboundedReceiver<ObjectRef<CNClaim>>,
    pub pools: UnboundedReceiver<ObjectRef<CNPool>>,
    pub claim_sets: UnboundedReceiver<ObjectRef<CNClaimSet>>,
    pub pods: UnboundedReceiver<ObjectRef<Pod>>,
}

/// Senders that queue reconciles.
pub struct Wakers {
    claims: Throttled<CNClaim>,
    pools: Throttled<CNPool>,
    claim_sets: Throttled<CNClaimSet>,
    pods: Throttled<Pod>,
    receivers: Mutex<Option<Triggers>>,
}

impl Wakers {
    /// Wakers that wake one object at most once per `interval` (a pool or
    /// a claim set, each the sum of many objects whose changes come in
    /// bursts, once per `pool_interval`).
    pub fn new(interval: Duration, pool_interval: Duration) -> Self {
        let (claims, claim_rx) = unbounded();
        let (pools, pool_rx) = unbounded();
        let (claim_sets, claim_set_rx) = unbounded();
        let (pods, pod_rx) = unbounded();
        let receivers = Triggers { claims: claim_rx, pools: pool_rx, claim_sets: claim_set_rx, pods: pod_rx };
        Self {
            claims: Throttled::new(claims, interval),
            pools: Throttled::new(pools, pool_interval),
            claim_sets: Throttled::new(claim_sets, pool_interval),
            pods: Throttled::new(pods, interval),
            receivers: Mutex::new(Some(receivers)),
        }
    }

    /// The receivers; `run` takes them once per context.
    pub fn take_receivers(&self) -> Triggers {
        let mut slot = self.receivers.lock().unwrap_or_else(PoisonError::into_inner);
        slot.take().unwrap_or_else(|| {
            // A second `run` on one context: give it receivers nobody feeds.
            let (_, claims) = unbounded();
            let (_, pools) = unbounded();
            let (_, claim_sets) = unbounded();
            let (_, pods) = unbounded();
            Triggers { claims, pools, claim_sets, pods }
        })
    }

    pub fn claim(&self, namespace: &str, name: &str) {
        self.claims.wake(namespace, name);
    }

    /// The claim waits for its pod's CN store to serve: the next change of
    /// that store ([`Wakers::claim_store_changed`]) is not held back.
    pub fn expect_claim(&self, namespace: &str, name: &str) {
        self.claims.expect(namespace, name);
    }

    /// The CN store of the claim's pod changed: a wake like any other,
    /// unless the claim waits for just that, when it goes at once.
    pub fn claim_store_changed(&self, namespace: &str, name: &str) {
        self.claims.wake_expected(namespace, name);
    }

    pub fn pool(&self, namespace: &str, name: &str) {
        self.pools.wake(namespace, name);
    }

    pub fn claim_set(&self, namespace: &str, name: &str) {
        self.claim_sets.wake(namespace, name);
    }

    pub fn pod(&self, namespace: &str, name: &str) {
        self.pods.wake(namespace, name);
    }

    /// A reconcile of `namespace/name` starts: it reads the caches as they
    /// are now, so a wake held back for changes they already hold is spent —
    /// but only when `current`, the object it was handed being the version
    /// its cache holds. kube-runtime reads that object when it dispatches the
    /// reconcile; a change applied (and its wake held) between then and now
    /// is one this reconcile does not see.
    pub fn reconciling(&self, kind: Kind, namespace: &str, name: &str, current: bool) {
        if !current {
            return;
        }
        match kind {
            Kind::Claim => self.claims.reconciling(namespace, name),
            Kind::Pool => self.pools.reconciling(namespace, name),
            Kind::ClaimSet => self.claim_sets.reconciling(namespace, name),
            Kind::Pod => self.pods.reconciling(namespace, name),
        }
    }
}

/// Wakes of one kind, each object at most once per interval: a wake that
/// comes sooner after the last is held back until the interval is over, and
/// further wakes meanwhile join it. A burst of changes (every pod of a
/// scale-out passes several phases; two operator replicas answer each
/// other's writes) then costs an object one reconcile per interval instead
/// of one per change, and that reconcile sees all of them. A held wake is
/// dropped only when a reconcile of the object (a requeue's), handed the
/// version the cache holds, starts after the last change it carries: that
/// reconcile saw them all. A controller's
/// own requeues are not held back.
struct Throttled<K: kube::Resource<DynamicType = ()>> {
    sender: UnboundedSender<ObjectRef<K>>,
    interval: Duration,
    wakes: Arc<Mutex<WakeTimes>>,
}

#[derive(Default)]
struct WakeTimes {
    by_object: BTreeMap<(String, String), LastWake>,
    /// Objects whose next wake is one a reconcile said it waits for, and
    /// since when.
    expected: BTreeMap<(String, String), tokio::time::Instant>,
    since_pruned: usize,
    /// Orders wakes and reconcile starts (virtual time has many at once).
    sequence: u64,
}

/// When an object was last woken, and whether a wake is held back for later.
#[derive(Clone, Copy)]
struct LastWake {
    at: tokio::time::Instant,
    held: bool,
    /// For a held wake: the order of the last change it carries, and of the
    /// last reconcile start since it was held.
    changed: u64,
    reconciled: u64,
}

/// Wakes between two sweeps of the objects not woken within the interval.
const PRUNE_EVERY: usize = 4096;
/// How long an expected wake is remembered (a claim deleted while it
/// waited is never woken).
const EXPECTED_FOR: Duration = Duration::from_secs(600);

impl<K: kube::Resource<DynamicType = ()> + 'static> Throttled<K> {
    fn new(sender: UnboundedSender<ObjectRef<K>>, interval: Duration) -> Self {
        Self { sender, interval, wakes: Arc::default() }
    }

    fn wake(&self, namespace: &str, name: &str) {
        let object = ObjectRef::new(name).within(namespace);
        let now = tokio::time::Instant::now();
        let key = (namespace.to_owned(), name.to_owned());
        let mut wakes = self.wakes.lock().unwrap_or_else(PoisonError::into_inner);
        wakes.since_pruned += 1;
        if wakes.since_pruned >= PRUNE_EVERY {
            let interval = self.interval;
            wakes.by_object.retain(|_, last| last.held || now < last.at + interval);
            wakes.expected.retain(|_, since| now < *since + EXPECTED_FOR);
            wakes.since_pruned = 0;
        }
        wakes.sequence += 1;
        let changed = wakes.sequence;
        let due = match wakes.by_object.get_mut(&key) {
            Some(last) if last.held => {
                last.changed = changed;
                return;
            }
            Some(last) if now < last.at + self.interval => last.at + self.interval,
            _ => {
                wakes.by_object.insert(key, LastWake { at: now, held: false, changed, reconciled: 0 });
                // A send fails only once the controllers stopped: nothing to wake then.
                let _ = self.sender.unbounded_send(object);
                return;
            }
        };
        // Outside a runtime (plain unit tests) nothing can wait: wake now.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            let _ = self.sender.unbounded_send(object);
            return;
        };
        wakes.by_object.insert(key.clone(), LastWake { at: due, held: true, changed, reconciled: 0 });
        let (wakes, sender) = (self.wakes.clone(), self.sender.clone());
        runtime.spawn(async move {
            tokio::time::sleep_until(due).await;
            let mut wakes = wakes.lock().unwrap_or_else(PoisonError::into_inner);
            let seen = wakes.by_object.get_mut(&key).is_some_and(|last| {
                last.held = false;
                last.reconciled > last.changed
            });
            if !seen {
                let _ = sender.unbounded_send(object);
            }
        });
    }

    /// A wake that goes at once if a reconcile said it waits for it.
    fn wake_expected(&self, namespace: &str, name: &str) {
        let key = (namespace.to_owned(), name.to_owned());
        let mut wakes = self.wakes.lock().unwrap_or_else(PoisonError::into_inner);
        if wakes.expected.remove(&key).is_none() {
            drop(wakes);
            return self.wake(namespace, name);
        }
        wakes.sequence += 1;
        let (changed, now) = (wakes.sequence, tokio::time::Instant::now());
        // A wake held back meanwhile is then spent by the reconcile this one
        // starts, which sees its change.
        match wakes.by_object.get_mut(&key) {
            Some(last) if last.held => last.changed = changed,
            _ => {
                wakes.by_object.insert(key, LastWake { at: now, held: false, changed, reconciled: 0 });
            }
        }
        let _ = self.sender.unbounded_send(ObjectRef::new(name).within(namespace));
    }

    fn expect(&self, namespace: &str, name: &str) {
        let mut wakes = self.wakes.lock().unwrap_or_else(PoisonError::into_inner);
        wakes.expected.insert((namespace.to_owned(), name.to_owned()), tokio::time::Instant::now());
    }

    fn reconciling(&self, namespace: &str, name: &str) {
        let mut wakes = self.wakes.lock().unwrap_or_else(PoisonError::into_inner);
        wakes.sequence += 1;
        let started = wakes.sequence;
        if let Some(last) = wakes.by_object.get_mut(&(namespace.to_owned(), name.to_owned()))
            && last.held
        {
            last.reconciled = started;
        }
    }
}

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
    if changed(change, store_facts) {
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
        if became_idle && let Some(pool) = new.and_then(|pod| label(pod, labels::POOL_NAME)) {
            wake_waiting_claims(ctx, &namespace, pool);
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
/// their claims and pools decide again. Returns how many pods it has.
pub fn node_changed<R>(ctx: &Context<R>, node: &str) -> usize {
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
    pods.len()
}

/// A pod turned Idle: wake as many claims of its pool that hold nothing as
/// the pool has Idle pods, so that new pods are taken at once rather than at
/// the claims' next backoff. (The runtime merges repeated wakes of a claim.)
fn wake_waiting_claims<R>(ctx: &Context<R>, namespace: &str, pool: &str) {
    let idle = ctx.pods.in_pool_phase(namespace, pool, "Idle").len();
    let nominated = ctx.claims.in_pool(namespace, pool);
    let unnominated = ctx.claims.in_pool(namespace, "");
    let waiting = nominated
        .iter()
        .chain(&unnominated)
        .filter(|claim| claim.metadata.deletion_timestamp.is_none())
        .filter(|claim| {
            // A claim that took a pod its cache does not show yet is not
            // waiting: a wake spent on it would leave a waiting one asleep.
            claim.uid().is_some_and(|uid| ctx.pods.owned_by(&uid).is_empty() && ctx.pod_acquired_lately(&uid).is_none())
        })
        .take(idle);
    for claim in waiting {
        ctx.wake.claim(namespace, &claim.name_any());
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
    // A claim going away: its pods are checked for orphans.
    let going = new.is_none_or(|claim| claim.metadata.deletion_timestamp.is_some());
    if going && let Some(uid) = any.uid() {
        for pod in ctx.pods.owned_by(&uid) {
            ctx.wake.pod(&namespace, &pod.name_any());
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
        && old.spec.template != new.spec.template
    {
        for claim in ctx.claims.in_pool(&namespace, &name) {
            ctx.wake.claim(&namespace, &claim.name_any());
        }
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
            wake_waiting_claims(ctx, &namespace, pool);
        }
        if let Some(claim) = label(&pod, labels::CLAIM_UID).and_then(|uid| ctx.claims.by_uid(uid)) {
            ctx.wake.claim_store_changed(&namespace, &claim.name_any());
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    const INTERVAL: Duration = Duration::from_secs(1);

    /// Lets `tenths` tenths of a second of virtual time pass.
    async fn pass(tenths: u64) {
        tokio::time::sleep(Duration::from_millis(100 * tenths)).await;
    }

    /// Wakes of pods throttled to `INTERVAL`, and where they arrive.
    fn throttled() -> (Throttled<Pod>, UnboundedReceiver<ObjectRef<Pod>>) {
        let (sender, receiver) = unbounded();
        (Throttled::new(sender, INTERVAL), receiver)
    }

    /// How many wakes were sent since the last count.
    fn count(receiver: &mut UnboundedReceiver<ObjectRef<Pod>>) -> usize {
        std::iter::from_fn(|| receiver.try_recv().ok()).count()
    }

    #[tokio::test(start_paused = true)]
    async fn wakes_within_the_interval_are_merged_into_one_at_its_end() {
        let (throttled, mut receiver) = throttled();
        throttled.wake("ns", "pod-0");
        assert_eq!(count(&mut receiver), 1, "the first wake comes at once");
        pass(2).await;
        throttled.wake("ns", "pod-0");
        throttled.wake("ns", "pod-0");
        pass(7).await;
        assert_eq!(count(&mut receiver), 0, "held back until the interval ends");
        pass(2).await;
        assert_eq!(count(&mut receiver), 1, "the two held wakes come as one");
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_wake_is_dropped_when_a_reconcile_starts_after_its_last_change() {
        let (throttled, mut receiver) = throttled();
        throttled.wake("ns", "pod-0");
        pass(2).await;
        throttled.wake("ns", "pod-0");
        pass(3).await;
        throttled.reconciling("ns", "pod-0");
        pass(20).await;
        assert_eq!(count(&mut receiver), 1, "the held wake's change was read by the reconcile");
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_wake_with_a_change_after_the_reconcile_started_still_comes() {
        let (throttled, mut receiver) = throttled();
        throttled.wake("ns", "pod-0");
        pass(2).await;
        throttled.wake("ns", "pod-0");
        throttled.reconciling("ns", "pod-0");
        pass(3).await;
        throttled.wake("ns", "pod-0");
        // Another object's reconcile spends nothing of pod-0's.
        throttled.reconciling("ns", "pod-1");
        pass(20).await;
        assert_eq!(count(&mut receiver), 2, "the change at 0.5 s came after the reconcile started");
    }

    #[tokio::test(start_paused = true)]
    async fn a_reconcile_handed_an_older_version_than_the_cache_holds_spends_no_held_wake() {
        let wakers = Wakers::new(INTERVAL, INTERVAL);
        let mut receivers = wakers.take_receivers();
        let mut count = || std::iter::from_fn(|| receivers.pods.try_recv().ok()).count();
        wakers.pod("ns", "pod-0");
        pass(2).await;
        // The pod's deletion is applied and its wake held back; the reconcile
        // dispatched just before it was handed the pod as it was.
        wakers.pod("ns", "pod-0");
        wakers.reconciling(Kind::Pod, "ns", "pod-0", false);
        pass(20).await;
        assert_eq!(count(), 2, "the deletion's wake must still come");
        wakers.pod("ns", "pod-0");
        pass(2).await;
        wakers.pod("ns", "pod-0");
        wakers.reconciling(Kind::Pod, "ns", "pod-0", true);
        pass(20).await;
        assert_eq!(count(), 1, "a reconcile of the cached version saw the change");
    }
}
