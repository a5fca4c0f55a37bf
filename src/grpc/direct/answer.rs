//! A send's outcome, a task and a stream event written straight from the domain as the
//! protobuf of `a2a.proto`, without their ProtoJSON in between.
//!
//! They write what the 1.0 dialect's views (`a2a::encode`: `OutcomeWire`, `TaskWire`,
//! `EventWire`) write, in protobuf: states and roles by the dialect's names
//! (`a2a::state_name`, `a2a::role_name`, read as the generated enums), timestamps at the
//! millisecond the RFC 3339 text carries, the task's transitions inside its `metadata`
//! under `TRANSITIONS_KEY`, metadata and data as `google.protobuf.Struct`/`Value`
//! (`value`; `null` data as a part without content, as ProtoJSON reads it), an
//! unset optional string as the empty one. A stream event but a lone
//! message carries its id in its payload's `metadata` under `EVENT_ID_KEY`.
//!
//! Where the ProtoJSON road would refuse the answer (an integer past ±2^53 in metadata
//! or data, a timestamp outside the years 0000–9999) these give `None` and the caller
//! sends the answer that way, so the refusal keeps its one error. The property tests
//! below hold each to the very message the ProtoJSON road makes.

use a2a_pb::proto;
use a2a_pb::proto::part::Content;
use a2a_pb::proto::{send_message_response, stream_response};
use prost_types::value::Kind;

use super::value;
use crate::a2a::{Dialect, TRANSITIONS_KEY, role_name, state_name};
use crate::domain::{
    Artifact, Message, Metadata, Part, PartContent, SendOutcome, StreamEvent, Task, TaskStatus,
    Timestamp,
};
use crate::grpc::EVENT_ID_KEY;

/// A `SendMessage` answer: the task or the message.
pub fn send_response(outcome: &SendOutcome) -> Option<proto::SendMessageResponse> {
    let payload = match outcome {
        SendOutcome::Task(t) => send_message_response::Payload::Task(task(t)?),
        SendOutcome::Message(m) => send_message_response::Payload::Message(message(m)?),
    };
    Some(proto::SendMessageResponse {
        payload: Some(payload),
    })
}

/// A task.
pub fn task(task: &Task) -> Option<proto::Task> {
    named_task(task, None)
}

/// A stream event, named by `seq` in its payload's metadata unless it is a message.
pub fn stream_response(seq: i64, event: &StreamEvent) -> Option<proto::StreamResponse> {
    use stream_response::Payload;
    let payload = match event {
        StreamEvent::Task { task } => Payload::Task(named_task(task, Some(seq))?),
        StreamEvent::Message { message: m } => Payload::Message(message(m)?),
        StreamEvent::StatusUpdate {
            task_id,
            context_id,
            status: s,
            metadata,
        } => Payload::StatusUpdate(proto::TaskStatusUpdateEvent {
            task_id: task_id.as_str().to_owned(),
            context_id: context_id.as_str().to_owned(),
            status: Some(status(s)?),
            metadata: Some(named(metadata.as_ref(), seq)?),
        }),
        StreamEvent::ArtifactUpdate {
            task_id,
            context_id,
            artifact: a,
            append,
            last_chunk,
            metadata,
        } => Payload::ArtifactUpdate(proto::TaskArtifactUpdateEvent {
            task_id: task_id.as_str().to_owned(),
            context_id: context_id.as_str().to_owned(),
            artifact: Some(artifact(a)?),
            append: *append,
            last_chunk: *last_chunk,
            metadata: Some(named(metadata.as_ref(), seq)?),
        }),
    };
    Some(proto::StreamResponse {
        payload: Some(payload),
    })
}

/// A task, its metadata naming the event `seq` when it is a stream's snapshot.
fn named_task(task: &Task, seq: Option<i64>) -> Option<proto::Task> {
    Some(proto::Task {
        id: task.id.as_str().to_owned(),
        context_id: task.context_id.as_str().to_owned(),
        status: Some(status(&task.status)?),
        artifacts: task.artifacts.iter().map(artifact).collect::<Option<_>>()?,
        history: task.history.iter().map(message).collect::<Option<_>>()?,
        metadata: task_metadata(task, seq)?,
    })
}

