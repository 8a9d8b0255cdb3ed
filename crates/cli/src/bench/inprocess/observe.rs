//! What the in-process cases watch a simulated run for: the commits that
//! begin and end what they measure, and the ledger's counts in between.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use cnpool_api::labels;
use cnpool_apiserver::{Event, EventType};
use cnpool_sim::Observer;
use cnpool_sim::checker::OwnerLabel;
use cnpool_sim::ledger::{ApiCounts, Ledger, Tally};
use serde_json::{Value, json};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each update is one step on plain data.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn name(object: &Value) -> &str {
    object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()
}

fn pod_phase(object: &Value) -> Option<&str> {
    object.pointer("/metadata/labels").and_then(|labels| labels.get(labels::PHASE)).and_then(Value::as_str)
}

fn claim_phase(object: &Value) -> Option<&str> {
    object.pointer("/status/phase").and_then(Value::as_str)
}

/// A moment of the run: real and virtual time, and the ledger's totals.
#[derive(Clone, Copy)]
struct Moment {
    wall: Instant,
    at: Duration,
    tally: Tally,
}

impl Moment {
    fn now(ledger: &Ledger) -> Self {
        Self { wall: Instant::now(), at: ledger.elapsed(), tally: ledger.tally() }
    }
}

#[derive(Default)]
struct BurstState {
    /// Pods Idle now, until the first claim comes.
    idle: BTreeSet<String>,
    idle_at_start: usize,
    start: Option<Moment>,
    bound: BTreeSet<String>,
    end: Option<Moment>,
}

/// Watches a burst of `claims` claims: from the first claim's commit to
/// the commit that makes the last of them Bound.
pub struct Burst {
    claims: usize,
    state: Mutex<BurstState>,
}

impl Burst {
    pub fn new(claims: usize) -> Self {
        Self { claims, state: Mutex::default() }
    }

    pub fn span(&self) -> BurstSpan {
        let state = lock(&self.state);
        let (start, end) = (state.start, state.end);
        let counted = |count: fn(&Tally) -> u64| match (start, end) {
            (Some(start), Some(end)) => count(&end.tally) - count(&start.tally),
            _ => 0,
        };
        BurstSpan {
            claims: self.claims,
            idle_at_start: state.idle_at_start,
            bound: state.bound.len(),
            wall: start.zip(end).map(|(start, end)| end.wall.duration_since(start.wall)),
            virtual_span: start.zip(end).map(|(start, end)| end.at.saturating_sub(start.at)),
            end_at: end.map(|end| end.at),
            api: match (start, end) {
                (Some(start), Some(end)) => end.tally.api.since(start.tally.api),
                _ => ApiCounts::default(),
            },
            reconciles: counted(|tally| tally.reconciles),
            log_lines: counted(|tally| tally.log_lines),
        }
    }
}

impl Observer for Burst {
    fn commit(&self, event: &Event, ledger: &Ledger) {
        let mut state = lock(&self.state);
        let object = &event.object;
        match event.storage.plural.as_str() {
            "pods" if state.start.is_none() => {
                let idle = event.event_type != EventType::Deleted && pod_phase(object) == Some("Idle");
                match idle {
                    true => state.idle.insert(name(object).to_owned()),
                    false => state.idle.remove(name(object)),
                };
            }
            "cnclaims" => {
                if state.start.is_none() {
                    state.start = Some(Moment::now(ledger));
                    state.idle_at_start = state.idle.len();
                }
                if claim_phase(object) == Some("Bound")
                    && state.bound.insert(name(object).to_owned())
                    && state.bound.len() == self.claims
                {
                    state.end = Some(Moment::now(ledger));
                }
            }
            _ => {}
        }
    }
}

/// What a burst cost, all of its claims Bound or not.
pub struct BurstSpan {
    claims: usize,
    pub idle_at_start: usize,
    pub bound: usize,
    wall: Option<Duration>,
    virtual_span: Option<Duration>,
    end_at: Option<Duration>,
    pub api: ApiCounts,
    pub reconciles: u64,
    pub log_lines: u64,
}

impl BurstSpan {
    /// Whether every claim became Bound.
    pub fn complete(&self) -> bool {
        self.bound == self.claims && self.wall.is_some()
    }

    /// When the last claim became Bound (virtual time), or never.
    pub fn end_at(&self) -> Duration {
        self.end_at.unwrap_or(Duration::MAX)
    }

    pub fn wall_millis(&self) -> Value {
        self.wall.map_or(Value::Null, |wall| json!(wall.as_millis() as u64))
    }

    pub fn virtual_seconds(&self) -> Value {
        self.virtual_span.map_or(Value::Null, |span| json!(span.as_secs_f64()))
    }

    /// Wall milliseconds per bind, once every claim is Bound.
    pub fn wall_millis_per_bind(&self) -> Option<f64> {
        self.wall.filter(|_| self.complete()).map(|wall| wall.as_secs_f64() * 1_000.0 / self.bound as f64)
    }

    pub fn binds_per_second(&self) -> Value {
        match self.wall {
            Some(wall) if self.complete() => json!((self.bound as f64 / wall.as_secs_f64()).round()),
            _ => Value::Null,
        }
    }
}

/// What a span of nothing changing cost.
#[derive(Clone, Default)]
pub struct QuietFigures {
    pub writes: usize,
    /// Objects reconciled at any time of the run.
    pub objects: usize,
    pub reconciles: usize,
    /// By kind, the reconciles of the object of that kind reconciled most in the span.
    pub most_reconciled: BTreeMap<String, usize>,
    pub log_lines: usize,
}

/// Reads the ledger for `span` once the run is over.
pub struct Quiet {
    span: Range<Duration>,
    figures: Mutex<QuietFigures>,
}

