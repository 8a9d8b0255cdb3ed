//! The pod cache's index: pods by pool and phase, by claim UID, by CN
//! store UUID, by node, and the Idle pods of each pool in the order claims
//! take them.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use cnpool_api::labels;
use cnpool_core::candidates::age_rank;
use cnpool_core::model::PodView;
use k8s_openapi::api::core::v1::{Pod, PodSpec};

use crate::cache::informer::{Cache, Index, add, drop_from, label, resolve};
use crate::key::{Key, key_of};
use crate::observe::own_view;

/// Cuts a watched pod down to what the operator reads of it: its metadata
/// but the managed fields, its status, and of its spec the node, the
/// subdomain and the readiness gates. A CN pod's containers, volumes and
/// the server's field ownership are most of its size and never read from
/// the cache; pods are only ever patched, never written back whole, so
/// nothing the cut drops can be lost.
pub fn trim(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    pod.spec = pod.spec.take().map(|spec| PodSpec {
        node_name: spec.node_name,
        subdomain: spec.subdomain,
        readiness_gates: spec.readiness_gates,
        ..PodSpec::default()
    });
}

/// Pods of pools.
#[derive(Default)]
pub struct PodIndex {
    /// (namespace, pool, phase label) → pod names.
    by_pool_phase: BTreeMap<(String, String, String), BTreeSet<String>>,
    /// (namespace, pool) → pod names.
    by_pool: BTreeMap<(String, String), BTreeSet<String>>,
    /// claim UID → pod keys.
    by_claim_uid: BTreeMap<String, BTreeSet<Key>>,
    /// CN store UUID → pod keys.
    by_store: BTreeMap<String, BTreeSet<Key>>,
    /// `spec.nodeName` → pod keys.
    by_node: BTreeMap<String, BTreeSet<Key>>,
    /// Pod key → the Idle pod, read once per change of the pod, not once
    /// per claim step that looks at it.
    idle: BTreeMap<Key, Arc<IdlePod>>,
    /// (namespace, pool) → its Idle pods in the order claims take them
    /// ([`age_rank`]), so that a claim reads the first few of a large pool
    /// rather than all of them.
    idle_by_age: BTreeMap<Key, BTreeMap<AgeRank, Arc<IdlePod>>>,
    /// (namespace, pool, `last-owner`) → those of its Idle pods, which the
    /// claims of that owner take first.
    idle_by_last_owner: BTreeMap<(String, String, String), BTreeMap<AgeRank, Arc<IdlePod>>>,
}

/// An Idle pod's place in its pool's order ([`age_rank`], owned).
pub type AgeRank = (jiff::Timestamp, String, String);

pub fn age_rank_of(view: &PodView) -> AgeRank {
    let (created, name, uid) = age_rank(view);
    (created, name.to_owned(), uid.to_owned())
}

fn insert_ranked<A: Ord>(map: &mut BTreeMap<A, BTreeMap<AgeRank, Arc<IdlePod>>>, at: A, idle: &Arc<IdlePod>) {
    map.entry(at).or_default().insert(age_rank_of(&idle.view), idle.clone());
}

fn remove_ranked<A: Ord>(map: &mut BTreeMap<A, BTreeMap<AgeRank, Arc<IdlePod>>>, at: &A, rank: &AgeRank) {
    if let Some(ranked) = map.get_mut(at) {
        ranked.remove(rank);
        if ranked.is_empty() {
            map.remove(at);
        }
    }
}

/// An Idle pod of a pool, with what its object alone says of it
/// ([`own_view`]); the object is the one the view was read
/// from, so a guarded write on it is guarded by what the view saw.
pub struct IdlePod {
    pub pod: Arc<Pod>,
    pub view: PodView,
}

/// What a pod is indexed by: key, pool, phase, claim UID, store UUID, node.
type PodEntries = (Key, Option<String>, String, Option<String>, Option<String>, Option<String>);

impl PodIndex {
    fn entries(pod: &Pod) -> PodEntries {
        let key = key_of(pod);
        let pool = label(pod, labels::POOL_NAME).map(str::to_owned);
        let phase = label(pod, labels::PHASE).unwrap_or_default().to_owned();
        let claim = label(pod, labels::CLAIM_UID).map(str::to_owned);
        let store = label(pod, labels::CN_UUID).map(str::to_owned);
        let node = pod.spec.as_ref().and_then(|spec| spec.node_name.clone()).filter(|node| !node.is_empty());
        (key, pool, phase, claim, store, node)
    }
}

