//! Why a claim waits, in words a person can act on: the reason and message
//! of its `Bound` condition (or, migrating, its `Migration` condition) while
//! it has no pod to be shown Bound on, and whether the reason asks a person
//! to act (a Warning Event) or only to wait.
//!
//! A reason and its message depend on the claim's spec, its pools' specs
//! and pods, and whether HAKeeper answers, and never on how many other
//! claims wait: a new claim must not rewrite the status of every claim
//! pending before it. So a message names the pool and its limit
//! (`maxPods`), not a count.
//!
//! | reason | the claim … | a person must act |
//! |---|---|---|
//! | `NoPoolMatches` | names no pool (its `poolName`, when set) of its namespace, not being deleted, whose pods its selector matches | yes: fix the selector or `poolName`, or create the pool |
//! | `HAKeeperUnreachable` | waits for a pod, or for its pod's store, while HAKeeper does not answer | yes: HAKeeper (the log service) or the way to it |
//! | `PoolAtMaxPods` | waits for a pod of a pool that has its `maxPods` pods, none of them starting | yes: raise `maxPods`, or release claims |
//! | `PoolScalingOut` | waits for a pod its pool starts, or will start (room below `maxPods`) | no: it comes |
//! | `WaitingForStore` | holds its pod, whose CN store has not registered or taken the claim's labels yet | no: it comes |

use cnpool_api::selector::selector_matches;

use crate::model::{ClaimView, PodView, PoolView};

/// Whether HAKeeper answers the operator, as its store listings tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reachability {
    /// Nothing listed yet: no judgement either way.
    Unknown,
    /// The last listing was answered.
    Reachable,
    /// Listings have failed for a while.
    Unreachable,
}

/// How full a pool is, as its pods show ([`crate::pool::occupancy`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// The pods that take room under `maxPods` and stay: every pod but
    /// those being deleted and the unowned ones the pool retires or deletes.
    pub staying: u32,
    /// Unowned pods of the current template on their way to Idle (phase
    /// Unknown, healthy, not cordoned): a claim gets one of them soon.
    pub starting: u32,
}

impl Occupancy {
    /// Whether `pool` has its `maxPods` pods: it makes no more.
    pub fn at_max_pods(self, pool: &PoolView) -> bool {
        pool.max_pods.is_some_and(|max| self.staying >= max)
    }

    /// Whether `pool` has its `maxPods` pods and none of them starting: a
    /// claim waits for one to be released.
    fn none_coming(self, pool: &PoolView) -> bool {
        self.starting == 0 && self.at_max_pods(pool)
    }
}

/// Why a claim has no pod to be shown Bound on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimWait {
    /// No pool of the claim's namespace (the one `poolName` names, when
    /// set) makes pods the claim's selector matches.
    NoPoolMatches {
        /// `spec.poolName`, when set.
        pool_name: Option<String>,
    },
    /// HAKeeper does not answer: no pod registers, no store takes labels.
    HAKeeperUnreachable {
        /// The pool the claim waits on, when known.
        pool: Option<String>,
    },
    /// The pool has its `maxPods` pods and none is free.
    PoolAtMaxPods {
        /// The pool.
        pool: String,
        /// Its `maxPods`.
        max_pods: u32,
    },
    /// The pool starts a pod, or will: it is below `maxPods`.
    PoolScalingOut {
        /// The pool.
        pool: String,
        /// Its `maxPods`, if it has one.
        max_pods: Option<u32>,
    },
    /// The claim holds its pod; the pod's CN store has not registered or
    /// taken the claim's labels yet.
    WaitingForStore {
        /// The pod.
        pod: String,
        /// Its pool.
        pool: String,
    },
}

