//! The CN's config.toml (reference §3) and the digests Go names config by.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use crate::deps::Cluster;
use crate::gojson::write_string;
use crate::quantity::Quantity;
use crate::toml::{ConfigError, Table, TomlValue, deep_merge, parse_config, set, to_go_toml};
use crate::version::mo_version;
use cnpool_api::cnset::{CNSetTemplate, SharedStorageProvider};

/// Where the CN keeps local data (the cache volume's mount).
pub const DATA_PATH: &str = "/var/lib/matrixone";
const DATA_DIR: &str = "/var/lib/matrixone/data";
const DISK_CACHE_PATH: &str = "/var/lib/matrixone/disk-cache";
pub const S3_CERTIFICATE_PATH: &str = "/etc/s3-ssl";
pub const LOCK_SERVICE_PORT: u16 = 6003;
pub const CN_PORT_BASE: i64 = 6002;
pub const PYTHON_UDF_DEFAULT_PORT: i64 = 50051;

/// The config.toml text of a CN of `template` in `cluster`: the user's
/// `config`, with the operator's fileservice block deep-merged over it, then
/// the operator's keys set.
pub fn cn_config(template: &CNSetTemplate, cluster: &Cluster) -> Result<String, ConfigError> {
    let user = match template.config.as_ref() {
        Some(config) => parse_config(config)?,
        None => Table::new(),
    };
    let storage = cluster.shared_storage.clone().unwrap_or_default();
    let mut config = deep_merge(&user, &fileservice(template, &storage));
    set(&mut config, &["service-type"], TomlValue::String("CN".into()));
    let discovery_fixed = mo_version(template).is_some_and(|version| version.major >= 2);
    if discovery_fixed {
        set(
            &mut config,
            &["hakeeper-client", "discovery-address"],
            TomlValue::String(cluster.hakeeper_address.clone()),
        );
    } else {
        let addresses = cluster.service_addresses.iter().cloned().map(TomlValue::String).collect();
        set(&mut config, &["hakeeper-client", "service-addresses"], TomlValue::Array(addresses));
    }
    set(&mut config, &["cn", "role"], TomlValue::String(template.role.clone().unwrap_or_default()));
    set(
        &mut config,
        &["cn", "lockservice", "listen-address"],
        TomlValue::String(format!("0.0.0.0:{LOCK_SERVICE_PORT}")),
    );
    set(&mut config, &["cn", "port-base"], TomlValue::Integer(CN_PORT_BASE));
    if template.export_to_prometheus == Some(true) {
        set(&mut config, &["observability", "enableMetricToProm"], TomlValue::Boolean(true));
    }
    if let Some(port) = python_udf_port(template) {
        set(
            &mut config,
            &["cn", "python-udf-client", "server-address"],
            TomlValue::String(format!("localhost:{port}")),
        );
    }
    if template.scaling_config.as_ref().and_then(|scaling| scaling.store_drain_enabled) == Some(true) {
        set(&mut config, &["cn", "init-work-state"], TomlValue::String("Draining".into()));
    }
    Ok(to_go_toml(&config))
}

/// The Python UDF server's port when the sidecar is enabled.
pub fn python_udf_port(template: &CNSetTemplate) -> Option<i64> {
    let sidecar = template.python_udf_sidecar.as_ref().filter(|sidecar| sidecar.enabled == Some(true))?;
    Some(sidecar.port.filter(|port| *port != 0).unwrap_or(PYTHON_UDF_DEFAULT_PORT))
}

/// `data-dir` and the LOCAL, S3 and ETL file services.
fn fileservice(template: &CNSetTemplate, storage: &SharedStorageProvider) -> Table {
    let text = |value: &str| TomlValue::String(value.to_owned());
    let local: Table = [("name", text("LOCAL")), ("backend", text("DISK")), ("data-dir", text(DATA_DIR))]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect();
    let cache = template.shared_storage_cache.clone().unwrap_or_default();
    let mut s3_cache = BTreeMap::new();
    if let Some(memory) = cache.memory_cache_size.as_ref() {
        s3_cache.insert("memory-capacity".to_owned(), size_bytes(memory));
    }
    if let Some(disk) = cache.disk_cache_size.as_ref() {
        s3_cache.insert("disk-capacity".to_owned(), size_bytes(disk));
        s3_cache.insert("disk-path".to_owned(), DISK_CACHE_PATH.to_owned());
    }
    let etl_cache = BTreeMap::from([("memory-capacity".to_owned(), "1B".to_owned())]);
    let mut fileservice = Table::new();
    fileservice.insert("data-dir".into(), text(DATA_DIR));
    fileservice.insert(
        "fileservice".into(),
        TomlValue::TableArray(vec![
            local,
            shared_fileservice(storage, s3_cache, "S3", "data"),
            shared_fileservice(storage, etl_cache, "ETL", "etl"),
        ]),
    );
    fileservice
}

