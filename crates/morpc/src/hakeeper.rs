//! The HAKeeper client: finds HAKeeper through the log set's discovery
//! address and keeps calling it through restarts and leader moves.
//!
//! Discovery asks the discovery address for log shard 0 (GET_SHARD_INFO),
//! then asks each replica in turn whether it is the HAKeeper
//! (CHECK_HAKEEPER) and keeps the connection to the first that is. A call
//! that meets "no HAKeeper" (20417), a broken connection or a malformed
//! answer drops the connection and tries again, rediscovering, with a
//! growing pause, until the caller's deadline. Every such state change is
//! logged once, never each retry.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cnpool_registry::{CnStore, RegistryError, StoreLabels, WorkState};
use prost::Message as _;
use tokio::time::{Instant, sleep, timeout_at};

use crate::conn::{Connection, ConnectionOptions};
use crate::error::RpcError;
use crate::metrics::MorpcMetrics;
use crate::proto::{
    self, CnStateLabel, CnStoreLabel, DeleteCnStore, LabelList, LabelMap, LogMethod, LogRequest, LogServiceRequest,
    LogServiceResponse, error_code,
};

/// Where HAKeeper is and how patiently to look for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HaKeeperOptions {
    /// `host:port` of the log set's discovery service (port 32001).
    pub discovery_address: String,
    /// Bound on each discovery step (GET_SHARD_INFO, each CHECK_HAKEEPER).
    pub discovery_timeout: Duration,
    /// First pause between attempts; it doubles up to `max_retry_backoff`.
    pub retry_backoff: Duration,
    pub max_retry_backoff: Duration,
    pub connection: ConnectionOptions,
}

impl HaKeeperOptions {
    /// MatrixOne's own timings: 1 s per discovery step and per connect.
    pub fn new(discovery_address: impl Into<String>) -> Self {
        Self {
            discovery_address: discovery_address.into(),
            discovery_timeout: Duration::from_secs(1),
            retry_backoff: Duration::from_millis(50),
            max_retry_backoff: Duration::from_secs(1),
            connection: ConnectionOptions::log_service(),
        }
    }
}

/// What GET_CLUSTER_DETAILS tells cnpool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterView {
    pub cn_stores: Vec<CnStore>,
    /// Lock service addresses of the TN stores (lock migration goes there).
    pub lock_service_addresses: Vec<String>,
}

/// How one attempt failed.
enum Failure {
    /// Try again, after rediscovery if the connection was dropped.
    Retry(RegistryError),
    /// HAKeeper answered; trying again would get the same answer.
    Final(RegistryError),
}

/// A client of one MatrixOne cluster's HAKeeper.
#[derive(Debug)]
pub struct HaKeeperClient {
    options: HaKeeperOptions,
    leader: tokio::sync::Mutex<Option<Arc<Connection>>>,
    /// Whether "HAKeeper not found" was logged since the last connection.
    unreachable_logged: AtomicBool,
    calls: MorpcMetrics,
}

impl HaKeeperClient {
    pub fn new(options: HaKeeperOptions) -> Self {
        Self::observed(options, MorpcMetrics::default())
    }

    /// A client that counts its calls in `calls`.
    pub fn observed(options: HaKeeperOptions, calls: MorpcMetrics) -> Self {
        Self { options, leader: tokio::sync::Mutex::new(None), unreachable_logged: AtomicBool::new(false), calls }
    }

    /// The address of the HAKeeper currently connected, if any.
    pub async fn leader_address(&self) -> Option<String> {
        let leader = self.leader.lock().await;
        leader.as_ref().filter(|connection| !connection.is_closed()).map(|connection| connection.address().to_owned())
    }

    /// GetClusterDetails: the CN stores and the TN lock services.
    pub async fn cluster(&self, deadline: Instant) -> Result<ClusterView, RegistryError> {
        const CALL: &str = "GetClusterDetails";
        let response = self.request(CALL, request(LogMethod::GetClusterDetails), deadline).await?;
        let details = response.cluster_details.ok_or_else(|| RegistryError::Protocol {
            call: CALL,
            detail: "the answer carries no cluster details".to_owned(),
        })?;
        Ok(ClusterView {
            cn_stores: details.cn_stores.into_iter().map(cn_store_from_proto).collect(),
            lock_service_addresses: details
                .tn_stores
                .into_iter()
                .map(|tn| tn.lock_service_address)
                .filter(|address| !address.is_empty())
                .collect(),
        })
    }

    /// PatchCNStore: sets the work state, and the labels when not empty.
    pub async fn patch_cn_store(
        &self,
        uuid: &str,
        state: WorkState,
        labels: &StoreLabels,
        deadline: Instant,
    ) -> Result<(), RegistryError> {
        let request = LogServiceRequest {
            cn_state_label: Some(CnStateLabel {
                uuid: uuid.to_owned(),
                state: state.code(),
                labels: labels_to_proto(labels),
            }),
            ..request(LogMethod::PatchCnStore)
        };
        self.request("PatchCNStore", request, deadline).await.map(drop)
    }

