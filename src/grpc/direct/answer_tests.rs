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
