//! The indexed caches the controllers read, one watch per kind.
//!
//! Each kind has one informer ([`inform`]) that feeds both kube-runtime's
//! store (which the controller runtime reads objects from) and this
//! module's indexes, and reports every change as (old, new) to a handler
//! that decides whom it wakes. Indexes:
//! - pods by pool and phase, by claim UID, by CN store UUID, by node;
//! - claims by UID, by `spec.podName`, by `spec.sourcePod`, by pool and
//!   by the claim set that controls them;
//! - pools, with the revision of their current template;
//! - claim sets, by key only.
//!
//! No decision lists every object of a kind. Maps are ordered, so that
//! whatever walks them (a relist, a wake) does so in the same order in
//! every process: the simulator replays a seed byte for byte.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;
use std::ops::Bound;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use cnpool_api::{CNClaim, CNClaimSet, CNPool, labels};
use cnpool_core::candidates::age_rank;
use cnpool_core::model::PodView;
use futures::StreamExt;
use futures::future::Shared;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

/// Namespace and name of an object.
pub type Key = (String, String);

pub fn key_of<K: Resource>(object: &K) -> Key {
    (object.namespace().unwrap_or_default(), object.name_any())
}

/// One kind's objects by key, with its secondary indexes.
pub trait Index<K>: Default + Send + Sync {
    /// Adds or replaces `object`'s entries.
    fn insert(&mut self, object: &Arc<K>);
    /// Drops `object`'s entries.
    fn remove(&mut self, object: &Arc<K>);
}

/// A kind's objects and their indexes.
pub struct Cache<K, I> {
    inner: RwLock<(BTreeMap<Key, Arc<K>>, I)>,
}

impl<K, I: Default> Default for Cache<K, I> {
    fn default() -> Self {
        Self { inner: RwLock::new((BTreeMap::new(), I::default())) }
    }
}

impl<K: Resource, I: Index<K>> Cache<K, I> {
    fn read(&self) -> RwLockReadGuard<'_, (BTreeMap<Key, Arc<K>>, I)> {
        // Index updates are plain inserts and removes: a panicked writer
        // leaves them consistent.
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, (BTreeMap<Key, Arc<K>>, I)> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn get(&self, key: &Key) -> Option<Arc<K>> {
        self.read().0.get(key).cloned()
    }

    /// Whether the cache holds exactly this version of `object`.
    pub fn holds_version(&self, object: &K) -> bool {
        let cached = self.read().0.get(&key_of(object)).map(|cached| cached.meta().resource_version.clone());
        cached.is_some_and(|version| version.is_some() && version == object.meta().resource_version)
    }

    /// Reads the indexes.
    pub fn with<T>(&self, read: impl FnOnce(&BTreeMap<Key, Arc<K>>, &I) -> T) -> T {
        let guard = self.read();
        read(&guard.0, &guard.1)
    }

    /// Stores `object`; returns what it replaced.
    fn upsert(&self, object: Arc<K>) -> Option<Arc<K>> {
        let mut guard = self.write();
        let (objects, index) = &mut *guard;
        let old = objects.insert(key_of(object.as_ref()), object.clone());
        if let Some(old) = &old {
            index.remove(old);
        }
        index.insert(&object);
        old
    }

    fn delete(&self, key: &Key) -> Option<Arc<K>> {
        let mut guard = self.write();
        let (objects, index) = &mut *guard;
        let old = objects.remove(key);
        if let Some(old) = &old {
            index.remove(old);
        }
        old
    }

    fn keys(&self) -> Vec<Key> {
        self.read().0.keys().cloned().collect()
    }
}

fn add<A: Ord, B: Ord>(map: &mut BTreeMap<A, BTreeSet<B>>, at: A, value: B) {
    map.entry(at).or_default().insert(value);
}

fn drop_from<A: Ord, B: Ord>(map: &mut BTreeMap<A, BTreeSet<B>>, at: &A, value: &B) {
    if let Some(set) = map.get_mut(at) {
        set.remove(value);
        if set.is_empty() {
            map.remove(at);
        }
    }
}

