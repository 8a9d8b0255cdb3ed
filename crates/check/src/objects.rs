//! The model's API objects: a pod and a claim reduced to the fields the
//! protocol reads and writes, convertible to the Kubernetes objects the
//! production code takes, and the server's rule for applying a guarded pod
//! patch.

use std::collections::{BTreeMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex, OnceLock};

use cnpool_api::{CNClaim, CNClaimSpec, CNClaimStatus, CNLabel, CNStoreStatus, ClaimPhase, PodPhase, PodRef, labels};
use cnpool_core::claim::LossReason;
use cnpool_core::model::{ClaimView, PodView, PoolView};
use cnpool_registry::{StoreLabels, WorkState};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde_json::{Value, json};

use crate::Error;

pub(crate) const NAMESPACE: &str = "default";
pub(crate) const POOL: &str = "pool";
const REVISION: &str = "r1";

/// The time every decision is taken at. The model has no clock: every bound
/// the protocol waits out (store-missing, propagation delay, minimum rest)
/// has passed when a decision is taken (see docs/model-checking.md).
pub(crate) fn now() -> Timestamp {
    Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_hours(24)
}

/// The operator's cutover time (recorded at its first start): the claims a
/// configuration starts with were created before it, a claim created again
/// under a name after it (`ClaimObj::created_late`).
pub(crate) fn cutover() -> Timestamp {
    Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_hours(1)
}

/// The pool every pod belongs to: no minimum rest, so that a drained pod
/// returns to Idle at its next store reconcile.
pub(crate) fn pool() -> PoolView {
    PoolView {
        name: POOL.to_owned(),
        current_revision: REVISION.to_owned(),
        max_idle: 0,
        max_pods: None,
        drain_timeout: std::time::Duration::from_secs(3600),
        min_delay: std::time::Duration::ZERO,
        reclaim_timeout: None,
        deleting: false,
        pod_labels: Default::default(),
    }
}

/// A value derived from an object, computed once per version: the model
/// reads the same versions again and again (every state shares them), and
/// converting one to the Kubernetes object and reading its view is most of
/// the cost of a step. It takes no part in equality or hashing, and a copy
/// starts empty, so that a copy changed afterwards never keeps the memo of
/// what it was copied from: change objects by copying, never in place.
pub struct Memo<T>(OnceLock<T>);

impl<T> Default for Memo<T> {
    fn default() -> Self {
        Self(OnceLock::new())
    }
}

impl<T> Memo<T> {
    fn get_or_init(&self, init: impl FnOnce() -> T) -> &T {
        self.0.get_or_init(init)
    }
}

impl<T> Clone for Memo<T> {
    fn clone(&self) -> Self {
        Self(OnceLock::new())
    }
}

impl<T> PartialEq for Memo<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> Eq for Memo<T> {}

impl<T> std::hash::Hash for Memo<T> {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

impl<T> std::fmt::Debug for Memo<T> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("_")
    }
}

/// Something the model keeps by name.
pub trait Named {
    fn name(&self) -> &str;
}

/// The objects of one kind, by name: a handful (a config's pods, claims or
/// stores), so a vector sorted by name, shared by every state that holds
/// the same set (a cache the watch just delivered shares the server's). A
/// clone is a reference count; a change copies the few pointers.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Objects<T>(Arc<Vec<Arc<T>>>);

impl<T> Clone for Objects<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T> Default for Objects<T> {
    fn default() -> Self {
        Self(Arc::new(Vec::new()))
    }
}

impl<T: Named> Objects<T> {
    pub fn get(&self, name: &str) -> Option<&Arc<T>> {
        self.0.iter().find(|object| object.name() == name)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn values(&self) -> impl Iterator<Item = &Arc<T>> {
        self.0.iter()
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|object| object.name())
    }

    /// Puts `object` in, in place of the one of its name.
    pub fn insert(&mut self, object: Arc<T>) {
        let objects = Arc::make_mut(&mut self.0);
        match objects.binary_search_by(|held| held.name().cmp(object.name())) {
            Ok(index) => objects[index] = object,
            Err(index) => objects.insert(index, object),
        }
    }

