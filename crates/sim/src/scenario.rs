//! What a run simulates: the pool, the node side's delays, how many
//! operators run, the control plane's actions over time and the rates of
//! injected faults. Read from YAML (`scenarios/*.yaml`) or built from a
//! seed ([`Scenario::random`]).

use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub use crate::hostile::Hostile;

/// One simulated situation.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    /// How long the control plane acts and faults are injected.
    #[serde(deserialize_with = "duration")]
    pub duration: Duration,
    /// How long the run goes on afterwards with neither, for the operator
    /// to converge and then stay quiet (I5, I6). Shorter than
    /// [`Scenario::min_settle`], the quiet minutes may fall before
    /// convergence; shorter than [`QUIET_WINDOW`], all of it is the quiet
    /// window.
    #[serde(deserialize_with = "duration")]
    pub settle: Duration,
    pub pool: PoolShape,
    #[serde(default)]
    pub world: WorldShape,
    /// Operator replicas running from the start.
    #[serde(default = "one")]
    pub operators: usize,
    #[serde(default)]
    pub faults: FaultRates,
    #[serde(default)]
    pub steps: Vec<Step>,
}

fn one() -> usize {
    1
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolShape {
    pub name: String,
    pub max_idle: u32,
    pub max_pods: u32,
    /// The pool's drain timeout and the rest of a drained CN.
    #[serde(deserialize_with = "duration")]
    pub drain_timeout: Duration,
    #[serde(deserialize_with = "duration")]
    pub min_delay: Duration,
}

/// Delays of the simulated kubelet and CNs.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorldShape {
    #[serde(deserialize_with = "duration")]
    pub start_delay: Duration,
    #[serde(deserialize_with = "duration")]
    pub stop_delay: Duration,
    #[serde(deserialize_with = "duration")]
    pub session_leave_delay: Duration,
}

impl Default for WorldShape {
    fn default() -> Self {
        Self {
            start_delay: Duration::from_secs(5),
            stop_delay: Duration::from_secs(2),
            session_leave_delay: Duration::from_secs(10),
        }
    }
}

/// How often each fault is injected while the control plane acts. Rates
/// per request are probabilities; rates per minute are the mean number of
/// injections in a virtual minute.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct FaultRates {
    /// An operator write answered 409 Conflict without being applied.
    pub conflict_per_write: f64,
    /// An operator request answered 500 or 503 without being applied.
    pub server_error_per_request: f64,
    /// An operator write that times out before reaching storage.
    pub timeout_lost_per_write: f64,
    /// An operator write that is applied, but whose answer is lost.
    pub timeout_applied_per_write: f64,
    /// The longest delay a watch delivers events with (each watch draws its own).
    #[serde(deserialize_with = "duration")]
    pub max_watch_lag: Duration,
    /// Watches ended with 410 Gone, forcing a relist.
    pub dropped_watches_per_minute: f64,
    /// An operator process dies (its memory is lost) and restarts.
    pub operator_crashes_per_minute: f64,
    /// A second operator replica starts and runs beside the first a while.
    pub second_replicas_per_minute: f64,
    /// A CN process fails for good (pod phase Failed).
    pub pod_crashes_per_minute: f64,
    /// A pod is evicted (deleted gracefully).
    pub pod_evictions_per_minute: f64,
    /// A pod is force-deleted (grace period 0).
    pub forced_deletions_per_minute: f64,
    /// A running CN's store drops out of HAKeeper.
    pub store_vanishes_per_minute: f64,
    /// A HAKeeper or CN query call fails.
    pub registry_errors_per_minute: f64,
    /// A draining CN keeps a session for a while.
    pub slow_drains_per_minute: f64,
}

/// One action of the control plane at a virtual time.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Step {
    #[serde(deserialize_with = "duration")]
    pub at: Duration,
    #[serde(flatten)]
    pub action: Action,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    /// Creates `count` claims at once; the first `system` of them are system claims.
    CreateClaims {
        count: u32,
        #[serde(default)]
        system: u32,
    },
    /// Deletes `count` live claims, chosen among those the control plane sees.
    DeleteClaims { count: u32 },
    /// Drops the stores of `count` bound pods from HAKeeper at once.
    VanishStores { count: u32 },
    /// Deletes `count` pods that claims point at.
    DeleteBoundPods { count: u32 },
    /// Fails the CN of `count` bound pods.
    CrashBoundPods { count: u32 },
    /// Starts migrations as an outside client does ([`Migrations`]).
    MigrateClaims(Migrations),
    /// Sets the image of the pool's pod template: a new template, so its
    /// pods become outdated and the claims on them roll to new ones.
    ChangeTemplate(TemplateChange),
    /// Creates a claim set of the scenario's pool, run by the operator's
    /// claim-set controller.
    CreateClaimSet(ClaimSetShape),
    /// Sets the `replicas` of a claim set created by an earlier step.
    ScaleClaimSet(ClaimSetShape),
    /// Writes one hostile spec of this kind ([`Hostile`]).
    Hostile(Hostile),
}

