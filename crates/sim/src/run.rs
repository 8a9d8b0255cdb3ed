//! One seed of one scenario: the embedded API server, the world, HAKeeper,
//! the operator replicas, the control plane and the fault injector, on a
//! current-thread runtime whose clock is paused (tokio advances it whenever
//! every task waits), with the checker reading every commit.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cnpool_api::{CNClaim, CNClaimSet, CNPool, ClaimPhase, labels};
use cnpool_apiserver::{ApiServer, Event};
use cnpool_registry::memory::{CallKind, MemoryRegistry};
use cnpool_registry::{RegistryError, Workload};
use cnpool_world::{World, WorldConfig};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;

use crate::checker::{Bounds, Checker, OwnerLabel, Violation};
use crate::gate::{self, FaultSwitch};
use crate::hostile::ControlPlane;
use crate::ledger::{Actor, ApiCounts, Fault, Ledger, Reach};
use crate::report::Timeline;
use crate::scenario::{Action, ClaimSetShape, Migrations, QUIET_WINDOW, Scenario, TemplateChange};
use crate::{driver, legacy};

/// Where virtual time starts: the evening the incident began.
const EPOCH_SECONDS: i64 = 1_778_781_600; // 2026-05-14T18:00:00Z
/// The namespace everything runs in.
const NAMESPACE: &str = "default";
/// How long a crashed operator stays down.
const RESTART_DELAY: Duration = Duration::from_secs(5);

/// What one seed gave.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub seed: u64,
    pub violations: Vec<Violation>,
    pub faults: BTreeMap<Fault, u64>,
    pub api: ApiCounts,
    pub reconciles: u64,
    /// Operator and world log lines at INFO or above.
    pub log_lines: u64,
    /// Migrations whose cost I5 judged: those that ended undisturbed and
    /// that no injected fault reached.
    pub migrations_judged: u64,
    pub virtual_time: Duration,
    /// FNV-1a of the trace: equal for equal traces.
    pub trace_digest: u64,
    /// The trace, when asked for.
    pub trace: Vec<String>,
    /// What the HTML report draws, when asked for.
    pub report: Option<ReportData>,
}

/// Whose controllers the operator replicas run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Controllers {
    /// cnpool's production controllers.
    #[default]
    Cnpool,
    /// The model of the Go operator's algorithm ([`crate::legacy`]).
    Legacy,
}

impl Controllers {
    pub fn name(self) -> &'static str {
        match self {
            Controllers::Cnpool => "cnpool",
            Controllers::Legacy => "legacy",
        }
    }

    /// The pod label these controllers lock a pod with.
    pub fn owner_label(self) -> OwnerLabel {
        match self {
            Controllers::Cnpool => OwnerLabel::ClaimUid,
            Controllers::Legacy => OwnerLabel::ClaimedBy,
        }
    }
}

/// What a run keeps beyond its counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Keep {
    /// The trace's text (its digest is always kept).
    pub trace: bool,
    /// The pods' timeline and the times of reconciles and writes.
    pub report: bool,
}

/// A run's timeline and activity, for [`crate::report`].
#[derive(Clone, Debug)]
pub struct ReportData {
    pub timeline: Timeline,
    pub reconciles: Vec<Duration>,
    pub writes: Vec<Duration>,
}

