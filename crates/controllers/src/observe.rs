//! The observation layer: how a pod reads to every controller, from its
//! object and from what this process observed besides (cordoned nodes,
//! HAKeeper's store listing, the time), and the revision of a pool's
//! template. It reads plain values it is handed, never the controllers'
//! context, so that every controller reads a pod the same way without
//! importing another.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use cnpool_api::{CNPoolSpec, PodPhase, labels};
use cnpool_core::convert::pod_view;
use cnpool_core::model::PodView;
use cnpool_core::waiting::Reachability;
use cnpool_render::cnset;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::Error;
use crate::nodes::CordonedNodes;
use crate::stores::StoreSnapshot;

/// The store listing of the MatrixOne cluster a pool's pods register in;
/// `None` while the pool's HAKeeper is not known.
pub trait StoresOfPool {
    fn stores_of(&self, namespace: &str, pool: &str) -> Option<Arc<StoreSnapshot>>;
}

/// What a pod is read against besides its object.
pub struct Observer<'a> {
    pub nodes: &'a CordonedNodes,
    /// Each pool's cluster's store listing.
    pub stores: &'a (dyn StoresOfPool + Sync),
    /// The time of day of the reading.
    pub now: Timestamp,
    /// How long an unowned pod's store may be missing before the pod counts
    /// as failed (`Config::store_missing_bound`).
    pub store_missing_bound: Duration,
    /// How long such a store may be missing before no waiting claim counts
    /// on the pod (`Config::store_registration_grace`).
    pub store_registration_grace: Duration,
}

impl Observer<'_> {
    /// Reads a pool pod. A pod on a cordoned node counts as cordoned. A pod
    /// whose containers terminated counts as failed, and so does an unowned
    /// pod whose CN runs but whose store HAKeeper has not held for longer
    /// than the store-missing bound (an Idle pod, or one still Unknown since
    /// its CN started): it cannot serve a tenant, so no claim is offered it
    /// (a claim taking it would wait that bound again and be Lost) and its
    /// pool replaces it. Missing for the registration grace already, while
    /// HAKeeper answers, the pod's store is overdue: its pool makes another
    /// pod for the claims that wait rather than have them wait out the bound.
    pub fn read_pod(&self, pod: &Pod) -> Result<PodView, Error> {
        let mut view = own_view(pod)?;
        view.cordoned |= self.on_cordoned_node(&view);
        let missing_for = self.unowned_store_missing_since(pod, &view).map(|since| self.now.duration_since(since));
        let missing_at_least = |bound: Duration| {
            missing_for.is_some_and(|missing| SignedDuration::try_from(bound).is_ok_and(|bound| missing >= bound))
        };
        view.failed |= missing_at_least(self.store_missing_bound) && !view.deleting;
        let reachable =
            self.stores_of(pod, &view).is_some_and(|stores| stores.reachability() == Reachability::Reachable);
        view.store_overdue = missing_at_least(self.store_registration_grace) && reachable;
        Ok(view)
    }

    /// When the next judgement of an unowned pod's missing store falls due
    /// (its grace or its bound running out), if one is pending: the time
    /// its pool must look again, as no event will wake it then.
    pub fn next_store_deadline(&self, pod: &Pod, view: &PodView) -> Option<Duration> {
        let since = self.unowned_store_missing_since(pod, view)?;
        let missing = self.now.duration_since(since);
        [self.store_registration_grace, self.store_missing_bound]
            .into_iter()
            .filter_map(|bound| SignedDuration::try_from(bound).ok())
            .filter(|bound| *bound > missing)
            .map(|bound| Duration::try_from(bound - missing).unwrap_or_default())
            .min()
    }

    /// Whether `view` runs on a node that is cordoned.
    pub fn on_cordoned_node(&self, view: &PodView) -> bool {
        view.node.as_deref().is_some_and(|node| self.nodes.contains(node))
    }

    /// Since when HAKeeper has lacked the store of `view`, if it is an Idle
    /// pod or an Unknown one whose CN has started. A CN whose store vanished
    /// before it registered never leaves Unknown; one still starting is not
    /// missing anything yet, so for it the time counts from its container's
    /// start.
    pub fn unowned_store_missing_since(&self, pod: &Pod, view: &PodView) -> Option<Timestamp> {
        let started = match view.phase {
            Some(PodPhase::Idle) => None,
            Some(PodPhase::Unknown) => Some(cn_started_at(pod)?),
            _ => return None,
        };
        let stores = self.stores_of(pod, view)?;
        let since = stores.missing_since(view.store_uuid.as_deref()?, store_missing_noted(pod), self.now)?;
        Some(started.map_or(since, |started| since.max(started)))
    }

    /// The store listing of the cluster of `view`'s pool.
    fn stores_of(&self, pod: &Pod, view: &PodView) -> Option<Arc<StoreSnapshot>> {
        self.stores.stores_of(pod.metadata.namespace.as_deref()?, view.pool.as_deref()?)
    }
}

