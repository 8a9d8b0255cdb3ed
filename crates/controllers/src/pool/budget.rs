//! The PodDisruptionBudget of each pool, which refuses voluntary evictions
//! of its Bound pods: which version the server serves, and the budget's
//! writes.

use std::sync::atomic::Ordering;

use cnpool_api::{CNPool, PodPhase, labels};
use kube::Resource;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::context::Context;
use crate::error::{Error, is_already_exists, is_not_found};
use crate::key::key_of;

/// The PodDisruptionBudget that guards `pool`'s Bound pods against
/// voluntary evictions (`kubectl drain`): named after the pool.
pub fn disruption_budget_name(pool: &str) -> String {
    format!("{pool}-bound")
}

/// What the budget of `pool` says: no Bound pod of the pool may be evicted.
/// It selects by the `phase` label, which only the guarded ownership write
/// sets, so a pod is guarded exactly while it is Bound; once released
/// (Draining, Idle) it may be evicted.
fn disruption_budget_spec(pool: &str) -> Value {
    json!({
        "maxUnavailable": 0,
        "selector": {"matchLabels": {labels::POOL_NAME: pool, labels::PHASE: PodPhase::Bound.as_str()}},
    })
}

/// Creates the pool's PodDisruptionBudget, or restores its spec. A server
/// without PodDisruptionBudgets, or a role without them, leaves Bound pods
/// unguarded and is said once at warn; neither stops the pool.
pub(super) async fn ensure<R>(ctx: &Context<R>, pool: &CNPool) -> Result<(), Error> {
    let Some(resource) = resource(ctx).await else { return Ok(()) };
    let (namespace, name) = key_of(pool);
    let budgets: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &resource);
    let budget_name = disruption_budget_name(&name);
    let spec = disruption_budget_spec(&name);
    let refused = |error: &kube::Error| {
        let forbidden = matches!(error, kube::Error::Api(status) if status.code == 403);
        if forbidden && !ctx.budgets_refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                pool = %name, %error,
                "cannot manage PodDisruptionBudgets: evictions of Bound pods are not refused; grant the operator get, \
                 create and patch on poddisruptionbudgets (group policy), as deploy/rbac/clusterrole.yaml does"
            );
        }
        forbidden
    };
    let existing = match budgets.get_opt(&budget_name).await {
        Ok(existing) => existing,
        Err(error) if refused(&error) => return Ok(()),
        Err(error) => return Err(Error::kube("read", format!("PodDisruptionBudget {budget_name}"), error)),
    };
    if let Some(existing) = existing {
        let current = &existing.data["spec"];
        if current["maxUnavailable"] == spec["maxUnavailable"] && current["selector"] == spec["selector"] {
            return Ok(());
        }
        let restore = json!({"spec": spec});
        return match budgets.patch(&budget_name, &PatchParams::default(), &Patch::Merge(&restore)).await {
            Ok(_) => {
                tracing::info!(pool = %name, budget = %budget_name, "restored the PodDisruptionBudget's spec");
                Ok(())
            }
            Err(error) if refused(&error) || is_not_found(&error) => Ok(()),
            Err(error) => Err(Error::kube("patch", format!("PodDisruptionBudget {budget_name}"), error)),
        };
    }
    let budget = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {
            "name": budget_name,
            "namespace": namespace,
            "labels": {labels::POOL_NAME: name},
            "ownerReferences": pool.controller_owner_ref(&()).map(|owner| vec![owner]),
        },
        "spec": spec,
    });
    let budget: DynamicObject =
        serde_json::from_value(budget).map_err(|source| Error::Encode { what: "PodDisruptionBudget", source })?;
    match budgets.create(&PostParams::default(), &budget).await {
        Ok(_) => {
            let api_version = resource.api_version.as_str();
            tracing::info!(pool = %name, budget = %budget_name, api_version, "created the budget of Bound pods");
            Ok(())
        }
        Err(error) if refused(&error) || is_already_exists(&error) => Ok(()),
        Err(error) => Err(Error::kube("create", format!("PodDisruptionBudget {budget_name}"), error)),
    }
}

/// The PodDisruptionBudget resource to write: policy/v1 where served,
/// else policy/v1beta1 (kube-apiserver before 1.21); `None` when the
/// server serves neither, or discovery failed this time (asked again
/// on the next call).
async fn resource<R>(ctx: &Context<R>) -> Option<ApiResource> {
    let found = ctx.disruption_budgets.get_or_try_init(|| discover(&ctx.client)).await;
    match found {
        Ok(resource) => resource.clone(),
        Err(error) => {
            tracing::debug!(%error, "cannot discover the PodDisruptionBudget version; trying again later");
            None
        }
    }
}

async fn discover(client: &kube::Client) -> Result<Option<ApiResource>, kube::Error> {
    for version in ["v1", "v1beta1"] {
        let api_version = format!("policy/{version}");
        let served = match client.list_api_group_resources(&api_version).await {
            Ok(list) => list.resources.iter().any(|resource| resource.name == "poddisruptionbudgets"),
            Err(kube::Error::Api(status)) if status.code == 404 => false,
            Err(error) => return Err(error),
        };
        if served {
            tracing::info!(api_version, "Bound pods are guarded by PodDisruptionBudgets of this version");
            return Ok(Some(ApiResource {
                group: "policy".into(),
                version: version.into(),
                api_version,
                kind: "PodDisruptionBudget".into(),
                plural: "poddisruptionbudgets".into(),
            }));
        }
    }
    tracing::warn!(
        "the API server serves no PodDisruptionBudgets (policy/v1 or v1beta1): evictions of Bound pods are not refused"
    );
    Ok(None)
}
