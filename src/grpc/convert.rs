//! Between the gRPC messages and the operations' ProtoJSON.
//!
//! The operations take and give the ProtoJSON of `a2a.proto` — the HTTP+JSON binding's
//! bodies — so the gRPC binding transcodes instead of carrying a second copy of the
//! decoding and encoding rules: a request's protobuf is re-read as its ProtoJSON twin
//! (`a2a_pb::protojson`, the same messages with pbjson's serde) and turned into JSON; a
//! result's JSON is read into the twin and re-encoded as the response's protobuf. The
//! two type sets share the wire format, so the hop between them is a protobuf encode and
//! decode. Whatever the JSON decoders refuse is refused here alike, with the same error.
//!
//! The answers the hot methods give most — a send's outcome, a task, a stream event —
//! are written by `direct` instead wherever it carries them exactly (the functions below
//! choose), and through the twin otherwise.

use a2a_pb::{proto, protojson};
use prost::Message;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::direct;
use crate::a2a::{Dialect, encode_stream_event};
use crate::domain::StreamEvent;
use crate::error::Error;
use crate::runtime::SeqEvent;
use crate::service::operation::Body;

/// The `metadata` key of a streamed event's id (its place in the task's durable log).
pub const EVENT_ID_KEY: &str = "urn:agent-a2a:event-id";

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

/// A send's answer: its outcome straight from the domain where [`direct`] carries it,
/// anything else through ProtoJSON.
pub(super) fn send_answer(body: Body) -> Result<proto::SendMessageResponse, Error> {
    if let Body::Outcome(Dialect::V1, outcome) = &body
        && let Some(response) = direct::send_response(outcome)
    {
        return Ok(response);
    }
    from_json::<protojson::SendMessageResponse, _>(body.into_value())
}

/// A task answer: straight from the domain where [`direct`] carries it, anything else
/// through ProtoJSON.
pub(super) fn task_answer(body: Body) -> Result<proto::Task, Error> {
    if let Body::Task(Dialect::V1, task) = &body
        && let Some(task) = direct::task(task)
    {
        return Ok(task);
    }
    from_json::<protojson::Task, _>(body.into_value())
}

/// An answer through its ProtoJSON twin `RJ`.
pub(super) fn by_twin<RJ, R>(body: Body) -> Result<R, Error>
where
    RJ: Message + DeserializeOwned,
    R: Message + Default,
{
    from_json::<RJ, R>(body.into_value())
}

/// One event as a `StreamResponse`, named by its id where SSE names it: straight from
/// the domain where [`direct`] carries it, else through ProtoJSON.
pub(super) fn frame((seq, event): SeqEvent) -> Result<proto::StreamResponse, Error> {
    match direct::stream_response(seq, &event) {
        Some(response) => Ok(response),
        None => frame_by_protojson(seq, &event),
    }
}

/// [`frame`] through the event's ProtoJSON.
pub(super) fn frame_by_protojson(
    seq: i64,
    event: &StreamEvent,
) -> Result<proto::StreamResponse, Error> {
    let mut value = encode_stream_event(Dialect::V1, event);
    if !matches!(event, StreamEvent::Message { .. }) {
        name_event(&mut value, seq);
    }
    from_json::<protojson::StreamResponse, _>(value)
}

/// Writes `seq` into the metadata of the event's payload (`task`, `statusUpdate` or
/// `artifactUpdate`).
fn name_event(value: &mut Value, seq: i64) {
    let Some(payload) = value.as_object_mut().and_then(|o| o.values_mut().next()) else {
        return;
    };
    let Some(payload) = payload.as_object_mut() else {
        return;
    };
    let metadata = payload.entry("metadata").or_insert_with(|| json!({}));
    if let Some(metadata) = metadata.as_object_mut() {
        metadata.insert(EVENT_ID_KEY.into(), Value::String(seq.to_string()));
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn events_are_named_in_their_payload_metadata() {
        let mut status = json!({"statusUpdate": {"taskId": "t", "metadata": {"k": "v"}}});
        name_event(&mut status, 7);
        assert_eq!(status["statusUpdate"]["metadata"][EVENT_ID_KEY], "7");
        assert_eq!(status["statusUpdate"]["metadata"]["k"], "v");
        let mut task = json!({"task": {"id": "t"}});
        name_event(&mut task, 3);
        assert_eq!(task["task"]["metadata"][EVENT_ID_KEY], "3");
    }
}
