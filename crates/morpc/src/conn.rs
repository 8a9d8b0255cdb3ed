//! One morpc connection, multiplexed by request id, and a pool of them.
//!
//! A frame has no id of its own: every request carries its id in protobuf
//! field 1 and the answer echoes it, so many calls can share a connection.
//! A reader task routes answers to their callers; a writer task drains a
//! bounded queue onto the socket. When either side fails, every pending
//! call fails with the same error and the connection stays closed; the
//! owner opens a new one (see [`ConnectionPool`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Semaphore, SemaphorePermit, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout_at};

use crate::error::RpcError;
use crate::frame::{CustomHeaders, DEFAULT_MAX_FRAME_LEN, Frame, FrameCodec, FrameKind};
use crate::proto::RequestId;

/// How a connection is opened and framed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionOptions {
    /// Upper bound on opening the TCP connection (the caller's deadline may
    /// be sooner).
    pub connect_timeout: Duration,
    /// Largest frame sent or accepted.
    pub max_frame_len: usize,
    /// Calls waiting for an answer at once; more wait for a slot, and the
    /// queue of frames to write holds as many.
    pub max_in_flight: usize,
    /// Whether messages carry the (empty) payload field: MatrixOne's log
    /// service messages do (flags 0x07), lock and query messages do not
    /// (flags 0x06).
    pub payload_field: bool,
}

impl ConnectionOptions {
    /// Options for HAKeeper and the log service.
    pub fn log_service() -> Self {
        Self { payload_field: true, ..Self::lock_or_query() }
    }

    /// Options for the TN lock service and the CN query service.
    pub fn lock_or_query() -> Self {
        Self {
            connect_timeout: Duration::from_secs(1),
            max_frame_len: DEFAULT_MAX_FRAME_LEN,
            max_in_flight: 64,
            payload_field: false,
        }
    }
}

type Reply = oneshot::Sender<Result<Bytes, RpcError>>;

#[derive(Default)]
struct Pending {
    waiting: HashMap<u64, Reply>,
    /// Set once the connection failed; every later call fails with it.
    closed: Option<RpcError>,
}

#[derive(Default)]
struct Shared {
    pending: Mutex<Pending>,
}

impl Shared {
    /// Pending calls hold plain data; a panic elsewhere leaves it usable.
    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fail_all(&self, error: RpcError) {
        let waiting = {
            let mut pending = self.pending();
            if pending.closed.is_none() {
                pending.closed = Some(error.clone());
            }
            std::mem::take(&mut pending.waiting)
        };
        for reply in waiting.into_values() {
            let _ = reply.send(Err(error.clone()));
        }
    }

    fn answer(&self, id: u64, result: Result<Bytes, RpcError>) {
        // An answer nobody waits for any more (its caller timed out) is dropped.
        if let Some(reply) = self.pending().waiting.remove(&id) {
            let _ = reply.send(result);
        }
    }
}

/// Removes a call's slot when the call ends, however it ends (answer,
/// deadline, or the caller's future being dropped).
struct PendingSlot<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for PendingSlot<'_> {
    fn drop(&mut self) {
        self.shared.pending().waiting.remove(&self.id);
    }
}

/// An open morpc connection to one address.
pub struct Connection {
    address: String,
    options: ConnectionOptions,
    codec: FrameCodec,
    shared: Arc<Shared>,
    outgoing: mpsc::Sender<Bytes>,
    in_flight: Semaphore,
    next_id: AtomicU64,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("address", &self.address).field("closed", &self.is_closed()).finish()
    }
}

