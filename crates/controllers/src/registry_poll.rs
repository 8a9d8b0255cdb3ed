//! Each MatrixOne cluster's store list, read every `registry_poll` from its
//! own HAKeeper into its own [`crate::stores::StoreSnapshot`]: a store that
//! changed wakes its pod and the pod's claim. The clusters are the ones the
//! pools use now ([`crate::registries::Registries::keep`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use cnpool_registry::{RegistryError, StoreRegistry};
use futures::StreamExt;
use futures::future::{BoxFuture, Shared};
use futures::stream::FuturesUnordered;

use crate::context::Context;
use crate::registries::ClusterRegistry;
use crate::stores::UNREACHABLE_AFTER;
use crate::wake;

/// Reads every cluster's store list every `registry_poll` until `shutdown`,
/// and wakes the pods (and their claims) whose store changed. A cluster
/// whose listing is still under way when the next one falls due is skipped
/// this time: a HAKeeper slow to answer delays no other cluster's listings.
pub async fn poll_registries<R: StoreRegistry>(ctx: Arc<Context<R>>, shutdown: Shared<BoxFuture<'static, ()>>) {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut listing = FuturesUnordered::new();
    let mut under_way: BTreeSet<String> = BTreeSet::new();
    loop {
        for cluster in ctx.registries.keep(&ctx.wanted_clusters()) {
            if under_way.insert(cluster.address.clone()) {
                let ctx = &ctx;
                listing.push(async move {
                    if let Err(error) = refresh_stores(ctx, &cluster).await {
                        // Said at warn once HAKeeper counts as unreachable (`refresh_stores`).
                        tracing::debug!(cluster = %cluster.address, %error, kind = error.metric_label(), "cannot list CN stores");
                    }
                    cluster.address.clone()
                });
            }
        }
        let next = tokio::time::sleep(ctx.config.registry_poll);
        let mut next = std::pin::pin!(next);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                () = &mut next => break,
                Some(done) = listing.next() => { under_way.remove(&done); }
            }
        }
    }
}

/// Lists the stores of `cluster`'s HAKeeper now, and wakes the pods (and
/// their claims) whose store changed since the last listing; when that
/// HAKeeper turns reachable or unreachable, says so once and wakes what
/// reports it.
pub async fn refresh_stores<R: StoreRegistry>(
    ctx: &Context<R>,
    cluster: &ClusterRegistry<R>,
) -> Result<(), RegistryError> {
    let listed = match cluster.registry.list_stores().await {
        Ok(listed) => listed,
        Err(error) => {
            if let Some(now) = cluster.stores.listing_failed() {
                tracing::warn!(cluster = %cluster.address, %error, failures = UNREACHABLE_AFTER, "HAKeeper unreachable: CN store listings fail");
                wake::hakeeper_changed(ctx, now);
            }
            return Err(error);
        }
    };
    let (changed, reachability) = cluster.stores.replace(listed);
    for uuid in changed {
        wake::store_changed(ctx, &uuid, None);
    }
    if let Some(now) = reachability {
        tracing::info!(cluster = %cluster.address, reachability = ?now, "HAKeeper answers CN store listings");
        wake::hakeeper_changed(ctx, now);
    }
    Ok(())
}
