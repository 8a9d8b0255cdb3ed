//! What the pool controller creates for a pool: the objects its pods need
//! (made once) and its pods, from the pod template of its blueprint.

use std::fmt::Debug;

use cnpool_api::{CNPool, PodPhase, labels};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::Context;
use crate::error::{Error, is_already_exists};
use crate::key::key_of;

/// The headless Service of a pool with a plain pod template: its name is
/// the pods' subdomain.
pub fn service_name(pool: &str) -> String {
    pool.to_owned()
}

/// Creates `object` unless it exists (a ConfigMap or Service of pool
/// `pool`): it is made once, and kept as made.
pub(super) async fn ensure_object<R, K>(ctx: &Context<R>, pool: &str, object: K) -> Result<(), Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    let namespace = object.meta().namespace.clone().unwrap_or_default();
    let name = object.meta().name.clone().unwrap_or_default();
    let kind = K::kind(&());
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &namespace);
    if api.get_opt(&name).await.map_err(|e| Error::kube("read", format!("{kind} {name}"), e))?.is_some() {
        return Ok(());
    }
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {
            tracing::info!(pool, kind = %kind, name = %name, "created");
            Ok(())
        }
        Err(error) if is_already_exists(&error) => Ok(()),
        Err(error) => Err(Error::kube("create", format!("{kind} {name}"), error)),
    }
}

/// Creates pod `name` of `pool`; `false` when the name was taken (by another
/// worker or operator: the name is the lock).
pub(super) async fn create_pod<R>(
    ctx: &Context<R>,
    pool: &CNPool,
    template: &PodTemplateSpec,
    revision: &str,
    name: &str,
) -> Result<bool, Error> {
    let (namespace, pool_name) = key_of(pool);
    let pod = pool_pod(pool, template, revision, name);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    match pods.create(&PostParams::default(), &pod).await {
        Ok(created) => {
            tracing::info!(pool = %pool_name, pod = %name, revision, "created pod");
            ctx.expected.creation(&(namespace, pool_name), name, created.metadata.uid.as_deref().unwrap_or_default());
            Ok(true)
        }
        Err(error) if is_already_exists(&error) => {
            tracing::debug!(pool = %pool_name, pod = %name, "pod exists already");
            Ok(false)
        }
        Err(error) => Err(Error::kube("create pod", name, error)),
    }
}

/// Pod `name` of `pool` made from `template`: with cnpool's labels (phase
/// Unknown, revision, pool, direct pod, and the CN UUID its start script
/// derives from its DNS name), the pooling annotation, the CN store
/// finalizer, and a hostname under the template's subdomain (a plain
/// template's: the pool's headless Service).
fn pool_pod(pool: &CNPool, template: &PodTemplateSpec, revision: &str, name: &str) -> Pod {
    let (namespace, pool_name) = key_of(pool);
    let mut meta = template.metadata.clone().unwrap_or_default();
    let mut spec = template.spec.clone().unwrap_or_default();
    let subdomain = spec.subdomain.clone().unwrap_or_else(|| service_name(&pool_name));
    let mut pod_labels = meta.labels.take().unwrap_or_default();
    pod_labels.extend(pool.pod_labels());
    pod_labels.insert(labels::PHASE.to_owned(), PodPhase::Unknown.as_str().to_owned());
    pod_labels.insert(labels::REVISION.to_owned(), revision.to_owned());
    pod_labels.insert(labels::DIRECT_POD.to_owned(), "true".to_owned());
    pod_labels.insert(labels::CN_UUID.to_owned(), cnpool_api::cn_store_uuid(name, &subdomain, &namespace));
    let mut annotations = meta.annotations.take().unwrap_or_default();
    annotations.insert(labels::MANAGEMENT_POLICY.to_owned(), labels::MANAGEMENT_POLICY_POOLING.to_owned());
    spec.hostname = Some(name.to_owned());
    spec.subdomain = Some(subdomain);
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace),
            labels: Some(pod_labels),
            annotations: Some(annotations),
            finalizers: Some(vec![labels::CN_DRAINING_FINALIZER.to_owned()]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}