    /// UpdateCNLabel: replaces the whole label map; an empty map clears it.
    pub async fn update_cn_label(
        &self,
        uuid: &str,
        labels: &StoreLabels,
        deadline: Instant,
    ) -> Result<(), RegistryError> {
        let request = LogServiceRequest {
            cn_store_label: Some(CnStoreLabel { uuid: uuid.to_owned(), operation: 0, labels: labels_to_proto(labels) }),
            ..request(LogMethod::UpdateCnLabel)
        };
        self.request("UpdateCNLabel", request, deadline).await.map(drop)
    }

    /// DeleteCNStore. HAKeeper answers OK for an unknown store.
    pub async fn delete_cn_store(&self, uuid: &str, deadline: Instant) -> Result<(), RegistryError> {
        let request = LogServiceRequest {
            delete_cn_store: Some(DeleteCnStore { store_id: uuid.to_owned() }),
            ..request(LogMethod::DeleteCnStore)
        };
        self.request("DeleteCNStore", request, deadline).await.map(drop)
    }

    async fn request(
        &self,
        call: &'static str,
        request: LogServiceRequest,
        deadline: Instant,
    ) -> Result<LogServiceResponse, RegistryError> {
        let result = self.retried(call, request, deadline).await;
        self.calls.answered(call, &result);
        result
    }

    async fn retried(
        &self,
        call: &'static str,
        request: LogServiceRequest,
        deadline: Instant,
    ) -> Result<LogServiceResponse, RegistryError> {
        let mut backoff = self.options.retry_backoff;
        loop {
            let error = match self.attempt(call, &request, deadline).await {
                Ok(response) => return Ok(response),
                Err(Failure::Final(error)) => return Err(error),
                Err(Failure::Retry(error)) => error,
            };
            if Instant::now() + backoff >= deadline {
                return Err(error);
            }
            sleep(backoff).await;
            backoff = (backoff * 2).min(self.options.max_retry_backoff);
        }
    }

    async fn attempt(
        &self,
        call: &'static str,
        request: &LogServiceRequest,
        deadline: Instant,
    ) -> Result<LogServiceResponse, Failure> {
        let connection = self.leader(deadline).await.map_err(Failure::Retry)?;
        let answer = connection
            .call(deadline, |id| LogServiceRequest { request_id: id, ..request.clone() }.encode_to_vec())
            .await;
        let response = match answer.and_then(|body| decode_response(connection.address(), body)) {
            Ok(response) => response,
            Err(error) => {
                self.drop_leader(&connection, &error.to_string(), deadline).await;
                return Err(Failure::Retry(error.into_registry(call)));
            }
        };
        match response.error_code {
            error_code::OK => Ok(response),
            error_code::NO_HAKEEPER => {
                self.drop_leader(&connection, "it is no longer the HAKeeper", deadline).await;
                Err(Failure::Retry(RegistryError::NoHaKeeper {
                    detail: format!(
                        "{} answered {}: {}",
                        connection.address(),
                        response.error_code,
                        response.error_message
                    ),
                }))
            }
            error_code::TIMEOUT => Err(Failure::Retry(remote(call, response))),
            error_code::STORE_NOT_FOUND => {
                Err(Failure::Final(RegistryError::StoreNotFound { uuid: store_of(request).to_owned() }))
            }
            _ => Err(Failure::Final(remote(call, response))),
        }
    }

    /// The connection to HAKeeper, discovering it when there is none.
    async fn leader(&self, deadline: Instant) -> Result<Arc<Connection>, RegistryError> {
        // Another caller may be discovering: wait for it, not past the deadline.
        let mut leader = timeout_at(deadline, self.leader.lock()).await.map_err(|_| RegistryError::NoHaKeeper {
            detail: "HAKeeper discovery did not finish before the deadline".to_owned(),
        })?;
        if let Some(connection) = leader.as_ref() {
            if !connection.is_closed() {
                return Ok(Arc::clone(connection));
            }
            tracing::warn!(address = connection.address(), "HAKeeper connection closed; rediscovering");
            *leader = None;
        }
        match self.discover(deadline).await {
            Ok(connection) => {
                let connection = Arc::new(connection);
                tracing::info!(address = connection.address(), "connected to HAKeeper");
                self.unreachable_logged.store(false, Ordering::Relaxed);
                *leader = Some(Arc::clone(&connection));
                Ok(connection)
            }
            Err(error) => {
                if !self.unreachable_logged.swap(true, Ordering::Relaxed) {
                    tracing::warn!(discovery = %self.options.discovery_address, %error, "HAKeeper not found; retrying");
                }
                Err(error)
            }
        }
    }