/// Why a run could not take place (as opposed to a violation it found).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("building the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("setting up the cluster: {0}")]
    Setup(#[source] kube::Error),
    #[error("the checker fell {0} commits behind the server")]
    CheckerLagged(u64),
    #[error("step {step} ({kind}) cannot run with --controller {controllers}: {why}; run it with cnpool's controllers")]
    Unsupported { controllers: &'static str, step: usize, kind: &'static str, why: &'static str },
}

/// Whether `controllers` can run every step of `scenario`.
pub fn supports(scenario: &Scenario, controllers: Controllers) -> Result<(), RunError> {
    match (controllers, scenario.unsupported_by_legacy()) {
        (Controllers::Legacy, Some((step, kind, why))) => {
            Err(RunError::Unsupported { controllers: controllers.name(), step, kind, why })
        }
        _ => Ok(()),
    }
}

/// Counts the log lines a run writes, at INFO or above, in its ledger.
struct LineCounter(Arc<Ledger>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LineCounter {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() <= tracing::Level::INFO {
            let mut claim = ClaimField(None);
            event.record(&mut claim);
            self.0.log_line(claim.0);
        }
    }
}

/// Stamps a log line with the run's virtual time, in seconds.
struct VirtualSeconds(Arc<Ledger>);

impl tracing_subscriber::fmt::time::FormatTime for VirtualSeconds {
    fn format_time(&self, writer: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(writer, "{:10.3}", self.0.elapsed().as_secs_f64())
    }
}

/// A log line's `claim` field (the claim's name).
struct ClaimField(Option<String>);

impl tracing::field::Visit for ClaimField {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "claim" {
            self.0 = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "claim" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

/// Watches a run from outside, for measurements the checker does not
/// make: sees every committed write as the checker does (in order, with
/// the run's ledger), and the ledger once the run is over.
pub trait Observer: Send + Sync {
    fn commit(&self, _event: &Event, _ledger: &Ledger) {}
    fn finished(&self, _ledger: &Ledger) {}
}

/// No observer.
impl Observer for () {}

/// Runs `scenario` with `seed` and `controllers` on this thread.
pub fn run(scenario: &Scenario, seed: u64, controllers: Controllers, keep: Keep) -> Result<Outcome, RunError> {
    run_observed(scenario, seed, controllers, keep, Arc::new(()))
}

/// [`run`], with `observer` watching.
pub fn run_observed(
    scenario: &Scenario,
    seed: u64,
    controllers: Controllers,
    keep: Keep,
    observer: Arc<dyn Observer>,
) -> Result<Outcome, RunError> {
    supports(scenario, controllers)?;
    // kube-runtime's watch backoff draws its jitter from fastrand's
    // thread-local generator: seed it, so that the jitter repeats too.
    fastrand::seed(seed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(RunError::Runtime)?;
    // On the runtime's paused clock, where the run's virtual time begins.
    let ledger = {
        let _entered = runtime.enter();
        Arc::new(Ledger::new(keep.trace))
    };
    // CNPOOL_SIM_LOG=<filter> (e.g. `cnpool_controllers=debug`) prints the
    // run's logs to stderr, to follow one seed's decisions.
    // Each line starts with the run's virtual second; at debug level
    // `cnpool_sim` adds one line per reconcile, naming its replica.
    let logs = std::env::var("CNPOOL_SIM_LOG").ok().map(|filter| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_timer(VirtualSeconds(ledger.clone()))
            .with_filter(tracing_subscriber::EnvFilter::new(filter))
    });
    let subscriber = tracing_subscriber::registry().with(LineCounter(ledger.clone())).with(logs);
    let _guard = tracing::subscriber::set_default(subscriber);
    let outcome = runtime.block_on(simulate(scenario, seed, controllers, keep, ledger.clone(), observer.clone()))?;
    observer.finished(&ledger);
    Ok(outcome)
}

/// The virtual time of day: the epoch plus tokio's (paused) elapsed time.
#[derive(Clone)]
struct VirtualClock {
    start: Instant,
}

impl VirtualClock {
    fn now(&self) -> Timestamp {
        let epoch = Timestamp::from_second(EPOCH_SECONDS).unwrap_or(Timestamp::UNIX_EPOCH);
        let elapsed = Instant::now().duration_since(self.start);
        epoch.checked_add(elapsed).unwrap_or(epoch)
    }
}

impl cnpool_apiserver::Clock for VirtualClock {
    fn now(&self) -> Timestamp {
        VirtualClock::now(self)
    }
}

/// A future that completes once `stop` has been sent `true`.
fn stopped(stop: &tokio::sync::watch::Sender<bool>) -> Shared<BoxFuture<'static, ()>> {
    let mut receiver = stop.subscribe();
    async move {
        let _ = receiver.wait_for(|stop| *stop).await;
    }
    .boxed()
    .shared()
}

/// Everything the run's tasks share.
struct Sim {
    router: axum::Router,
    ledger: Arc<Ledger>,
    faults: Arc<FaultSwitch>,
    registry: MemoryRegistry,
    world: World,
    control: kube::Client,
    clock: VirtualClock,
    controllers: Controllers,
    /// Crash switches of the running operator replicas, by slot.
    replicas: Mutex<BTreeMap<usize, tokio::sync::watch::Sender<bool>>>,
    end: tokio::sync::watch::Sender<bool>,
    /// The scenario's pool (hostile steps add others).
    pool: String,
    /// Names what hostile steps create, in order.
    hostile_serial: std::sync::atomic::AtomicU32,
}

impl Sim {
    fn client(&self, actor: Actor) -> kube::Client {
        gate::client(self.router.clone(), actor, self.faults.clone(), self.ledger.clone())
    }

    fn operator_config(&self, slot: usize) -> cnpool_controllers::Config {
        let clock = self.clock.clone();
        cnpool_controllers::Config {
            namespace: Some(NAMESPACE.into()),
            instance: format!("cnpool-{slot}"),
            clock: cnpool_controllers::Clock::new(move || clock.now()),
            ..cnpool_controllers::Config::default()
        }
    }

    /// Runs operator replica `slot` until the run ends or, when `lifetime`
    /// is given, until then; a crash kills it (its memory with it) and it
    /// comes back after [`RESTART_DELAY`].
    async fn supervise(self: Arc<Self>, slot: usize, lifetime: Option<Duration>) {
        let retire_at = lifetime.map(|lifetime| Instant::now() + lifetime);
        loop {
            let (crash, _) = tokio::sync::watch::channel(false);
            let shutdown = futures::future::select(stopped(&crash), stopped(&self.end)).map(drop).boxed().shared();
            let client = self.client(Actor::Operator(slot));
            lock(&self.replicas).insert(slot, crash.clone());
            let replica = match self.controllers {
                Controllers::Cnpool => driver::run_replica(
                    client,
                    self.registry.clone(),
                    self.operator_config(slot),
                    self.ledger.clone(),
                    shutdown,
                )
                .boxed(),
                Controllers::Legacy => {
                    let config = self.operator_config(slot);
                    let (registry, ledger) = (self.registry.clone(), self.ledger.clone());
                    legacy::run_replica(client, registry, config.instance, NAMESPACE, config.clock, ledger, shutdown)
                        .boxed()
                }
            };
            match retire_at {
                Some(at) => {
                    tokio::select! {
                        () = replica => {}
                        () = tokio::time::sleep_until(at) => {
                            lock(&self.replicas).remove(&slot);
                            return;
                        }
                    }
                }
                None => replica.await,
            }
            lock(&self.replicas).remove(&slot);
            if *self.end.borrow() {
                return;
            }
            tokio::time::sleep(RESTART_DELAY).await;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn simulate(
    scenario: &Scenario,
    seed: u64,
    controllers: Controllers,
    keep: Keep,
    ledger: Arc<Ledger>,
    observer: Arc<dyn Observer>,
) -> Result<Outcome, RunError> {
    let clock = VirtualClock { start: Instant::now() };
    let server = ApiServer::builder().seed(seed).clock(Arc::new(clock.clone())).history(50_000).build();
    let mut commits = server.commits();
    let faults = Arc::new(FaultSwitch::new(scenario.faults.clone(), seed.rotate_left(17) ^ 0xfa17));
    let router = server.router();
    let control = gate::client(router.clone(), Actor::ControlPlane, faults.clone(), ledger.clone());
    install(&control, scenario).await.map_err(RunError::Setup)?;

    let registry = MemoryRegistry::new();
    let world_clock = clock.clone();
    let world = World::new(
        gate::client(router.clone(), Actor::World, faults.clone(), ledger.clone()),
        registry.clone(),
        WorldConfig {
            start_delay: scenario.world.start_delay,
            stop_delay: scenario.world.stop_delay,
            session_leave_delay: scenario.world.session_leave_delay,
            ..WorldConfig::default()
        },
    )
    .with_clock(move || world_clock.now());
    let (end, _) = tokio::sync::watch::channel(false);
    let sim = Arc::new(Sim {
        router,
        ledger: ledger.clone(),
        faults: faults.clone(),
        registry: registry.clone(),
        world: world.clone(),
        control,
        clock,
        controllers,
        replicas: Mutex::default(),
        end,
        pool: scenario.pool.name.clone(),
        hostile_serial: Default::default(),
    });

    let bounds = Bounds {
        pool: scenario.pool.name.clone(),
        max_pods: scenario.pool.max_pods,
        max_idle: scenario.pool.max_idle,
        start_delay: scenario.world.start_delay,
        store_missing_bound: sim.operator_config(0).store_missing_bound,
        owner_label: controllers.owner_label(),
    };
    let timeline = Arc::new(Mutex::new(keep.report.then(|| Timeline::new(bounds.owner_label))));
    let checker = Arc::new(Mutex::new(Checker::new(bounds, ledger.clone())));
    let lagged = Arc::new(AtomicU64::new(0));
    {
        let (checker, ledger, registry, lagged) = (checker.clone(), ledger.clone(), registry.clone(), lagged.clone());
        let timeline = timeline.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    biased;
                    commit = commits.recv() => match commit {
                        Ok(event) => {
                            trace_commit(&ledger, &event);
                            lock(&checker).commit(&event, ledger.elapsed());
                            observer.commit(&event, &ledger);
                            if let Some(timeline) = lock(&timeline).as_mut() {
                                timeline.commit(&event, ledger.elapsed());
                            }
                        }
                        Err(RecvError::Lagged(missed)) => {
                            lagged.fetch_add(missed, Ordering::Relaxed);
                        }
                        Err(RecvError::Closed) => return,
                    },
                    _ = ticks.tick() => lock(&checker).tick(ledger.elapsed(), &registry),
                }
            }
        });
    }
    tokio::spawn(world.run(stopped(&sim.end)));
    for slot in 0..scenario.operators {
        tokio::spawn(sim.clone().supervise(slot, None));
    }
    let acting = scenario.duration;
    let mut control_rng = fastrand::Rng::with_seed(seed ^ 0xc0_11_7a_01);
    let chaos_rng = fastrand::Rng::with_seed(seed ^ 0xc4_a0_5e_ed);
    tokio::spawn(chaos(sim.clone(), chaos_rng, acting));
    for step in &scenario.steps {
        tokio::time::sleep_until(clock_start(&sim) + step.at).await;
        act(&sim, &step.action, &mut control_rng).await;
    }
    tokio::time::sleep_until(clock_start(&sim) + acting).await;
    faults.stop();
    ledger.trace(format_args!("SETTLE faults off"));
    tokio::time::sleep(scenario.settle).await;
    let now = ledger.elapsed();
    let quiet_since = now.saturating_sub(QUIET_WINDOW.min(scenario.settle));
    let migrations_judged = {
        let mut checker = lock(&checker);
        checker.tick(now, &registry);
        checker.settled(now, ledger.writes_since(quiet_since), ledger.busiest_minute());
        checker.check_migrations(&ledger, now) as u64
    };
    let _ = sim.end.send(true);
    let missed = lagged.load(Ordering::Relaxed);
    if missed > 0 {
        return Err(RunError::CheckerLagged(missed));
    }
    let violations = lock(&checker).violations().to_vec();
    Ok(Outcome {
        seed,
        violations,
        faults: ledger.faults(),
        api: ledger.api(),
        reconciles: ledger.reconciles(),
        log_lines: ledger.log_lines(),
        migrations_judged,
        virtual_time: now,
        trace_digest: ledger.digest(),
        trace: ledger.take_lines(),
        report: lock(&timeline).take().map(|timeline| ReportData {
            timeline,
            reconciles: ledger.reconcile_times(),
            writes: ledger.write_times(),
        }),
    })
}

fn clock_start(sim: &Sim) -> Instant {
    sim.clock.start
}

/// The CRDs and the pool.
async fn install(client: &kube::Client, scenario: &Scenario) -> Result<(), kube::Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in cnpool_api::crd::crds() {
        crds.create(&PostParams::default(), &crd).await?;
    }
    let pool = &scenario.pool;
    let pool: CNPool = serde_json::from_value(json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNPool",
        "metadata": {"name": pool.name, "namespace": NAMESPACE},
        "spec": {
            "template": {"image": "matrixorigin/matrixone:sim", "semanticVersion": "1.2.0"},
            "podLabels": {"tier": "standard"},
            "strategy": {
                "scaleStrategy": {"maxIdle": pool.max_idle, "maxPods": pool.max_pods},
                "drainStrategy": {
                    "minDelay": format!("{}s", pool.min_delay.as_secs()),
                    "timeout": format!("{}s", pool.drain_timeout.as_secs()),
                },
            },
        },
    }))
    .map_err(kube::Error::SerdeError)?;
    Api::<CNPool>::namespaced(client.clone(), NAMESPACE).create(&PostParams::default(), &pool).await?;
    Ok(())
}

