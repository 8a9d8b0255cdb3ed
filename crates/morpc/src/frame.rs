//! The morpc frame: how MatrixOne puts one message on a TCP stream.
//!
//! ```text
//! u32 frame length (bytes after this field), big-endian like every integer here
//! u8  flags: 0x01 payload, 0x02 checksum, 0x04 custom headers, 0x08 lz4,
//!            0x10 stream, 0x20 ping, 0x40 pong
//! [u64 xxhash64 (seed 0) of body || payload]                  if 0x02
//! [u32 payload length]                                        if 0x01
//! [i64 remaining timeout ns][u8 24][16 B trace id][8 B span id] if 0x04
//! [u32 stream sequence]                                       if 0x10
//! body || payload
//! ```
//!
//! With 0x08 the body and the payload are each one raw LZ4 block (no frame
//! header, no size prefix), compressed separately; the checksum covers the
//! compressed bytes. cnpool never compresses (MatrixOne's default is off)
//! but decodes compressed frames. A ping or pong body is the sender's u64 id.
//!
//! The decoder never panics and never allocates more than the frame limit:
//! a declared length beyond it is refused before anything is reserved, and
//! decompression stops at the limit.

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub const FLAG_PAYLOAD: u8 = 0x01;
pub const FLAG_CHECKSUM: u8 = 0x02;
pub const FLAG_CUSTOM_HEADERS: u8 = 0x04;
pub const FLAG_COMPRESSED: u8 = 0x08;
pub const FLAG_STREAM: u8 = 0x10;
pub const FLAG_PING: u8 = 0x20;
pub const FLAG_PONG: u8 = 0x40;
const KNOWN_FLAGS: u8 = 0x7f;

/// MatrixOne's limit: a 100 MiB body plus 10 MiB for headers.
pub const DEFAULT_MAX_FRAME_LEN: usize = 110 * 1024 * 1024;

/// Bytes of the trace header after its length byte: trace id and span id.
const TRACE_LEN: u8 = 24;

/// A trace and span id, carried in every frame with custom headers.
/// cnpool does not trace through MatrixOne, so it sends zeros, as a Go
/// client without a span does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
}

/// The custom headers: how long the receiver may work on the message, and
/// the trace it belongs to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CustomHeaders {
    /// Remaining time until the sender's deadline, in nanoseconds.
    pub timeout_ns: i64,
    pub trace: TraceContext,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// A request or response; the body is a protobuf message.
    Message,
    /// A keep-alive probe; the body is the sender's u64 id.
    Ping,
    /// The answer to a ping, echoing its id.
    Pong,
}

/// One decoded (or to be encoded) frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub kind: FrameKind,
    /// Whether the frame carries (or carried) a checksum.
    pub checksum: bool,
    /// `Some` sets the payload flag, even when the payload is empty, as
    /// MatrixOne's log service messages always do.
    pub payload: Option<Bytes>,
    pub headers: Option<CustomHeaders>,
    pub stream_sequence: Option<u32>,
    /// The body, decompressed.
    pub body: Bytes,
}

impl Frame {
    /// A ping with `id`, checksummed and with headers like every other frame.
    pub fn ping(id: u64, headers: CustomHeaders) -> Self {
        Self::control(FrameKind::Ping, id, headers)
    }

    /// The answer to a ping with `id`.
    pub fn pong(id: u64, headers: CustomHeaders) -> Self {
        Self::control(FrameKind::Pong, id, headers)
    }

    fn control(kind: FrameKind, id: u64, headers: CustomHeaders) -> Self {
        Self {
            kind,
            checksum: true,
            payload: None,
            headers: Some(headers),
            stream_sequence: None,
            body: Bytes::copy_from_slice(&id.to_be_bytes()),
        }
    }

    /// The id of a ping or pong.
    pub fn control_id(&self) -> Result<u64, FrameError> {
        let bytes: [u8; 8] =
            self.body.as_ref().try_into().map_err(|_| FrameError::BadControlBody { len: self.body.len() })?;
        Ok(u64::from_be_bytes(bytes))
    }

    fn flags(&self) -> u8 {
        let mut flags = match self.kind {
            FrameKind::Message => 0,
            FrameKind::Ping => FLAG_PING,
            FrameKind::Pong => FLAG_PONG,
        };
        if self.payload.is_some() {
            flags |= FLAG_PAYLOAD;
        }
        if self.checksum {
            flags |= FLAG_CHECKSUM;
        }
        if self.headers.is_some() {
            flags |= FLAG_CUSTOM_HEADERS;
        }
        if self.stream_sequence.is_some() {
            flags |= FLAG_STREAM;
        }
        flags
    }
}

