#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

//! Golden bytes: what the clients put on the wire for every request, and
//! how they read every kind of answer, against bytes worked out by hand
//! from reference/hakeeper-protocol.md.
//!
//! Each test plays MatrixOne with a bare TCP listener: it reads the frame
//! the real client sends and compares it byte for byte with the expected
//! frame below, then answers with a hand-built frame and checks what the
//! client made of it.
//!
//! Protobuf arithmetic used throughout: a field's key is
//! `(field number << 3) | wire type`, wire type 0 for varints (ints, bools,
//! enums) and 2 for length-delimited fields (strings, bytes, messages,
//! map entries), itself a varint: 7 bits per byte, low bits first, high bit
//! set on every byte but the last. A map entry is a message with the key as
//! field 1 and the value as field 2.
//!
//! Checksums are xxhash64 (seed 0) of the body; the literals below were
//! computed with an implementation of the xxHash specification written
//! apart from this crate and its dependencies, checked against the
//! specification's known answers xxh64("") = ef46db3751d8e999 and
//! xxh64("abc") = 44bc2cf5ad770999 (the first is also asserted below
//! against the library the codec uses).
//!
//! The deadline header holds the time left, which depends on the clock: the
//! expected frames have zeros there, and each test checks the value sent
//! lies in (0, 10 s] before masking it.

use std::time::Duration;

use bytes::Bytes;
use cnpool_morpc::conn::ConnectionOptions;
use cnpool_morpc::frame::{CustomHeaders, Frame, FrameCodec, FrameKind};
use cnpool_morpc::hakeeper::{ClusterView, HaKeeperClient, HaKeeperOptions};
use cnpool_morpc::lock::LockClient;
use cnpool_morpc::query::{QueryClient, SessionCounting};
use cnpool_registry::{CnStore, RegistryError, StoreLabels, WorkState};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// Bytes from hex pairs; spaces and line breaks are for reading only.
fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits.chunks(2).map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap()).collect()
}

fn spaced(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02X}")).collect::<Vec<_>>().join(" ")
}

/// The custom headers as the expected frames show them: the deadline
/// masked to zeros, the trace-context length 24 (0x18), then a trace id
/// (16 bytes) and span id (8 bytes) of zeros, which a client without a
/// trace sends.
const HEADERS: &str =
    "00 00 00 00 00 00 00 00  18  00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00";

/// The deadline's offset in a frame: after the length (4), the flags (1),
/// the checksum (8) and, for log service frames, the payload length (4).
const LOG_SERVICE_DEADLINE_AT: usize = 17;
const SERVICE_DEADLINE_AT: usize = 13;

/// A request frame of the log service (HAKeeper): flags 0x07 = payload
/// 0x01 | checksum 0x02 | custom headers 0x04; payload length 0. Its length
/// field is 1 + 8 + 4 + 8 + 1 + 24 = 46 bytes plus the body.
fn log_service_frame(length: &str, checksum: &str, body: &str) -> Vec<u8> {
    hex(&format!("{length} 07 {checksum} 00 00 00 00 {HEADERS} {body}"))
}

/// A request frame of the lock or query service: flags 0x06 = checksum |
/// custom headers, no payload field; length 1 + 8 + 8 + 1 + 24 = 42 plus
/// the body.
fn service_frame(length: &str, checksum: &str, body: &str) -> Vec<u8> {
    hex(&format!("{length} 06 {checksum} {HEADERS} {body}"))
}

/// An answer frame, laid out by hand as above, with a deadline of 1 s.
/// Its checksum comes from the xxhash library, not from the codec under
/// test.
fn answer_frame(payload_field: bool, body: &[u8]) -> Vec<u8> {
    let mut content = vec![if payload_field { 0x07 } else { 0x06 }];
    content.extend(xxhash_rust::xxh64::xxh64(body, 0).to_be_bytes());
    if payload_field {
        content.extend([0, 0, 0, 0]);
    }
    content.extend(1_000_000_000i64.to_be_bytes());
    content.push(24);
    content.extend([0u8; 24]);
    content.extend(body);
    [(content.len() as u32).to_be_bytes().to_vec(), content].concat()
}

/// A length-delimited field with a one-byte key, for bodies that must hold
/// the test's own (port-dependent) address.
fn field(key: u8, value: &[u8]) -> Vec<u8> {
    assert!(value.len() < 128, "one-byte length");
    [vec![key, value.len() as u8], value.to_vec()].concat()
}

struct Peer {
    stream: TcpStream,
}