/// One trace line per committed write: what changed, in the terms the
/// invariants speak of, and a digest of the whole object.
fn trace_commit(ledger: &Ledger, event: &Event) {
    let object = &event.object;
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let kind = event.event_type.as_str();
    let plural = event.storage.plural.as_str();
    let label =
        |key: &str| object.pointer("/metadata/labels").and_then(|l| l.get(key)).and_then(Value::as_str).unwrap_or("-");
    let deleting =
        if object.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) { " deleting" } else { "" };
    match plural {
        // Event names and times come from the wall clock (kube's recorder).
        "events" => {
            let regarding = ["/regarding/name", "/involvedObject/name"]
                .into_iter()
                .find_map(|pointer| object.pointer(pointer).and_then(Value::as_str))
                .unwrap_or_default();
            let reason = object.get("reason").and_then(Value::as_str).unwrap_or_default();
            ledger.trace(format_args!("{kind} event {reason} regarding {regarding}"));
        }
        "pods" => ledger.trace(format_args!(
            "rv={} {kind} pod {name} phase={} claim-uid={} claimed-by={}{deleting} #{:016x}",
            event.resource_version,
            label(labels::PHASE),
            label(labels::CLAIM_UID),
            label(labels::CLAIMED_BY),
            object_digest(object)
        )),
        "cnclaims" => ledger.trace(format_args!(
            "rv={} {kind} claim {name} phase={} pod={}{deleting} #{:016x}",
            event.resource_version,
            object.pointer("/status/phase").and_then(Value::as_str).unwrap_or("-"),
            object.pointer("/spec/podName").and_then(Value::as_str).unwrap_or("-"),
            object_digest(object)
        )),
        _ => ledger.trace(format_args!(
            "rv={} {kind} {plural} {name} #{:016x}",
            event.resource_version,
            object_digest(object)
        )),
    }
}