/// Why a frame could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {declared} bytes exceeds the limit of {max} bytes")]
    TooLarge { declared: usize, max: usize },
    #[error("frame of length 0 has no flags byte")]
    Empty,
    #[error("frame ends inside its {field}: {needed} bytes needed, {available} left")]
    Truncated { field: &'static str, needed: usize, available: usize },
    #[error("frame has unknown flag bits {flags:#04x}")]
    UnknownFlags { flags: u8 },
    #[error("frame is both a ping and a pong (flags {flags:#04x})")]
    PingAndPong { flags: u8 },
    #[error("trace header of {len} bytes, expected {TRACE_LEN}")]
    BadTraceHeader { len: u8 },
    #[error("checksum mismatch: frame says {expected:#018x}, content hashes to {actual:#018x}")]
    ChecksumMismatch { expected: u64, actual: u64 },
    #[error("LZ4 block does not decompress: {detail}")]
    Decompress { detail: String },
    #[error("LZ4 block decompresses beyond the limit of {max} bytes")]
    DecompressedTooLarge { max: usize },
    #[error("ping or pong body of {len} bytes, expected 8")]
    BadControlBody { len: usize },
}

/// Encodes and decodes frames under one size limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameCodec {
    max_frame_len: usize,
}

impl Default for FrameCodec {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_LEN)
    }
}

impl FrameCodec {
    /// A codec refusing frames whose length field exceeds `max_frame_len`
    /// (which is itself capped at what the u32 length field can say).
    pub fn new(max_frame_len: usize) -> Self {
        Self { max_frame_len: max_frame_len.min(u32::MAX as usize) }
    }

    /// Appends `frame` to `dst`. Never compresses.
    pub fn encode(&self, frame: &Frame, dst: &mut BytesMut) -> Result<(), FrameError> {
        let payload = frame.payload.as_ref().map(Bytes::as_ref).unwrap_or_default();
        let len = 1
            + if frame.checksum { 8 } else { 0 }
            + if frame.payload.is_some() { 4 } else { 0 }
            + if frame.headers.is_some() { 8 + 1 + usize::from(TRACE_LEN) } else { 0 }
            + if frame.stream_sequence.is_some() { 4 } else { 0 }
            + frame.body.len()
            + payload.len();
        if len > self.max_frame_len {
            return Err(FrameError::TooLarge { declared: len, max: self.max_frame_len });
        }
        let payload_len = u32::try_from(payload.len())
            .map_err(|_| FrameError::TooLarge { declared: len, max: self.max_frame_len })?;
        dst.reserve(4 + len);
        // `len` fits: it is at most `max_frame_len`, itself at most u32::MAX.
        dst.put_u32(len as u32);
        dst.put_u8(frame.flags());
        if frame.checksum {
            dst.put_u64(checksum(&frame.body, payload));
        }
        if frame.payload.is_some() {
            dst.put_u32(payload_len);
        }
        if let Some(headers) = &frame.headers {
            dst.put_i64(headers.timeout_ns);
            dst.put_u8(TRACE_LEN);
            dst.put_slice(&headers.trace.trace_id);
            dst.put_slice(&headers.trace.span_id);
        }
        if let Some(sequence) = frame.stream_sequence {
            dst.put_u32(sequence);
        }
        dst.put_slice(&frame.body);
        dst.put_slice(payload);
        Ok(())
    }

    /// Takes one whole frame off the front of `src`, or returns `None` when
    /// more bytes are needed. On an error the stream is unusable.
    pub fn decode(&self, src: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        let Some(length_field) = src.get(..4) else {
            return Ok(None);
        };
        let mut length_field = length_field;
        let declared = length_field.get_u32() as usize;
        if declared > self.max_frame_len {
            return Err(FrameError::TooLarge { declared, max: self.max_frame_len });
        }
        if declared == 0 {
            return Err(FrameError::Empty);
        }
        let total = 4 + declared;
        if src.len() < total {
            // Bounded by the limit checked above.
            src.reserve(total - src.len());
            return Ok(None);
        }
        src.advance(4);
        let content = src.split_to(declared).freeze();
        self.parse(content).map(Some)
    }