impl Peer {
    async fn accept(listener: &TcpListener) -> Self {
        Self { stream: listener.accept().await.unwrap().0 }
    }

    /// Reads one frame and compares it with `expected`, the deadline masked.
    async fn expect(&mut self, expected: &[u8], deadline_at: usize) {
        let mut length = [0u8; 4];
        self.stream.read_exact(&mut length).await.unwrap();
        let mut frame = length.to_vec();
        frame.resize(4 + u32::from_be_bytes(length) as usize, 0);
        self.stream.read_exact(&mut frame[4..]).await.unwrap();
        let deadline = &mut frame[deadline_at..deadline_at + 8];
        let remaining_ns = i64::from_be_bytes(deadline.try_into().unwrap());
        assert!(remaining_ns > 0 && remaining_ns <= 10_000_000_000, "time left sent: {remaining_ns} ns");
        deadline.fill(0);
        assert_eq!(spaced(&frame), spaced(expected));
    }

    async fn answer(&mut self, payload_field: bool, body: &[u8]) {
        self.stream.write_all(&answer_frame(payload_field, body)).await.unwrap();
    }
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

async fn listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    (listener, address)
}

/// Plays discovery: the discovery address answers GET_SHARD_INFO with one
/// replica, itself; that replica says it is the HAKeeper. Returns the
/// HAKeeper connection, where the client's next request has id 2.
async fn discovered_hakeeper(listener: &TcpListener, address: &str) -> Peer {
    let mut discovery = Peer::accept(listener).await;
    // GET_SHARD_INFO, request id 1 (the first on a new connection):
    //   08 01  field 1 RequestID = 1
    //   10 0C  field 2 Method = 12 GET_SHARD_INFO
    //   1A 00  field 3 LogRequest, empty: ShardID 0 is the default, so not
    //          written; MatrixOne marks LogRequest non-nullable, so its Go
    //          clients always send it, and so does cnpool.
    // 6 bytes of body → length 46 + 6 = 52 = 0x34.
    discovery
        .expect(
            &log_service_frame("00 00 00 34", "22 7A 24 CC D0 C8 E4 E9", "08 01 10 0C 1A 00"),
            LOG_SERVICE_DEADLINE_AT,
        )
        .await;
    // Answer: 08 01 id, 10 0C method, 32 00 field 6 LogResponse (always
    // present, empty), 52 field 10 ShardInfo = { 12 field 2, one replicas
    // map entry { 08 01 key: replica id 1, 12 value: ReplicaInfo { 0A 02
    // "r1" UUID, 12 ServiceAddress } }, 18 01 Epoch 1, 20 01 LeaderID 1,
    // 28 01 Term 1 }.
    let replica = [field(0x0A, b"r1"), field(0x12, address.as_bytes())].concat();
    let entry = [hex("08 01"), field(0x12, &replica)].concat();
    let shard_info = [field(0x12, &entry), hex("18 01 20 01 28 01")].concat();
    let answer = [hex("08 01 10 0C 32 00"), field(0x52, &shard_info)].concat();
    discovery.answer(true, &answer).await;

    let mut hakeeper = Peer::accept(listener).await;
    // CHECK_HAKEEPER, id 1 on the replica's new connection: 08 01, 10 0A
    // (method 10), 1A 00 → 52 bytes again.
    hakeeper
        .expect(
            &log_service_frame("00 00 00 34", "94 DF 2C 1B 87 B2 86 73", "08 01 10 0A 1A 00"),
            LOG_SERVICE_DEADLINE_AT,
        )
        .await;
    // Answer: id 1, method 10, 28 01 field 5 IsHAKeeper = true, 32 00.
    hakeeper.answer(true, &hex("08 01 10 0A 28 01 32 00")).await;
    hakeeper
}

fn hakeeper_client(address: &str) -> HaKeeperClient {
    HaKeeperClient::new(HaKeeperOptions::new(address))
}

#[test]
fn the_checksum_library_gives_the_specification_answer() {
    assert_eq!(xxhash_rust::xxh64::xxh64(b"", 0), 0xef46_db37_51d8_e999);
}

