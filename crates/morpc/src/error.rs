//! Transport errors, and how they become the registry's typed errors.

use cnpool_registry::RegistryError;

/// Why one exchange over a morpc connection failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// The TCP connection could not be opened.
    #[error("connecting to {address} failed: {detail}")]
    Connect { address: String, detail: String },
    /// The connection broke: EOF, reset, or a frame that does not decode.
    #[error("connection to {address} failed: {detail}")]
    Broken { address: String, detail: String },
    /// No answer before the caller's deadline.
    #[error("no answer from {address} before the deadline")]
    Timeout { address: String },
    /// The request could not be framed (it exceeds the frame limit).
    #[error("request to {address} cannot be sent: {detail}")]
    Encode { address: String, detail: String },
    /// The answer is not the message it should be.
    #[error("{address} sent a malformed {message}: {detail}")]
    Decode { address: String, message: &'static str, detail: String },
}

impl RpcError {
    /// The registry's error for this failure of `call`.
    pub fn into_registry(self, call: &'static str) -> RegistryError {
        match self {
            Self::Connect { address, detail } | Self::Broken { address, detail } => {
                RegistryError::Connection { call, address, detail }
            }
            Self::Timeout { .. } => RegistryError::Timeout { call },
            Self::Encode { address, detail } => {
                RegistryError::Protocol { call, detail: format!("request to {address} cannot be sent: {detail}") }
            }
            Self::Decode { address, message, detail } => {
                RegistryError::Protocol { call, detail: format!("{address} sent a malformed {message}: {detail}") }
            }
        }
    }
}
