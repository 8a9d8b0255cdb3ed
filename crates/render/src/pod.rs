//! The pool pod, its ConfigMap and headless Service (reference §2, §4), and
//! the CNSet webhook's defaults (reference §1).

use std::collections::BTreeMap;

use cnpool_api::{GoDuration, labels};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, ObjectFieldSelector,
    PersistentVolumeClaimSpec, PodReadinessGate, PodSpec, PodTemplateSpec, SecretKeySelector, SecretVolumeSource,
    Service, ServiceSpec, TopologySpreadConstraint, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::config::{DATA_PATH, S3_CERTIFICATE_PATH, cn_config, config_map_digest, config_suffix, python_udf_port};
use crate::deps::Cluster;
use crate::quantity::Quantity;
use crate::toml::ConfigError;
use crate::version::{inplace_gates, mo_version, operator_version_annotation};
use cnpool_api::cnset::{CNSetTemplate, DEFAULT_STORE_DRAIN_TIMEOUT, MainContainerOverlay, Overlay, ScalingConfig};

/// The operator chart's `defaultArgs.cn`, the webhook's `serviceArgs` default.
pub const DEFAULT_CN_ARGS: &[&str] = &["-debug-http=:6060"];
pub const DEFAULT_GODEBUG: &str = "madvdontneed=1,gctrace=2";
pub const PYTHON_UDF_DEFAULT_IMAGE: &str = "composer000/mo-python-udf-server:latest";
pub const MAIN_CONTAINER: &str = "main";
const CONFIG_VOLUME: &str = "config";
const CONFIG_PATH: &str = "/etc/matrixone/config";
const DATA_VOLUME: &str = "mo-data";
const S3_CERTIFICATE_VOLUME: &str = "s3-ssl";
const MEMORY_FS_VOLUME: &str = "tmpfs";
const MEMORY_BIN_PATH: &str = "/matrixone/bin";
const START_SCRIPT: &str = "start.sh";
const CONFIG_SUFFIX_ANNOTATION: &str = "matrixorigin.io/config-suffix";

/// The template a pool renders from: Go's pool overrides (drain enabled,
/// replicas 0) then the CNSet webhook's defaults, which Go applies to the
/// pool's CNSet and a pod-creating operator must apply itself.
pub fn pool_template(template: &CNSetTemplate) -> CNSetTemplate {
    let mut spec = template.clone();
    spec.replicas = Some(0);
    spec.scaling_config.get_or_insert_with(ScalingConfig::default).store_drain_enabled = Some(true);
    with_webhook_defaults(spec)
}

/// The CNSet webhook's defaults (reference §1).
pub fn with_webhook_defaults(mut spec: CNSetTemplate) -> CNSetTemplate {
    let memory_request = spec
        .resources
        .as_ref()
        .and_then(|resources| resources.requests.as_ref())
        .and_then(|requests| requests.get("memory"))
        .and_then(|memory| Quantity::parse(&memory.0).ok())
        .filter(|memory| memory.value() != 0);
    let cache = spec.shared_storage_cache.get_or_insert_with(Default::default);
    if let Some(memory) = memory_request.filter(|_| cache.memory_cache_size.is_none()) {
        cache.memory_cache_size = Some(K8sQuantity(scaled(&memory, 1, 2).to_string()));
    }
    let volume_size = spec.cache_volume.as_ref().and_then(|volume| volume.size.as_ref());
    if let Some(size) =
        volume_size.and_then(|size| Quantity::parse(&size.0).ok()).filter(|_| cache.disk_cache_size.is_none())
    {
        cache.disk_cache_size = Some(K8sQuantity(scaled(&size, 9, 10).to_string()));
    }
    if let Some(scaling) = spec.scaling_config.as_mut().filter(|scaling| scaling.store_drain_enabled == Some(true)) {
        scaling
            .store_drain_timeout
            .get_or_insert_with(|| GoDuration::new(format!("{}m0s", DEFAULT_STORE_DRAIN_TIMEOUT.as_secs() / 60)));
    }
    if spec.service_args.is_empty() {
        spec.service_args = DEFAULT_CN_ARGS.iter().map(|arg| (*arg).to_owned()).collect();
    }
    let overlay = spec.overlay.get_or_insert_with(Overlay::default);
    let env = overlay.container.env.get_or_insert_with(Vec::new);
    if !env.iter().any(|var| var.name == "GODEBUG") {
        env.push(EnvVar { name: "GODEBUG".into(), value: Some(DEFAULT_GODEBUG.into()), ..EnvVar::default() });
    }
    if spec.export_to_prometheus == Some(true) && spec.prom_discovery_scheme.is_none() {
        spec.prom_discovery_scheme = Some("Service".into());
    }
    if spec.role.as_deref().unwrap_or("").is_empty() {
        spec.role = Some("TP".into());
    }
    spec
}

/// `value × numerator / denominator` in whole units, in the same notation.
fn scaled(quantity: &Quantity, numerator: i128, denominator: i128) -> Quantity {
    let units = i64::try_from(quantity.value() * numerator / denominator).unwrap_or(i64::MAX);
    Quantity::from_units(units, quantity.format)
}

/// The names a pool's pods are rendered under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodNames {
    pub namespace: String,
    pub pool: String,
    /// The `matrixorigin.io/instance` value: Go's CNSet name.
    pub instance: String,
    /// The headless Service, the pods' subdomain; it enters the CN UUID.
    pub headless_service: String,
}

