//! One exhaustive check and its report: what was explored, at what cost,
//! and each violated property with the shortest path to it as a trace.

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use serde::Serialize;
use stateright::{Checker, HasDiscoveries, Model};

use crate::configs::Config;
use crate::model::{CheckModel, State, Symmetry, actor, exclusive};
use crate::{Error, Variant};

/// What a check found.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub config: String,
    pub variant: Option<String>,
    /// States generated (with repeats) and distinct states, in the
    /// exploration (not in the runs that shorten a variant's path).
    pub states: usize,
    pub unique_states: usize,
    pub max_depth: usize,
    pub seconds: f64,
    /// Whether every reachable state was explored (not stopped by the
    /// timeout, nor by a variant's first violation).
    pub exhaustive: bool,
    /// The process's peak resident memory (VmHWM), when the OS tells it.
    pub peak_memory_kib: Option<u64>,
    pub violations: Vec<Violation>,
}

/// A property that does not hold, with the path that shows it.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    pub property: String,
    pub detail: String,
    /// Actions from the initial state to the violating state.
    pub actions: usize,
    /// One line per action, as `cnpool sim --trace` writes: time (the
    /// step), actor, what happened to which object.
    pub trace: Vec<String>,
}

/// How a check runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Breadth-first worker threads.
    pub threads: usize,
    /// Stop after this long (the report then says the space was not
    /// explored to the end).
    pub timeout: Option<Duration>,
    /// Print the counts to stderr every ten seconds.
    pub progress: bool,
    /// Reduce states by the model's symmetries (replicas; two
    /// interchangeable claims). Off only to check the reduction itself.
    pub symmetry: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self { threads: 2, timeout: None, progress: false, symmetry: true }
    }
}

/// A path from the initial state to a violating one, as the checker gives
/// it: each state with the action taken from it.
type Path = Vec<(State, Option<crate::model::Action>)>;