impl ClaimWait {
    /// The condition's reason: a stable CamelCase identifier.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NoPoolMatches { .. } => "NoPoolMatches",
            Self::HAKeeperUnreachable { .. } => "HAKeeperUnreachable",
            Self::PoolAtMaxPods { .. } => "PoolAtMaxPods",
            Self::PoolScalingOut { .. } => "PoolScalingOut",
            Self::WaitingForStore { .. } => "WaitingForStore",
        }
    }

    /// Whether a person must act for the claim to be served (a Warning
    /// Event), rather than wait.
    pub fn needs_action(&self) -> bool {
        match self {
            Self::NoPoolMatches { .. } | Self::HAKeeperUnreachable { .. } | Self::PoolAtMaxPods { .. } => true,
            Self::PoolScalingOut { .. } | Self::WaitingForStore { .. } => false,
        }
    }

    /// What a person reads: what the claim waits for, naming the pool and
    /// its limit, and what to do when something is to be done.
    pub fn message(&self) -> String {
        match self {
            Self::NoPoolMatches { pool_name: Some(pool) } => format!(
                "no CNPool named {pool} in the claim's namespace makes pods that spec.selector matches: fix \
                 spec.selector or spec.poolName, or create the pool"
            ),
            Self::NoPoolMatches { pool_name: None } => "no CNPool in the claim's namespace makes pods that \
                                                        spec.selector matches: fix spec.selector, or create a pool \
                                                        whose podLabels it matches"
                .to_owned(),
            Self::HAKeeperUnreachable { pool } => {
                let of_pool = pool.as_ref().map(|pool| format!(" of pool {pool}")).unwrap_or_default();
                format!(
                    "HAKeeper does not answer the operator: no CN store{of_pool} can register or take the claim's \
                     labels; check the log service the pool's spec.deps names and the operator's log"
                )
            }
            Self::PoolAtMaxPods { pool, max_pods } => format!(
                "pool {pool} has its maxPods {max_pods} pods and none is free: the claim waits for one to be \
                 released; raise spec.strategy.scaleStrategy.maxPods of pool {pool} to serve it sooner"
            ),
            Self::PoolScalingOut { pool, max_pods } => {
                let limit = max_pods.map_or_else(|| "no maxPods".to_owned(), |max| format!("maxPods {max}"));
                format!("waiting for pool {pool} to start a pod for the claim ({limit})")
            }
            Self::WaitingForStore { pod, pool } => format!(
                "pod {pod} of pool {pool} is the claim's; waiting for its CN store to register in HAKeeper and take \
                 the claim's labels"
            ),
        }
    }
}

/// Why `claim` found no pod to take. `pools` are the pools of the claim's
/// namespace; `occupancy` tells how full one is, by name; `hakeeper` whether
/// a pool's HAKeeper answers (each MatrixOne cluster has its own).
///
/// A spec that names no pool comes first (waiting cannot help), then
/// HAKeeper (no matching pool's HAKeeper answers); then, of the pools whose
/// HAKeeper may answer, the first matching pool,
/// by name, that starts a pod or has room for one, else the first one at
/// `maxPods`.
pub fn why_no_pod(
    claim: &ClaimView,
    pools: &[PoolView],
    occupancy: impl Fn(&PoolView) -> Occupancy,
    hakeeper: impl Fn(&PoolView) -> Reachability,
) -> ClaimWait {
    let mut matching: Vec<&PoolView> = pools
        .iter()
        .filter(|pool| !pool.deleting)
        .filter(|pool| claim.pool_name.as_ref().is_none_or(|wanted| *wanted == pool.name))
        .filter(|pool| selector_matches(&claim.selector, &pool.pod_labels))
        .collect();
    matching.sort_by(|a, b| a.name.cmp(&b.name));
    let Some(first) = matching.first() else {
        return ClaimWait::NoPoolMatches { pool_name: claim.pool_name.clone() };
    };
    // A pool whose HAKeeper does not answer serves no one; another
    // cluster's pool still may.
    let serving: Vec<&PoolView> =
        matching.iter().copied().filter(|pool| hakeeper(pool) != Reachability::Unreachable).collect();
    let Some(first) = serving.first() else {
        return ClaimWait::HAKeeperUnreachable { pool: Some(first.name.clone()) };
    };
    match serving.iter().find(|pool| !occupancy(pool).none_coming(pool)) {
        Some(pool) => ClaimWait::PoolScalingOut { pool: pool.name.clone(), max_pods: pool.max_pods },
        None => ClaimWait::PoolAtMaxPods { pool: first.name.clone(), max_pods: first.max_pods.unwrap_or_default() },
    }
}

/// Why a claim that holds `pod` is not shown Bound yet: its store has not
/// registered or taken its labels ([`crate::claim::ClaimStep::WaitForStore`]),
/// or HAKeeper does not answer.
pub fn why_store_waits(pod: &PodView, hakeeper: Reachability) -> ClaimWait {
    let pool = pod.pool.clone().unwrap_or_default();
    match hakeeper {
        Reachability::Unreachable => ClaimWait::HAKeeperUnreachable { pool: Some(pool) },
        Reachability::Unknown | Reachability::Reachable => ClaimWait::WaitingForStore { pod: pod.name.clone(), pool },
    }
}

#[cfg(test)]
mod tests;
