//! Cross-dialect specifications: domain -> wire -> domain round trips, and the shape
//! rules each dialect's clients depend on (`kind` only in 0.3 JSON-RPC, `final` only
//! in 0.3, `TASK_STATE_CANCELLED` only in 0.3 REST, empty lists omitted).

use serde_json::{Map, Value, json};

use super::super::*;
use crate::domain::{
    Artifact, ContextId, Message, MessageId, Part, PartContent, Role, SendOutcome, StreamEvent,
    Task, TaskId, TaskPage, TaskState, TaskStatus, TenantId, Timestamp,
};

const ALL: [Dialect; 4] = [Dialect::V1, Dialect::V03Rpc, Dialect::V03Rest, Dialect::V01];

fn ctx() -> ContextId {
    ContextId::parse("ctx-1").unwrap()
}

fn tid() -> TaskId {
    TaskId::parse("task-1").unwrap()
}

/// A user message holding every part kind, in forms every dialect can carry.
fn user_message() -> Message {
    let file = |content| Part {
        content,
        filename: Some("output.txt".into()),
        media_type: Some("text/plain".into()),
        metadata: None,
    };
    Message {
        message_id: MessageId::parse("m-1").unwrap(),
        context_id: Some(ctx()),
        task_id: Some(tid()),
        role: Role::User,
        parts: vec![
            Part::text("hello"),
            file(PartContent::Raw(b"bytes\x00\xff".to_vec())),
            file(PartContent::Url("https://example.com/output.txt".into())),
            Part::data(json!({"key": "value", "count": 42})),
        ],
        metadata: Some(Map::from_iter([("trace".to_owned(), json!("t-9"))])),
        extensions: vec![],
        reference_task_ids: vec![],
    }
}

/// Wraps an encoded message as the dialect's send parameters.
fn send_params(d: Dialect, message: &Message) -> Value {
    let wire = encode_message(d, message);
    match d {
        Dialect::V01 => json!({"id": "task-1", "sessionId": "ctx-1", "message": wire}),
        _ => json!({"message": wire}),
    }
}

#[test]
fn user_messages_round_trip_in_every_dialect() {
    for d in ALL {
        let original = user_message();
        let decoded = decode_send(d, &send_params(d, &original)).unwrap().message;
        let mut expected = original.clone();
        if d == Dialect::V01 {
            // 0.1 messages carry no id; ids come from the request's `id` / `sessionId`.
            expected.message_id = decoded.message_id.clone();
        }
        assert_eq!(decoded, expected, "{d:?}");
    }
}

#[test]
fn v1_round_trip_keeps_every_optional_field() {
    let mut m = user_message();
    m.extensions = vec!["urn:x".into()];
    m.reference_task_ids = vec![TaskId::parse("t-0").unwrap()];
    m.parts[0].media_type = Some("text/markdown".into());
    m.parts[3].metadata = Some(Map::from_iter([("k".to_owned(), json!(true))]));
    let decoded = decode_send(Dialect::V1, &send_params(Dialect::V1, &m)).unwrap();
    assert_eq!(decoded.message, m);
}

fn status(state: TaskState, at: i64) -> TaskStatus {
    TaskStatus {
        state,
        message: None,
        timestamp: Timestamp(at),
    }
}

fn task(state: TaskState) -> Task {
    let mut t = Task::submitted(
        tid(),
        ctx(),
        TenantId::default_tenant(),
        user_message(),
        Timestamp(1_000),
    );
    let mut done = status(state, 2_000);
    done.message = Some(Message::agent(ctx(), Some(tid()), vec![Part::text("done")]));
    t.set_status(done);
    let mut artifact = Artifact::new(vec![Part::text("result")]);
    artifact.artifact_id = "a-1".into();
    artifact.name = Some("answer".into());
    t.apply_artifact(&artifact, false, Timestamp(2_000));
    t
}