    /// Decodes the bytes after the length field of one frame.
    pub fn parse(&self, mut content: Bytes) -> Result<Frame, FrameError> {
        let flags = take_u8(&mut content, "flags")?;
        if flags & !KNOWN_FLAGS != 0 {
            return Err(FrameError::UnknownFlags { flags });
        }
        let kind = match (flags & FLAG_PING != 0, flags & FLAG_PONG != 0) {
            (false, false) => FrameKind::Message,
            (true, false) => FrameKind::Ping,
            (false, true) => FrameKind::Pong,
            (true, true) => return Err(FrameError::PingAndPong { flags }),
        };
        let expected_checksum =
            if flags & FLAG_CHECKSUM != 0 { Some(take_array::<8>(&mut content, "checksum")?) } else { None };
        let payload_len = if flags & FLAG_PAYLOAD != 0 {
            Some(u32::from_be_bytes(take_array::<4>(&mut content, "payload length")?) as usize)
        } else {
            None
        };
        let headers = if flags & FLAG_CUSTOM_HEADERS != 0 {
            let timeout_ns = i64::from_be_bytes(take_array::<8>(&mut content, "deadline header")?);
            let trace_len = take_u8(&mut content, "trace header length")?;
            if trace_len != TRACE_LEN {
                return Err(FrameError::BadTraceHeader { len: trace_len });
            }
            let trace_id = take_array::<16>(&mut content, "trace id")?;
            let span_id = take_array::<8>(&mut content, "span id")?;
            Some(CustomHeaders { timeout_ns, trace: TraceContext { trace_id, span_id } })
        } else {
            None
        };
        let stream_sequence = if flags & FLAG_STREAM != 0 {
            Some(u32::from_be_bytes(take_array::<4>(&mut content, "stream sequence")?))
        } else {
            None
        };
        let payload_len_value = payload_len.unwrap_or(0);
        if payload_len_value > content.len() {
            return Err(FrameError::Truncated {
                field: "payload",
                needed: payload_len_value,
                available: content.len(),
            });
        }
        let mut body = content;
        let mut payload = body.split_off(body.len() - payload_len_value);
        if let Some(expected) = expected_checksum.map(u64::from_be_bytes) {
            let actual = checksum(&body, &payload);
            if actual != expected {
                return Err(FrameError::ChecksumMismatch { expected, actual });
            }
        }
        if flags & FLAG_COMPRESSED != 0 {
            body = self.decompress(&body)?;
            payload = self.decompress(&payload)?;
        }
        Ok(Frame {
            kind,
            checksum: expected_checksum.is_some(),
            payload: payload_len.map(|_| payload),
            headers,
            stream_sequence,
            body,
        })
    }

    /// Decompresses one LZ4 block. The block does not say how large it
    /// decompresses, so grow the output by doubling, never past the limit.
    fn decompress(&self, block: &[u8]) -> Result<Bytes, FrameError> {
        if block.is_empty() {
            return Ok(Bytes::new());
        }
        let mut capacity = block.len().saturating_mul(2).min(self.max_frame_len);
        loop {
            let mut out = vec![0u8; capacity];
            match lz4_flex::block::decompress_into(block, &mut out) {
                Ok(written) => {
                    out.truncate(written);
                    return Ok(Bytes::from(out));
                }
                Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) => {
                    if capacity >= self.max_frame_len {
                        return Err(FrameError::DecompressedTooLarge { max: self.max_frame_len });
                    }
                    capacity = capacity.saturating_mul(2).min(self.max_frame_len);
                }
                Err(error) => return Err(FrameError::Decompress { detail: error.to_string() }),
            }
        }
    }
}

fn checksum(body: &[u8], payload: &[u8]) -> u64 {
    let mut hasher = xxhash_rust::xxh64::Xxh64::new(0);
    hasher.update(body);
    hasher.update(payload);
    hasher.digest()
}

fn take_u8(content: &mut Bytes, field: &'static str) -> Result<u8, FrameError> {
    take_array::<1>(content, field).map(|[byte]| byte)
}