/// `count` migrations as an outside client starts them: it notes the Idle
/// pods it sees, `viewAge` later sets `spec.sourcePod` of Bound claims to
/// their pods and `spec.podName` to those targets (in turn, so two claims
/// may name one), or leaves the choice to the operator when it saw none
/// or for the `operatorChosen` share of them. Meanwhile the targets may
/// have been taken.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Migrations {
    pub count: u32,
    #[serde(deserialize_with = "duration")]
    pub view_age: Duration,
    /// The share (0 to 1) of the migrations that leave `spec.podName`
    /// empty for the operator to choose the target.
    #[serde(default)]
    pub operator_chosen: f64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateChange {
    /// The new template's container image.
    pub image: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimSetShape {
    pub name: String,
    pub replicas: u32,
}

impl Action {
    /// The step's name as a scenario spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::CreateClaims { .. } => "createClaims",
            Action::DeleteClaims { .. } => "deleteClaims",
            Action::VanishStores { .. } => "vanishStores",
            Action::DeleteBoundPods { .. } => "deleteBoundPods",
            Action::CrashBoundPods { .. } => "crashBoundPods",
            Action::MigrateClaims(_) => "migrateClaims",
            Action::ChangeTemplate(_) => "changeTemplate",
            Action::CreateClaimSet(_) => "createClaimSet",
            Action::ScaleClaimSet(_) => "scaleClaimSet",
            Action::Hostile(_) => "hostile",
        }
    }
}

/// Reads "90s", "15m", "2h", "500ms" or "1h30m".
fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).ok_or_else(|| serde::de::Error::custom(format!("not a duration: {text:?}")))
}

pub fn parse_duration(text: &str) -> Option<Duration> {
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let value: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let part = match &rest[..unit] {
            "ms" => Duration::from_millis(value),
            "s" => Duration::from_secs(value),
            "m" => Duration::from_secs(value * 60),
            "h" => Duration::from_secs(value * 3600),
            _ => return None,
        };
        total += part;
        rest = &rest[unit..];
    }
    Some(total)
}

/// Why a scenario could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Parse {
        path: String,
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    #[error("{path}: step {step} ({kind}): {problem}")]
    Invalid { path: String, step: usize, kind: &'static str, problem: String },
}

/// The quiet minutes at the end of a run that must cost no operator write (I5).
pub const QUIET_WINDOW: Duration = Duration::from_secs(600);

impl Scenario {
    pub fn from_yaml(path: &str, text: &str) -> Result<Self, ScenarioError> {
        let scenario: Self = serde_saphyr::from_str(text)
            .map_err(|source| ScenarioError::Parse { path: path.to_owned(), source: Box::new(source) })?;
        scenario.validate(path)?;
        Ok(scenario)
    }