/// Explores every state of `config` reachable under `variant` (or the
/// correct protocol) breadth first. A variant's check stops at its first
/// violation, then finds the shortest path to each property it violates.
pub fn check(config: Config, variant: Option<Variant>, options: &Options) -> Result<Report, Error> {
    let started = Instant::now();
    let checker = explore(&config, variant, options, None, started);
    let exhaustive = checker.discoveries().is_empty() || variant.is_none();
    let exhaustive = exhaustive && options.timeout.is_none_or(|timeout| started.elapsed() < timeout);
    let model = checker.model();
    let mut paths: Vec<(&'static str, Path)> = model
        .properties()
        .iter()
        .filter_map(|property| Some((property.name, checker.discovery(property.name)?.into_vec())))
        .collect();
    if variant.is_some() {
        shorten(&config, variant, options, started, &mut paths);
    }
    let violations = paths.into_iter().map(|(property, path)| explain(model, property, path)).collect();
    let seconds = started.elapsed().as_secs_f64();
    Ok(Report {
        config: config.name.to_owned(),
        variant: variant.map(|variant| variant.name().to_owned()),
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        seconds,
        exhaustive,
        peak_memory_kib: peak_memory_kib(),
        violations,
    })
}

/// One breadth-first run, paths of fewer than `depth` states only when
/// given, until done or `options.timeout` after `started`.
fn explore(
    config: &Config,
    variant: Option<Variant>,
    options: &Options,
    depth: Option<NonZeroUsize>,
    started: Instant,
) -> impl Checker<CheckModel> {
    let model = CheckModel::new(config.clone(), variant, options.symmetry);
    let mut builder = model.checker().threads(options.threads.max(1));
    if let Some(timeout) = options.timeout {
        builder = builder.timeout(timeout.saturating_sub(started.elapsed()));
    }
    if let Some(depth) = depth {
        builder = builder.target_max_depth(depth.get());
    }
    // A variant's check stops at its first violation; the protocol's
    // explores every state even after one, so that its counts are whole.
    builder = builder.finish_when(match variant {
        Some(_) => HasDiscoveries::AnyFailures,
        None => HasDiscoveries::AllFailures,
    });
    let checker = builder.spawn_bfs();
    // Polled only to print progress: a variant's shortest path takes many
    // short runs, each of which a poll's sleep would lengthen.
    while options.progress && !checker.is_done() {
        std::thread::sleep(Duration::from_millis(200));
        if started.elapsed().as_millis() % 10_000 < 200 {
            eprintln!(
                "{:>6.0} s: {} states, {} unique, depth {}",
                started.elapsed().as_secs_f64(),
                checker.state_count(),
                checker.unique_state_count(),
                checker.max_depth()
            );
        }
    }
    checker.join()
}

/// Makes each path the shortest to its property. stateright's breadth-first
/// checker records, per property, the last violating state of a block of
/// states (1,500 per thread), not the first, so the path it reports can be
/// much longer than the shortest (`unguarded-acquire` on `race`: 9 actions
/// reported, 2 the shortest). Runs bounded in depth say whether a violation lies within a bound;
/// the least bound that holds one is found by bisection, and its path is
/// the shortest (with one thread; with more, the breadth-first order is
/// nearly exact, and so is the length). Shortest in the reduced space is
/// shortest: a path and its representatives' path are as long. Stops at the
/// timeout, keeping the shortest path found so far.
fn shorten(
    config: &Config,
    variant: Option<Variant>,
    options: &Options,
    started: Instant,
    paths: &mut [(&'static str, Path)],
) {
    for (property, path) in paths.iter_mut() {
        // A run bounded by `depth` explores the states of paths of fewer
        // than `depth` states: none under 1, the path known under `found`.
        let (mut empty, mut found) = (1, path.len() + 1);
        while found - empty > 1 && options.timeout.is_none_or(|timeout| started.elapsed() < timeout) {
            let depth = (empty + found) / 2;
            let bounded = explore(config, variant, options, NonZeroUsize::new(depth), started);
            match bounded.discovery(property) {
                Some(shorter) => {
                    *path = shorter.into_vec();
                    found = depth;
                }
                None => empty = depth,
            }
        }
    }
}

/// Replays `path` to write its trace and say what is wrong at its end.
fn explain(model: &CheckModel, property: &str, path: Vec<(State, Option<crate::model::Action>)>) -> Violation {
    crate::reconcile::traced(|| explain_traced(model, property, path))
}

fn explain_traced(model: &CheckModel, property: &str, path: Vec<(State, Option<crate::model::Action>)>) -> Violation {
    // The path's states are representatives, whose replicas are sorted
    // (and claims perhaps swapped) anew after each step: the trace replays
    // it on states that keep each replica's number and each claim's name,
    // so that "replica-1" is one replica and `c0` one claim throughout.
    let mut trace = Vec::new();
    let mut last = None;
    let mut actual = path.first().map(|(state, _)| state.clone());
    let replicas = actual.as_ref().map_or(0, |state| state.replicas.len());
    let mut symmetry = Symmetry { replicas: (0..replicas).collect(), claims_swapped: false };
    for (step, (state, action)) in path.iter().enumerate() {
        match (action, actual.take()) {
            (Some(action), Some(current)) => {
                let action = model.renumbered(action, &symmetry);
                let (next, note) = model.step(&current, &action);
                trace.push(format!("{:>10} {} {note}", step + 1, actor(&action)));
                symmetry = model.representative(&next).1;
                actual = Some(next);
            }
            _ => last = Some(state),
        }
    }
    let actions = trace.len();
    let detail = match last {
        None => String::new(),
        Some(state) => {
            if let Some((_, detail)) = &state.broken {
                detail.clone()
            } else if let Some(detail) = exclusive(state) {
                detail
            } else {
                match model.recovers(state) {
                    Ok(()) => String::new(),
                    Err((problem, lines)) => {
                        trace.push(format!("{:>10} FAIR RUN from here (faults off):", actions));
                        trace.extend(lines.into_iter().map(|line| format!("{:>10} {line}", "")));
                        problem
                    }
                }
            }
        }
    };
    Violation { property: property.to_owned(), detail, actions, trace }
}

/// VmHWM from /proc/self/status, in KiB.
fn peak_memory_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

impl Report {
    /// The report as a person reads it.
    pub fn render(&self) -> String {
        let mut text = format!(
            "config {}{}: {} states explored, {} unique, max depth {}, {:.1} s, peak memory {}{}\n",
            self.config,
            self.variant.as_deref().map(|variant| format!(" (variant {variant})")).unwrap_or_default(),
            self.states,
            self.unique_states,
            self.max_depth,
            self.seconds,
            self.peak_memory_kib.map_or("unknown".to_owned(), |kib| format!("{} MiB", kib / 1024)),
            if self.exhaustive { "" } else { " (NOT exhaustive: stopped early)" },
        );
        text.push_str(&format!("{} violations\n", self.violations.len()));
        for violation in &self.violations {
            text.push_str(&format!(
                "VIOLATION {}: {}\n# shortest path: {} actions\n",
                violation.property, violation.detail, violation.actions
            ));
            for line in &violation.trace {
                text.push_str(line);
                text.push('\n');
            }
        }
        text
    }
}