#[tokio::test]
async fn get_cluster_details_request_and_answer() {
    let (listener, address) = listener().await;
    let client = hakeeper_client(&address);
    let call = tokio::spawn(async move { client.cluster(deadline()).await });

    let mut hakeeper = discovered_hakeeper(&listener, &address).await;
    // 08 02 id 2, 10 0B method 11 GET_CLUSTER_DETAILS, 1A 00 → 52 bytes.
    hakeeper
        .expect(
            &log_service_frame("00 00 00 34", "FD B2 38 F3 6A FE 87 E0", "08 02 10 0B 1A 00"),
            LOG_SERVICE_DEADLINE_AT,
        )
        .await;
    // The answer: 08 02, 10 0B, 32 00, then 4A (field 9 ClusterDetails),
    // 0x4E = 78 bytes:
    //   0A 0D  field 1 TNStores[0], 13 bytes:
    //          0A 02 "t1" UUID; 3A (7 << 3 | 2) 07 "tn:6003" LockServiceAddress
    //   12 3D  field 2 CNStores[0], 61 bytes:
    //          0A 02 "u1" UUID                       4
    //          12 07 "cn:6001" ServiceAddress        9
    //          1A 07 "cn:6001" SQLAddress            9
    //          22 07 "cn:6003" LockServiceAddress    9
    //          4A 10 Labels entry, 16 bytes:        18
    //                0A 06 "tenant" key; 12 06 LabelList { 0A 01 "a", 0A 01 "b" }
    //          50 02 WorkState (10 << 3 | 0) = 2 Draining  2
    //          5A 08 "cn:19998" QueryAddress (11 << 3 | 2)  10
    //   15 + 63 = 78.
    let answer = hex("08 02 10 0B 32 00 4A 4E
         0A 0D 0A 02 74 31 3A 07 74 6E 3A 36 30 30 33
         12 3D 0A 02 75 31
               12 07 63 6E 3A 36 30 30 31
               1A 07 63 6E 3A 36 30 30 31
               22 07 63 6E 3A 36 30 30 33
               4A 10 0A 06 74 65 6E 61 6E 74 12 06 0A 01 61 0A 01 62
               50 02
               5A 08 63 6E 3A 31 39 39 39 38");
    hakeeper.answer(true, &answer).await;

    let view = call.await.unwrap().unwrap();
    let labels = StoreLabels::from([("tenant".to_owned(), vec!["a".to_owned(), "b".to_owned()])]);
    assert_eq!(
        view,
        ClusterView {
            cn_stores: vec![CnStore {
                uuid: "u1".into(),
                service_address: "cn:6001".into(),
                sql_address: "cn:6001".into(),
                lock_service_address: "cn:6003".into(),
                query_address: "cn:19998".into(),
                work_state: WorkState::Draining,
                labels,
            }],
            lock_service_addresses: vec!["tn:6003".into()],
        }
    );
}

#[tokio::test]
async fn patch_cn_store_request_and_ok_answer() {
    let (listener, address) = listener().await;
    let client = hakeeper_client(&address);
    let labels = StoreLabels::from([("tenant".to_owned(), vec!["a".to_owned()])]);
    let call = tokio::spawn(async move { client.patch_cn_store("u1", WorkState::Draining, &labels, deadline()).await });

    let mut hakeeper = discovered_hakeeper(&listener, &address).await;
    // 08 02 id 2; 10 11 method 17 PATCH_CN_STORE; 1A 00 LogRequest;
    // 5A (11 << 3 | 2) 15 CNStateLabel, 21 bytes:
    //   0A 02 "u1" UUID                                        4
    //   10 02 State = 2 Draining                               2
    //   1A 0D Labels entry, 13 bytes: 0A 06 "tenant" (8),
    //         12 03 LabelList { 0A 01 "a" } (5)               15
    // Body 8 + 21 = 29 bytes → length 46 + 29 = 75 = 0x4B.
    let body = "08 02 10 11 1A 00 5A 15 0A 02 75 31 10 02 1A 0D 0A 06 74 65 6E 61 6E 74 12 03 0A 01 61";
    hakeeper.expect(&log_service_frame("00 00 00 4B", "E7 D9 B2 29 75 37 8E 7B", body), LOG_SERVICE_DEADLINE_AT).await;
    // OK: id 2, method 17, LogResponse; ErrorCode 0 is not written.
    hakeeper.answer(true, &hex("08 02 10 11 32 00")).await;
    assert_eq!(call.await.unwrap(), Ok(()));
}

#[tokio::test]
async fn an_unknown_store_answer_is_store_not_found() {
    let (listener, address) = listener().await;
    let client = hakeeper_client(&address);
    let call =
        tokio::spawn(
            async move { client.patch_cn_store("u1", WorkState::Draining, &StoreLabels::new(), deadline()).await },
        );

    let mut hakeeper = discovered_hakeeper(&listener, &address).await;
    // As above without labels: 5A 06 { 0A 02 "u1", 10 02 }: an empty label
    // map writes nothing. Body 14 bytes → length 60 = 0x3C.
    let body = "08 02 10 11 1A 00 5A 06 0A 02 75 31 10 02";
    hakeeper.expect(&log_service_frame("00 00 00 3C", "5A 28 C1 FD 43 29 2C 20", body), LOG_SERVICE_DEADLINE_AT).await;
    // 18 field 3 ErrorCode = 20101: 20101 = 1·16384 + 29·128 + 5 → varint
    // 85 (5 | 0x80) 9D (29 | 0x80) 01; 22 26 field 4 ErrorMessage, 38 bytes.
    let answer =
        [hex("08 02 10 11 18 85 9D 01 22 26"), b"internal error: CN [u1] does not exist".to_vec(), hex("32 00")]
            .concat();
    hakeeper.answer(true, &answer).await;
    assert_eq!(call.await.unwrap(), Err(RegistryError::StoreNotFound { uuid: "u1".into() }));
}

#[tokio::test]
async fn update_cn_label_request_clearing_labels() {
    let (listener, address) = listener().await;
    let client = hakeeper_client(&address);
    let call = tokio::spawn(async move { client.update_cn_label("u1", &StoreLabels::new(), deadline()).await });

    let mut hakeeper = discovered_hakeeper(&listener, &address).await;
    // 08 02; 10 0F method 15 UPDATE_CN_LABEL; 1A 00; 4A (9 << 3 | 2) 04
    // CNStoreLabel { 0A 02 "u1" }: Operation 0 (set) and the empty label map
    // are not written, which is how "no labels" clears them.
    // 12 bytes → length 58 = 0x3A.
    let body = "08 02 10 0F 1A 00 4A 04 0A 02 75 31";
    hakeeper.expect(&log_service_frame("00 00 00 3A", "F4 F6 66 3D 0F C2 F9 E9", body), LOG_SERVICE_DEADLINE_AT).await;
    hakeeper.answer(true, &hex("08 02 10 0F 32 00")).await;
    assert_eq!(call.await.unwrap(), Ok(()));
}

#[tokio::test]
async fn delete_cn_store_request_and_ok_answer() {
    let (listener, address) = listener().await;
    let client = hakeeper_client(&address);
    let call = tokio::spawn(async move { client.delete_cn_store("u1", deadline()).await });

    let mut hakeeper = discovered_hakeeper(&listener, &address).await;
    // 08 02; 10 12 method 18 DELETE_CN_STORE; 1A 00; 62 (12 << 3 | 2) 04
    // DeleteCNStore { 0A 02 "u1" StoreID }. 12 bytes → 0x3A.
    let body = "08 02 10 12 1A 00 62 04 0A 02 75 31";
    hakeeper.expect(&log_service_frame("00 00 00 3A", "4E 6A A7 4D 67 7B 46 40", body), LOG_SERVICE_DEADLINE_AT).await;
    hakeeper.answer(true, &hex("08 02 10 12 32 00")).await;
    assert_eq!(call.await.unwrap(), Ok(()));
}

// --- the TN lock service: requests have id 1 (a new connection) ----------

fn lock_client() -> LockClient {
    LockClient::new(ConnectionOptions::lock_or_query())
}

#[tokio::test]
async fn set_restart_service_request_and_answer() {
    let (listener, address) = listener().await;
    let call = tokio::spawn(async move { lock_client().set_restart_service(&address, "u1", deadline()).await });
    let mut tn = Peer::accept(&listener).await;
    // 08 01 id; 18 (3 << 3 | 0) 0C Method 12 SetRestartService;
    // 72 (14 << 3 | 2) 04 { 0A 02 "u1" ServiceID }. 10 bytes → 52 = 0x34.
    tn.expect(
        &service_frame("00 00 00 34", "13 AE 60 27 54 90 63 FD", "08 01 18 0C 72 04 0A 02 75 31"),
        SERVICE_DEADLINE_AT,
    )
    .await;
    // Answer: 08 01, 10 0C (Method is field 2 in answers), 7A (15 << 3 | 2)
    // 02 SetRestartServiceResponse { 08 01 OK = true }.
    tn.answer(false, &hex("08 01 10 0C 7A 02 08 01")).await;
    assert_eq!(call.await.unwrap(), Ok(true));
}

#[tokio::test]
async fn remain_txn_in_service_request_and_answer() {
    let (listener, address) = listener().await;
    let call = tokio::spawn(async move { lock_client().remain_txn_in_service(&address, "u1", deadline()).await });
    let mut tn = Peer::accept(&listener).await;
    // 18 0D Method 13; field 16: key 16 << 3 | 2 = 130 → varint 82 01; then
    // 04 { 0A 02 "u1" }. 11 bytes → 53 = 0x35.
    tn.expect(
        &service_frame("00 00 00 35", "46 20 05 B8 87 5B E1 56", "08 01 18 0D 82 01 04 0A 02 75 31"),
        SERVICE_DEADLINE_AT,
    )
    .await;
    // Answer field 17: 17 << 3 | 2 = 138 → 8A 01; 02 { 08 03 RemainTxn = 3 }.
    tn.answer(false, &hex("08 01 10 0D 8A 01 02 08 03")).await;
    assert_eq!(call.await.unwrap(), Ok(3));
}

#[tokio::test]
async fn can_restart_service_request_and_a_present_but_false_answer() {
    let (listener, address) = listener().await;
    let call = tokio::spawn(async move { lock_client().can_restart_service(&address, "u1", deadline()).await });
    let mut tn = Peer::accept(&listener).await;
    // 18 0E Method 14; 7A (15 << 3 | 2) 04 { 0A 02 "u1" }. 10 bytes → 0x34.
    tn.expect(
        &service_frame("00 00 00 34", "78 B0 49 5E 8B 6D 64 35", "08 01 18 0E 7A 04 0A 02 75 31"),
        SERVICE_DEADLINE_AT,
    )
    .await;
    // Answer field 16 (82 01), empty: OK = false is not written.
    tn.answer(false, &hex("08 01 10 0E 82 01 00")).await;
    assert_eq!(call.await.unwrap(), Ok(false));
}

#[tokio::test]
async fn a_lock_service_error_answer_is_an_error() {
    let (listener, address) = listener().await;
    let call = tokio::spawn(async move { lock_client().set_restart_service(&address, "u1", deadline()).await });
    let mut tn = Peer::accept(&listener).await;
    tn.expect(
        &service_frame("00 00 00 34", "13 AE 60 27 54 90 63 FD", "08 01 18 0C 72 04 0A 02 75 31"),
        SERVICE_DEADLINE_AT,
    )
    .await;
    tn.answer(false, &moerr_answer("08 01 10 0C")).await;
    assert_eq!(
        call.await.unwrap(),
        Err(RegistryError::Remote { call: "SetRestartService", code: 20429, message: "timeout".into() })
    );
}

/// An answer with `head` (id and method) and 1A 0D, field 3 Error: a
/// moerr.Error of 13 bytes { 08 CD 9F 01 code 20429 (= 1·16384 + 31·128 +
/// 77: varint CD 9F 01), 1A 07 "timeout" message }.
fn moerr_answer(head: &str) -> Vec<u8> {
    hex(&format!("{head} 1A 0D 08 CD 9F 01 1A 07 74 69 6D 65 6F 75 74"))
}

// --- the CN query service ------------------------------------------------

fn query_client(counting: SessionCounting) -> QueryClient {
    QueryClient::new(ConnectionOptions::lock_or_query(), counting)
}

/// ShowProcessList: 08 01; 10 01 CmdMethod 1; 22 (4 << 3 | 2) 02
/// ShowProcessListRequest { 10 01 SysTenant = true }; DA 01 00 field 27
/// GetReplicaCount (27 << 3 | 2 = 218 → varint DA 01), empty, always sent
/// because MatrixOne marks it non-nullable. 11 bytes → 53 = 0x35.
const SHOW_PROCESS_LIST: &str = "08 01 10 01 22 02 10 01 DA 01 00";

/// Three sessions (status.Session: 22 field 4 Account, 98 01 field 19
/// FromProxy, 19 << 3 | 0 = 152 → varint 98 01):
///   0A 05 { 22 03 "sys" }                        internal, not proxied
///   0A 08 { 22 03 "acc", 98 01 01 }              proxied
///   0A 06 { 22 04 "acc2" }                       a tenant's, not proxied
/// wrapped in 22 19 (field 4, 25 bytes), then the non-nullable DA 01 00.
const PROCESS_LIST_ANSWER: &str = "08 01 10 01 22 19
    0A 05 22 03 73 79 73
    0A 08 22 03 61 63 63 98 01 01
    0A 06 22 04 61 63 63 32
    DA 01 00";

#[tokio::test]
async fn show_process_list_counts_proxied_sessions() {
    let (listener, address) = listener().await;
    let call =
        tokio::spawn(async move { query_client(SessionCounting::FromProxy).sessions(&address, deadline()).await });
    let mut cn = Peer::accept(&listener).await;
    cn.expect(&service_frame("00 00 00 35", "F9 B6 E0 AD AB 87 8F 49", SHOW_PROCESS_LIST), SERVICE_DEADLINE_AT).await;
    cn.answer(false, &hex(PROCESS_LIST_ANSWER)).await;
    assert_eq!(call.await.unwrap(), Ok(1));
}

#[tokio::test]
async fn show_process_list_can_count_tenant_sessions_for_older_matrixone() {
    let (listener, address) = listener().await;
    let call =
        tokio::spawn(async move { query_client(SessionCounting::TenantAccounts).sessions(&address, deadline()).await });
    let mut cn = Peer::accept(&listener).await;
    cn.expect(&service_frame("00 00 00 35", "F9 B6 E0 AD AB 87 8F 49", SHOW_PROCESS_LIST), SERVICE_DEADLINE_AT).await;
    cn.answer(false, &hex(PROCESS_LIST_ANSWER)).await;
    assert_eq!(call.await.unwrap(), Ok(2), "acc and acc2, not sys");
}

#[tokio::test]
async fn get_pipeline_info_request_and_answer() {
    let (listener, address) = listener().await;
    let call =
        tokio::spawn(async move { query_client(SessionCounting::FromProxy).pipelines(&address, deadline()).await });
    let mut cn = Peer::accept(&listener).await;
    // 10 13 CmdMethod 19; B2 01 00 field 22 (22 << 3 | 2 = 178 → B2 01),
    // an empty GetPipelineInfoRequest that must be present; DA 01 00.
    // 10 bytes → 0x34.
    cn.expect(
        &service_frame("00 00 00 34", "10 B6 6C A2 7D 34 BB ED", "08 01 10 13 B2 01 00 DA 01 00"),
        SERVICE_DEADLINE_AT,
    )
    .await;
    // Answer: B2 01 02 { 08 04 Count = 4 }, DA 01 00.
    cn.answer(false, &hex("08 01 10 13 B2 01 02 08 04 DA 01 00")).await;
    assert_eq!(call.await.unwrap(), Ok(4));
}

#[tokio::test]
async fn get_replica_count_request_and_answer() {
    let (listener, address) = listener().await;
    let call =
        tokio::spawn(async move { query_client(SessionCounting::FromProxy).replicas(&address, deadline()).await });
    let mut cn = Peer::accept(&listener).await;
    // 10 18 CmdMethod 24; DA 01 00 the (empty) GetReplicaCountRequest.
    // 7 bytes → 49 = 0x31.
    cn.expect(&service_frame("00 00 00 31", "B6 33 8D 2B 24 38 FB D3", "08 01 10 18 DA 01 00"), SERVICE_DEADLINE_AT)
        .await;
    // Answer: DA 01 02 { 08 05 Count = 5 }.
    cn.answer(false, &hex("08 01 10 18 DA 01 02 08 05")).await;
    assert_eq!(call.await.unwrap(), Ok(5));
}

#[tokio::test]
async fn a_query_service_error_answer_is_an_error_not_zero() {
    let (listener, address) = listener().await;
    let call =
        tokio::spawn(async move { query_client(SessionCounting::FromProxy).pipelines(&address, deadline()).await });
    let mut cn = Peer::accept(&listener).await;
    cn.expect(
        &service_frame("00 00 00 34", "10 B6 6C A2 7D 34 BB ED", "08 01 10 13 B2 01 00 DA 01 00"),
        SERVICE_DEADLINE_AT,
    )
    .await;
    // No GetPipelineInfoResponse at all, only the error and DA 01 00.
    cn.answer(false, &[moerr_answer("08 01 10 13"), hex("DA 01 00")].concat()).await;
    assert_eq!(
        call.await.unwrap(),
        Err(RegistryError::Remote { call: "GetPipelineInfo", code: 20429, message: "timeout".into() })
    );
}

// --- frames without a client -------------------------------------------

#[test]
fn a_ping_frame() {
    // flags 0x26 = ping 0x20 | checksum | custom headers; body: the id as a
    // u64, here 5; length 1 + 8 + 8 + 1 + 24 + 8 = 50 = 0x32.
    let headers = CustomHeaders { timeout_ns: 1_000_000_000, ..CustomHeaders::default() };
    let mut encoded = bytes::BytesMut::new();
    FrameCodec::default().encode(&Frame::ping(5, headers), &mut encoded).unwrap();
    let expected = hex(&format!(
        "00 00 00 32 26 DB 32 B6 E0 4F 53 B3 7C {} 00 00 00 00 00 00 00 05",
        // the deadline: 1 s = 1 000 000 000 ns = 0x3B9ACA00
        HEADERS.replacen("00 00 00 00 00 00 00 00", "00 00 00 00 3B 9A CA 00", 1)
    ));
    assert_eq!(spaced(&encoded), spaced(&expected));
}

#[test]
fn compressed_answers_decode() {
    // flags 0x0F = payload | checksum | headers | lz4; the body is one LZ4
    // block of literals only: token 0x80 (8 literals, no match), then the 8
    // bytes of a CHECK_HAKEEPER answer (08 01 10 0A 28 01 32 00).
    let block = "80 08 01 10 0A 28 01 32 00";
    let frame = hex(&format!("0F D9 FB 14 83 AB 50 3A A6 00 00 00 00 {HEADERS} {block}"));
    let decoded = FrameCodec::default().parse(Bytes::from(frame)).unwrap();
    assert_eq!(decoded.kind, FrameKind::Message);
    assert_eq!(spaced(&decoded.body), "08 01 10 0A 28 01 32 00");

    // A block with a match: token 0x35 = 3 literals "abc" and a match of
    // 5 + 4 = 9 bytes at offset 3 (03 00, little-endian), then token 0x10
    // = 1 literal "Z". Flags 0x08: lz4 alone.
    let frame = hex("08 35 61 62 63 03 00 10 5A");
    let decoded = FrameCodec::default().parse(Bytes::from(frame)).unwrap();
    assert_eq!(&decoded.body[..], b"abcabcabcabcZ");
}

#[test]
fn a_compressed_frame_checksums_the_compressed_bytes() {
    let frame = hex("0A B4 57 98 77 29 63 72 95 35 61 62 63 03 00 10 5A");
    let decoded = FrameCodec::default().parse(Bytes::from(frame)).unwrap();
    assert_eq!(&decoded.body[..], b"abcabcabcabcZ");
}

// --- the simulated servers answer byte for byte -------------------------
//
// Requests as above, with id 1 and a deadline of 1 s (0x3B9ACA00 ns); the
// servers echo the deadline and trace headers, so their answers are fixed
// bytes.

/// The custom headers with a deadline of 1 s.
fn headers_1s() -> String {
    HEADERS.replacen("00 00 00 00 00 00 00 00", "00 00 00 00 3B 9A CA 00", 1)
}

/// Sends one hand-made request frame to `address` and returns the answer frame.
async fn exchange(address: std::net::SocketAddr, request: &str) -> Vec<u8> {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(&hex(&request.replace("HEADERS", &headers_1s()))).await.unwrap();
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).await.unwrap();
    let mut frame = length.to_vec();
    frame.resize(4 + u32::from_be_bytes(length) as usize, 0);
    stream.read_exact(&mut frame[4..]).await.unwrap();
    frame
}