fn events(state: TaskState) -> Vec<StreamEvent> {
    let t = task(state);
    vec![
        StreamEvent::Task { task: t.clone() },
        StreamEvent::Message {
            message: t.history[1].clone(),
        },
        StreamEvent::StatusUpdate {
            task_id: tid(),
            context_id: ctx(),
            status: t.status.clone(),
            metadata: None,
        },
        StreamEvent::ArtifactUpdate {
            task_id: tid(),
            context_id: ctx(),
            artifact: t.artifacts[0].clone(),
            append: true,
            last_chunk: false,
            metadata: None,
        },
    ]
}

/// Every object key anywhere in `v`, paired with its value.
fn walk<'a>(v: &'a Value, out: &mut Vec<(&'a str, &'a Value)>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                out.push((k, child));
                walk(child, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
        _ => {}
    }
}

fn keys(v: &Value) -> Vec<&str> {
    let mut out = Vec::new();
    walk(v, &mut out);
    out.into_iter().map(|(k, _)| k).collect()
}

fn everything(d: Dialect, state: TaskState) -> Vec<Value> {
    let t = task(state);
    let mut out = vec![
        encode_task(d, &t),
        encode_send_outcome(d, &SendOutcome::Task(t.clone())),
        encode_send_outcome(d, &SendOutcome::Message(t.history[1].clone())),
    ];
    out.extend(events(state).iter().map(|e| encode_stream_event(d, e)));
    out
}

#[test]
fn v1_output_never_contains_kind_or_final() {
    for state in TaskState::ALL {
        for v in everything(Dialect::V1, state) {
            let k = keys(&v);
            assert!(!k.contains(&"kind") && !k.contains(&"final"), "{v}");
        }
    }
}

#[test]
fn v03_rpc_output_always_carries_kind() {
    let t = encode_task(Dialect::V03Rpc, &task(TaskState::Completed));
    assert_eq!(t["kind"], "task");
    assert_eq!(t["status"]["message"]["kind"], "message");
    assert_eq!(t["history"][0]["kind"], "message");
    assert_eq!(t["history"][0]["parts"][1]["kind"], "file");
    assert_eq!(t["artifacts"][0]["parts"][0]["kind"], "text");
    let kinds: Vec<Value> = events(TaskState::Working)
        .iter()
        .map(|e| encode_stream_event(Dialect::V03Rpc, e)["kind"].clone())
        .collect();
    assert_eq!(
        kinds,
        [
            json!("task"),
            json!("message"),
            json!("status-update"),
            json!("artifact-update")
        ]
    );
}

#[test]
fn zero_point_three_final_marks_the_status_that_ends_the_stream() {
    for state in TaskState::ALL {
        let update = &events(state)[2];
        let rpc = encode_stream_event(Dialect::V03Rpc, update);
        let rest = encode_stream_event(Dialect::V03Rest, update);
        let v01 = encode_stream_event(Dialect::V01, update);
        let expected = state.is_terminal() || state.is_interrupted();
        assert_eq!(rpc["final"], expected, "{state:?}");
        assert_eq!(rest["statusUpdate"]["final"], expected, "{state:?}");
        assert_eq!(v01["final"], expected, "{state:?}");
    }
}

#[test]
fn cancelled_with_two_ls_only_in_v03_rest() {
    for d in ALL {
        let text: String = everything(d, TaskState::Canceled)
            .iter()
            .map(Value::to_string)
            .collect();
        assert_eq!(
            text.contains("TASK_STATE_CANCELLED"),
            d == Dialect::V03Rest,
            "{d:?}"
        );
    }
    let v1 = encode_task(Dialect::V1, &task(TaskState::Canceled));
    assert_eq!(v1["status"]["state"], "TASK_STATE_CANCELED");
}

