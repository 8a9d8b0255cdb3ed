#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

//! Random and truncated input to the frame decoder and the message
//! decoders: they must never panic, and never reserve memory for a frame
//! the limit refuses.

use bytes::{BufMut, Bytes, BytesMut};
use cnpool_morpc::frame::{CustomHeaders, FLAG_COMPRESSED, Frame, FrameCodec, FrameError, FrameKind, TraceContext};
use cnpool_morpc::proto::{LockResponse, LogServiceResponse, MoError, QueryResponse};
use proptest::prelude::*;
use prost::Message as _;

const LIMIT: usize = 4096;

fn frames() -> impl Strategy<Value = Frame> {
    let kind = prop_oneof![Just(FrameKind::Message), Just(FrameKind::Ping), Just(FrameKind::Pong)];
    let headers = proptest::option::of((any::<i64>(), any::<[u8; 16]>(), any::<[u8; 8]>()).prop_map(
        |(timeout_ns, trace_id, span_id)| CustomHeaders { timeout_ns, trace: TraceContext { trace_id, span_id } },
    ));
    (
        kind,
        any::<bool>(),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
        headers,
        proptest::option::of(any::<u32>()),
        proptest::collection::vec(any::<u8>(), 0..256),
    )
        .prop_map(|(kind, checksum, payload, headers, stream_sequence, body)| Frame {
            kind,
            checksum,
            payload: payload.map(Bytes::from),
            headers,
            stream_sequence,
            body: Bytes::from(body),
        })
}

/// Feeds `input` to the decoder until it stops, as a connection would.
fn decode_all(codec: &FrameCodec, input: &[u8]) -> (Vec<Frame>, Option<FrameError>, usize) {
    let mut buffer = BytesMut::from(input);
    let mut frames = Vec::new();
    loop {
        match codec.decode(&mut buffer) {
            Ok(Some(frame)) => frames.push(frame),
            Ok(None) => return (frames, None, buffer.capacity()),
            Err(error) => return (frames, Some(error), buffer.capacity()),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic_nor_grow_the_buffer_past_the_limit(input in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let (_, _, capacity) = decode_all(&FrameCodec::new(LIMIT), &input);
        // Reserving room for one frame of at most the limit may at most
        // double what the buffer had.
        prop_assert!(capacity <= 2 * (input.len().max(4 + LIMIT)));
    }

    #[test]
    fn random_frame_contents_never_panic(flags in any::<u8>(), rest in proptest::collection::vec(any::<u8>(), 0..512)) {
        let content = [vec![flags], rest].concat();
        let _ = FrameCodec::new(LIMIT).parse(Bytes::from(content));
    }

    #[test]
    fn random_compressed_bodies_never_panic(rest in proptest::collection::vec(any::<u8>(), 0..512)) {
        let content = [vec![FLAG_COMPRESSED], rest].concat();
        if let Ok(frame) = FrameCodec::new(LIMIT).parse(Bytes::from(content)) {
            prop_assert!(frame.body.len() <= LIMIT);
        }
    }

    #[test]
    fn a_declared_length_over_the_limit_is_refused_before_reserving(
        declared in (LIMIT as u32 + 1)..=u32::MAX,
        rest in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut buffer = BytesMut::with_capacity(4 + rest.len());
        buffer.put_u32(declared);
        buffer.put_slice(&rest);
        let capacity = buffer.capacity();
        prop_assert_eq!(
            FrameCodec::new(LIMIT).decode(&mut buffer),
            Err(FrameError::TooLarge { declared: declared as usize, max: LIMIT })
        );
        prop_assert_eq!(buffer.capacity(), capacity);
    }

    #[test]
    fn frames_round_trip_and_every_truncation_waits_or_fails(frame in frames(), cut_at in any::<prop::sample::Index>()) {
        let codec = FrameCodec::new(LIMIT);
        let mut encoded = BytesMut::new();
        codec.encode(&frame, &mut encoded).unwrap();
        let (decoded, error, _) = decode_all(&codec, &encoded);
        prop_assert_eq!(error, None);
        prop_assert_eq!(decoded, vec![frame]);

        // Cut anywhere inside the frame: the stream decoder waits for the rest.
        let cut = cut_at.index(encoded.len());
        let (decoded, error, _) = decode_all(&codec, &encoded[..cut]);
        prop_assert!(decoded.is_empty());
        prop_assert_eq!(error, None);
        // The same bytes taken as a whole frame do not panic the parser
        // (without a checksum a shorter body may even parse).
        if cut > 4 {
            let _ = codec.parse(Bytes::copy_from_slice(&encoded[4..cut]));
        }
    }

    #[test]
    fn random_bodies_never_panic_the_message_decoders(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = LogServiceResponse::decode(body.as_slice());
        let _ = LockResponse::decode(body.as_slice());
        let _ = QueryResponse::decode(body.as_slice());
        let _ = MoError::decode(body.as_slice());
    }
}