/// The task's metadata with its transitions (which replace any value of their key the
/// metadata had) and the event id; none when there is nothing to carry.
fn task_metadata(task: &Task, seq: Option<i64>) -> Option<Option<prost_types::Struct>> {
    if task.metadata.is_none() && task.transitions.is_empty() && seq.is_none() {
        return Some(None);
    }
    let transitions = !task.transitions.is_empty();
    let replaced: &[&str] = match (transitions, seq) {
        (true, Some(_)) => &[TRANSITIONS_KEY, EVENT_ID_KEY],
        (true, None) => &[TRANSITIONS_KEY],
        (false, Some(_)) => &[EVENT_ID_KEY],
        (false, None) => &[],
    };
    let mut out = match &task.metadata {
        Some(metadata) => value::from_metadata_but(metadata, replaced)?,
        None => prost_types::Struct::default(),
    };
    if transitions {
        let transitions = task.transitions.iter().map(|t| {
            let fields = [
                ("state", state_name(Dialect::V1, t.state).to_owned()),
                ("timestamp", t.timestamp.to_rfc3339()),
            ];
            struct_value(fields.map(|(key, text)| (key.to_owned(), string(text))))
        });
        let list = prost_types::ListValue {
            values: transitions.collect(),
        };
        out.fields.insert(
            TRANSITIONS_KEY.to_owned(),
            prost_types::Value {
                kind: Some(Kind::ListValue(list)),
            },
        );
    }
    if let Some(seq) = seq {
        out.fields
            .insert(EVENT_ID_KEY.to_owned(), string(seq.to_string()));
    }
    Some(Some(out))
}

/// An event's metadata with its id under [`EVENT_ID_KEY`].
fn named(metadata: Option<&Metadata>, seq: i64) -> Option<prost_types::Struct> {
    let mut out = match metadata {
        Some(metadata) => value::from_metadata_but(metadata, &[EVENT_ID_KEY])?,
        None => prost_types::Struct::default(),
    };
    out.fields
        .insert(EVENT_ID_KEY.to_owned(), string(seq.to_string()));
    Some(out)
}

fn status(s: &TaskStatus) -> Option<proto::TaskStatus> {
    let state = proto::TaskState::from_str_name(state_name(Dialect::V1, s.state))?;
    Some(proto::TaskStatus {
        state: state as i32,
        message: match &s.message {
            Some(m) => Some(message(m)?),
            None => None,
        },
        timestamp: Some(timestamp(s.timestamp)?),
    })
}

/// The instant the status's RFC 3339 text names, which ProtoJSON reads only within the
/// years 0000–9999.
fn timestamp(t: Timestamp) -> Option<prost_types::Timestamp> {
    use chrono::Datelike;
    let t = t.to_datetime();
    if !(0..=9999).contains(&t.year()) {
        return None;
    }
    Some(prost_types::Timestamp {
        seconds: t.timestamp(),
        nanos: i32::try_from(t.timestamp_subsec_nanos()).ok()?,
    })
}

fn message(m: &Message) -> Option<proto::Message> {
    let role = proto::Role::from_str_name(role_name(Dialect::V1, m.role))?;
    Some(proto::Message {
        message_id: m.message_id.as_str().to_owned(),
        context_id: m
            .context_id
            .as_ref()
            .map_or_else(String::new, |id| id.as_str().to_owned()),
        task_id: m
            .task_id
            .as_ref()
            .map_or_else(String::new, |id| id.as_str().to_owned()),
        role: role as i32,
        parts: m.parts.iter().map(part).collect::<Option<_>>()?,
        metadata: metadata(m.metadata.as_ref())?,
        extensions: m.extensions.clone(),
        reference_task_ids: m
            .reference_task_ids
            .iter()
            .map(|id| id.as_str().to_owned())
            .collect(),
    })
}

fn artifact(a: &Artifact) -> Option<proto::Artifact> {
    Some(proto::Artifact {
        artifact_id: a.artifact_id.clone(),
        name: a.name.clone().unwrap_or_default(),
        description: a.description.clone().unwrap_or_default(),
        parts: a.parts.iter().map(part).collect::<Option<_>>()?,
        metadata: metadata(a.metadata.as_ref())?,
        extensions: a.extensions.clone(),
    })
}

fn part(p: &Part) -> Option<proto::Part> {
    let content = match &p.content {
        PartContent::Text(text) => Some(Content::Text(text.clone())),
        PartContent::Raw(bytes) => Some(Content::Raw(bytes.clone())),
        PartContent::Url(url) => Some(Content::Url(url.clone())),
        // ProtoJSON reads `"data": null` as no content at all.
        PartContent::Data(serde_json::Value::Null) => None,
        PartContent::Data(data) => Some(Content::Data(value::from_json(data)?)),
    };
    Some(proto::Part {
        content,
        metadata: metadata(p.metadata.as_ref())?,
        filename: p.filename.clone().unwrap_or_default(),
        media_type: p.media_type.clone().unwrap_or_default(),
    })
}

/// Optional metadata: `Some(None)` when there is none, `None` when it cannot be carried.
fn metadata(m: Option<&Metadata>) -> Option<Option<prost_types::Struct>> {
    match m {
        Some(m) => value::from_metadata(m).map(Some),
        None => Some(None),
    }
}

fn string(text: String) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::StringValue(text)),
    }
}

fn struct_value<const N: usize>(fields: [(String, prost_types::Value); N]) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::StructValue(prost_types::Struct {
            fields: fields.into_iter().collect(),
        })),
    }
}

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;
