//! morpc servers for the simulated world: a [`MemoryRegistry`] served as
//! HAKeeper (and its log set's discovery address), as a CN's query service
//! and as the TN lock service, over TCP, framed and answered as MatrixOne
//! does. Tests and `cnpool dev` point the real clients at them.
//!
//! How the registry's answers go on the wire:
//! - [`RegistryError::StoreNotFound`] → error 20101 with MatrixOne's message
//!   `internal error: CN [<uuid>] does not exist`;
//! - [`RegistryError::NoHaKeeper`] → 20417, [`RegistryError::Timeout`] →
//!   20429, [`RegistryError::Remote`] → its own code and message (lock and
//!   query services put these in the moerr `Error` bytes);
//! - [`RegistryError::Connection`] → the connection is closed unanswered;
//! - [`RegistryError::Protocol`] → an answer that routes (it has the request
//!   id) but does not decode.
//!
//! A request that does not decode, or a method these servers do not
//! implement, closes the connection.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};
use cnpool_registry::RegistryError;
use cnpool_registry::memory::MemoryRegistry;
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::task::{JoinHandle, JoinSet};

use crate::frame::{Frame, FrameCodec, FrameKind};
use crate::hakeeper::{labels_from_proto, labels_to_proto};
use crate::proto::{
    self, ClusterDetails, CountResponse, LockMethod, LockRequest, LockResponse, LogMethod, LogServiceRequest,
    LogServiceResponse, MoError, OkResponse, QueryMethod, QueryRequest, QueryResponse, RemainTxnResponse, ReplicaInfo,
    Session, ShardInfoQueryResult, ShowProcessListResponse, TnStore, error_code,
};

/// What a service does with one request.
enum Answer {
    Reply(Vec<u8>),
    HangUp,
}

trait Service: Send + Sync + 'static {
    /// Whether the service's messages carry the payload field (flags 0x07
    /// rather than 0x06).
    const PAYLOAD_FIELD: bool;

    fn handle(&self, body: Bytes) -> Answer;
}

/// A running server; dropping it stops it too.
#[derive(Debug)]
pub struct ServerHandle {
    local_addr: SocketAddr,
    task: Option<JoinHandle<()>>,
}

impl ServerHandle {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, closes every connection and frees the port, as a
    /// killed process would.
    pub async fn shutdown(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn serve<S: Service>(address: impl ToSocketAddrs, service: S) -> io::Result<ServerHandle> {
    let listener = TcpListener::bind(address).await?;
    let local_addr = listener.local_addr()?;
    let service = Arc::new(service);
    let task = tokio::spawn(async move {
        // Dropping the set (when this task is aborted) aborts every connection.
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        connections.spawn(serve_connection(stream, Arc::clone(&service)));
                    }
                    Err(error) => tracing::debug!(%error, "accepting a connection failed"),
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
    });
    Ok(ServerHandle { local_addr, task: Some(task) })
}

async fn serve_connection<S: Service>(mut stream: TcpStream, service: Arc<S>) {
    let codec = FrameCodec::default();
    let mut incoming = BytesMut::with_capacity(8 * 1024);
    loop {
        loop {
            let frame = match codec.decode(&mut incoming) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(_) => return,
            };
            // Answers carry the request's deadline and trace back, as MatrixOne's do.
            let headers = frame.headers.unwrap_or_default();
            let answer = match frame.kind {
                FrameKind::Pong => continue,
                FrameKind::Ping => match frame.control_id() {
                    Ok(id) => Frame::pong(id, headers),
                    Err(_) => return,
                },
                FrameKind::Message => match service.handle(frame.body) {
                    Answer::Reply(body) => Frame {
                        kind: FrameKind::Message,
                        checksum: true,
                        payload: S::PAYLOAD_FIELD.then(Bytes::new),
                        headers: Some(headers),
                        stream_sequence: None,
                        body: Bytes::from(body),
                    },
                    Answer::HangUp => return,
                },
            };
            let mut encoded = BytesMut::new();
            if codec.encode(&answer, &mut encoded).is_err() || stream.write_all(&encoded).await.is_err() {
                return;
            }
        }
        match stream.read_buf(&mut incoming).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// How a simulated log replica presents itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HaKeeperServerOptions {
    /// What GET_SHARD_INFO names as the replicas of log shard 0, in replica
    /// id order; empty means this server alone.
    pub replicas: Vec<String>,
    /// Whether this replica starts as the HAKeeper (see
    /// [`HaKeeperServer::set_hakeeper`]).
    pub is_hakeeper: bool,
    /// The TN lock service GET_CLUSTER_DETAILS reports, if any.
    pub tn_lock_service_address: Option<String>,
}

impl Default for HaKeeperServerOptions {
    /// The HAKeeper, alone in its log set, without a TN.
    fn default() -> Self {
        Self { replicas: Vec::new(), is_hakeeper: true, tn_lock_service_address: None }
    }
}

/// A log replica serving a [`MemoryRegistry`] as HAKeeper. Its own address
/// is also a discovery address.
#[derive(Debug)]
pub struct HaKeeperServer {
    handle: ServerHandle,
    is_hakeeper: Arc<AtomicBool>,
}

impl HaKeeperServer {
    /// The HAKeeper, alone in its log set, at `address` (port 0 picks one).
    pub async fn bind(address: impl ToSocketAddrs, registry: MemoryRegistry) -> io::Result<Self> {
        Self::bind_with(address, registry, HaKeeperServerOptions::default()).await
    }

