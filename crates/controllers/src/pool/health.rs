//! The pool's conditions beside its counts: `Ready` (a valid spec, and
//! HAKeeper answering), `HAKeeperReachable` and `AtMaxPods`. Their messages
//! name the pool's limits, never a count of claims: a new claim must not
//! rewrite them.

use cnpool_api::CNPool;
use cnpool_core::waiting::Reachability;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;

use crate::conditions::{self, Wanted, status_of};
use crate::validity::{READY_CONDITION, Verdict};

/// Whether the operator's HAKeeper answers, as this pool sees it (one
/// HAKeeper serves every pool today).
pub const HAKEEPER_REACHABLE: &str = "HAKeeperReachable";
/// Whether the pool has its `maxPods` pods.
pub const AT_MAX_PODS: &str = "AtMaxPods";
/// `Ready=True`: the spec is valid and HAKeeper answers.
const SERVING: &str = "Serving";
/// `Ready=False` and `HAKeeperReachable=False`.
const HAKEEPER_UNREACHABLE: &str = "HAKeeperUnreachable";

/// Sets the pool's conditions in `conditions`: `verdict` and `hakeeper`
/// decide `Ready`; `at_max_pods`, when judged, `AtMaxPods`. While HAKeeper
/// has not been listed yet (an operator starting), the pool's last word on
/// it stands: a restart rewrites no pool.
pub fn apply(
    conditions: &mut Vec<Condition>,
    pool: &CNPool,
    verdict: &Verdict,
    hakeeper: Reachability,
    at_max_pods: Option<bool>,
    now: jiff::Timestamp,
) {
    let generation = pool.metadata.generation;
    let hakeeper = match (hakeeper, conditions::find(conditions, HAKEEPER_REACHABLE)) {
        (Reachability::Unknown, Some(shown)) if shown.status == "False" => Reachability::Unreachable,
        (Reachability::Unknown, Some(shown)) if shown.status == "True" => Reachability::Reachable,
        (hakeeper, _) => hakeeper,
    };
    let scale = &pool.spec.strategy.scale_strategy;
    let limit = scale.max_pods.map_or_else(|| "no maxPods".to_owned(), |max| format!("maxPods {max}"));
    let serving = format!(
        "the pool keeps maxIdle {} Idle pods beyond those in use and those pending claims need ({limit})",
        scale.max_idle
    );
    let unreachable = "HAKeeper does not answer the operator's CN store listings: the pool's pods cannot register, \
                       and claims on it are not served; check the log service and the operator's log";
    let ready = match hakeeper {
        Reachability::Unreachable => (false, HAKEEPER_UNREACHABLE, unreachable),
        Reachability::Reachable | Reachability::Unknown => (true, SERVING, serving.as_str()),
    };
    verdict.apply(conditions, ready, generation, now);
    let reachable = match hakeeper {
        Reachability::Unknown => None,
        Reachability::Reachable => {
            Some(Wanted { type_: HAKEEPER_REACHABLE, status: "True", reason: "Reachable", message: "HAKeeper answers" })
        }
        Reachability::Unreachable => Some(Wanted {
            type_: HAKEEPER_REACHABLE,
            status: "False",
            reason: HAKEEPER_UNREACHABLE,
            message: unreachable,
        }),
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

    fn shown<'a>(conditions: &'a [Condition], type_: &str) -> (&'a str, &'a str) {
        let condition = conditions::find(conditions, type_).unwrap();
        (condition.status.as_str(), condition.reason.as_str())
    }

    #[test]
    fn hakeeper_decides_ready_and_its_own_condition_and_an_unknown_keeps_the_last_word() {
        let at = |seconds| jiff::Timestamp::from_second(seconds).unwrap();
        let valid = Verdict::of(Ok(()), "x");
        let mut conditions = Vec::new();
        apply(&mut conditions, &pool(Some(3)), &valid, Reachability::Unknown, Some(false), at(1));
        assert_eq!(shown(&conditions, READY_CONDITION), ("True", SERVING));
        assert!(conditions::find(&conditions, HAKEEPER_REACHABLE).is_none(), "not asked yet: nothing said");
        apply(&mut conditions, &pool(Some(3)), &valid, Reachability::Unreachable, Some(false), at(2));
        assert_eq!(shown(&conditions, READY_CONDITION), ("False", HAKEEPER_UNREACHABLE));
        assert_eq!(shown(&conditions, HAKEEPER_REACHABLE), ("False", HAKEEPER_UNREACHABLE));
        let before = conditions.clone();
        apply(&mut conditions, &pool(Some(3)), &valid, Reachability::Unknown, Some(false), at(3));
        assert_eq!(conditions, before, "a restarted operator rewrites nothing before it has listed");
        apply(&mut conditions, &pool(Some(3)), &valid, Reachability::Reachable, Some(false), at(4));
        assert_eq!(shown(&conditions, READY_CONDITION), ("True", SERVING));
        assert_eq!(shown(&conditions, HAKEEPER_REACHABLE), ("True", "Reachable"));
        let invalid = Verdict::of(Err(cnpool_api::validation::Invalid(Vec::new())), "x");
        apply(&mut conditions, &pool(Some(3)), &invalid, Reachability::Reachable, Some(false), at(5));
        assert_eq!(shown(&conditions, READY_CONDITION), ("False", "InvalidSpec"));
    }

    #[test]
    fn at_max_pods_names_the_limit_and_is_left_alone_when_not_judged() {
        let at = |seconds| jiff::Timestamp::from_second(seconds).unwrap();
        let valid = Verdict::of(Ok(()), "x");
        let mut conditions = Vec::new();
        apply(&mut conditions, &pool(Some(3)), &valid, Reachability::Reachable, Some(true), at(1));
        assert_eq!(shown(&conditions, AT_MAX_PODS), ("True", "AtMaxPods"));
        assert!(conditions::find(&conditions, AT_MAX_PODS).unwrap().message.contains("maxPods 3"));
        let before = conditions.clone();
        apply(&mut conditions, &pool(Some(3)), &valid, Reachability::Reachable, None, at(2));
        assert_eq!(conditions, before);
        apply(&mut conditions, &pool(None), &valid, Reachability::Reachable, Some(false), at(3));
        assert_eq!(shown(&conditions, AT_MAX_PODS), ("False", "NoMaxPods"));
    }
}
