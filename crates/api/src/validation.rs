//! Spec validation shared by the admission webhook and the controllers.
//!
//! Every error names the field (as a JSON path from the object root) and
//! says how to fix it, so that `kubectl apply` prints something a user can
//! act on.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::cnset::CNSetTemplate;
use crate::common::GoDuration;
use crate::labels::{RESERVED_PREFIXES, is_reserved};
use crate::selector::selector_matches;
use crate::{CNClaimSetSpec, CNClaimSpec, CNPoolSpec};

/// One invalid field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}; {fix}")]
pub struct FieldError {
    /// JSON path of the field, e.g. `spec.strategy.scaleStrategy.maxPods`.
    pub field: String,
    /// What is wrong with the value.
    pub problem: String,
    /// What to write instead.
    pub fix: String,
}

/// All invalid fields of one object, in field order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", join(.0))]
pub struct Invalid(pub Vec<FieldError>);

fn join(errors: &[FieldError]) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
}

#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn push(&mut self, field: impl Into<String>, problem: impl Into<String>, fix: impl Into<String>) {
        self.0.push(FieldError { field: field.into(), problem: problem.into(), fix: fix.into() });
    }

    fn finish(self) -> Result<(), Invalid> {
        if self.0.is_empty() { Ok(()) } else { Err(Invalid(self.0)) }
    }
}

pub fn validate_claim_spec(spec: &CNClaimSpec) -> Result<(), Invalid> {
    let mut errors = Errors::default();
    claim_spec(&mut errors, "spec", spec);
    errors.finish()
}

pub fn validate_claim_set_spec(spec: &CNClaimSetSpec) -> Result<(), Invalid> {
    let mut errors = Errors::default();
    if spec.replicas < 0 {
        errors.push("spec.replicas", format!("{} is negative", spec.replicas), "set replicas to 0 or more");
    }
    let template_labels = spec.template.metadata.as_ref().map(|meta| meta.labels.clone()).unwrap_or_default();
    label_map(&mut errors, "spec.template.metadata.labels", &template_labels);
    // The set's members carry these: an owner or set key among them would
    // make a claim pass for another set's member.
    reserved_keys(&mut errors, "spec.template.metadata.labels", &template_labels);
    claim_spec(&mut errors, "spec.template.spec", &spec.template.spec);
    if let Some(selector) = &spec.selector {
        let before = errors.0.len();
        label_selector(&mut errors, "spec.selector", selector);
        if errors.0.len() == before && !selector_matches(selector, &template_labels) {
            errors.push(
                "spec.selector",
                "does not match spec.template.metadata.labels, so the set would never see the claims it creates",
                "make the selector match the template's labels, or leave the selector out",
            );
        }
    }
    errors.finish()
}

pub fn validate_pool_spec(spec: &CNPoolSpec) -> Result<(), Invalid> {
    let mut errors = Errors::default();
    label_map(&mut errors, "spec.podLabels", &spec.pod_labels);
    reserved_keys(&mut errors, "spec.podLabels", &spec.pod_labels);
    pool_template(&mut errors, spec);
    let scale = &spec.strategy.scale_strategy;
    let scale_path = "spec.strategy.scaleStrategy";
    if scale.max_idle < 0 {
        errors.push(
            format!("{scale_path}.maxIdle"),
            format!("{} is negative", scale.max_idle),
            "set maxIdle to 0 or more",
        );
    }
    if let Some(max_pods) = scale.max_pods {
        if max_pods < 0 {
            errors.push(
                format!("{scale_path}.maxPods"),
                format!("{max_pods} is negative"),
                "set maxPods to 0 or more, or remove it for no limit",
            );
        } else if max_pods < scale.max_idle {
            errors.push(
                format!("{scale_path}.maxPods"),
                format!("{max_pods} is less than maxIdle ({})", scale.max_idle),
                "set maxPods to at least maxIdle, lower maxIdle, or remove maxPods for no limit",
            );
        }
    }
    if let Some(update) = &spec.strategy.update_strategy {
        duration(&mut errors, "spec.strategy.updateStrategy.reclaimTimeout", update.reclaim_timeout.as_ref());
    }
    if let Some(drain) = &spec.strategy.drain_strategy {
        duration(&mut errors, "spec.strategy.drainStrategy.timeout", drain.timeout.as_ref());
        duration(&mut errors, "spec.strategy.drainStrategy.minDelay", drain.min_delay.as_ref());
    }
    if let Some(deps) = &spec.deps {
        if deps.log_set.is_some() && deps.log_set_key("").is_none() {
            errors.push(
                "spec.deps.logSet.metadata.name",
                "is empty",
                "name the LogSet of the MatrixOne cluster the pool's CNs join, or use externalLogSet.haKeeperEndpoint",
            );
        }
        if let Some(external) = &deps.external_log_set
            && !is_host_port(&external.ha_keeper_endpoint)
        {
            errors.push(
                "spec.deps.externalLogSet.haKeeperEndpoint",
                format!("`{}` is not host:port", external.ha_keeper_endpoint),
                "write the log set discovery address, e.g. `mo-log-discovery.mo.svc:32001`",
            );
        }
    }
    errors.finish()
}

