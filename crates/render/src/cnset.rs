//! The name of the CNSet the Go operator makes for a pool template
//! (reference §0): `<pool>-<hash>`, the hash an FNV-1 of the Go JSON of the
//! template's pod-affecting fields.
//!
//! cnpool needs it to tell, at cutover, which Go pods were rendered from the
//! current template: a pod's `matrixorigin.io/instance` label is its CNSet's
//! name.

use serde_json::Value;

use crate::gojson::{self, Field, GoJsonError, Omit, Shape, field};
use crate::toml::{parse_config, to_go_toml};
use crate::version::inplace_gates;
use cnpool_api::cnset::CNSetTemplate;

const RESOURCE_CLAIM: &[Field] = &[field("name", Shape::String, Omit::Never)];
const RESOURCES: &[Field] = &[
    field("limits", Shape::Map(&Shape::Quantity), Omit::Empty),
    field("requests", Shape::Map(&Shape::Quantity), Omit::Empty),
    field("claims", Shape::List(&Shape::Struct(RESOURCE_CLAIM)), Omit::Empty),
];
const OBJECT_REF: &[Field] = &[field("name", Shape::String, Omit::Empty), field("optional", Shape::Bool, Omit::Nil)];
const ENV_FROM: &[Field] = &[
    field("prefix", Shape::String, Omit::Empty),
    field("configMapRef", Shape::Struct(OBJECT_REF), Omit::Nil),
    field("secretRef", Shape::Struct(OBJECT_REF), Omit::Nil),
];
const FIELD_REF: &[Field] =
    &[field("apiVersion", Shape::String, Omit::Empty), field("fieldPath", Shape::String, Omit::Never)];
const RESOURCE_FIELD_REF: &[Field] = &[
    field("containerName", Shape::String, Omit::Empty),
    field("resource", Shape::String, Omit::Never),
    field("divisor", Shape::Quantity, Omit::Never),
];
const KEY_REF: &[Field] = &[
    field("name", Shape::String, Omit::Empty),
    field("key", Shape::String, Omit::Never),
    field("optional", Shape::Bool, Omit::Nil),
];
const ENV_SOURCE: &[Field] = &[
    field("fieldRef", Shape::Struct(FIELD_REF), Omit::Nil),
    field("resourceFieldRef", Shape::Struct(RESOURCE_FIELD_REF), Omit::Nil),
    field("configMapKeyRef", Shape::Struct(KEY_REF), Omit::Nil),
    field("secretKeyRef", Shape::Struct(KEY_REF), Omit::Nil),
];
const ENV: &[Field] = &[
    field("name", Shape::String, Omit::Never),
    field("value", Shape::String, Omit::Empty),
    field("valueFrom", Shape::Struct(ENV_SOURCE), Omit::Nil),
];
const VOLUME_MOUNT: &[Field] = &[
    field("name", Shape::String, Omit::Never),
    field("readOnly", Shape::Bool, Omit::Empty),
    field("mountPath", Shape::String, Omit::Never),
    field("subPath", Shape::String, Omit::Empty),
    field("mountPropagation", Shape::String, Omit::Nil),
    field("subPathExpr", Shape::String, Omit::Empty),
];
const TOLERATION: &[Field] = &[
    field("key", Shape::String, Omit::Empty),
    field("operator", Shape::String, Omit::Empty),
    field("value", Shape::String, Omit::Empty),
    field("effect", Shape::String, Omit::Empty),
    field("tolerationSeconds", Shape::Int, Omit::Nil),
];
const HOST_ALIAS: &[Field] =
    &[field("ip", Shape::String, Omit::Empty), field("hostnames", Shape::List(&Shape::String), Omit::Empty)];
const LOCAL_OBJECT_REF: &[Field] = &[field("name", Shape::String, Omit::Empty)];

