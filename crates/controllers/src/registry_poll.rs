//! HAKeeper's store list, read every `registry_poll` into the context's
//! [`crate::stores::StoreSnapshot`]: a store that changed wakes its pod and
//! the pod's claim.

use std::sync::Arc;

use cnpool_registry::{RegistryError, StoreRegistry};
use futures::future::{BoxFuture, Shared};

use crate::context::Context;
use crate::stores::UNREACHABLE_AFTER;
use crate::wake;

/// Reads HAKeeper's store list every `registry_poll` until `shutdown`, and
/// wakes the pods (and their claims) whose store changed.
pub async fn poll_registry<R: StoreRegistry>(ctx: Arc<Context<R>>, shutdown: Shared<BoxFuture<'static, ()>>) {
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        if let Err(error) = refresh_stores(&ctx).await {
            // Said at warn once HAKeeper counts as unreachable (`refresh_stores`).
            tracing::debug!(%error, kind = error.metric_label(), "cannot list CN stores");
        }
        tokio::select! {
            () = &mut shutdown => return,
            () = tokio::time::sleep(ctx.config.registry_poll) => {}
        }
    }
}

/// Lists HAKeeper's stores now, and wakes the pods (and their claims) whose
/// store changed since the last listing; when HAKeeper turns reachable or
/// unreachable, says so once and wakes what reports it.
pub async fn refresh_stores<R: StoreRegistry>(ctx: &Context<R>) -> Result<(), RegistryError> {
    let listed = match ctx.registry.list_stores().await {
        Ok(listed) => listed,
        Err(error) => {
            if let Some(now) = ctx.stores.listing_failed() {
                tracing::warn!(%error, failures = UNREACHABLE_AFTER, "HAKeeper unreachable: CN store listings fail");
                wake::hakeeper_changed(ctx, now);
            }
            return Err(error);
        }
    };
    let (changed, reachability) = ctx.stores.replace(listed);
    for uuid in changed {
        wake::store_changed(ctx, &uuid, None);
    }
    if let Some(now) = reachability {
        tracing::info!(reachability = ?now, "HAKeeper answers CN store listings");
        wake::hakeeper_changed(ctx, now);
    }
    Ok(())
}
