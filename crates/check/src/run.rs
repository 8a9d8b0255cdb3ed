//! One exhaustive check and its report: what was explored, at what cost,
//! and each violated property with the shortest path to it as a trace.

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
    /// States generated (with repeats) and distinct states.
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

/// Explores every state of `config` reachable under `variant` (or the
/// correct protocol) breadth first. A variant's check stops at its first
/// violation.
pub fn check(config: Config, variant: Option<Variant>, options: &Options) -> Result<Report, Error> {
    let name = config.name.to_owned();
    let started = Instant::now();
    let mut builder = CheckModel::new(config, variant, options.symmetry).checker().threads(options.threads.max(1));
    if let Some(timeout) = options.timeout {
        builder = builder.timeout(timeout);
    }
    // A variant's check stops at its first violation; the protocol's
    // explores every state even after one, so that its counts are whole.
    builder = builder.finish_when(match variant {
        Some(_) => HasDiscoveries::AnyFailures,
        None => HasDiscoveries::AllFailures,
    });
    let checker = builder.spawn_bfs();
    while !checker.is_done() {
        std::thread::sleep(Duration::from_millis(200));
        if options.progress && started.elapsed().as_millis() % 10_000 < 200 {
            eprintln!(
                "{:>6.0} s: {} states, {} unique, depth {}",
                started.elapsed().as_secs_f64(),
                checker.state_count(),
                checker.unique_state_count(),
                checker.max_depth()
            );
        }
    }
    let checker = checker.join();
    let seconds = started.elapsed().as_secs_f64();
    let exhaustive = checker.discoveries().is_empty() || variant.is_none();
    let exhaustive = exhaustive && options.timeout.is_none_or(|timeout| started.elapsed() < timeout);
    let model = checker.model();
    let mut violations = Vec::new();
    for property in model.properties() {
        if let Some(path) = checker.discovery(property.name) {
            violations.push(explain(model, property.name, path.into_vec()));
        }
    }
    Ok(Report {
        config: name,
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