/// Go `MainContainerOverlay`, in declaration order.
const MAIN_CONTAINER_OVERLAY: &[Field] = &[
    field("command", Shape::List(&Shape::String), Omit::Empty),
    field("args", Shape::List(&Shape::String), Omit::Empty),
    field("envFrom", Shape::List(&Shape::Struct(ENV_FROM)), Omit::Empty),
    field("env", Shape::List(&Shape::Struct(ENV)), Omit::Empty),
    field("imagePullPolicy", Shape::String, Omit::Nil),
    field("volumeMounts", Shape::List(&Shape::Struct(VOLUME_MOUNT)), Omit::Empty),
    field("livenessProbe", Shape::Unsupported, Omit::Nil),
    field("readinessProbe", Shape::Unsupported, Omit::Nil),
    field("startupProbe", Shape::Unsupported, Omit::Nil),
    field("lifecycle", Shape::Unsupported, Omit::Nil),
    field("mainContainerSecurityContext", Shape::Unsupported, Omit::Nil),
];

/// The pod part of Go `Overlay`, after the inlined main-container fields.
const POD_OVERLAY: &[Field] = &[
    field("volumes", Shape::Unsupported, Omit::Empty),
    field("volumeClaims", Shape::Unsupported, Omit::Empty),
    field("initContainers", Shape::Unsupported, Omit::Empty),
    field("sidecarContainers", Shape::Unsupported, Omit::Empty),
    field("serviceAccountName", Shape::String, Omit::Empty),
    field("securityContext", Shape::Unsupported, Omit::Nil),
    field("imagePullSecrets", Shape::List(&Shape::Struct(LOCAL_OBJECT_REF)), Omit::Empty),
    field("affinity", Shape::Unsupported, Omit::Nil),
    field("tolerations", Shape::List(&Shape::Struct(TOLERATION)), Omit::Empty),
    field("priorityClassName", Shape::String, Omit::Empty),
    field("terminationGracePeriodSeconds", Shape::Int, Omit::Nil),
    field("hostAliases", Shape::List(&Shape::Struct(HOST_ALIAS)), Omit::Empty),
    field("topologySpreadConstraints", Shape::Unsupported, Omit::Empty),
    field("runtimeClassName", Shape::String, Omit::Nil),
    field("dnsConfig", Shape::Unsupported, Omit::Nil),
    field("podLabels", Shape::Map(&Shape::String), Omit::Empty),
    field("podAnnotations", Shape::Map(&Shape::String), Omit::Empty),
    field("shareProcessNamespace", Shape::Bool, Omit::Nil),
];

const fn concat<const N: usize>(a: &[Field], b: &[Field]) -> [Field; N] {
    let mut out = [field("", Shape::String, Omit::Never); N];
    let mut i = 0;
    while i < a.len() {
        out[i] = a[i];
        i += 1;
    }
    while i < N {
        out[i] = b[i - a.len()];
        i += 1;
    }
    out
}

const OVERLAY: &[Field] =
    &concat::<{ MAIN_CONTAINER_OVERLAY.len() + POD_OVERLAY.len() }>(MAIN_CONTAINER_OVERLAY, POD_OVERLAY);

const CACHE_VOLUME: &[Field] = &[
    field("size", Shape::Quantity, Omit::Never),
    field("storageClassName", Shape::String, Omit::Nil),
    field("memoryCacheSize", Shape::Quantity, Omit::Nil),
];
const SHARED_STORAGE_CACHE: &[Field] =
    &[field("memoryCacheSize", Shape::Quantity, Omit::Nil), field("diskCacheSize", Shape::Quantity, Omit::Nil)];
const PYTHON_UDF_SIDECAR: &[Field] = &[
    field("enabled", Shape::Bool, Omit::Empty),
    field("port", Shape::Int, Omit::Empty),
    field("image", Shape::String, Omit::Empty),
    field("resources", Shape::Struct(RESOURCES), Omit::Never),
    field("overlay", Shape::Struct(MAIN_CONTAINER_OVERLAY), Omit::Nil),
];

