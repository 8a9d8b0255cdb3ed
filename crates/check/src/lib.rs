//! Model checking of cnpool's binding protocol (DESIGN §2–3).
//!
//! The simulator samples interleavings; this crate explores every reachable
//! state of a small cluster with stateright's breadth-first checker. The
//! decisions are the production ones: a replica's claim reconcile calls
//! [`cnpool_core::claim::next_claim_step`] on views read by the production
//! readers from its (lagging) cache, the CN-store controller calls
//! [`cnpool_core::store::plan_store`], and every pod write is the patch
//! [`cnpool_controllers::ownership::operations`] builds, applied to the
//! model server's pod with json-patch and refused when a `test` fails, as
//! the API server refuses it. Claim writes carry the claim as read and are
//! refused when the server's claim differs. What the model abstracts, and
//! why, is in docs/model-checking.md.
//!
//! - [`configs`]: the named cluster configurations;
//! - [`model`]: the state, the actions and the properties;
//! - [`run`]: the checker run and its report, with a counterexample trace.

pub mod configs;
pub mod model;
pub mod objects;
mod reconcile;
pub mod run;

pub use configs::Config;
pub use run::{Options, Report, check};

/// Why a check could not run (not a property violation: those are in the
/// [`Report`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A model object did not read as the production readers expect.
    #[error("a model object does not read as a Kubernetes object: {0}")]
    Convert(#[from] cnpool_core::convert::ConvertError),
    /// A patch or a patched document did not decode.
    #[error("a JSON patch does not decode: {0}")]
    Patch(#[source] serde_json::Error),
    /// A pod's binding annotation does not parse.
    #[error("a pod's binding annotation does not parse: {0}")]
    Binding(#[from] cnpool_core::binding::BindingError),
    /// No configuration of that name.
    #[error("no configuration {0:?}; known: {known}", known = configs::NAMES.join(", "))]
    UnknownConfig(String),
    /// No broken variant of that name.
    #[error("no variant {0:?}; known: {known}", known = Variant::NAMES.join(", "))]
    UnknownVariant(String),
}

/// A deliberately broken variant of the protocol: one of
/// `cnpool_controllers::sabotage`'s, which break the controllers for the
/// simulator. Each step of the model runs with the variant switched on
/// ([`Variant::sabotage`]), so the production code breaks itself: the
/// guarded write's patch, and the hooks the claim controller calls on what
/// it read and decided, which the model calls at the same places. Only
/// `store-from-claim` is the model's own copy: its hook takes the
/// controllers' context, which the model does not have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Acquire's patch loses its `test` operations.
    UnguardedAcquire,
    /// A loss seen in the cache is marked without the live read.
    LostWithoutLiveRead,
    /// A claim holding several pods keeps them all.
    AdoptKeepsExtras,
    /// The CN-store controller writes a pod's store from the claim that
    /// points at the pod, not from the pod.
    StoreFromClaim,
    /// An invalid claim is acted on, and its `additionalPodLabels` reach
    /// the pod's owner and phase keys.
    OwnerLabelsFromSpec,
}

impl Variant {
    /// Every variant's command-line name.
    pub const NAMES: [&'static str; 5] = [
        "unguarded-acquire",
        "lost-without-live-read",
        "adopt-keeps-extras",
        "store-from-claim",
        "owner-labels-from-spec",
    ];

    /// Every variant, in the order of [`Self::NAMES`].
    pub const ALL: [Variant; 5] = [
        Self::UnguardedAcquire,
        Self::LostWithoutLiveRead,
        Self::AdoptKeepsExtras,
        Self::StoreFromClaim,
        Self::OwnerLabelsFromSpec,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::UnguardedAcquire => Self::NAMES[0],
            Self::LostWithoutLiveRead => Self::NAMES[1],
            Self::AdoptKeepsExtras => Self::NAMES[2],
            Self::StoreFromClaim => Self::NAMES[3],
            Self::OwnerLabelsFromSpec => Self::NAMES[4],
        }
    }

    pub fn parse(name: &str) -> Result<Self, Error> {
        Self::ALL.into_iter().find(|variant| variant.name() == name).ok_or_else(|| Error::UnknownVariant(name.into()))
    }

    /// The controllers' variant this one is.
    pub fn sabotage(self) -> cnpool_controllers::sabotage::Variant {
        use cnpool_controllers::sabotage::Variant as Sabotage;
        match self {
            Self::UnguardedAcquire => Sabotage::UnguardedAcquire,
            Self::LostWithoutLiveRead => Sabotage::LostWithoutLiveRead,
            Self::AdoptKeepsExtras => Sabotage::AdoptKeepsExtras,
            Self::StoreFromClaim => Sabotage::StoreFromClaim,
            Self::OwnerLabelsFromSpec => Sabotage::OwnerLabelsFromSpec,
        }
    }
}
