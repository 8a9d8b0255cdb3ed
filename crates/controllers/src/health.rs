//! Whether the controllers still make progress, for `/healthz`: a
//! controller is wedged when its watch has delivered nothing for the stall
//! timeout, or when an object has waited that long for its reconcile to
//! start while no reconcile of that controller finished.
//!
//! A quiet cluster is not a wedged one. Each watch asks the API server to end
//! it after a third of the stall timeout ([`Health::watch_timeout`]); the
//! watcher then opens a new one at once, and that answered request counts as
//! a delivery ([`crate::CountRequestsLayer`] tells [`Health::watch_answered`]),
//! as do the watch's events and relists. kube-runtime's watcher keeps the
//! bookmarks to itself (they only move its resourceVersion), so the renewed
//! watch, not the bookmark, is what shows a quiet watch alive. A watcher that
//! is not polled (its informer stuck), or whose requests never get an answer,
//! renews nothing.
//!
//! The queue is what this crate hands kube-runtime's controller: an object a
//! change woke ([`crate::wakers`]) waits from the moment the runtime receives
//! it until a reconcile of it starts (or the runtime finds it gone). The
//! runtime's own requeues wait for their time, not for a worker, and are
//! not counted. Waiting long is wedged only while no reconcile of that
//! controller finishes: a long queue that is being worked through (a first
//! list of thousands of pods behind a client rate limit) is slow, and a
//! restart would not make it faster.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::metrics::Metrics;

/// The stall timeout when none is configured.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(180);

/// The shortest stall timeout: a watch is renewed every third of it, in
/// whole seconds.
pub const MIN_STALL_TIMEOUT: Duration = Duration::from_secs(3);

/// The liveness of every controller running in this process.
#[derive(Debug)]
pub struct Health {
    stall_timeout: Duration,
    controllers: Mutex<Vec<Weak<ControllerHealth>>>,
}

impl Default for Health {
    fn default() -> Self {
        Self::new(DEFAULT_STALL_TIMEOUT)
    }
}

impl Health {
    /// Health that calls a controller wedged after `stall_timeout` (at least
    /// [`MIN_STALL_TIMEOUT`]).
    pub fn new(stall_timeout: Duration) -> Self {
        Self { stall_timeout: stall_timeout.max(MIN_STALL_TIMEOUT), controllers: Mutex::default() }
    }

    pub fn stall_timeout(&self) -> Duration {
        self.stall_timeout
    }

    /// The `timeoutSeconds` of each watch: a third of the stall timeout, so
    /// that a quiet watch is renewed, and shows itself alive, well within it
    /// (kube-runtime's default of 290 s at most).
    pub fn watch_timeout(&self) -> u32 {
        let seconds = (self.stall_timeout.as_secs() / 3).clamp(1, 290);
        u32::try_from(seconds).unwrap_or(290)
    }

    /// Registers `controller`, which watches `resource` (a plural, as in an
    /// API path) in `namespace` (none: the whole cluster). It counts as long
    /// as the returned handle lives; the controllers register themselves.
    pub fn register(
        &self,
        controller: &'static str,
        namespace: Option<&str>,
        resource: String,
        metrics: Arc<Metrics>,
    ) -> Arc<ControllerHealth> {
        let now = Instant::now();
        let handle = Arc::new(ControllerHealth {
            controller,
            namespace: namespace.map(str::to_owned),
            resource,
            metrics,
            state: Mutex::new(State { delivered: now, finished: now, waiting: BTreeMap::new() }),
        });
        let mut controllers = self.controllers.lock().unwrap_or_else(PoisonError::into_inner);
        controllers.retain(|controller| controller.strong_count() > 0);
        controllers.push(Arc::downgrade(&handle));
        handle
    }

    fn live(&self) -> Vec<Arc<ControllerHealth>> {
        let controllers = self.controllers.lock().unwrap_or_else(PoisonError::into_inner);
        controllers.iter().filter_map(Weak::upgrade).collect()
    }

    /// A watch request for `resource` in `namespace` was answered: its
    /// watcher is polled and the API server answers it.
    pub fn watch_answered(&self, namespace: Option<&str>, resource: &str) {
        for controller in self.live() {
            if controller.resource == resource && controller.namespace.as_deref() == namespace {
                controller.delivered();
            }
        }
    }

    /// `Ok`, or why some controller is wedged, one line per controller.
    pub fn check(&self) -> Result<(), String> {
        let now = Instant::now();
        let wedged: Vec<String> =
            self.live().iter().filter_map(|controller| controller.wedged(now, self.stall_timeout)).collect();
        if wedged.is_empty() { Ok(()) } else { Err(wedged.join("\n")) }
    }
}