impl PodNames {
    /// Go's names: instance = the CNSet name, Service `<instance>-cn-headless`.
    pub fn go(namespace: &str, pool: &str, cnset: &str) -> Self {
        PodNames {
            namespace: namespace.to_owned(),
            pool: pool.to_owned(),
            instance: cnset.to_owned(),
            headless_service: format!("{cnset}-cn-headless"),
        }
    }

    /// The three labels Go selects a CNSet's pods and Services by.
    pub fn instance_labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (labels::INSTANCE_NAMESPACE.to_owned(), self.namespace.clone()),
            (labels::INSTANCE.to_owned(), self.instance.clone()),
            (labels::COMPONENT.to_owned(), labels::CN_SET_COMPONENT.to_owned()),
        ])
    }
}

/// What a pool needs to run CNs of one template.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// The pod template; the pool controller adds the pod name, its own
    /// labels (revision, …) and finalizer, and — with a cache volume — the
    /// `mo-data` volume on the claim it creates from [`Rendered::data_claim`].
    pub pod: PodTemplateSpec,
    pub config_map: ConfigMap,
    pub headless_service: Service,
    /// The per-pod PVC of the cache volume (`mo-data`), if the template has one.
    pub data_claim: Option<PersistentVolumeClaimSpec>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("spec.template.image is empty: give the MatrixOne CN image, e.g. matrixorigin/matrixone:1.2.0")]
    NoImage,
    #[error("spec.template: neither semanticVersion nor the image tag is a version; set semanticVersion, e.g. 1.2.0")]
    NoVersion,
}

/// Renders `template` (already through [`pool_template`]) for pool `names`
/// whose `podLabels` are `pool_labels`, in `cluster`.
pub fn render(
    template: &CNSetTemplate,
    pool_labels: &BTreeMap<String, String>,
    names: &PodNames,
    cluster: &Cluster,
) -> Result<Rendered, RenderError> {
    if template.image.is_empty() {
        return Err(RenderError::NoImage);
    }
    let version = mo_version(template).ok_or(RenderError::NoVersion)?;
    let gates = inplace_gates(template);
    let config = cn_config(template, cluster)?;
    let suffix = config_suffix(&config);
    let script = start_script(template.memory_fs_size.is_some(), gates);
    let mut data = BTreeMap::from([(START_SCRIPT.to_owned(), script)]);
    let config_map_name = if gates {
        data.insert(format!("config.toml-{suffix}"), config);
        format!("{}-cn-config", names.instance)
    } else {
        data.insert("config.toml".to_owned(), config);
        format!("{}-cn-config-{}", names.instance, config_map_digest(&data))
    };
    let overlay = template.overlay.clone().unwrap_or_default();
    let storage = cluster.shared_storage.clone().unwrap_or_default();

    let mut main = main_container(template, names, gates, &overlay);
    apply_container_overlay(&mut main, &overlay.container);
    let mut volumes: Vec<Volume> = Vec::new();
    if let Some(s3) = storage.s3.as_ref() {
        if let Some(certificates) = s3.certificate_ref.as_ref() {
            upsert(
                &mut volumes,
                Volume {
                    name: S3_CERTIFICATE_VOLUME.into(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(certificates.name.clone()),
                        ..Default::default()
                    }),
                    ..Volume::default()
                },
                |v| v.name.clone(),
            );
        }
        let env = main.env.get_or_insert_with(Vec::new);
        if let Some(secret) = s3.secret_ref.as_ref() {
            for key in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
                upsert(
                    env,
                    EnvVar {
                        name: key.into(),
                        value_from: Some(EnvVarSource {
                            secret_key_ref: Some(SecretKeySelector {
                                name: secret.name.clone(),
                                key: key.into(),
                                optional: None,
                            }),
                            ..EnvVarSource::default()
                        }),
                        ..EnvVar::default()
                    },
                    |v| v.name.clone(),
                );
            }
        }
        if s3.certificate_ref.is_some() {
            upsert(
                main.volume_mounts.get_or_insert_with(Vec::new),
                VolumeMount {
                    name: S3_CERTIFICATE_VOLUME.into(),
                    mount_path: S3_CERTIFICATE_PATH.into(),
                    read_only: Some(true),
                    ..VolumeMount::default()
                },
                |m| m.name.clone(),
            );
        }
        let region = if s3.region.is_empty() { "us-west-2" } else { &s3.region };
        upsert(env, EnvVar { name: "AWS_REGION".into(), value: Some(region.into()), ..EnvVar::default() }, |v| {
            v.name.clone()
        });
    }
    let mut spec = PodSpec {
        containers: vec![main],
        subdomain: Some(names.headless_service.clone()),
        node_selector: (!template.node_selector.is_empty()).then(|| template.node_selector.clone()),
        readiness_gates: Some(vec![PodReadinessGate { condition_type: labels::CN_STORE_CONDITION.into() }]),
        ..PodSpec::default()
    };
    if !template.topology_spread.is_empty() {
        spec.topology_spread_constraints = Some(
            template
                .topology_spread
                .iter()
                .map(|key| TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: key.clone(),
                    when_unsatisfiable: "DoNotSchedule".into(),
                    label_selector: Some(LabelSelector {
                        match_labels: Some(names.instance_labels()),
                        ..Default::default()
                    }),
                    ..TopologySpreadConstraint::default()
                })
                .collect(),
        );
    }
    for volume in overlay.volumes.clone().unwrap_or_default() {
        upsert(&mut volumes, volume, |v| v.name.clone());
    }
    apply_pod_overlay(&mut spec, &overlay);
    if let Some(size) = template.memory_fs_size.as_ref() {
        volumes.push(Volume {
            name: MEMORY_FS_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource { medium: Some("Memory".into()), size_limit: Some(size.clone()) }),
            ..Volume::default()
        });
        let main = &mut spec.containers[0];
        main.volume_mounts.get_or_insert_with(Vec::new).push(VolumeMount {
            name: MEMORY_FS_VOLUME.into(),
            mount_path: MEMORY_BIN_PATH.into(),
            ..VolumeMount::default()
        });
        main.env.get_or_insert_with(Vec::new).push(EnvVar {
            name: "MO_BIN_PATH".into(),
            value: Some(MEMORY_BIN_PATH.into()),
            ..EnvVar::default()
        });
    }
    if let Some(port) = python_udf_port(template) {
        spec.containers.push(python_udf_container(template, port));
    }
    volumes.push(Volume {
        name: CONFIG_VOLUME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map_name.clone(),
            default_mode: Some(0o644),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    });
    spec.volumes = Some(volumes);
    canonical_pod_quantities(&mut spec);

    let mut pod_labels = names.instance_labels();
    pod_labels.extend(overlay.pod_labels.clone().unwrap_or_default());
    pod_labels.extend(pool_labels.clone());
    pod_labels.insert(labels::PHASE.into(), "Unknown".into());
    pod_labels.insert(labels::POOL_NAME.into(), names.pool.clone());
    let mut annotations = BTreeMap::from([
        ("matrixone.cloud/cn-label".to_owned(), "null".to_owned()),
        (labels::MANAGEMENT_POLICY.to_owned(), labels::MANAGEMENT_POLICY_POOLING.to_owned()),
        ("matrixorigin.io/semantic-version".to_owned(), version.to_string()),
    ]);
    if let Some(operator_version) = operator_version_annotation(template) {
        annotations.insert("matrixorigin.io/operator-version".into(), operator_version);
    }
    if template.export_to_prometheus == Some(true) && template.prom_discovery_scheme.as_deref() == Some("Pod") {
        annotations.insert("prometheus.io/scrape".into(), "true".into());
        annotations.insert("prometheus.io/port".into(), "7001".into());
    }
    annotations.extend(overlay.pod_annotations.clone().unwrap_or_default());
    if gates {
        annotations.insert("pool.matrixorigin.io/in-place-rolling".into(), "y".into());
        annotations.insert(CONFIG_SUFFIX_ANNOTATION.into(), suffix);
    }

    let owned_meta = |name: String| ObjectMeta {
        name: Some(name),
        namespace: Some(names.namespace.clone()),
        labels: Some(names.instance_labels()),
        ..ObjectMeta::default()
    };
    let data_claim = template.cache_volume.as_ref().map(|volume| PersistentVolumeClaimSpec {
        access_modes: Some(vec!["ReadWriteOnce".into()]),
        storage_class_name: volume.storage_class_name.clone(),
        resources: Some(VolumeResourceRequirements {
            requests: volume.size.as_ref().map(|size| BTreeMap::from([("storage".to_owned(), canonical(size))])),
            ..Default::default()
        }),
        ..PersistentVolumeClaimSpec::default()
    });
    Ok(Rendered {
        pod: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(pod_labels),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            }),
            spec: Some(spec),
        },
        config_map: ConfigMap { metadata: owned_meta(config_map_name), data: Some(data), ..ConfigMap::default() },
        headless_service: Service {
            metadata: owned_meta(names.headless_service.clone()),
            spec: Some(ServiceSpec {
                cluster_ip: Some("None".into()),
                publish_not_ready_addresses: Some(true),
                selector: Some(names.instance_labels()),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        },
        data_claim,
    })
}

