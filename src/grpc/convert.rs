//! Between the gRPC messages and the operations' ProtoJSON.
//!
//! The operations take and give the ProtoJSON of `a2a.proto` — the HTTP+JSON binding's
//! bodies — so the gRPC binding transcodes instead of carrying a second copy of the
//! decoding and encoding rules: a request's protobuf is re-read as its ProtoJSON twin
//! (`a2a_pb::protojson`, the same messages with pbjson's serde) and turned into JSON; a
//! result's JSON is read into the twin and re-encoded as the response's protobuf. The
//! two type sets share the wire format, so the hop between them is a protobuf encode and
//! decode. Whatever the JSON decoders refuse is refused here alike, with the same error.

use prost::Message;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::Error;

/// The ProtoJSON of a request message, through its twin type `J`.
pub fn to_json<J>(message: &impl Message) -> Result<Value, Error>
where
    J: Message + Default + Serialize,
{
    let twin = J::decode(message.encode_to_vec().as_slice())
        .map_err(|e| Error::invalid_params(format!("request: {e}")))?;
    serde_json::to_value(twin).map_err(|e| Error::invalid_params(format!("request: {e}")))
}

/// The message `P` whose ProtoJSON is `value`, read through its twin type `J`. A result
/// the twin cannot read is a fault of this server, not of the client.
pub fn from_json<J, P>(value: Value) -> Result<P, Error>
where
    J: Message + DeserializeOwned,
    P: Message + Default,
{
    let twin: J = serde_json::from_value(value)
        .map_err(|e| Error::internal(format!("gRPC response does not fit a2a.proto: {e}")))?;
    P::decode(twin.encode_to_vec().as_slice())
        .map_err(|e| Error::internal(format!("gRPC response transcoding: {e}")))
}

#[cfg(test)]
mod tests {
    use a2a_pb::{proto, protojson};
    use serde_json::json;

    use super::*;

    #[test]
    fn a_request_reads_as_its_protojson() {
        let request = proto::SendMessageRequest {
            message: Some(proto::Message {
                message_id: "m-1".into(),
                role: proto::Role::User as i32,
                parts: vec![proto::Part {
                    content: Some(proto::part::Content::Text("hi".into())),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            configuration: Some(proto::SendMessageConfiguration {
                history_length: Some(2),
                ..Default::default()
            }),
            ..Default::default()
        };
        let value = to_json::<protojson::SendMessageRequest>(&request).unwrap();
        assert_eq!(value["message"]["messageId"], "m-1");
        assert_eq!(value["message"]["role"], "ROLE_USER");
        assert_eq!(value["message"]["parts"][0]["text"], "hi");
        assert_eq!(value["configuration"]["historyLength"], 2);
    }

    #[test]
    fn a_result_reads_back_as_its_message() {
        let task = json!({
            "id": "t-1",
            "contextId": "c-1",
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-11-23T12:00:00.123Z"},
            "artifacts": [{"artifactId": "a-1", "parts": [{"data": {"k": [1, true, null]}}]}],
            "metadata": {"x": "y"},
        });
        let task: proto::Task = from_json::<protojson::Task, _>(task).unwrap();
        assert_eq!(task.id, "t-1");
        let status = task.status.unwrap();
        assert_eq!(status.state, proto::TaskState::Completed as i32);
        assert_eq!(status.timestamp.unwrap().nanos, 123_000_000);
        assert!(task.artifacts[0].parts[0].content.is_some());
    }

    #[test]
    fn a_result_that_does_not_fit_is_an_internal_error() {
        let e = from_json::<protojson::Task, proto::Task>(json!({"status": {"state": "NOPE"}}))
            .unwrap_err();
        assert!(matches!(e, Error::Internal(_)), "{e}");
    }
}
