//! The resources the server serves: built-ins, and those CRDs add.

use serde_json::Value;

/// Where objects of a resource are kept. Two API versions of one resource
/// (events in core/v1 and events.k8s.io/v1, PDBs in policy/v1 and v1beta1)
/// share one storage, as in the real server.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StorageKey {
    pub group: String,
    pub plural: String,
}

/// A printer column: what `kubectl get` shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub name: String,
    pub type_: String,
    pub json_path: String,
    pub priority: i64,
    pub description: String,
}

/// The scale subresource of a custom resource.
#[derive(Clone, Debug, PartialEq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

/// How an object is converted between its stored form and this version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conversion {
    None,
    /// events.k8s.io/v1 events are stored as core/v1 events.
    EventsV1,
}

#[derive(Clone, Debug)]
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub status: bool,
    pub scale: Option<ScalePaths>,
    pub columns: Vec<Column>,
    /// The CRD's openAPIV3Schema, for defaulting, pruning and validation.
    pub schema: Option<Value>,
    pub storage: StorageKey,
    pub conversion: Conversion,
    /// Field selectors beyond metadata.name and metadata.namespace.
    pub field_selectors: &'static [&'static str],
    pub custom: bool,
}

impl ResourceInfo {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// `plural.group` (or just `plural` for the core group), as in messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }
}

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];
const NAMESPACE_FIELDS: &[&str] = &["status.phase"];
const NODE_FIELDS: &[&str] = &["spec.unschedulable"];
const SECRET_FIELDS: &[&str] = &["type"];

struct Builtin {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    status: bool,
    short_names: &'static [&'static str],
    field_selectors: &'static [&'static str],
    storage_group: &'static str,
    conversion: Conversion,
}

const fn builtin(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    status: bool,
    short_names: &'static [&'static str],
) -> Builtin {
    Builtin {
        group,
        version,
        kind,
        plural,
        namespaced,
        status,
        short_names,
        field_selectors: &[],
        storage_group: group,
        conversion: Conversion::None,
    }
}

const BUILTINS: &[Builtin] = &[
    builtin("", "v1", "Namespace", "namespaces", false, true, &["ns"]).fields(NAMESPACE_FIELDS),
    builtin("", "v1", "Pod", "pods", true, true, &["po"]).fields(POD_FIELDS),
    builtin("", "v1", "Service", "services", true, true, &["svc"]),
    builtin("", "v1", "Event", "events", true, false, &["ev"]).fields(EVENT_FIELDS),
    builtin("", "v1", "ConfigMap", "configmaps", true, false, &["cm"]),
    builtin("", "v1", "Secret", "secrets", true, false, &[]).fields(SECRET_FIELDS),
    builtin("", "v1", "ServiceAccount", "serviceaccounts", true, false, &["sa"]),
    builtin("", "v1", "Node", "nodes", false, true, &["no"]).fields(NODE_FIELDS),
    Builtin {
        conversion: Conversion::EventsV1,
        storage_group: "",
        ..builtin("events.k8s.io", "v1", "Event", "events", true, false, &["ev"]).fields(EVENT_FIELDS)
    },
    builtin("coordination.k8s.io", "v1", "Lease", "leases", true, false, &[]),
    builtin("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", true, true, &["pdb"]),
    Builtin {
        storage_group: "policy",
        ..builtin("policy", "v1beta1", "PodDisruptionBudget", "poddisruptionbudgets", true, true, &["pdb"])
    },
    builtin(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        true,
        &["crd", "crds"],
    ),
];

impl Builtin {
    const fn fields(self, field_selectors: &'static [&'static str]) -> Self {
        Builtin { field_selectors, ..self }
    }

    fn info(&self) -> ResourceInfo {
        ResourceInfo {
            group: self.group.into(),
            version: self.version.into(),
            kind: self.kind.into(),
            plural: self.plural.into(),
            singular: self.kind.to_lowercase(),
            namespaced: self.namespaced,
            short_names: self.short_names.iter().map(ToString::to_string).collect(),
            categories: if matches!(self.plural, "pods" | "services") { vec!["all".into()] } else { Vec::new() },
            status: self.status,
            scale: None,
            columns: builtin_columns(self.plural),
            schema: None,
            storage: StorageKey { group: self.storage_group.into(), plural: self.plural.into() },
            conversion: self.conversion,
            field_selectors: self.field_selectors,
            custom: false,
        }
    }
}

