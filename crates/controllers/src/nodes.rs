//! Which nodes are cordoned (`spec.unschedulable`: `kubectl cordon`, the
//! first step of `kubectl drain`), from a watch of Nodes. Only their names
//! are kept. A pod on a cordoned node reads as cordoned
//! ([`cnpool_core::convert::pod_view`]): its claim migrates off it, and it is
//! offered to no claim.
//!
//! Nodes may not be readable: the operator's role lacks get/list/watch on
//! nodes, or a namespace-scoped Role, which cannot grant a cluster-scoped
//! kind. Then the set stays empty and only `matrixorigin.io/store-cordon`
//! marks pods for maintenance, as before; one warning says so and how to
//! fix it, and the watch keeps retrying, less and less often.

use std::collections::BTreeSet;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use futures::StreamExt;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::watcher;

/// Names of the nodes marked unschedulable.
#[derive(Default)]
pub struct CordonedNodes(RwLock<BTreeSet<String>>);

impl CordonedNodes {
    /// Whether `node` is cordoned, as last seen.
    pub fn contains(&self, node: &str) -> bool {
        // Updates are single inserts and removes: a panicked writer left the set whole.
        self.0.read().unwrap_or_else(PoisonError::into_inner).contains(node)
    }

    /// Notes whether `node` is cordoned; whether that changed.
    pub(crate) fn set(&self, node: &str, cordoned: bool) -> bool {
        let mut names = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if cordoned { names.insert(node.to_owned()) } else { names.remove(node) }
    }

    /// Replaces the set with a fresh list's; returns the nodes whose state changed.
    fn replace(&self, cordoned: BTreeSet<String>) -> Vec<String> {
        let mut names = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let changed = names.symmetric_difference(&cordoned).cloned().collect();
        *names = cordoned;
        changed
    }
}

fn is_cordoned(node: &Node) -> bool {
    node.spec.as_ref().and_then(|spec| spec.unschedulable) == Some(true)
}

fn is_forbidden(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 403,
        watcher::Error::WatchError(status) => status.code == 403,
        _ => false,
    }
}

/// First and longest wait before the watch is tried again after it failed.
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// Watches Nodes until `shutdown`, keeping `nodes`, and tells `cordon_changed`
/// of every node whose cordon changed (its pods' claims and pools are woken
/// there: this module knows nothing of them). A failed
/// watch is tried again after a delay that doubles up to five minutes
/// (kube's own backoff starts over at every relist attempt, which would
/// ask a server that refuses every second), and starts over once Nodes are
/// read again.
pub async fn watch(
    client: kube::Client,
    nodes: Arc<CordonedNodes>,
    cordon_changed: impl Fn(&str),
    shutdown: Shared<BoxFuture<'static, ()>>,
) {
    let api: Api<Node> = Api::all(client);
    let mut events = watcher(api, watcher::Config::default()).boxed();
    let mut relisted: Option<BTreeSet<String>> = None;
    let mut failing = false;
    let mut retry = RETRY_MIN;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let event = tokio::select! {
            () = &mut shutdown => return,
            event = events.next() => event,
        };
        let event = match event {
            None => return,
            // The server's history moved past the watch: kube relists at once.
            Some(Err(watcher::Error::WatchError(status))) if status.code == 410 => continue,
            Some(Err(error)) => {
                if !failing && is_forbidden(&error) {
                    tracing::warn!(
                        %error,
                        "cannot read Nodes: claims on pods of cordoned nodes are not migrated (only pods annotated \
                         matrixorigin.io/store-cordon are); grant the operator get, list and watch on nodes in a \
                         ClusterRole (deploy/rbac/clusterrole.yaml, or the Helm chart's rbac.yaml)"
                    );
                } else if !failing {
                    tracing::warn!(%error, "cannot watch Nodes; retrying with backoff");
                }
                failing = true;
                tokio::select! {
                    () = &mut shutdown => return,
                    () = tokio::time::sleep(retry) => {}
                }
                retry = (retry * 2).min(RETRY_MAX);
                continue;
            }
            Some(Ok(event)) => event,
        };
        // A relist attempt (`Init`) is not yet a read.
        if failing && !matches!(event, watcher::Event::Init | watcher::Event::InitApply(_)) {
            tracing::info!("reading Nodes again: pods on cordoned nodes are migrated off");
            failing = false;
        }
        if !failing {
            retry = RETRY_MIN;
        }
        match event {
            watcher::Event::Init => relisted = Some(BTreeSet::new()),
            watcher::Event::InitApply(node) => {
                if let (Some(listed), Some(name)) = (relisted.as_mut(), node.metadata.name.as_ref())
                    && is_cordoned(&node)
                {
                    listed.insert(name.clone());
                }
            }
            watcher::Event::InitDone => {
                let Some(listed) = relisted.take() else { continue };
                for node in nodes.replace(listed) {
                    cordon_changed(&node);
                }
            }
            watcher::Event::Apply(node) => {
                if let Some(name) = node.metadata.name.as_deref()
                    && nodes.set(name, is_cordoned(&node))
                {
                    cordon_changed(name);
                }
            }
            watcher::Event::Delete(node) => {
                if let Some(name) = node.metadata.name.as_deref()
                    && nodes.set(name, false)
                {
                    cordon_changed(name);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relist_reports_the_nodes_cordoned_or_uncordoned_meanwhile() {
        let nodes = CordonedNodes::default();
        assert!(nodes.set("a", true));
        assert!(!nodes.set("a", true), "no change, no wake");
        assert!(nodes.set("b", true));
        let changed = nodes.replace(["b".to_owned(), "c".to_owned()].into());
        assert_eq!(changed, vec!["a".to_owned(), "c".to_owned()]);
        assert!(!nodes.contains("a") && nodes.contains("b") && nodes.contains("c"));
    }
}
