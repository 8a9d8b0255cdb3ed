//! B1 (burst bind), B3 (steady state) and B4 (migration cost): the
//! simulator runs cnpool's production reconcile functions, and the model of
//! the Go operator beside them, against the embedded API server in this
//! process, on tokio's paused clock, one seed, no faults. The sim's ledger
//! counts the operator's traffic; [`observe`]'s observers mark the moments
//! each case measures between.
//!
//! Each entry point runs the simulator on a thread of its own: a run builds
//! its own current-thread runtime.

mod observe;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use cnpool_sim::checker::Invariant;
use cnpool_sim::scenario::{Action, FaultRates, Migrations, PoolShape, Step, WorldShape};
use cnpool_sim::{Controllers, Keep, Observer, Outcome, Scenario};
use serde_json::{Value, json};

use self::observe::{Burst, Migration};
use super::Table;
use super::runtime::RuntimeBurst;

/// Both controllers, in the order of the table's columns.
const CONTROLLERS: [Controllers; 2] = [Controllers::Cnpool, Controllers::Legacy];
const COLUMNS: [&str; 5] = ["measure", "cnpool", "legacy", "target", "met"];
/// How long the pool has to start its Idle pods before the claims come.
const WARM_UP: Duration = Duration::from_secs(120);
/// How long the control plane waits after the burst before the run settles.
const BIND_WINDOW: Duration = Duration::from_secs(300);
/// B3's quiet span begins this long after the burst, once the claims' own
/// follow-up (store labels, their first resync) is behind them.
const CONVERGE: Duration = Duration::from_secs(10 * 60);
/// B3's quiet span.
const HOUR: Duration = Duration::from_secs(3600);
/// When B4's claim, bound since the start, is migrated: once the pool has
/// an Idle pod again for the control plane to name as the target (the
/// legacy model's own pick is the source itself, which never ends).
const MIGRATE_AT: Duration = Duration::from_secs(120);

