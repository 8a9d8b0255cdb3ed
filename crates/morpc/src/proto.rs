//! The protobuf messages cnpool exchanges with MatrixOne, written for this
//! project from the field numbers MatrixOne uses (reference
//! hakeeper-protocol.md). Only the fields cnpool reads or writes are
//! declared; protobuf skips the others on decoding.
//!
//! MatrixOne generates its Go code with gogoproto, where a field marked
//! non-nullable is always encoded, even when empty. Where the reference's
//! calls meet such a field it is `required` here, so that cnpool sends the
//! same bytes as MatrixOne's own clients: `LogRequest` in every log service
//! request, `LogResponse` in every log service response, and
//! `GetReplicaCount` in every query request and response. Newer MatrixOne
//! versions add further non-nullable request fields; a server reads their
//! absence as the empty message, so cnpool leaves them out.

use std::collections::BTreeMap;

/// Methods of MatrixOne's log service (and HAKeeper) that cnpool calls.
///
/// Each enum here starts with MatrixOne's zero value: protobuf leaves a
/// field at its enum's default off the wire, and that default must be 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum LogMethod {
    TsoUpdate = 0,
    CheckHakeeper = 10,
    GetClusterDetails = 11,
    GetShardInfo = 12,
    UpdateCnLabel = 15,
    PatchCnStore = 17,
    DeleteCnStore = 18,
}

/// Error codes of MatrixOne (moerr) that cnpool tells apart.
pub mod error_code {
    /// OK.
    pub const OK: u32 = 0;
    /// The CN store does not exist.
    pub const STORE_NOT_FOUND: u32 = 20101;
    /// The replica asked is not the HAKeeper.
    pub const NO_HAKEEPER: u32 = 20417;
    /// The server gave up waiting.
    pub const TIMEOUT: u32 = 20429;
    /// The log shard is unknown.
    pub const SHARD_NOT_FOUND: u32 = 20437;
}

/// The label values of one key (metadata.LabelList).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct LabelList {
    #[prost(string, repeated, tag = "1")]
    pub labels: Vec<String>,
}

/// A map of CN labels as HAKeeper carries it.
pub type LabelMap = BTreeMap<String, LabelList>;

#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct LogRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(uint64, tag = "2")]
    pub shard_id: u64,
}

#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct LogResponse {
    #[prost(uint64, tag = "1")]
    pub shard_id: u64,
}

/// UpdateCNLabel: replace a CN's whole label map.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct CnStoreLabel {
    #[prost(string, tag = "1")]
    pub uuid: String,
    /// 0 set, 1 delete; MatrixOne ignores it and replaces the map.
    #[prost(int32, tag = "2")]
    pub operation: i32,
    #[prost(btree_map = "string, message", tag = "3")]
    pub labels: LabelMap,
}

/// PatchCNStore: set a CN's work state, and its labels when not empty.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct CnStateLabel {
    #[prost(string, tag = "1")]
    pub uuid: String,
    #[prost(int32, tag = "2")]
    pub state: i32,
    #[prost(btree_map = "string, message", tag = "3")]
    pub labels: LabelMap,
}

#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct DeleteCnStore {
    #[prost(string, tag = "1")]
    pub store_id: String,
}

/// logservice.Request.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct LogServiceRequest {
    #[prost(uint64, tag = "1")]
    pub request_id: u64,
    #[prost(enumeration = "LogMethod", tag = "2")]
    pub method: i32,
    #[prost(message, required, tag = "3")]
    pub log_request: LogRequest,
    #[prost(message, optional, tag = "9")]
    pub cn_store_label: Option<CnStoreLabel>,
    #[prost(message, optional, tag = "11")]
    pub cn_state_label: Option<CnStateLabel>,
    #[prost(message, optional, tag = "12")]
    pub delete_cn_store: Option<DeleteCnStore>,
}

/// logservice.Response.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct LogServiceResponse {
    #[prost(uint64, tag = "1")]
    pub request_id: u64,
    #[prost(enumeration = "LogMethod", tag = "2")]
    pub method: i32,
    #[prost(uint32, tag = "3")]
    pub error_code: u32,
    #[prost(string, tag = "4")]
    pub error_message: String,
    #[prost(bool, tag = "5")]
    pub is_hakeeper: bool,
    #[prost(message, required, tag = "6")]
    pub log_response: LogResponse,
    #[prost(message, optional, tag = "9")]
    pub cluster_details: Option<ClusterDetails>,
    #[prost(message, optional, tag = "10")]
    pub shard_info: Option<ShardInfoQueryResult>,
}

#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ClusterDetails {
    #[prost(message, repeated, tag = "1")]
    pub tn_stores: Vec<TnStore>,
    #[prost(message, repeated, tag = "2")]
    pub cn_stores: Vec<CnStore>,
}

#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct CnStore {
    #[prost(string, tag = "1")]
    pub uuid: String,
    #[prost(string, tag = "2")]
    pub service_address: String,
    #[prost(string, tag = "3")]
    pub sql_address: String,
    #[prost(string, tag = "4")]
    pub lock_service_address: String,
    /// 0 normal, 1 timed out (no heartbeat for a while).
    #[prost(int32, tag = "8")]
    pub state: i32,
    #[prost(btree_map = "string, message", tag = "9")]
    pub labels: LabelMap,
    #[prost(int32, tag = "10")]
    pub work_state: i32,
    #[prost(string, tag = "11")]
    pub query_address: String,
}