fn registry_with_u1() -> cnpool_registry::memory::MemoryRegistry {
    let registry = cnpool_registry::memory::MemoryRegistry::new();
    registry.register_store(
        "u1",
        cnpool_registry::memory::StoreAddresses {
            service_address: "cn:6001".into(),
            sql_address: "cn:6001".into(),
            lock_service_address: "cn:6003".into(),
            query_address: "cn:19998".into(),
        },
    );
    registry
}

#[tokio::test]
async fn the_hakeeper_server_answers_check_hakeeper() {
    let server = cnpool_morpc::server::HaKeeperServer::bind("127.0.0.1:0", registry_with_u1()).await.unwrap();
    let answer =
        exchange(server.local_addr(), "00 00 00 34 07 94 DF 2C 1B 87 B2 86 73 00 00 00 00 HEADERS 08 01 10 0A 1A 00")
            .await;
    // Flags 07, length 46 + 8 = 54 = 0x36; body: id 1, method 10,
    // 28 01 IsHAKeeper = true, 32 00 the non-nullable LogResponse.
    let expected =
        format!("00 00 00 36 07 AE 58 91 DE 37 12 68 12 00 00 00 00 {} 08 01 10 0A 28 01 32 00", headers_1s());
    assert_eq!(spaced(&answer), spaced(&hex(&expected)));
}

