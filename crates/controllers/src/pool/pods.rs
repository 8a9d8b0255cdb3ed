//! What the pool controller creates for a pool: its headless Service and
//! its pods, rendered from the template.

use cnpool_api::{CNPool, PodPhase, labels};
use k8s_openapi::api::core::v1::{Pod, Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, PostParams};

use crate::context::Context;
use crate::error::{Error, is_already_exists};
use crate::key::key_of;

/// The headless Service of a pool: its name is the pods' subdomain.
pub fn service_name(pool: &str) -> String {
    pool.to_owned()
}

pub(super) async fn ensure_service<R>(ctx: &Context<R>, pool: &CNPool) -> Result<(), Error> {
    let (namespace, name) = key_of(pool);
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let service_name = service_name(&name);
    if services.get_opt(&service_name).await.map_err(|e| Error::kube("read", &service_name, e))?.is_some() {
        return Ok(());
    }
    let service = Service {
        metadata: ObjectMeta {
            name: Some(service_name.clone()),
            namespace: Some(namespace.clone()),
            labels: Some([(labels::POOL_NAME.to_owned(), name.clone())].into()),
            owner_references: pool.controller_owner_ref(&()).map(|owner| vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some([(labels::POOL_NAME.to_owned(), name.clone())].into()),
            publish_not_ready_addresses: Some(true),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    match services.create(&PostParams::default(), &service).await {
        Ok(_) => {
            tracing::info!(pool = %name, service = %service_name, "created headless service");
            Ok(())
        }
        Err(error) if is_already_exists(&error) => Ok(()),
        Err(error) => Err(Error::kube("create service", service_name, error)),
    }
}

/// Creates pod `name` of `pool`; `false` when the name was taken (by another
/// worker or operator: the name is the lock).
pub(super) async fn create_pod<R>(ctx: &Context<R>, pool: &CNPool, revision: &str, name: &str) -> Result<bool, Error> {
    let (namespace, pool_name) = key_of(pool);
    let template = &pool.spec.template;
    let mut meta = template.metadata.clone().unwrap_or_default();
    let subdomain = service_name(&pool_name);
    let mut pod_labels = pool.pod_labels();
    pod_labels.insert(labels::PHASE.to_owned(), PodPhase::Unknown.as_str().to_owned());
    pod_labels.insert(labels::REVISION.to_owned(), revision.to_owned());
    pod_labels.insert(labels::DIRECT_POD.to_owned(), "true".to_owned());
    pod_labels.insert(labels::CN_UUID.to_owned(), cnpool_api::cn_store_uuid(name, &subdomain, &namespace));
    let mut annotations = meta.annotations.take().unwrap_or_default();
    annotations.insert(labels::MANAGEMENT_POLICY.to_owned(), labels::MANAGEMENT_POLICY_POOLING.to_owned());
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.hostname = Some(name.to_owned());
    spec.subdomain = Some(subdomain);
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.clone()),
            labels: Some(pod_labels),
            annotations: Some(annotations),
            finalizers: Some(vec![labels::CN_DRAINING_FINALIZER.to_owned()]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    };
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