impl Index<Pod> for PodIndex {
    fn insert(&mut self, pod: &Arc<Pod>) {
        let (key, pool, phase, claim, store, node) = Self::entries(pod);
        if let Some(node) = node {
            add(&mut self.by_node, node, key.clone());
        }
        if let Some(pool) = pool {
            // A pod whose object cannot be read is offered to no claim.
            if let Some(view) = (phase == "Idle").then(|| own_view(pod).ok()).flatten() {
                let idle = Arc::new(IdlePod { pod: pod.clone(), view });
                let pool_key = (key.0.clone(), pool.clone());
                if let Some(owner) = idle.view.last_owner.clone() {
                    insert_ranked(&mut self.idle_by_last_owner, (key.0.clone(), pool.clone(), owner), &idle);
                }
                insert_ranked(&mut self.idle_by_age, pool_key, &idle);
                self.idle.insert(key.clone(), idle);
            }
            add(&mut self.by_pool_phase, (key.0.clone(), pool.clone(), phase), key.1.clone());
            add(&mut self.by_pool, (key.0.clone(), pool), key.1.clone());
        }
        if let Some(claim) = claim {
            add(&mut self.by_claim_uid, claim, key.clone());
        }
        if let Some(store) = store {
            add(&mut self.by_store, store, key);
        }
    }

    fn remove(&mut self, pod: &Arc<Pod>) {
        let (key, pool, phase, claim, store, node) = Self::entries(pod);
        if let Some(idle) = self.idle.remove(&key) {
            let rank = age_rank_of(&idle.view);
            let pool = idle.view.pool.clone().unwrap_or_default();
            if let Some(owner) = idle.view.last_owner.clone() {
                remove_ranked(&mut self.idle_by_last_owner, &(key.0.clone(), pool.clone(), owner), &rank);
            }
            remove_ranked(&mut self.idle_by_age, &(key.0.clone(), pool), &rank);
        }
        if let Some(node) = node {
            drop_from(&mut self.by_node, &node, &key);
        }
        if let Some(pool) = pool {
            drop_from(&mut self.by_pool_phase, &(key.0.clone(), pool.clone(), phase), &key.1);
            drop_from(&mut self.by_pool, &(key.0.clone(), pool), &key.1);
        }
        if let Some(claim) = claim {
            drop_from(&mut self.by_claim_uid, &claim, &key);
        }
        if let Some(store) = store {
            drop_from(&mut self.by_store, &store, &key);
        }
    }
}

pub type Pods = Cache<Pod, PodIndex>;

impl Pods {
    /// How many pods of `pool` are in `phase` (as their label reads).
    pub fn count_in_pool_phase(&self, namespace: &str, pool: &str, phase: &str) -> usize {
        self.with(|_, index| {
            let key = (namespace.to_owned(), pool.to_owned(), phase.to_owned());
            index.by_pool_phase.get(&key).map_or(0, BTreeSet::len)
        })
    }

    /// Pods of every pool in `phase` (as their label reads).
    pub fn in_phase(&self, phase: &str) -> Vec<Arc<Pod>> {
        self.with(|objects, index| {
            let in_phase = index.by_pool_phase.iter().filter(|((_, _, of), _)| of == phase);
            let keys = in_phase
                .flat_map(|((namespace, _, _), names)| names.iter().map(|name| (namespace.clone(), name.clone())));
            keys.filter_map(|key| objects.get(&key).cloned()).collect()
        })
    }

    /// Up to `limit` Idle pods of `pool` in the order claims take them
    /// ([`age_rank`]), from the one after `after` (from the first: `None`).
    pub fn idle_by_age(&self, namespace: &str, pool: &str, after: Option<&AgeRank>, limit: usize) -> Vec<Arc<IdlePod>> {
        self.with(|_, index| {
            let Some(ranked) = index.idle_by_age.get(&(namespace.to_owned(), pool.to_owned())) else {
                return Vec::new();
            };
            let from = match after {
                Some(after) => ranked.range((Bound::Excluded(after), Bound::Unbounded)),
                None => ranked.range::<AgeRank, _>(..),
            };
            from.take(limit).map(|(_, idle)| idle.clone()).collect()
        })
    }

