//! The protobuf codec of `lf.a2a.v1.A2AService`: prost's encoder for the answers, and a
//! request decoder that never fails the call itself.
//!
//! tonic's `ProstCodec` (the one the generated server hard-codes) turns request bytes
//! that are not the method's message into an `INTERNAL` status before the service sees
//! the call: a client's mistake reported as the server's, without an `ErrorInfo`, and
//! ahead of the gate. Here the decoder hands the failure on as the call's message
//! ([`Decoded`]), so the service answers it like every other bad input: after the gate,
//! `INVALID_ARGUMENT` with `INVALID_PARAMS`, logged and counted under its method.
//!
//! Only the message's protobuf is this codec's: the framing around it (length prefix,
//! compression flag, the size limit) stays tonic's.

use std::marker::PhantomData;

use prost::Message;
use prost::bytes::Buf;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

use crate::error::Error;

/// The capacity an answer stream's encode buffer starts with. tonic allocates it when the
/// call's response body is built and keeps it, 8 KiB by default, for as long as the stream
/// is open, even when it only waits for its next event: at 256 bytes an idle event stream
/// holds little, and a larger message grows the buffer as it is encoded.
const ENCODE_BUFFER_BYTES: usize = 256;
/// Encoded bytes gathered before they are handed to HTTP/2 (tonic's default).
const ENCODE_YIELD_THRESHOLD: usize = 32 * 1024;

/// A request message as decoded: the message, or why its bytes are not one.
pub type Decoded<M> = Result<M, Error>;

/// Answers `R`, reads requests `M` as [`Decoded`].
pub struct A2aCodec<R, M> {
    // A `fn` type keeps the codec `Send + Sync` whatever the messages are.
    _messages: PhantomData<fn(R) -> M>,
}

impl<R, M> Default for A2aCodec<R, M> {
    fn default() -> Self {
        Self {
            _messages: PhantomData,
        }
    }
}

impl<R, M> Codec for A2aCodec<R, M>
where
    R: Message + Send + 'static,
    M: Message + Default + Send + 'static,
{
    type Encode = R;
    type Decode = Decoded<M>;
    type Encoder = ProstEncoder<R>;
    type Decoder = RequestDecoder<M>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::new(
            ENCODE_BUFFER_BYTES,
            ENCODE_YIELD_THRESHOLD,
        ))
    }

    fn decoder(&mut self) -> Self::Decoder {
        RequestDecoder {
            _message: PhantomData,
        }
    }
}

/// Decodes one request message, its failure included.
pub struct RequestDecoder<M> {
    _message: PhantomData<fn() -> M>,
}

impl<M: Message + Default> Decoder for RequestDecoder<M> {
    type Item = Decoded<M>;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        Ok(Some(decode_request(buf)))
    }
}

/// Reads all of `buf` as one `M`.
fn decode_request<M: Message + Default>(buf: &mut impl Buf) -> Decoded<M> {
    let decoded =
        M::decode(&mut *buf).map_err(|e| Error::invalid_params(format!("request message: {e}")));
    // A message that stopped decoding midway leaves the rest of its frame unread; the
    // stream would take those bytes for the next frame's header.
    buf.advance(buf.remaining());
    decoded
}

#[cfg(test)]
mod tests {
    use a2a_pb::proto;
    use prost::bytes::BytesMut;

    use super::*;

    fn decode(bytes: &[u8]) -> (Decoded<proto::GetTaskRequest>, usize) {
        let mut buf = BytesMut::from(bytes);
        let decoded = decode_request(&mut buf);
        (decoded, buf.len())
    }

    #[test]
    fn a_message_decodes_and_its_frame_is_consumed() {
        let request = proto::GetTaskRequest {
            id: "t-1".into(),
            ..Default::default()
        };
        let (decoded, left) = decode(&request.encode_to_vec());
        assert_eq!(decoded, Ok(request));
        assert_eq!(left, 0);
    }

    #[test]
    fn bytes_that_are_not_the_message_are_invalid_params_and_consumed_whole() {
        // A truncated length-delimited field after a valid one: decoding stops midway.
        let (decoded, left) = decode(&[0x0a, 0x01, b't', 0x7a, 0x64, 1, 2, 3]);
        match decoded {
            Err(Error::InvalidParams(text)) => {
                assert!(text.starts_with("request message: "), "{text}")
            }
            other => panic!("expected invalid params, got {other:?}"),
        }
        assert_eq!(left, 0);
    }
}
