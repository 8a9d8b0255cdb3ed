//! The one error type of the controllers.

use cnpool_core::binding::BindingError;
use cnpool_core::convert::ConvertError;
use cnpool_registry::RegistryError;

/// Why a reconcile failed. A failed guard (409, or 422 for a JSON patch
/// whose `test` failed) is not an error: it is a normal outcome that makes
/// the controller read again and decide anew.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed for another reason than a stale guard.
    #[error("{action} {object}: {source}")]
    Kube {
        action: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    /// HAKeeper refused or could not be reached.
    #[error("store registry: {0}")]
    Registry(#[from] RegistryError),
    /// An object lacks a field the API server always sets.
    #[error(transparent)]
    Convert(#[from] ConvertError),
    /// A pod's binding annotation cannot be read.
    #[error(transparent)]
    Binding(#[from] BindingError),
    /// The cutover record holds no readable time (crate::cutover).
    #[error("ConfigMap {namespace}/cnpool-cutover: {reason}; fix or delete it (docs/cutover.md)")]
    CutoverRecord { namespace: String, reason: String },
    /// A patch or object could not be encoded.
    #[error("encoding {what}: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    pub(crate) fn kube(action: &'static str, object: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube { action, object: object.into(), source }
    }

    /// A short, fixed label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Kube { .. } => "kube",
            Self::Registry(error) => error.metric_label(),
            Self::Convert(_) => "convert",
            Self::Binding(_) => "binding",
            Self::Encode { .. } => "encode",
            Self::CutoverRecord { .. } => "cutover_record",
        }
    }
}

/// Whether an API error says the write's guard no longer held: a conflict
/// (409), a failed JSON-patch `test` (422) or a failed precondition.
pub fn is_stale(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if matches!(status.code, 409 | 422))
}

/// Whether an API error says the object is gone.
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Whether an API error says the object already exists.
pub(crate) fn is_already_exists(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409 && status.reason == "AlreadyExists")
}