    /// The Idle pods of `pool` whose `last-owner` is `owner`.
    pub fn idle_last_owned_by(&self, namespace: &str, pool: &str, owner: &str) -> Vec<Arc<IdlePod>> {
        self.with(|_, index| {
            let key = (namespace.to_owned(), pool.to_owned(), owner.to_owned());
            index.idle_by_last_owner.get(&key).into_iter().flat_map(|ranked| ranked.values().cloned()).collect()
        })
    }

    /// All pods of `pool`.
    pub fn in_pool(&self, namespace: &str, pool: &str) -> Vec<Arc<Pod>> {
        self.with(|objects, index| {
            let names = index.by_pool.get(&(namespace.to_owned(), pool.to_owned()));
            resolve(objects, namespace, names.into_iter().flatten())
        })
    }

    /// Pods whose `claim-uid` is `uid`.
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<Pod>> {
        self.with(|objects, index| {
            index.by_claim_uid.get(uid).into_iter().flatten().filter_map(|key| objects.get(key).cloned()).collect()
        })
    }

    /// Pods scheduled on `node`.
    pub fn on_node(&self, node: &str) -> Vec<Arc<Pod>> {
        self.with(|objects, index| {
            index.by_node.get(node).into_iter().flatten().filter_map(|key| objects.get(key).cloned()).collect()
        })
    }

    /// Pods whose CN store is `uuid`.
    pub fn with_store(&self, uuid: &str) -> Vec<Key> {
        self.with(|_, index| index.by_store.get(uuid).into_iter().flatten().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A CN pod as the server returns it, store-less (its UUID from its name
    /// and subdomain), with the bulk a rendered template carries.
    fn cn_pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "namespace": "tenants", "name": "pool-a-0", "uid": "u-0", "resourceVersion": "7",
                "creationTimestamp": "2026-12-01T00:00:00Z",
                "labels": {labels::POOL_NAME: "pool-a", labels::PHASE: "Idle"},
                "annotations": {labels::POD_DELETION_COST: "3"},
                "managedFields": [{"manager": "cnpool", "operation": "Update", "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:metadata": {"f:labels": {}}}}],
            },
            "spec": {
                "nodeName": "node-1", "subdomain": "pool-a", "hostname": "pool-a-0",
                "readinessGates": [{"conditionType": labels::KRUISE_READINESS_GATES[0]}],
                "containers": [{"name": "main", "image": "matrixorigin/matrixone:2.0",
                                "args": ["-cfg", "/etc/matrixone/config.toml"],
                                "volumeMounts": [{"name": "config", "mountPath": "/etc/matrixone"}]}],
                "volumes": [{"name": "config", "configMap": {"name": "pool-a-config"}}],
            },
            "status": {"phase": "Running", "podIP": "10.0.0.7",
                       "containerStatuses": [{"name": "main", "image": "matrixorigin/matrixone:2.0", "imageID": "",
                                              "ready": true, "restartCount": 0,
                                              "state": {"terminated": {"exitCode": 1}}}]},
        }))
        .expect("a valid pod")
    }

    #[test]
    fn a_trimmed_pod_reads_the_same_and_keeps_none_of_the_template() {
        let pod = cn_pod();
        let mut trimmed = pod.clone();
        trim(&mut trimmed);
        assert_eq!(own_view(&trimmed).ok(), own_view(&pod).ok(), "the decisions see the same pod");
        assert!(own_view(&trimmed).is_ok_and(|view| view.failed && view.node.as_deref() == Some("node-1")));
        let gates = |pod: &Pod| pod.spec.as_ref().and_then(|spec| spec.readiness_gates.clone());
        assert_eq!(gates(&trimmed), gates(&pod), "the kruise gates the takeover answers are kept");
        let spec = trimmed.spec.as_ref().expect("a spec");
        assert!(spec.containers.is_empty() && spec.volumes.is_none() && trimmed.metadata.managed_fields.is_none());
    }
}