fn label<'a, K: Resource>(object: &'a K, key: &str) -> Option<&'a str> {
    object.meta().labels.as_ref()?.get(key).map(String::as_str).filter(|value| !value.is_empty())
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
/// ([`crate::pool::own_view`]); the object is the one the view was read
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
            if let Some(view) = (phase == "Idle").then(|| crate::pool::own_view(pod).ok()).flatten() {
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
        self.revisions.insert(key_of(pool.as_ref()), crate::pool::template_revision(&pool.spec.template));
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

pub type Pods = Cache<Pod, PodIndex>;
pub type Claims = Cache<CNClaim, ClaimIndex>;
pub type Pools = Cache<CNPool, PoolIndex>;
pub type ClaimSets = Cache<CNClaimSet, NoIndex>;

impl Pods {
    /// Pods of `pool` in `phase` (as their label reads).
    pub fn in_pool_phase(&self, namespace: &str, pool: &str, phase: &str) -> Vec<Arc<Pod>> {
        self.with(|objects, index| {
            let names = index.by_pool_phase.get(&(namespace.to_owned(), pool.to_owned(), phase.to_owned()));
            resolve(objects, namespace, names.into_iter().flatten())
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

fn resolve<'a, K>(
    objects: &BTreeMap<Key, Arc<K>>,
    namespace: &str,
    names: impl Iterator<Item = &'a String>,
) -> Vec<Arc<K>> {
    names.filter_map(|name| objects.get(&(namespace.to_owned(), name.clone())).cloned()).collect()
}

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

/// A change the informer saw: the object before (none for a creation) and
/// after (none for a deletion).
pub type Change<'a, K> = (Option<&'a Arc<K>>, Option<&'a Arc<K>>);

/// Runs one kind's watch until `shutdown`: applies every event to the
/// controller runtime's store `writer` and to `cache`, then tells
/// `on_change`. Events of a relist are reported once the relist is complete,
/// when the runtime's store has them too; `on_first_list` is told once, when
/// the first list is.
pub async fn inform<K, I>(
    api: Api<K>,
    config: watcher::Config,
    mut writer: Writer<K>,
    cache: Arc<Cache<K, I>>,
    on_change: impl Fn(Change<'_, K>) + Send,
    on_first_list: impl FnOnce() + Send,
    shutdown: Shared<futures::future::BoxFuture<'static, ()>>,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
    I: Index<K>,
{
    let mut events = watcher(api, config).default_backoff().boxed();
    // The runtime's store and this cache share each object: the cache
    // takes the store's copy rather than keeping one of its own.
    let store = writer.as_reader();
    let mut relisted: Option<(BTreeSet<Key>, Vec<ObjectRef<K>>)> = None;
    let mut on_first_list = Some(on_first_list);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let event = tokio::select! {
            () = &mut shutdown => return,
            event = events.next() => event,
        };
        let event = match event {
            Some(Ok(event)) => event,
            Some(Err(error)) => {
                tracing::warn!(%error, "watch failed; retrying with backoff");
                continue;
            }
            None => return,
        };
        writer.apply_watcher_event(&event);
        match event {
            watcher::Event::Init => relisted = Some((BTreeSet::new(), Vec::new())),
            watcher::Event::InitApply(object) => {
                if let Some((seen, listed)) = relisted.as_mut() {
                    seen.insert(key_of(&object));
                    listed.push(ObjectRef::from_obj(&object));
                }
            }
            watcher::Event::InitDone => {
                let Some((seen, listed)) = relisted.take() else { continue };
                for key in cache.keys().into_iter().filter(|key| !seen.contains(key)) {
                    if let Some(old) = cache.delete(&key) {
                        on_change((Some(&old), None));
                    }
                }
                // In list order; the store holds the listed objects now.
                for object in listed.iter().filter_map(|reference| store.get(reference)) {
                    let old = cache.upsert(object.clone());
                    on_change((old.as_ref(), Some(&object)));
                }
                if let Some(first) = on_first_list.take() {
                    first();
                }
            }
            watcher::Event::Apply(object) => {
                let object = store.get(&ObjectRef::from_obj(&object)).unwrap_or_else(|| Arc::new(object));
                let old = cache.upsert(object.clone());
                on_change((old.as_ref(), Some(&object)));
            }
            watcher::Event::Delete(object) => {
                let object = Arc::new(object);
                let old = cache.delete(&key_of(object.as_ref())).unwrap_or(object);
                on_change((Some(&old), None));
            }
        }
    }
}
