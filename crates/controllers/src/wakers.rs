//! The wakers: one channel per controller that queues reconciles, each
//! object's wakes throttled to one per interval. Which objects a change
//! wakes is the `wake` module's business.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cnpool_api::{CNClaim, CNClaimSet, CNPool};
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;

use crate::key::Kind;

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

    /// A wake of the pod that goes at once, throttled or not: its owner
    /// changed, and a tenant waits for its CN store to take the new
    /// owner's labels.
    pub fn pod_now(&self, namespace: &str, name: &str) {
        self.pods.expect(namespace, name);
        self.pods.wake_expected(namespace, name);
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
