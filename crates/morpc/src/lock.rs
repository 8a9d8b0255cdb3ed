//! The TN lock service client: the calls that hand a CN's locks over before
//! it restarts (MatrixOne 1.2 and later).

use cnpool_registry::RegistryError;
use tokio::time::Instant;

use crate::conn::{ConnectionOptions, ConnectionPool};
use crate::metrics::MorpcMetrics;
use crate::proto::{LockMethod, LockRequest, LockResponse, ServiceRequest};

/// A client of the lock services of a cluster's TNs.
#[derive(Debug)]
pub struct LockClient {
    pool: ConnectionPool,
    calls: MorpcMetrics,
}

impl LockClient {
    pub fn new(options: ConnectionOptions) -> Self {
        Self::observed(options, MorpcMetrics::default())
    }

    /// A client that counts its calls in `calls`.
    pub fn observed(options: ConnectionOptions, calls: MorpcMetrics) -> Self {
        Self { pool: ConnectionPool::new(options), calls }
    }

    /// SetRestartService: the lock service at `address` stops binding new
    /// lock tables to the CN `service_id` and moves its tables away.
    pub async fn set_restart_service(
        &self,
        address: &str,
        service_id: &str,
        deadline: Instant,
    ) -> Result<bool, RegistryError> {
        const CALL: &str = "SetRestartService";
        let request = LockRequest {
            set_restart_service: Some(ServiceRequest { service_id: service_id.to_owned() }),
            ..request(LockMethod::SetRestartService)
        };
        let response = self.call(CALL, address, request, deadline).await?;
        response.set_restart_service.map(|answer| answer.ok).ok_or_else(|| missing(CALL))
    }

    /// RemainTxnInService: transactions of the CN that still hold locks.
    pub async fn remain_txn_in_service(
        &self,
        address: &str,
        service_id: &str,
        deadline: Instant,
    ) -> Result<i32, RegistryError> {
        const CALL: &str = "RemainTxnInService";
        let request = LockRequest {
            remain_txn_in_service: Some(ServiceRequest { service_id: service_id.to_owned() }),
            ..request(LockMethod::RemainTxnInService)
        };
        let response = self.call(CALL, address, request, deadline).await?;
        response.remain_txn_in_service.map(|answer| answer.remain_txn).ok_or_else(|| missing(CALL))
    }

    /// CanRestartService: whether the CN's locks are all handed over.
    pub async fn can_restart_service(
        &self,
        address: &str,
        service_id: &str,
        deadline: Instant,
    ) -> Result<bool, RegistryError> {
        const CALL: &str = "CanRestartService";
        let request = LockRequest {
            can_restart_service: Some(ServiceRequest { service_id: service_id.to_owned() }),
            ..request(LockMethod::CanRestartService)
        };
        let response = self.call(CALL, address, request, deadline).await?;
        response.can_restart_service.map(|answer| answer.ok).ok_or_else(|| missing(CALL))
    }

    async fn call(
        &self,
        call: &'static str,
        address: &str,
        request: LockRequest,
        deadline: Instant,
    ) -> Result<LockResponse, RegistryError> {
        crate::service::call(&self.pool, &self.calls, call, address, request, deadline).await
    }
}

fn request(method: LockMethod) -> LockRequest {
    LockRequest { method: method as i32, ..LockRequest::default() }
}

fn missing(call: &'static str) -> RegistryError {
    RegistryError::Protocol { call, detail: "the answer carries no result".to_owned() }
}
