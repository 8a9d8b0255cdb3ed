//! How the operator runs: its settings, and their defaults.

use std::time::Duration;

use crate::clock::Clock;

/// How the operator runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Watch and act in this namespace only; `None` for the whole cluster.
    pub namespace: Option<String>,
    /// Reconciles run at once, per controller.
    pub workers: u16,
    /// First delay of a requeue with backoff (waiting for a pod, a failed
    /// guard, an error).
    pub requeue_min: Duration,
    /// Longest delay of a requeue with backoff.
    pub requeue_max: Duration,
    /// How often a settled object is looked at again regardless of events.
    pub resync: Duration,
    /// How often HAKeeper's store list is read.
    pub registry_poll: Duration,
    /// How long a running pod's store may be missing from HAKeeper before
    /// its claim counts the pod as lost.
    pub store_missing_bound: Duration,
    /// How long an unowned pod's store may be missing before its pool stops
    /// counting the pod as coming supply for waiting claims and makes
    /// another (the pod itself stays until the store-missing bound). Set it
    /// above the time a CN takes from its container's start to registering.
    pub store_registration_grace: Duration,
    /// How long the `cn-draining` finalizer waits for HAKeeper to remove a
    /// deleted pod's store before letting the pod go anyway.
    pub store_removal_timeout: Duration,
    /// How often a young drain's counters are read; an older drain is read
    /// less often, at most every `drain_poll_max`.
    pub drain_poll: Duration,
    pub drain_poll_max: Duration,
    /// How often a bound pod's stats annotations are refreshed.
    pub stats_interval: Duration,
    /// Drain timeout for pools that set none.
    pub drain_timeout: Duration,
    /// Minimum rest of a drained CN before it is Idle again, for pools that
    /// set none.
    pub drain_min_delay: Duration,
    /// Candidates tried per claim reconcile before requeueing.
    pub acquire_attempts: usize,
    /// How long a migration target's store must have served before the
    /// source is released (the proxy's routing catches up meanwhile).
    pub migration_propagation_delay: Duration,
    /// Changes of other objects wake one object at most once per this
    /// interval, a pool or a claim set once per `pool_wake_interval`
    /// (requeues are not held back).
    pub wake_interval: Duration,
    pub pool_wake_interval: Duration,
    /// This operator instance's name in Events.
    pub instance: String,
    /// The operator's own namespace, where it keeps its cutover record
    /// ([`crate::cutover::RECORD`]).
    pub operator_namespace: String,
    /// `host:port` of the HAKeeper (`--hakeeper-discovery`) written into the
    /// CN config of Go-shaped pools without `deps`.
    pub hakeeper_discovery: String,
    /// Where the time of day is read.
    pub clock: Clock,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            namespace: None,
            workers: 16,
            requeue_min: Duration::from_millis(200),
            requeue_max: Duration::from_secs(30),
            resync: Duration::from_secs(300),
            registry_poll: Duration::from_secs(2),
            store_missing_bound: Duration::from_secs(30),
            store_registration_grace: Duration::from_secs(10),
            store_removal_timeout: Duration::from_secs(60),
            drain_poll: Duration::from_secs(2),
            drain_poll_max: Duration::from_secs(20),
            stats_interval: Duration::from_secs(30),
            drain_timeout: cnpool_core::convert::DEFAULT_DRAIN_TIMEOUT,
            drain_min_delay: cnpool_core::convert::DEFAULT_MIN_DELAY,
            acquire_attempts: 3,
            migration_propagation_delay: Duration::from_secs(15),
            wake_interval: Duration::from_secs(1),
            pool_wake_interval: Duration::from_secs(3),
            instance: "cnpool".into(),
            operator_namespace: "default".into(),
            hakeeper_discovery: String::new(),
            clock: Clock::default(),
        }
    }
}
