//! One conformance suite for two servers: the embedded API server
//! (in-process), and — when `CNPOOL_CONFORMANCE_KUBECONFIG` names a
//! kubeconfig — a real kube-apiserver (1.20 in CI, see ci/kube/). Every
//! assertion is about what a client observes: status codes and reasons,
//! resourceVersion order, and event sequences. Where the real server
//! surprised us, the test says so.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use http::{Method, Request};
use kube::Client;
use kube::core::WatchEvent;
use serde_json::{Value, json};

const GROUP: &str = "conformance.cnpool.io";

/// A server to test against, with one namespace of the test's own.
struct Target {
    client: Client,
    ns: String,
    /// Keeps the embedded server alive for the test.
    _embedded: Option<cnpool_apiserver::ApiServer>,
    real: bool,
}

/// A request that failed: the code and reason of its Status.
#[derive(Debug, PartialEq)]
struct Failure {
    code: u16,
    reason: String,
}

async fn target(test: &str) -> Target {
    let (client, embedded, real) = match std::env::var("CNPOOL_CONFORMANCE_KUBECONFIG") {
        Ok(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("kubeconfig readable");
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("config");
            (Client::try_from(config).expect("client"), None, true)
        }
        Err(_) => {
            let server = cnpool_apiserver::ApiServer::default();
            (server.client(), Some(server), false)
        }
    };
    let ns = format!("conf-{}-{}", test.replace('_', "-"), std::process::id());
    let target = Target { client, ns, _embedded: embedded, real };
    target.call(Method::POST, "/api/v1/namespaces", json!({"metadata": {"name": target.ns}})).await.unwrap();
    if target.real {
        await_default_token(&target).await;
    }
    ensure_crd(&target).await;
    target
}

/// On a real server, pod admission refuses pods (500 ServerTimeout) until
/// the controller manager has given the new namespace's default service
/// account its token: wait for it, as a kubelet's user would.
async fn await_default_token(target: &Target) {
    let path = target.core("serviceaccounts", "/default");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let account = target.call(Method::GET, &path, Value::Null).await;
        if account.is_ok_and(|account| account["secrets"].as_array().is_some_and(|secrets| !secrets.is_empty())) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the default service account of {} got no token", target.ns);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The test resource: `widgets` with status and scale subresources, a
/// printer column, a default and a pattern.
async fn ensure_crd(target: &Target) {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "shortNames": ["wd"]},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}},
                "additionalPrinterColumns": [{"name": "Size", "type": "string", "jsonPath": ".spec.size"}],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "string", "pattern": "^[a-z]+$"},
                        "replicas": {"type": "integer", "default": 1},
                        "nodeName": {"type": "string"}
                    }},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string"}, "replicas": {"type": "integer"}, "selector": {"type": "string"}
                    }}
                }}}
            }]
        }
    });
    match target.call(Method::POST, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd).await {
        Ok(_) => {}
        Err(failure) if failure.reason == "AlreadyExists" => {}
        Err(failure) => panic!("creating the CRD: {failure:?}"),
    }
    // Served once listed (the real server needs a moment).
    for _ in 0..100 {
        if target.call(Method::GET, &target.widgets(""), Value::Null).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("widgets never became served");
}

impl Target {
    fn widgets(&self, rest: &str) -> String {
        format!("/apis/{GROUP}/v1/namespaces/{}/widgets{rest}", self.ns)
    }

    fn core(&self, plural: &str, rest: &str) -> String {
        format!("/api/v1/namespaces/{}/{plural}{rest}", self.ns)
    }

    async fn send(&self, method: Method, path: &str, content_type: &str, body: Value) -> Result<Value, Failure> {
        let body = if body.is_null() { Vec::new() } else { serde_json::to_vec(&body).unwrap() };
        let request =
            Request::builder().method(method).uri(path).header("content-type", content_type).body(body).unwrap();
        match self.client.request::<Value>(request).await {
            Ok(value) => Ok(value),
            Err(kube::Error::Api(status)) => Err(Failure { code: status.code, reason: status.reason.clone() }),
            Err(other) => panic!("transport error on {path}: {other}"),
        }
    }

