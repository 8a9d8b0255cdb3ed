//! HAKeeper's store list, read every `registry_poll` into the context's
//! [`crate::stores::StoreSnapshot`]: a store that changed wakes its pod and
//! the pod's claim.

use std::sync::Arc;

use cnpool_registry::{RegistryError, StoreRegistry};
use futures::future::{BoxFuture, Shared};

use crate::context::Context;
use crate::wake;

/// Reads HAKeeper's store list every `registry_poll` until `shutdown`, and
/// wakes the pods (and their claims) whose store changed.
pub async fn poll_registry<R: StoreRegistry>(ctx: Arc<Context<R>>, shutdown: Shared<BoxFuture<'static, ()>>) {
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        if let Err(error) = refresh_stores(&ctx).await {
            tracing::warn!(%error, kind = error.metric_label(), "cannot list CN stores");
        }
        tokio::select! {
            () = &mut shutdown => return,
            () = tokio::time::sleep(ctx.config.registry_poll) => {}
        }
    }
}

/// Lists HAKeeper's stores now, and wakes the pods (and their claims) whose
/// store changed since the last listing.
pub async fn refresh_stores<R: StoreRegistry>(ctx: &Context<R>) -> Result<(), RegistryError> {
    for uuid in ctx.stores.replace(ctx.registry.list_stores().await?) {
        wake::store_changed(ctx, &uuid, None);
    }
    Ok(())
}
