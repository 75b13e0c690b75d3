//! gRPC's framing of a unary call's messages over HTTP/2: a message is a
//! flag byte (compressed or not), its length as four bytes, and its protobuf
//! encoding. Berth never asks for compression, so an answer must not use it.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::{CallError, ChannelError};

/// The most an answer's message may take: the limit tonic's clients keep by
/// default, which a ListVolumes page is sized within.
pub const MAX_ANSWER: usize = 4 << 20;
const PREFIX: usize = 5;

pub fn encode(message: &impl prost::Message) -> Bytes {
    let len = message.encoded_len();
    let mut out = BytesMut::with_capacity(PREFIX + len);
    out.put_u8(0);
    // A request over 4 GiB cannot be made: Berth's own are bounded far below.
    out.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    message.encode_raw(&mut out);
    out.freeze()
}

/// The answer's body in full, handing what is read back to flow control.
/// Usually one data frame, which is kept as it came, not copied.
pub async fn read_body(recv: &mut h2::RecvStream) -> Result<Bytes, CallError> {
    let mut first: Option<Bytes> = None;
    let mut more = BytesMut::new();
    while let Some(data) = recv.data().await {
        let data = data.map_err(ChannelError::Http2)?;
        let _ = recv.flow_control().release_capacity(data.len());
        let held = first.as_ref().map_or(0, Bytes::len) + more.len();
        if held + data.len() > PREFIX + MAX_ANSWER {
            return Err(too_large(held + data.len() - PREFIX));
        }
        match &first {
            None => first = Some(data),
            Some(kept) => {
                if more.is_empty() {
                    more.extend_from_slice(kept);
                }
                more.extend_from_slice(&data);
            }
        }
    }
    Ok(if more.is_empty() {
        first.unwrap_or_default()
    } else {
        more.freeze()
    })
}

/// The one message of a unary answer.
pub fn decode<M: prost::Message + Default>(mut body: Bytes) -> Result<M, CallError> {
    if body.is_empty() {
        return Err(CallError::Invalid("answered OK without a message".into()));
    }
    if body.len() < PREFIX {
        return Err(CallError::Invalid(format!(
            "an answer of {} bytes, shorter than gRPC's message prefix",
            body.len()
        )));
    }
    let compressed = body.get_u8();
    let len = body.get_u32() as usize;
    if compressed != 0 {
        return Err(CallError::Invalid(
            "a compressed answer, though no compression was asked for".into(),
        ));
    }
    if len > MAX_ANSWER {
        return Err(too_large(len));
    }
    if body.len() != len {
        return Err(CallError::Invalid(format!(
            "a unary answer of {} bytes after a message that says it holds {len}",
            body.len()
        )));
    }
    M::decode(body).map_err(|e| CallError::Invalid(format!("the answer does not decode: {e}")))
}

fn too_large(len: usize) -> CallError {
    CallError::Invalid(format!(
        "an answer of at least {len} bytes, over the {} MiB limit",
        MAX_ANSWER >> 20
    ))
}

/// The status of an answer that ended without one: inferred from its HTTP
/// status, as gRPC's own clients do.
pub fn without_status(http: http::StatusCode) -> tonic::Status {
    use http::StatusCode as H;
    use tonic::Code;
    let code = match http {
        H::BAD_REQUEST => Code::Internal,
        H::UNAUTHORIZED => Code::Unauthenticated,
        H::FORBIDDEN => Code::PermissionDenied,
        H::NOT_FOUND => Code::Unimplemented,
        H::TOO_MANY_REQUESTS | H::BAD_GATEWAY | H::SERVICE_UNAVAILABLE | H::GATEWAY_TIMEOUT => {
            Code::Unavailable
        }
        _ => Code::Unknown,
    };
    tonic::Status::new(
        code,
        format!("the answer ended without a grpc-status (HTTP {http})"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto;

    fn info(name: &str) -> proto::GetPluginInfoResponse {
        proto::GetPluginInfoResponse {
            name: name.into(),
            vendor_version: "1.0".into(),
            manifest: Default::default(),
        }
    }

    fn invalid(outcome: Result<proto::GetPluginInfoResponse, CallError>) -> String {
        match outcome {
            Err(CallError::Invalid(why)) => why,
            other => panic!("expected an invalid answer, got {other:?}"),
        }
    }

    #[test]
    fn a_message_framed_is_read_back_whole() {
        let framed = encode(&info("hostpath.berth.dev"));
        assert_eq!(framed[0], 0, "not compressed");
        assert_eq!(
            u32::from_be_bytes(framed[1..5].try_into().unwrap()) as usize,
            framed.len() - PREFIX
        );
        let back: proto::GetPluginInfoResponse = decode(framed).unwrap();
        assert_eq!(back, info("hostpath.berth.dev"));
        let empty: proto::ProbeResponse = decode(encode(&proto::ProbeResponse::default())).unwrap();
        assert_eq!(
            empty,
            proto::ProbeResponse::default(),
            "an empty message is 5 bytes, not none"
        );
    }

    #[test]
    fn answers_out_of_form_are_invalid_not_taken() {
        let framed = encode(&info("a"));
        assert!(invalid(decode(Bytes::new())).contains("without a message"));
        assert!(invalid(decode(framed.slice(..3))).contains("shorter than"));
        assert!(invalid(decode(framed.slice(..framed.len() - 1))).contains("says it holds"));
        let mut two = BytesMut::from(&framed[..]);
        two.extend_from_slice(&framed);
        assert!(
            invalid(decode(two.freeze())).contains("says it holds"),
            "a second message"
        );
        let mut compressed = BytesMut::from(&framed[..]);
        compressed[0] = 1;
        assert!(invalid(decode(compressed.freeze())).contains("compressed"));
        let mut huge = BytesMut::from(&[0u8][..]);
        huge.put_u32(MAX_ANSWER as u32 + 1);
        assert!(invalid(decode(huge.freeze())).contains("4 MiB"));
        let mut garbage = BytesMut::from(&[0u8][..]);
        garbage.put_u32(2);
        garbage.extend_from_slice(&[0xff, 0xff]);
        assert!(invalid(decode(garbage.freeze())).contains("does not decode"));
    }

    #[test]
    fn an_answer_without_a_status_is_inferred_from_http_as_grpc_says() {
        use tonic::Code;
        let code = |n: u16| without_status(http::StatusCode::from_u16(n).unwrap()).code();
        assert_eq!(code(200), Code::Unknown);
        assert_eq!(code(404), Code::Unimplemented);
        assert_eq!(code(503), Code::Unavailable);
        assert_eq!(code(401), Code::Unauthenticated);
        assert_eq!(code(400), Code::Internal);
    }
}