impl Connection {
    /// Opens a connection, giving up at `deadline` or after the connect
    /// timeout, whichever comes first.
    pub async fn connect(address: &str, options: &ConnectionOptions, deadline: Instant) -> Result<Self, RpcError> {
        let connect_deadline = deadline.min(Instant::now() + options.connect_timeout);
        let connect_error = |detail: String| RpcError::Connect { address: address.to_owned(), detail };
        let stream = timeout_at(connect_deadline, TcpStream::connect(address))
            .await
            .map_err(|_| connect_error("timed out".to_owned()))?
            .map_err(|error| connect_error(error.to_string()))?;
        // Requests are small and answered one by one: do not wait to batch.
        stream.set_nodelay(true).map_err(|error| connect_error(error.to_string()))?;
        let (read_half, write_half) = stream.into_split();
        let codec = FrameCodec::new(options.max_frame_len);
        let shared = Arc::new(Shared::default());
        let max_in_flight = options.max_in_flight.max(1);
        let (outgoing, queue) = mpsc::channel(max_in_flight);
        let reader =
            tokio::spawn(read_loop(read_half, codec, Arc::clone(&shared), outgoing.clone(), address.to_owned()));
        let writer = tokio::spawn(write_loop(write_half, queue, Arc::clone(&shared), address.to_owned()));
        Ok(Self {
            address: address.to_owned(),
            options: options.clone(),
            codec,
            shared,
            outgoing,
            in_flight: Semaphore::new(max_in_flight),
            next_id: AtomicU64::new(1),
            reader,
            writer,
        })
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// Whether the connection failed; a closed connection never reopens.
    pub fn is_closed(&self) -> bool {
        self.shared.pending().closed.is_some()
    }

    /// Sends the request that `build` makes with the id it is given and
    /// waits for the answer's body until `deadline`.
    pub async fn call(&self, deadline: Instant, build: impl FnOnce(u64) -> Vec<u8>) -> Result<Bytes, RpcError> {
        let _permit = self.permit(deadline).await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = Frame {
            kind: FrameKind::Message,
            checksum: true,
            payload: self.options.payload_field.then(Bytes::new),
            headers: Some(headers_until(deadline)),
            stream_sequence: None,
            body: Bytes::from(build(id)),
        };
        self.exchange(id, &frame, deadline).await
    }

    /// Checks that the peer answers at all.
    pub async fn ping(&self, deadline: Instant) -> Result<(), RpcError> {
        let _permit = self.permit(deadline).await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.exchange(id, &Frame::ping(id, headers_until(deadline)), deadline).await.map(drop)
    }

    /// A slot among the calls in flight, waiting for one until `deadline`.
    async fn permit(&self, deadline: Instant) -> Result<SemaphorePermit<'_>, RpcError> {
        match timeout_at(deadline, self.in_flight.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            // The semaphore is never closed; treat it as a closed connection all the same.
            Ok(Err(_)) => Err(self.closed_error()),
            Err(_) => Err(self.timeout()),
        }
    }

    async fn exchange(&self, id: u64, frame: &Frame, deadline: Instant) -> Result<Bytes, RpcError> {
        let mut encoded = BytesMut::new();
        self.codec
            .encode(frame, &mut encoded)
            .map_err(|error| RpcError::Encode { address: self.address.clone(), detail: error.to_string() })?;
        let (reply, answer) = oneshot::channel();
        {
            let mut pending = self.shared.pending();
            if let Some(error) = &pending.closed {
                return Err(error.clone());
            }
            pending.waiting.insert(id, reply);
        }
        let _slot = PendingSlot { shared: &self.shared, id };
        match timeout_at(deadline, self.outgoing.send(encoded.freeze())).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(self.closed_error()),
            Err(_) => return Err(self.timeout()),
        }
        match timeout_at(deadline, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.closed_error()),
            Err(_) => Err(self.timeout()),
        }
    }

    fn timeout(&self) -> RpcError {
        RpcError::Timeout { address: self.address.clone() }
    }

    fn closed_error(&self) -> RpcError {
        self.shared.pending().closed.clone().unwrap_or_else(|| RpcError::Broken {
            address: self.address.clone(),
            detail: "connection closed".to_owned(),
        })
    }
}

/// The custom headers of a frame sent now for a call due at `deadline`.
fn headers_until(deadline: Instant) -> CustomHeaders {
    let remaining = deadline.saturating_duration_since(Instant::now());
    CustomHeaders { timeout_ns: i64::try_from(remaining.as_nanos()).unwrap_or(i64::MAX), ..CustomHeaders::default() }
}