impl Quiet {
    pub fn new(span: Range<Duration>) -> Self {
        Self { span, figures: Mutex::default() }
    }

    pub fn figures(&self) -> QuietFigures {
        lock(&self.figures).clone()
    }
}

impl Observer for Quiet {
    fn finished(&self, ledger: &Ledger) {
        let reconciles = ledger.reconciles_within(self.span.clone());
        let mut most_reconciled: BTreeMap<String, usize> = BTreeMap::new();
        for (object, count) in &reconciles {
            let kind = object.split(' ').next().unwrap_or_default().to_owned();
            let most = most_reconciled.entry(kind).or_default();
            *most = (*most).max(*count);
        }
        *lock(&self.figures) = QuietFigures {
            writes: ledger.writes_since(self.span.start),
            objects: reconciles.len(),
            reconciles: reconciles.values().sum(),
            most_reconciled,
            log_lines: ledger.log_lines_within(self.span.clone(), None),
        };
    }
}

/// Two observers of one run.
pub struct Both<A, B>(pub Arc<A>, pub Arc<B>);

impl<A: Observer, B: Observer> Observer for Both<A, B> {
    fn commit(&self, event: &Event, ledger: &Ledger) {
        self.0.commit(event, ledger);
        self.1.commit(event, ledger);
    }

    fn finished(&self, ledger: &Ledger) {
        self.0.finished(ledger);
        self.1.finished(ledger);
    }
}

#[derive(Default)]
struct MigrationState {
    claim: String,
    /// How the owner label names the claim (its UID, or its name).
    owner: String,
    source: Option<String>,
    started: Option<Duration>,
    /// When each write of the claim after the start happened.
    writes: Vec<Duration>,
    migrated: Option<Duration>,
    drained: Option<Duration>,
    source_draining: bool,
    cost: MigrationCost,
}

/// Watches the one claim of a run through its migration, and counts what
/// it cost as crates/controllers/tests/migration.rs does.
pub struct Migration {
    owner_label: OwnerLabel,
    state: Mutex<MigrationState>,
}

/// What one migration cost its claim.
#[derive(Clone, Copy, Default)]
pub struct MigrationCost {
    pub started: Duration,
    /// When the claim was Bound to its target and its source Idle again.
    pub done: Option<Duration>,
    pub reconciles: usize,
    pub writes: usize,
    pub log_lines: usize,
}

impl MigrationCost {
    pub fn seconds(&self) -> Value {
        self.done.map_or(Value::Null, |done| json!(done.saturating_sub(self.started).as_secs_f64()))
    }
}

/// How long after done the cost is counted, as the integration test waits.
const AFTER_DONE: Duration = Duration::from_secs(1);

impl Migration {
    pub fn new(owner_label: OwnerLabel) -> Self {
        Self { owner_label, state: Mutex::default() }
    }

    pub fn cost(&self) -> MigrationCost {
        lock(&self.state).cost
    }

    fn claim_commit(&self, state: &mut MigrationState, object: &Value, at: Duration) {
        if state.claim.is_empty() {
            state.claim = name(object).to_owned();
            state.owner = match self.owner_label {
                OwnerLabel::ClaimUid => object.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default(),
                OwnerLabel::ClaimedBy => name(object),
            }
            .to_owned();
        }
        if name(object) != state.claim {
            return;
        }
        let source = object.pointer("/spec/sourcePod/podName").and_then(Value::as_str);
        if state.started.is_none() {
            // The control plane's patch that starts the migration: the user's write.
            if let Some(source) = source {
                state.started = Some(at);
                state.source = Some(source.to_owned());
            }
            return;
        }
        state.writes.push(at);
        let target = object.pointer("/spec/podName").and_then(Value::as_str);
        if source.is_none() && claim_phase(object) == Some("Bound") && target != state.source.as_deref() {
            state.migrated.get_or_insert(at);
        }
    }

    fn pod_commit(&self, state: &mut MigrationState, event: &Event, at: Duration) {
        if state.started.is_none() {
            return;
        }
        let owner = |object: &Value| self.owner_label.owner(object);
        let before = event.old.as_ref().and_then(owner);
        let after = owner(&event.object);
        if before != after && (before.as_ref() == Some(&state.owner) || after.as_ref() == Some(&state.owner)) {
            state.writes.push(at);
        }
        if Some(name(&event.object)) != state.source.as_deref() {
            return;
        }
        let phase = pod_phase(&event.object);
        state.source_draining |= phase == Some("Draining");
        let idle = phase == Some("Idle") && after.is_none();
        if state.source_draining && (idle || event.event_type == EventType::Deleted) {
            state.drained.get_or_insert(at);
        }
    }
}

impl Observer for Migration {
    fn commit(&self, event: &Event, ledger: &Ledger) {
        let mut state = lock(&self.state);
        let at = ledger.elapsed();
        match event.storage.plural.as_str() {
            "cnclaims" => self.claim_commit(&mut state, &event.object, at),
            "pods" => self.pod_commit(&mut state, event, at),
            _ => {}
        }
    }

    fn finished(&self, ledger: &Ledger) {
        let mut state = lock(&self.state);
        let Some(started) = state.started else { return };
        let done = state.migrated.zip(state.drained).map(|(migrated, drained)| migrated.max(drained));
        let until = done.map_or(ledger.elapsed(), |done| done + AFTER_DONE);
        let span = started..until;
        let object = format!("CNClaim default/{}", state.claim);
        state.cost = MigrationCost {
            started,
            done,
            reconciles: ledger.reconciles_within(span.clone()).get(&object).copied().unwrap_or_default(),
            writes: state.writes.iter().filter(|at| span.contains(at)).count(),
            log_lines: ledger.log_lines_within(span, Some(&state.claim)),
        };
    }
}
