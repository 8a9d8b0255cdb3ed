//! Runs one operator replica: the production wiring and reconcile functions
//! of `cnpool_controllers`, driven by a deterministic scheduler instead of
//! kube-runtime's, which picks among ready objects in hash order (random per
//! process).
//!
//! The scheduler keeps kube-runtime's semantics where they matter: an
//! object is queued once (the earliest due time wins), one reconcile of an
//! object runs at a time, a wake during a reconcile queues it again, an
//! `Action` requeues it after its delay and an error goes through the
//! controller's error policy. Each controller has one worker; concurrency
//! between operators comes from running several replicas. The scheduler is
//! generic over the reconcile's context and error, so that the legacy model
//! ([`crate::legacy`]) runs on it too.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use cnpool_controllers::{Config, Registries, Wiring};
use cnpool_registry::memory::MemoryRegistry;
use futures::channel::mpsc::UnboundedReceiver;
use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, StreamExt};
use kube::Resource;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::time::Instant;

use crate::ledger::Ledger;

/// The simulated operators' stall timeout: a third of it, 290 s, is each
/// watch's `timeoutSeconds` (see [`run_replica`]'s wiring).
const SIM_STALL_TIMEOUT: Duration = Duration::from_secs(870);

/// The simulated HAKeeper's address: the scenarios' pools have no deps, so
/// every pool uses it, and one in-memory registry serves it.
const SIM_HAKEEPER: &str = "sim-hakeeper:32001";

/// How long `action` asks to wait before the next reconcile; `None` for
/// "until a change". kube-runtime keeps the delay private, and `Action`'s
/// `Debug` is the only way to read it: `Action { requeue_after: Some(1.5s) }`.
fn requeue_after(action: &Action) -> Option<Duration> {
    let text = format!("{action:?}");
    let inner = text.split("Some(").nth(1)?.split(')').next()?;
    parse_debug_duration(inner)
}

/// Parses `Duration`'s `Debug` form ("200ms", "1.5s", "30µs"), exactly.
fn parse_debug_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.')?;
    let (number, unit) = text.split_at(split);
    let nanos_per_unit: u128 = match unit {
        "s" => 1_000_000_000,
        "ms" => 1_000_000,
        "µs" => 1_000,
        "ns" => 1,
        _ => return None,
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let mut nanos = whole.parse::<u128>().ok()? * nanos_per_unit;
    let mut scale = nanos_per_unit;
    for digit in fraction.chars() {
        scale /= 10;
        nanos += u128::from(digit.to_digit(10)?) * scale;
    }
    Some(Duration::from_nanos(u64::try_from(nanos).ok()?))
}

/// Objects due for reconciling, in due-time then key order.
struct Queue {
    due: BTreeMap<(String, String), Instant>,
    order: BTreeSet<(Instant, String, String)>,
}

impl Queue {
    fn new() -> Self {
        Self { due: BTreeMap::new(), order: BTreeSet::new() }
    }

    /// Queues `key` at `at` unless it is already queued earlier.
    fn push(&mut self, key: (String, String), at: Instant) {
        if let Some(existing) = self.due.get(&key) {
            if *existing <= at {
                return;
            }
            self.order.remove(&(*existing, key.0.clone(), key.1.clone()));
        }
        self.order.insert((at, key.0.clone(), key.1.clone()));
        self.due.insert(key, at);
    }

    fn next_due(&self) -> Option<Instant> {
        self.order.first().map(|(at, _, _)| *at)
    }

    fn pop(&mut self) -> Option<(String, String)> {
        let (_, namespace, name) = self.order.pop_first()?;
        let key = (namespace, name);
        self.due.remove(&key);
        Some(key)
    }
}

/// One controller's reconcile and error policy over context `C`.
pub(crate) struct Controller<K: Resource<DynamicType = ()> + 'static, Rec, Pol> {
    /// The replica's instance name, which the ledger counts reconciles by.
    pub replica: String,
    pub kind: &'static str,
    pub store: Store<K>,
    pub triggers: UnboundedReceiver<ObjectRef<K>>,
    pub reconcile: Rec,
    pub error_policy: Pol,
}

