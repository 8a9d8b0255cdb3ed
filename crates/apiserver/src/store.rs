//! The object store and the write semantics of the real API server.
//!
//! All objects live in one map under one mutex, and every committed write
//! takes the next value of one cluster-wide resourceVersion counter, is
//! appended to a bounded history (what watches resume from) and is
//! broadcast to live watches — all while the lock is held, so watchers see
//! writes in exactly the order they were committed.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::clock::{Clock, Ids, rfc3339};
use crate::error::ApiError;
use crate::meta::{self, meta_mut};
use crate::resources::{self, Conversion, ResourceInfo, StorageKey};
use crate::schema;
use crate::selectors::{FieldSelector, LabelSelector};

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One committed write.
#[derive(Debug)]
pub struct Event {
    pub resource_version: u64,
    pub storage: StorageKey,
    pub event_type: EventType,
    /// The object before the write (none for a creation).
    pub old: Option<Value>,
    /// The object after the write; for a deletion, its last state.
    pub object: Value,
    /// Its watch lines as rendered so far, by API version and event type:
    /// every watch of a kind sends the same bytes, encoded once.
    rendered: Mutex<Vec<(String, EventType, bytes::Bytes)>>,
}

impl Event {
    pub fn new(
        resource_version: u64,
        storage: StorageKey,
        event_type: EventType,
        old: Option<Value>,
        object: Value,
    ) -> Self {
        Self { resource_version, storage, event_type, old, object, rendered: Mutex::default() }
    }

    pub fn namespace(&self) -> &str {
        meta::str_field(&self.object, "namespace").unwrap_or_default()
    }

    /// The watch line that shows this event as `event_type` in
    /// `api_version`: `render`'s, made once and then shared.
    pub(crate) fn line(
        &self,
        api_version: &str,
        event_type: EventType,
        render: impl FnOnce() -> bytes::Bytes,
    ) -> bytes::Bytes {
        let mut rendered = self.rendered.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, _, line)) = rendered.iter().find(|(version, of, _)| version == api_version && *of == event_type)
        {
            return line.clone();
        }
        let line = render();
        rendered.push((api_version.to_owned(), event_type, line.clone()));
        line
    }
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Main,
    Status,
}

/// How a delete treats the object's dependents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Propagation {
    #[default]
    Background,
    Foreground,
    Orphan,
}

/// Query options of create, update and patch.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: check everything, store nothing.
    pub dry_run: bool,
    /// `fieldValidation=Strict`: unknown fields are an error, not pruned.
    pub strict: bool,
}

#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub propagation: Propagation,
    pub grace_period_seconds: Option<i64>,
    pub dry_run: bool,
}

type ObjectKey = (String, String);

struct Inner {
    revision: u64,
    resources: BTreeMap<(String, String, String), Arc<ResourceInfo>>,
    objects: HashMap<StorageKey, BTreeMap<ObjectKey, Value>>,
    /// uid → where the object is, for owner look-ups.
    by_uid: HashMap<String, (StorageKey, ObjectKey)>,
    /// owner uid → dependents.
    dependents: HashMap<String, BTreeSet<(StorageKey, ObjectKey)>>,
    history: VecDeque<Arc<Event>>,
    history_limit: usize,
    ids: Ids,
    next_cluster_ip: u32,
    /// Objects that may have lost all their owners: the collector checks them.
    gc_candidates: VecDeque<(StorageKey, ObjectKey)>,
    /// Objects being deleted: the collector may have work on them.
    deleting: BTreeSet<(StorageKey, ObjectKey)>,
    /// The version at which a CRD's resource began to be served: like the
    /// real server's watch cache, nothing older can be watched from.
    served_since: HashMap<StorageKey, u64>,
}

pub struct Store {
    inner: Mutex<Inner>,
    events: broadcast::Sender<Arc<Event>>,
    clock: Arc<dyn Clock>,
}

/// Where a watch begins: what it replays, then what it follows.
pub struct WatchStart {
    pub backlog: Vec<Arc<Event>>,
    pub receiver: broadcast::Receiver<Arc<Event>>,
    /// The store's version when the watch began.
    pub revision: u64,
}

/// Where a request points.
pub struct Target<'a> {
    pub resource: &'a ResourceInfo,
    pub namespace: Option<&'a str>,
}

const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";
const DEFAULT_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

impl Store {
    pub fn new(seed: u64, history_limit: usize, clock: Arc<dyn Clock>) -> Self {
        let mut resources = BTreeMap::new();
        for info in resources::builtins() {
            resources.insert((info.group.clone(), info.version.clone(), info.plural.clone()), Arc::new(info));
        }
        let (events, _) = broadcast::channel(history_limit.max(1024));
        let store = Self {
            inner: Mutex::new(Inner {
                revision: 0,
                resources,
                objects: HashMap::new(),
                by_uid: HashMap::new(),
                dependents: HashMap::new(),
                history: VecDeque::new(),
                history_limit: history_limit.max(1),
                ids: Ids::new(seed),
                next_cluster_ip: 1,
                gc_candidates: VecDeque::new(),
                deleting: BTreeSet::new(),
                served_since: HashMap::new(),
            }),
            events,
            clock,
        };
        let namespaces = store.lookup("", "v1", "namespaces");
        for name in DEFAULT_NAMESPACES {
            if let Some(info) = &namespaces {
                let target = Target { resource: info, namespace: None };
                // Creating a fixed, valid namespace in an empty store cannot fail.
                let _ = store.create(&target, json!({"metadata": {"name": name}}), WriteOptions::default());
            }
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn now(&self) -> jiff::Timestamp {
        self.clock.now()
    }

    /// Every committed write from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.events.subscribe()
    }

    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.lock().resources.get(&(group.to_string(), version.to_string(), plural.to_string())).cloned()
    }

