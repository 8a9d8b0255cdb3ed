//! Many seeds added up: what the one-screen summary and `--json` show.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::checker::{Invariant, Violation};
use crate::ledger::Fault;
use crate::run::{Controllers, Outcome};

/// The first seed that broke an invariant, and how to run it again.
#[derive(Clone, Debug, Serialize)]
pub struct FirstFailure {
    pub seed: u64,
    pub replay: String,
    /// Its first violations (at most ten).
    pub violations: Vec<Violation>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub scenario: String,
    /// Whose controllers ran.
    pub controller: Controllers,
    pub seeds: u64,
    pub failing_seeds: u64,
    /// Violations by invariant, over all seeds (every invariant listed).
    pub violations: BTreeMap<Invariant, u64>,
    /// Faults injected by kind, over all seeds (every kind listed).
    pub faults: BTreeMap<Fault, u64>,
    pub reconciles: u64,
    pub api_requests: u64,
    pub api_writes: u64,
    pub event_writes: u64,
    pub conflicts: u64,
    pub log_lines: u64,
    /// Migrations whose cost I5 judged (see [`Outcome::migrations_judged`]).
    pub migrations_judged: u64,
    pub virtual_seconds: f64,
    pub wall_seconds: f64,
    pub seeds_per_minute: f64,
    pub first_failure: Option<FirstFailure>,
}

impl Summary {
    pub fn new(scenario: &str, controller: Controllers) -> Self {
        Self {
            scenario: scenario.to_owned(),
            controller,
            seeds: 0,
            failing_seeds: 0,
            violations: Invariant::ALL.into_iter().map(|invariant| (invariant, 0)).collect(),
            faults: Fault::ALL.into_iter().map(|fault| (fault, 0)).collect(),
            reconciles: 0,
            api_requests: 0,
            api_writes: 0,
            event_writes: 0,
            conflicts: 0,
            log_lines: 0,
            migrations_judged: 0,
            virtual_seconds: 0.0,
            wall_seconds: 0.0,
            seeds_per_minute: 0.0,
            first_failure: None,
        }
    }

    /// Adds one seed's outcome; `replay` is the command that runs it alone.
    pub fn add(&mut self, outcome: &Outcome, replay: impl FnOnce() -> String) {
        self.seeds += 1;
        for violation in &outcome.violations {
            *self.violations.entry(violation.invariant).or_default() += 1;
        }
        for (fault, count) in &outcome.faults {
            *self.faults.entry(*fault).or_default() += count;
        }
        self.reconciles += outcome.reconciles;
        self.api_requests += outcome.api.requests;
        self.api_writes += outcome.api.writes;
        self.event_writes += outcome.api.event_writes;
        self.conflicts += outcome.api.conflicts;
        self.log_lines += outcome.log_lines;
        self.migrations_judged += outcome.migrations_judged;
        self.virtual_seconds += outcome.virtual_time.as_secs_f64();
        if !outcome.violations.is_empty() {
            self.failing_seeds += 1;
            if self.first_failure.as_ref().is_none_or(|first| outcome.seed < first.seed) {
                let violations = outcome.violations.iter().take(10).cloned().collect();
                self.first_failure = Some(FirstFailure { seed: outcome.seed, replay: replay(), violations });
            }
        }
    }

    pub fn finish(&mut self, wall: Duration) {
        self.wall_seconds = wall.as_secs_f64();
        self.seeds_per_minute =
            if self.wall_seconds > 0.0 { self.seeds as f64 * 60.0 / self.wall_seconds } else { 0.0 };
    }

    /// The one-screen summary.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let verdict = if self.failing_seeds == 0 { "no violations" } else { "VIOLATIONS FOUND" };
        let _ = writeln!(
            out,
            "cnpool sim: {} with the {} controllers — {} seeds, {} failing: {verdict}",
            self.scenario,
            self.controller.name(),
            self.seeds,
            self.failing_seeds
        );
        let _ = writeln!(out, "\ninvariants");
        for (invariant, count) in &self.violations {
            let _ = writeln!(out, "  {:?} {:<16} {count:>8}", invariant, invariant.title());
        }
        let _ = writeln!(out, "\nfaults injected");
        let faults: Vec<String> =
            self.faults.iter().map(|(fault, count)| format!("{:<16} {count:>8}", fault.name())).collect();
        for row in faults.chunks(2) {
            let _ = writeln!(out, "  {}", row.join("    "));
        }
        let _ = writeln!(out, "\nwork (all seeds)");
        let _ = writeln!(
            out,
            "  reconciles {:>10}    API requests {:>10}    writes {:>10}",
            self.reconciles, self.api_requests, self.api_writes
        );
        let _ = writeln!(
            out,
            "  Events     {:>10}    conflicts    {:>10}    log lines {:>7}",
            self.event_writes, self.conflicts, self.log_lines
        );
        let _ = writeln!(out, "  migrations priced by I5 (no fault reached them) {:>8}", self.migrations_judged);
        let _ = writeln!(
            out,
            "  virtual {:.1} h, wall {:.1} s: {:.0} seeds/minute",
            self.virtual_seconds / 3600.0,
            self.wall_seconds,
            self.seeds_per_minute
        );
        if let Some(first) = &self.first_failure {
            let _ = writeln!(out, "\nfirst failing seed {}; replay with:\n  {}", first.seed, first.replay);
            for violation in &first.violations {
                let _ =
                    writeln!(out, "  {:>9.1}s {:?} {}", violation.at_seconds, violation.invariant, violation.detail);
            }
        }
        out
    }
}
