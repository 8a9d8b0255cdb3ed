//! The model's API objects: a pod and a claim reduced to the fields the
//! protocol reads and writes, convertible to the Kubernetes objects the
//! production code takes, and the server's rule for applying a guarded pod
//! patch.

use std::collections::BTreeMap;

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
        deleting: false,
    }
}

/// A pool pod as the server stores it (only what the protocol touches).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodObj {
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// A deletion timestamp is set (the store finalizer holds the pod).
    pub deleting: bool,
    /// Status phase Failed.
    pub failed: bool,
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
        Ok(cnpool_core::convert::pod_view(&self.to_pod(), false)?)
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
        let mut written = self.clone();
        written.labels = map(&document["metadata"]["labels"])?;
        written.annotations = map(&document["metadata"]["annotations"])?;
        Ok(Some(written))
    }
}

/// The CN store UUID of a pod: by its name, as its DNS name gives it, so a
/// pod recreated under the same name has the same store.
pub(crate) fn store_uuid(pod: &str) -> String {
    format!("store-{pod}")
}

/// A CNClaim as the server stores it (only what the protocol touches).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClaimObj {
    pub name: String,
    pub uid: String,
    pub deleting: bool,
    pub finalizer: bool,
    /// `spec.podName`.
    pub pod_name: Option<String>,
    /// `spec.sourcePod.podName`.
    pub source_pod: Option<String>,
    /// `status.phase`.
    pub phase: Option<ClaimPhase>,
    /// The `recorded-pod` annotation: name and UID.
    pub recorded: Option<(String, String)>,
    /// `status.store`: the pod's name and, when cnpool wrote it, its UID
    /// (the Go operator records the name only).
    pub status_pod: Option<(String, Option<String>)>,
    /// The reason of the Bound condition when the claim went Lost.
    pub lost: Option<LossReason>,
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
            phase: None,
            recorded: None,
            status_pod: None,
            lost: None,
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
        Ok(cnpool_core::convert::claim_view(&self.to_claim())?)
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
    /// HAKeeper's work state, by its wire code (ordered for the state).
    pub state: i32,
    pub labels: StoreLabels,
}

impl StoreRec {
    /// A store as a fresh CN registers it: HAKeeper stores state 0 as
    /// Working, with no labels.
    pub fn registered() -> Self {
        Self { state: WorkState::Working.code(), labels: StoreLabels::new() }
    }

    pub fn work_state(&self) -> WorkState {
        WorkState::from_code(self.state)
    }

    /// Released: Draining with no labels.
    pub fn draining() -> Self {
        Self { state: WorkState::Draining.code(), labels: StoreLabels::new() }
    }
}