    pub fn remove(&mut self, name: &str) {
        if self.contains_key(name) {
            Arc::make_mut(&mut self.0).retain(|object| object.name() != name);
        }
    }

    /// The same objects, each replaced by `map` of it (names may change).
    pub fn mapped(&self, map: impl FnMut(&Arc<T>) -> Arc<T>) -> Self {
        self.0.iter().map(map).collect()
    }
}

impl<T: Named> FromIterator<Arc<T>> for Objects<T> {
    fn from_iter<I: IntoIterator<Item = Arc<T>>>(objects: I) -> Self {
        let mut objects: Vec<Arc<T>> = objects.into_iter().collect();
        objects.sort_by(|a, b| a.name().cmp(b.name()));
        Self(Arc::new(objects))
    }
}

/// One shared copy of each object version the model has made: equal
/// versions are one allocation, so a version's memos (its view, its hash,
/// its claim-swapped twin) are computed once for the whole run, and
/// comparing two states mostly compares pointers. Versions are few (a
/// few thousand); they are kept to the end.
pub struct Interner<T>(Mutex<HashSet<Arc<T>>>);

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Self(Mutex::new(HashSet::new()))
    }
}

impl<T: Hash + Eq> Interner<T> {
    pub fn intern(&self, object: T) -> Arc<T> {
        let Ok(mut known) = self.0.lock() else { return Arc::new(object) };
        if let Some(shared) = known.get(&object) {
            return shared.clone();
        }
        let shared = Arc::new(object);
        known.insert(shared.clone());
        shared
    }
}

/// The renaming that swaps two interchangeable claims: their names, and
/// the UIDs of every generation of them (`<name>-<generation>`).
#[derive(Clone, Debug)]
pub struct ClaimSwap {
    pub first: String,
    pub second: String,
}

impl ClaimSwap {
    /// `text` with the claims swapped when it is a claim's name or UID;
    /// any other text unchanged.
    pub fn text(&self, text: &str) -> String {
        let swap = |from: &str, to: &str| -> Option<String> {
            if text == from {
                return Some(to.to_owned());
            }
            let generation = text.strip_prefix(from)?.strip_prefix('-')?;
            generation.parse::<u8>().ok().map(|_| format!("{to}-{generation}"))
        };
        swap(&self.first, &self.second).or_else(|| swap(&self.second, &self.first)).unwrap_or_else(|| text.to_owned())
    }

    /// Store labels with every value renamed (a claim's CN labels carry its
    /// name).
    pub fn store_labels(&self, labels: &StoreLabels) -> StoreLabels {
        labels
            .iter()
            .map(|(key, values)| (key.clone(), values.iter().map(|value| self.text(value)).collect()))
            .collect()
    }

    /// A pod's labels and annotations renamed: `claimed-by`, `claim-uid`
    /// and the CN labels in the binding annotation (re-rendered by the
    /// production renderer, so that the bytes are the ones a write makes).
    pub fn pod(&self, pod: &PodObj) -> PodObj {
        let labels = pod.labels.iter().map(|(key, value)| (key.clone(), self.text(value))).collect();
        let mut annotations = BTreeMap::new();
        for (key, value) in &pod.annotations {
            let value = if key == labels::BINDING {
                match cnpool_core::binding::Binding::parse(value) {
                    Ok(mut binding) => {
                        binding.cn_labels = self.store_labels(&binding.cn_labels);
                        binding.render()
                    }
                    // Not one the protocol wrote: nothing of a claim's in it.
                    Err(_) => value.clone(),
                }
            } else {
                self.text(value)
            };
            annotations.insert(key.clone(), value);
        }
        PodObj {
            labels,
            annotations,
            view: Memo::default(),
            hash: Memo::default(),
            twin: Memo::default(),
            ..pod.clone()
        }
    }

    /// A claim renamed: its name and UID, and the values of its additional
    /// pod labels, as [`Self::pod`] renames the pods' label values (they may
    /// name a claim, and reach a pod). What it points at are pods.
    pub fn claim(&self, claim: &ClaimObj) -> ClaimObj {
        let additional_pod_labels =
            claim.additional_pod_labels.iter().map(|(key, value)| (key.clone(), self.text(value))).collect();
        ClaimObj {
            name: self.text(&claim.name),
            uid: self.text(&claim.uid),
            additional_pod_labels,
            view: Memo::default(),
            hash: Memo::default(),
            twin: Memo::default(),
            ..claim.clone()
        }
    }
}

