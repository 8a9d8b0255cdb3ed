//! The named cluster configurations: what exists at the start and how many
//! faults and requests the world may inject. The budgets are what keep each
//! state space finite.

use std::collections::BTreeMap;

use cnpool_api::{ClaimPhase, PodPhase, labels};

use crate::Error;
use crate::model::Budget;
use crate::objects::{ClaimObj, PodObj, StoreRec};

/// Every configuration's name.
pub const NAMES: [&str; 11] = [
    "two-replicas",
    "migration",
    "cutover",
    "small",
    "forged-labels",
    "race",
    "pair",
    "prebound",
    "lost-migration",
    "twins",
    "forged-twins",
];

/// A cluster to explore.
#[derive(Clone, Debug)]
pub struct Config {
    pub name: &'static str,
    pub replicas: usize,
    pub pods: Vec<PodObj>,
    pub claims: Vec<ClaimObj>,
    /// HAKeeper's stores at the start.
    pub stores: Vec<StoreRec>,
    pub budget: Budget,
    /// The target a migration names (`spec.podName`); `None` lets the
    /// operator choose.
    pub migration_target: Option<String>,
    /// Whether a reconcile may also stop after its first write (a failed
    /// request or a crash in the middle), beside running whole.
    pub partial_reconciles: bool,
}

impl Config {
    pub fn named(name: &str) -> Result<Self, Error> {
        match name {
            "two-replicas" => Ok(two_replicas()),
            "migration" => Ok(migration()),
            "cutover" => Ok(cutover()),
            "small" => Ok(small()),
            "race" => Ok(pool_of("race", 2, 1, 2, Budget::default())),
            "pair" => Ok(pair()),
            "prebound" => Ok(prebound()),
            "lost-migration" => Ok(lost_migration()),
            "twins" => Ok(twins()),
            "forged-labels" => Ok(forged_labels()),
            "forged-twins" => Ok(forged_twins()),
            _ => Err(Error::UnknownConfig(name.to_owned())),
        }
    }
}

/// Idle pods `p0`… whose CNs are registered and released (Draining, no
/// labels), and new claims `c0`….
fn pool_of(name: &'static str, replicas: usize, pods: usize, claims: usize, budget: Budget) -> Config {
    let pods: Vec<PodObj> = (0..pods).map(|i| PodObj::new(&format!("p{i}"), 1, PodPhase::Idle)).collect();
    Config {
        name,
        replicas,
        stores: pods.iter().map(|pod| StoreRec::draining(&pod.name)).collect(),
        pods,
        claims: (0..claims).map(|i| ClaimObj::new(&format!("c{i}"), 1)).collect(),
        budget,
        migration_target: None,
        partial_reconciles: false,
    }
}

/// Two replicas binding two claims to two pods from lagging caches, with a
/// claim deleted and recreated under its name and a replica crash.
///
/// Reconciles run whole here: with them also stopping after a write the
/// space did not finish in 10 minutes on the 2-core machine (config `pair`
/// and `small` explore that with one claim).
fn two_replicas() -> Config {
    pool_of("two-replicas", 2, 2, 2, Budget { crashes: 1, claim_deletions: 1, ..Budget::default() })
}

/// For CI: two replicas, one claim, two pods; the claim is deleted and
/// recreated under its name once. (`race`: two replicas, two new claims,
/// one pod, no fault.)
fn small() -> Config {
    pool_of("small", 2, 2, 1, Budget { claim_deletions: 1, ..Budget::default() })
}

/// Two replicas, one claim, two pods, no fault but reconciles that stop
/// after a write: both replicas may take a pod for the claim.
fn pair() -> Config {
    let mut config = pool_of("pair", 2, 2, 1, Budget::default());
    config.partial_reconciles = true;
    config
}

/// One replica, two claims, three pods; one claim is asked to migrate to
/// `p2`, which may be taken, deleted or failed first.
fn migration() -> Config {
    let mut config = pool_of("migration", 1, 3, 2, Budget { migrations: 1, pod_deletions: 1, ..Budget::default() });
    config.migration_target = Some("p2".to_owned());
    config
}