    /// Forgets `connection` if it is still the leader's. Waits for the
    /// leader slot no longer than `deadline`: past it, the call is over.
    async fn drop_leader(&self, connection: &Arc<Connection>, reason: &str, deadline: Instant) {
        let Ok(mut leader) = timeout_at(deadline, self.leader.lock()).await else {
            return;
        };
        if leader.as_ref().is_some_and(|current| Arc::ptr_eq(current, connection)) {
            tracing::warn!(address = connection.address(), reason, "dropping the HAKeeper connection; rediscovering");
            *leader = None;
        }
    }

    async fn discover(&self, deadline: Instant) -> Result<Connection, RegistryError> {
        let not_found = |detail: String| RegistryError::NoHaKeeper { detail };
        let discovery_address = &self.options.discovery_address;
        let step_deadline = || deadline.min(Instant::now() + self.options.discovery_timeout);

        let replicas = {
            let step = step_deadline();
            let discovery = Connection::connect(discovery_address, &self.options.connection, step)
                .await
                .map_err(|error| not_found(error.to_string()))?;
            let shard_info = LogServiceRequest {
                log_request: LogRequest { shard_id: 0, ..LogRequest::default() },
                ..request(LogMethod::GetShardInfo)
            };
            let response = discovery
                .call(step, |id| LogServiceRequest { request_id: id, ..shard_info }.encode_to_vec())
                .await
                .and_then(|body| decode_response(discovery_address, body))
                .map_err(|error| not_found(error.to_string()))?;
            if response.error_code != error_code::OK {
                return Err(not_found(format!(
                    "GET_SHARD_INFO at {discovery_address} answered {}: {}",
                    response.error_code, response.error_message
                )));
            }
            // Replica ids order the replicas, so every client asks them in the same order.
            let replicas: Vec<String> = response
                .shard_info
                .map(|info| info.replicas.into_values().map(|replica| replica.service_address).collect())
                .unwrap_or_default();
            if replicas.is_empty() {
                return Err(not_found(format!("{discovery_address} knows no replica of log shard 0")));
            }
            replicas
        };

        let mut misses = Vec::with_capacity(replicas.len());
        for address in &replicas {
            match self.check_hakeeper(address, step_deadline()).await {
                Ok(Some(connection)) => return Ok(connection),
                Ok(None) => misses.push(format!("{address} is not the HAKeeper")),
                Err(error) => misses.push(error.to_string()),
            }
        }
        Err(not_found(format!("no replica of log shard 0 is the HAKeeper: {}", misses.join("; "))))
    }

    /// The connection to `address` if it is the HAKeeper.
    async fn check_hakeeper(&self, address: &str, deadline: Instant) -> Result<Option<Connection>, RpcError> {
        let connection = Connection::connect(address, &self.options.connection, deadline).await?;
        let check = request(LogMethod::CheckHakeeper);
        let response = connection
            .call(deadline, |id| LogServiceRequest { request_id: id, ..check }.encode_to_vec())
            .await
            .and_then(|body| decode_response(address, body))?;
        Ok((response.error_code == error_code::OK && response.is_hakeeper).then_some(connection))
    }
}

fn request(method: LogMethod) -> LogServiceRequest {
    LogServiceRequest { method: method as i32, ..LogServiceRequest::default() }
}

fn decode_response(address: &str, body: bytes::Bytes) -> Result<LogServiceResponse, RpcError> {
    LogServiceResponse::decode(body).map_err(|error| RpcError::Decode {
        address: address.to_owned(),
        message: "log service response",
        detail: error.to_string(),
    })
}

fn remote(call: &'static str, response: LogServiceResponse) -> RegistryError {
    RegistryError::Remote { call, code: response.error_code, message: response.error_message }
}

/// The store a write names, for the error that says it does not exist.
fn store_of(request: &LogServiceRequest) -> &str {
    if let Some(label) = &request.cn_state_label {
        &label.uuid
    } else if let Some(label) = &request.cn_store_label {
        &label.uuid
    } else if let Some(delete) = &request.delete_cn_store {
        &delete.store_id
    } else {
        ""
    }
}

pub(crate) fn labels_to_proto(labels: &StoreLabels) -> LabelMap {
    labels.iter().map(|(key, values)| (key.clone(), LabelList { labels: values.clone() })).collect()
}

pub(crate) fn labels_from_proto(labels: LabelMap) -> StoreLabels {
    labels.into_iter().map(|(key, values)| (key, values.labels)).collect()
}

pub(crate) fn cn_store_from_proto(store: proto::CnStore) -> CnStore {
    CnStore {
        uuid: store.uuid,
        service_address: store.service_address,
        sql_address: store.sql_address,
        lock_service_address: store.lock_service_address,
        query_address: store.query_address,
        work_state: WorkState::from_code(store.work_state),
        labels: labels_from_proto(store.labels),
    }
}
