//! cnpool's controllers: they read the indexed caches, ask the decision
//! core ([`cnpool_core`]) what to do, and execute its answer as guarded
//! writes (DESIGN §2).
//!
//! - [`claim`]: CNClaim binding, loss, release and finalization;
//! - [`claim_set`]: CNClaimSet member claims, scale and status;
//! - [`pool`]: CNPool pods, headless Service, scale and status;
//! - [`store`]: each pool pod's CN store in HAKeeper, its phase changes
//!   (register, recycle, terminate), the `cn-draining` finalizer, the
//!   orphan sweep and the stats annotations — the only writer of the
//!   registry;
//! - [`ownership`]: the one function that writes a pod's phase and owner;
//! - `observe`: how a pod reads to every controller (cordon, store
//!   missing, template revision) — no controller imports another;
//! - `nodes`: which nodes are cordoned, from a watch of Nodes (node
//!   maintenance: their pods read as cordoned);
//! - [`clusters`]: which MatrixOne cluster (HAKeeper) each pool uses, from
//!   its `spec.deps` and the LogSets it names;
//! - [`registries`]: one HAKeeper client and store listing per cluster;
//! - `registry_poll`: each cluster's store list, read into its `stores`;
//! - `takeover`: Go-rendered pods released from their Go workload, and
//!   their kruise readiness gates answered, at cutover;
//! - [`cutover`]: the cutover time, read from (or first recorded in) the
//!   cluster at start: only claims older than it adopt Go-bound pods;
//! - `conditions`: setting a status condition, kept once for every kind;
//! - `events`: the Event recorder, whose Events say what last happened;
//! - `context`: what every reconcile shares, with this process's memory in
//!   small structs of their own (`backoff`, `lately`, `migrations`,
//!   `expected`, `stores`, `own_writes`);
//! - `sabotage` (feature `sabotage`: simulator tests and the lab's model
//!   checker, never the operator's build): broken variants of the protocol,
//!   to show that the simulator and the model checker catch them.
//!
//! [`run`] wires them on kube-rs's controller runtime: one watch per kind
//! feeds the runtime's stores and this crate's indexes ([`cache`]), and a
//! change wakes (`wake`, through the throttled `wakers`) only the objects
//! whose decision it can alter.

mod backoff;
pub mod cache;
pub mod claim;
pub mod claim_set;
mod clock;
pub mod clusters;
mod conditions;
mod config;
mod context;
pub mod cutover;
mod error;
mod events;
mod expected;
pub mod health;
mod key;
mod lately;
pub mod metrics;
mod migrations;
mod nodes;
mod observe;
mod own_writes;
pub mod ownership;
pub mod pool;
pub mod registries;
mod registry_poll;
mod requests;
#[cfg(feature = "sabotage")]
pub mod sabotage;
pub mod store;
mod stores;
mod takeover;
mod validity;
mod wake;
mod wakers;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cnpool_api::{CNClaim, CNClaimSet, CNPool, labels};
use cnpool_registry::StoreRegistry;
use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

pub use clock::Clock;
pub use config::Config;
pub use context::Context;
pub use error::{Error, is_not_found, is_stale};
use health::ControllerHealth;
pub use health::Health;
pub use metrics::Metrics;
pub use observe::{own_view, pool_revision, store_missing_noted};
pub use registries::Registries;
pub use requests::CountRequestsLayer;
pub use wakers::Triggers;

/// What the process running the controllers can observe of them: their
/// metrics, whether their caches have been listed once (readiness), and
/// whether they still make progress (liveness, [`health`]).
/// One `Telemetry` may serve the controllers of several namespaces at once
/// ([`Telemetry::for_scopes`]).
#[derive(Clone)]
pub struct Telemetry {
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    /// Caches listed at least once since the last [`Telemetry::restart`].
    listed: Arc<AtomicUsize>,
    /// How many sets of controllers (one per namespace) report here.
    scopes: usize,
}

impl Default for Telemetry {
    fn default() -> Self {
        Self::new(Arc::default())
    }
}

/// The kinds whose first list makes the controllers ready: pods, claims,
/// pools, claim sets.
const INFORMERS: usize = 4;

