//! Domain -> wire: tasks, messages, artifacts, stream events and task pages in each
//! dialect.
//!
//! Empty lists and unset optional fields are left out (ProtoJSON omits defaults; 0.3 and
//! 0.1 mark them optional). The task's recorded transitions travel inside its `metadata`
//! under [`TRANSITIONS_KEY`], spelled in the dialect's state names, because no dialect
//! has a field for them and 0.3 cards advertise `stateTransitionHistory`.
//!
//! 0.1 has no message-only reply: a [`SendOutcome::Message`] (and a message stream event)
//! is sent as a completed task status carrying the message, under the message's task id
//! or a fresh one.

use serde_json::{Map, Value, json};

use super::Dialect;
use super::enums::{role_name, state_name};
use super::parts::encode_part;
use crate::domain::{
    Artifact, Message, Metadata, SendOutcome, StreamEvent, Task, TaskId, TaskPage, TaskState,
    TaskStatus,
};

/// The task metadata key holding `[{"state", "timestamp"}]`, oldest first.
pub const TRANSITIONS_KEY: &str = "agent-a2a.transitions";

/// A JSON object of `entries`, which are moved in (`json!` would serialize each value into
/// a copy of itself).
fn object<const N: usize>(entries: [(&str, Value); N]) -> Value {
    let mut out = Map::new();
    for (key, value) in entries {
        out.insert(key.to_owned(), value);
    }
    Value::Object(out)
}

/// A `SendMessage` result: 1.0 `{"task"|"message"}`, 0.3 REST `{"task"|"msg"}`,
/// 0.3 JSON-RPC the bare object, 0.1 a task.
pub fn encode_send_outcome(d: Dialect, outcome: &SendOutcome) -> Value {
    match (d, outcome) {
        (Dialect::V1 | Dialect::V03Rest, SendOutcome::Task(task)) => {
            object([("task", encode_task(d, task))])
        }
        (Dialect::V1, SendOutcome::Message(m)) => object([("message", encode_message(d, m))]),
        (Dialect::V03Rest, SendOutcome::Message(m)) => object([("msg", encode_message(d, m))]),
        (Dialect::V03Rpc | Dialect::V01, SendOutcome::Task(task)) => encode_task(d, task),
        (Dialect::V03Rpc, SendOutcome::Message(m)) => encode_message(d, m),
        (Dialect::V01, SendOutcome::Message(m)) => v01_message_as_task(m, false),
    }
}

/// A task in `d`.
pub fn encode_task(d: Dialect, task: &Task) -> Value {
    let mut out = Map::new();
    if d == Dialect::V03Rpc {
        out.insert("kind".into(), json!("task"));
    }
    out.insert("id".into(), json!(task.id.as_str()));
    let context_key = if d == Dialect::V01 {
        "sessionId"
    } else {
        "contextId"
    };
    out.insert(context_key.into(), json!(task.context_id.as_str()));
    out.insert("status".into(), encode_status(d, &task.status));
    if !task.artifacts.is_empty() {
        let artifacts = task
            .artifacts
            .iter()
            .enumerate()
            .map(|(i, a)| encode_artifact(d, a, Some(i)))
            .collect();
        out.insert("artifacts".into(), Value::Array(artifacts));
    }
    if !task.history.is_empty() {
        let history = task.history.iter().map(|m| encode_message(d, m)).collect();
        out.insert("history".into(), Value::Array(history));
    }
    let mut metadata = task.metadata.clone().unwrap_or_default();
    if !task.transitions.is_empty() {
        let transitions = task
            .transitions
            .iter()
            .map(
                |t| json!({"state": state_name(d, t.state), "timestamp": t.timestamp.to_rfc3339()}),
            )
            .collect();
        metadata.insert(TRANSITIONS_KEY.into(), Value::Array(transitions));
    }
    if task.metadata.is_some() || !metadata.is_empty() {
        out.insert("metadata".into(), Value::Object(metadata));
    }
    Value::Object(out)
}