fn object_digest(object: &Value) -> u64 {
    use std::hash::Hasher;
    let mut hasher = std::hash::DefaultHasher::new();
    hasher.write(object.to_string().as_bytes());
    hasher.finish()
}

/// A claim of the scenario's pool.
fn claim(name: &str, pool: &str, system: bool) -> Value {
    json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"tier": "standard"}},
            "poolName": pool,
            "cnLabels": [{"key": "account", "values": [name]}],
            "ownerName": if system { "system".to_owned() } else { format!("owner-{name}") },
        },
    })
}

/// A claim set of the scenario's pool; its members ask for what a
/// standalone claim of [`claim`] asks for.
fn claim_set(name: &str, pool: &str, replicas: u32) -> Value {
    json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNClaimSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {
                "selector": {"matchLabels": {"tier": "standard"}},
                "poolName": pool,
                "cnLabels": [{"key": "account", "values": [name]}],
            }},
        },
    })
}

/// Up to `count` of `items`, drawn without repetition.
fn pick<T: Clone>(rng: &mut fastrand::Rng, items: &[T], count: u32) -> Vec<T> {
    let mut items = items.to_vec();
    rng.shuffle(&mut items);
    items.truncate(count as usize);
    items
}

async fn pool_pods(sim: &Sim) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(sim.control.clone(), NAMESPACE);
    let listed = pods.list(&ListParams::default().labels(labels::POOL_NAME)).await;
    listed.map(|list| list.items).unwrap_or_default()
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.metadata.labels.as_ref()?.get(labels::PHASE).map(String::as_str)
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// An outside client's migrations: targets from the Idle pods it sees now,
/// written `view_age` later.
async fn migrate_claims(sim: Arc<Sim>, migrations: Migrations, mut rng: fastrand::Rng) {
    let Migrations { count, view_age, operator_chosen } = migrations;
    let claims: Api<CNClaim> = Api::namespaced(sim.control.clone(), NAMESPACE);
    let targets: Vec<String> =
        pool_pods(&sim).await.iter().filter(|pod| phase(pod) == Some("Idle")).map(name).collect();
    tokio::time::sleep(view_age).await;
    let bound: Vec<CNClaim> = claims
        .list(&ListParams::default())
        .await
        .map(|list| list.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|claim| claim.metadata.deletion_timestamp.is_none() && claim.spec.source_pod.is_none())
        .filter(|claim| claim.phase() == Some(ClaimPhase::Bound) && !claim.spec.pod_name.is_empty())
        .collect();
    for (index, claim) in pick(&mut rng, &bound, count).into_iter().enumerate() {
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        // Drawn only when asked for, so that scenarios without the share
        // keep their traces.
        let chosen = operator_chosen > 0.0 && rng.f64() < operator_chosen;
        let target = (!targets.is_empty() && !chosen).then(|| targets[index % targets.len()].clone());
        sim.ledger.trace(format_args!(
            "CONTROL migrate claim {claim_name} from {} to {}",
            claim.spec.pod_name,
            target.as_deref().unwrap_or("a pod the operator picks")
        ));
        let source = json!({"podName": claim.spec.pod_name, "nodeName": claim.spec.node_name});
        let patch = json!({"spec": {"sourcePod": source, "podName": target}});
        if let Err(error) = claims.patch(&claim_name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            tracing::debug!(%error, claim = claim_name, "control plane: migration refused");
        }
    }
}