    /// All served resources, in a stable order.
    pub fn resources(&self) -> Vec<Arc<ResourceInfo>> {
        self.lock().resources.values().cloned().collect()
    }

    pub fn get(&self, target: &Target, name: &str) -> Result<Value, ApiError> {
        let inner = self.lock();
        let object = inner.get(target, name)?;
        Ok(present(target.resource, object.clone()))
    }

    pub fn list(
        &self,
        target: &Target,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<Value, ApiError> {
        let inner = self.lock();
        let start = match continue_token {
            Some(token) => Some(decode_continue(token, inner.oldest_revision())?),
            None => None,
        };
        let mut items = Vec::new();
        let mut next = None;
        let mut remaining = 0usize;
        if let Some(objects) = inner.objects.get(&target.resource.storage) {
            for (key, object) in objects {
                if target.namespace.is_some_and(|ns| ns != key.0) || start.as_ref().is_some_and(|s| key <= s) {
                    continue;
                }
                if !labels.matches(object) || !fields.matches(object) {
                    continue;
                }
                if limit.is_some_and(|limit| items.len() >= limit) {
                    remaining += 1;
                    continue;
                }
                next = Some(key.clone());
                items.push(present(target.resource, object.clone()));
            }
        }
        let mut metadata = json!({"resourceVersion": inner.revision.to_string()});
        if remaining > 0
            && let Some(last) = next
        {
            metadata["continue"] = json!(encode_continue(inner.revision, &last));
            metadata["remainingItemCount"] = json!(remaining);
        }
        Ok(json!({
            "apiVersion": target.resource.api_version(),
            "kind": target.resource.list_kind(),
            "metadata": metadata,
            "items": items,
        }))
    }

    pub fn create(&self, target: &Target, mut object: Value, options: WriteOptions) -> Result<Value, ApiError> {
        let res = target.resource;
        let mut inner = self.lock();
        object = restore(res, object);
        check_kind(res, &object)?;
        let namespace = inner.check_namespace(target, &object, true)?;
        let mut name = meta::name(&object).to_string();
        if name.is_empty() {
            let Some(prefix) = meta::str_field(&object, "generateName").map(ToString::to_string) else {
                return Err(ApiError::invalid(
                    &res.kind,
                    "",
                    vec![("metadata.name".into(), "Required value: name or generateName is required".into())],
                ));
            };
            name = format!("{prefix}{}", inner.ids.suffix());
        }
        validate_name(res, &name)?;
        if inner
            .objects
            .get(&res.storage)
            .is_some_and(|objects| objects.contains_key(&(namespace.clone(), name.clone())))
        {
            return Err(ApiError::already_exists(&res.qualified(), &name));
        }
        let now = rfc3339(self.clock.now());
        let uid = inner.ids.uid();
        {
            let map = meta_mut(&mut object);
            map.insert("name".into(), json!(name));
            if res.namespaced {
                map.insert("namespace".into(), json!(namespace));
            }
            map.insert("uid".into(), json!(uid));
            map.insert("creationTimestamp".into(), json!(now));
            for key in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"] {
                map.remove(key);
            }
            if tracks_generation(res) {
                map.insert("generation".into(), json!(1));
            } else {
                map.remove("generation");
            }
        }
        if res.status
            && let Some(map) = object.as_object_mut()
        {
            // The real server ignores status on create when it has a subresource.
            map.remove("status");
        }
        inner.apply_defaults(res, &mut object, options.strict)?;
        validate_schema(res, &object)?;
        if options.dry_run {
            return Ok(present(res, object));
        }
        let stored = inner.commit(&self.events, res.storage.clone(), EventType::Added, None, object);
        inner.after_create(&self.events, res, &stored, &now);
        Ok(present(res, stored))
    }

    /// A PUT: replaces the object (or its status).
    pub fn update(
        &self,
        target: &Target,
        name: &str,
        body: Value,
        part: Part,
        options: WriteOptions,
    ) -> Result<Value, ApiError> {
        let res = target.resource;
        let body = restore(res, body);
        check_kind(res, &body)?;
        if meta::str_field(&body, "resourceVersion").is_none() && res.custom {
            return Err(ApiError::invalid(
                &res.kind,
                name,
                vec![("metadata.resourceVersion".into(), "Invalid value: 0x0: must be specified for an update".into())],
            ));
        }
        self.write(target, name, part, options, |_| Ok(body))
    }

