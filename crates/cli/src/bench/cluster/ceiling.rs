//! B2's second yardstick: the requests of a bind, made by a plain client as
//! fast as the server takes them, with no operator deciding anything. The
//! raw ceiling patches ConfigMaps, which cost the server far less than a
//! bind's pod patch and claim updates; this one prices exactly what the
//! operator sends per bind (docs/benchmarks.md, B2).

use std::time::Instant;

use anyhow::Context;
use cnpool_api::{CNClaim, CNClaimStatus, labels};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::{POOL, claim};

/// What the sequences cost.
pub(super) struct MixCeiling {
    /// Bind sequences completed per second.
    pub binds_per_second: f64,
    pub sequences: usize,
}

/// For each pod of the pool (whose claims the operator bound, now stopped),
/// `concurrency` at a time: creates a claim, reads it back, patches the pod's
/// labels under a `test` guard, updates the claim with the pod it names and
/// a finalizer, writes its status as the bound claim's, and creates an
/// Event. That is the burst's client create plus the operator's GET,
/// acquire, record, status and Bound Event.
pub(super) async fn bind_mix_ceiling(
    client: &kube::Client,
    namespace: &str,
    concurrency: usize,
) -> anyhow::Result<MixCeiling> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let claims: Api<CNClaim> = Api::namespaced(client.clone(), namespace);
    let in_pool = ListParams::default().labels(&format!("{}={POOL}", labels::POOL_NAME));
    // Each pod with its phase label as listed: the guard the patch tests.
    let listed: Vec<(String, Option<String>)> = pods
        .list(&in_pool)
        .await
        .context("listing the pool's pods")?
        .items
        .iter()
        .map(|pod| (pod.name_any(), pod.labels().get(labels::PHASE).cloned()))
        .collect();
    let bound_status = claims
        .list(&ListParams::default().limit(1))
        .await
        .context("listing the bound claims")?
        .items
        .into_iter()
        .find_map(|claim| claim.status)
        .context("no claim of the burst has a status to copy")?;
    let started = Instant::now();
    let sequences = futures::stream::iter(listed.iter().enumerate())
        .map(|(index, (pod, phase))| bind_sequence(client, namespace, index, (pod, phase.as_deref()), &bound_status))
        .buffer_unordered(concurrency.max(1))
        .try_fold(0usize, |done, ()| async move { Ok(done + 1) })
        .await?;
    Ok(MixCeiling { binds_per_second: sequences as f64 / started.elapsed().as_secs_f64(), sequences })
}

async fn bind_sequence(
    client: &kube::Client,
    namespace: &str,
    index: usize,
    (pod, current_phase): (&str, Option<&str>),
    bound_status: &CNClaimStatus,
) -> anyhow::Result<()> {
    let claims: Api<CNClaim> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut new = claim(namespace, index)?;
    let name = format!("mix-{index:05}");
    new.metadata.name = Some(name.clone());
    claims.create(&PostParams::default(), &new).await.with_context(|| format!("creating claim {name}"))?;
    let mut read = claims.get(&name).await.with_context(|| format!("reading claim {name}"))?;
    let phase = format!("/metadata/labels/{}", labels::PHASE.replace('/', "~1"));
    let guard_and_mark: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": phase, "value": current_phase},
        {"op": "add", "path": "/metadata/labels/bench.cnpool.io~1mix-claim", "value": name},
    ]))
    .context("building the pod patch")?;
    pods.patch(pod, &PatchParams::default(), &Patch::Json::<()>(guard_and_mark))
        .await
        .with_context(|| format!("patching pod {pod}"))?;
    read.annotations_mut().insert(labels::RECORDED_POD.to_owned(), pod.to_owned());
    read.spec.pod_name = pod.to_owned();
    read.finalizers_mut().push(labels::CLAIM_FINALIZER.to_owned());
    let mut recorded =
        claims.replace(&name, &PostParams::default(), &read).await.with_context(|| format!("updating claim {name}"))?;
    recorded.status = Some(bound_status.clone());
    claims
        .replace_status(&name, &PostParams::default(), &recorded)
        .await
        .with_context(|| format!("writing the status of claim {name}"))?;
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    events
        .create(&PostParams::default(), &bound_event(&recorded, pod))
        .await
        .with_context(|| format!("creating the Event of claim {name}"))?;
    Ok(())
}

fn bound_event(claim: &CNClaim, pod: &str) -> Event {
    let regarding: ObjectReference = claim.object_ref(&());
    let now = k8s_openapi::jiff::Timestamp::now();
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", claim.name_any(), now.as_nanosecond())),
            namespace: claim.namespace(),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        type_: Some("Normal".to_owned()),
        reason: Some("Bound".to_owned()),
        action: Some("Bind".to_owned()),
        note: Some(format!("bound to pod {pod}")),
        regarding: Some(regarding),
        reporting_controller: Some("cnpool.matrixorigin.io/bench".to_owned()),
        reporting_instance: Some("bench".to_owned()),
        ..Event::default()
    }
}