#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct TnStore {
    #[prost(string, tag = "1")]
    pub uuid: String,
    #[prost(string, tag = "2")]
    pub service_address: String,
    #[prost(string, tag = "7")]
    pub lock_service_address: String,
    #[prost(string, tag = "10")]
    pub query_address: String,
}

#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ShardInfoQueryResult {
    #[prost(uint64, tag = "1")]
    pub shard_id: u64,
    /// Replica id → replica.
    #[prost(btree_map = "uint64, message", tag = "2")]
    pub replicas: BTreeMap<u64, ReplicaInfo>,
    #[prost(uint64, tag = "3")]
    pub epoch: u64,
    #[prost(uint64, tag = "4")]
    pub leader_id: u64,
    #[prost(uint64, tag = "5")]
    pub term: u64,
}

#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ReplicaInfo {
    #[prost(string, tag = "1")]
    pub uuid: String,
    #[prost(string, tag = "2")]
    pub service_address: String,
}

/// Methods of the TN's lock service that cnpool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum LockMethod {
    Lock = 0,
    SetRestartService = 12,
    RemainTxnInService = 13,
    CanRestartService = 14,
}

/// The `{ServiceID}` argument of the lock migration calls.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ServiceRequest {
    #[prost(string, tag = "1")]
    pub service_id: String,
}

#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct OkResponse {
    #[prost(bool, tag = "1")]
    pub ok: bool,
}

#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct RemainTxnResponse {
    #[prost(int32, tag = "1")]
    pub remain_txn: i32,
}

/// lock.Request.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct LockRequest {
    #[prost(uint64, tag = "1")]
    pub request_id: u64,
    #[prost(enumeration = "LockMethod", tag = "3")]
    pub method: i32,
    #[prost(message, optional, tag = "14")]
    pub set_restart_service: Option<ServiceRequest>,
    #[prost(message, optional, tag = "15")]
    pub can_restart_service: Option<ServiceRequest>,
    #[prost(message, optional, tag = "16")]
    pub remain_txn_in_service: Option<ServiceRequest>,
}

/// lock.Response.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct LockResponse {
    #[prost(uint64, tag = "1")]
    pub request_id: u64,
    #[prost(enumeration = "LockMethod", tag = "2")]
    pub method: i32,
    /// A marshalled [`MoError`] when the call failed.
    #[prost(bytes = "bytes", tag = "3")]
    pub error: bytes::Bytes,
    #[prost(message, optional, tag = "15")]
    pub set_restart_service: Option<OkResponse>,
    #[prost(message, optional, tag = "16")]
    pub can_restart_service: Option<OkResponse>,
    #[prost(message, optional, tag = "17")]
    pub remain_txn_in_service: Option<RemainTxnResponse>,
}

/// Methods of the CN query service that cnpool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum QueryMethod {
    Query = 0,
    ShowProcessList = 1,
    GetPipelineInfo = 19,
    GetReplicaCount = 24,
}

#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ShowProcessListRequest {
    #[prost(string, tag = "1")]
    pub tenant: String,
    #[prost(bool, tag = "2")]
    pub sys_tenant: bool,
}

/// An empty argument (GetPipelineInfoRequest, and GetReplicaCountRequest,
/// whose `CN` field the Go operator leaves empty too).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Empty {}

/// query.Request.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct QueryRequest {
    #[prost(uint64, tag = "1")]
    pub request_id: u64,
    #[prost(enumeration = "QueryMethod", tag = "2")]
    pub cmd_method: i32,
    #[prost(message, optional, tag = "4")]
    pub show_process_list: Option<ShowProcessListRequest>,
    /// Must be present for GetPipelineInfo, even though empty.
    #[prost(message, optional, tag = "22")]
    pub get_pipeline_info: Option<Empty>,
    #[prost(message, required, tag = "27")]
    pub get_replica_count: Empty,
}

/// A session on a CN (status.Session), as far as draining cares.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct Session {
    #[prost(string, tag = "4")]
    pub account: String,
    #[prost(bool, tag = "19")]
    pub from_proxy: bool,
}

#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ShowProcessListResponse {
    #[prost(message, repeated, tag = "1")]
    pub sessions: Vec<Session>,
}

/// GetPipelineInfoResponse and GetReplicaCountResponse.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct CountResponse {
    #[prost(int64, tag = "1")]
    pub count: i64,
}

/// query.Response.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct QueryResponse {
    #[prost(uint64, tag = "1")]
    pub request_id: u64,
    #[prost(enumeration = "QueryMethod", tag = "2")]
    pub cmd_method: i32,
    /// A marshalled [`MoError`] when the call failed.
    #[prost(bytes = "bytes", tag = "3")]
    pub error: bytes::Bytes,
    #[prost(message, optional, tag = "4")]
    pub show_process_list: Option<ShowProcessListResponse>,
    #[prost(message, optional, tag = "22")]
    pub get_pipeline_info: Option<CountResponse>,
    #[prost(message, required, tag = "27")]
    pub get_replica_count: CountResponse,
}

/// moerr.Error, as lock and query responses carry it.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct MoError {
    #[prost(uint32, tag = "1")]
    pub code: u32,
    #[prost(uint32, tag = "2")]
    pub mysql_code: u32,
    #[prost(string, tag = "3")]
    pub message: String,
    #[prost(string, tag = "4")]
    pub sql_state: String,
}

/// Field 1 of any of the responses above: every morpc message starts with
/// its request id, which is all a connection needs to route an answer.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct RequestId {
    #[prost(uint64, tag = "1")]
    pub request_id: u64,
}
