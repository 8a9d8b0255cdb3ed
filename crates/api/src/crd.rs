//! The CustomResourceDefinitions, as installed by `cnpool crd`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{CNClaim, CNClaimSet, CNPool};

/// The three CRDs, in the order they are best applied.
pub fn crds() -> [CustomResourceDefinition; 3] {
    [CNPool::crd(), CNClaim::crd(), CNClaimSet::crd()]
}

/// The CRDs as one multi-document YAML stream.
pub fn crds_yaml() -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}

/// A stand-in for matrixone-operator's LogSet CRD, for `cnpool dev` and
/// the tests: schemaless (only `status.discovery` is read, and LogSets are
/// written whole with their status, so there is no status subresource).
/// A real MatrixOne deployment installs matrixone-operator's own.
pub fn log_set_stand_in() -> CustomResourceDefinition {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceDefinitionNames, CustomResourceDefinitionSpec, CustomResourceDefinitionVersion,
        CustomResourceValidation, JSONSchemaProps,
    };
    let schemaless = JSONSchemaProps {
        type_: Some("object".into()),
        x_kubernetes_preserve_unknown_fields: Some(true),
        ..JSONSchemaProps::default()
    };
    CustomResourceDefinition {
        metadata: kube::core::ObjectMeta { name: Some("logsets.core.matrixorigin.io".into()), ..Default::default() },
        spec: CustomResourceDefinitionSpec {
            group: "core.matrixorigin.io".into(),
            names: CustomResourceDefinitionNames {
                kind: "LogSet".into(),
                list_kind: Some("LogSetList".into()),
                plural: "logsets".into(),
                singular: Some("logset".into()),
                ..Default::default()
            },
            scope: "Namespaced".into(),
            versions: vec![CustomResourceDefinitionVersion {
                name: "v1alpha1".into(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation { open_api_v3_schema: Some(schemaless) }),
                ..Default::default()
            }],
            ..Default::default()
        },
        status: None,
    }
}