    async fn call(&self, method: Method, path: &str, body: Value) -> Result<Value, Failure> {
        self.send(method, path, "application/json", body).await
    }

    async fn create_widget(&self, name: &str, spec: Value) -> Value {
        let body =
            json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Widget", "metadata": {"name": name}, "spec": spec});
        self.call(Method::POST, &self.widgets(""), body).await.unwrap()
    }

    async fn merge(&self, path: &str, patch: Value) -> Result<Value, Failure> {
        self.send(Method::PATCH, path, "application/merge-patch+json", patch).await
    }

    async fn json_patch(&self, path: &str, patch: Value) -> Result<Value, Failure> {
        self.send(Method::PATCH, path, "application/json-patch+json", patch).await
    }

    /// Collects the watch events of `path` until `count` arrived.
    /// Writes made after the watch's version are replayed from history, so
    /// the watch may be awaited after them.
    async fn watch(&self, path: String, count: usize) -> Vec<(String, Value)> {
        let request = Request::builder().uri(path).body(Vec::new()).unwrap();
        let stream = self.client.request_events::<Value>(request).await.unwrap();
        let events = stream
            .map(|event: Result<WatchEvent<Value>, kube::Error>| {
                event.map(|event| match event {
                    WatchEvent::Added(o) => ("ADDED".to_string(), o),
                    WatchEvent::Modified(o) => ("MODIFIED".to_string(), o),
                    WatchEvent::Deleted(o) => ("DELETED".to_string(), o),
                    WatchEvent::Bookmark(b) => ("BOOKMARK".to_string(), json!({"rv": b.metadata.resource_version})),
                    WatchEvent::Error(e) => ("ERROR".to_string(), json!({"code": e.code, "reason": e.reason})),
                })
            })
            .take(count)
            .try_collect::<Vec<_>>();
        tokio::time::timeout(Duration::from_secs(20), events).await.expect("watch events in time").unwrap()
    }

    async fn cleanup(self) {
        let _ = self.call(Method::DELETE, &format!("/api/v1/namespaces/{}", self.ns), Value::Null).await;
    }
}