/// The control plane's step.
async fn act(sim: &Arc<Sim>, action: &Action, rng: &mut fastrand::Rng) {
    let claims: Api<CNClaim> = Api::namespaced(sim.control.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(sim.control.clone(), NAMESPACE);
    match action {
        Action::CreateClaims { count, system } => {
            sim.ledger.trace(format_args!("CONTROL create {count} claims"));
            let existing = claims.list(&ListParams::default()).await.map(|list| list.items.len()).unwrap_or_default();
            for index in 0..*count {
                let system = index < *system;
                let name = format!("{}-{:03}", if system { "system" } else { "tenant" }, existing as u32 + index);
                let Ok(object) = serde_json::from_value::<CNClaim>(claim(&name, &sim.pool, system)) else {
                    continue;
                };
                if let Err(error) = claims.create(&PostParams::default(), &object).await {
                    tracing::debug!(%error, claim = name, "control plane: create refused");
                }
            }
        }
        Action::DeleteClaims { count } => {
            let live: Vec<String> = claims
                .list(&ListParams::default())
                .await
                .map(|list| list.items)
                .unwrap_or_default()
                .into_iter()
                .filter(|claim| claim.metadata.deletion_timestamp.is_none())
                .filter_map(|claim| claim.metadata.name)
                .collect();
            for name in pick(rng, &live, *count) {
                sim.ledger.trace(format_args!("CONTROL delete claim {name}"));
                let _ = claims.delete(&name, &DeleteParams::default()).await;
            }
        }
        Action::VanishStores { count } => {
            let bound: Vec<Pod> = pool_pods(sim).await.into_iter().filter(|pod| phase(pod) == Some("Bound")).collect();
            for pod in pick(rng, &bound, *count) {
                if let Some(uuid) = cnpool_world::store_uuid(&pod) {
                    sim.ledger.trace(format_args!("CONTROL vanish store of {}", name(&pod)));
                    sim.world.vanish_store(&uuid);
                }
            }
        }
        Action::DeleteBoundPods { count } => {
            let bound: Vec<Pod> = pool_pods(sim).await.into_iter().filter(|pod| phase(pod) == Some("Bound")).collect();
            for pod in pick(rng, &bound, *count) {
                sim.ledger.trace(format_args!("CONTROL delete bound pod {}", name(&pod)));
                let _ = pods.delete(&name(&pod), &DeleteParams::default()).await;
            }
        }
        Action::MigrateClaims(migrations) => {
            // The client acts later; the scenario goes on meanwhile.
            let rng = fastrand::Rng::with_seed(rng.u64(..));
            tokio::spawn(migrate_claims(sim.clone(), migrations.clone(), rng));
        }
        Action::ChangeTemplate(TemplateChange { image }) => {
            let pool = sim.pool.clone();
            sim.ledger.trace(format_args!("CONTROL pool {pool} template image {image}"));
            let patch = json!({"spec": {"template": {"image": image}}});
            let pools: Api<CNPool> = Api::namespaced(sim.control.clone(), NAMESPACE);
            if let Err(error) = pools.patch(&pool, &PatchParams::default(), &Patch::Merge(&patch)).await {
                tracing::debug!(%error, pool, "control plane: template change refused");
            }
        }
        Action::CreateClaimSet(ClaimSetShape { name, replicas }) => {
            sim.ledger.trace(format_args!("CONTROL create claim set {name} of {replicas}"));
            let sets: Api<CNClaimSet> = Api::namespaced(sim.control.clone(), NAMESPACE);
            let Ok(object) = serde_json::from_value::<CNClaimSet>(claim_set(name, &sim.pool, *replicas)) else {
                return;
            };
            if let Err(error) = sets.create(&PostParams::default(), &object).await {
                tracing::debug!(%error, claim_set = name, "control plane: claim set refused");
            }
        }
        Action::ScaleClaimSet(ClaimSetShape { name, replicas }) => {
            sim.ledger.trace(format_args!("CONTROL scale claim set {name} to {replicas}"));
            let sets: Api<CNClaimSet> = Api::namespaced(sim.control.clone(), NAMESPACE);
            let patch = json!({"spec": {"replicas": replicas}});
            if let Err(error) = sets.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                tracing::debug!(%error, claim_set = name, "control plane: scale refused");
            }
        }
        Action::Hostile(kind) => {
            let control = ControlPlane {
                client: sim.control.clone(),
                ledger: sim.ledger.clone(),
                namespace: NAMESPACE,
                pool: sim.pool.clone(),
            };
            let serial = sim.hostile_serial.fetch_add(1, Ordering::Relaxed);
            control.act(*kind, serial, rng).await;
        }
        Action::CrashBoundPods { count } => {
            let bound: Vec<Pod> = pool_pods(sim).await.into_iter().filter(|pod| phase(pod) == Some("Bound")).collect();
            for pod in pick(rng, &bound, *count) {
                sim.ledger.trace(format_args!("CONTROL crash bound pod {}", name(&pod)));
                let _ = sim.world.crash(NAMESPACE, &name(&pod)).await;
            }
        }
    }
}

