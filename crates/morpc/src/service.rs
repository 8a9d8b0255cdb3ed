//! What the TN lock service and the CN query service have in common: a
//! request echoes its id, and an answer reports failure as a MatrixOne error
//! carried in the answer itself.

use cnpool_registry::RegistryError;
use prost::Message;
use tokio::time::Instant;

use crate::conn::ConnectionPool;
use crate::error::RpcError;
use crate::metrics::MorpcMetrics;
use crate::proto::{LockRequest, LockResponse, MoError, QueryRequest, QueryResponse};

/// A request to one of those services.
pub(crate) trait ServiceRequest: Message + Sized {
    type Answer: Message + Default;
    /// What the answer is called in decoding errors.
    const ANSWER: &'static str;
    fn with_request_id(self, id: u64) -> Self;
    fn error(answer: &Self::Answer) -> &[u8];
}

impl ServiceRequest for LockRequest {
    type Answer = LockResponse;
    const ANSWER: &'static str = "lock service response";
    fn with_request_id(self, request_id: u64) -> Self {
        Self { request_id, ..self }
    }
    fn error(answer: &LockResponse) -> &[u8] {
        &answer.error
    }
}

impl ServiceRequest for QueryRequest {
    type Answer = QueryResponse;
    const ANSWER: &'static str = "query service response";
    fn with_request_id(self, request_id: u64) -> Self {
        Self { request_id, ..self }
    }
    fn error(answer: &QueryResponse) -> &[u8] {
        &answer.error
    }
}

/// Sends `request` to `address` and decodes the answer; an error in the
/// answer is an error, never an empty result. Counted in `calls`.
pub(crate) async fn call<R: ServiceRequest>(
    pool: &ConnectionPool,
    calls: &MorpcMetrics,
    call: &'static str,
    address: &str,
    request: R,
    deadline: Instant,
) -> Result<R::Answer, RegistryError> {
    let result = answer(pool, call, address, request, deadline).await;
    calls.answered(call, &result);
    result
}

async fn answer<R: ServiceRequest>(
    pool: &ConnectionPool,
    call: &'static str,
    address: &str,
    request: R,
    deadline: Instant,
) -> Result<R::Answer, RegistryError> {
    let body = pool
        .call(address, deadline, |id| request.with_request_id(id).encode_to_vec())
        .await
        .map_err(|error| error.into_registry(call))?;
    let answer = R::Answer::decode(body).map_err(|error| {
        RpcError::Decode { address: address.to_owned(), message: R::ANSWER, detail: error.to_string() }
            .into_registry(call)
    })?;
    match remote_error(call, R::error(&answer)) {
        Some(error) => Err(error),
        None => Ok(answer),
    }
}

/// The MatrixOne error an answer carries, if any.
fn remote_error(call: &'static str, error: &[u8]) -> Option<RegistryError> {
    if error.is_empty() {
        return None;
    }
    Some(match MoError::decode(error) {
        Ok(error) => RegistryError::Remote { call, code: error.code, message: error.message },
        Err(decode) => RegistryError::Protocol { call, detail: format!("undecodable error in the answer: {decode}") },
    })
}