#[derive(Clone, clap::Args)]
pub struct BurstArgs {
    /// Claims created at once, onto as many warm Idle pods.
    #[arg(long, default_value_t = 1_000, value_parser = crate::bench::at_least_one::<u32>)]
    claims: u32,
    /// The simulator's seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Clone, clap::Args)]
pub struct ScalingArgs {
    /// Burst sizes, comma-separated: each is B1's burst of that many claims
    /// onto as many warm Idle pods.
    #[arg(long, value_delimiter = ',', default_values_t = [1_000, 10_000], value_parser = crate::bench::at_least_one::<u32>)]
    claims: Vec<u32>,
    /// The simulator's seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Clone, clap::Args)]
pub struct SteadyArgs {
    /// Bound claims through the quiet hour.
    #[arg(long, default_value_t = 1_000, value_parser = crate::bench::at_least_one::<u32>)]
    claims: u32,
    /// The simulator's seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Clone, clap::Args)]
pub struct MigrationArgs {
    /// How long the source's CN keeps its sessions once asked to drain.
    #[arg(long, default_value_t = 60)]
    drain_seconds: u64,
    /// The simulator's seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// B1: claims created at once onto as many warm Idle pods, on the
/// operator's runtime and in the simulator.
pub async fn burst(args: &BurstArgs) -> anyhow::Result<Table> {
    let on_runtime = super::runtime::burst(args.claims as usize).await?;
    let args = args.clone();
    on_own_thread(move || burst_case(&args, &on_runtime)).await
}

/// How a bind's cost grows with the burst: B1's burst at each size, on the
/// operator's runtime (cnpool) and in the simulator (cnpool and the legacy
/// model), and the largest size's CPU per bind over the smallest's.
pub async fn scaling(args: &ScalingArgs) -> anyhow::Result<Table> {
    let mut sizes = args.claims.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let (Some(&smallest), Some(&largest)) = (sizes.first(), sizes.last()) else {
        anyhow::bail!("--claims needs at least one burst size, e.g. --claims 1000,10000");
    };
    let mut runs = Vec::new();
    for &claims in &sizes {
        let on_runtime = super::runtime::burst(claims as usize).await?;
        let seed = args.seed;
        let spans = on_own_thread(move || {
            let scenario = burst_scenario(claims, Duration::from_secs(60));
            let mut spans = Vec::new();
            for controllers in CONTROLLERS {
                let observer = Arc::new(Burst::new(claims as usize));
                let outcome = run(&scenario, seed, controllers, observer.clone())?;
                spans.push((observer.span(), violations(&outcome)));
            }
            Ok(spans)
        })
        .await?;
        runs.push((claims, on_runtime, spans));
    }
    let mut table = Table::new("scaling", "B1 at each burst size: the cost of a bind as the burst grows", &COLUMNS);
    let two = |value: f64| json!((value * 100.0).round() / 100.0);
    let runtime_cpu = |run: &RuntimeBurst| run.per_bind(run.cpu.as_secs_f64() * 1_000.0);
    let sim_ms = |spans: &[(observe::BurstSpan, String)], at: usize| spans[at].0.wall_millis_per_bind();
    for (claims, on_runtime, spans) in &runs {
        let sim = [0, 1].map(|at| sim_ms(spans, at).map_or(Value::Null, two));
        measure(
            &mut table,
            &format!("{claims}: runtime CPU ms/bind (whole process)"),
            [two(runtime_cpu(on_runtime)), Value::Null],
            None,
        );
        measure(
            &mut table,
            &format!("{claims}: runtime binds/s (wall)"),
            [two(on_runtime.binds_per_second()), Value::Null],
            None,
        );
        measure(
            &mut table,
            &format!("{claims}: runtime created → Bound p99, s"),
            [two(on_runtime.latency(0.99)), Value::Null],
            None,
        );
        measure(&mut table, &format!("{claims}: sim ms/bind (one thread, checker on)"), sim, None);
        table.note(format!(
            "{claims}: invariants the checker saw broken: cnpool {}; legacy {}; runtime span {:.2} s, {} workers",
            spans[0].1,
            spans[1].1,
            on_runtime.elapsed.as_secs_f64(),
            on_runtime.workers
        ));
    }
    if let (Some((_, first, first_spans)), Some((_, last, last_spans))) = (runs.first(), runs.last()) {
        let growth = |from: Option<f64>, to: Option<f64>| match (from, to) {
            (Some(from), Some(to)) if from > 0.0 => two(to / from),
            _ => Value::Null,
        };
        measure(
            &mut table,
            &format!("runtime CPU per bind, {largest} ÷ {smallest}"),
            [growth(Some(runtime_cpu(first)), Some(runtime_cpu(last))), Value::Null],
            Some(Target::AtMost(1.3)),
        );
        let sim = [0, 1].map(|at| growth(sim_ms(first_spans, at), sim_ms(last_spans, at)));
        measure(&mut table, &format!("sim ms per bind, {largest} ÷ {smallest}"), sim, None);
    }
    table.note(
        "runtime: the operator's kube-runtime controllers at their defaults against the embedded API server in this \
         process, with the simulated node side; its CPU is the whole process's (operator, server, node side, the \
         client creating the claims), read from /proc/self/stat around the burst",
    );
    table.note(format!(
        "sim: seed {}, one thread, virtual time paused, so ms/bind is the CPU of everything the sim runs; the \
         legacy model is the Go operator's algorithm, which lists the pool's Idle pods and every claim of the namespace for each bind (from its cache)",
        args.seed
    ));
    Ok(table)
}

/// B3: Bound claims through a virtual hour with nothing changing.
pub async fn steady(args: &SteadyArgs) -> anyhow::Result<Table> {
    let args = args.clone();
    on_own_thread(move || steady_case(&args)).await
}

/// B4: one migration with a drain.
pub async fn migration(args: &MigrationArgs) -> anyhow::Result<Table> {
    let args = args.clone();
    on_own_thread(move || migration_case(&args)).await
}

async fn on_own_thread<T: Send + 'static>(
    case: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(case).await.context("a benchmark case panicked")?
}

/// A target a figure of cnpool's is held to.
#[derive(Clone, Copy)]
enum Target {
    AtLeast(f64),
    AtMost(f64),
}

impl Target {
    fn text(self) -> String {
        match self {
            Target::AtLeast(bound) => format!("≥ {bound}"),
            Target::AtMost(bound) => format!("≤ {bound}"),
        }
    }