async fn read_loop(
    mut socket: OwnedReadHalf,
    codec: FrameCodec,
    shared: Arc<Shared>,
    outgoing: mpsc::Sender<Bytes>,
    address: String,
) {
    let broken = |detail: String| RpcError::Broken { address: address.clone(), detail };
    let mut buffer = BytesMut::with_capacity(8 * 1024);
    let error = 'read: loop {
        loop {
            let frame = match codec.decode(&mut buffer) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) => break 'read broken(format!("undecodable frame: {error}")),
            };
            match frame.kind {
                FrameKind::Message => match RequestId::decode(frame.body.clone()) {
                    Ok(RequestId { request_id }) => shared.answer(request_id, Ok(frame.body)),
                    Err(error) => break 'read broken(format!("answer without a request id: {error}")),
                },
                FrameKind::Pong => match frame.control_id() {
                    Ok(id) => shared.answer(id, Ok(Bytes::new())),
                    Err(error) => break 'read broken(error.to_string()),
                },
                FrameKind::Ping => {
                    let pong = frame.control_id().map(|id| Frame::pong(id, frame.headers.unwrap_or_default()));
                    let mut encoded = BytesMut::new();
                    match pong.and_then(|pong| codec.encode(&pong, &mut encoded)) {
                        // A full queue means the peer is flooding us with pings: skip one.
                        Ok(()) => drop(outgoing.try_send(encoded.freeze())),
                        Err(error) => break 'read broken(error.to_string()),
                    }
                }
            }
        }
        match socket.read_buf(&mut buffer).await {
            Ok(0) => break broken("closed by the peer (EOF)".to_owned()),
            Ok(_) => {}
            Err(error) => break broken(error.to_string()),
        }
    };
    shared.fail_all(error);
}

async fn write_loop(
    mut socket: OwnedWriteHalf,
    mut queue: mpsc::Receiver<Bytes>,
    shared: Arc<Shared>,
    address: String,
) {
    while let Some(frame) = queue.recv().await {
        if let Err(error) = socket.write_all(&frame).await {
            shared.fail_all(RpcError::Broken { address, detail: error.to_string() });
            return;
        }
    }
}

/// Connections to many addresses (the CN query services, the TN lock
/// service), opened on first use and reopened after a failure. Opening one
/// address never holds up calls to another.
#[derive(Debug)]
pub struct ConnectionPool {
    options: ConnectionOptions,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
}

type Slot = tokio::sync::Mutex<Option<Arc<Connection>>>;

impl ConnectionPool {
    pub fn new(options: ConnectionOptions) -> Self {
        Self { options, slots: Mutex::new(HashMap::new()) }
    }

    /// Sends a request to `address` over its pooled connection.
    pub async fn call(
        &self,
        address: &str,
        deadline: Instant,
        build: impl FnOnce(u64) -> Vec<u8>,
    ) -> Result<Bytes, RpcError> {
        let connection = self.connection(address, deadline).await?;
        connection.call(deadline, build).await
    }

    async fn connection(&self, address: &str, deadline: Instant) -> Result<Arc<Connection>, RpcError> {
        let slot = Arc::clone(self.slots().entry(address.to_owned()).or_default());
        // Another caller may be connecting to the same address: wait for it, not past the deadline.
        let mut slot =
            timeout_at(deadline, slot.lock()).await.map_err(|_| RpcError::Timeout { address: address.to_owned() })?;
        if let Some(connection) = slot.as_ref().filter(|connection| !connection.is_closed()) {
            return Ok(Arc::clone(connection));
        }
        let connection = Arc::new(Connection::connect(address, &self.options, deadline).await?);
        *slot = Some(Arc::clone(&connection));
        Ok(connection)
    }

    /// Closes the connections to every address `keep` refuses (CNs that
    /// left the cluster), so that the pool does not grow forever.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.slots().retain(|address, _| keep(address));
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<String, Arc<Slot>>> {
        // The map of slots is plain data; a panic elsewhere leaves it usable.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