fn shared_fileservice(
    storage: &SharedStorageProvider,
    cache: BTreeMap<String, String>,
    name: &str,
    sub_dir: &str,
) -> Table {
    let mut entry = Table::new();
    entry.insert("name".into(), TomlValue::String(name.into()));
    if let Some(s3) = storage.s3.as_ref() {
        let backend = if s3.provider.as_deref() == Some("minio") { "MINIO" } else { "S3" };
        entry.insert("backend".into(), TomlValue::String(backend.into()));
        let mut s3_table = Table::new();
        let endpoint = if s3.endpoint.is_empty() { "s3.us-west-2.amazonaws.com" } else { &s3.endpoint };
        s3_table.insert("endpoint".into(), TomlValue::String(endpoint.into()));
        let path = s3.path.trim_matches('/');
        let (bucket, prefix) = match path.split_once('/') {
            Some((bucket, rest)) => (bucket, format!("{}/{sub_dir}", rest.trim_matches('/'))),
            None => (path, sub_dir.to_owned()),
        };
        s3_table.insert("bucket".into(), TomlValue::String(bucket.into()));
        s3_table.insert("key-prefix".into(), TomlValue::String(prefix));
        if let Some(certificates) = s3.certificate_ref.as_ref() {
            let files = certificates
                .files
                .iter()
                .map(|file| TomlValue::String(format!("{S3_CERTIFICATE_PATH}/{file}")))
                .collect();
            s3_table.insert("cert-files".into(), TomlValue::Array(files));
        }
        entry.insert("s3".into(), TomlValue::Table(s3_table));
    }
    if let Some(file_system) = storage.file_system.as_ref() {
        let backend = if name == "ETL" { "DISK-ETL" } else { "DISK" };
        entry.insert("backend".into(), TomlValue::String(backend.into()));
        entry.insert("data-dir".into(), TomlValue::String(file_system.path.clone()));
    }
    if !cache.is_empty() {
        entry.insert("cache".into(), TomlValue::StringTable(cache));
    }
    entry
}

/// A size as MatrixOne reads it: Go's canonical quantity and `B`.
fn size_bytes(quantity: &K8sQuantity) -> String {
    let canonical = Quantity::parse(&quantity.0).map(|q| q.to_string()).unwrap_or_else(|_| quantity.0.clone());
    format!("{canonical}B")
}

/// The first 7 hex digits of xxHash64 (seed 0), unpadded lower-case: Go's
/// `DataDigest`.
fn digest7(bytes: &[u8]) -> String {
    let hex = format!("{:x}", xxhash_rust::xxh64::xxh64(bytes, 0));
    hex.chars().take(7).collect()
}

/// The config suffix of a config.toml text (in-place gates on): the
/// `config.toml-<suffix>` key and the pod's `matrixorigin.io/config-suffix`.
pub fn config_suffix(config_toml: &str) -> String {
    digest7(config_toml.as_bytes())
}

