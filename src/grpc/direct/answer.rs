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
mod tests {
    //! The answers written straight from the domain (`answer.rs`) against the ProtoJSON
    //! road, over generated tasks, outcomes and events: the same protobuf, byte for byte, or
    //! both refuse.

    use a2a_pb::protojson;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;
    use crate::a2a::strategies::taken;
    use crate::a2a::{encode_send_outcome, encode_task};
    use crate::domain::{ContextId, MessageId, Role, TaskId, TaskState, TenantId, Transition};
    use crate::grpc::convert::frame_by_protojson;
    use crate::grpc::convert::from_json;

    /// Holds the direct road to the ProtoJSON road: where it writes a message, the same
    /// bytes; where it declines, the ProtoJSON road refuses too.
    fn same<P: prost::Message>(
        direct: Option<P>,
        general: Result<P, crate::error::Error>,
    ) -> Result<(), TestCaseError> {
        match (direct, general) {
            (Some(direct), Ok(general)) => {
                prop_assert_eq!(direct.encode_to_vec(), general.encode_to_vec());
            }
            (None, Err(_)) => {}
            (Some(_), Err(e)) => {
                return Err(TestCaseError::fail(format!(
                    "the ProtoJSON road refuses: {e}"
                )));
            }
            (None, Ok(_)) => {
                return Err(TestCaseError::fail(
                    "declined what the ProtoJSON road carries",
                ));
            }
        }
        Ok(())
    }

