//! The pool's conditions beside its counts: `Ready` (a valid spec, and
//! the pool's HAKeeper known and answering), `HAKeeperReachable` and
//! `AtMaxPods`. Their messages name the pool's limits and its HAKeeper,
//! never a count of claims: a new claim must not rewrite them.

use cnpool_api::CNPool;
use cnpool_core::waiting::Reachability;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;

use crate::clusters::Unresolved;
use crate::conditions::{self, Wanted, status_of};
use crate::validity::{READY_CONDITION, Verdict};

/// Whether the pool's HAKeeper (the one its `spec.deps` names) answers.
pub const HAKEEPER_REACHABLE: &str = "HAKeeperReachable";
/// Whether the pool has its `maxPods` pods.
pub const AT_MAX_PODS: &str = "AtMaxPods";
/// `Ready=True`: the spec is valid and HAKeeper answers.
const SERVING: &str = "Serving";
/// `Ready=False` and `HAKeeperReachable=False`: HAKeeper does not answer.
const HAKEEPER_UNREACHABLE: &str = "HAKeeperUnreachable";
/// `Ready=False` and `HAKeeperReachable=False`: which HAKeeper is not known.
const HAKEEPER_UNKNOWN: &str = "HAKeeperUnknown";

/// The pool's HAKeeper as the operator knows it.
pub enum HaKeeper<'a> {
    /// Found at `address`; `reachability` as its listings tell.
    Known { address: &'a str, reachability: Reachability },
    /// Its deps name no HAKeeper the operator can find.
    Unknown(&'a Unresolved),
}

/// Sets the pool's conditions in `conditions`: `verdict` and `hakeeper`
/// decide `Ready`; `at_max_pods`, when judged, `AtMaxPods`. While HAKeeper
/// has not been listed yet (an operator starting), the pool's last word on
/// it stands: a restart rewrites no pool.
pub fn apply(
    conditions: &mut Vec<Condition>,
    pool: &CNPool,
    verdict: &Verdict,
    hakeeper: &HaKeeper<'_>,
    at_max_pods: Option<bool>,
    now: jiff::Timestamp,
) {
    let generation = pool.metadata.generation;
    let scale = &pool.spec.strategy.scale_strategy;
    let limit = scale.max_pods.map_or_else(|| "no maxPods".to_owned(), |max| format!("maxPods {max}"));
    let serving = format!(
        "the pool keeps maxIdle {} Idle pods beyond those in use and those pending claims need ({limit})",
        scale.max_idle
    );
    let (failing, message) = match hakeeper {
        HaKeeper::Known { address, reachability } => {
            // What the pool said of a HAKeeper it knew, not of one it could not find.
            let shown = conditions::find(conditions, HAKEEPER_REACHABLE)
                .filter(|shown| shown.reason != HAKEEPER_UNKNOWN)
                .map(|shown| shown.status.as_str());
            let reachability = match (reachability, shown) {
                (Reachability::Unknown, Some("False")) => Reachability::Unreachable,
                (Reachability::Unknown, Some("True")) => Reachability::Reachable,
                (reachability, _) => *reachability,
            };
            match reachability {
                Reachability::Unknown => (None, String::new()),
                Reachability::Reachable => (Some(false), format!("HAKeeper {address} answers")),
                Reachability::Unreachable => (
                    Some(true),
                    format!(
                        "HAKeeper {address} does not answer the operator's CN store \
                         listings: the pool's pods cannot register, and claims on it are not served; check that \
                         MatrixOne cluster's log service and the operator's log"
                    ),
                ),
            }
        }
        HaKeeper::Unknown(unresolved) => (Some(true), format!("the pool's HAKeeper is not known: {unresolved}")),
    };
    let reason = match hakeeper {
        HaKeeper::Known { .. } => HAKEEPER_UNREACHABLE,
        HaKeeper::Unknown(_) => HAKEEPER_UNKNOWN,
    };
    let ready = match failing {
        Some(true) => (false, reason, message.as_str()),
        Some(false) | None => (true, SERVING, serving.as_str()),
    };
    verdict.apply(conditions, ready, generation, now);
    let reachable = match failing {
        None => None,
        Some(false) => {
            Some(Wanted { type_: HAKEEPER_REACHABLE, status: "True", reason: "Reachable", message: &message })
        }
        Some(true) => Some(Wanted { type_: HAKEEPER_REACHABLE, status: "False", reason, message: &message }),
    };
    if let Some(wanted) = reachable {
        conditions::set(conditions, wanted, generation, now);
    }
    if let Some(at_max) = at_max_pods {
        let (reason, message) = match (at_max, scale.max_pods) {
            (true, _) => (
                "AtMaxPods",
                format!("the pool has its {limit} pods: it makes no more, and claims wait for pods to be released"),
            ),
            (false, Some(_)) => ("BelowMaxPods", format!("the pool has room below its {limit}")),
            (false, None) => ("NoMaxPods", "the pool has no maxPods".to_owned()),
        };
        let wanted = Wanted { type_: AT_MAX_PODS, status: status_of(at_max), reason, message: &message };
        conditions::set(conditions, wanted, generation, now);
    }
}

/// One log line per condition that changed its status or reason.
pub fn log_changes(pool: &CNPool, before: &[Condition], after: &[Condition]) {
    for condition in
        after.iter().filter(|condition| condition.type_ != READY_CONDITION || condition.reason != "InvalidSpec")
    {
        let old = conditions::find(before, &condition.type_);
        if old.is_some_and(|old| old.status == condition.status && old.reason == condition.reason) {
            continue;
        }
        tracing::info!(
            pool = %pool.name_any(),
            condition = %condition.type_,
            status = %condition.status,
            reason = %condition.reason,
            "pool condition changed"
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pool(max_pods: Option<i32>) -> CNPool {
        serde_json::from_value(json!({
            "apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "CNPool",
            "metadata": {"name": "mo", "namespace": "ns", "generation": 1},
            "spec": {"template": {}, "strategy": {"scaleStrategy": {"maxIdle": 1, "maxPods": max_pods}}},
        }))
        .unwrap()
    }

    fn known(reachability: Reachability) -> HaKeeper<'static> {
        HaKeeper::Known { address: "mo-log-discovery.ns.svc:32001", reachability }
    }

    fn shown<'a>(conditions: &'a [Condition], type_: &str) -> (&'a str, &'a str) {
        let condition = conditions::find(conditions, type_).unwrap();
        (condition.status.as_str(), condition.reason.as_str())
    }

    #[test]
    fn hakeeper_decides_ready_and_its_own_condition_and_an_unknown_keeps_the_last_word() {
        let at = |seconds| jiff::Timestamp::from_second(seconds).unwrap();
        let valid = Verdict::of(Ok(()), "x");
        let mut conditions = Vec::new();
        apply(&mut conditions, &pool(Some(3)), &valid, &known(Reachability::Unknown), Some(false), at(1));
        assert_eq!(shown(&conditions, READY_CONDITION), ("True", SERVING));
        assert!(conditions::find(&conditions, HAKEEPER_REACHABLE).is_none(), "not asked yet: nothing said");
        apply(&mut conditions, &pool(Some(3)), &valid, &known(Reachability::Unreachable), Some(false), at(2));
        assert_eq!(shown(&conditions, READY_CONDITION), ("False", HAKEEPER_UNREACHABLE));
        assert_eq!(shown(&conditions, HAKEEPER_REACHABLE), ("False", HAKEEPER_UNREACHABLE));
        let ready = conditions::find(&conditions, READY_CONDITION).unwrap();
        assert!(ready.message.contains("HAKeeper mo-log-discovery.ns.svc:32001 "), "names it: {}", ready.message);
        let before = conditions.clone();
        apply(&mut conditions, &pool(Some(3)), &valid, &known(Reachability::Unknown), Some(false), at(3));
        assert_eq!(conditions, before, "a restarted operator rewrites nothing before it has listed");
        apply(&mut conditions, &pool(Some(3)), &valid, &known(Reachability::Reachable), Some(false), at(4));
        assert_eq!(shown(&conditions, READY_CONDITION), ("True", SERVING));
        assert_eq!(shown(&conditions, HAKEEPER_REACHABLE), ("True", "Reachable"));
        let invalid = Verdict::of(Err(cnpool_api::validation::Invalid(Vec::new())), "x");
        apply(&mut conditions, &pool(Some(3)), &invalid, &known(Reachability::Reachable), Some(false), at(5));
        assert_eq!(shown(&conditions, READY_CONDITION), ("False", "InvalidSpec"));
    }

    #[test]
    fn a_pool_whose_hakeeper_is_not_known_is_not_ready_and_says_what_to_fix() {
        let at = |seconds| jiff::Timestamp::from_second(seconds).unwrap();
        let valid = Verdict::of(Ok(()), "x");
        let mut conditions = Vec::new();
        let missing = Unresolved::LogSetMissing { namespace: "ns".into(), name: "mo".into() };
        apply(&mut conditions, &pool(Some(3)), &valid, &HaKeeper::Unknown(&missing), None, at(1));
        assert_eq!(shown(&conditions, READY_CONDITION), ("False", HAKEEPER_UNKNOWN));
        assert_eq!(shown(&conditions, HAKEEPER_REACHABLE), ("False", HAKEEPER_UNKNOWN));
        let ready = conditions::find(&conditions, READY_CONDITION).unwrap();
        assert!(ready.message.contains("spec.deps.logSet names LogSet ns/mo"), "{}", ready.message);
        apply(&mut conditions, &pool(Some(3)), &valid, &known(Reachability::Unknown), None, at(2));
        assert_eq!(shown(&conditions, READY_CONDITION), ("True", SERVING), "found: no judgement against it yet");
    }

    #[test]
    fn at_max_pods_names_the_limit_and_is_left_alone_when_not_judged() {
        let at = |seconds| jiff::Timestamp::from_second(seconds).unwrap();
        let valid = Verdict::of(Ok(()), "x");
        let mut conditions = Vec::new();
        apply(&mut conditions, &pool(Some(3)), &valid, &known(Reachability::Reachable), Some(true), at(1));
        assert_eq!(shown(&conditions, AT_MAX_PODS), ("True", "AtMaxPods"));
        assert!(conditions::find(&conditions, AT_MAX_PODS).unwrap().message.contains("maxPods 3"));
        let before = conditions.clone();
        apply(&mut conditions, &pool(Some(3)), &valid, &known(Reachability::Reachable), None, at(2));
        assert_eq!(conditions, before);
        apply(&mut conditions, &pool(None), &valid, &known(Reachability::Reachable), Some(false), at(3));
        assert_eq!(shown(&conditions, AT_MAX_PODS), ("False", "NoMaxPods"));
    }
}