/// The Go operator's state at cutover: pod `p0` bound by it to claim `c0`
/// (`claimed-by`, no `claim-uid`), and both `c0` and `c1` recorded by it as
/// Bound to `p0` (the incident's state); `p1` is Idle.
fn cutover() -> Config {
    let mut config = pool_of("cutover", 2, 2, 2, Budget { crashes: 1, ..Budget::default() });
    let bound = &mut config.pods[0];
    bound.labels.insert(labels::PHASE.to_owned(), PodPhase::Bound.as_str().to_owned());
    bound.labels.insert(labels::CLAIMED_BY.to_owned(), "c0".to_owned());
    for claim in &mut config.claims {
        claim.pod_name = Some("p0".to_owned());
        claim.phase = Some(ClaimPhase::Bound);
        claim.status_pod = Some(("p0".to_owned(), None));
    }
    let serving = StoreRec {
        pod: "p0".to_owned(),
        state: cnpool_registry::WorkState::Working.code(),
        labels: config.claims[0].cn_labels(),
    };
    config.stores.retain(|store| store.pod != "p0");
    config.stores.push(serving);
    config
}

/// One replica, two claims, two pods; `c0` was created asking for `p0` by
/// name (a pre-bound request), which `c1` may take first: `c0` then waits
/// for it, still pointing at it, and `c1` must keep its own store's labels.
fn prebound() -> Config {
    let mut config = pool_of("prebound", 1, 2, 2, Budget::default());
    config.claims[0].pod_name = Some("p0".to_owned());
    config
}

/// One replica, one claim, two pods: the claim migrates to `p1`, which may
/// be deleted after the source `p0` was released. The claim is then Lost,
/// and `p0`, Idle again, is the only pod it can bind to (the finding of
/// `migration`, shrunk for the tests).
fn lost_migration() -> Config {
    let mut config =
        pool_of("lost-migration", 1, 2, 1, Budget { migrations: 1, pod_deletions: 1, ..Budget::default() });
    config.migration_target = Some("p1".to_owned());
    config
}

/// For the test of the claims' symmetry: one replica, two interchangeable
/// claims, two pods, a claim deleted and recreated under its name and a
/// crash, so that every place a claim's identity appears (UIDs of two
/// generations, pod labels and binding, store labels, notes, caches) is
/// renamed somewhere in its space.
fn twins() -> Config {
    pool_of("twins", 1, 2, 2, Budget { crashes: 1, claim_deletions: 1, ..Budget::default() })
}

/// `additionalPodLabels` that name `owner` (a claim of the configuration,
/// first generation) in the owner keys: its UID as `claim-uid`, its name as
/// `claimed-by`. Applied, they make a pod look like `owner`'s.
fn forged_owner(owner: &ClaimObj) -> BTreeMap<String, String> {
    [(labels::CLAIM_UID, owner.uid.as_str()), (labels::CLAIMED_BY, owner.name.as_str())]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

/// One replica, two pods; claim `c1`'s spec asks, in
/// `additionalPodLabels`, for `c0`'s UID and name in the owner keys (I8).
/// Validation refuses `c1`; `c0` binds. A claim may be deleted and created
/// again from its manifest (`c1` forging again, or `c0` under a new UID
/// that `c1`'s labels no longer name), and the replica may crash. (With
/// two replicas and no crash the space is 60 times larger, too slow for
/// the tests' debug build; the forged labels' fate does not depend on the
/// caches: validation refuses the claim whatever they show.)
fn forged_labels() -> Config {
    let mut config = pool_of("forged-labels", 1, 2, 2, Budget { crashes: 1, claim_deletions: 1, ..Budget::default() });
    config.claims[1].additional_pod_labels = forged_owner(&config.claims[0]);
    config
}

/// For the test of the claims' symmetry with labels that name claims: as
/// `twins`, but each claim's `additionalPodLabels` name the other in the
/// owner keys, so that the two stay interchangeable and the swap must
/// rename the labels (in the specs, and on the pods a broken variant lets
/// them reach).
fn forged_twins() -> Config {
    let mut config = pool_of("forged-twins", 1, 2, 2, Budget { crashes: 1, claim_deletions: 1, ..Budget::default() });
    let (first, second) = (config.claims[0].clone(), config.claims[1].clone());
    config.claims[0].additional_pod_labels = forged_owner(&second);
    config.claims[1].additional_pod_labels = forged_owner(&first);
    config
}
