//! cnpool's validating admission webhook.
//!
//! Three guard rails, each a pure function from an `AdmissionRequest` to an
//! `AdmissionResponse` (docs/webhook.md says what each refuses and why):
//! - [`review_pod`]: a pool pod's `claim-uid` / `claimed-by` never change
//!   from one claim to another; only release (X → none) then acquire
//!   (none → Y) change a pod's owner.
//! - [`review_claim`]: CNClaim specs are valid, and `spec.podName` changes
//!   only as the binding protocol allows (DESIGN §2).
//! - [`review_claim_set`], [`review_pool`]: CNClaimSet and CNPool specs are
//!   valid.
//!
//! The webhook is a guard rail for people, not the lock: binding safety
//! comes from the guarded writes on the pod's `claim-uid` label, so an
//! outage of the webhook (whose UPDATE rules fail open) costs checks, never
//! exclusivity.
//!
//! [`router`] serves the four functions on one path each, and [`serve_tls`]
//! serves a router over TLS from PEM files that are re-read periodically.

mod claims;
mod pods;
mod review;
mod server;
mod specs;

pub use claims::{OperatorIdentity, review_claim};
pub use pods::review_pod;
pub use server::{CLAIM_SETS_PATH, CLAIMS_PATH, PODS_PATH, POOLS_PATH, ServeError, TlsFiles, router, serve_tls};
pub use specs::{review_claim_set, review_pool};