    pub async fn bind_with(
        address: impl ToSocketAddrs,
        registry: MemoryRegistry,
        options: HaKeeperServerOptions,
    ) -> io::Result<Self> {
        let is_hakeeper = Arc::new(AtomicBool::new(options.is_hakeeper));
        let service = Arc::new(HaKeeperService {
            registry,
            replicas: options.replicas,
            is_hakeeper: Arc::clone(&is_hakeeper),
            tn_lock_service_address: options.tn_lock_service_address,
            own_address: OnceLock::new(),
        });
        let handle = serve(address, SharedService(Arc::clone(&service))).await?;
        let _ = service.own_address.set(handle.local_addr().to_string());
        Ok(Self { handle, is_hakeeper })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.handle.local_addr()
    }

    /// Makes this replica the HAKeeper or not; when not, HAKeeper calls
    /// answer 20417 and CHECK_HAKEEPER says false (a leader move).
    pub fn set_hakeeper(&self, is_hakeeper: bool) {
        self.is_hakeeper.store(is_hakeeper, Ordering::Relaxed);
    }

    /// Kills the server: connections close, the port is freed.
    pub async fn shutdown(self) {
        self.handle.shutdown().await;
    }
}

/// Lets a service be shared with the code that learns its bound address.
struct SharedService<S>(Arc<S>);

impl<S: Service> Service for SharedService<S> {
    const PAYLOAD_FIELD: bool = S::PAYLOAD_FIELD;

    fn handle(&self, body: Bytes) -> Answer {
        self.0.handle(body)
    }
}

struct HaKeeperService {
    registry: MemoryRegistry,
    replicas: Vec<String>,
    is_hakeeper: Arc<AtomicBool>,
    tn_lock_service_address: Option<String>,
    /// Set right after binding; names this server in GET_SHARD_INFO when
    /// no replicas were given.
    own_address: OnceLock<String>,
}

impl Service for HaKeeperService {
    const PAYLOAD_FIELD: bool = true;