#[tokio::test]
async fn the_hakeeper_server_answers_cluster_details() {
    let server = cnpool_morpc::server::HaKeeperServer::bind("127.0.0.1:0", registry_with_u1()).await.unwrap();
    let answer =
        exchange(server.local_addr(), "00 00 00 34 07 BE 17 B4 A1 C5 4F 64 C5 00 00 00 00 HEADERS 08 01 10 0B 1A 00")
            .await;
    // 08 01, 10 0B, 32 00, 4A 2D ClusterDetails of 45 bytes: no TN store
    // (none configured), 12 2B CNStores[0] of 43 bytes: UUID (4), three
    // addresses (9 each), 50 01 WorkState Working (a new store), 5A 08
    // QueryAddress (10); State 0 and the empty labels are not written.
    // Body 53 bytes → length 99 = 0x63.
    let body = "08 01 10 0B 32 00 4A 2D 12 2B 0A 02 75 31
        12 07 63 6E 3A 36 30 30 31 1A 07 63 6E 3A 36 30 30 31 22 07 63 6E 3A 36 30 30 33
        50 01 5A 08 63 6E 3A 31 39 39 39 38";
    let expected = format!("00 00 00 63 07 5B 72 E3 20 B9 50 B0 5E 00 00 00 00 {} {body}", headers_1s());
    assert_eq!(spaced(&answer), spaced(&hex(&expected)));
}

