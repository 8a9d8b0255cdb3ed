//! What a pool's pods are made from, resolved once per reconcile: a plain
//! `spec.podTemplate`, or the Go-shaped `spec.template` rendered by
//! cnpool-render the way the Go operator renders a CN (its ConfigMap, its
//! headless Service and the pod), in the MatrixOne cluster `spec.deps`
//! names. A Go-shaped pool whose LogSet is missing or not ready, or whose
//! template cannot be rendered, is blocked: the pool says why in its `Ready`
//! condition and a Warning Event, and creates no pod.

use cnpool_api::{CNPool, CNSetTemplate, LogSet, labels};
use cnpool_render::deps::{self, Cluster};
use cnpool_render::pod::{self, PodNames, Rendered};
use k8s_openapi::api::core::v1::{PodTemplateSpec, Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};

use crate::context::Context;
use crate::error::Error;
use crate::key::key_of;
use crate::validity::Verdict;

/// `Ready=False` reason: the LogSet `deps.logSet` names is missing or not
/// ready.
pub const LOG_SET_NOT_READY: &str = "LogSetNotReady";
/// `Ready=False` reason: the Go-shaped template cannot be rendered.
pub const RENDER_FAILED: &str = "RenderFailed";
/// What a blocked pool does not do, as its condition says.
const BLOCKED: &str = "the pool creates no pods; its pods keep serving their claims";

/// What the pool's pods are made from.
pub(super) enum Blueprint {
    /// `spec.podTemplate`, behind the headless Service named after the pool.
    Plain(Box<PodTemplateSpec>),
    /// `spec.template`, rendered.
    Go(Box<Rendered>),
}

impl Blueprint {
    /// The pod template the pool controller creates pods from; its
    /// subdomain is the headless Service the CN UUID derives from.
    pub(super) fn pod_template(&self) -> &PodTemplateSpec {
        match self {
            Self::Plain(template) => template,
            Self::Go(rendered) => &rendered.pod,
        }
    }
}

/// The blueprint of `pool`'s pods of `revision`, or the verdict that blocks
/// it. Errors are the API's (reading the LogSet).
pub(super) async fn resolve<R>(
    ctx: &Context<R>,
    pool: &CNPool,
    revision: &str,
) -> Result<Result<Blueprint, Verdict>, Error> {
    let template = match (&pool.spec.template, &pool.spec.pod_template) {
        (Some(template), _) => template,
        (None, pod_template) => {
            let mut template = pod_template.clone().unwrap_or_default();
            template.spec.get_or_insert_with(Default::default).subdomain =
                Some(super::pods::service_name(&key_of(pool).1));
            return Ok(Ok(Blueprint::Plain(Box::new(template))));
        }
    };
    let cluster = match cluster(ctx, pool).await? {
        Ok(cluster) => cluster,
        Err(verdict) => return Ok(Err(verdict)),
    };
    Ok(render(pool, template, revision, &cluster).map(|rendered| Blueprint::Go(Box::new(rendered))))
}

/// The pod names of a Go-shaped pool's revision: Go's, with the CNSet named
/// `<pool>-<revision>`, so that a pod cnpool renders has the instance labels
/// and headless Service of the Go pods of the same template.
pub(super) fn pod_names(pool: &CNPool, revision: &str) -> PodNames {
    let (namespace, name) = key_of(pool);
    PodNames::go(&namespace, &name, &format!("{name}-{revision}"))
}

fn render(pool: &CNPool, template: &CNSetTemplate, revision: &str, cluster: &Cluster) -> Result<Rendered, Verdict> {
    let blocked = |problem: String| Verdict::blocked(RENDER_FAILED, format!("{problem}. Until it is fixed, {BLOCKED}"));
    let rendered =
        pod::render(&pod::pool_template(template), &pool.spec.pod_labels, &pod_names(pool, revision), cluster)
            .map_err(|error| blocked(error.to_string()))?;
    // cnpool does not create per-pod volume claims yet: a pod mounting
    // `mo-data` without one would be refused by the API server.
    if rendered.data_claim.is_some() {
        return Err(blocked(
            "spec.template.cacheVolume: cnpool does not create the per-pod data volume claim yet; remove cacheVolume \
             (the CN then caches in memory and on the container's disk)"
                .to_owned(),
        ));
    }
    Ok(rendered)
}