fn rv(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

fn failure(code: u16, reason: &str) -> Failure {
    Failure { code, reason: reason.into() }
}

#[tokio::test]
async fn create_sets_identity_and_duplicates_conflict() {
    let t = target("create").await;
    let created = t.create_widget("a", json!({"size": "big"})).await;
    assert!(!created["metadata"]["uid"].as_str().unwrap().is_empty());
    assert!(created["metadata"]["creationTimestamp"].is_string());
    assert_eq!(created["metadata"]["generation"], 1);
    let again = json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Widget", "metadata": {"name": "a"}});
    assert_eq!(t.call(Method::POST, &t.widgets(""), again).await.unwrap_err(), failure(409, "AlreadyExists"));

    let generated =
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Widget", "metadata": {"generateName": "gen-"}});
    let named = t.call(Method::POST, &t.widgets(""), generated).await.unwrap();
    let name = named["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("gen-") && name.len() == "gen-".len() + 5, "{name}");

    let missing = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
    let path = "/api/v1/namespaces/no-such-namespace-anywhere/configmaps";
    assert_eq!(t.call(Method::POST, path, missing).await.unwrap_err(), failure(404, "NotFound"));
    t.cleanup().await;
}

#[tokio::test]
async fn one_cluster_wide_resource_version_grows_with_every_write() {
    let t = target("rv").await;
    let a = t.create_widget("a", json!({})).await;
    let cm = t.call(Method::POST, &t.core("configmaps", ""), json!({"metadata": {"name": "c"}})).await.unwrap();
    let b = t.merge(&t.widgets("/a"), json!({"spec": {"size": "x"}})).await.unwrap();
    assert!(rv(&a) < rv(&cm) && rv(&cm) < rv(&b), "{} {} {}", rv(&a), rv(&cm), rv(&b));
    // A write that changes nothing is no write: same version.
    let same = t.merge(&t.widgets("/a"), json!({"spec": {"size": "x"}})).await.unwrap();
    assert_eq!(rv(&same), rv(&b));
    t.cleanup().await;
}

#[tokio::test]
async fn stale_writes_conflict_and_custom_resources_need_a_version() {
    let t = target("stale").await;
    let first = t.create_widget("a", json!({"size": "a"})).await;
    t.merge(&t.widgets("/a"), json!({"spec": {"size": "b"}})).await.unwrap();

    let mut stale = first.clone();
    stale["spec"]["size"] = json!("c");
    assert_eq!(t.call(Method::PUT, &t.widgets("/a"), stale.clone()).await.unwrap_err(), failure(409, "Conflict"));

    let stale_patch =
        json!({"metadata": {"resourceVersion": first["metadata"]["resourceVersion"]}, "spec": {"size": "d"}});
    assert_eq!(t.merge(&t.widgets("/a"), stale_patch).await.unwrap_err(), failure(409, "Conflict"));

    stale["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    assert_eq!(t.call(Method::PUT, &t.widgets("/a"), stale).await.unwrap_err(), failure(422, "Invalid"));
    t.cleanup().await;
}

#[tokio::test]
async fn generation_moves_only_with_the_spec() {
    let t = target("generation").await;
    t.create_widget("a", json!({"size": "a"})).await;
    let labelled = t.merge(&t.widgets("/a"), json!({"metadata": {"labels": {"x": "y"}}})).await.unwrap();
    assert_eq!(labelled["metadata"]["generation"], 1);
    let status = t.merge(&t.widgets("/a/status"), json!({"status": {"phase": "Ready"}})).await.unwrap();
    assert_eq!(status["metadata"]["generation"], 1);
    let spec = t.merge(&t.widgets("/a"), json!({"spec": {"size": "b"}})).await.unwrap();
    assert_eq!(spec["metadata"]["generation"], 2);
    t.cleanup().await;
}

#[tokio::test]
async fn the_status_subresource_splits_writes() {
    let t = target("status").await;
    t.create_widget("a", json!({"size": "a"})).await;
    // Status written through the main resource is ignored...
    let main = t.merge(&t.widgets("/a"), json!({"spec": {"size": "b"}, "status": {"phase": "Ignored"}})).await.unwrap();
    assert_eq!(main["spec"]["size"], "b");
    assert!(main.get("status").is_none() || main["status"]["phase"].is_null());
    // ...and spec written through /status is ignored.
    let status =
        t.merge(&t.widgets("/a/status"), json!({"spec": {"size": "c"}, "status": {"phase": "Ready"}})).await.unwrap();
    assert_eq!((status["spec"]["size"].as_str(), status["status"]["phase"].as_str()), (Some("b"), Some("Ready")));
    t.cleanup().await;
}

#[tokio::test]
async fn schema_defaults_pruning_and_validation() {
    let t = target("schema").await;
    let created = t.create_widget("a", json!({"size": "a", "unknown": true})).await;
    assert_eq!(created["spec"]["replicas"], 1, "default applied");
    assert!(created["spec"].get("unknown").is_none(), "unknown field pruned");
    let bad = json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Widget", "metadata": {"name": "b"}, "spec": {"size": "NOT"}});
    assert_eq!(t.call(Method::POST, &t.widgets(""), bad).await.unwrap_err(), failure(422, "Invalid"));
    assert_eq!(
        t.send(Method::PATCH, &t.widgets("/a"), "application/strategic-merge-patch+json", json!({"spec": {}}))
            .await
            .unwrap_err(),
        failure(415, "UnsupportedMediaType")
    );
    t.cleanup().await;
}

#[tokio::test]
async fn json_patch_tests_are_a_compare_and_set() {
    let t = target("jsonpatch").await;
    t.create_widget("a", json!({"size": "a"})).await;
    let acquire = json!([
        {"op": "test", "path": "/metadata/labels", "value": null},
        {"op": "add", "path": "/metadata/labels", "value": {"owner": "c1"}}
    ]);
    // The real server: a `test` of null on an absent path succeeds.
    let won = t.json_patch(&t.widgets("/a"), acquire.clone()).await.unwrap();
    assert_eq!(won["metadata"]["labels"]["owner"], "c1");
    // The same guarded write again now fails: the labels exist.
    assert_eq!(t.json_patch(&t.widgets("/a"), acquire).await.unwrap_err().code, 422);
    let steal = json!([
        {"op": "test", "path": "/metadata/labels/owner", "value": "c2"},
        {"op": "replace", "path": "/metadata/labels/owner", "value": "c3"}
    ]);
    assert_eq!(t.json_patch(&t.widgets("/a"), steal).await.unwrap_err().code, 422);
    let current = t.call(Method::GET, &t.widgets("/a"), Value::Null).await.unwrap();
    assert_eq!(current["metadata"]["labels"]["owner"], "c1", "a failed test changes nothing");
    t.cleanup().await;
}

#[tokio::test]
async fn finalizers_hold_deletion_and_watchers_see_it() {
    let t = target("finalizers").await;
    let created = t.create_widget("a", json!({})).await;
    t.merge(&t.widgets("/a"), json!({"metadata": {"finalizers": ["example.com/hold"]}})).await.unwrap();
    let watch_path = t.widgets(&format!("?watch=true&resourceVersion={}", rv(&created)));
    let watcher = t.watch(watch_path, 3);

    let deleting = t.call(Method::DELETE, &t.widgets("/a"), Value::Null).await.unwrap();
    assert!(deleting["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(deleting["metadata"]["generation"], 2, "setting deletionTimestamp bumps generation");
    assert!(t.call(Method::GET, &t.widgets("/a"), Value::Null).await.is_ok(), "still there while finalized");
    let add = json!({"metadata": {"finalizers": ["example.com/hold", "example.com/late"]}});
    assert_eq!(t.merge(&t.widgets("/a"), add).await.unwrap_err(), failure(422, "Invalid"));
    t.merge(&t.widgets("/a"), json!({"metadata": {"finalizers": null}})).await.unwrap();
    assert_eq!(t.call(Method::GET, &t.widgets("/a"), Value::Null).await.unwrap_err(), failure(404, "NotFound"));

    let events = watcher.await;
    let types: Vec<&str> = events.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(types, ["MODIFIED", "MODIFIED", "DELETED"], "finalizer added, deletion started, gone");
    let versions: Vec<u64> = events.iter().map(|(_, o)| rv(o)).collect();
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
    t.cleanup().await;
}

#[tokio::test]
async fn delete_preconditions() {
    let t = target("preconditions").await;
    let created = t.create_widget("a", json!({})).await;
    let wrong_uid = json!({"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}});
    assert_eq!(t.call(Method::DELETE, &t.widgets("/a"), wrong_uid).await.unwrap_err(), failure(409, "Conflict"));
    let wrong_rv = json!({"preconditions": {"resourceVersion": "1"}});
    assert_eq!(t.call(Method::DELETE, &t.widgets("/a"), wrong_rv).await.unwrap_err(), failure(409, "Conflict"));
    let right = json!({"preconditions": {"uid": created["metadata"]["uid"], "resourceVersion": created["metadata"]["resourceVersion"]}});
    t.call(Method::DELETE, &t.widgets("/a"), right).await.unwrap();
    assert_eq!(t.call(Method::GET, &t.widgets("/a"), Value::Null).await.unwrap_err(), failure(404, "NotFound"));
    t.cleanup().await;
}

async fn names(t: &Target, query: &str) -> Vec<String> {
    let list = t.call(Method::GET, &t.widgets(&format!("?{query}")), Value::Null).await.unwrap();
    list["items"].as_array().unwrap().iter().map(|o| o["metadata"]["name"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn label_selectors_in_every_set_based_form() {
    let t = target("labels").await;
    for (name, tier) in [("a", Some("gold")), ("b", Some("silver")), ("c", None)] {
        t.create_widget(name, json!({})).await;
        if let Some(tier) = tier {
            t.merge(&t.widgets(&format!("/{name}")), json!({"metadata": {"labels": {"tier": tier}}})).await.unwrap();
        }
    }
    let cases = [
        ("tier%3Dgold", vec!["a"]),
        ("tier%21%3Dgold", vec!["b", "c"]),
        ("tier+in+%28gold%2Csilver%29", vec!["a", "b"]),
        ("tier+notin+%28gold%29", vec!["b", "c"]),
        ("tier", vec!["a", "b"]),
        ("%21tier", vec!["c"]),
    ];
    for (selector, expected) in cases {
        assert_eq!(names(&t, &format!("labelSelector={selector}")).await, expected, "{selector}");
    }
    t.cleanup().await;
}

#[tokio::test]
async fn field_selectors_are_limited_per_resource() {
    let t = target("fields").await;
    t.create_widget("a", json!({})).await;
    t.create_widget("b", json!({})).await;
    assert_eq!(names(&t, "fieldSelector=metadata.name%3Db").await, ["b"]);
    let path = t.widgets("?fieldSelector=spec.size%3Dx");
    assert_eq!(t.call(Method::GET, &path, Value::Null).await.unwrap_err(), failure(400, "BadRequest"));
    let pods = t.core("pods", "?fieldSelector=spec.nodeName%3Dn1%2Cstatus.phase%3DPending");
    assert!(t.call(Method::GET, &pods, Value::Null).await.is_ok());
    t.cleanup().await;
}

#[tokio::test]
async fn lists_page_with_limit_and_continue() {
    let t = target("paging").await;
    for name in ["a", "b", "c", "d", "e"] {
        t.create_widget(name, json!({})).await;
    }
    let mut seen = Vec::new();
    let mut path = t.widgets("?limit=2");
    let mut pages = 0;
    loop {
        let page = t.call(Method::GET, &path, Value::Null).await.unwrap();
        pages += 1;
        seen.extend(
            page["items"].as_array().unwrap().iter().map(|o| o["metadata"]["name"].as_str().unwrap().to_string()),
        );
        match page["metadata"]["continue"].as_str().filter(|c| !c.is_empty()) {
            Some(token) => {
                if pages == 1 {
                    assert_eq!(page["metadata"]["remainingItemCount"], 3);
                }
                path = t.widgets(&format!("?limit=2&continue={token}"));
            }
            None => break,
        }
    }
    assert_eq!((pages, seen), (3, vec!["a", "b", "c", "d", "e"].into_iter().map(String::from).collect::<Vec<_>>()));
    t.cleanup().await;
}

#[tokio::test]
async fn watch_resumes_from_a_version_in_commit_order() {
    let t = target("watch").await;
    let a = t.create_widget("a", json!({})).await;
    let watcher = t.watch(t.widgets(&format!("?watch=true&resourceVersion={}", rv(&a))), 3);
    t.create_widget("b", json!({})).await;
    t.merge(&t.widgets("/a"), json!({"spec": {"size": "x"}})).await.unwrap();
    t.call(Method::DELETE, &t.widgets("/b"), Value::Null).await.unwrap();
    let events = watcher.await;
    let seen: Vec<(&str, &str)> =
        events.iter().map(|(k, o)| (k.as_str(), o["metadata"]["name"].as_str().unwrap())).collect();
    assert_eq!(seen, [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]);

    // Without a version, a watch starts with the current objects as ADDED.
    let initial = t.watch(t.widgets("?watch=true"), 1).await;
    assert_eq!((initial[0].0.as_str(), initial[0].1["metadata"]["name"].as_str()), ("ADDED", Some("a")));
    t.cleanup().await;
}

#[tokio::test]
async fn a_watch_with_a_selector_sees_objects_enter_and_leave_it() {
    let t = target("watchsel").await;
    let a = t.create_widget("a", json!({})).await;
    let watcher = t.watch(t.widgets(&format!("?watch=true&labelSelector=tier%3Dgold&resourceVersion={}", rv(&a))), 2);
    t.merge(&t.widgets("/a"), json!({"metadata": {"labels": {"tier": "gold"}}})).await.unwrap();
    t.merge(&t.widgets("/a"), json!({"metadata": {"labels": {"tier": "lead"}}})).await.unwrap();
    let types: Vec<String> = watcher.await.into_iter().map(|(k, _)| k).collect();
    assert_eq!(types, ["ADDED", "DELETED"]);
    t.cleanup().await;
}

#[tokio::test]
async fn a_too_old_version_gets_an_error_event_with_410() {
    let t = target("expired").await;
    // Surprise from the real server: the answer is HTTP 200 with one ERROR
    // event carrying a 410 Status, not an HTTP 410.
    let events = t.watch(t.widgets("?watch=true&resourceVersion=1"), 1).await;
    assert_eq!(events[0].0, "ERROR");
    assert_eq!(events[0].1["code"], 410);
    assert_eq!(events[0].1["reason"], "Expired");
    t.cleanup().await;
}

#[tokio::test]
async fn a_watch_ends_after_its_timeout() {
    let t = target("timeout").await;
    let request = Request::builder().uri(t.widgets("?watch=true&timeoutSeconds=1")).body(Vec::new()).unwrap();
    let stream = t.client.request_events::<Value>(request).await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), stream.collect::<Vec<_>>()).await;
    assert!(ended.is_ok(), "the watch must end by itself");
    t.cleanup().await;
}

#[tokio::test]
async fn the_scale_subresource_reads_and_writes_replicas() {
    let t = target("scale").await;
    t.create_widget("a", json!({"replicas": 2})).await;
    t.merge(&t.widgets("/a/status"), json!({"status": {"replicas": 2, "selector": "app=a"}})).await.unwrap();
    let scale = t.call(Method::GET, &t.widgets("/a/scale"), Value::Null).await.unwrap();
    assert_eq!((scale["kind"].as_str(), scale["spec"]["replicas"].as_i64()), (Some("Scale"), Some(2)));
    assert_eq!((scale["status"]["replicas"].as_i64(), scale["status"]["selector"].as_str()), (Some(2), Some("app=a")));
    let mut scaled = scale.clone();
    scaled["spec"]["replicas"] = json!(5);
    t.call(Method::PUT, &t.widgets("/a/scale"), scaled).await.unwrap();
    let widget = t.call(Method::GET, &t.widgets("/a"), Value::Null).await.unwrap();
    assert_eq!(widget["spec"]["replicas"], 5);
    let patched = t.merge(&t.widgets("/a/scale"), json!({"spec": {"replicas": 3}})).await.unwrap();
    assert_eq!(patched["spec"]["replicas"], 3);
    t.cleanup().await;
}

async fn gone_within(t: &Target, path: &str, seconds: u64) -> bool {
    for _ in 0..seconds * 10 {
        if t.call(Method::GET, path, Value::Null).await.is_err_and(|f| f.code == 404) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

async fn owner_and_dependent(t: &Target) -> Value {
    let owner = t.call(Method::POST, &t.core("configmaps", ""), json!({"metadata": {"name": "owner"}})).await.unwrap();
    let reference = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": true}]);
    let dependent = json!({"metadata": {"name": "dependent", "ownerReferences": reference}});
    t.call(Method::POST, &t.core("configmaps", ""), dependent).await.unwrap();
    owner
}

#[tokio::test]
async fn background_deletion_collects_dependents() {
    let t = target("gcbackground").await;
    owner_and_dependent(&t).await;
    t.call(Method::DELETE, &t.core("configmaps", "/owner"), json!({"propagationPolicy": "Background"})).await.unwrap();
    assert!(gone_within(&t, &t.core("configmaps", "/owner"), 1).await, "the owner goes at once");
    assert!(gone_within(&t, &t.core("configmaps", "/dependent"), 30).await, "its dependent follows");
    t.cleanup().await;
}

#[tokio::test]
async fn foreground_deletion_removes_dependents_first() {
    let t = target("gcforeground").await;
    owner_and_dependent(&t).await;
    let deleting = t
        .call(Method::DELETE, &t.core("configmaps", "/owner"), json!({"propagationPolicy": "Foreground"}))
        .await
        .unwrap();
    let finalizers = deleting["metadata"]["finalizers"].as_array().cloned().unwrap_or_default();
    assert!(finalizers.contains(&json!("foregroundDeletion")), "{deleting}");
    assert!(gone_within(&t, &t.core("configmaps", "/dependent"), 30).await);
    assert!(gone_within(&t, &t.core("configmaps", "/owner"), 30).await);
    t.cleanup().await;
}

#[tokio::test]
async fn a_scheduled_pod_waits_for_its_kubelet_after_delete() {
    let t = target("pods").await;
    let pod = |name: &str, node: Option<&str>| {
        let mut spec = json!({"containers": [{"name": "cn", "image": "matrixorigin/matrixone"}]});
        if let Some(node) = node {
            spec["nodeName"] = json!(node);
        }
        json!({"metadata": {"name": name}, "spec": spec})
    };
    let created = t.call(Method::POST, &t.core("pods", ""), pod("scheduled", Some("node-1"))).await.unwrap();
    assert_eq!(created["status"]["phase"], "Pending");
    t.call(Method::POST, &t.core("pods", ""), pod("unscheduled", None)).await.unwrap();

    t.call(Method::DELETE, &t.core("pods", "/unscheduled"), Value::Null).await.unwrap();
    assert!(gone_within(&t, &t.core("pods", "/unscheduled"), 5).await, "an unscheduled pod goes at once");

    let deleting = t.call(Method::DELETE, &t.core("pods", "/scheduled"), Value::Null).await.unwrap();
    assert!(deleting["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(deleting["metadata"]["deletionGracePeriodSeconds"], 30);
    assert!(t.call(Method::GET, &t.core("pods", "/scheduled"), Value::Null).await.is_ok(), "waits for the kubelet");
    t.call(Method::DELETE, &t.core("pods", "/scheduled"), json!({"gracePeriodSeconds": 0})).await.unwrap();
    assert!(gone_within(&t, &t.core("pods", "/scheduled"), 5).await);
    t.cleanup().await;
}

#[tokio::test]
async fn events_written_as_events_k8s_io_read_as_core_events() {
    let t = target("events").await;
    let event = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "w.1"},
        "eventTime": "2026-11-29T10:00:00.000000Z",
        "regarding": {"kind": "Widget", "name": "a", "namespace": t.ns, "apiVersion": format!("{GROUP}/v1")},
        "note": "bound to cn-0", "reason": "Bound", "type": "Normal", "action": "Acquire",
        "reportingController": "cnpool", "reportingInstance": "cnpool-0"
    });
    let path = format!("/apis/events.k8s.io/v1/namespaces/{}/events", t.ns);
    t.call(Method::POST, &path, event).await.unwrap();
    let selector = format!("?fieldSelector=involvedObject.name%3Da%2CinvolvedObject.namespace%3D{}", t.ns);
    let core = t.call(Method::GET, &t.core("events", &selector), Value::Null).await.unwrap();
    let item = &core["items"][0];
    assert_eq!((item["message"].as_str(), item["reason"].as_str()), (Some("bound to cn-0"), Some("Bound")));
    assert_eq!(item["involvedObject"]["kind"], "Widget");
    t.cleanup().await;
}

#[tokio::test]
async fn tables_carry_printer_columns() {
    let t = target("tables").await;
    t.create_widget("a", json!({"size": "big"})).await;
    let request = Request::builder()
        .uri(t.widgets(""))
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
        .body(Vec::new())
        .unwrap();
    let table: Value = t.client.request(request).await.unwrap();
    assert_eq!(table["kind"], "Table");
    let columns: Vec<&str> =
        table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(columns, ["Name", "Size"]);
    assert_eq!(table["rows"][0]["cells"], json!(["a", "big"]));
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    t.cleanup().await;
}

#[tokio::test]
async fn discovery_lists_custom_resources_with_their_subresources() {
    let t = target("discovery").await;
    let list = t.call(Method::GET, &format!("/apis/{GROUP}/v1"), Value::Null).await.unwrap();
    let names: Vec<&str> = list["resources"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    for expected in ["widgets", "widgets/status", "widgets/scale"] {
        assert!(names.contains(&expected), "{names:?}");
    }
    let widgets = list["resources"].as_array().unwrap().iter().find(|r| r["name"] == "widgets").unwrap();
    assert_eq!(widgets["shortNames"], json!(["wd"]));
    let version = t.call(Method::GET, "/version", Value::Null).await.unwrap();
    assert_eq!(version["major"], "1");
    // Against a real server, say which one answered.
    if t.real {
        eprintln!("conformance target: {}", version["gitVersion"]);
    }
    t.cleanup().await;
}