impl Telemetry {
    /// Telemetry reporting to `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self::for_scopes(metrics, 1)
    }

    /// Telemetry for `scopes` sets of controllers run side by side, one per
    /// namespace, all reporting to `metrics`: ready once every set's caches
    /// are listed.
    pub fn for_scopes(metrics: Arc<Metrics>, scopes: usize) -> Self {
        Self { metrics, health: Arc::default(), listed: Arc::default(), scopes: scopes.max(1) }
    }

    /// The same telemetry, calling a controller wedged after
    /// `stall_timeout` ([`Health::new`]).
    #[must_use]
    pub fn with_stall_timeout(self, stall_timeout: Duration) -> Self {
        Self { health: Arc::new(Health::new(stall_timeout)), ..self }
    }

    /// Whether every cache has been listed since the controllers started.
    pub fn ready(&self) -> bool {
        self.listed.load(Ordering::Relaxed) >= INFORMERS * self.scopes
    }

    /// The controllers start again (a new leadership term): they are not
    /// ready until their new caches have been listed.
    pub fn restart(&self) {
        self.listed.store(0, Ordering::Relaxed);
    }
}

/// Runs every controller until `shutdown` completes. Returns once they
/// have stopped.
pub async fn run<R>(
    client: kube::Client,
    registries: Registries<R>,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) where
    R: StoreRegistry + 'static,
{
    run_observed(client, registries, config, Telemetry::default(), shutdown).await;
}

/// [`run`], reporting to `telemetry`. A caller that runs the controllers
/// again with the same telemetry calls [`Telemetry::restart`] first.
pub async fn run_observed<R>(
    client: kube::Client,
    registries: Registries<R>,
    config: Config,
    telemetry: Telemetry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) where
    R: StoreRegistry + 'static,
{
    let shutdown = shutdown.boxed().shared();
    let Wiring { ctx, informers, pods, claims, pools, claim_sets, triggers, health } =
        wire(client, registries, config, &telemetry, shutdown.clone());
    let controller_config = controller::Config::default().concurrency(ctx.config.workers);
    let claim_controller = Controller::for_stream(futures::stream::pending(), claims)
        .reconcile_on(queued(&health.claims, triggers.claims))
        .with_config(controller_config.clone())
        .graceful_shutdown_on(shutdown.clone())
        .run(timed(&health.claims, claim::reconcile), claim::error_policy, ctx.clone())
        .for_each(|result| finished(&ctx, &health.claims, result));
    let pool_controller = Controller::for_stream(futures::stream::pending(), pools)
        .reconcile_on(queued(&health.pools, triggers.pools))
        .with_config(controller_config.clone())
        .graceful_shutdown_on(shutdown.clone())
        .run(timed(&health.pools, pool::reconcile), pool::error_policy, ctx.clone())
        .for_each(|result| finished(&ctx, &health.pools, result));
    let claim_set_controller = Controller::for_stream(futures::stream::pending(), claim_sets)
        .reconcile_on(queued(&health.claim_sets, triggers.claim_sets))
        .with_config(controller_config.clone())
        .graceful_shutdown_on(shutdown.clone())
        .run(timed(&health.claim_sets, claim_set::reconcile), claim_set::error_policy, ctx.clone())
        .for_each(|result| finished(&ctx, &health.claim_sets, result));
    let store_controller = Controller::for_stream(futures::stream::pending(), pods)
        .reconcile_on(queued(&health.pods, triggers.pods))
        .with_config(controller_config)
        .graceful_shutdown_on(shutdown.clone())
        .run(timed(&health.pods, store::reconcile), store::error_policy, ctx.clone())
        .for_each(|result| finished(&ctx, &health.pods, result));
    futures::future::join5(informers, claim_controller, pool_controller, claim_set_controller, store_controller).await;
}

/// The wakes of a controller, each counted as waiting in its queue until
/// its reconcile starts.
fn queued<K>(
    health: &Arc<ControllerHealth>,
    wakes: impl futures::Stream<Item = ObjectRef<K>> + Send + 'static,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: kube::Resource,
{
    let health = Arc::clone(health);
    wakes.inspect(move |object| health.queued(object.namespace.as_deref(), &object.name))
}

/// `reconcile`, taking its object out of the queue as it starts and timing it.
fn timed<K, R, F, Fut>(
    health: &Arc<ControllerHealth>,
    reconcile: F,
) -> impl FnMut(Arc<K>, Arc<Context<R>>) -> BoxFuture<'static, Result<Action, Error>>
where
    K: kube::Resource,
    F: Fn(Arc<K>, Arc<Context<R>>) -> Fut,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    let health = Arc::clone(health);
    move |object, ctx| {
        health.dequeued(object.meta().namespace.as_deref(), object.meta().name.as_deref().unwrap_or_default());
        let (health, metrics) = (Arc::clone(&health), Arc::clone(&ctx.metrics));
        let started = tokio::time::Instant::now();
        let reconciling = reconcile(object, ctx);
        async move {
            let result = reconciling.await;
            metrics.reconcile_took(health.controller(), started.elapsed().as_secs_f64());
            health.finished();
            result
        }
        .boxed()
    }
}