/// The MatrixOne cluster of a Go-shaped pool: the LogSet `deps.logSet`
/// names (read now), `deps.externalLogSet`, or, without deps, the
/// operator's `--hakeeper-discovery`.
async fn cluster<R>(ctx: &Context<R>, pool: &CNPool) -> Result<Result<Cluster, Verdict>, Error> {
    let deps = pool.spec.deps.clone().unwrap_or_default();
    let (namespace, _) = key_of(pool);
    let log_set = match deps.log_set_key(&namespace) {
        Some((log_set_namespace, name)) => read_log_set(ctx, &log_set_namespace, &name).await?,
        None => None,
    };
    let not_ready =
        |error: deps::DepsError| Verdict::blocked(LOG_SET_NOT_READY, format!("{error}. Until it is, {BLOCKED}"));
    Ok(match deps::cluster(&deps, &namespace, log_set.as_ref(), &[]) {
        Ok(Some(cluster)) => Ok(cluster),
        Ok(None) => Ok(Cluster {
            hakeeper_address: ctx.config.hakeeper_discovery.clone(),
            service_addresses: vec![ctx.config.hakeeper_discovery.clone()],
            shared_storage: None,
        }),
        Err(error) => Err(not_ready(error)),
    })
}

/// The LogSet `namespace/name`, `None` when it does not exist or its CRD is
/// not installed (both mean: not ready).
async fn read_log_set<R>(ctx: &Context<R>, namespace: &str, name: &str) -> Result<Option<LogSet>, Error> {
    let gvk = GroupVersionKind::gvk("core.matrixorigin.io", "v1alpha1", "LogSet");
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), namespace, &ApiResource::from_gvk_with_plural(&gvk, "logsets"));
    let object = match api.get_opt(name).await {
        Ok(Some(object)) => object,
        Ok(None) => return Ok(None),
        // Without the CRD a real kube-apiserver answers a bare 404, not a
        // NotFound Status, and `get_opt` passes that on as an error: the
        // reconcile failed and retried at WARN, and the pool said nothing.
        Err(error) if crate::error::is_not_found(&error) => return Ok(None),
        Err(error) => return Err(Error::kube("read", format!("LogSet {namespace}/{name}"), error)),
    };
    let value = serde_json::to_value(&object).map_err(|source| Error::Encode { what: "LogSet", source })?;
    // A LogSet whose fields cnpool cannot read is reported as not ready by
    // `deps::cluster`, naming it, rather than failing the reconcile.
    Ok(serde_json::from_value(value).ok().or_else(|| {
        tracing::warn!(%namespace, %name, "LogSet unreadable as core.matrixorigin.io/v1alpha1; treated as not ready");
        None
    }))
}

/// Creates what the pods need besides themselves, once: the headless
/// Service (and, for a Go-shaped pool, its ConfigMap), owned by the pool.
pub(super) async fn ensure<R>(ctx: &Context<R>, pool: &CNPool, blueprint: &Blueprint) -> Result<(), Error> {
    let (namespace, name) = key_of(pool);
    let owner = pool.controller_owner_ref(&()).map(|owner| vec![owner]);
    match blueprint {
        Blueprint::Plain(_) => {
            let service = Service {
                metadata: ObjectMeta {
                    name: Some(super::pods::service_name(&name)),
                    namespace: Some(namespace.clone()),
                    labels: Some([(labels::POOL_NAME.to_owned(), name.clone())].into()),
                    owner_references: owner,
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
            super::pods::ensure_object(ctx, &name, service).await
        }
        Blueprint::Go(rendered) => {
            let mut config_map = rendered.config_map.clone();
            config_map.metadata.owner_references = owner.clone();
            super::pods::ensure_object(ctx, &name, config_map).await?;
            let mut service = rendered.headless_service.clone();
            service.metadata.owner_references = owner;
            super::pods::ensure_object(ctx, &name, service).await
        }
    }
}