    /// What the types cannot say: shares within 0 to 1, claim sets named
    /// once and created before they are scaled, images and names not empty.
    fn validate(&self, path: &str) -> Result<(), ScenarioError> {
        let mut sets: Vec<&str> = Vec::new();
        for (index, step) in self.steps.iter().enumerate() {
            let invalid = |problem: String| ScenarioError::Invalid {
                path: path.to_owned(),
                step: index + 1,
                kind: step.action.kind(),
                problem,
            };
            match &step.action {
                Action::MigrateClaims(Migrations { operator_chosen, .. }) if !(0.0..=1.0).contains(operator_chosen) => {
                    return Err(invalid(format!(
                        "operatorChosen is {operator_chosen}; it is a share of the migrations, from 0 to 1"
                    )));
                }
                Action::ChangeTemplate(TemplateChange { image }) if image.trim().is_empty() => {
                    return Err(invalid("image is empty; give the new template's image, e.g. repo/cn:v2".into()));
                }
                Action::CreateClaimSet(ClaimSetShape { name, .. }) => {
                    let valid = !name.is_empty()
                        && name.len() <= 40
                        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                        && !name.starts_with('-')
                        && !name.ends_with('-');
                    if !valid {
                        return Err(invalid(format!(
                            "name {name:?} is not a DNS label of at most 40 characters (a-z, 0-9, '-')"
                        )));
                    }
                    if sets.contains(&name.as_str()) {
                        return Err(invalid(format!("a claim set named {name:?} is created by an earlier step")));
                    }
                    sets.push(name);
                }
                Action::ScaleClaimSet(ClaimSetShape { name, .. }) if !sets.contains(&name.as_str()) => {
                    return Err(invalid(format!(
                        "no earlier createClaimSet step creates {name:?}; create the set first"
                    )));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The first step the legacy model cannot run, with why: it has no
    /// template revisions (the Go operator leaves old pods to a CN set of
    /// their own, which the model does not have) and no claim-set
    /// controller.
    pub fn unsupported_by_legacy(&self) -> Option<(usize, &'static str, &'static str)> {
        self.steps.iter().enumerate().find_map(|(index, step)| {
            let why = match step.action {
                Action::ChangeTemplate(_) => "the legacy model has no template revisions",
                Action::CreateClaimSet(_) | Action::ScaleClaimSet(_) => "the legacy model has no claim-set controller",
                _ => return None,
            };
            Some((index + 1, step.action.kind(), why))
        })
    }

    /// The shortest settle that still ends with [`QUIET_WINDOW`] after
    /// convergence. The slowest legitimate convergence after the last
    /// fault: a store vanishing then is noticed within a minute (the
    /// store-missing bound), and its pod, with no store to drain, waits
    /// out the pool's drain timeout before it is deleted.
    pub fn min_settle(pool: &PoolShape) -> Duration {
        QUIET_WINDOW + Duration::from_secs(60) + pool.drain_timeout
    }

    pub fn load(path: &str) -> Result<Self, ScenarioError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ScenarioError::Read { path: path.to_owned(), source })?;
        Self::from_yaml(path, &text)
    }

    /// A scenario drawn from `seed`: a pool of a random size, bursts of
    /// claims, deletions and node-side trouble at random times, every
    /// fault at a rate that shows up in a few hundred seeds, and one to
    /// four hostile specs. The hostile steps are drawn from a generator of
    /// their own, after the rest: a seed's other steps and rates are what
    /// they were before hostile specs were drawn.
    pub fn random(seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x5ce7_a810);
        let max_pods = rng.u32(6..=16);
        let mut steps = vec![Step {
            at: Duration::ZERO,
            action: Action::CreateClaims { count: rng.u32(1..=max_pods - 2), system: 1 },
        }];
        let mut at = Duration::ZERO;
        for _ in 0..rng.u32(3..=8) {
            at += Duration::from_secs(rng.u64(20..=240));
            let count = rng.u32(1..=4);
            let action = match rng.u32(0..6) {
                0 | 1 => Action::CreateClaims { count, system: 0 },
                2 => Action::DeleteClaims { count },
                3 => Action::VanishStores { count },
                4 => Action::MigrateClaims(Migrations {
                    count,
                    view_age: Duration::from_secs(rng.u64(0..=30)),
                    operator_chosen: 0.0,
                }),
                _ => match rng.bool() {
                    true => Action::DeleteBoundPods { count },
                    false => Action::CrashBoundPods { count },
                },
            };
            steps.push(Step { at, action });
        }
        let duration = at + Duration::from_secs(60);
        let mut hostile_rng = fastrand::Rng::with_seed(seed ^ 0x4057_11e5);
        for _ in 0..hostile_rng.u32(1..=4) {
            // At least a minute before the faults stop, so that what a
            // hostile step creates and deletes again is gone by then.
            let at = Duration::from_secs(hostile_rng.u64(0..=at.as_secs()));
            let kind = Hostile::ALL[hostile_rng.usize(..Hostile::ALL.len())];
            steps.push(Step { at, action: Action::Hostile(kind) });
        }
        steps.sort_by_key(|step| step.at);
        let per_minute = |rng: &mut fastrand::Rng| rng.f64() * 0.6;
        let pool = PoolShape {
            name: "pool".into(),
            max_idle: rng.u32(1..=3),
            max_pods,
            drain_timeout: Duration::from_secs(rng.u64(60..=300)),
            min_delay: Duration::from_secs(rng.u64(1..=15)),
        };
        Self {
            name: format!("random-{seed}"),
            duration,
            settle: Self::min_settle(&pool),
            pool,
            world: WorldShape {
                start_delay: Duration::from_millis(rng.u64(500..=8000)),
                stop_delay: Duration::from_millis(rng.u64(100..=3000)),
                session_leave_delay: Duration::from_millis(rng.u64(500..=20_000)),
            },
            operators: if rng.u32(0..4) == 0 { 2 } else { 1 },
            faults: FaultRates {
                conflict_per_write: rng.f64() * 0.05,
                server_error_per_request: rng.f64() * 0.02,
                timeout_lost_per_write: rng.f64() * 0.02,
                timeout_applied_per_write: rng.f64() * 0.02,
                max_watch_lag: Duration::from_millis(rng.u64(0..=3000)),
                dropped_watches_per_minute: per_minute(&mut rng),
                operator_crashes_per_minute: per_minute(&mut rng),
                second_replicas_per_minute: per_minute(&mut rng),
                pod_crashes_per_minute: per_minute(&mut rng),
                pod_evictions_per_minute: per_minute(&mut rng),
                forced_deletions_per_minute: per_minute(&mut rng),
                store_vanishes_per_minute: per_minute(&mut rng),
                registry_errors_per_minute: per_minute(&mut rng),
                slow_drains_per_minute: per_minute(&mut rng),
            },
            steps,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_written() {
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("5 minutes"), None);
        assert_eq!(parse_duration(""), None);
    }

    fn bundled(name: &str) -> Scenario {
        let path = format!("{}/../../scenarios/{name}", env!("CARGO_MANIFEST_DIR"));
        Scenario::load(&path).unwrap()
    }

    #[test]
    fn the_bundled_migration_and_rollout_scenarios_read() {
        let storm = bundled("migration-storm.yaml");
        let waves: Vec<&Migrations> = storm
            .steps
            .iter()
            .filter_map(|step| match &step.action {
                Action::MigrateClaims(migrations) => Some(migrations),
                _ => None,
            })
            .collect();
        assert!(waves.len() >= 3 && waves.iter().any(|wave| wave.count >= 10));
        assert!(
            waves.iter().any(|wave| wave.operator_chosen > 0.0) && waves.iter().any(|wave| wave.operator_chosen < 1.0)
        );
        assert!(storm.unsupported_by_legacy().is_none());
        let rollout = bundled("rollout.yaml");
        assert!(rollout.steps.iter().any(|step| matches!(step.action, Action::ChangeTemplate(_))));
        assert_eq!(rollout.unsupported_by_legacy().map(|(_, kind, _)| kind), Some("createClaimSet"));
    }

    const HEAD: &str =
        "name: t\nduration: 1m\nsettle: 1m\npool: {name: p, maxIdle: 1, maxPods: 3, drainTimeout: 1m, minDelay: 1s}\n";

    fn refusal(steps: &str) -> String {
        match Scenario::from_yaml("t.yaml", &format!("{HEAD}steps:\n{steps}")) {
            Ok(_) => panic!("accepted: {steps}"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn bad_steps_are_refused_naming_the_step_and_the_fix() {
        let message = refusal("  - {at: 0s, migrateClaims: {count: 2, viewAge: 1s, operatorChosen: 1.5}}\n");
        assert!(message.contains("step 1 (migrateClaims)") && message.contains("from 0 to 1"), "{message}");
        let message = refusal("  - {at: 0s, scaleClaimSet: {name: web, replicas: 2}}\n");
        assert!(message.contains("step 1 (scaleClaimSet)") && message.contains("create the set first"), "{message}");
        let message = refusal(
            "  - {at: 0s, createClaimSet: {name: web, replicas: 1}}\n  - {at: 1s, createClaimSet: {name: web, replicas: 2}}\n",
        );
        assert!(message.contains("step 2 (createClaimSet)"), "{message}");
        let message = refusal("  - {at: 0s, createClaimSet: {name: Web_1, replicas: 1}}\n");
        assert!(message.contains("DNS label"), "{message}");
        let message = refusal("  - {at: 0s, changeTemplate: {image: \"\"}}\n");
        assert!(message.contains("image is empty"), "{message}");
        let message = refusal("  - {at: 0s, changeTemplate: {image: x, tag: y}}\n");
        assert!(message.contains("tag"), "{message}");
        let message = refusal("  - {at: 0s, migrateClaims: {count: 1, viewAge: 1s, operatorChoosen: 0.5}}\n");
        assert!(message.contains("operatorChoosen"), "{message}");
    }

    #[test]
    fn the_bundled_incident_scenario_reads() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/freetier-01.yaml");
        let scenario = Scenario::load(path).unwrap();
        assert!(scenario.pool.max_pods >= 14);
        assert!(scenario.duration >= Duration::from_secs(2 * 3600));
    }
}