#[tokio::test]
async fn the_hakeeper_server_answers_20101_for_an_unknown_store() {
    let empty = cnpool_registry::memory::MemoryRegistry::new();
    let server = cnpool_morpc::server::HaKeeperServer::bind("127.0.0.1:0", empty).await.unwrap();
    // PatchCNStore of "u1" to Draining, id 1, 14 bytes → 0x3C.
    let request = "00 00 00 3C 07 B3 68 63 24 D5 46 A7 C9 00 00 00 00 HEADERS
        08 01 10 11 1A 00 5A 06 0A 02 75 31 10 02";
    let answer = exchange(server.local_addr(), request).await;
    // 18 85 9D 01 ErrorCode 20101, 22 26 the 38-byte message, 32 00.
    // Body 2 + 2 + 4 + 2 + 38 + 2 = 50 bytes → length 96 = 0x60.
    let message = b"internal error: CN [u1] does not exist".iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>();
    let expected = format!(
        "00 00 00 60 07 9D 90 78 64 78 49 44 54 00 00 00 00 {} 08 01 10 11 18 85 9D 01 22 26 {} 32 00",
        headers_1s(),
        message.join(" ")
    );
    assert_eq!(spaced(&answer), spaced(&hex(&expected)));
}

#[tokio::test]
async fn the_query_server_answers_show_process_list() {
    let registry = registry_with_u1();
    registry.set_workload("u1", cnpool_registry::Workload { sessions: 1, ..Default::default() });
    let server = cnpool_morpc::server::bind_query_service("127.0.0.1:0", registry, "u1").await.unwrap();
    let request = format!("00 00 00 35 06 F9 B6 E0 AD AB 87 8F 49 HEADERS {SHOW_PROCESS_LIST}");
    let answer = exchange(server.local_addr(), &request).await;
    // Flags 06 (no payload field). 22 14 the list, 20 bytes:
    //   0A 05 { 22 03 "sys" }                     the internal session
    //   0A 0B { 22 06 "tenant", 98 01 01 }        one proxied session
    // then DA 01 00. Body 29 bytes → length 71 = 0x47.
    let expected = format!(
        "00 00 00 47 06 B3 B9 86 34 26 11 9A 35 {} 08 01 10 01 22 14
         0A 05 22 03 73 79 73 0A 0B 22 06 74 65 6E 61 6E 74 98 01 01 DA 01 00",
        headers_1s()
    );
    assert_eq!(spaced(&answer), spaced(&hex(&expected)));
}

#[tokio::test]
async fn the_lock_server_answers_set_restart_service() {
    let server = cnpool_morpc::server::bind_lock_service("127.0.0.1:0", registry_with_u1()).await.unwrap();
    let answer =
        exchange(server.local_addr(), "00 00 00 34 06 13 AE 60 27 54 90 63 FD HEADERS 08 01 18 0C 72 04 0A 02 75 31")
            .await;
    // 10 0C Method, 7A 02 { 08 01 OK = true }; 8 bytes → 50 = 0x32.
    let expected = format!("00 00 00 32 06 38 EA 2C A2 07 5D E6 2D {} 08 01 10 0C 7A 02 08 01", headers_1s());
    assert_eq!(spaced(&answer), spaced(&hex(&expected)));
}