    fn handle(&self, body: Bytes) -> Answer {
        let Ok(request) = LogServiceRequest::decode(body) else {
            return Answer::HangUp;
        };
        let mut response = LogServiceResponse {
            request_id: request.request_id,
            method: request.method,
            ..LogServiceResponse::default()
        };
        let Ok(method) = LogMethod::try_from(request.method) else {
            return Answer::HangUp;
        };
        let is_hakeeper = self.is_hakeeper.load(Ordering::Relaxed);
        let outcome = match method {
            LogMethod::TsoUpdate => return Answer::HangUp,
            LogMethod::CheckHakeeper => {
                response.is_hakeeper = is_hakeeper;
                Ok(())
            }
            LogMethod::GetShardInfo => self.shard_info(&request, &mut response),
            _ if !is_hakeeper => Err(RegistryError::NoHaKeeper { detail: "this replica is not the HAKeeper".into() }),
            LogMethod::GetClusterDetails => self.registry.list_stores_now().map(|stores| {
                response.cluster_details = Some(ClusterDetails {
                    tn_stores: self.tn_stores(),
                    cn_stores: stores.into_iter().map(cn_store_to_proto).collect(),
                });
            }),
            LogMethod::PatchCnStore => match &request.cn_state_label {
                Some(patch) => self.registry.patch_store_now(
                    &patch.uuid,
                    cnpool_registry::WorkState::from_code(patch.state),
                    &labels_from_proto(patch.labels.clone()),
                ),
                None => return Answer::HangUp,
            },
            LogMethod::UpdateCnLabel => match &request.cn_store_label {
                Some(update) => {
                    self.registry.replace_labels_now(&update.uuid, &labels_from_proto(update.labels.clone()))
                }
                None => return Answer::HangUp,
            },
            LogMethod::DeleteCnStore => match &request.delete_cn_store {
                Some(delete) => self.registry.delete_store_now(&delete.store_id),
                None => return Answer::HangUp,
            },
        };
        match outcome.map_err(wire_error) {
            Ok(()) => Answer::Reply(response.encode_to_vec()),
            Err(WireError::Code { code, message }) => {
                response.error_code = code;
                response.error_message = message;
                Answer::Reply(response.encode_to_vec())
            }
            Err(WireError::HangUp) => Answer::HangUp,
            Err(WireError::Malformed) => Answer::Reply(malformed_log_response(request.request_id)),
        }
    }
}

impl HaKeeperService {
    fn shard_info(&self, request: &LogServiceRequest, response: &mut LogServiceResponse) -> Result<(), RegistryError> {
        if request.log_request.shard_id != 0 {
            return Err(RegistryError::Remote {
                call: "GetShardInfo",
                code: error_code::SHARD_NOT_FOUND,
                message: format!("shard {} not found", request.log_request.shard_id),
            });
        }
        let replicas = if self.replicas.is_empty() {
            self.own_address.get().cloned().into_iter().collect()
        } else {
            self.replicas.clone()
        };
        response.shard_info = Some(ShardInfoQueryResult {
            shard_id: 0,
            replicas: (1u64..)
                .zip(replicas)
                .map(|(id, service_address)| (id, ReplicaInfo { uuid: format!("log-replica-{id}"), service_address }))
                .collect(),
            epoch: 1,
            leader_id: 1,
            term: 1,
        });
        Ok(())
    }

    fn tn_stores(&self) -> Vec<TnStore> {
        self.tn_lock_service_address
            .iter()
            .map(|address| TnStore {
                uuid: "tn-0".to_owned(),
                service_address: String::new(),
                lock_service_address: address.clone(),
                query_address: String::new(),
            })
            .collect()
    }
}

fn cn_store_to_proto(store: cnpool_registry::CnStore) -> proto::CnStore {
    proto::CnStore {
        uuid: store.uuid,
        service_address: store.service_address,
        sql_address: store.sql_address,
        lock_service_address: store.lock_service_address,
        state: 0,
        labels: labels_to_proto(&store.labels),
        work_state: store.work_state.code(),
        query_address: store.query_address,
    }
}

enum WireError {
    Code { code: u32, message: String },
    HangUp,
    Malformed,
}

fn wire_error(error: RegistryError) -> WireError {
    match error {
        RegistryError::StoreNotFound { uuid } => WireError::Code {
            code: error_code::STORE_NOT_FOUND,
            message: format!("internal error: CN [{uuid}] does not exist"),
        },
        RegistryError::NoHaKeeper { detail } => WireError::Code { code: error_code::NO_HAKEEPER, message: detail },
        RegistryError::Timeout { call } => {
            WireError::Code { code: error_code::TIMEOUT, message: format!("{call} timed out") }
        }
        RegistryError::Remote { code, message, .. } => WireError::Code { code, message },
        RegistryError::Connection { .. } => WireError::HangUp,
        RegistryError::Protocol { .. } => WireError::Malformed,
    }
}

/// A log service answer that names its request (so it reaches its caller)
/// but does not decode: field 4, the error message, is not UTF-8.
fn malformed_log_response(request_id: u64) -> Vec<u8> {
    let mut body = proto::RequestId { request_id }.encode_to_vec();
    body.extend_from_slice(&[0x22, 0x02, 0xff, 0xfe]);
    body
}

/// The moerr `Error` bytes a lock or query answer carries.
fn error_bytes(error: WireError) -> Result<Bytes, Answer> {
    match error {
        WireError::Code { code, message } => {
            Ok(Bytes::from(MoError { code, mysql_code: 0, message, sql_state: String::new() }.encode_to_vec()))
        }
        WireError::HangUp => Err(Answer::HangUp),
        // Not a moerr.Error: field 1 with wire type 7, which does not exist.
        WireError::Malformed => Ok(Bytes::from_static(&[0x0f])),
    }
}

/// Serves the query service of the CN `store_uuid` from `registry`.
///
/// ShowProcessList answers one internal `sys` session plus one proxied
/// tenant session per session of the store's workload, and takes the
/// registry's Workload faults; GetPipelineInfo and GetReplicaCount read the
/// workload without faults, so that one injected fault fails exactly one
/// `workload` call. A store that is gone closes the connection.
pub async fn bind_query_service(
    address: impl ToSocketAddrs,
    registry: MemoryRegistry,
    store_uuid: impl Into<String>,
) -> io::Result<ServerHandle> {
    serve(address, QueryService { registry, store_uuid: store_uuid.into() }).await
}

struct QueryService {
    registry: MemoryRegistry,
    store_uuid: String,
}

impl Service for QueryService {
    const PAYLOAD_FIELD: bool = false;