/// The claim-swapped twin of an interned version, memoised both ways (the
/// twin's twin is `object` itself).
pub(crate) fn twin_of<T: Hash + Eq>(
    object: &Arc<T>,
    memo: impl Fn(&T) -> &Memo<Arc<T>>,
    interner: &Interner<T>,
    rename: impl FnOnce(&T) -> T,
) -> Arc<T> {
    memo(object)
        .get_or_init(|| {
            let twin = interner.intern(rename(object));
            if !Arc::ptr_eq(&twin, object) {
                let _ = memo(&twin).0.set(object.clone());
            }
            twin
        })
        .clone()
}

/// A pool pod as the server stores it (only what the protocol touches).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodObj {
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// A deletion timestamp is set (the store finalizer holds the pod).
    pub deleting: bool,
    /// Status phase Failed.
    pub failed: bool,
    /// Its view, once read (`None`: it does not read).
    pub view: Memo<Option<PodView>>,
    /// The hash of its content, once computed.
    pub hash: Memo<u64>,
    /// Its twin with the claims swapped, once made (an interned version's).
    pub twin: Memo<Arc<PodObj>>,
}

impl Named for PodObj {
    fn name(&self) -> &str {
        &self.name
    }
}

/// Every state holds the same versions several times (the server's, each
/// cache's): each version's content is hashed once.
impl std::hash::Hash for PodObj {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let Self { name, uid, labels, annotations, deleting, failed, view: _, hash, twin: _ } = self;
        state.write_u64(*hash.get_or_init(|| content_hash(&(name, uid, labels, annotations, deleting, failed))));
    }
}

/// A hash of `content`, the same in every thread of the process.
fn content_hash<T: std::hash::Hash>(content: &T) -> u64 {
    use std::hash::Hasher;
    let mut hasher = std::hash::DefaultHasher::new();
    content.hash(&mut hasher);
    hasher.finish()
}

impl PodObj {
    /// A pod of the pool in `phase`, unowned.
    pub fn new(name: &str, generation: u8, phase: PodPhase) -> Self {
        let labels = [
            (labels::PHASE, phase.as_str()),
            (labels::POOL_NAME, POOL),
            (labels::REVISION, REVISION),
            (labels::CN_UUID, &store_uuid(name)),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect();
        Self {
            name: name.to_owned(),
            uid: format!("{name}-{generation}"),
            labels,
            annotations: BTreeMap::new(),
            deleting: false,
            failed: false,
            view: Memo::default(),
            hash: Memo::default(),
            twin: Memo::default(),
        }
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }

    pub fn claim_uid(&self) -> Option<&str> {
        self.label(labels::CLAIM_UID)
    }

    pub fn phase(&self) -> Option<PodPhase> {
        self.label(labels::PHASE).and_then(PodPhase::parse)
    }

    /// The Kubernetes pod the production code reads.
    pub fn to_pod(&self) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(NAMESPACE.to_owned()),
                uid: Some(self.uid.clone()),
                labels: Some(self.labels.clone()),
                annotations: Some(self.annotations.clone()),
                creation_timestamp: Some(Time(Timestamp::UNIX_EPOCH)),
                deletion_timestamp: self.deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
                finalizers: Some(vec![labels::CN_DRAINING_FINALIZER.to_owned()]),
                ..ObjectMeta::default()
            },
            status: self.failed.then(|| PodStatus { phase: Some("Failed".to_owned()), ..PodStatus::default() }),
            ..Pod::default()
        }
    }

    /// The decision core's view, read by the production reader.
    pub fn view(&self) -> Result<PodView, Error> {
        let read = || cnpool_core::convert::pod_view(&self.to_pod(), false);
        match self.view.get_or_init(|| read().ok()) {
            Some(view) => Ok(view.clone()),
            None => Ok(read()?),
        }
    }

    /// Applies a JSON patch as the API server does: the whole patch or
    /// nothing. `Ok(None)` is the server's 422: a `test` failed, so the
    /// decision that built the patch was stale.
    pub fn patched(&self, operations: &[Value]) -> Result<Option<PodObj>, Error> {
        let mut document = json!({"metadata": {"labels": self.labels, "annotations": self.annotations}});
        // The real server takes a `test` of null on an absent path as a
        // success; json-patch does not, so such tests are settled first,
        // exactly as the embedded server (crates/apiserver/src/patch.rs) does.
        let mut kept = Vec::with_capacity(operations.len());
        for operation in operations {
            if operation["op"] == "test" && operation.get("value").is_some_and(Value::is_null) {
                let path = operation["path"].as_str().unwrap_or_default();
                match document.pointer(path) {
                    None | Some(Value::Null) => continue,
                    Some(_) => return Ok(None),
                }
            }
            kept.push(operation.clone());
        }
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(kept)).map_err(Error::Patch)?;
        if json_patch::patch(&mut document, &patch).is_err() {
            return Ok(None);
        }
        let map = |value: &Value| -> Result<BTreeMap<String, String>, Error> {
            serde_json::from_value(value.clone()).map_err(Error::Patch)
        };
        let labels = map(&document["metadata"]["labels"])?;
        let annotations = map(&document["metadata"]["annotations"])?;
        Ok(Some(PodObj { labels, annotations, ..self.clone() }))
    }
}