/// One controller's progress, in one namespace (or the whole cluster).
#[derive(Debug)]
pub struct ControllerHealth {
    controller: &'static str,
    namespace: Option<String>,
    resource: String,
    metrics: Arc<Metrics>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// When its watch last delivered something.
    delivered: Instant,
    /// When its last reconcile finished (or it started).
    finished: Instant,
    /// Objects handed to the runtime, since when, until their reconcile starts.
    waiting: BTreeMap<(String, String), Instant>,
}

impl ControllerHealth {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The controller's name, as in metrics (`CNClaim`, `Pod`, ...).
    pub(crate) fn controller(&self) -> &'static str {
        self.controller
    }

    /// Its watch delivered an event, a relist, or a renewed watch.
    pub(crate) fn delivered(&self) {
        self.state().delivered = Instant::now();
    }

    /// `namespace/name` was handed to the runtime to reconcile.
    pub(crate) fn queued(&self, namespace: Option<&str>, name: &str) {
        let key = (namespace.unwrap_or_default().to_owned(), name.to_owned());
        let mut state = self.state();
        if let std::collections::btree_map::Entry::Vacant(entry) = state.waiting.entry(key) {
            entry.insert(Instant::now());
            self.metrics.queue_changed(self.controller, 1);
        }
    }

    /// The runtime took `namespace/name` out of its queue: to reconcile it,
    /// or because it is gone.
    pub(crate) fn dequeued(&self, namespace: Option<&str>, name: &str) {
        let key = (namespace.unwrap_or_default().to_owned(), name.to_owned());
        if self.state().waiting.remove(&key).is_some() {
            self.metrics.queue_changed(self.controller, -1);
        }
    }

    /// A reconcile finished.
    pub(crate) fn finished(&self) {
        self.state().finished = Instant::now();
    }

    fn wedged(&self, now: Instant, stall: Duration) -> Option<String> {
        let state = self.state();
        let scope = match &self.namespace {
            Some(namespace) => format!("the {} controller (namespace {namespace})", self.controller),
            None => format!("the {} controller", self.controller),
        };
        let silent = now.saturating_duration_since(state.delivered);
        if silent > stall {
            return Some(format!(
                "{scope}: its watch of {} has delivered nothing (no event, no relist, no renewed watch) for {}s",
                self.resource,
                silent.as_secs()
            ));
        }
        let idle = now.saturating_duration_since(state.finished);
        let oldest = state.waiting.iter().min_by_key(|(_, since)| **since);
        match oldest {
            Some(((namespace, name), since)) if idle > stall && now.saturating_duration_since(*since) > stall => {
                Some(format!(
                    "{scope}: {namespace}/{name} has waited {}s for its reconcile, and no reconcile finished for {}s",
                    now.saturating_duration_since(*since).as_secs(),
                    idle.as_secs()
                ))
            }
            _ => None,
        }
    }
}

impl Drop for ControllerHealth {
    fn drop(&mut self) {
        let waiting = self.state().waiting.len();
        self.metrics.queue_changed(self.controller, -i64::try_from(waiting).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STALL: Duration = Duration::from_secs(30);

    fn registered(health: &Health) -> Arc<ControllerHealth> {
        health.register("CNPool", Some("ns"), "cnpools".into(), Arc::default())
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_renewed_within_the_timeout_is_alive_and_one_that_stops_is_not() {
        let health = Health::new(STALL);
        let _pools = registered(&health);
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(health.watch_timeout().into())).await;
            health.watch_answered(Some("ns"), "cnpools");
            // Another namespace's or another kind's watch says nothing of this one.
            health.watch_answered(Some("other"), "cnpools");
            health.watch_answered(Some("ns"), "pods");
            assert_eq!(health.check(), Ok(()));
        }
        tokio::time::sleep(STALL + Duration::from_secs(1)).await;
        let wedged = health.check().unwrap_err();
        assert!(wedged.contains("CNPool controller (namespace ns)") && wedged.contains("cnpools"), "{wedged}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_wait_is_wedged_only_while_no_reconcile_finishes() {
        let health = Health::new(STALL);
        let pools = registered(&health);
        let alive = || {
            tokio::spawn({
                let pools = Arc::clone(&pools);
                async move {
                    loop {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        pools.delivered();
                    }
                }
            })
        };
        let watch = alive();
        pools.queued(Some("ns"), "slow");
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(10)).await;
            pools.finished();
        }
        assert_eq!(health.check(), Ok(()), "a queue worked through is not wedged");
        tokio::time::sleep(STALL + Duration::from_secs(1)).await;
        let wedged = health.check().unwrap_err();
        assert!(wedged.contains("ns/slow has waited"), "{wedged}");
        pools.dequeued(Some("ns"), "slow");
        assert_eq!(health.check(), Ok(()));
        watch.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_controller_counts_no_more() {
        let health = Health::new(STALL);
        let pools = registered(&health);
        tokio::time::sleep(STALL * 2).await;
        assert!(health.check().is_err());
        drop(pools);
        assert_eq!(health.check(), Ok(()));
    }
}