/// Counts and logs a reconcile's outcome.
fn finished<K, R>(
    ctx: &Context<R>,
    health: &ControllerHealth,
    result: Result<(ObjectRef<K>, Action), controller::Error<Error, watcher::Error>>,
) -> futures::future::Ready<()>
where
    K: kube::Resource,
    K::DynamicType: std::fmt::Debug,
{
    // An object gone before its reconcile leaves the queue without one.
    if let Err(controller::Error::ObjectNotFound(object)) = &result {
        health.dequeued(object.namespace.as_deref(), &object.name);
    }
    ctx.metrics.reconciled(health.controller(), outcome_error(&result));
    log_outcome(health.controller(), result);
    futures::future::ready(())
}

/// The operator's parts before a runtime drives them: [`run`] hands them to
/// kube-runtime's controllers; the simulator drives the same reconcile
/// functions from a scheduler of its own, since kube-runtime's picks among
/// ready objects in hash order, which differs from process to process.
pub struct Wiring<R> {
    pub ctx: Arc<Context<R>>,
    /// The watches that fill the caches and queue reconciles, and the
    /// registry poll; they run until shutdown.
    pub informers: BoxFuture<'static, ()>,
    /// The objects the reconciles read, as the watches last saw them.
    pub pods: Store<Pod>,
    pub claims: Store<CNClaim>,
    pub pools: Store<CNPool>,
    pub claim_sets: Store<CNClaimSet>,
    /// The objects to reconcile, as the watches' changes wake them.
    pub triggers: Triggers,
    /// Each controller's progress, as `/healthz` reads it.
    pub health: ControllersHealth,
}

/// The progress of each controller of one [`Wiring`].
pub struct ControllersHealth {
    pub claims: Arc<ControllerHealth>,
    pub pools: Arc<ControllerHealth>,
    pub claim_sets: Arc<ControllerHealth>,
    pub pods: Arc<ControllerHealth>,
}

impl ControllersHealth {
    fn register(telemetry: &Telemetry, namespace: Option<&str>) -> Self {
        fn one<K: kube::Resource<DynamicType = ()>>(
            telemetry: &Telemetry,
            controller: &'static str,
            namespace: Option<&str>,
        ) -> Arc<ControllerHealth> {
            telemetry.health.register(
                controller,
                namespace,
                K::plural(&()).into_owned(),
                Arc::clone(&telemetry.metrics),
            )
        }
        Self {
            claims: one::<CNClaim>(telemetry, "CNClaim", namespace),
            pools: one::<CNPool>(telemetry, "CNPool", namespace),
            claim_sets: one::<CNClaimSet>(telemetry, "CNClaimSet", namespace),
            pods: one::<Pod>(telemetry, "Pod", namespace),
        }
    }
}