    /// Applies a patch of `content_type` to the object (or its status).
    pub fn patch(
        &self,
        target: &Target,
        name: &str,
        content_type: &str,
        patch: &[u8],
        part: Part,
        options: WriteOptions,
    ) -> Result<Value, ApiError> {
        let res = target.resource;
        let kind = crate::patch::PatchKind::from_content_type(content_type, res.custom)?;
        let patch = crate::patch::parse(kind, patch)?;
        self.write(target, name, part, options, |current| crate::patch::apply(kind, current, &patch))
    }

    /// The shared path of every update and patch.
    fn write(
        &self,
        target: &Target,
        name: &str,
        part: Part,
        options: WriteOptions,
        change: impl FnOnce(Value) -> Result<Value, ApiError>,
    ) -> Result<Value, ApiError> {
        let res = target.resource;
        let mut inner = self.lock();
        let current = inner.get(target, name)?.clone();
        let mut object = restore(res, change(present(res, current.clone()))?);
        if !object.is_object() {
            return Err(ApiError::bad_request("the request body must be a JSON object"));
        }
        let current_version = meta::str_field(&current, "resourceVersion").unwrap_or_default();
        if let Some(version) = meta::str_field(&object, "resourceVersion")
            && version != current_version
        {
            return Err(ApiError::conflict(&res.qualified(), name));
        }
        if let Some(uid) = meta::str_field(&object, "uid")
            && uid != meta::uid(&current)
        {
            return Err(ApiError::precondition_failed(
                &res.qualified(),
                name,
                &format!("UID in precondition: {uid}, UID in object meta: {}", meta::uid(&current)),
            ));
        }
        if meta::name(&object) != name && !meta::name(&object).is_empty() {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta::name(&object)
            )));
        }
        keep_immutable_metadata(&mut object, &current);
        match (part, res.status) {
            (Part::Main, true) => set_status(&mut object, current.get("status").cloned()),
            (Part::Status, _) => {
                let status = object.get("status").cloned();
                object = current.clone();
                set_status(&mut object, status);
            }
            (Part::Main, false) => {}
        }
        if res.custom
            && let Some(schema) = &res.schema
        {
            refuse_unknown(res, schema::default_and_prune(&mut object, schema), options.strict)?;
        }
        validate_schema(res, &object)?;
        if meta::is_deleting(&current) {
            let old = meta::finalizers(&current);
            let added: Vec<String> = meta::finalizers(&object).into_iter().filter(|f| !old.contains(f)).collect();
            if !added.is_empty() {
                return Err(ApiError::invalid(
                    &res.kind,
                    name,
                    vec![(
                        "metadata.finalizers".into(),
                        format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                        ),
                    )],
                ));
            }
        }
        if tracks_generation(res) && meta::spec_part(&object) != meta::spec_part(&current) {
            let generation = meta::meta(&current)["generation"].as_i64().unwrap_or(1);
            meta_mut(&mut object).insert("generation".into(), json!(generation + 1));
        }
        if meta::without_version(&object) == meta::without_version(&current) || options.dry_run {
            // Nothing changed: the real server neither bumps the version nor
            // notifies watchers.
            return Ok(present(res, if options.dry_run { object } else { current }));
        }
        if meta::is_deleting(&object) && !has_finalizers(&object) && !is_graceful_pod(res, &object) {
            let removed = inner.remove(&self.events, &res.storage, Some(current), object);
            inner.collect_garbage(&self.events, &self.clock);
            return Ok(present(res, removed));
        }
        let stored = inner.commit(&self.events, res.storage.clone(), EventType::Modified, Some(current), object);
        inner.collect_garbage(&self.events, &self.clock);
        Ok(present(res, stored))
    }

    pub fn delete(&self, target: &Target, name: &str, options: &DeleteOptions) -> Result<Value, ApiError> {
        let res = target.resource;
        let mut inner = self.lock();
        let current = inner.get(target, name)?.clone();
        if let Some(uid) = &options.uid
            && uid != meta::uid(&current)
        {
            return Err(ApiError::precondition_failed(
                &res.qualified(),
                name,
                &format!("UID in precondition: {uid}, UID in object meta: {}", meta::uid(&current)),
            ));
        }
        if let Some(version) = &options.resource_version
            && Some(version.as_str()) != meta::str_field(&current, "resourceVersion")
        {
            return Err(ApiError::precondition_failed(
                &res.qualified(),
                name,
                &format!(
                    "ResourceVersion in precondition: {version}, ResourceVersion in object meta: {}",
                    meta::str_field(&current, "resourceVersion").unwrap_or_default()
                ),
            ));
        }
        if options.dry_run {
            return Ok(present(res, current));
        }
        let now = self.clock.now();
        let grace = pod_grace_period(res, &current, options.grace_period_seconds);
        if meta::is_deleting(&current) {
            // Already being deleted: only a pod's grace period can be cut short.
            if grace == Some(0) && is_graceful_pod(res, &current) && !has_finalizers(&current) {
                let removed = inner.remove(&self.events, &res.storage, Some(current.clone()), current);
                inner.collect_garbage(&self.events, &self.clock);
                return Ok(present(res, removed));
            }
            return Ok(present(res, current));
        }
        let mut object = current.clone();
        let mut finalizers = meta::finalizers(&object);
        let extra = match options.propagation {
            Propagation::Foreground => Some(FOREGROUND),
            Propagation::Orphan => Some(ORPHAN),
            Propagation::Background => None,
        };
        if let Some(extra) = extra
            && !finalizers.iter().any(|f| f == extra)
            && inner.dependents.get(meta::uid(&current)).is_some_and(|d| !d.is_empty())
        {
            finalizers.push(extra.to_string());
        }
        let graceful = grace.is_some_and(|seconds| seconds > 0);
        let is_namespace = res.group.is_empty() && res.plural == "namespaces";
        if finalizers.is_empty() && !graceful && !is_namespace {
            let removed = inner.remove(&self.events, &res.storage, Some(current), object);
            inner.collect_garbage(&self.events, &self.clock);
            return Ok(present(res, removed));
        }
        meta::set_finalizers(&mut object, finalizers);
        let grace_seconds = grace.unwrap_or(0);
        {
            let map = meta_mut(&mut object);
            let at = now.checked_add(jiff::SignedDuration::from_secs(grace_seconds)).unwrap_or(now);
            map.insert("deletionTimestamp".into(), json!(rfc3339(at)));
            map.insert("deletionGracePeriodSeconds".into(), json!(grace_seconds));
            if tracks_generation(res) {
                let generation = map.get("generation").and_then(Value::as_i64).unwrap_or(1);
                map.insert("generation".into(), json!(generation + 1));
            }
        }
        if is_namespace {
            object["status"]["phase"] = json!("Terminating");
        }
        let stored = inner.commit(&self.events, res.storage.clone(), EventType::Modified, Some(current), object);
        inner.collect_garbage(&self.events, &self.clock);
        Ok(present(res, stored))
    }

    /// Events a watch from `since` must replay, and a receiver for what
    /// follows, taken under one lock so that nothing falls between them.
    /// `since` of `None` replays the current objects as ADDED.
    pub fn watch_from(&self, target: &Target, since: Option<u64>) -> Result<WatchStart, ApiError> {
        let inner = self.lock();
        let receiver = self.events.subscribe();
        let storage = &target.resource.storage;
        let backlog = match since {
            None => inner
                .objects
                .get(storage)
                .into_iter()
                .flat_map(|objects| objects.iter())
                .filter(|(key, _)| target.namespace.is_none_or(|ns| ns == key.0))
                .map(|(_, object)| {
                    Arc::new(Event::new(version_of(object), storage.clone(), EventType::Added, None, object.clone()))
                })
                .collect(),
            Some(since) => {
                let served_since = inner.served_since.get(storage).copied().unwrap_or(0);
                if since + 1 < inner.oldest_revision() || since < served_since {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {since} ({})",
                        inner.oldest_revision().saturating_sub(1)
                    )));
                }
                inner.history.iter().filter(|event| event.resource_version > since).cloned().collect()
            }
        };
        Ok(WatchStart { backlog, receiver, revision: inner.revision })
    }

    /// The scale subresource of a custom resource, as autoscaling/v1 Scale.
    pub fn get_scale(&self, target: &Target, name: &str) -> Result<Value, ApiError> {
        let object = self.get(target, name)?;
        scale_of(target.resource, &object)
    }

    pub fn update_scale(
        &self,
        target: &Target,
        name: &str,
        replicas: i64,
        version: Option<String>,
    ) -> Result<Value, ApiError> {
        let res = target.resource;
        let Some(paths) = &res.scale else {
            return Err(ApiError::path_not_found());
        };
        let path = json_pointer(&paths.spec_replicas);
        let updated = self.write(target, name, Part::Main, WriteOptions::default(), |current| {
            let mut object = current.clone();
            if let Some(version) = &version {
                meta_mut(&mut object).insert("resourceVersion".into(), json!(version));
            }
            set_pointer(&mut object, &path, json!(replicas));
            Ok(object)
        })?;
        scale_of(res, &updated)
    }
}