/// The CN store UUID of a pod: by its name, as its DNS name gives it, so a
/// pod recreated under the same name has the same store.
pub(crate) fn store_uuid(pod: &str) -> String {
    format!("store-{pod}")
}

/// A CNClaim as the server stores it (only what the protocol touches).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimObj {
    pub name: String,
    pub uid: String,
    pub deleting: bool,
    pub finalizer: bool,
    /// `spec.podName`.
    pub pod_name: Option<String>,
    /// `spec.sourcePod.podName`.
    pub source_pod: Option<String>,
    /// `spec.additionalPodLabels`: a reserved key there (an owner key
    /// naming another claim) fails validation, and the claim is refused.
    pub additional_pod_labels: BTreeMap<String, String>,
    /// `status.phase`.
    pub phase: Option<ClaimPhase>,
    /// The `recorded-pod` annotation: name and UID.
    pub recorded: Option<(String, String)>,
    /// `status.store`: the pod's name and, when cnpool wrote it, its UID
    /// (the Go operator records the name only).
    pub status_pod: Option<(String, Option<String>)>,
    /// The reason of the Bound condition when the claim went Lost.
    pub lost: Option<LossReason>,
    /// Created after the operator's cutover (a claim created again under
    /// its name): it never adopts a pod the Go operator bound to the name.
    pub created_late: bool,
    /// Its view, once read (`None`: it does not read).
    pub view: Memo<Option<ClaimView>>,
    /// The hash of its content, once computed.
    pub hash: Memo<u64>,
    /// Its twin with the claims swapped, once made (an interned version's).
    pub twin: Memo<Arc<ClaimObj>>,
}

impl Named for ClaimObj {
    fn name(&self) -> &str {
        &self.name
    }
}

impl std::hash::Hash for ClaimObj {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let Self {
            name,
            uid,
            deleting,
            finalizer,
            pod_name,
            source_pod,
            additional_pod_labels,
            phase,
            recorded,
            status_pod,
            lost,
            created_late,
            view: _,
            hash,
            twin: _,
        } = self;
        let content = (name, uid, deleting, finalizer, pod_name, source_pod, phase, recorded, status_pod, lost);
        state.write_u64(*hash.get_or_init(|| content_hash(&(content, additional_pod_labels, created_late))));
    }
}

impl ClaimObj {
    pub fn new(name: &str, generation: u8) -> Self {
        Self {
            name: name.to_owned(),
            uid: format!("{name}-{generation}"),
            deleting: false,
            finalizer: false,
            pod_name: None,
            source_pod: None,
            additional_pod_labels: BTreeMap::new(),
            phase: None,
            recorded: None,
            status_pod: None,
            lost: None,
            created_late: generation > 1,
            view: Memo::default(),
            hash: Memo::default(),
            twin: Memo::default(),
        }
    }

