//! The indexes of claims (by UID, by the pod they name, by pool, by their
//! claim set), of pools (with their template's revision), and of claim sets
//! (none).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cnpool_api::selector::selector_matches;
use cnpool_api::validation::validate_claim_spec;
use cnpool_api::{CNClaim, CNClaimSet, CNPool, ClaimPhase, labels};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::cache::informer::{Cache, Index, add, drop_from, resolve};
use crate::key::{Key, key_of};
use crate::observe::pool_revision;

/// Claims.
#[derive(Default)]
pub struct ClaimIndex {
    by_uid: BTreeMap<String, Key>,
    /// (namespace, spec.podName) → claim names.
    by_pod_name: BTreeMap<Key, BTreeSet<String>>,
    /// (namespace, spec.sourcePod.podName) → claim names.
    by_source: BTreeMap<Key, BTreeSet<String>>,
    /// (namespace, spec.poolName, empty for none) → claim names.
    by_pool: BTreeMap<Key, BTreeSet<String>>,
    /// The same, of the claims that [`may_wait`]: in a burst most claims of
    /// a pool are bound, and an Idle pod's wake looks only at these.
    may_wait_by_pool: BTreeMap<Key, BTreeSet<String>>,
    /// UID of the claim set named by the claim's controller owner
    /// reference → claim keys.
    by_claim_set: BTreeMap<String, BTreeSet<Key>>,
}

/// The owner reference of the claim set that controls `claim` (the one
/// with `controller: true` and kind CNClaimSet), if any.
pub fn controlling_set(claim: &CNClaim) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    claim.metadata.owner_references.iter().flatten().find(|owner| {
        owner.controller == Some(true)
            && owner.kind == "CNClaimSet"
            && owner.api_version.starts_with("core.matrixorigin.io/")
    })
}

/// Whether `claim` holds a pod, so that it waits for none: one of `owned`
/// (the pods carrying its UID) other than the source it migrates from —
/// a claim that holds only its source waits for a target — or one it took
/// lately that the cache does not show yet (`took_lately`).
pub fn holds_a_pod(claim: &CNClaim, owned: &[Arc<Pod>], took_lately: bool) -> bool {
    let source = source_pod(claim);
    took_lately || owned.iter().any(|pod| Some(pod.metadata.name.as_deref().unwrap_or_default()) != source)
}

/// Whether `claim`, waiting for a pod, still serves its tenant meanwhile:
/// it migrates and has not lost its source.
pub fn still_served(claim: &CNClaim) -> bool {
    source_pod(claim).is_some() && claim.phase() != Some(ClaimPhase::Lost)
}

/// The pod `claim` migrates from; an empty name is none, as the core reads it.
fn source_pod(claim: &CNClaim) -> Option<&str> {
    claim.spec.source_pod.as_ref().map(|source| source.pod_name.as_str()).filter(|name| !name.is_empty())
}

/// Whether `claim` waits for a new pod from the pool `pool`, whose pods
/// carry `pod_labels`, given whether it `holds` a serving pod already. The
/// pool counts such claims when it sizes itself, and an Idle pod wakes
/// them: a claim that could not take the pod must not spend either.
pub fn waits_for_pod(claim: &CNClaim, pool: &str, pod_labels: &BTreeMap<String, String>, holds: bool) -> bool {
    if holds || !may_wait(claim) {
        return false;
    }
    let lost = claim.phase() == Some(ClaimPhase::Lost);
    // A Lost member of a claim set is replaced by the set, not rebound.
    let lost_in_set = lost && claim.labels().get(labels::CLAIM_SET).is_some_and(|set| !set.is_empty());
    let nominated = claim.spec.pool_name.is_empty() || claim.spec.pool_name == pool;
    // An invalid claim is not bound until it is fixed.
    nominated
        && !lost_in_set
        && selector_matches(&claim.spec.selector, pod_labels)
        && validate_claim_spec(&claim.spec).is_ok()
}

