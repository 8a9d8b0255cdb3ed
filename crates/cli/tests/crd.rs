//! `cnpool crd` is what users install; deploy/crds/ must be the same bytes,
//! and the surface users see (names, columns, subresources) is reviewed as a
//! snapshot whenever it changes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::process::Command;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

fn cnpool_crd_output() -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_cnpool")).arg("crd").output().expect("cnpool runs");
    assert!(output.status.success(), "cnpool crd failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

#[test]
fn committed_crds_match_cnpool_crd() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/crds/cnpool.yaml");
    let committed = std::fs::read_to_string(path).expect("deploy/crds/cnpool.yaml exists");
    assert!(
        committed == cnpool_crd_output(),
        "deploy/crds/cnpool.yaml differs from `cnpool crd`: regenerate it with \
         `cargo run -q -p cnpool -- crd > deploy/crds/cnpool.yaml` and review the diff"
    );
}

/// Names, scope, subresources and printer columns of each CRD, one line each.
fn surface(crd: &CustomResourceDefinition) -> Vec<String> {
    let names = &crd.spec.names;
    let version = &crd.spec.versions[0];
    let mut lines = vec![format!(
        "{} kind={} scope={} short={:?} categories={:?}",
        crd.metadata.name.as_deref().unwrap_or_default(),
        names.kind,
        crd.spec.scope,
        names.short_names.clone().unwrap_or_default(),
        names.categories.clone().unwrap_or_default(),
    )];
    let subresources = version.subresources.as_ref();
    lines.push(format!("  status subresource: {}", subresources.is_some_and(|s| s.status.is_some())));
    if let Some(scale) = subresources.and_then(|s| s.scale.as_ref()) {
        lines.push(format!(
            "  scale: spec={} status={} selector={}",
            scale.spec_replicas_path,
            scale.status_replicas_path,
            scale.label_selector_path.as_deref().unwrap_or("-")
        ));
    }
    for column in version.additional_printer_columns.iter().flatten() {
        lines.push(format!(
            "  column {} ({}) {} priority={}",
            column.name,
            column.type_,
            column.json_path,
            column.priority.unwrap_or(0)
        ));
    }
    lines
}

#[test]
fn crd_surface() {
    let documents: Vec<CustomResourceDefinition> = cnpool_crd_output()
        .split("---\n")
        .filter(|document| !document.trim().is_empty())
        .map(|document| serde_saphyr::from_str(document).expect("each document is a CRD"))
        .collect();
    let surface: Vec<String> = documents.iter().flat_map(surface).collect();
    insta::assert_snapshot!(surface.join("\n"));
}