/// The part of [`Observer::read_pod`] that depends on the pod's object
/// alone: what the pod index keeps for Idle pods, read once per change of
/// the pod rather than once per claim that might take it.
pub fn own_view(pod: &Pod) -> Result<PodView, cnpool_core::convert::ConvertError> {
    let mut view = pod_view(pod, false)?;
    let terminated =
        pod.status.as_ref().and_then(|status| status.container_statuses.as_ref()).is_some_and(|containers| {
            containers.iter().any(|container| container.state.as_ref().is_some_and(|state| state.terminated.is_some()))
        });
    view.failed |= terminated && !view.deleting;
    Ok(view)
}

/// When the pod's first running container started.
fn cn_started_at(pod: &Pod) -> Option<Timestamp> {
    let containers = pod.status.as_ref()?.container_statuses.as_ref()?;
    containers.iter().find_map(|container| Some(container.state.as_ref()?.running.as_ref()?.started_at.as_ref()?.0))
}

/// When the pod's `cn-store` condition noted its store missing, if it says so now.
pub fn store_missing_noted(pod: &Pod) -> Option<Timestamp> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let condition = conditions.iter().find(|condition| condition.type_ == labels::CN_STORE_CONDITION)?;
    (condition.status == "False").then_some(condition.last_transition_time.as_ref()?.0)
}

/// The revision label of pods made from `template`: the first 10 hex digits
/// of the SHA-256 of the template's canonical JSON (object keys sorted, no
/// whitespace). It depends on the user's template only, so a new cnpool
/// release does not roll every pod.
pub fn template_revision(template: &PodTemplateSpec) -> String {
    canonical_hash(&serde_json::to_value(template).unwrap_or(Value::Null))
}

/// The revision label of the pods of a pool of `spec`. A Go-shaped
/// template's is the Go operator's CNSet hash (reference §0), which changes
/// only with what the rendered pod is made of (not with `overlay.podLabels`
/// or `podAnnotations`, as in Go), and makes a Go pod of the same template
/// current at cutover. A template that hash cannot be computed for
/// (cnpool-render's known limits: some overlay fields) gets the canonical
/// hash of the template instead. A plain pod template's is
/// [`template_revision`].
pub fn pool_revision(spec: &CNPoolSpec) -> String {
    match (&spec.template, &spec.pod_template) {
        (Some(template), _) => cnset::hashed_json(template).map_or_else(
            |_| canonical_hash(&serde_json::to_value(template).unwrap_or(Value::Null)),
            |go_json| cnset::revision_hash(&go_json),
        ),
        (None, Some(pod_template)) => template_revision(pod_template),
        (None, None) => template_revision(&PodTemplateSpec::default()),
    }
}