    fn met(self, value: f64) -> bool {
        match self {
            Target::AtLeast(bound) => value >= bound,
            Target::AtMost(bound) => value <= bound,
        }
    }
}

/// A row: cnpool's figure and the legacy model's, and whether cnpool's
/// meets `target`.
fn measure(table: &mut Table, what: &str, figures: [Value; 2], target: Option<Target>) {
    let [cnpool, legacy] = figures;
    let met = target.map(|target| cnpool.as_f64().is_some_and(|value| target.met(value)));
    if let (Some(target), Some(met)) = (target, met) {
        table.check(what, cnpool.clone(), target.text(), met);
    }
    let target = target.map_or(Value::Null, |target| json!(target.text()));
    let met = met.map_or(Value::Null, |met| json!(if met { "yes" } else { "no" }));
    table.row(vec![json!(what), cnpool, legacy, target, met]);
}

/// `count` per `per`, rounded to two decimals (`null` without a `per`).
fn ratio(count: f64, per: f64) -> Value {
    if per > 0.0 { json!((count / per * 100.0).round() / 100.0) } else { Value::Null }
}

fn no_faults(name: String, pool: PoolShape, world: WorldShape, acting: Duration, settle: Duration) -> Scenario {
    Scenario {
        name,
        duration: acting,
        settle,
        pool,
        world,
        operators: 1,
        faults: FaultRates::default(),
        steps: Vec::new(),
    }
}

/// `claims` warm Idle pods (maxIdle = maxPods = claims: cnpool starts no
/// pod for the burst), then `claims` claims at once; the control plane
/// acts for [`BIND_WINDOW`] after them.
fn burst_scenario(claims: u32, settle: Duration) -> Scenario {
    let pool = PoolShape {
        name: "bench".into(),
        max_idle: claims,
        max_pods: claims,
        drain_timeout: Duration::from_secs(300),
        min_delay: Duration::from_secs(10),
    };
    let mut scenario = no_faults(format!("burst-{claims}"), pool, WorldShape::default(), WARM_UP + BIND_WINDOW, settle);
    scenario.steps.push(Step { at: WARM_UP, action: Action::CreateClaims { count: claims, system: 0 } });
    scenario
}

/// Runs `scenario` with `observer` watching.
fn run(
    scenario: &Scenario,
    seed: u64,
    controllers: Controllers,
    observer: Arc<dyn Observer>,
) -> anyhow::Result<Outcome> {
    cnpool_sim::run_observed(scenario, seed, controllers, Keep::default(), observer)
        .with_context(|| format!("simulating {} with the {} controllers", scenario.name, controllers.name()))
}

/// The invariants a run broke, e.g. "I5 ×2, I6 ×1509".
fn violations(outcome: &Outcome) -> String {
    let counts: Vec<String> = Invariant::ALL
        .into_iter()
        .filter_map(|invariant| {
            let count = outcome.violations.iter().filter(|violation| violation.invariant == invariant).count();
            (count > 0).then(|| format!("{invariant:?} ×{count}"))
        })
        .collect();
    if counts.is_empty() { "none".to_owned() } else { counts.join(", ") }
}

fn violation_note(table: &mut Table, outcomes: &[Outcome]) {
    let broken: Vec<String> = CONTROLLERS
        .iter()
        .zip(outcomes)
        .map(|(controllers, outcome)| format!("{} {}", controllers.name(), violations(outcome)))
        .collect();
    table.note(format!("invariants the checker saw broken: {}", broken.join("; ")));
}

fn burst_case(args: &BurstArgs, on_runtime: &RuntimeBurst) -> anyhow::Result<Table> {
    let claims = args.claims;
    let scenario = burst_scenario(claims, Duration::from_secs(60));
    let mut outcomes = Vec::new();
    let mut bursts = Vec::new();
    for controllers in CONTROLLERS {
        let observer = Arc::new(Burst::new(claims as usize));
        outcomes.push(run(&scenario, args.seed, controllers, observer.clone())?);
        bursts.push(observer.span());
    }
    let mut table = Table::new(
        "burst",
        &format!("B1 burst bind: {claims} claims at once onto {claims} warm Idle pods, in-process"),
        &COLUMNS,
    );
    let figure = |what: &dyn Fn(&observe::BurstSpan) -> Value| [what(&bursts[0]), what(&bursts[1])];
    let per_bind = |count: &dyn Fn(&observe::BurstSpan) -> u64| {
        figure(&|span| if span.complete() { ratio(count(span) as f64, span.bound as f64) } else { Value::Null })
    };
    let runtime = |value: f64| [json!((value * 100.0).round() / 100.0), Value::Null];
    let workers = on_runtime.workers;
    measure(
        &mut table,
        "runtime: binds/s (wall)",
        runtime(on_runtime.binds_per_second()),
        Some(Target::AtLeast(2_000.0)),
    );
    measure(&mut table, "runtime: created → Bound p50, s", runtime(on_runtime.latency(0.5)), None);
    measure(&mut table, "runtime: created → Bound p99, s", runtime(on_runtime.latency(0.99)), None);
    let cpu_ms = on_runtime.cpu.as_secs_f64() * 1_000.0;
    measure(&mut table, "runtime: CPU ms/bind (whole process)", runtime(on_runtime.per_bind(cpu_ms)), None);
    measure(&mut table, "runtime: API requests/bind", runtime(on_runtime.per_bind(on_runtime.requests)), None);
    let writes = on_runtime.writes - on_runtime.event_writes;
    measure(&mut table, "runtime: writes/bind (Events excluded)", runtime(on_runtime.per_bind(writes)), None);
    measure(&mut table, "sim: Idle pods when the claims came", figure(&|span| json!(span.idle_at_start)), None);
    measure(
        &mut table,
        "sim: claims Bound",
        figure(&|span| json!(span.bound)),
        Some(Target::AtLeast(f64::from(claims))),
    );
    measure(&mut table, "sim: wall ms, first claim created → all Bound", figure(&|span| span.wall_millis()), None);
    measure(&mut table, "sim: virtual s, same span", figure(&|span| span.virtual_seconds()), None);
    measure(&mut table, "sim: binds/s (wall, one thread)", figure(&|span| span.binds_per_second()), None);
    measure(&mut table, "sim: API requests/bind", per_bind(&|span| span.api.requests), None);
    measure(
        &mut table,
        "sim: writes/bind (DESIGN §3, Events excluded)",
        per_bind(&|span| span.api.writes),
        Some(Target::AtMost(3.0)),
    );
    measure(&mut table, "sim: Event writes/bind", per_bind(&|span| span.api.event_writes), None);
    measure(&mut table, "sim: request bytes/bind", per_bind(&|span| span.api.request_bytes), None);
    measure(&mut table, "sim: response bytes/bind (watches included)", per_bind(&|span| span.api.response_bytes), None);
    measure(&mut table, "sim: conflicts/bind (409, 422)", per_bind(&|span| span.api.conflicts), None);
    measure(&mut table, "sim: reconciles/bind", per_bind(&|span| span.reconciles), None);
    measure(&mut table, "sim: log lines/bind", per_bind(&|span| span.log_lines), None);
    let requests_per_bind = |span: &observe::BurstSpan| {
        span.complete().then(|| span.api.requests as f64 / span.bound as f64).filter(|per_bind| *per_bind > 0.0)
    };
    let legacy_to_cnpool = match (requests_per_bind(&bursts[0]), requests_per_bind(&bursts[1])) {
        (Some(cnpool), Some(legacy)) => ratio(legacy, cnpool),
        _ => Value::Null,
    };
    measure(
        &mut table,
        "sim: legacy ÷ cnpool API requests/bind",
        [legacy_to_cnpool, Value::Null],
        Some(Target::AtLeast(10.0)),
    );
    table.note(format!(
        "runtime: the operator's kube-runtime controllers ({workers} workers) on this process's tokio runtime, \
         against the embedded API server in-process and the simulated node side; {claims} claims created at once; \
         the span runs from the first create sent to the last claim seen Bound by a watch; {:.2} s",
        on_runtime.elapsed.as_secs_f64()
    ));
    table.note(format!(
        "sim: one seed ({}), no faults, one operator replica; the span runs from the first claim's commit to the \
         commit that made the last one Bound; wall = real time of that span on the sim's one thread, virtual time \
         paused (waits cost nothing), so its binds/s is the CPU cost of the operator, the embedded API server, the \
         world, the control plane and the sim's checker together",
        args.seed
    ));
    table.note(
        "requests, writes, bytes and conflicts are the operator's (the gate counts them); writes as DESIGN §3 counts \
         them, Events apart",
    );
    violation_note(&mut table, &outcomes);
    Ok(table)
}

fn steady_case(args: &SteadyArgs) -> anyhow::Result<Table> {
    let claims = args.claims;
    let mut scenario = burst_scenario(claims, HOUR);
    scenario.duration = WARM_UP + CONVERGE;
    let hour = scenario.duration..scenario.duration + HOUR;
    let resync = cnpool_controllers::Config::default().resync;
    let periods = HOUR.as_secs_f64() / resync.as_secs_f64();
    let mut rows = Vec::new();
    let mut outcomes = Vec::new();
    for controllers in CONTROLLERS {
        let observer = Arc::new(Burst::new(claims as usize));
        let quiet = Arc::new(observe::Quiet::new(hour.clone()));
        let both: Arc<dyn Observer> = Arc::new(observe::Both(observer.clone(), quiet.clone()));
        outcomes.push(run(&scenario, args.seed, controllers, both)?);
        let span = observer.span();
        let bound_before = if span.complete() && span.end_at() < hour.start { span.bound } else { 0 };
        rows.push((bound_before, quiet.figures()));
    }
    let mut table = Table::new(
        "steady",
        &format!("B3 steady state: {claims} Bound claims, one virtual hour with nothing changing"),
        &COLUMNS,
    );
    let figure = |what: &dyn Fn(&(usize, observe::QuietFigures)) -> Value| [what(&rows[0]), what(&rows[1])];
    measure(&mut table, "claims Bound when the hour began", figure(&|(bound, _)| json!(bound)), None);
    let writes = figure(&|(_, hour)| json!(hour.writes));
    measure(&mut table, "writes in the hour (Events excluded)", writes, Some(Target::AtMost(0.0)));
    measure(&mut table, "objects (claims, pods, pool)", figure(&|(_, hour)| json!(hour.objects)), None);
    measure(&mut table, "reconciles in the hour", figure(&|(_, hour)| json!(hour.reconciles)), None);
    measure(
        &mut table,
        "reconciles per object, mean",
        figure(&|(_, hour)| ratio(hour.reconciles as f64, hour.objects as f64)),
        None,
    );
    for kind in ["CNClaim", "Pod", "CNPool"] {
        let most = |(_, hour): &(usize, observe::QuietFigures)| {
            hour.most_reconciled.get(kind).map_or(Value::Null, |most| ratio(*most as f64, periods))
        };
        let what = format!("most reconciles of one {kind} per resync period ({} s)", resync.as_secs());
        measure(&mut table, &what, figure(&most), Some(Target::AtMost(1.0)));
    }
    measure(&mut table, "log lines in the hour", figure(&|(_, hour)| json!(hour.log_lines)), None);
    table.note(format!(
        "one seed ({}), no faults; the claims come at {} s onto warm Idle pods, the hour runs from {} s to {} s of \
         virtual time",
        args.seed,
        WARM_UP.as_secs(),
        hour.start.as_secs(),
        hour.end.as_secs()
    ));
    table.note(format!(
        "the resync period is cnpool's default ({} s), the yardstick for both columns",
        resync.as_secs()
    ));
    violation_note(&mut table, &outcomes);
    Ok(table)
}

fn migration_case(args: &MigrationArgs) -> anyhow::Result<Table> {
    let drain = Duration::from_secs(args.drain_seconds);
    let pool = PoolShape {
        name: "bench".into(),
        max_idle: 1,
        max_pods: 4,
        // Longer than the drain, so that the source goes back to Idle.
        drain_timeout: drain + Duration::from_secs(240),
        min_delay: Duration::from_secs(1),
    };
    let world = WorldShape { session_leave_delay: drain, ..WorldShape::default() };
    let acting = MIGRATE_AT + drain + Duration::from_secs(120);
    let mut scenario = no_faults("migration".into(), pool, world, acting, Duration::from_secs(60));
    scenario.steps.push(Step { at: Duration::ZERO, action: Action::CreateClaims { count: 1, system: 0 } });
    let migration = Migrations { count: 1, view_age: Duration::ZERO, operator_chosen: 0.0 };
    scenario.steps.push(Step { at: MIGRATE_AT, action: Action::MigrateClaims(migration) });
    let mut costs = Vec::new();
    let mut outcomes = Vec::new();
    for controllers in CONTROLLERS {
        let observer = Arc::new(Migration::new(controllers.owner_label()));
        outcomes.push(run(&scenario, args.seed, controllers, observer.clone())?);
        costs.push(observer.cost());
    }
    let mut table = Table::new(
        "migration",
        &format!("B4 migration cost: one migration with a {} s drain, of its claim", drain.as_secs()),
        &COLUMNS,
    );
    let figure = |what: &dyn Fn(&observe::MigrationCost) -> Value| {
        [&costs[0], &costs[1]].map(|cost| if cost.done.is_some() { what(cost) } else { Value::Null })
    };
    measure(&mut table, "virtual s, migration start → done", figure(&|cost| cost.seconds()), None);
    measure(&mut table, "reconciles of the claim", figure(&|cost| json!(cost.reconciles)), Some(Target::AtMost(20.0)));
    measure(&mut table, "writes of the claim", figure(&|cost| json!(cost.writes)), Some(Target::AtMost(10.0)));
    measure(&mut table, "log lines of the claim", figure(&|cost| json!(cost.log_lines)), Some(Target::AtMost(10.0)));
    table.note(format!(
        "one seed ({}), no faults; the claim, Bound since the start, is migrated at {} s to an Idle pod the control \
         plane names; done = the claim Bound to its target with no sourcePod, and the source back to Idle with no \
         owner; the figures count up to 1 s after done",
        args.seed,
        MIGRATE_AT.as_secs()
    ));
    table.note(
        "writes of the claim, as crates/controllers/tests/migration.rs counts them: commits of the claim (but the \
         one that started the migration) and changes of a pod's owner to or from it",
    );
    table.note("the operator runs with its production defaults (drain poll 2 s to 20 s, resync 300 s)");
    violation_note(&mut table, &outcomes);
    Ok(table)
}