fn scale_of(res: &ResourceInfo, object: &Value) -> Result<Value, ApiError> {
    let Some(paths) = &res.scale else {
        return Err(ApiError::path_not_found());
    };
    let spec = object.pointer(&json_pointer(&paths.spec_replicas)).and_then(Value::as_i64).unwrap_or(0);
    let status = object.pointer(&json_pointer(&paths.status_replicas)).and_then(Value::as_i64).unwrap_or(0);
    let mut scale_status = json!({"replicas": status});
    if let Some(selector) =
        paths.label_selector.as_ref().and_then(|path| object.pointer(&json_pointer(path))).and_then(Value::as_str)
    {
        scale_status["selector"] = json!(selector);
    }
    let m = meta::meta(object);
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": m["name"], "namespace": m["namespace"], "uid": m["uid"],
            "resourceVersion": m["resourceVersion"], "creationTimestamp": m["creationTimestamp"],
        },
        "spec": {"replicas": spec},
        "status": scale_status,
    }))
}

/// `.spec.replicas` → `/spec/replicas`.
fn json_pointer(path: &str) -> String {
    path.split('.').filter(|part| !part.is_empty()).fold(String::new(), |mut out, part| {
        out.push('/');
        out.push_str(part);
        out
    })
}

fn set_pointer(object: &mut Value, pointer: &str, value: Value) {
    let mut slot = object;
    for part in pointer.split('/').skip(1) {
        if !slot.is_object() {
            *slot = json!({});
        }
        slot = &mut slot[part];
    }
    *slot = value;
}