/// Exactly one of `template` (the Go shape) and `podTemplate`; the labels
/// either puts on pool pods, where an owner or phase key would give a new
/// pod an owner no acquire wrote.
fn pool_template(errors: &mut Errors, spec: &CNPoolSpec) {
    match (&spec.template, &spec.pod_template) {
        (None, None) => errors.push(
            "spec.template",
            "is missing, and so is spec.podTemplate",
            "give the CN template in the Go operator's shape (at least `image`), or a Kubernetes pod template in spec.podTemplate",
        ),
        (Some(_), Some(_)) => errors.push(
            "spec.podTemplate",
            "is set together with spec.template",
            "keep one: spec.template (the Go operator's CNSet shape) or spec.podTemplate (a plain pod template)",
        ),
        (Some(template), None) => go_template(errors, template),
        (None, Some(pod_template)) => {
            if let Some(labels) = pod_template.metadata.as_ref().and_then(|meta| meta.labels.as_ref()) {
                label_map(errors, "spec.podTemplate.metadata.labels", labels);
                reserved_keys(errors, "spec.podTemplate.metadata.labels", labels);
            }
        }
    }
}

fn go_template(errors: &mut Errors, template: &CNSetTemplate) {
    // A pool written for an earlier cnpool has its pod template here.
    if template.rest.contains_key("spec") || template.rest.contains_key("metadata") {
        errors.push(
            "spec.template",
            "holds a Kubernetes pod template (metadata/spec), but spec.template is the Go operator's CNSet shape",
            "move the pod template to spec.podTemplate, or write the CN template as image, resources, config, overlay",
        );
        return;
    }
    if template.image.trim().is_empty() {
        errors.push(
            "spec.template.image",
            "is empty",
            "give the MatrixOne CN image, e.g. matrixorigin/matrixone:1.2.0",
        );
    }
    if let Some(labels) = template.overlay.as_ref().and_then(|overlay| overlay.pod_labels.as_ref()) {
        label_map(errors, "spec.template.overlay.podLabels", labels);
        reserved_keys(errors, "spec.template.overlay.podLabels", labels);
    }
    if let Some(percent) = template.memory_limit_percent
        && !(1..=100).contains(&percent)
    {
        errors.push(
            "spec.template.memoryLimitPercent",
            format!("{percent} is outside (0, 100]"),
            "give a percentage of the memory limit from 1 to 100, or remove it",
        );
    }
    if let Some(timeout) = template.scaling_config.as_ref().and_then(|scaling| scaling.store_drain_timeout.as_ref()) {
        duration(errors, "spec.template.scalingConfig.storeDrainTimeout", Some(timeout));
    }
}