/// Builds the operator's context and watches, reporting to `telemetry`;
/// nothing runs until the returned futures are polled.
pub fn wire<R>(
    client: kube::Client,
    registries: Registries<R>,
    config: Config,
    telemetry: &Telemetry,
    shutdown: Shared<BoxFuture<'static, ()>>,
) -> Wiring<R>
where
    R: StoreRegistry + 'static,
{
    let ctx = Arc::new(Context::new(client.clone(), registries, config, Arc::clone(&telemetry.metrics)));
    let listed = || {
        let listed = Arc::clone(&telemetry.listed);
        move || {
            listed.fetch_add(1, Ordering::Relaxed);
        }
    };
    let pod_writer: Writer<Pod> = Writer::default();
    let claim_writer: Writer<CNClaim> = Writer::default();
    let pool_writer: Writer<CNPool> = Writer::default();
    let claim_set_writer: Writer<CNClaimSet> = Writer::default();
    let (pods, claims, pools, claim_sets) =
        (pod_writer.as_reader(), claim_writer.as_reader(), pool_writer.as_reader(), claim_set_writer.as_reader());

    let namespace = ctx.config.namespace.as_deref();
    let health = ControllersHealth::register(telemetry, namespace);
    let delivered = |controller: &Arc<ControllerHealth>| {
        let controller = Arc::clone(controller);
        move || controller.delivered()
    };
    // Renewed well within the stall timeout, so that a quiet watch shows
    // itself alive ([`health`]).
    let watch = watcher::Config::default().timeout(telemetry.health.watch_timeout());
    let (pod_api, claim_api, pool_api, claim_set_api) = (
        scoped(&client, namespace),
        scoped(&client, namespace),
        scoped(&client, namespace),
        scoped(&client, namespace),
    );

    let (pod_ctx, claim_ctx, pool_ctx, claim_set_ctx) = (ctx.clone(), ctx.clone(), ctx.clone(), ctx.clone());
    let informers = futures::future::join5(
        cache::inform(
            watcher(pod_api, watch.clone().labels(labels::POOL_NAME)).modify(cache::trim_pod),
            pod_writer,
            ctx.pods.clone(),
            move |change| wake::pod_changed(&pod_ctx, change),
            cache::Progress { delivered: delivered(&health.pods), first_list: listed() },
            shutdown.clone(),
        ),
        cache::inform(
            watcher(claim_api, watch.clone()),
            claim_writer,
            ctx.claims.clone(),
            move |change| wake::claim_changed(&claim_ctx, change),
            cache::Progress { delivered: delivered(&health.claims), first_list: listed() },
            shutdown.clone(),
        ),
        cache::inform(
            watcher(pool_api, watch.clone()),
            pool_writer,
            ctx.pools.clone(),
            move |change| wake::pool_changed(&pool_ctx, change),
            cache::Progress { delivered: delivered(&health.pools), first_list: listed() },
            shutdown.clone(),
        ),
        cache::inform(
            watcher(claim_set_api, watch.clone()),
            claim_set_writer,
            ctx.claim_sets.clone(),
            move |change| wake::claim_set_changed(&claim_set_ctx, change),
            cache::Progress { delivered: delivered(&health.claim_sets), first_list: listed() },
            shutdown.clone(),
        ),
        registry_poll::poll_registries(ctx.clone(), shutdown.clone()),
    );
    let stats = store::poll_stats(ctx.clone(), shutdown.clone());
    let cutover = cutover::establish(ctx.clone(), shutdown.clone());
    let node_ctx = ctx.clone();
    let cordons = nodes::watch(
        ctx.client.clone(),
        ctx.nodes.clone(),
        move |node| wake::node_changed(&node_ctx, node),
        shutdown.clone(),
    );
    let log_set_ctx = ctx.clone();
    let log_sets = clusters::watch(
        ctx.client.clone(),
        ctx.config.namespace.clone(),
        ctx.log_sets.clone(),
        move || wake::log_sets_changed(&log_set_ctx),
        shutdown,
    );
    let informers = futures::future::join5(informers, stats, cordons, cutover, log_sets).map(drop).boxed();
    let triggers = ctx.wake.take_receivers();
    Wiring { ctx, informers, pods, claims, pools, claim_sets, triggers, health }
}

/// An `Api` of the whole cluster, or of `namespace` alone.
fn scoped<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The metric label of a failed reconcile's error.
fn outcome_error<K>(
    result: &Result<(kube::runtime::reflector::ObjectRef<K>, Action), controller::Error<Error, watcher::Error>>,
) -> Option<&'static str>
where
    K: kube::Resource,
{
    match result {
        Ok(_) | Err(controller::Error::ObjectNotFound(_)) => None,
        Err(controller::Error::ReconcilerFailed(error, _)) => Some(error.metric_label()),
        Err(_) => Some("runtime"),
    }
}

fn log_outcome<K, E: std::error::Error>(
    kind: &'static str,
    result: Result<(kube::runtime::reflector::ObjectRef<K>, Action), controller::Error<E, watcher::Error>>,
) where
    K: kube::Resource,
    K::DynamicType: std::fmt::Debug,
{
    match result {
        Ok(_) => {}
        // An object deleted between its wake and its reconcile.
        Err(controller::Error::ObjectNotFound(object)) => {
            tracing::trace!(kind, %object, "object gone before reconcile")
        }
        // The error policy has logged it, with the delay.
        Err(controller::Error::ReconcilerFailed(error, object)) => {
            tracing::trace!(kind, %object, %error, "reconcile failed")
        }
        Err(error) => tracing::warn!(kind, %error, "controller runtime error"),
    }
}