impl<K, Rec, Pol> Controller<K, Rec, Pol>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    pub async fn run<C, E, Fut>(mut self, ctx: Arc<C>, ledger: Arc<Ledger>, shutdown: Shared<BoxFuture<'static, ()>>)
    where
        Rec: Fn(Arc<K>, Arc<C>) -> Fut,
        Fut: Future<Output = Result<Action, E>>,
        Pol: Fn(Arc<K>, &E, Arc<C>) -> Action,
    {
        let mut queue = Queue::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let due = queue.next_due();
            let wait_due = async {
                match due {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => futures::future::pending().await,
                }
            };
            let popped = tokio::select! {
                biased;
                () = &mut shutdown => return,
                trigger = self.triggers.next() => match trigger {
                    Some(object) => {
                        queue.push(key(&object), Instant::now());
                        continue;
                    }
                    None => return,
                },
                () = wait_due => queue.pop(),
            };
            let Some((namespace, name)) = popped else { continue };
            let object_ref = ObjectRef::<K>::new(&name).within(&namespace);
            // Gone between its wake and its reconcile.
            let Some(object) = self.store.get(&object_ref) else { continue };
            ledger.reconciled(
                &self.replica,
                self.kind,
                &namespace,
                &name,
                object.meta().uid.as_deref().unwrap_or_default(),
            );
            tracing::debug!(replica = %self.replica, kind = self.kind, %namespace, %name, "reconcile");
            // A crash stops a reconcile wherever it is.
            let result = tokio::select! {
                biased;
                () = &mut shutdown => return,
                result = (self.reconcile)(object.clone(), ctx.clone()) => result,
            };
            let action = match result {
                Ok(action) => action,
                Err(error) => (self.error_policy)(object, &error, ctx.clone()),
            };
            if let Some(delay) = requeue_after(&action) {
                queue.push((namespace, name), Instant::now() + delay);
            }
        }
    }
}

fn key<K>(object: &ObjectRef<K>) -> (String, String)
where
    K: Resource<DynamicType = ()>,
{
    (object.namespace.clone().unwrap_or_default(), object.name.clone())
}

/// Runs one replica on `client` until `shutdown`: its caches, its registry
/// poll and its four controllers (claims, pools, claim sets, pods), as
/// `cnpool_controllers::run` runs them. Its memory dies with it.
pub async fn run_replica(
    client: kube::Client,
    registry: MemoryRegistry,
    config: Config,
    ledger: Arc<Ledger>,
    shutdown: Shared<BoxFuture<'static, ()>>,
) {
    let replica = config.instance.clone();
    // Watches renewed every 290 s, kube's default and the cadence the seeds
    // were drawn under: a shorter renewal (the operator's default stall
    // timeout gives 60 s) makes a seed's trace vary between runs, because
    // the embedded server's watch timeout races the events it delivers
    // (noted; the simulator needs that race made deterministic first).
    let telemetry = cnpool_controllers::Telemetry::default().with_stall_timeout(SIM_STALL_TIMEOUT);
    let Wiring { ctx, informers, pods, claims, pools, claim_sets, triggers, .. } = cnpool_controllers::wire(
        client,
        Registries::shared(SIM_HAKEEPER, registry),
        config,
        &telemetry,
        shutdown.clone(),
    );
    let claim_controller = Controller {
        replica: replica.clone(),
        kind: "CNClaim",
        store: claims,
        triggers: triggers.claims,
        reconcile: cnpool_controllers::claim::reconcile::<MemoryRegistry>,
        error_policy: cnpool_controllers::claim::error_policy::<MemoryRegistry>,
    };
    let pool_controller = Controller {
        replica: replica.clone(),
        kind: "CNPool",
        store: pools,
        triggers: triggers.pools,
        reconcile: cnpool_controllers::pool::reconcile::<MemoryRegistry>,
        error_policy: cnpool_controllers::pool::error_policy::<MemoryRegistry>,
    };
    let claim_set_controller = Controller {
        replica: replica.clone(),
        kind: "CNClaimSet",
        store: claim_sets,
        triggers: triggers.claim_sets,
        reconcile: cnpool_controllers::claim_set::reconcile::<MemoryRegistry>,
        error_policy: cnpool_controllers::claim_set::error_policy::<MemoryRegistry>,
    };
    let store_controller = Controller {
        replica: replica.clone(),
        kind: "Pod",
        store: pods,
        triggers: triggers.pods,
        reconcile: cnpool_controllers::store::reconcile::<MemoryRegistry>,
        error_policy: cnpool_controllers::store::error_policy::<MemoryRegistry>,
    };
    futures::future::join5(
        informers,
        claim_controller.run(ctx.clone(), ledger.clone(), shutdown.clone()),
        pool_controller.run(ctx.clone(), ledger.clone(), shutdown.clone()),
        claim_set_controller.run(ctx.clone(), ledger.clone(), shutdown.clone()),
        store_controller.run(ctx, ledger, shutdown),
    )
    .map(drop)
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requeue_delays_read_exactly_from_actions() {
        let delays = [Duration::from_millis(200), Duration::from_millis(1500), Duration::from_secs(300)];
        for delay in delays.into_iter().chain([Duration::from_nanos(1_000_000_001), Duration::from_micros(7)]) {
            assert_eq!(requeue_after(&Action::requeue(delay)), Some(delay));
        }
        assert_eq!(requeue_after(&Action::await_change()), None);
    }
}