#[test]
fn v1_task_golden() {
    let mut t = task(TaskState::Completed);
    t.history.truncate(1);
    t.status.message = None;
    t.history[0].parts.truncate(1);
    t.history[0].metadata = None;
    assert_eq!(
        encode_task(Dialect::V1, &t),
        json!({
            "id": "task-1",
            "contextId": "ctx-1",
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "1970-01-01T00:00:02.000Z"},
            "artifacts": [{"artifactId": "a-1", "name": "answer", "parts": [{"text": "result"}]}],
            "history": [{"messageId": "m-1", "contextId": "ctx-1", "taskId": "task-1",
                         "role": "ROLE_USER", "parts": [{"text": "hello"}]}],
            "metadata": {"agent-a2a.transitions": [
                {"state": "TASK_STATE_SUBMITTED", "timestamp": "1970-01-01T00:00:01.000Z"},
                {"state": "TASK_STATE_COMPLETED", "timestamp": "1970-01-01T00:00:02.000Z"},
            ]},
        })
    );
}

#[test]
fn empty_artifacts_and_history_are_omitted() {
    for d in ALL {
        let view = task(TaskState::Working).view(Some(0), false);
        let wire = encode_task(d, &view);
        assert!(wire.get("artifacts").is_none(), "{d:?}: {wire}");
        assert!(wire.get("history").is_none(), "{d:?}: {wire}");
    }
}