    fn id() -> impl Strategy<Value = String> {
        prop_oneof![8 => "[a-z0-9\\-]{1,12}", 1 => "[^\\pC]{1,6}"]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let exact = (1u64 << 53) as i64;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (-1000i64..1000).prop_map(Value::from),
            prop_oneof![
                Just(exact - 1),
                Just(exact),
                Just(-exact + 1),
                Just(-exact),
                Just(i64::MIN)
            ]
            .prop_map(Value::from),
            Just(Value::from(u64::MAX)),
            any::<f64>().prop_map(Value::from),
            Just(json!(-0.0)),
            "\\PC{0,6}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,3}", inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn metadata() -> impl Strategy<Value = Option<Metadata>> {
        let key = prop_oneof![
            6 => "[a-z]{1,3}",
            1 => Just(TRANSITIONS_KEY.to_owned()),
            1 => Just(EVENT_ID_KEY.to_owned()),
        ];
        prop::option::weighted(
            0.4,
            prop::collection::btree_map(key, json_value(), 0..3)
                .prop_map(|m| m.into_iter().collect::<Metadata>()),
        )
    }

    fn timestamp() -> impl Strategy<Value = Timestamp> {
        prop_oneof![
            12 => 0i64..4_000_000_000_000,
            1 => -100_000i64..0,
            1 => Just(253_402_300_799_999),  // 9999-12-31T23:59:59.999Z
            1 => Just(253_402_300_800_000),  // 10000-01-01
            1 => Just(-62_167_219_200_000),  // 0000-01-01
            1 => Just(-62_167_219_200_001),  // the year -1
            1 => Just(i64::MAX),
            1 => Just(i64::MIN),
        ]
        .prop_map(Timestamp)
    }

    fn state() -> impl Strategy<Value = TaskState> {
        prop::sample::select(TaskState::ALL.to_vec())
    }

    fn optional_text() -> impl Strategy<Value = Option<String>> {
        prop_oneof![4 => Just(None), 1 => Just(Some(String::new())), 2 => id().prop_map(Some)]
    }

    fn part() -> impl Strategy<Value = Part> {
        let content = prop_oneof![
            8 => "\\PC{0,8}".prop_map(PartContent::Text),
            2 => prop::collection::vec(any::<u8>(), 0..6).prop_map(PartContent::Raw),
            2 => id().prop_map(PartContent::Url),
            4 => json_value().prop_map(PartContent::Data),
        ];
        (content, optional_text(), optional_text(), metadata()).prop_map(
            |(content, filename, media_type, metadata)| Part {
                content,
                filename,
                media_type,
                metadata,
            },
        )
    }

    prop_compose! {
        fn message()(
            message_id in id(),
            context_id in prop::option::of(id()),
            task_id in prop::option::of(id()),
            agent in any::<bool>(),
            parts in prop::collection::vec(part(), 0..3),
            metadata in metadata(),
            extensions in prop::collection::vec(id(), 0..2),
            reference_task_ids in prop::collection::vec(id(), 0..2),
        ) -> Message {
            Message {
                message_id: MessageId::parse(message_id).unwrap(),
                context_id: context_id.map(|id| ContextId::parse(id).unwrap()),
                task_id: task_id.map(|id| TaskId::parse(id).unwrap()),
                role: if agent { Role::Agent } else { Role::User },
                parts,
                metadata,
                extensions,
                reference_task_ids: reference_task_ids
                    .into_iter()
                    .map(|id| TaskId::parse(id).unwrap())
                    .collect(),
            }
        }
    }

    prop_compose! {
        fn status()(
            state in state(),
            message in prop::option::weighted(0.5, message()),
            timestamp in timestamp(),
        ) -> TaskStatus {
            TaskStatus { state, message, timestamp }
        }
    }

    prop_compose! {
        fn artifact()(
            artifact_id in prop_oneof![8 => id(), 1 => Just(String::new())],
            name in optional_text(),
            description in optional_text(),
            parts in prop::collection::vec(part(), 0..3),
            metadata in metadata(),
            extensions in prop::collection::vec(id(), 0..2),
        ) -> Artifact {
            Artifact { artifact_id, name, description, parts, metadata, extensions }
        }
    }

    prop_compose! {
        fn task()(
            id in id(),
            context_id in id(),
            status in status(),
            artifacts in prop::collection::vec(artifact(), 0..3),
            history in prop::collection::vec(message(), 0..3),
            metadata in metadata(),
            transitions in prop::collection::vec((state(), timestamp()), 0..3),
        ) -> Task {
            Task {
                id: TaskId::parse(id).unwrap(),
                context_id: ContextId::parse(context_id).unwrap(),
                tenant: TenantId::default_tenant(),
                status,
                artifacts,
                history,
                metadata,
                transitions: transitions
                    .into_iter()
                    .map(|(state, timestamp)| Transition { state, timestamp })
                    .collect(),
                created_at: Timestamp(0),
                updated_at: Timestamp(0),
                generation: 1,
            }
        }
    }

    fn outcome() -> impl Strategy<Value = SendOutcome> {
        prop_oneof![
            task().prop_map(SendOutcome::Task),
            message().prop_map(SendOutcome::Message),
        ]
    }

    fn event() -> impl Strategy<Value = StreamEvent> {
        prop_oneof![
            task().prop_map(|task| StreamEvent::Task { task }),
            message().prop_map(|message| StreamEvent::Message { message }),
            (id(), id(), status(), metadata()).prop_map(|(task, context, status, metadata)| {
                StreamEvent::StatusUpdate {
                    task_id: TaskId::parse(task).unwrap(),
                    context_id: ContextId::parse(context).unwrap(),
                    status,
                    metadata,
                }
            }),
            (id(), id(), artifact(), any::<(bool, bool)>(), metadata()).prop_map(
                |(task, context, artifact, (append, last_chunk), metadata)| {
                    StreamEvent::ArtifactUpdate {
                        task_id: TaskId::parse(task).unwrap(),
                        context_id: ContextId::parse(context).unwrap(),
                        artifact,
                        append,
                        last_chunk,
                        metadata,
                    }
                }
            ),
        ]
    }

    /// The generators reach the direct road often, not only its refusals.
    #[test]
    fn the_generated_answers_often_take_the_direct_road() {
        let taken = taken(event(), 500, |event| stream_response(1, event).is_some());
        assert!(taken >= 100, "only {taken} of 500 took the direct road");
    }

    #[test]
    fn a_completed_task_is_written_as_the_protojson_road_writes_it() {
        let context = ContextId::parse("c-1").unwrap();
        let first = Message {
            role: Role::User,
            ..Message::agent(context.clone(), None, vec![Part::text("hi")])
        };
        let mut task = Task::submitted(
            TaskId::parse("t-1").unwrap(),
            context,
            TenantId::default_tenant(),
            first,
            Timestamp(1_764_000_000_123),
        );
        task.artifacts.push(Artifact::new(vec![Part::data(
            json!({"k": [1, true, null]}),
        )]));
        task.metadata = Some(Metadata::from_iter([("x".to_owned(), json!("y"))]));
        let general = from_json::<protojson::Task, proto::Task>(encode_task(Dialect::V1, &task));
        assert_eq!(super::task(&task), Some(general.unwrap()));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn a_task_is_written_as_the_protojson_road_writes_it(task in task()) {
            let general = from_json::<protojson::Task, _>(encode_task(Dialect::V1, &task));
            same(super::task(&task), general)?;
        }

        #[test]
        fn an_outcome_is_written_as_the_protojson_road_writes_it(outcome in outcome()) {
            let value = encode_send_outcome(Dialect::V1, &outcome);
            let general = from_json::<protojson::SendMessageResponse, _>(value);
            same(send_response(&outcome), general)?;
        }

        #[test]
        fn an_event_is_written_as_the_protojson_road_writes_it(
            seq in 0i64..1_000_000,
            event in event(),
        ) {
            same(stream_response(seq, &event), frame_by_protojson(seq, &event))?;
        }
    }
}