/// What [`waits_for_pod`] can tell from the claim alone: it is not being
/// deleted, and it names no pod. A claim naming a pod (a pre-bound request,
/// a pointer the Go operator left, or its own recorded binding) waits for
/// that pod, not for a new one; a Lost one clears its pointer and binds
/// from the pool.
fn may_wait(claim: &CNClaim) -> bool {
    let names_a_pod = !claim.spec.pod_name.is_empty() && claim.phase() != Some(ClaimPhase::Lost);
    claim.metadata.deletion_timestamp.is_none() && !names_a_pod
}

impl Index<CNClaim> for ClaimIndex {
    fn insert(&mut self, claim: &Arc<CNClaim>) {
        let (namespace, name) = key_of(claim.as_ref());
        if let Some(uid) = claim.uid() {
            self.by_uid.insert(uid, (namespace.clone(), name.clone()));
        }
        if !claim.spec.pod_name.is_empty() {
            add(&mut self.by_pod_name, (namespace.clone(), claim.spec.pod_name.clone()), name.clone());
        }
        if let Some(source) = claim.spec.source_pod.as_ref().filter(|source| !source.pod_name.is_empty()) {
            add(&mut self.by_source, (namespace.clone(), source.pod_name.clone()), name.clone());
        }
        if let Some(set) = controlling_set(claim) {
            add(&mut self.by_claim_set, set.uid.clone(), (namespace.clone(), name.clone()));
        }
        if may_wait(claim) {
            add(&mut self.may_wait_by_pool, (namespace.clone(), claim.spec.pool_name.clone()), name.clone());
        }
        add(&mut self.by_pool, (namespace, claim.spec.pool_name.clone()), name);
    }

    fn remove(&mut self, claim: &Arc<CNClaim>) {
        let (namespace, name) = key_of(claim.as_ref());
        if let Some(uid) = claim.uid() {
            self.by_uid.remove(&uid);
        }
        drop_from(&mut self.by_pod_name, &(namespace.clone(), claim.spec.pod_name.clone()), &name);
        if let Some(source) = claim.spec.source_pod.as_ref() {
            drop_from(&mut self.by_source, &(namespace.clone(), source.pod_name.clone()), &name);
        }
        if let Some(set) = controlling_set(claim) {
            drop_from(&mut self.by_claim_set, &set.uid, &(namespace.clone(), name.clone()));
        }
        drop_from(&mut self.may_wait_by_pool, &(namespace.clone(), claim.spec.pool_name.clone()), &name);
        drop_from(&mut self.by_pool, &(namespace, claim.spec.pool_name.clone()), &name);
    }
}

/// Pools, with the revision hash of their current template.
#[derive(Default)]
pub struct PoolIndex {
    revisions: BTreeMap<Key, String>,
}

impl Index<CNPool> for PoolIndex {
    fn insert(&mut self, pool: &Arc<CNPool>) {
        self.revisions.insert(key_of(pool.as_ref()), pool_revision(&pool.spec));
    }

    fn remove(&mut self, pool: &Arc<CNPool>) {
        self.revisions.remove(&key_of(pool.as_ref()));
    }
}

/// Claim sets need no secondary index: their members are found through
/// the claims' index, and a claim names its set in its owner reference.
#[derive(Default)]
pub struct NoIndex;

impl<K> Index<K> for NoIndex {
    fn insert(&mut self, _: &Arc<K>) {}

    fn remove(&mut self, _: &Arc<K>) {}
}

pub type Claims = Cache<CNClaim, ClaimIndex>;
pub type Pools = Cache<CNPool, PoolIndex>;
pub type ClaimSets = Cache<CNClaimSet, NoIndex>;
impl Claims {
    pub fn by_uid(&self, uid: &str) -> Option<Arc<CNClaim>> {
        self.with(|objects, index| index.by_uid.get(uid).and_then(|key| objects.get(key).cloned()))
    }

    /// Names of the claims whose `spec.podName` or `spec.sourcePod` is `pod`.
    pub fn pointing_at(&self, namespace: &str, pod: &str) -> BTreeSet<String> {
        self.with(|_, index| {
            let key = (namespace.to_owned(), pod.to_owned());
            let named = index.by_pod_name.get(&key).into_iter().flatten();
            named.chain(index.by_source.get(&key).into_iter().flatten()).cloned().collect()
        })
    }