fn set_status(object: &mut Value, status: Option<Value>) {
    if let Some(map) = object.as_object_mut() {
        match status {
            Some(status) => map.insert("status".into(), status),
            None => map.remove("status"),
        };
    }
}

/// Whether something still holds the object after its deletion: metadata
/// finalizers, or a namespace's own `spec.finalizers`.
fn has_finalizers(object: &Value) -> bool {
    !meta::finalizers(object).is_empty()
        || object["spec"]["finalizers"].as_array().is_some_and(|f| !f.is_empty()) && object["kind"] == "Namespace"
}

fn version_of(object: &Value) -> u64 {
    meta::str_field(object, "resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn tracks_generation(res: &ResourceInfo) -> bool {
    res.custom || res.plural == "customresourcedefinitions" || res.plural == "poddisruptionbudgets"
}

/// A scheduled, not yet finished pod waits for its kubelet after a delete.
fn is_graceful_pod(res: &ResourceInfo, object: &Value) -> bool {
    is_graceful_pod_object(&res.storage, object)
}

fn is_graceful_pod_object(storage: &StorageKey, object: &Value) -> bool {
    storage.group.is_empty()
        && storage.plural == "pods"
        && object["spec"]["nodeName"].as_str().is_some_and(|node| !node.is_empty())
        && !matches!(object["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
}

fn pod_grace_period(res: &ResourceInfo, object: &Value, requested: Option<i64>) -> Option<i64> {
    if !is_graceful_pod(res, object) {
        return None;
    }
    Some(requested.unwrap_or_else(|| object["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap_or(30)).max(0))
}

fn check_kind(res: &ResourceInfo, object: &Value) -> Result<(), ApiError> {
    if !object.is_object() {
        return Err(ApiError::bad_request("the request body must be a JSON object"));
    }
    if let Some(kind) = object["kind"].as_str()
        && kind != res.kind
        && !kind.is_empty()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({}) does not match the expected API version ({})",
            object["apiVersion"].as_str().unwrap_or_default(),
            res.api_version()
        )));
    }
    Ok(())
}

fn validate_name(res: &ResourceInfo, name: &str) -> Result<(), ApiError> {
    let valid = if res.plural == "namespaces" { meta::is_dns_label(name) } else { meta::is_dns_subdomain(name) };
    if valid {
        Ok(())
    } else {
        Err(ApiError::invalid(
            &res.kind,
            name,
            vec![(
                "metadata.name".into(),
                format!(
                    "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
                     characters, '-' or '.', and must start and end with an alphanumeric character"
                ),
            )],
        ))
    }
}

/// Under `fieldValidation=Strict`, what pruning removed is an error.
fn refuse_unknown(res: &ResourceInfo, pruned: Vec<String>, strict: bool) -> Result<(), ApiError> {
    if !strict || pruned.is_empty() {
        return Ok(());
    }
    let fields = pruned.iter().map(|path| format!("unknown field \"{path}\"")).collect::<Vec<_>>().join(", ");
    Err(ApiError::bad_request(format!(
        "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {fields}",
        res.kind, res.version, res.kind
    )))
}

fn validate_schema(res: &ResourceInfo, object: &Value) -> Result<(), ApiError> {
    let Some(schema) = res.schema.as_ref().filter(|_| res.custom) else {
        return Ok(());
    };
    let errors = schema::validate(object, schema);
    if errors.is_empty() { Ok(()) } else { Err(ApiError::invalid(&res.kind, meta::name(object), errors)) }
}

fn keep_immutable_metadata(object: &mut Value, current: &Value) {
    let old = meta::meta(current).clone();
    let map = meta_mut(object);
    for key in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
        "name",
    ] {
        match old.get(key) {
            Some(value) => map.insert(key.into(), value.clone()),
            None => map.remove(key),
        };
    }
    map.remove("resourceVersion");
}

/// The object as this API version shows it.
pub(crate) fn present(res: &ResourceInfo, mut object: Value) -> Value {
    if res.conversion == Conversion::EventsV1 {
        object = crate::events::core_to_events_v1(object);
    }
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), json!(res.api_version()));
        map.insert("kind".into(), json!(res.kind));
    }
    object
}

/// The object in its stored form.
fn restore(res: &ResourceInfo, mut object: Value) -> Value {
    if res.conversion == Conversion::EventsV1 {
        object = crate::events::events_v1_to_core(object);
    }
    if let Some(map) = object.as_object_mut() {
        map.insert(
            "apiVersion".into(),
            json!(if res.storage.group.is_empty() { "v1".to_string() } else { res.api_version() }),
        );
        map.insert("kind".into(), json!(res.kind));
    }
    object
}

