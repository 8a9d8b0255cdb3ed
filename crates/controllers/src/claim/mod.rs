//! The CNClaim controller: carries out the steps the decision core names.
//!
//! The binding protocol — what a claim owns, the guarded writes, each step
//! and why it is safe — is written once, in [`cnpool_core::claim`]; this
//! module does not restate it. Here a reconcile reads (the `observe` part),
//! asks [`cnpool_core::claim::next_claim_step`] for the one step to take,
//! performs it (`execute`: reads bypassing the cache, guarded pod writes
//! through [`crate::ownership::transition`]; `status`: writes to the claim
//! at the resourceVersion read) and feeds what it read or wrote back into
//! the next decision, so that a new claim goes from nothing to Bound in one
//! reconcile when its store is ready. It decides nothing itself: every
//! precondition of a write is a step or an input of the core.

mod execute;
mod migration;
mod observe;
mod status;

use std::sync::Arc;

use cnpool_api::CNClaim;
use cnpool_registry::StoreRegistry;
use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::context::Context;
use crate::error::Error;
use crate::key::{Kind, key_of};
use observe::Snapshot;
pub use status::{BOUND_CONDITION, lost_status, rebind_spec};

/// Steps one reconcile takes at most before requeueing.
const MAX_STEPS: usize = 16;

/// Whether a reconcile goes on with another step, or ends: to run again
/// after a time (unless a change wakes it first), or on a change only.
enum Next {
    Again,
    Requeue(std::time::Duration),
    AwaitChange,
}

pub async fn reconcile<R: StoreRegistry + 'static>(claim: Arc<CNClaim>, ctx: Arc<Context<R>>) -> Result<Action, Error> {
    let current = ctx.claims.holds_version(&claim);
    let claim = ctx.claim_writes.freshest(claim);
    let key = key_of(claim.as_ref());
    ctx.wake.reconciling(Kind::Claim, &key.0, &key.1, current);
    let mut snap = Snapshot::from_cache(&ctx, (*claim).clone());
    for _ in 0..MAX_STEPS {
        match execute::step(&ctx, &mut snap, &key).await? {
            Next::Again => {}
            Next::Requeue(after) => return Ok(Action::requeue(after)),
            Next::AwaitChange => return Ok(Action::await_change()),
        }
    }
    Ok(Action::requeue(ctx.config.requeue_min))
}

pub fn error_policy<R>(claim: Arc<CNClaim>, error: &Error, ctx: Arc<Context<R>>) -> Action {
    let delay = ctx.backoff.failure(Kind::Claim, &key_of(claim.as_ref()));
    tracing::warn!(claim = %claim.name_any(), error = %error, kind = error.metric_label(), ?delay, "claim reconcile failed");
    Action::requeue(delay)
}