    fn handle(&self, body: Bytes) -> Answer {
        let Ok(request) = QueryRequest::decode(body) else {
            return Answer::HangUp;
        };
        let mut response = QueryResponse {
            request_id: request.request_id,
            cmd_method: request.cmd_method,
            ..QueryResponse::default()
        };
        let uuid = self.store_uuid.as_str();
        let gone = || RegistryError::Connection { call: "query", address: String::new(), detail: String::new() };
        let outcome = match QueryMethod::try_from(request.cmd_method) {
            Ok(QueryMethod::ShowProcessList) => self.registry.workload_now(uuid, "").map(|workload| {
                let internal = Session { account: "sys".to_owned(), from_proxy: false };
                let proxied = Session { account: "tenant".to_owned(), from_proxy: true };
                let proxied = std::iter::repeat_n(proxied, usize::try_from(workload.sessions).unwrap_or(usize::MAX));
                response.show_process_list =
                    Some(ShowProcessListResponse { sessions: std::iter::once(internal).chain(proxied).collect() });
            }),
            Ok(QueryMethod::GetPipelineInfo) => self.registry.store_workload(uuid).ok_or_else(gone).map(|workload| {
                response.get_pipeline_info = Some(CountResponse { count: saturating_i64(workload.pipelines) });
            }),
            Ok(QueryMethod::GetReplicaCount) => self.registry.store_workload(uuid).ok_or_else(gone).map(|workload| {
                response.get_replica_count = CountResponse { count: saturating_i64(workload.replicas) };
            }),
            Ok(QueryMethod::Query) | Err(_) => return Answer::HangUp,
        };
        if let Err(error) = outcome {
            match error_bytes(wire_error(error)) {
                Ok(bytes) => response.error = bytes,
                Err(answer) => return answer,
            }
        }
        Answer::Reply(response.encode_to_vec())
    }
}

fn saturating_i64(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Serves the TN lock service from `registry` (see
/// [`MemoryRegistry::set_restart_service`] and its siblings).
pub async fn bind_lock_service(address: impl ToSocketAddrs, registry: MemoryRegistry) -> io::Result<ServerHandle> {
    serve(address, LockService { registry }).await
}

struct LockService {
    registry: MemoryRegistry,
}

impl Service for LockService {
    const PAYLOAD_FIELD: bool = false;

    fn handle(&self, body: Bytes) -> Answer {
        let Ok(request) = LockRequest::decode(body) else {
            return Answer::HangUp;
        };
        let mut response =
            LockResponse { request_id: request.request_id, method: request.method, ..LockResponse::default() };
        let service_id = |argument: &Option<proto::ServiceRequest>| {
            argument.as_ref().map(|argument| argument.service_id.clone()).unwrap_or_default()
        };
        let outcome = match LockMethod::try_from(request.method) {
            Ok(LockMethod::SetRestartService) => {
                self.registry.set_restart_service(&service_id(&request.set_restart_service)).map(|ok| {
                    response.set_restart_service = Some(OkResponse { ok });
                })
            }
            Ok(LockMethod::RemainTxnInService) => {
                self.registry.remain_txn_in_service(&service_id(&request.remain_txn_in_service)).map(|remain_txn| {
                    response.remain_txn_in_service = Some(RemainTxnResponse { remain_txn });
                })
            }
            Ok(LockMethod::CanRestartService) => {
                self.registry.can_restart_service(&service_id(&request.can_restart_service)).map(|ok| {
                    response.can_restart_service = Some(OkResponse { ok });
                })
            }
            Ok(LockMethod::Lock) | Err(_) => return Answer::HangUp,
        };
        if let Err(error) = outcome {
            match error_bytes(wire_error(error)) {
                Ok(bytes) => response.error = bytes,
                Err(answer) => return answer,
            }
        }
        Answer::Reply(response.encode_to_vec())
    }
}