fn encode_continue(revision: u64, last: &ObjectKey) -> String {
    use base64::Engine;
    let token = json!({"rv": revision, "ns": last.0, "name": last.1}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token)
}

fn decode_continue(token: &str, oldest: u64) -> Result<ObjectKey, ApiError> {
    use base64::Engine;
    let bad = || ApiError::bad_request("continue key is not valid: decode failed");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let revision = value["rv"].as_u64().ok_or_else(bad)?;
    if revision + 1 < oldest {
        return Err(ApiError::expired(
            "The provided continue parameter is too old to display a consistent list result. \
             You can start a new list without the continue parameter.",
        ));
    }
    Ok((value["ns"].as_str().unwrap_or_default().into(), value["name"].as_str().unwrap_or_default().into()))
}

impl Inner {
    fn oldest_revision(&self) -> u64 {
        self.history.front().map(|event| event.resource_version).unwrap_or(self.revision + 1)
    }

    fn get(&self, target: &Target, name: &str) -> Result<&Value, ApiError> {
        let namespace = target.namespace.unwrap_or_default().to_string();
        self.objects
            .get(&target.resource.storage)
            .and_then(|objects| objects.get(&(namespace, name.to_string())))
            .ok_or_else(|| ApiError::not_found(&target.resource.qualified(), name))
    }

    /// The namespace a new object goes to: that of the URL, which the body
    /// may repeat but not contradict, and which must exist and not be
    /// terminating.
    fn check_namespace(&self, target: &Target, object: &Value, creating: bool) -> Result<String, ApiError> {
        if !target.resource.namespaced {
            return Ok(String::new());
        }
        let Some(namespace) = target.namespace else {
            return Err(ApiError::path_not_found());
        };
        if let Some(in_body) = meta::str_field(object, "namespace")
            && in_body != namespace
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let namespaces = StorageKey { group: String::new(), plural: "namespaces".into() };
        match self.objects.get(&namespaces).and_then(|all| all.get(&(String::new(), namespace.to_string()))) {
            None => Err(ApiError::not_found("namespaces", namespace)),
            Some(ns) if creating && meta::is_deleting(ns) => Err(ApiError {
                code: 403,
                reason: "Forbidden",
                message: format!(
                    "{} \"{}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                    target.resource.qualified(),
                    meta::name(object)
                ),
                details: None,
            }),
            Some(_) => Ok(namespace.to_string()),
        }
    }