    /// Claims controlled by the claim set whose UID is `set_uid`.
    pub fn of_claim_set(&self, set_uid: &str) -> Vec<Arc<CNClaim>> {
        self.with(|objects, index| {
            index.by_claim_set.get(set_uid).into_iter().flatten().filter_map(|key| objects.get(key).cloned()).collect()
        })
    }

    /// Claims nominated to `pool` (`spec.poolName`), or to no pool when
    /// `pool` is empty.
    pub fn in_pool(&self, namespace: &str, pool: &str) -> Vec<Arc<CNClaim>> {
        self.with(|objects, index| {
            let names = index.by_pool.get(&(namespace.to_owned(), pool.to_owned()));
            resolve(objects, namespace, names.into_iter().flatten())
        })
    }

    /// Claims nominated to `pool`, then those nominated to none, leaving out
    /// those that cannot be waiting for a new pod whatever the pods show
    /// ([`waits_for_pod`] is false for them).
    pub fn may_wait_in_pool(&self, namespace: &str, pool: &str) -> Vec<Arc<CNClaim>> {
        self.with(|objects, index| {
            let names = |pool: &str| index.may_wait_by_pool.get(&(namespace.to_owned(), pool.to_owned()));
            resolve(objects, namespace, names(pool).into_iter().chain(names("")).flatten())
        })
    }
}

impl Pools {
    /// Every pool with its current revision.
    pub fn all(&self) -> Vec<(Arc<CNPool>, String)> {
        self.with(|objects, index| {
            objects
                .iter()
                .map(|(key, pool)| (pool.clone(), index.revisions.get(key).cloned().unwrap_or_default()))
                .collect()
        })
    }

    pub fn revision(&self, key: &Key) -> Option<String> {
        self.with(|_, index| index.revisions.get(key).cloned())
    }
}

#[cfg(test)]
mod tests {
    use cnpool_api::{CNClaimStatus, labels};

    use super::*;

    fn pod_labels() -> BTreeMap<String, String> {
        BTreeMap::from([("tier".to_owned(), "standard".to_owned())])
    }

    /// A new claim of pool `pool` whose selector asks for `tier: standard`.
    fn claim() -> CNClaim {
        let mut claim = CNClaim::new("tenant", Default::default());
        claim.spec.pool_name = "pool".into();
        claim.spec.selector.match_labels = Some(pod_labels());
        claim
    }

    fn in_phase(mut claim: CNClaim, phase: ClaimPhase) -> CNClaim {
        claim.status = Some(CNClaimStatus { phase: Some(phase), ..Default::default() });
        claim
    }

    #[test]
    fn a_new_valid_claim_waits_for_a_pod_its_selector_matches() {
        assert!(waits_for_pod(&claim(), "pool", &pod_labels(), false));
        let mut unnominated = claim();
        unnominated.spec.pool_name.clear();
        assert!(waits_for_pod(&unnominated, "pool", &pod_labels(), false));
    }

