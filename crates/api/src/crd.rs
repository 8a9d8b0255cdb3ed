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