    /// What the real server's defaulting and admission add on create.
    fn apply_defaults(&mut self, res: &ResourceInfo, object: &mut Value, strict: bool) -> Result<(), ApiError> {
        if res.custom {
            if let Some(schema) = &res.schema {
                refuse_unknown(res, schema::default_and_prune(object, schema), strict)?;
            }
            return Ok(());
        }
        match (res.group.as_str(), res.plural.as_str()) {
            ("", "pods") => {
                let spec = &mut object["spec"];
                for (key, value) in [
                    ("restartPolicy", json!("Always")),
                    ("dnsPolicy", json!("ClusterFirst")),
                    ("schedulerName", json!("default-scheduler")),
                    ("terminationGracePeriodSeconds", json!(30)),
                    ("serviceAccountName", json!("default")),
                    ("serviceAccount", json!("default")),
                    ("securityContext", json!({})),
                    ("enableServiceLinks", json!(true)),
                    ("priority", json!(0)),
                ] {
                    if spec.get(key).is_none() {
                        spec[key] = value;
                    }
                }
                object["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
            }
            ("", "namespaces") => {
                object["spec"] = json!({"finalizers": ["kubernetes"]});
                object["status"] = json!({"phase": "Active"});
            }
            ("", "services") => {
                let spec = &mut object["spec"];
                if spec.get("type").is_none() {
                    spec["type"] = json!("ClusterIP");
                }
                if spec.get("sessionAffinity").is_none() {
                    spec["sessionAffinity"] = json!("None");
                }
                if spec.get("clusterIP").is_none() {
                    let ip = format!("10.96.{}.{}", self.next_cluster_ip / 250, self.next_cluster_ip % 250 + 1);
                    self.next_cluster_ip += 1;
                    spec["clusterIP"] = json!(ip);
                }
                let ip = spec["clusterIP"].clone();
                spec["clusterIPs"] = json!([ip]);
                object["status"] = json!({"loadBalancer": {}});
            }
            ("", "secrets") if object.get("type").is_none() => object["type"] = json!("Opaque"),
            _ => {}
        }
        Ok(())
    }

    /// Stores `object` under the next resourceVersion and tells watchers.
    fn commit(
        &mut self,
        events: &broadcast::Sender<Arc<Event>>,
        storage: StorageKey,
        event_type: EventType,
        old: Option<Value>,
        mut object: Value,
    ) -> Value {
        self.revision += 1;
        meta_mut(&mut object).insert("resourceVersion".into(), json!(self.revision.to_string()));
        let key =
            (meta::str_field(&object, "namespace").unwrap_or_default().to_string(), meta::name(&object).to_string());
        let uid = meta::uid(&object).to_string();
        if let Some(old) = &old {
            for owner in meta::owner_uids(old) {
                if let Some(set) = self.dependents.get_mut(&owner) {
                    set.remove(&(storage.clone(), key.clone()));
                }
            }
        }
        let place = (storage.clone(), key.clone());
        if event_type == EventType::Deleted {
            self.objects.entry(storage.clone()).or_default().remove(&key);
            self.deleting.remove(&place);
            self.by_uid.remove(&uid);
            if let Some(dependents) = self.dependents.get(&uid) {
                self.gc_candidates.extend(dependents.iter().cloned());
            }
        } else {
            let owners = meta::owner_uids(&object);
            if !owners.is_empty() {
                self.gc_candidates.push_back(place.clone());
            }
            for owner in owners {
                self.dependents.entry(owner).or_default().insert(place.clone());
            }
            if meta::is_deleting(&object) {
                self.deleting.insert(place.clone());
            } else {
                self.deleting.remove(&place);
            }
            self.by_uid.insert(uid, place);
            self.objects.entry(storage.clone()).or_default().insert(key, object.clone());
        }
        let event = Arc::new(Event::new(self.revision, storage, event_type, old, object.clone()));
        self.history.push_back(event.clone());
        while self.history.len() > self.history_limit {
            self.history.pop_front();
        }
        // Nobody listening is fine.
        let _ = events.send(event);
        object
    }

    fn remove(
        &mut self,
        events: &broadcast::Sender<Arc<Event>>,
        storage: &StorageKey,
        old: Option<Value>,
        object: Value,
    ) -> Value {
        let removed = self.commit(events, storage.clone(), EventType::Deleted, old, object);
        self.after_remove(events, storage, &removed);
        removed
    }

    fn after_create(&mut self, events: &broadcast::Sender<Arc<Event>>, res: &ResourceInfo, object: &Value, now: &str) {
        match (res.group.as_str(), res.plural.as_str()) {
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                for info in resources::from_crd(object) {
                    self.served_since.insert(info.storage.clone(), self.revision);
                    self.resources
                        .insert((info.group.clone(), info.version.clone(), info.plural.clone()), Arc::new(info));
                }
                // The real server's establishing controller reports the CRD
                // as accepted and established right after its creation.
                let mut established = object.clone();
                let names = established["spec"]["names"].clone();
                established["status"] = json!({
                    "acceptedNames": names,
                    "storedVersions": object["spec"]["versions"].as_array().into_iter().flatten()
                        .filter(|v| v["storage"].as_bool() == Some(true)).map(|v| v["name"].clone()).collect::<Vec<_>>(),
                    "conditions": [
                        {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                         "message": "no conflicts found", "lastTransitionTime": now},
                        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                         "message": "the initial names have been accepted", "lastTransitionTime": now},
                    ],
                });
                let storage = res.storage.clone();
                self.commit(events, storage, EventType::Modified, Some(object.clone()), established);
            }
            ("", "namespaces") => {
                // The service account controller's work: pods need it.
                let namespace = meta::name(object).to_string();
                let uid = self.ids.uid();
                let account = json!({
                    "apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": namespace, "uid": uid, "creationTimestamp": now},
                });
                let storage = StorageKey { group: String::new(), plural: "serviceaccounts".into() };
                self.commit(events, storage, EventType::Added, None, account);
            }
            _ => {}
        }
    }

    fn after_remove(&mut self, events: &broadcast::Sender<Arc<Event>>, storage: &StorageKey, object: &Value) {
        if storage.group == "apiextensions.k8s.io" && storage.plural == "customresourcedefinitions" {
            let group = object["spec"]["group"].as_str().unwrap_or_default().to_string();
            let plural = object["spec"]["names"]["plural"].as_str().unwrap_or_default().to_string();
            self.resources.retain(|(g, _, p), _| !(g == &group && p == &plural));
            let key = StorageKey { group, plural };
            let instances: Vec<Value> =
                self.objects.remove(&key).map(|m| m.into_values().collect()).unwrap_or_default();
            self.objects.insert(key.clone(), BTreeMap::new());
            for instance in instances {
                self.commit(events, key.clone(), EventType::Deleted, Some(instance.clone()), instance);
            }
            self.objects.remove(&key);
        }
    }

    /// What kube-controller-manager's garbage collector and namespace
    /// controller do, run to a fixed point after every write:
    /// - an object all of whose owners are gone is deleted;
    /// - an owner deleted in the foreground loses its `foregroundDeletion`
    ///   finalizer once its dependents are gone (they are deleted first);
    /// - an owner deleted with `orphan` has its dependents' references
    ///   removed, then the finalizer;
    /// - a terminating namespace has its content deleted, and goes once empty.
    fn collect_garbage(&mut self, events: &broadcast::Sender<Arc<Event>>, clock: &Arc<dyn Clock>) {
        for _round in 0..10_000 {
            let Some(action) = self.next_gc_action() else { return };
            self.run_gc_action(events, clock, action);
        }
        tracing::warn!("garbage collection did not settle after 10000 steps");
    }

    fn object_at(&self, place: &(StorageKey, ObjectKey)) -> Option<&Value> {
        self.objects.get(&place.0).and_then(|objects| objects.get(&place.1))
    }

    fn next_gc_action(&mut self) -> Option<GcAction> {
        while let Some(place) = self.gc_candidates.pop_front() {
            let Some(object) = self.object_at(&place) else { continue };
            let owners = meta::owner_uids(object);
            if !owners.is_empty()
                && !meta::is_deleting(object)
                && owners.iter().all(|uid| !self.by_uid.contains_key(uid))
            {
                return Some(GcAction::Delete(place.0, place.1));
            }
        }
        for place in &self.deleting {
            let Some(object) = self.object_at(place) else { continue };
            let (storage, key) = place;
            let finalizers = meta::finalizers(object);
            let dependents = self.dependents.get(meta::uid(object)).filter(|d| !d.is_empty());
            if finalizers.iter().any(|f| f == ORPHAN) {
                return Some(match dependents.and_then(|d| d.iter().next()) {
                    Some(dependent) => GcAction::DropOwner(dependent.clone(), meta::uid(object).to_string()),
                    None => GcAction::DropFinalizer(storage.clone(), key.clone(), ORPHAN),
                });
            }
            if finalizers.iter().any(|f| f == FOREGROUND) {
                let pending = dependents.and_then(|d| {
                    d.iter().find(|dependent| self.object_at(dependent).is_some_and(|o| !meta::is_deleting(o)))
                });
                match (pending, dependents) {
                    (Some(dependent), _) => return Some(GcAction::Delete(dependent.0.clone(), dependent.1.clone())),
                    (None, None) => return Some(GcAction::DropFinalizer(storage.clone(), key.clone(), FOREGROUND)),
                    (None, Some(_)) => {}
                }
            }
            if storage.plural == "namespaces" && storage.group.is_empty() && has_finalizers(object) {
                let namespace = meta::name(object);
                let mut content = self.objects.iter().flat_map(|(s, m)| m.iter().map(move |(k, o)| (s, k, o)));
                let mut any = false;
                let live = content.find(|(_, (ns, _), o)| {
                    any |= ns == namespace;
                    ns == namespace && !meta::is_deleting(o)
                });
                match live {
                    Some((s, k, _)) => return Some(GcAction::Delete(s.clone(), k.clone())),
                    None if !any && !self.objects.values().any(|m| m.keys().any(|(ns, _)| ns == namespace)) => {
                        return Some(GcAction::DropFinalizer(storage.clone(), key.clone(), "kubernetes"));
                    }
                    None => {}
                }
            }
        }
        None
    }

    fn run_gc_action(&mut self, events: &broadcast::Sender<Arc<Event>>, clock: &Arc<dyn Clock>, action: GcAction) {
        match action {
            GcAction::Delete(storage, key) => {
                let Some(object) = self.objects.get(&storage).and_then(|m| m.get(&key)).cloned() else { return };
                if !has_finalizers(&object) && !is_graceful_pod_object(&storage, &object) {
                    self.remove(events, &storage, Some(object.clone()), object);
                } else {
                    let mut deleting = object.clone();
                    meta_mut(&mut deleting).insert("deletionTimestamp".into(), json!(rfc3339(clock.now())));
                    meta_mut(&mut deleting).insert("deletionGracePeriodSeconds".into(), json!(0));
                    self.commit(events, storage, EventType::Modified, Some(object), deleting);
                }
            }
            GcAction::DropOwner((storage, key), owner) => {
                let Some(object) = self.objects.get(&storage).and_then(|m| m.get(&key)).cloned() else { return };
                let mut updated = object.clone();
                let map = meta_mut(&mut updated);
                let kept: Vec<Value> = map
                    .get("ownerReferences")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|r| r["uid"].as_str() != Some(owner.as_str()))
                    .cloned()
                    .collect();
                if kept.is_empty() {
                    map.remove("ownerReferences");
                } else {
                    map.insert("ownerReferences".into(), Value::from(kept));
                }
                self.commit(events, storage, EventType::Modified, Some(object), updated);
            }
            GcAction::DropFinalizer(storage, key, finalizer) => {
                let Some(object) = self.objects.get(&storage).and_then(|m| m.get(&key)).cloned() else { return };
                let mut updated = object.clone();
                if finalizer == "kubernetes" {
                    // The namespace controller's finalizer lives in spec.
                    updated["spec"]["finalizers"] = json!([]);
                } else {
                    meta::set_finalizers(
                        &mut updated,
                        meta::finalizers(&object).into_iter().filter(|f| f != finalizer).collect(),
                    );
                }
                if !has_finalizers(&updated) {
                    self.remove(events, &storage, Some(object), updated);
                } else {
                    self.commit(events, storage, EventType::Modified, Some(object), updated);
                }
            }
        }
    }
}

enum GcAction {
    Delete(StorageKey, ObjectKey),
    DropOwner((StorageKey, ObjectKey), String),
    DropFinalizer(StorageKey, ObjectKey, &'static str),
}