/// The hashed part of Go `CNSetSpec`: `PodSet` then `ConfigThatChangeCNSpec`;
/// every later field is zero in the hashed copy (see [`ZERO_TAIL`]).
const HASHED_SPEC: &[Field] = &[
    field("image", Shape::String, Omit::Empty),
    field("resources", Shape::Struct(RESOURCES), Omit::Never),
    field("overlay", Shape::Struct(OVERLAY), Omit::Nil),
    field("replicas", Shape::Int, Omit::Never),
    field("topologySpread", Shape::List(&Shape::String), Omit::Empty),
    field("nodeSelector", Shape::Map(&Shape::String), Omit::Empty),
    field("config", Shape::Text, Omit::Nil),
    field("dnsBasedIdentity", Shape::Bool, Omit::Nil),
    field("clusterDomain", Shape::String, Omit::Empty),
    field("serviceArgs", Shape::List(&Shape::String), Omit::Empty),
    field("memoryLimitPercent", Shape::Int, Omit::Nil),
    field("exportToPrometheus", Shape::Bool, Omit::Nil),
    field("promDiscoveryScheme", Shape::String, Omit::Nil),
    field("semanticVersion", Shape::String, Omit::Nil),
    field("operatorVersion", Shape::String, Omit::Nil),
    field("memoryFsSize", Shape::Quantity, Omit::Nil),
    field("cacheVolume", Shape::Struct(CACHE_VOLUME), Omit::Nil),
    field("sharedStorageCache", Shape::Struct(SHARED_STORAGE_CACHE), Omit::Never),
    field("pythonUdfSidecar", Shape::Struct(PYTHON_UDF_SIDECAR), Omit::Never),
];

/// The zero `scalingConfig` and `updateStrategy` structs, which Go writes
/// even when empty; the other zero fields are all `omitempty`.
const ZERO_TAIL: &str = r#","scalingConfig":{},"updateStrategy":{}}"#;

/// The bytes Go hashes for `template`: the spec as the pool overrides it
/// (replicas 0, an overlay without podLabels/podAnnotations; image and config
/// dropped when the in-place gates are on), Go-JSON encoded.
pub fn hashed_json(template: &CNSetTemplate) -> Result<String, GoJsonError> {
    let mut value = serde_json::to_value(template)
        .map_err(|error| GoJsonError::Invalid { path: "spec.template".into(), reason: error.to_string() })?;
    let Value::Object(map) = &mut value else {
        return Err(GoJsonError::Type { path: "spec.template".into(), expected: "an object" });
    };
    map.insert("replicas".into(), Value::from(0));
    let overlay = map.entry("overlay").or_insert_with(|| Value::Object(serde_json::Map::new()));
    if let Value::Object(overlay) = overlay {
        overlay.remove("podLabels");
        overlay.remove("podAnnotations");
    }
    if inplace_gates(template) {
        map.remove("image");
        map.remove("config");
    } else if let Some(config) = template.config.as_ref() {
        let table = parse_config(config)
            .map_err(|error| GoJsonError::Invalid { path: "spec.template.config".into(), reason: error.to_string() })?;
        map.insert("config".into(), Value::String(to_go_toml(&table)));
    }
    let mut out = String::new();
    gojson::write_struct(map, HASHED_SPEC, "spec.template", &mut out)?;
    out.pop();
    out.push_str(ZERO_TAIL);
    Ok(out)
}