/// `quantity` as Go prints it (`8192Mi` → `8Gi`): Go renders the pod
/// through typed quantities, so two templates naming one CNSet render the
/// same pod whichever spelling they used. Text Go could not parse is kept,
/// for the API server to refuse with its own message.
fn canonical(quantity: &K8sQuantity) -> K8sQuantity {
    Quantity::parse(&quantity.0).map_or_else(|_| quantity.clone(), |parsed| K8sQuantity(parsed.to_string()))
}

/// Every quantity a rendered pod spec carries, in Go's canonical form.
fn canonical_pod_quantities(spec: &mut PodSpec) {
    let containers = spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten());
    for resources in containers.filter_map(|container| container.resources.as_mut()) {
        for quantities in [resources.limits.as_mut(), resources.requests.as_mut()].into_iter().flatten() {
            quantities.values_mut().for_each(|quantity| *quantity = canonical(quantity));
        }
    }
    let empty_dirs = spec.volumes.iter_mut().flatten().filter_map(|volume| volume.empty_dir.as_mut());
    for size in empty_dirs.filter_map(|empty_dir| empty_dir.size_limit.as_mut()) {
        *size = canonical(size);
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector { api_version: Some("v1".into()), field_path: path.into() }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn main_container(template: &CNSetTemplate, names: &PodNames, gates: bool, overlay: &Overlay) -> Container {
    let mut env = vec![
        field_env("POD_NAME", "metadata.name"),
        field_env("NAMESPACE", "metadata.namespace"),
        EnvVar {
            name: "HEADLESS_SERVICE_NAME".into(),
            value: Some(names.headless_service.clone()),
            ..EnvVar::default()
        },
        field_env("POD_IP", "status.podIP"),
    ];
    if gates {
        env.push(field_env("CONFIG_SUFFIX", &format!("metadata.annotations['{CONFIG_SUFFIX_ANNOTATION}']")));
    }
    let overlay_sets_limit = overlay.container.env.iter().flatten().any(|var| var.name == "GOMEMLIMIT");
    let memory_limit = template
        .resources
        .as_ref()
        .and_then(|resources| resources.limits.as_ref())
        .and_then(|limits| limits.get("memory"))
        .and_then(|memory| Quantity::parse(&memory.0).ok());
    if let (Some(percent), Some(limit), false) = (template.memory_limit_percent, memory_limit, overlay_sets_limit) {
        env.push(EnvVar {
            name: "GOMEMLIMIT".into(),
            value: Some((limit.value() * i128::from(percent) / 100).to_string()),
            ..EnvVar::default()
        });
    }
    let mut mounts = vec![VolumeMount {
        name: CONFIG_VOLUME.into(),
        mount_path: CONFIG_PATH.into(),
        read_only: Some(true),
        ..Default::default()
    }];
    if template.cache_volume.is_some() {
        mounts.push(VolumeMount { name: DATA_VOLUME.into(), mount_path: DATA_PATH.into(), ..Default::default() });
    }
    Container {
        name: MAIN_CONTAINER.into(),
        image: Some(template.image.clone()),
        resources: template.resources.clone(),
        command: Some(vec!["/bin/sh".into(), format!("{CONFIG_PATH}/{START_SCRIPT}")]),
        args: (!template.service_args.is_empty()).then(|| template.service_args.clone()),
        env: Some(env),
        volume_mounts: Some(mounts),
        ..Container::default()
    }
}

fn python_udf_container(template: &CNSetTemplate, port: i64) -> Container {
    let sidecar = template.python_udf_sidecar.clone().unwrap_or_default();
    let mut container = Container {
        name: "python-udf".into(),
        image: Some(sidecar.image.filter(|image| !image.is_empty()).unwrap_or_else(|| PYTHON_UDF_DEFAULT_IMAGE.into())),
        resources: sidecar.resources,
        command: Some(vec!["/bin/bash".into(), "-c".into(), format!("python -u server.py --address=localhost:{port}")]),
        ..Container::default()
    };
    if let Some(overlay) = sidecar.overlay.as_ref() {
        apply_container_overlay(&mut container, &overlay.container);
    }
    container
}

/// Replaces the item with the same key, else appends (Go `UpsertByKey`).
fn upsert<T, K: PartialEq>(items: &mut Vec<T>, item: T, key: impl Fn(&T) -> K) {
    let wanted = key(&item);
    match items.iter_mut().find(|existing| key(existing) == wanted) {
        Some(existing) => *existing = item,
        None => items.push(item),
    }
}

/// Go `overlayMainContainer`; the startup probe is never applied.
fn apply_container_overlay(container: &mut Container, overlay: &MainContainerOverlay) {
    if let Some(policy) = overlay.image_pull_policy.clone() {
        container.image_pull_policy = Some(policy);
    }
    if let Some(command) = overlay.command.clone().filter(|command| !command.is_empty()) {
        container.command = Some(command);
    }
    if let Some(args) = overlay.args.clone().filter(|args| !args.is_empty()) {
        container.args = Some(args);
    }
    if let Some(env_from) = overlay.env_from.clone().filter(|env_from| !env_from.is_empty()) {
        container.env_from = Some(env_from);
    }
    for var in overlay.env.clone().unwrap_or_default() {
        upsert(container.env.get_or_insert_with(Vec::new), var, |v| v.name.clone());
    }
    for mount in overlay.volume_mounts.clone().unwrap_or_default() {
        upsert(container.volume_mounts.get_or_insert_with(Vec::new), mount, |m| m.name.clone());
    }
    if overlay.readiness_probe.is_some() {
        container.readiness_probe = overlay.readiness_probe.clone();
    }
    if overlay.liveness_probe.is_some() {
        container.liveness_probe = overlay.liveness_probe.clone();
    }
    if overlay.lifecycle.is_some() {
        container.lifecycle = overlay.lifecycle.clone();
    }
    if overlay.main_container_security_context.is_some() {
        container.security_context = overlay.main_container_security_context.clone();
    }
}

/// Go `overlayPodSpec` without volumes (upserted by the caller, in order).
fn apply_pod_overlay(spec: &mut PodSpec, overlay: &Overlay) {
    fn set<T: Clone>(target: &mut Option<T>, value: &Option<T>) {
        if value.is_some() {
            target.clone_from(value);
        }
    }
    fn set_list<T: Clone>(target: &mut Option<Vec<T>>, value: &Option<Vec<T>>) {
        if value.as_ref().is_some_and(|items| !items.is_empty()) {
            target.clone_from(value);
        }
    }
    set(&mut spec.affinity, &overlay.affinity);
    set(&mut spec.service_account_name, &overlay.service_account_name.clone().filter(|name| !name.is_empty()));
    set(&mut spec.security_context, &overlay.security_context);
    set_list(&mut spec.image_pull_secrets, &overlay.image_pull_secrets);
    set_list(&mut spec.tolerations, &overlay.tolerations);
    set(&mut spec.priority_class_name, &overlay.priority_class_name.clone().filter(|name| !name.is_empty()));
    set(&mut spec.termination_grace_period_seconds, &overlay.termination_grace_period_seconds);
    set_list(&mut spec.host_aliases, &overlay.host_aliases);
    set_list(&mut spec.topology_spread_constraints, &overlay.topology_spread_constraints);
    set(&mut spec.runtime_class_name, &overlay.runtime_class_name);
    set(&mut spec.dns_config, &overlay.dns_config);
    set_list(&mut spec.init_containers, &overlay.init_containers);
    if let Some(sidecars) = overlay.sidecar_containers.as_ref().filter(|sidecars| !sidecars.is_empty()) {
        spec.containers.retain(|container| container.name == MAIN_CONTAINER);
        spec.containers.extend(sidecars.iter().cloned());
    }
    set(&mut spec.share_process_namespace, &overlay.share_process_namespace);
}

/// cnpool's start script: the behaviour of Go's (reference §4), written anew.
/// The CN UUID is the one [`cnpool_api::cn_store_uuid`] computes.
fn start_script(memory_bin: bool, gates: bool) -> String {
    let source = if gates {
        format!(
            "if [ -n \"${{CONFIG_SUFFIX:-}}\" ]; then conf={CONFIG_PATH}/config.toml-${{CONFIG_SUFFIX}}; else conf={CONFIG_PATH}/config.toml; fi"
        )
    } else {
        format!("conf={CONFIG_PATH}/config.toml")
    };
    let binary = if memory_bin {
        "mkdir -p \"$MO_BIN_PATH\"\ncp /mo-service \"$MO_BIN_PATH/mo-service\"\nbin=\"$MO_BIN_PATH/mo-service\""
    } else {
        "bin=/mo-service"
    };
    format!(
        r#"#!/bin/sh
# Rendered by cnpool. The CN's store UUID is derived from its DNS name.
set -eu
POD_NAME=${{POD_NAME:-$HOSTNAME}}
ADDR="${{POD_NAME}}.${{HEADLESS_SERVICE_NAME}}.${{NAMESPACE}}.svc"
UUID=$(printf '%s\n' "$ADDR" | sha256sum | od -x | head -1 | awk '{{print $2$3"-"$4"-"$5"-"$6"-"$7$8$9}}')
{source}
tmp=$(mktemp)
awk -v uuid="$UUID" -v ip="$POD_IP" '
{{ print }}
index($0, "[cn]") {{
  print "uuid = \"" uuid "\""
  print "listen-address = \"0.0.0.0:6002\""
  print "service-address = \"" ip ":6002\""
  print "sql-address = \"" ip ":6001\""
  print "service-host = \"" ip "\""
}}
$0 == "[cn.lockservice]" {{ print "service-address = \"" ip ":{lock_port}\"" }}
' "$conf" > "$tmp"
{binary}
echo "$bin -cfg $tmp $*"
exec "$bin" -cfg "$tmp" "$@"
"#,
        lock_port = crate::config::LOCK_SERVICE_PORT,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use cnpool_api::cnset::{FileSystemProvider, S3Provider, SharedStorageProvider};
    use k8s_openapi::api::core::v1::LocalObjectReference;

    fn template(json: serde_json::Value) -> CNSetTemplate {
        pool_template(&serde_json::from_value(json).unwrap())
    }

    fn cluster() -> Cluster {
        Cluster {
            hakeeper_address: "mo-log-discovery.default.svc:32001".into(),
            service_addresses: vec!["mo-log-0.mo-log-headless.default.svc:32001".into()],
            shared_storage: Some(SharedStorageProvider {
                file_system: Some(FileSystemProvider { path: "/shared".into() }),
                ..SharedStorageProvider::default()
            }),
        }
    }

    fn names() -> PodNames {
        PodNames::go("default", "test", "test-5d7c6d9c8d")
    }

    fn render_json(json: serde_json::Value) -> Rendered {
        render(&template(json), &BTreeMap::new(), &names(), &cluster()).unwrap()
    }

    fn main(rendered: &Rendered) -> Container {
        rendered.pod.spec.as_ref().unwrap().containers[0].clone()
    }

    fn env_value(container: &Container, name: &str) -> Option<String> {
        container.env.iter().flatten().find(|var| var.name == name).and_then(|var| var.value.clone())
    }

    #[test]
    fn the_reference_uuid_vectors_hold_for_the_names_rendered() {
        // reference §4.
        let names = names();
        assert_eq!(names.headless_service, "test-5d7c6d9c8d-cn-headless");
        assert_eq!(
            cnpool_api::cn_store_uuid("test-5d7c6d9c8d-cn-x8k2p", &names.headless_service, &names.namespace),
            "36333564-3630-6436-6133-323163326361"
        );
        assert_eq!(
            cnpool_api::cn_store_uuid("mo-cn-abcde", "mo-cn-headless", "prod"),
            "32666366-3130-3732-6238-383563343136"
        );
    }

    #[test]
    fn the_start_script_derives_the_reference_uuid() {
        // Runs the script's UUID line in a real shell.
        let script = start_script(false, false);
        let uuid_line = script.lines().find(|line| line.starts_with("UUID=")).unwrap();
        let program = format!(
            "POD_NAME=test-5d7c6d9c8d-cn-x8k2p; ADDR=\"$POD_NAME.test-5d7c6d9c8d-cn-headless.default.svc\"\n{uuid_line}\necho \"$UUID\""
        );
        let Ok(output) = std::process::Command::new("/bin/sh").arg("-c").arg(&program).output() else { return };
        assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "36333564-3630-6436-6133-323163326361");
    }

    #[test]
    fn quantities_are_rendered_as_go_prints_them() {
        let rendered = render_json(serde_json::json!({
            "image": "mo:1.2.0",
            "resources": {"requests": {"memory": "8192Mi", "cpu": "1000m"}, "limits": {"memory": "0.5Gi"}},
            "memoryFsSize": "1024Mi",
            "cacheVolume": {"size": "100000M"},
            "overlay": {"initContainers": [{"name": "init", "resources": {"requests": {"memory": "2048Ki"}}}]},
        }));
        let main = main(&rendered);
        let resources = main.resources.as_ref().unwrap();
        let requests = resources.requests.as_ref().unwrap();
        assert_eq!((requests["memory"].0.as_str(), requests["cpu"].0.as_str()), ("8Gi", "1"));
        assert_eq!(resources.limits.as_ref().unwrap()["memory"].0, "512Mi");
        let spec = rendered.pod.spec.as_ref().unwrap();
        let memory_fs = spec.volumes.iter().flatten().find(|volume| volume.name == MEMORY_FS_VOLUME).unwrap();
        assert_eq!(memory_fs.empty_dir.as_ref().unwrap().size_limit.as_ref().unwrap().0, "1Gi");
        let init = &spec.init_containers.as_ref().unwrap()[0];
        assert_eq!(init.resources.as_ref().unwrap().requests.as_ref().unwrap()["memory"].0, "2Mi");
        let claim = rendered.data_claim.as_ref().unwrap().resources.as_ref().unwrap();
        assert_eq!(claim.requests.as_ref().unwrap()["storage"].0, "100G");
    }

    #[test]
    fn image_resources_args_and_command_land_in_the_main_container() {
        let rendered = render_json(serde_json::json!({
            "image": "matrixorigin/matrixone:1.2.0",
            "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "8Gi"}},
            "memoryLimitPercent": 80,
        }));
        let main = main(&rendered);
        assert_eq!(main.name, "main");
        assert_eq!(main.image.as_deref(), Some("matrixorigin/matrixone:1.2.0"));
        assert_eq!(
            main.resources.as_ref().and_then(|r| r.requests.as_ref()).map(|r| r["cpu"].0.clone()),
            Some("2".into())
        );
        assert_eq!(main.command, Some(vec!["/bin/sh".to_owned(), "/etc/matrixone/config/start.sh".to_owned()]));
        assert_eq!(main.args, Some(vec!["-debug-http=:6060".to_owned()]));
        assert!(main.ports.is_none() && main.readiness_probe.is_none() && main.image_pull_policy.is_none());
        // reference §2: 8Gi × 80 → 6871947673.
        assert_eq!(env_value(&main, "GOMEMLIMIT").as_deref(), Some("6871947673"));
        let names: Vec<&str> = main.env.iter().flatten().map(|var| var.name.as_str()).collect();
        assert_eq!(names, ["POD_NAME", "NAMESPACE", "HEADLESS_SERVICE_NAME", "POD_IP", "GOMEMLIMIT", "GODEBUG"]);
        assert_eq!(env_value(&main, "HEADLESS_SERVICE_NAME").as_deref(), Some("test-5d7c6d9c8d-cn-headless"));
        assert_eq!(env_value(&main, "GODEBUG").as_deref(), Some(DEFAULT_GODEBUG));
    }

    #[test]
    fn the_pod_has_the_go_labels_annotations_subdomain_and_only_the_cn_store_gate() {
        let pool_labels = BTreeMap::from([("tenant".to_owned(), "a".to_owned())]);
        let spec = template(serde_json::json!({
            "image": "mo:v1.2.3",
            "overlay": {"podLabels": {"tenant": "overlay", "x": "y"}, "podAnnotations": {"note": "n"}}
        }));
        let rendered = render(&spec, &pool_labels, &names(), &cluster()).unwrap();
        let meta = rendered.pod.metadata.as_ref().unwrap();
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels["matrixorigin.io/instance"], "test-5d7c6d9c8d");
        assert_eq!(labels["matrixorigin.io/component"], "CNSet");
        assert_eq!(labels["matrixorigin.io/namespace"], "default");
        assert_eq!(labels["tenant"], "a", "the pool's podLabels win over the overlay's");
        assert_eq!(labels["x"], "y");
        assert_eq!(labels[labels::PHASE], "Unknown");
        assert_eq!(labels[labels::POOL_NAME], "test");
        let annotations = meta.annotations.as_ref().unwrap();
        assert_eq!(annotations["matrixone.cloud/cn-label"], "null");
        assert_eq!(annotations[labels::MANAGEMENT_POLICY], "Pooling");
        assert_eq!(annotations["matrixorigin.io/semantic-version"], "1.2.3");
        assert_eq!(annotations["note"], "n");
        let spec = rendered.pod.spec.as_ref().unwrap();
        assert_eq!(spec.subdomain.as_deref(), Some("test-5d7c6d9c8d-cn-headless"));
        assert!(spec.hostname.is_none());
        let gates: Vec<&str> = spec.readiness_gates.iter().flatten().map(|g| g.condition_type.as_str()).collect();
        assert_eq!(gates, ["matrixorigin.io/cn-store"]);
    }

    #[test]
    fn the_config_volume_names_the_config_map_and_the_service_is_headless() {
        let rendered = render_json(serde_json::json!({"image": "mo:1.2.0", "config": "[log]\nlevel = \"info\"\n"}));
        let data = rendered.config_map.data.as_ref().unwrap();
        assert!(data["config.toml"].contains("\n[log]\nlevel = \"info\"\n"));
        assert!(data["config.toml"].contains("init-work-state = \"Draining\""), "pools always drain");
        assert!(data["config.toml"].contains("role = \"TP\""), "the webhook's role");
        let name = rendered.config_map.metadata.name.clone().unwrap();
        assert!(name.starts_with("test-5d7c6d9c8d-cn-config-") && name.len() == "test-5d7c6d9c8d-cn-config-".len() + 7);
        let volumes = rendered.pod.spec.as_ref().unwrap().volumes.clone().unwrap();
        let config = volumes.last().unwrap();
        assert_eq!(config.name, "config");
        assert_eq!(config.config_map.as_ref().map(|c| (c.name.clone(), c.default_mode)), Some((name, Some(420))));
        let service = rendered.headless_service.spec.as_ref().unwrap();
        assert_eq!(rendered.headless_service.metadata.name.as_deref(), Some("test-5d7c6d9c8d-cn-headless"));
        assert_eq!(service.cluster_ip.as_deref(), Some("None"));
        assert_eq!(service.publish_not_ready_addresses, Some(true));
        assert_eq!(service.selector, Some(names().instance_labels()));
    }

    #[test]
    fn the_overlay_wins_over_what_the_operator_generates() {
        let rendered = render_json(serde_json::json!({
            "image": "mo:1.2.0",
            "overlay": {
                "env": [{"name": "GODEBUG", "value": "off"}, {"name": "EXTRA", "value": "1"}],
                "imagePullPolicy": "Always",
                "args": ["-x"],
                "volumes": [{"name": "shared", "emptyDir": {}}],
                "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
                "serviceAccountName": "cn",
                "startupProbe": {"exec": {"command": ["true"]}},
                "sidecarContainers": [{"name": "log-agent", "image": "agent"}]
            }
        }));
        let main = main(&rendered);
        assert_eq!(env_value(&main, "GODEBUG").as_deref(), Some("off"));
        assert_eq!(env_value(&main, "EXTRA").as_deref(), Some("1"));
        assert_eq!(main.image_pull_policy.as_deref(), Some("Always"));
        assert_eq!(main.args, Some(vec!["-x".to_owned()]));
        assert!(main.startup_probe.is_none(), "Go never applies startupProbe");
        assert!(main.volume_mounts.iter().flatten().any(|m| m.name == "shared" && m.mount_path == "/shared"));
        let spec = rendered.pod.spec.as_ref().unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some("cn"));
        let containers: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(containers, ["main", "log-agent"]);
        let volumes: Vec<&str> = spec.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
        assert_eq!(volumes, ["shared", "config"]);
    }

    #[test]
    fn s3_storage_adds_credentials_region_and_certificates() {
        let mut cluster = cluster();
        cluster.shared_storage = Some(SharedStorageProvider {
            s3: Some(S3Provider {
                path: "bucket/dir".into(),
                secret_ref: Some(LocalObjectReference { name: "aws".into() }),
                certificate_ref: Some(cnpool_api::cnset::CertificateRef {
                    name: "ca".into(),
                    files: vec!["ca.pem".into()],
                }),
                ..S3Provider::default()
            }),
            ..SharedStorageProvider::default()
        });
        let rendered =
            render(&template(serde_json::json!({"image": "mo:1.2.0"})), &BTreeMap::new(), &names(), &cluster).unwrap();
        let main = main(&rendered);
        assert_eq!(env_value(&main, "AWS_REGION").as_deref(), Some("us-west-2"));
        let secret =
            main.env.iter().flatten().find(|v| v.name == "AWS_SECRET_ACCESS_KEY").and_then(|v| v.value_from.clone());
        assert_eq!(
            secret.and_then(|s| s.secret_key_ref).map(|r| (r.name, r.key)),
            Some(("aws".into(), "AWS_SECRET_ACCESS_KEY".into()))
        );
        assert!(main.volume_mounts.iter().flatten().any(|m| m.name == "s3-ssl" && m.mount_path == "/etc/s3-ssl"));
        let volumes: Vec<&str> =
            rendered.pod.spec.as_ref().unwrap().volumes.iter().flatten().map(|v| v.name.as_str()).collect();
        assert_eq!(volumes, ["s3-ssl", "config"]);
        assert!(
            rendered.config_map.data.as_ref().unwrap()["config.toml"].contains("cert-files = [\"/etc/s3-ssl/ca.pem\"]")
        );
    }

    #[test]
    fn cache_volume_memory_fs_and_python_udf_are_rendered() {
        let rendered = render_json(serde_json::json!({
            "image": "mo:1.2.0",
            "resources": {"requests": {"memory": "3Gi"}},
            "cacheVolume": {"size": "100Gi", "storageClassName": "fast"},
            "memoryFsSize": "1Gi",
            "pythonUdfSidecar": {"enabled": true}
        }));
        let main = main(&rendered);
        assert!(
            main.volume_mounts.iter().flatten().any(|m| m.name == "mo-data" && m.mount_path == "/var/lib/matrixone")
        );
        assert!(main.volume_mounts.iter().flatten().any(|m| m.name == "tmpfs" && m.mount_path == "/matrixone/bin"));
        assert_eq!(env_value(&main, "MO_BIN_PATH").as_deref(), Some("/matrixone/bin"));
        let claim = rendered.data_claim.clone().unwrap();
        assert_eq!(claim.storage_class_name.as_deref(), Some("fast"));
        let spec = rendered.pod.spec.as_ref().unwrap();
        let sidecar = &spec.containers[1];
        assert_eq!(sidecar.name, "python-udf");
        assert_eq!(sidecar.image.as_deref(), Some(PYTHON_UDF_DEFAULT_IMAGE));
        let config = &rendered.config_map.data.as_ref().unwrap()["config.toml"];
        // Webhook defaults (reference §1): 3Gi request → 1536Mi memory cache; 100Gi volume → 90Gi disk cache.
        assert!(config.contains("memory-capacity = \"1536MiB\""), "{config}");
        assert!(config.contains("disk-capacity = \"90GiB\""), "{config}");
        assert!(config.contains("server-address = \"localhost:50051\""), "{config}");
        assert!(rendered.config_map.data.as_ref().unwrap()["start.sh"].contains("cp /mo-service"));
    }

    #[test]
    fn the_inplace_gates_add_the_config_suffix() {
        let rendered = render_json(serde_json::json!({"image": "mo:1.2.0", "operatorVersion": "1.3.0"}));
        let annotations = rendered.pod.metadata.as_ref().unwrap().annotations.clone().unwrap();
        let suffix = annotations[CONFIG_SUFFIX_ANNOTATION].clone();
        assert_eq!(annotations["pool.matrixorigin.io/in-place-rolling"], "y");
        assert_eq!(annotations["matrixorigin.io/operator-version"], "1.3.0");
        assert_eq!(rendered.config_map.metadata.name.as_deref(), Some("test-5d7c6d9c8d-cn-config"));
        assert!(rendered.config_map.data.as_ref().unwrap().contains_key(&format!("config.toml-{suffix}")));
        assert!(main(&rendered).env.iter().flatten().any(|var| var.name == "CONFIG_SUFFIX"));
    }

    #[test]
    fn a_template_without_image_or_version_is_refused_by_field() {
        let err = render(&template(serde_json::json!({})), &BTreeMap::new(), &names(), &cluster()).unwrap_err();
        assert!(err.to_string().contains("spec.template.image"));
        let err = render(&template(serde_json::json!({"image": "mo:latest"})), &BTreeMap::new(), &names(), &cluster())
            .unwrap_err();
        assert!(err.to_string().contains("semanticVersion"));
    }

    #[test]
    fn a_go_template_round_trips_without_loss() {
        let go = serde_json::json!({
            "image": "mo:1.2.0", "replicas": 1, "serviceType": "NodePort", "cnLabels": [{"key": "k", "values": ["v"]}],
            "overlay": {"env": [{"name": "A", "value": "1"}], "futureField": {"x": 1}},
            "scalingConfig": {"storeDrainTimeout": "10m", "somethingNew": true},
            "config": {"cn": {"a": 1}}
        });
        let read: CNSetTemplate = serde_json::from_value(go.clone()).unwrap();
        assert_eq!(serde_json::to_value(&read).unwrap(), go);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn arbitrary_template() -> impl Strategy<Value = serde_json::Value> {
            (
                prop::sample::select(vec!["1.1.0", "1.2.0", "1.2.1"]),
                prop::option::of(prop::sample::select(vec!["-debug-http=:6060", "-x"])),
                prop::option::of(prop::sample::select(vec!["4Gi", "8Gi", "8192Mi"])),
                prop::option::of(prop::sample::select(vec!["a = 1", "a = 2", "[cn]\nb = 1"])),
                prop::option::of(prop::sample::select(vec!["x", "y"])),
            )
                .prop_map(|(tag, arg, memory, config, label)| {
                    let mut json = serde_json::json!({"image": format!("mo:{tag}")});
                    if let Some(arg) = arg {
                        json["serviceArgs"] = serde_json::json!([arg]);
                    }
                    if let Some(memory) = memory {
                        json["resources"] = serde_json::json!({"requests": {"memory": memory}});
                    }
                    if let Some(config) = config {
                        json["config"] = serde_json::json!(config);
                    }
                    if let Some(label) = label {
                        json["overlay"] = serde_json::json!({"podLabels": {"l": label}});
                    }
                    json
                })
        }

        proptest! {
            /// Two templates with the same Go CNSet name render the same pod
            /// (containers, volumes, config): a Go pod judged current at
            /// cutover really is. The converse does not hold, as in Go: the
            /// name hashes the template before the webhook's defaults, so
            /// writing a default out (e.g. `serviceArgs: [-debug-http=:6060]`)
            /// names a new CNSet for the same pod.
            #[test]
            fn the_cnset_name_changes_only_with_the_rendered_pod(a in arbitrary_template(), b in arbitrary_template()) {
                let (a, b): (CNSetTemplate, CNSetTemplate) =
                    (serde_json::from_value(a).unwrap(), serde_json::from_value(b).unwrap());
                let same_name = crate::cnset::cnset_name("p", &a).unwrap() == crate::cnset::cnset_name("p", &b).unwrap();
                let names = names();
                let render = |t: &CNSetTemplate| render(&pool_template(t), &BTreeMap::new(), &names, &cluster()).unwrap().pod.spec;
                prop_assert!(!same_name || render(&a) == render(&b));
            }
        }
    }
}
