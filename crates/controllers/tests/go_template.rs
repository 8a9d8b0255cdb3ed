#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! A CNPool written for the Go matrixone-operator, applied unchanged: its
//! `spec.template` a CNSet template, its `deps.logSet` a LogSet object. The
//! pool waits for the LogSet, saying so; then its pods are the CN pods the
//! Go operator renders, field by field as ../shared/reference/
//! cnset-rendering.md states them (the expected values are written from the
//! reference's text), and their CNs register under the UUID the start
//! script derives from the pod's DNS name. Runs on the embedded server, or
//! on kube-apiserver 1.20 with `CNPOOL_E2E_KUBECONFIG`.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use cnpool_api::{CNPool, labels};
use k8s_openapi::api::core::v1::{ConfigMap, EnvVar, Pod, Service};
use kube::api::{Api, PostParams};
use serde_json::json;
use sha2::{Digest, Sha256};
use support::{Cluster, POOL, eventually, label, legacy};

const LOG_SET: &str = "mo-logs";

/// The pool as written for the Go operator (fields a pool ignores, such as
/// `replicas` and `serviceType`, included).
async fn create_go_pool(cluster: &Cluster) {
    let pool: CNPool = serde_json::from_value(json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNPool",
        "metadata": {"name": POOL, "namespace": cluster.ns},
        "spec": {
            "template": {
                "image": "matrixorigin/matrixone:1.2.3",
                "replicas": 1,
                "serviceType": "ClusterIP",
                "resources": {"requests": {"cpu": "1", "memory": "8Gi"}, "limits": {"memory": "8Gi"}},
                "memoryLimitPercent": 80,
                "config": "[log]\nlevel = \"info\"\n"
            },
            "podLabels": {"tier": "standard"},
            "deps": {"logSet": {"metadata": {"name": LOG_SET, "namespace": cluster.ns}, "spec": {"replicas": 3}}},
            "strategy": {"scaleStrategy": {"maxIdle": 1, "maxPods": 2}}
        }
    }))
    .unwrap();
    cluster.pools().create(&PostParams::default(), &pool).await.unwrap();
}

/// The UUID MatrixOne's start script derives (reference §4): the SHA-256 of
/// `ADDR\n`, its first 16 hex digits taken in pairs, each pair printed as
/// the ASCII codes of its second then first digit.
fn start_script_uuid(addr: &str) -> String {
    let hex: Vec<u8> = format!("{:x}", Sha256::digest(format!("{addr}\n").as_bytes())).into_bytes();
    let words: Vec<String> = (0..8).map(|k| format!("{:02x}{:02x}", hex[2 * k + 1], hex[2 * k])).collect();
    format!("{}{}-{}-{}-{}-{}{}{}", words[0], words[1], words[2], words[3], words[4], words[5], words[6], words[7])
}

fn env_value<'a>(env: &'a [EnvVar], name: &str) -> Option<&'a str> {
    env.iter().find(|var| var.name == name)?.value.as_deref()
}

fn field_ref(var: &EnvVar) -> Option<(&str, &str)> {
    let field = var.value_from.as_ref()?.field_ref.as_ref()?;
    Some((field.api_version.as_deref().unwrap_or_default(), field.field_path.as_str()))
}