/// Go's `HashControllerRevision`: FNV-1 (32-bit) over the `fmt.Print` text of
/// the JSON bytes (`[123 34 …]`), its decimal value mapped through
/// `rand.SafeEncodeString`.
pub fn revision_hash(go_json: &str) -> String {
    let printed = format!("[{}]", go_json.as_bytes().iter().map(u8::to_string).collect::<Vec<_>>().join(" "));
    let mut hash: u32 = 0x811c_9dc5;
    for byte in printed.bytes() {
        hash = hash.wrapping_mul(0x0100_0193);
        hash ^= u32::from(byte);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    hash.to_string().bytes().map(|digit| char::from(ALPHABET[usize::from(digit) % ALPHABET.len()])).collect()
}

/// The CNSet the Go operator makes for `template` in pool `pool`.
pub fn cnset_name(pool: &str, template: &CNSetTemplate) -> Result<String, GoJsonError> {
    Ok(format!("{pool}-{}", revision_hash(&hashed_json(template)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(json: Value) -> CNSetTemplate {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn the_reference_example_names_the_cnset_test_5d7c6d9c8d() {
        // reference §0, worked example.
        let image_only = template(serde_json::json!({"image": "matrixorigin/matrixone:1.1.0"}));
        assert_eq!(
            hashed_json(&image_only).unwrap(),
            r#"{"image":"matrixorigin/matrixone:1.1.0","resources":{},"overlay":{},"replicas":0,"sharedStorageCache":{},"pythonUdfSidecar":{"resources":{}},"scalingConfig":{},"updateStrategy":{}}"#
        );
        assert_eq!(revision_hash(&hashed_json(&image_only).unwrap()), "5d7c6d9c8d");
        assert_eq!(cnset_name("test", &image_only).unwrap(), "test-5d7c6d9c8d");
    }

    #[test]
    fn hash_digits_map_through_the_safe_alphabet() {
        // reference §0: 0→4, 1→5, … 9→f; FNV-1 of the example is 1837285748.
        let digits: String =
            "1837285748".bytes().map(|d| char::from(b"bcdfghjklmnpqrstvwxz2456789"[usize::from(d) % 27])).collect();
        assert_eq!(digits, "5d7c6d9c8d");
    }

    #[test]
    fn pod_labels_and_annotations_and_replicas_do_not_change_the_name() {
        let base = template(serde_json::json!({"image": "mo:1.1.0"}));
        let labelled = template(serde_json::json!({
            "image": "mo:1.1.0", "replicas": 3,
            "overlay": {"podLabels": {"a": "b"}, "podAnnotations": {"c": "d"}}
        }));
        assert_eq!(cnset_name("p", &base), cnset_name("p", &labelled));
    }

    #[test]
    fn the_fields_go_writes_appear_in_declaration_order_with_canonical_quantities() {
        let spec = template(serde_json::json!({
            "cacheVolume": {"size": "10240Mi"},
            "resources": {"requests": {"memory": "8192Mi", "cpu": "1000m"}},
            "image": "mo:1.2.0",
            "serviceArgs": ["-debug-http=:6060"],
            "overlay": {"env": [{"name": "A", "value": "<x>"}]},
            "config": "[cn]\nx = 1\n",
            "cnLabels": [{"key": "k"}],
        }));
        assert_eq!(
            hashed_json(&spec).unwrap(),
            concat!(
                r#"{"image":"mo:1.2.0","resources":{"requests":{"cpu":"1","memory":"8Gi"}},"#,
                r#""overlay":{"env":[{"name":"A","value":"\u003cx\u003e"}]},"replicas":0,"#,
                r#""config":"\n[cn]\nx = 1\n","serviceArgs":["-debug-http=:6060"],"#,
                r#""cacheVolume":{"size":"10Gi"},"sharedStorageCache":{},"pythonUdfSidecar":{"resources":{}},"#,
                r#""scalingConfig":{},"updateStrategy":{}}"#
            )
        );
    }

    #[test]
    fn with_the_inplace_gates_image_and_config_leave_the_hash() {
        let a = template(serde_json::json!({"image": "mo:1.3.0", "operatorVersion": "1.3.0", "config": "a = 1"}));
        let b = template(serde_json::json!({"image": "mo:1.3.1", "operatorVersion": "1.3.0", "config": "a = 2"}));
        assert_eq!(cnset_name("p", &a), cnset_name("p", &b));
        let c = template(serde_json::json!({"image": "mo:1.3.1", "operatorVersion": "1.2.0"}));
        let d = template(serde_json::json!({"image": "mo:1.3.0", "operatorVersion": "1.2.0"}));
        assert_ne!(cnset_name("p", &c), cnset_name("p", &d));
    }

    #[test]
    fn an_overlay_field_without_a_go_encoding_is_refused_by_name() {
        let spec = template(serde_json::json!({"image": "mo:1.1.0", "overlay": {"affinity": {"nodeAffinity": {}}}}));
        let err = cnset_name("p", &spec).unwrap_err();
        assert!(err.to_string().contains("spec.template.overlay.affinity"), "{err}");
    }
}