/// A message in `d`. 0.1 messages carry only `role`, `parts` and `metadata`.
pub fn encode_message(d: Dialect, message: &Message) -> Value {
    let mut out = Map::new();
    if d == Dialect::V03Rpc {
        out.insert("kind".into(), json!("message"));
    }
    if d != Dialect::V01 {
        out.insert("messageId".into(), json!(message.message_id.as_str()));
        if let Some(context) = &message.context_id {
            out.insert("contextId".into(), json!(context.as_str()));
        }
        if let Some(task) = &message.task_id {
            out.insert("taskId".into(), json!(task.as_str()));
        }
    }
    out.insert("role".into(), json!(role_name(d, message.role)));
    let parts = message.parts.iter().map(|p| encode_part(d, p)).collect();
    // The 0.3 proto named the list `content`.
    let parts_key = if d == Dialect::V03Rest {
        "content"
    } else {
        "parts"
    };
    out.insert(parts_key.into(), Value::Array(parts));
    if let Some(metadata) = &message.metadata {
        out.insert("metadata".into(), Value::Object(metadata.clone()));
    }
    if d != Dialect::V01 && !message.extensions.is_empty() {
        out.insert("extensions".into(), json!(message.extensions));
    }
    // Not in the 0.3 proto, whose strict parsers reject unknown fields.
    if matches!(d, Dialect::V1 | Dialect::V03Rpc) && !message.reference_task_ids.is_empty() {
        let ids: Vec<&str> = message
            .reference_task_ids
            .iter()
            .map(TaskId::as_str)
            .collect();
        out.insert("referenceTaskIds".into(), json!(ids));
    }
    Value::Object(out)
}

/// A stream event: a 1.0 `StreamResponse`, a 0.3 JSON-RPC `kind` object, a 0.3 REST
/// proto `StreamResponse` (with `msg` and `final`), or a 0.1 status/artifact event.
pub fn encode_stream_event(d: Dialect, event: &StreamEvent) -> Value {
    match d {
        Dialect::V1 | Dialect::V03Rest => proto_stream_event(d, event),
        Dialect::V03Rpc => v03_rpc_stream_event(event),
        Dialect::V01 => v01_stream_event(event),
    }
}

/// One page of `ListTasks`; `nextPageToken` is always present (`""` on the last page).
pub fn encode_task_page(d: Dialect, page: &TaskPage) -> Value {
    let tasks: Vec<Value> = page.tasks.iter().map(|t| encode_task(d, t)).collect();
    object([
        ("tasks", Value::Array(tasks)),
        ("nextPageToken", json!(page.next_page_token)),
        ("pageSize", json!(page.page_size)),
        ("totalSize", json!(page.total_size)),
    ])
}

fn encode_status(d: Dialect, status: &TaskStatus) -> Value {
    let mut out = Map::new();
    out.insert("state".into(), json!(state_name(d, status.state)));
    if let Some(message) = &status.message {
        out.insert("message".into(), encode_message(d, message));
    }
    out.insert("timestamp".into(), json!(status.timestamp.to_rfc3339()));
    Value::Object(out)
}

/// An artifact; `index` is its position in the task, which only 0.1 sends.
fn encode_artifact(d: Dialect, artifact: &Artifact, index: Option<usize>) -> Value {
    let mut out = Map::new();
    if d != Dialect::V01 {
        out.insert("artifactId".into(), json!(artifact.artifact_id));
    }
    if let Some(name) = &artifact.name {
        out.insert("name".into(), json!(name));
    }
    if let Some(description) = &artifact.description {
        out.insert("description".into(), json!(description));
    }
    let parts = artifact.parts.iter().map(|p| encode_part(d, p)).collect();
    out.insert("parts".into(), Value::Array(parts));
    if let (Dialect::V01, Some(i)) = (d, index) {
        out.insert("index".into(), json!(i));
    }
    if let Some(metadata) = &artifact.metadata {
        out.insert("metadata".into(), Value::Object(metadata.clone()));
    }
    if d != Dialect::V01 && !artifact.extensions.is_empty() {
        out.insert("extensions".into(), json!(artifact.extensions));
    }
    Value::Object(out)
}

/// 0.3 marks the status update that ends the stream: terminal or interrupted.
fn is_final(state: TaskState) -> bool {
    state.ends_turn()
}

fn insert_metadata(out: &mut Map<String, Value>, metadata: Option<&Metadata>) {
    if let Some(metadata) = metadata {
        out.insert("metadata".into(), Value::Object(metadata.clone()));
    }
}

fn proto_stream_event(d: Dialect, event: &StreamEvent) -> Value {
    let v03 = d == Dialect::V03Rest;
    match event {
        StreamEvent::Task { task } => object([("task", encode_task(d, task))]),
        StreamEvent::Message { message } => {
            let key = if v03 { "msg" } else { "message" };
            object([(key, encode_message(d, message))])
        }
        // ProtoJSON leaves default values out; the 0.3 proto shape always had them.
        StreamEvent::StatusUpdate { .. } => {
            object([("statusUpdate", Value::Object(update_fields(d, event, v03)))])
        }
        StreamEvent::ArtifactUpdate { .. } => object([(
            "artifactUpdate",
            Value::Object(update_fields(d, event, v03)),
        )]),
    }
}