#[test]
fn transitions_travel_in_metadata_in_the_dialect_names() {
    let t = task(TaskState::InputRequired);
    let names = |d| {
        encode_task(d, &t)["metadata"][TRANSITIONS_KEY]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["state"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(Dialect::V1),
        ["TASK_STATE_SUBMITTED", "TASK_STATE_INPUT_REQUIRED"]
    );
    assert_eq!(names(Dialect::V03Rpc), ["submitted", "input-required"]);
    assert_eq!(names(Dialect::V01), ["submitted", "input-required"]);
}

#[test]
fn send_outcomes_are_wrapped_per_dialect() {
    let t = task(TaskState::Completed);
    let m = t.history[1].clone();
    let outcome = |d, o: &SendOutcome| encode_send_outcome(d, o);
    let (task_out, msg_out) = (SendOutcome::Task(t), SendOutcome::Message(m));
    assert_eq!(outcome(Dialect::V1, &task_out)["task"]["id"], "task-1");
    assert_eq!(
        outcome(Dialect::V1, &msg_out)["message"]["role"],
        "ROLE_AGENT"
    );
    assert_eq!(
        outcome(Dialect::V03Rest, &task_out)["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(
        outcome(Dialect::V03Rest, &msg_out)["msg"]["content"][0]["text"],
        "done"
    );
    assert_eq!(outcome(Dialect::V03Rpc, &task_out)["kind"], "task");
    assert_eq!(outcome(Dialect::V03Rpc, &msg_out)["kind"], "message");
    assert_eq!(outcome(Dialect::V01, &task_out)["sessionId"], "ctx-1");
}

#[test]
fn v01_message_reply_is_a_completed_status() {
    let reply = Message::agent(ctx(), Some(tid()), vec![Part::text("hi")]);
    let wire = encode_send_outcome(Dialect::V01, &SendOutcome::Message(reply));
    assert_eq!(
        wire,
        json!({"id": "task-1", "sessionId": "ctx-1",
               "status": {"state": "completed",
                          "message": {"role": "agent", "parts": [{"type": "text", "text": "hi"}]}}})
    );
}

#[test]
fn v1_stream_events_have_exactly_one_member() {
    let members: Vec<String> = events(TaskState::Working)
        .iter()
        .map(|e| {
            let wire = encode_stream_event(Dialect::V1, e);
            let obj = wire.as_object().unwrap();
            assert_eq!(obj.len(), 1, "{wire}");
            obj.keys().next().unwrap().clone()
        })
        .collect();
    assert_eq!(
        members,
        ["task", "message", "statusUpdate", "artifactUpdate"]
    );
    let artifact = encode_stream_event(Dialect::V1, &events(TaskState::Working)[3]);
    assert_eq!(artifact["artifactUpdate"]["append"], true);
    assert!(
        artifact["artifactUpdate"].get("lastChunk").is_none(),
        "false is omitted"
    );
}

#[test]
fn v03_rest_and_v01_stream_shapes() {
    let evs = events(TaskState::Working);
    assert!(
        encode_stream_event(Dialect::V03Rest, &evs[1])
            .get("msg")
            .is_some()
    );
    assert_eq!(
        encode_stream_event(Dialect::V03Rest, &evs[3])["artifactUpdate"]["lastChunk"],
        false
    );
    let v01_artifact = encode_stream_event(Dialect::V01, &evs[3]);
    assert_eq!(v01_artifact["id"], "task-1");
    assert_eq!(v01_artifact["artifact"]["append"], true);
    assert_eq!(v01_artifact["artifact"]["parts"][0]["type"], "text");
    let v01_status = encode_stream_event(Dialect::V01, &evs[2]);
    assert_eq!(v01_status["status"]["state"], "working");
}

#[test]
fn task_pages_always_carry_the_next_page_token() {
    let page = TaskPage {
        tasks: vec![task(TaskState::Completed).view(None, false)],
        next_page_token: String::new(),
        page_size: 50,
        total_size: 1,
    };
    let wire = encode_task_page(Dialect::V1, &page);
    assert_eq!(wire["nextPageToken"], "");
    assert_eq!(wire["pageSize"], 50);
    assert_eq!(wire["totalSize"], 1);
    assert!(wire["tasks"][0].get("artifacts").is_none());
    assert_eq!(wire["tasks"][0]["status"]["state"], "TASK_STATE_COMPLETED");
}

#[test]
fn timestamps_are_rfc3339_utc_with_milliseconds() {
    let wire = encode_task(Dialect::V1, &task(TaskState::Completed));
    let ts = wire["status"]["timestamp"].as_str().unwrap();
    assert_eq!(ts, "1970-01-01T00:00:02.000Z");
}

#[test]
fn v01_artifacts_carry_their_position() {
    let mut t = task(TaskState::Completed);
    let mut second = Artifact::new(vec![Part::text("more")]);
    second.artifact_id = "a-2".into();
    t.apply_artifact(&second, false, Timestamp(3_000));
    let wire = encode_task(Dialect::V01, &t);
    assert_eq!(wire["artifacts"][0]["index"], 0);
    assert_eq!(wire["artifacts"][1]["index"], 1);
    assert!(wire["artifacts"][0].get("artifactId").is_none());
}

#[test]
fn a_push_config_is_shown_without_its_token_or_credentials_in_every_dialect() {
    use crate::domain::{PushAuth, PushConfig, PushDialect};
    let config = PushConfig {
        tenant: TenantId::default_tenant(),
        task_id: tid(),
        id: "hook".into(),
        url: "https://hooks.example.org/a2a".into(),
        token: Some("the-token".into()),
        auth: Some(PushAuth {
            scheme: "Bearer".into(),
            credentials: Some("the-credentials".into()),
        }),
        dialect: PushDialect::V1,
        created_at: Timestamp(1_000),
    };
    for d in ALL {
        let one = encode_push_config(d, &config);
        let list = encode_push_list(d, std::slice::from_ref(&config), "");
        for wire in [&one, &list] {
            let text = wire.to_string();
            for secret in [
                "the-token",
                "the-credentials",
                "\"token\"",
                "\"credentials\"",
            ] {
                assert!(!text.contains(secret), "{d:?} shows {secret}: {text}");
            }
            assert!(
                text.contains("https://hooks.example.org/a2a"),
                "{d:?}: {text}"
            );
            assert!(text.contains("Bearer"), "{d:?} keeps the scheme: {text}");
        }
    }
}