/// Injects the node-side, registry and operator faults at their rates,
/// each second of virtual time deciding afresh, until `until`.
async fn chaos(sim: Arc<Sim>, mut rng: fastrand::Rng, until: Duration) {
    let rates = sim.faults.rates().clone();
    let start = clock_start(&sim);
    let mut extra_slot = 100;
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    while Instant::now() < start + until {
        ticks.tick().await;
        let mut fires = |per_minute: f64| per_minute > 0.0 && rng.f64() < per_minute / 60.0;
        let kinds = [
            (Fault::OperatorCrash, fires(rates.operator_crashes_per_minute)),
            (Fault::SecondReplica, fires(rates.second_replicas_per_minute)),
            (Fault::PodCrash, fires(rates.pod_crashes_per_minute)),
            (Fault::PodEviction, fires(rates.pod_evictions_per_minute)),
            (Fault::ForcedDeletion, fires(rates.forced_deletions_per_minute)),
            (Fault::StoreVanish, fires(rates.store_vanishes_per_minute)),
            (Fault::RegistryError, fires(rates.registry_errors_per_minute)),
            (Fault::SlowDrain, fires(rates.slow_drains_per_minute)),
        ];
        for (fault, fired) in kinds {
            if !fired {
                continue;
            }
            match fault {
                Fault::OperatorCrash => {
                    let running: Vec<usize> = lock(&sim.replicas).keys().copied().collect();
                    if let Some(slot) = pick(&mut rng, &running, 1).first() {
                        sim.ledger.fault(fault, Reach::EVERYTHING, format_args!("operator-{slot}"));
                        if let Some(crash) = lock(&sim.replicas).get(slot) {
                            let _ = crash.send(true);
                        }
                    }
                }
                Fault::SecondReplica => {
                    let lifetime = Duration::from_secs(rng.u64(30..=600));
                    let reach = Reach::All { lasting: lifetime };
                    sim.ledger.fault(fault, reach, format_args!("operator-{extra_slot} for {}s", lifetime.as_secs()));
                    tokio::spawn(sim.clone().supervise(extra_slot, Some(lifetime)));
                    extra_slot += 1;
                }
                Fault::RegistryError => {
                    let calls = [
                        CallKind::ListStores,
                        CallKind::PatchStore,
                        CallKind::ReplaceLabels,
                        CallKind::DeleteStore,
                        CallKind::Workload,
                    ];
                    let call = calls[rng.usize(..calls.len())];
                    let count = rng.u32(1..=3);
                    sim.ledger.fault(fault, Reach::EVERYTHING, format_args!("{} x{count}", call.call_name()));
                    let error = RegistryError::NoHaKeeper { detail: "injected".into() };
                    // Unused failures of an earlier fault expire: left queued,
                    // they would add up to one long outage at the next call.
                    sim.registry.fail_next_only(call, count, error);
                }
                _ => node_fault(&sim, fault, &mut rng).await,
            }
        }
    }
}