#[tokio::test]
async fn a_go_pool_waits_for_its_log_set_then_renders_cn_pods_as_the_go_operator() {
    let cluster = Cluster::new().await;
    legacy::schemaless_kind(&cluster, "core.matrixorigin.io", "LogSet", "logsets").await;
    cluster.start_operator(0).await;
    let ns = cluster.ns.clone();

    // The LogSet does not exist yet: no pod, and the pool says why.
    create_go_pool(&cluster).await;
    let message = eventually("the pool waits for its LogSet", Duration::from_secs(20), || async {
        let pool = cluster.pools().get(POOL).await.map_err(|e| e.to_string())?;
        let conditions = pool.status.map(|status| status.conditions).unwrap_or_default();
        let ready = conditions.iter().find(|condition| condition.type_ == "Ready").ok_or("no Ready condition")?;
        match (ready.status.as_str(), ready.reason.as_str()) {
            ("False", "LogSetNotReady") => Ok(ready.message.clone()),
            other => Err(format!("Ready is {other:?}")),
        }
    })
    .await;
    assert!(message.contains(&format!("LogSet {ns}/{LOG_SET}")), "the condition names the LogSet: {message}");
    assert!(cluster.pool_pods().await.is_empty(), "no pod before the LogSet is ready");

    let discovery = format!("{LOG_SET}-log-discovery.{ns}.svc");
    let spec = json!({"replicas": 3, "sharedStorage": {"fileSystem": {"path": "/test"}}});
    legacy::create_ready_log_set(&cluster, LOG_SET, spec, (&discovery, 32001)).await;
    let pod: Pod = eventually("a pool pod Idle", Duration::from_secs(60), || async {
        let pods = cluster.pool_pods().await;
        pods.into_iter().find(|pod| label(pod, labels::PHASE) == Some("Idle")).ok_or_else(|| "none yet".to_string())
    })
    .await;
    let pod_name = pod.metadata.name.clone().unwrap();

    // Labels (reference §2): the three instance labels, the pool's podLabels,
    // the pool name; the instance is the CNSet `<pool>-<hash>`, the hash
    // being the pod's revision.
    let revision = label(&pod, labels::REVISION).unwrap().to_owned();
    assert_eq!(revision.len(), 10, "the Go CNSet hash is 10 characters: {revision}");
    assert!(revision.bytes().all(|byte| b"bcdfghjklmnpqrstvwxz2456789".contains(&byte)), "{revision}");
    let cnset = format!("{POOL}-{revision}");
    let headless = format!("{cnset}-cn-headless");
    for (key, value) in [
        ("matrixorigin.io/namespace", ns.as_str()),
        ("matrixorigin.io/instance", cnset.as_str()),
        ("matrixorigin.io/component", "CNSet"),
        ("tier", "standard"),
        (labels::POOL_NAME, POOL),
    ] {
        assert_eq!(label(&pod, key), Some(value), "label {key}");
    }
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get("matrixone.cloud/cn-label").map(String::as_str), Some("null"));
    assert_eq!(annotations.get("pool.matrixorigin.io/management-policy").map(String::as_str), Some("Pooling"));
    assert_eq!(annotations.get("matrixorigin.io/semantic-version").map(String::as_str), Some("1.2.3"));

    let spec = pod.spec.clone().unwrap();
    assert_eq!(spec.subdomain.as_deref(), Some(headless.as_str()));
    let gates: Vec<&str> = spec.readiness_gates.iter().flatten().map(|gate| gate.condition_type.as_str()).collect();
    assert_eq!(gates, ["matrixorigin.io/cn-store"], "kruise's gates are not carried over");

    // The one container, `main` (reference §2).
    assert_eq!(spec.containers.len(), 1);
    let main = &spec.containers[0];
    assert_eq!(main.name, "main");
    assert_eq!(main.image.as_deref(), Some("matrixorigin/matrixone:1.2.3"));
    assert_eq!(main.command.clone().unwrap(), ["/bin/sh", "/etc/matrixone/config/start.sh"]);
    assert_eq!(main.args.clone().unwrap(), ["-debug-http=:6060"], "the webhook's default serviceArgs");
    let resources = main.resources.clone().unwrap();
    assert_eq!(resources.limits.unwrap()["memory"].0, "8Gi");
    let requests = resources.requests.unwrap();
    assert_eq!((requests["cpu"].0.as_str(), requests["memory"].0.as_str()), ("1", "8Gi"));
    assert!(main.ports.is_none() && main.readiness_probe.is_none() && main.liveness_probe.is_none());

    // Env, in order: the field references, the headless Service, GOMEMLIMIT
    // (8Gi × 80 / 100), the webhook's GODEBUG; no S3 env on a file system.
    let env = main.env.clone().unwrap();
    let names: Vec<&str> = env.iter().map(|var| var.name.as_str()).collect();
    assert_eq!(names, ["POD_NAME", "NAMESPACE", "HEADLESS_SERVICE_NAME", "POD_IP", "GOMEMLIMIT", "GODEBUG"]);
    assert_eq!(field_ref(&env[0]), Some(("v1", "metadata.name")));
    assert_eq!(field_ref(&env[1]), Some(("v1", "metadata.namespace")));
    assert_eq!(env_value(&env, "HEADLESS_SERVICE_NAME"), Some(headless.as_str()));
    assert_eq!(field_ref(&env[3]), Some(("v1", "status.podIP")));
    assert_eq!(env_value(&env, "GOMEMLIMIT"), Some("6871947673"));
    assert_eq!(env_value(&env, "GODEBUG"), Some("madvdontneed=1,gctrace=2"));

    // Volumes: only the config, read only at /etc/matrixone/config, from
    // ConfigMap `S-cn-config-<7 hex>` with mode 0644.
    // (A real server's ServiceAccount admission adds its token's mount.)
    let mounts: Vec<_> = main
        .volume_mounts
        .clone()
        .unwrap()
        .into_iter()
        .filter(|mount| mount.mount_path != "/var/run/secrets/kubernetes.io/serviceaccount")
        .collect();
    assert_eq!(mounts.len(), 1, "{mounts:?}");
    assert_eq!((mounts[0].name.as_str(), mounts[0].mount_path.as_str()), ("config", "/etc/matrixone/config"));
    assert_eq!(mounts[0].read_only, Some(true));
    let volumes = spec.volumes.clone().unwrap();
    let config_volumes: Vec<_> = volumes.iter().filter(|volume| volume.name == "config").collect();
    assert_eq!(config_volumes.len(), 1, "{volumes:?}");
    let source = config_volumes[0].config_map.clone().unwrap();
    assert_eq!(source.default_mode, Some(420));
    let config_map_name = source.name;
    let suffix = config_map_name.strip_prefix(&format!("{cnset}-cn-config-")).unwrap();
    assert!(suffix.len() == 7 && suffix.bytes().all(|byte| byte.is_ascii_hexdigit()), "{config_map_name}");

    // The ConfigMap: config.toml with the user's config and the operator's
    // keys (MatrixOne 1.2 lists the log services: ordinals 0, 1, 2), start.sh.
    let config_maps: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let config_map = config_maps.get(&config_map_name).await.unwrap();
    let data = config_map.data.clone().unwrap_or_default();
    assert!(data.contains_key("start.sh"));
    let toml = &data["config.toml"];
    let services: Vec<String> =
        (0..3).map(|i| format!("\"{LOG_SET}-log-{i}.{LOG_SET}-log-headless.{ns}.svc:32001\"")).collect();
    for line in [
        "service-type = \"CN\"".to_owned(),
        "[log]\nlevel = \"info\"".to_owned(),
        "[cn.lockservice]\nlisten-address = \"0.0.0.0:6003\"".to_owned(),
        "port-base = 6002".to_owned(),
        "init-work-state = \"Draining\"".to_owned(),
        format!("[hakeeper-client]\nservice-addresses = [{}]", services.join(", ")),
    ] {
        assert!(toml.contains(&line), "config.toml has {line:?}:\n{toml}");
    }
    let owner = config_map.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owner.iter().map(|owner| owner.kind.as_str()).collect::<Vec<_>>(), ["CNPool"]);

    // The headless Service: no cluster IP, not-ready addresses published,
    // selecting the three instance labels.
    let services_api: Api<Service> = Api::namespaced(cluster.client.clone(), &ns);
    let service = services_api.get(&headless).await.unwrap().spec.unwrap();
    assert_eq!(service.cluster_ip.as_deref(), Some("None"));
    assert_eq!(service.publish_not_ready_addresses, Some(true));
    let selector: BTreeMap<String, String> = service.selector.unwrap();
    assert_eq!(selector.len(), 3);
    assert_eq!(selector.get("matrixorigin.io/instance"), Some(&cnset));

    // Its CN registered under the UUID the start script derives from
    // `${POD_NAME}.${HEADLESS_SERVICE_NAME}.${NAMESPACE}.svc`.
    let uuid = start_script_uuid(&format!("{pod_name}.{headless}.{ns}.svc"));
    assert!(cluster.store(&uuid).await.is_some(), "store {uuid} of {pod_name} registered");
    assert_eq!(label(&pod, labels::CN_UUID), Some(uuid.as_str()));
}