/// The first 10 hex digits of the SHA-256 of `value`'s canonical JSON.
fn canonical_hash(value: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(value, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    digest.iter().take(5).fold(String::new(), |mut hex, byte| {
        let _ = write!(hex, "{byte:02x}");
        hex
    })
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (index, (key, value)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_revision_ignores_key_order_and_changes_with_the_template() {
        let a: PodTemplateSpec =
            serde_json::from_value(json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"containers": [{"name": "cn", "image": "mo:1"}]}}))
                .unwrap();
        let b: PodTemplateSpec =
            serde_json::from_value(json!({"spec": {"containers": [{"image": "mo:1", "name": "cn"}]}, "metadata": {"labels": {"b": "2", "a": "1"}}}))
                .unwrap();
        let c: PodTemplateSpec =
            serde_json::from_value(json!({"spec": {"containers": [{"image": "mo:2", "name": "cn"}]}})).unwrap();
        assert_eq!(template_revision(&a), template_revision(&b));
        assert_ne!(template_revision(&a), template_revision(&c));
        assert_eq!(template_revision(&a).len(), 10);
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let mut out = String::new();
        write_canonical(&json!({"b": {"d": 1, "c": [{"f": true, "e": null}]}, "a": "x"}), &mut out);
        assert_eq!(out, r#"{"a":"x","b":{"c":[{"e":null,"f":true}],"d":1}}"#);
    }

    /// One cluster for every pool.
    struct OneCluster(Arc<StoreSnapshot>);

    impl StoresOfPool for OneCluster {
        fn stores_of(&self, _: &str, _: &str) -> Option<Arc<StoreSnapshot>> {
            Some(Arc::clone(&self.0))
        }
    }

    fn idle_pod(node: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "pool-0", "namespace": "ns", "uid": "pod-uid",
                "creationTimestamp": "2024-01-01T00:00:00Z",
                "labels": {labels::POOL_NAME: "pool", labels::PHASE: "Idle", labels::CN_UUID: "store-0"},
            },
            "spec": {"containers": [], "nodeName": node},
        }))
        .unwrap()
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_secs(seconds)
    }

    #[test]
    fn an_idle_pod_reads_cordoned_on_a_cordoned_node_and_failed_once_its_store_is_missing_for_the_bound() {
        let (nodes, stores) = (CordonedNodes::default(), Arc::new(StoreSnapshot::default()));
        let cluster = OneCluster(Arc::clone(&stores));
        let observer = |seconds| Observer {
            nodes: &nodes,
            stores: &cluster,
            now: at(seconds),
            store_missing_bound: Duration::from_secs(30),
            store_registration_grace: Duration::from_secs(10),
        };
        let pod = idle_pod("node-a");
        let view = observer(0).read_pod(&pod).unwrap();
        assert!(!view.cordoned && !view.failed, "nothing listed yet: no judgement");
        nodes.set("node-a", true);
        stores.replace(Vec::new());
        let view = observer(100).read_pod(&pod).unwrap();
        assert!(view.cordoned, "its node is cordoned");
        assert!(!view.failed, "missing since 100 only");
        assert_eq!(observer(110).unowned_store_missing_since(&pod, &view), Some(at(100)));
        assert!(!observer(129).read_pod(&pod).unwrap().failed);
        assert!(observer(130).read_pod(&pod).unwrap().failed, "missing for the bound");
    }

    #[test]
    fn a_store_missing_for_the_grace_is_overdue_while_hakeeper_answers_and_the_pool_is_told_when_to_look() {
        let (nodes, stores) = (CordonedNodes::default(), Arc::new(StoreSnapshot::default()));
        let cluster = OneCluster(Arc::clone(&stores));
        let observer = |seconds| Observer {
            nodes: &nodes,
            stores: &cluster,
            now: at(seconds),
            store_missing_bound: Duration::from_secs(30),
            store_registration_grace: Duration::from_secs(10),
        };
        let pod = idle_pod("node-a");
        stores.replace(Vec::new());
        let view = observer(100).read_pod(&pod).unwrap();
        assert!(!view.store_overdue, "just noticed missing");
        assert_eq!(observer(100).next_store_deadline(&pod, &view), Some(Duration::from_secs(10)));
        assert_eq!(observer(104).next_store_deadline(&pod, &view), Some(Duration::from_secs(6)));
        let view = observer(110).read_pod(&pod).unwrap();
        assert!(view.store_overdue && !view.failed, "overdue, not yet failed");
        assert_eq!(observer(110).next_store_deadline(&pod, &view), Some(Duration::from_secs(20)), "next: the bound");
        assert_eq!(observer(130).next_store_deadline(&pod, &view), None, "nothing left to judge");
        for _ in 0..crate::stores::UNREACHABLE_AFTER {
            stores.listing_failed();
        }
        assert!(!observer(115).read_pod(&pod).unwrap().store_overdue, "HAKeeper does not answer: nothing to learn");
    }
}