/// A fault on one pod, chosen among those it can hit.
async fn node_fault(sim: &Arc<Sim>, fault: Fault, rng: &mut fastrand::Rng) {
    let pods: Vec<Pod> =
        pool_pods(sim).await.into_iter().filter(|pod| pod.metadata.deletion_timestamp.is_none()).collect();
    let running = |pod: &&Pod| pod.status.as_ref().and_then(|status| status.phase.as_deref()) == Some("Running");
    let candidates: Vec<Pod> = match fault {
        Fault::SlowDrain => pods.iter().filter(|pod| phase(pod) == Some("Draining")).cloned().collect(),
        _ => pods.iter().filter(running).cloned().collect(),
    };
    let Some(pod) = pick(rng, &candidates, 1).into_iter().next() else { return };
    let pod_name = name(&pod);
    let api: Api<Pod> = Api::namespaced(sim.control.clone(), NAMESPACE);
    let store = cnpool_world::store_uuid(&pod);
    // How long a slow drain holds the pod's sessions.
    let hold = (fault == Fault::SlowDrain && store.is_some()).then(|| Duration::from_secs(rng.u64(10..=120)));
    let reach = Reach::Object { name: pod_name.clone(), lasting: hold.unwrap_or_default() };
    sim.ledger.fault(fault, reach, format_args!("pod {pod_name}"));
    match fault {
        Fault::PodCrash => {
            let _ = sim.world.crash(NAMESPACE, &pod_name).await;
        }
        Fault::PodEviction => {
            let _ = api.delete(&pod_name, &DeleteParams::default()).await;
        }
        Fault::ForcedDeletion => {
            let _ = api.delete(&pod_name, &DeleteParams::default().grace_period(0)).await;
        }
        Fault::StoreVanish => {
            if let Some(uuid) = store {
                sim.world.vanish_store(&uuid);
            }
        }
        Fault::SlowDrain => {
            if let (Some(uuid), Some(hold)) = (store, hold) {
                sim.registry.set_workload(&uuid, Workload { sessions: 1, ..Workload::default() });
                let registry = sim.registry.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(hold).await;
                    registry.set_workload(&uuid, Workload::default());
                });
            }
        }
        _ => {}
    }
}