    #[test]
    fn a_claim_that_could_not_take_the_pod_does_not_wait_for_it() {
        let other_tier = BTreeMap::from([("tier".to_owned(), "premium".to_owned())]);
        assert!(!waits_for_pod(&claim(), "pool", &other_tier, false), "selector does not match");
        assert!(!waits_for_pod(&claim(), "other-pool", &pod_labels(), false), "another pool's claim");
        assert!(!waits_for_pod(&claim(), "pool", &pod_labels(), true), "it holds a pod already");
        let mut invalid = claim();
        invalid.spec.additional_pod_labels.insert(labels::CLAIM_UID.into(), "someone-else".into());
        assert!(!waits_for_pod(&invalid, "pool", &pod_labels(), false), "its spec is invalid");
        let mut deleting = claim();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH));
        assert!(!waits_for_pod(&deleting, "pool", &pod_labels(), false), "it is being deleted");
    }

    fn pod(name: &str) -> Arc<Pod> {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.to_owned());
        Arc::new(pod)
    }

    #[test]
    fn a_claim_holding_only_its_migration_source_waits_for_a_target_after_tenants_without_a_cn() {
        let mut migrating = claim();
        migrating.spec.source_pod = Some(cnpool_api::PodRef { pod_name: "pool-1".into(), ..Default::default() });
        assert!(!holds_a_pod(&migrating, &[pod("pool-1")], false), "its source is not what it waits for");
        assert!(holds_a_pod(&migrating, &[pod("pool-1"), pod("pool-2")], false), "it holds its target");
        assert!(holds_a_pod(&migrating, &[pod("pool-1")], true), "it took a target the cache does not show");
        assert!(holds_a_pod(&claim(), &[pod("pool-1")], false), "a claim not migrating holds what it owns");
        assert!(!holds_a_pod(&claim(), &[], false));
        assert!(still_served(&in_phase(migrating.clone(), ClaimPhase::Bound)), "its source serves meanwhile");
        assert!(!still_served(&in_phase(migrating, ClaimPhase::Lost)), "it lost its source");
        assert!(!still_served(&in_phase(claim(), ClaimPhase::Lost)));
        assert!(!still_served(&claim()));
        let mut empty_source = claim();
        empty_source.spec.source_pod = Some(cnpool_api::PodRef::default());
        assert!(!still_served(&empty_source), "an empty sourcePod names no source");
    }

    #[test]
    fn a_claim_naming_a_pod_waits_for_a_new_one_only_once_lost() {
        let mut named = claim();
        named.spec.pod_name = "pool-7".into();
        assert!(!waits_for_pod(&in_phase(named.clone(), ClaimPhase::Pending), "pool", &pod_labels(), false));
        assert!(waits_for_pod(&in_phase(named, ClaimPhase::Lost), "pool", &pod_labels(), false));
    }

    #[test]
    fn a_pools_claims_that_may_wait_are_those_not_yet_bound_or_lost() {
        let named = |name: &str, pool: &str, pod: &str, phase: ClaimPhase| {
            let mut claim = in_phase(claim(), phase);
            claim.metadata.namespace = Some("tenants".into());
            claim.metadata.name = Some(name.to_owned());
            claim.spec.pool_name = pool.to_owned();
            claim.spec.pod_name = pod.to_owned();
            Arc::new(claim)
        };
        let claims = Claims::default();
        for claim in [
            named("pending", "pool", "", ClaimPhase::Pending),
            named("bound", "pool", "pool-1", ClaimPhase::Bound),
            named("lost", "pool", "pool-2", ClaimPhase::Lost),
            named("any-pool", "", "", ClaimPhase::Pending),
            named("elsewhere", "other", "", ClaimPhase::Pending),
        ] {
            claims.upsert(claim);
        }
        let names = |claims: &Claims| -> Vec<String> {
            claims.may_wait_in_pool("tenants", "pool").iter().map(|claim| claim.name_any()).collect()
        };
        assert_eq!(names(&claims), ["lost", "pending", "any-pool"], "the pool's own first, then the unnominated");
        claims.upsert(named("pending", "pool", "pool-3", ClaimPhase::Pending));
        let mut deleting = (*named("any-pool", "", "", ClaimPhase::Pending)).clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH));
        claims.upsert(Arc::new(deleting));
        assert_eq!(names(&claims), ["lost"], "recorded onto a pod, or deleting: no longer waits");
        for claim in claims.in_pool("tenants", "pool").iter().chain(&claims.in_pool("tenants", "")) {
            let waits = waits_for_pod(claim, "pool", &pod_labels(), false);
            assert_eq!(waits, names(&claims).contains(&claim.name_any()), "{} as the pool counts it", claim.name_any());
        }
    }

    #[test]
    fn a_lost_member_of_a_claim_set_is_replaced_not_rebound() {
        let mut member = in_phase(claim(), ClaimPhase::Lost);
        member.labels_mut().insert(labels::CLAIM_SET.into(), "set".into());
        assert!(!waits_for_pod(&member, "pool", &pod_labels(), false));
        member.labels_mut().insert(labels::CLAIM_SET.into(), String::new());
        assert!(waits_for_pod(&member, "pool", &pod_labels(), false), "an empty set label names no set");
    }
}