/// The digest Go appends to a ConfigMap's name (gates off): over the Go JSON
/// of its data map, keys sorted.
pub fn config_map_digest(data: &BTreeMap<String, String>) -> String {
    let mut json = String::from("{");
    for (index, (key, value)) in data.iter().enumerate() {
        if index > 0 {
            json.push(',');
        }
        write_string(key, &mut json);
        json.push(':');
        write_string(value, &mut json);
    }
    json.push('}');
    digest7(json.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's own expected output for LogSet `test` (reference §3).
    const REFERENCE_CONFIG: &str = r#"data-dir = "/var/lib/matrixone/data"
service-type = "CN"

[cn]
port-base = 6002
role = ""

[cn.lockservice]
listen-address = "0.0.0.0:6003"

[[fileservice]]
backend = "DISK"
data-dir = "/var/lib/matrixone/data"
name = "LOCAL"

[[fileservice]]
backend = "DISK"
data-dir = "/test"
name = "S3"

[[fileservice]]
backend = "DISK-ETL"
data-dir = "/test"
name = "ETL"

[fileservice.cache]
memory-capacity = "1B"

[hakeeper-client]
service-addresses = []
"#;

    fn file_system_cluster(path: &str) -> Cluster {
        Cluster {
            hakeeper_address: "test-log-discovery.default.svc:32001".into(),
            service_addresses: vec![],
            shared_storage: Some(SharedStorageProvider {
                file_system: Some(cnpool_api::cnset::FileSystemProvider { path: path.into() }),
                ..SharedStorageProvider::default()
            }),
        }
    }

    fn template(json: serde_json::Value) -> CNSetTemplate {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn the_reference_config_is_reproduced_exactly() {
        let untagged = template(serde_json::json!({"image": "test"}));
        assert_eq!(cn_config(&untagged, &file_system_cluster("/test")).unwrap(), REFERENCE_CONFIG);
    }

    #[test]
    fn the_reference_config_suffix_is_67745ed() {
        assert_eq!(config_suffix(REFERENCE_CONFIG), "67745ed");
    }

    #[test]
    fn user_config_is_kept_but_the_operator_keys_win() {
        let spec = template(serde_json::json!({
            "image": "mo:1.2.0",
            "config": "service-type = \"TN\"\n[cn]\nport-base = 1\n[cn.frontend]\nport = 7777\n[log]\nlevel = \"debug\"\n"
        }));
        let text = cn_config(&spec, &file_system_cluster("/test")).unwrap();
        assert!(text.contains("service-type = \"CN\"\n"), "{text}");
        assert!(text.contains("port-base = 6002\n") && !text.contains("port-base = 1\n"), "{text}");
        assert!(text.contains("\n[cn.frontend]\nport = 7777\n"), "{text}");
        assert!(text.contains("\n[log]\nlevel = \"debug\"\n"), "{text}");
    }

    #[test]
    fn mo_2_uses_the_discovery_address_and_pools_start_draining() {
        let spec = template(serde_json::json!({
            "image": "mo:v2.0.1", "role": "TP",
            "scalingConfig": {"storeDrainEnabled": true}
        }));
        let text = cn_config(&spec, &file_system_cluster("/test")).unwrap();
        assert!(
            text.contains("\n[hakeeper-client]\ndiscovery-address = \"test-log-discovery.default.svc:32001\"\n"),
            "{text}"
        );
        assert!(text.contains("init-work-state = \"Draining\"\n"), "{text}");
        assert!(text.contains("role = \"TP\"\n"), "{text}");
    }

    #[test]
    fn s3_storage_names_bucket_prefix_and_cache_sizes() {
        let cluster = Cluster {
            hakeeper_address: "h:1".into(),
            service_addresses: vec![],
            shared_storage: Some(SharedStorageProvider {
                s3: Some(cnpool_api::cnset::S3Provider {
                    path: "/bucket/some/dir/".into(),
                    provider: Some("minio".into()),
                    ..cnpool_api::cnset::S3Provider::default()
                }),
                ..SharedStorageProvider::default()
            }),
        };
        let spec = template(serde_json::json!({
            "image": "mo:1.2.0",
            "sharedStorageCache": {"memoryCacheSize": "4096Mi", "diskCacheSize": "9Gi"}
        }));
        let text = cn_config(&spec, &cluster).unwrap();
        assert!(text.contains(
            "backend = \"MINIO\"\nname = \"S3\"\n\n[fileservice.cache]\ndisk-capacity = \"9GiB\"\ndisk-path = \"/var/lib/matrixone/disk-cache\"\nmemory-capacity = \"4GiB\"\n\n[fileservice.s3]\nbucket = \"bucket\"\nendpoint = \"s3.us-west-2.amazonaws.com\"\nkey-prefix = \"some/dir/data\"\n"
        ), "{text}");
        assert!(text.contains("key-prefix = \"some/dir/etl\""), "{text}");
    }

    #[test]
    fn the_config_map_digest_changes_with_any_key() {
        let data =
            BTreeMap::from([("config.toml".to_owned(), "a".to_owned()), ("start.sh".to_owned(), "b".to_owned())]);
        let mut changed = data.clone();
        changed.insert("start.sh".into(), "c".into());
        assert_eq!(config_map_digest(&data).len(), 7);
        assert_ne!(config_map_digest(&data), config_map_digest(&changed));
    }
}