fn take_array<const N: usize>(content: &mut Bytes, field: &'static str) -> Result<[u8; N], FrameError> {
    let bytes: [u8; N] = content.get(..N).and_then(|slice| slice.try_into().ok()).ok_or(FrameError::Truncated {
        field,
        needed: N,
        available: content.len(),
    })?;
    content.advance(N);
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(body: &[u8]) -> Frame {
        Frame {
            kind: FrameKind::Message,
            checksum: true,
            payload: Some(Bytes::new()),
            headers: Some(CustomHeaders::default()),
            stream_sequence: None,
            body: Bytes::copy_from_slice(body),
        }
    }

    fn encoded(frame: &Frame) -> BytesMut {
        let mut buf = BytesMut::new();
        FrameCodec::default().encode(frame, &mut buf).unwrap();
        buf
    }

    #[test]
    fn a_frame_round_trips_and_leaves_what_follows() {
        let frame = Frame { stream_sequence: Some(7), ..message(b"\x08\x01") };
        let mut buf = encoded(&frame);
        buf.extend_from_slice(&[0, 0]);
        assert_eq!(FrameCodec::default().decode(&mut buf).unwrap(), Some(frame));
        assert_eq!(&buf[..], &[0, 0]);
    }

    #[test]
    fn an_incomplete_frame_waits_for_more_bytes() {
        let full = encoded(&message(b"\x08\x01"));
        for cut in 0..full.len() {
            let mut partial = BytesMut::from(&full[..cut]);
            assert_eq!(FrameCodec::default().decode(&mut partial), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn a_declared_length_beyond_the_limit_is_refused_before_reserving() {
        let codec = FrameCodec::new(64);
        let mut buf = BytesMut::with_capacity(8);
        buf.put_u32(65);
        assert_eq!(codec.decode(&mut buf), Err(FrameError::TooLarge { declared: 65, max: 64 }));
        assert_eq!(buf.capacity(), 8);
    }

    #[test]
    fn encoding_beyond_the_limit_is_refused() {
        let codec = FrameCodec::new(40);
        let mut buf = BytesMut::new();
        assert!(matches!(codec.encode(&message(&[0; 40]), &mut buf), Err(FrameError::TooLarge { .. })));
        assert!(buf.is_empty());
    }

    #[test]
    fn a_corrupted_body_fails_the_checksum() {
        let mut buf = encoded(&message(b"\x08\x01"));
        let last = buf.len() - 1;
        buf[last] ^= 0xff;
        assert!(matches!(FrameCodec::default().decode(&mut buf), Err(FrameError::ChecksumMismatch { .. })));
    }

    #[test]
    fn a_compressed_body_and_payload_are_decompressed() {
        let body = b"a body that repeats, repeats, repeats, repeats, repeats".repeat(4);
        let payload = b"payload payload payload payload".repeat(3);
        let compressed_body = lz4_flex::block::compress(&body);
        let compressed_payload = lz4_flex::block::compress(&payload);
        // Build by hand: flags payload|checksum|lz4, checksum of the
        // compressed bytes, payload length of the compressed payload.
        let mut content = BytesMut::new();
        content.put_u8(FLAG_PAYLOAD | FLAG_CHECKSUM | FLAG_COMPRESSED);
        content.put_u64(checksum(&compressed_body, &compressed_payload));
        content.put_u32(compressed_payload.len() as u32);
        content.put_slice(&compressed_body);
        content.put_slice(&compressed_payload);
        let frame = FrameCodec::default().parse(content.freeze()).unwrap();
        assert_eq!(frame.body, Bytes::from(body));
        assert_eq!(frame.payload, Some(Bytes::from(payload)));
    }

    #[test]
    fn decompression_stops_at_the_limit() {
        let body = vec![0u8; 10_000];
        let compressed = lz4_flex::block::compress(&body);
        let mut content = BytesMut::new();
        content.put_u8(FLAG_COMPRESSED);
        content.put_slice(&compressed);
        let codec = FrameCodec::new(1_000);
        assert_eq!(codec.parse(content.freeze()), Err(FrameError::DecompressedTooLarge { max: 1_000 }));
    }

    #[test]
    fn ping_and_pong_carry_their_id() {
        let mut buf = encoded(&Frame::ping(0x0102_0304_0506_0708, CustomHeaders::default()));
        let ping = FrameCodec::default().decode(&mut buf).unwrap().unwrap();
        assert_eq!(ping.kind, FrameKind::Ping);
        assert_eq!(ping.control_id(), Ok(0x0102_0304_0506_0708));
        let pong = Frame::pong(9, CustomHeaders::default());
        assert_eq!(pong.flags(), FLAG_PONG | FLAG_CHECKSUM | FLAG_CUSTOM_HEADERS);
        assert_eq!(message(b"\x01").control_id(), Err(FrameError::BadControlBody { len: 1 }));
    }

    #[test]
    fn malformed_headers_are_named() {
        let codec = FrameCodec::default();
        assert_eq!(codec.parse(Bytes::from_static(&[0x80])), Err(FrameError::UnknownFlags { flags: 0x80 }));
        assert_eq!(codec.parse(Bytes::from_static(&[0x60])), Err(FrameError::PingAndPong { flags: 0x60 }));
        assert_eq!(
            codec.parse(Bytes::from_static(&[0x02, 1, 2])),
            Err(FrameError::Truncated { field: "checksum", needed: 8, available: 2 })
        );
        let mut bad_trace = vec![0x04];
        bad_trace.extend_from_slice(&[0; 8]);
        bad_trace.push(16);
        assert_eq!(codec.parse(Bytes::from(bad_trace)), Err(FrameError::BadTraceHeader { len: 16 }));
        assert_eq!(
            codec.parse(Bytes::from_static(&[0x01, 0, 0, 0, 5, 1])),
            Err(FrameError::Truncated { field: "payload", needed: 5, available: 1 })
        );
        let mut zero = BytesMut::from(&[0u8, 0, 0, 0][..]);
        assert_eq!(codec.decode(&mut zero), Err(FrameError::Empty));
    }
}