fn claim_spec(errors: &mut Errors, path: &str, spec: &CNClaimSpec) {
    label_selector(errors, &format!("{path}.selector"), &spec.selector);
    label_map(errors, &format!("{path}.additionalPodLabels"), &spec.additional_pod_labels);
    reserved_keys(errors, &format!("{path}.additionalPodLabels"), &spec.additional_pod_labels);
    for (index, label) in spec.cn_labels.iter().enumerate() {
        if label.key.is_empty() {
            errors.push(format!("{path}.cnLabels[{index}].key"), "is empty", "give every CN label a key");
        }
    }
    // Both end up as pod label values while the claim is bound.
    if let Some(owner) = &spec.owner_name {
        label_value(errors, &format!("{path}.ownerName"), owner);
    }
    label_value(errors, &format!("{path}.poolName"), &spec.pool_name);
    if let Some(source) = &spec.source_pod
        && source.pod_name.is_empty()
    {
        errors.push(
            format!("{path}.sourcePod.podName"),
            "is empty",
            "name the pod being migrated away from, or remove sourcePod",
        );
    }
}

/// Checks syntax only; whether the selector matches anything is not an error.
fn label_selector(errors: &mut Errors, path: &str, selector: &LabelSelector) {
    if let Some(match_labels) = &selector.match_labels {
        label_map(errors, &format!("{path}.matchLabels"), match_labels);
    }
    for (index, requirement) in selector.match_expressions.iter().flatten().enumerate() {
        let at = format!("{path}.matchExpressions[{index}]");
        label_key(errors, &format!("{at}.key"), &requirement.key);
        let values = requirement.values.as_deref().unwrap_or_default();
        match requirement.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errors.push(
                format!("{at}.values"),
                format!("is empty, but operator {} needs at least one value", requirement.operator),
                "list the values, or use Exists / DoesNotExist",
            ),
            "In" | "NotIn" => {
                for (value_index, value) in values.iter().enumerate() {
                    label_value(errors, &format!("{at}.values[{value_index}]"), value);
                }
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => errors.push(
                format!("{at}.values"),
                format!("must be empty for operator {}", requirement.operator),
                "remove the values, or use In / NotIn",
            ),
            "Exists" | "DoesNotExist" => {}
            other => errors.push(
                format!("{at}.operator"),
                format!("`{other}` is not an operator"),
                "use one of In, NotIn, Exists, DoesNotExist",
            ),
        }
    }
}

fn reserved_keys(errors: &mut Errors, path: &str, labels: &BTreeMap<String, String>) {
    for key in labels.keys().filter(|key| is_reserved(key)) {
        errors.push(
            format!("{path}[{key}]"),
            "uses a prefix reserved for the operator's ownership and pool labels",
            format!("choose a key outside {}", RESERVED_PREFIXES.join(", ")),
        );
    }
}

fn label_map(errors: &mut Errors, path: &str, labels: &BTreeMap<String, String>) {
    for (key, value) in labels {
        label_key(errors, &format!("{path}[{key}]"), key);
        label_value(errors, &format!("{path}[{key}]"), value);
    }
}

const LABEL_NAME_RULE: &str =
    "use at most 63 characters of a-z, A-Z, 0-9, '-', '_' and '.', starting and ending with a letter or digit";

fn label_key(errors: &mut Errors, path: &str, key: &str) {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        errors.push(
            path,
            format!("key prefix `{prefix}` is not a DNS subdomain"),
            "write the prefix in lowercase letters, digits, '-' and '.', at most 253 characters (e.g. `example.com`)",
        );
    }
    if name.is_empty() || !is_label_name(name) {
        errors.push(path, format!("key name `{name}` is not a valid label name"), LABEL_NAME_RULE);
    }
}

fn label_value(errors: &mut Errors, path: &str, value: &str) {
    if !value.is_empty() && !is_label_name(value) {
        errors.push(
            path,
            format!("value `{value}` is not a valid label value"),
            format!("{LABEL_NAME_RULE}, or leave it empty"),
        );
    }
}

fn duration(errors: &mut Errors, path: &str, value: Option<&GoDuration>) {
    if let Some(Err(error)) = value.map(GoDuration::parse) {
        errors.push(path, error.to_string(), "fix the duration");
    }
}

fn is_label_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes.iter().all(|&byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'))
}

fn is_dns_subdomain(text: &str) -> bool {
    text.len() <= 253 && text.split('.').all(is_dns_label)
}

fn is_dns_label(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes.iter().all(|&byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
}

fn is_host_port(text: &str) -> bool {
    match text.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|port| port > 0),
        None => false,
    }
}