#[test]
fn the_start_script_uuid_matches_the_reference_vectors() {
    // reference §4's two worked examples.
    assert_eq!(
        start_script_uuid("test-5d7c6d9c8d-cn-x8k2p.test-5d7c6d9c8d-cn-headless.default.svc"),
        "36333564-3630-6436-6133-323163326361"
    );
    assert_eq!(start_script_uuid("mo-cn-abcde.mo-cn-headless.prod.svc"), "32666366-3130-3732-6238-383563343136");
}

/// A Go pool whose template is the reference's image-only example gets the
/// reference's CNSet hash as its revision, and the headless Service Go names
/// after it: a Go pod of the same template is current at cutover.
#[tokio::test]
async fn the_revision_of_a_go_template_is_the_go_cnset_hash() {
    let cluster = Cluster::new().await;
    cluster.start_operator(0).await;
    let pool: CNPool = serde_json::from_value(json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1",
        "kind": "CNPool",
        "metadata": {"name": "test", "namespace": cluster.ns},
        "spec": {"template": {"image": "matrixorigin/matrixone:1.1.0"}, "strategy": {"scaleStrategy": {"maxIdle": 1}}}
    }))
    .unwrap();
    cluster.pools().create(&PostParams::default(), &pool).await.unwrap();
    let pod = eventually("a pod of pool test", Duration::from_secs(30), || async {
        let pods = cluster.pods().list(&Default::default()).await.map_err(|e| e.to_string())?;
        pods.items
            .into_iter()
            .find(|pod| label(pod, labels::POOL_NAME) == Some("test"))
            .ok_or_else(|| "none yet".to_string())
    })
    .await;
    assert_eq!(label(&pod, labels::REVISION), Some("5d7c6d9c8d"));
    assert_eq!(pod.spec.unwrap().subdomain.as_deref(), Some("test-5d7c6d9c8d-cn-headless"));
}