    /// The claim created again from the same manifest: its spec, a new UID
    /// (generation `generation`), no status.
    pub fn recreated(&self, generation: u8) -> Self {
        Self {
            pod_name: self.pod_name.clone(),
            additional_pod_labels: self.additional_pod_labels.clone(),
            ..Self::new(&self.name, generation)
        }
    }

    /// The labels the claim asks its store to carry.
    pub fn cn_labels(&self) -> StoreLabels {
        [("account".to_owned(), vec![self.name.clone()])].into_iter().collect()
    }

    /// The Kubernetes object the production reader takes.
    fn to_claim(&self) -> CNClaim {
        let mut annotations = BTreeMap::new();
        if let Some((name, uid)) = &self.recorded {
            annotations.insert(labels::RECORDED_POD.to_owned(), format!("{name}/{uid}"));
        }
        let spec = CNClaimSpec {
            pod_name: self.pod_name.clone().unwrap_or_default(),
            source_pod: self.source_pod.as_ref().map(|pod| PodRef { pod_name: pod.clone(), node_name: String::new() }),
            cn_labels: vec![CNLabel { key: "account".to_owned(), values: vec![self.name.clone()] }],
            additional_pod_labels: self.additional_pod_labels.clone(),
            pool_name: POOL.to_owned(),
            ..CNClaimSpec::default()
        };
        let mut claim = CNClaim::new(&self.name, spec);
        claim.metadata = ObjectMeta {
            name: Some(self.name.clone()),
            namespace: Some(NAMESPACE.to_owned()),
            uid: Some(self.uid.clone()),
            annotations: Some(annotations),
            finalizers: self.finalizer.then(|| vec![labels::CLAIM_FINALIZER.to_owned()]),
            deletion_timestamp: self.deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
            creation_timestamp: Some(Time(if self.created_late { now() } else { Timestamp::UNIX_EPOCH })),
            ..ObjectMeta::default()
        };
        let store = self.status_pod.as_ref().map(|(name, uid)| {
            let mut store = CNStoreStatus { pod_uid: uid.clone(), ..CNStoreStatus::default() };
            match uid {
                Some(_) => store.set_pod_name(name),
                // The Go operator's key only.
                None => store.legacy_pod_name = Some(name.clone()),
            }
            store
        });
        claim.status = Some(CNClaimStatus { phase: self.phase, store, ..CNClaimStatus::default() });
        claim
    }

    /// The decision core's view, read by the production reader.
    pub fn view(&self) -> Result<ClaimView, Error> {
        let read = || cnpool_core::convert::claim_view(&self.to_claim());
        match self.view.get_or_init(|| read().ok()) {
            Some(view) => Ok(view.clone()),
            None => Ok(read()?),
        }
    }

    /// Whether the claim shows Bound (or Outdated): it says it holds a pod.
    pub fn holds(&self) -> bool {
        matches!(self.phase, Some(ClaimPhase::Bound | ClaimPhase::Outdated))
    }

    /// Whether it points at `pod` by `spec.podName` or `spec.sourcePod`.
    pub fn points_at(&self, pod: &str) -> bool {
        self.pod_name.as_deref() == Some(pod) || self.source_pod.as_deref() == Some(pod)
    }
}

/// A CN store in the simulated HAKeeper.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StoreRec {
    /// The pod whose CN registered it.
    pub pod: String,
    /// HAKeeper's work state, by its wire code (ordered for the state).
    pub state: i32,
    pub labels: StoreLabels,
}

impl StoreRec {
    /// A store as a fresh CN registers it: HAKeeper stores state 0 as
    /// Working, with no labels.
    pub fn registered(pod: &str) -> Self {
        Self { pod: pod.to_owned(), state: WorkState::Working.code(), labels: StoreLabels::new() }
    }

    pub fn work_state(&self) -> WorkState {
        WorkState::from_code(self.state)
    }

    /// Released: Draining with no labels.
    pub fn draining(pod: &str) -> Self {
        Self { pod: pod.to_owned(), state: WorkState::Draining.code(), labels: StoreLabels::new() }
    }
}

impl Named for StoreRec {
    fn name(&self) -> &str {
        &self.pod
    }
}