fn v03_rpc_stream_event(event: &StreamEvent) -> Value {
    let d = Dialect::V03Rpc;
    match event {
        StreamEvent::Task { task } => encode_task(d, task),
        StreamEvent::Message { message } => encode_message(d, message),
        StreamEvent::StatusUpdate { .. } | StreamEvent::ArtifactUpdate { .. } => {
            let mut out = update_fields(d, event, true);
            let kind = match event {
                StreamEvent::StatusUpdate { .. } => "status-update",
                _ => "artifact-update",
            };
            out.insert("kind".into(), json!(kind));
            Value::Object(out)
        }
    }
}

/// The fields of a status or artifact update, shared by the proto-shaped dialects and
/// 0.3 JSON-RPC. With `always_flags`, `final` (status) and `append`/`lastChunk`
/// (artifact) are written even when false, as 0.3 did; 1.0 has no `final` at all and
/// leaves false flags out. Snapshots and messages have no update fields (empty map).
fn update_fields(d: Dialect, event: &StreamEvent, always_flags: bool) -> Map<String, Value> {
    let mut out = Map::new();
    match event {
        StreamEvent::StatusUpdate {
            task_id,
            context_id,
            status,
            metadata,
        } => {
            out.insert("taskId".into(), json!(task_id.as_str()));
            out.insert("contextId".into(), json!(context_id.as_str()));
            out.insert("status".into(), encode_status(d, status));
            if always_flags {
                out.insert("final".into(), json!(is_final(status.state)));
            }
            insert_metadata(&mut out, metadata.as_ref());
        }
        StreamEvent::ArtifactUpdate {
            task_id,
            context_id,
            artifact,
            append,
            last_chunk,
            metadata,
        } => {
            out.insert("taskId".into(), json!(task_id.as_str()));
            out.insert("contextId".into(), json!(context_id.as_str()));
            out.insert("artifact".into(), encode_artifact(d, artifact, None));
            if *append || always_flags {
                out.insert("append".into(), json!(append));
            }
            if *last_chunk || always_flags {
                out.insert("lastChunk".into(), json!(last_chunk));
            }
            insert_metadata(&mut out, metadata.as_ref());
        }
        StreamEvent::Task { .. } | StreamEvent::Message { .. } => {}
    }
    out
}

/// 0.1 streams only knew `{id, status, final}` and `{id, artifact}`; a task snapshot is
/// sent as its status. An artifact's position in the task is unknown to a single event,
/// so its `index` is left to the 0.1 default (0).
fn v01_stream_event(event: &StreamEvent) -> Value {
    let d = Dialect::V01;
    match event {
        StreamEvent::Task { task } => object([
            ("id", json!(task.id.as_str())),
            ("status", encode_status(d, &task.status)),
            ("final", json!(is_final(task.status.state))),
        ]),
        StreamEvent::Message { message } => v01_message_as_task(message, true),
        StreamEvent::StatusUpdate {
            task_id,
            status,
            metadata,
            ..
        } => {
            let mut out = Map::new();
            out.insert("id".into(), json!(task_id.as_str()));
            out.insert("status".into(), encode_status(d, status));
            out.insert("final".into(), json!(is_final(status.state)));
            insert_metadata(&mut out, metadata.as_ref());
            Value::Object(out)
        }
        StreamEvent::ArtifactUpdate {
            task_id,
            artifact,
            append,
            last_chunk,
            metadata,
            ..
        } => {
            let mut wire = encode_artifact(d, artifact, None);
            if let Value::Object(a) = &mut wire {
                a.insert("append".into(), json!(append));
                a.insert("lastChunk".into(), json!(last_chunk));
            }
            let mut out = Map::new();
            out.insert("id".into(), json!(task_id.as_str()));
            out.insert("artifact".into(), wire);
            insert_metadata(&mut out, metadata.as_ref());
            Value::Object(out)
        }
    }
}

/// A message-only reply in 0.1 terms: a completed task status carrying the message
/// (as a stream event it also says `final`). There is no status timestamp to report.
fn v01_message_as_task(message: &Message, as_event: bool) -> Value {
    let id = message.task_id.clone().unwrap_or_else(TaskId::generate);
    let mut out = Map::new();
    out.insert("id".into(), json!(id.as_str()));
    if !as_event && let Some(context) = &message.context_id {
        out.insert("sessionId".into(), json!(context.as_str()));
    }
    out.insert(
        "status".into(),
        object([
            ("state", json!("completed")),
            ("message", encode_message(Dialect::V01, message)),
        ]),
    );
    if as_event {
        out.insert("final".into(), json!(true));
    }
    Value::Object(out)
}
