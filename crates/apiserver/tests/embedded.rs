//! Behaviour of the embedded server that the conformance suite cannot
//! provoke on a real server in reasonable time: bookmarks, and the bounded
//! history a watch resumes from.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

async fn config_map(api: &Api<ConfigMap>, name: &str) -> ConfigMap {
    let map = ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
        ..Default::default()
    };
    api.create(&PostParams::default(), &map).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_watch_that_asks_for_bookmarks_gets_the_latest_version_every_minute() {
    let server = cnpool_apiserver::ApiServer::default();
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let created = config_map(&api, "a").await;
    let version = created.metadata.resource_version.clone().unwrap();
    let mut stream = api.watch(&WatchParams::default(), &version).await.unwrap().boxed();
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v"}}))).await.unwrap();
    let modified = stream.next().await.unwrap().unwrap();
    assert!(matches!(modified, WatchEvent::Modified(_)));
    let bookmark = tokio::time::timeout(Duration::from_secs(120), stream.next()).await.unwrap().unwrap().unwrap();
    let WatchEvent::Bookmark(bookmark) = bookmark else { panic!("expected a bookmark, got {bookmark:?}") };
    assert_eq!(bookmark.metadata.resource_version, server.resource_version().to_string());
}

#[tokio::test]
async fn a_version_that_fell_out_of_the_history_is_expired() {
    let server = cnpool_apiserver::ApiServer::builder().history(5).build();
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let first = config_map(&api, "a").await;
    for round in 0..10 {
        api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"r": round.to_string()}})))
            .await
            .unwrap();
    }
    let old = first.metadata.resource_version.unwrap();
    let mut stream = api.watch(&WatchParams::default(), &old).await.unwrap().boxed();
    match stream.next().await.unwrap().unwrap() {
        WatchEvent::Error(error) => assert_eq!((error.code, error.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410, got {other:?}"),
    }
    // A recent version still resumes.
    let recent = (server.resource_version() - 2).to_string();
    let mut stream = api.watch(&WatchParams::default(), &recent).await.unwrap().boxed();
    assert!(matches!(stream.next().await.unwrap().unwrap(), WatchEvent::Modified(_)));
}

#[tokio::test]
async fn every_committed_write_is_published_in_order() {
    let server = cnpool_apiserver::ApiServer::default();
    let mut commits = server.commits();
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    config_map(&api, "a").await;
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v"}}))).await.unwrap();
    api.delete("a", &Default::default()).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let event = commits.recv().await.unwrap();
        seen.push((event.event_type, event.resource_version));
    }
    let types: Vec<_> = seen.iter().map(|(kind, _)| *kind).collect();
    use cnpool_apiserver::EventType::*;
    assert_eq!(types, [Added, Modified, Deleted]);
    assert!(seen.windows(2).all(|pair| pair[0].1 + 1 == pair[1].1), "{seen:?}");
}

#[tokio::test]
async fn deleting_a_crd_stops_serving_its_resource() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let server = cnpool_apiserver::ApiServer::default();
    let client = server.client();
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let gvk = kube::api::GroupVersionKind::gvk("example.com", "v1", "Gadget");
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "gadgets");
    let gadgets: Api<kube::api::DynamicObject> = Api::namespaced_with(client, "default", &resource);
    let gadget: kube::api::DynamicObject =
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}}))
            .unwrap();
    gadgets.create(&PostParams::default(), &gadget).await.unwrap();
    assert_eq!(gadgets.list(&Default::default()).await.unwrap().items.len(), 1);

    crds.delete("gadgets.example.com", &Default::default()).await.unwrap();
    match gadgets.list(&Default::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 404),
        other => panic!("the resource must be gone with its CRD, got {other:?}"),
    }
}