pub fn builtins() -> Vec<ResourceInfo> {
    BUILTINS.iter().map(Builtin::info).collect()
}

fn column(name: &str, type_: &str, json_path: &str, priority: i64) -> Column {
    Column { name: name.into(), type_: type_.into(), json_path: json_path.into(), priority, description: String::new() }
}

/// Columns of built-ins, after the Name column. Pod columns that the real
/// server computes (READY, STATUS, RESTARTS) are computed in `table`.
fn builtin_columns(plural: &str) -> Vec<Column> {
    let age = column("Age", "date", ".metadata.creationTimestamp", 0);
    match plural {
        "pods" => vec![
            column("Ready", "string", "", 0),
            column("Status", "string", "", 0),
            column("Restarts", "integer", "", 0),
            age,
            column("IP", "string", ".status.podIP", 1),
            column("Node", "string", ".spec.nodeName", 1),
        ],
        "namespaces" => vec![column("Status", "string", ".status.phase", 0), age],
        "services" => {
            vec![column("Type", "string", ".spec.type", 0), column("Cluster-IP", "string", ".spec.clusterIP", 0), age]
        }
        "events" => vec![
            column("Type", "string", ".type", 0),
            column("Reason", "string", ".reason", 0),
            column("Object", "string", "", 0),
            column("Message", "string", ".message", 0),
        ],
        "leases" => vec![column("Holder", "string", ".spec.holderIdentity", 0), age],
        "nodes" => vec![column("Status", "string", "", 0), age],
        // The real server prints this one as a timestamp, not an age.
        "customresourcedefinitions" => vec![column("Created At", "string", ".metadata.creationTimestamp", 0)],
        _ => vec![age],
    }
}

/// The resources one CRD serves: one per served version.
pub fn from_crd(crd: &Value) -> Vec<ResourceInfo> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let strings = |value: &Value| -> Vec<String> {
        value.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(ToString::to_string)).collect()
    };
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let group = text(&spec["group"]);
    let plural = text(&names["plural"]);
    let kind = text(&names["kind"]);
    let singular = names["singular"].as_str().map(ToString::to_string).unwrap_or_else(|| kind.to_lowercase());
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    versions
        .iter()
        .filter(|version| version["served"].as_bool().unwrap_or(true))
        .map(|version| {
            let subresources = &version["subresources"];
            let scale = subresources.get("scale").filter(|scale| scale.is_object()).map(|scale| ScalePaths {
                spec_replicas: text(&scale["specReplicasPath"]),
                status_replicas: text(&scale["statusReplicasPath"]),
                label_selector: scale["labelSelectorPath"].as_str().map(ToString::to_string),
            });
            let columns = version["additionalPrinterColumns"]
                .as_array()
                .map(|columns| {
                    columns
                        .iter()
                        .map(|c| Column {
                            name: text(&c["name"]),
                            type_: text(&c["type"]),
                            json_path: text(&c["jsonPath"]),
                            priority: c["priority"].as_i64().unwrap_or(0),
                            description: text(&c["description"]),
                        })
                        .collect()
                })
                .unwrap_or_else(|| vec![column("Age", "date", ".metadata.creationTimestamp", 0)]);
            ResourceInfo {
                group: group.clone(),
                version: text(&version["name"]),
                kind: kind.clone(),
                plural: plural.clone(),
                singular: singular.clone(),
                namespaced: spec["scope"].as_str() != Some("Cluster"),
                short_names: strings(&names["shortNames"]),
                categories: strings(&names["categories"]),
                status: subresources.get("status").is_some_and(Value::is_object),
                scale,
                columns,
                schema: version["schema"].get("openAPIV3Schema").cloned(),
                storage: StorageKey { group: group.clone(), plural: plural.clone() },
                conversion: Conversion::None,
                field_selectors: &[],
                custom: true,
            }
        })
        .collect()
}
