//! The generic part of the caches: one kind's objects by key with its
//! indexes ([`Cache`]), and the informer that keeps them ([`inform`]).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use futures::StreamExt;
use futures::future::Shared;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};

use crate::key::{Key, key_of};

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
    pub(super) fn upsert(&self, object: Arc<K>) -> Option<Arc<K>> {
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

pub(super) fn add<A: Ord, B: Ord>(map: &mut BTreeMap<A, BTreeSet<B>>, at: A, value: B) {
    map.entry(at).or_default().insert(value);
}

pub(super) fn drop_from<A: Ord, B: Ord>(map: &mut BTreeMap<A, BTreeSet<B>>, at: &A, value: &B) {
    if let Some(set) = map.get_mut(at) {
        set.remove(value);
        if set.is_empty() {
            map.remove(at);
        }
    }
}

pub(super) fn label<'a, K: Resource>(object: &'a K, key: &str) -> Option<&'a str> {
    object.meta().labels.as_ref()?.get(key).map(String::as_str).filter(|value| !value.is_empty())
}
pub(super) fn resolve<'a, K>(
    objects: &BTreeMap<Key, Arc<K>>,
    namespace: &str,
    names: impl Iterator<Item = &'a String>,
) -> Vec<Arc<K>> {
    names.filter_map(|name| objects.get(&(namespace.to_owned(), name.clone())).cloned()).collect()
}

/// A change the informer saw: the object before (none for a creation) and
/// after (none for a deletion).
pub type Change<'a, K> = (Option<&'a Arc<K>>, Option<&'a Arc<K>>);

/// What an informer reports besides its changes.
pub struct Progress<D, L> {
    /// Told of every event, a relist's included: the watch delivers.
    pub delivered: D,
    /// Told once, when the first list is complete.
    pub first_list: L,
}

/// Runs one kind's watch (`events`, a [`watcher`] stream, cut down as the
/// caller wants with `.modify()`) until `shutdown`: applies every event to the
/// controller runtime's store `writer` and to `cache`, then tells
/// `on_change`, and its [`Progress`] to `progress`. Events of a relist are
/// reported once the relist is complete, when the runtime's store has them
/// too.
pub async fn inform<K, I>(
    events: impl futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    mut writer: Writer<K>,
    cache: Arc<Cache<K, I>>,
    on_change: impl Fn(Change<'_, K>) + Send,
    progress: Progress<impl Fn() + Send, impl FnOnce() + Send>,
    shutdown: Shared<futures::future::BoxFuture<'static, ()>>,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
    I: Index<K>,
{
    let mut events = events.default_backoff().boxed();
    // The runtime's store and this cache share each object: the cache
    // takes the store's copy rather than keeping one of its own.
    let store = writer.as_reader();
    let mut relisted: Option<(BTreeSet<Key>, Vec<ObjectRef<K>>)> = None;
    let Progress { delivered, first_list } = progress;
    let mut on_first_list = Some(first_list);
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
        delivered();
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
