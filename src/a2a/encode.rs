//! Domain -> wire: tasks, messages, artifacts, stream events and task pages in each
//! dialect.
//!
//! Each shape is a `Serialize` view of the domain type ([`TaskWire`], [`MessageWire`],
//! [`OutcomeWire`], [`EventWire`], …): serde writes the JSON straight from the domain, with
//! no `serde_json::Value` tree in between, and the `encode_*` functions that return a
//! `Value` are those views collected into one — the dialects' rules exist once, here.
//!
//! Empty lists and unset optional fields are left out (ProtoJSON omits defaults; 0.3 and
//! 0.1 mark them optional). The task's recorded transitions travel inside its `metadata`
//! under [`TRANSITIONS_KEY`], spelled in the dialect's state names, because no dialect
//! has a field for them and 0.3 cards advertise `stateTransitionHistory`.
//!
//! 0.1 has no message-only reply: a [`SendOutcome::Message`] (and a message stream event)
//! is sent as a completed task status carrying the message, under the message's task id
//! or a fresh one.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

use super::Dialect;
use super::enums::{role_name, state_name};
use super::parts::{Entries, PartWire};
use crate::domain::{
    Artifact, Message, Metadata, SendOutcome, StreamEvent, Task, TaskId, TaskPage, TaskState,
    TaskStatus, Transition,
};

/// The task metadata key holding `[{"state", "timestamp"}]`, oldest first.
pub const TRANSITIONS_KEY: &str = "agent-a2a.transitions";

/// A view as a JSON value. The views only write strings, numbers, lists and objects with
/// string keys, which a `Value` always holds.
fn to_value(view: impl Serialize) -> Value {
    serde_json::to_value(view).unwrap_or(Value::Null)
}

/// A `SendMessage` result: 1.0 `{"task"|"message"}`, 0.3 REST `{"task"|"msg"}`,
/// 0.3 JSON-RPC the bare object, 0.1 a task.
pub fn encode_send_outcome(d: Dialect, outcome: &SendOutcome) -> Value {
    to_value(OutcomeWire(d, outcome))
}

/// A task in `d`.
pub fn encode_task(d: Dialect, task: &Task) -> Value {
    to_value(TaskWire(d, task))
}

/// A message in `d`. 0.1 messages carry only `role`, `parts` and `metadata`.
pub fn encode_message(d: Dialect, message: &Message) -> Value {
    to_value(MessageWire(d, message))
}

/// A stream event: a 1.0 `StreamResponse`, a 0.3 JSON-RPC `kind` object, a 0.3 REST
/// proto `StreamResponse` (with `msg` and `final`), or a 0.1 status/artifact event.
pub fn encode_stream_event(d: Dialect, event: &StreamEvent) -> Value {
    to_value(EventWire(d, event))
}

/// One page of `ListTasks`; `nextPageToken` is always present (`""` on the last page).
pub fn encode_task_page(d: Dialect, page: &TaskPage) -> Value {
    to_value(PageWire(d, page))
}

/// A `SendMessage` result in `d` ([`encode_send_outcome`]).
pub struct OutcomeWire<'a>(pub Dialect, pub &'a SendOutcome);

impl Serialize for OutcomeWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let d = self.0;
        match (d, self.1) {
            (Dialect::V1 | Dialect::V03Rest, SendOutcome::Task(task)) => {
                Entries([("task", &TaskWire(d, task))]).serialize(serializer)
            }
            (Dialect::V1, SendOutcome::Message(m)) => {
                Entries([("message", &MessageWire(d, m))]).serialize(serializer)
            }
            (Dialect::V03Rest, SendOutcome::Message(m)) => {
                Entries([("msg", &MessageWire(d, m))]).serialize(serializer)
            }
            (Dialect::V03Rpc | Dialect::V01, SendOutcome::Task(task)) => {
                TaskWire(d, task).serialize(serializer)
            }
            (Dialect::V03Rpc, SendOutcome::Message(m)) => MessageWire(d, m).serialize(serializer),
            (Dialect::V01, SendOutcome::Message(m)) => {
                V01MessageAsTask(m, false).serialize(serializer)
            }
        }
    }
}

/// A task in `d` ([`encode_task`]).
pub struct TaskWire<'a>(pub Dialect, pub &'a Task);

impl Serialize for TaskWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let TaskWire(d, task) = *self;
        let mut out = serializer.serialize_map(None)?;
        if d == Dialect::V03Rpc {
            out.serialize_entry("kind", "task")?;
        }
        out.serialize_entry("id", task.id.as_str())?;
        let context_key = if d == Dialect::V01 {
            "sessionId"
        } else {
            "contextId"
        };
        out.serialize_entry(context_key, task.context_id.as_str())?;
        out.serialize_entry("status", &StatusWire(d, &task.status))?;
        if !task.artifacts.is_empty() {
            out.serialize_entry("artifacts", &ArtifactsWire(d, &task.artifacts))?;
        }
        if !task.history.is_empty() {
            out.serialize_entry("history", &MessagesWire(d, &task.history))?;
        }
        if task.metadata.is_some() || !task.transitions.is_empty() {
            out.serialize_entry("metadata", &TaskMetadataWire(d, task))?;
        }
        out.end()
    }
}

/// A message in `d` ([`encode_message`]).
pub struct MessageWire<'a>(pub Dialect, pub &'a Message);

impl Serialize for MessageWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let MessageWire(d, message) = *self;
        let mut out = serializer.serialize_map(None)?;
        if d == Dialect::V03Rpc {
            out.serialize_entry("kind", "message")?;
        }
        if d != Dialect::V01 {
            out.serialize_entry("messageId", message.message_id.as_str())?;
            if let Some(context) = &message.context_id {
                out.serialize_entry("contextId", context.as_str())?;
            }
            if let Some(task) = &message.task_id {
                out.serialize_entry("taskId", task.as_str())?;
            }
        }
        out.serialize_entry("role", role_name(d, message.role))?;
        // The 0.3 proto named the list `content`.
        let parts_key = if d == Dialect::V03Rest {
            "content"
        } else {
            "parts"
        };
        out.serialize_entry(parts_key, &PartsWire(d, &message.parts))?;
        if let Some(metadata) = &message.metadata {
            out.serialize_entry("metadata", metadata)?;
        }
        if d != Dialect::V01 && !message.extensions.is_empty() {
            out.serialize_entry("extensions", &message.extensions)?;
        }
        // Not in the 0.3 proto, whose strict parsers reject unknown fields.
        if matches!(d, Dialect::V1 | Dialect::V03Rpc) && !message.reference_task_ids.is_empty() {
            out.serialize_entry("referenceTaskIds", &message.reference_task_ids)?;
        }
        out.end()
    }
}

/// A stream event in `d` ([`encode_stream_event`]).
pub struct EventWire<'a>(pub Dialect, pub &'a StreamEvent);

impl Serialize for EventWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let EventWire(d, event) = *self;
        match d {
            Dialect::V1 | Dialect::V03Rest => proto_stream_event(d, event, serializer),
            Dialect::V03Rpc => v03_rpc_stream_event(event, serializer),
            Dialect::V01 => v01_stream_event(event, serializer),
        }
    }
}

/// One page of `ListTasks` in `d` ([`encode_task_page`]).
pub struct PageWire<'a>(pub Dialect, pub &'a TaskPage);

impl Serialize for PageWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let PageWire(d, page) = *self;
        let mut out = serializer.serialize_map(Some(4))?;
        out.serialize_entry("tasks", &Each(d, &page.tasks, TaskWire))?;
        out.serialize_entry("nextPageToken", &page.next_page_token)?;
        out.serialize_entry("pageSize", &page.page_size)?;
        out.serialize_entry("totalSize", &page.total_size)?;
        out.end()
    }
}

/// A list whose items are written through the view the function makes of each.
struct Each<'a, T, V>(Dialect, &'a [T], fn(Dialect, &'a T) -> V);

impl<T, V: Serialize> Serialize for Each<'_, T, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.1.len()))?;
        for item in self.1 {
            seq.serialize_element(&(self.2)(self.0, item))?;
        }
        seq.end()
    }
}

struct PartsWire<'a>(Dialect, &'a [crate::domain::Part]);

impl Serialize for PartsWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let d = self.0;
        Each(d, self.1, PartWire).serialize(serializer)
    }
}

struct MessagesWire<'a>(Dialect, &'a [Message]);

impl Serialize for MessagesWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let d = self.0;
        Each(d, self.1, MessageWire).serialize(serializer)
    }
}

/// A task's artifacts; 0.1 numbers them by their position in the task.
struct ArtifactsWire<'a>(Dialect, &'a [Artifact]);

impl Serialize for ArtifactsWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.1.len()))?;
        for (i, artifact) in self.1.iter().enumerate() {
            seq.serialize_element(&ArtifactWire {
                d: self.0,
                artifact,
                index: Some(i),
                flags: None,
            })?;
        }
        seq.end()
    }
}

/// A task's metadata with its transitions under [`TRANSITIONS_KEY`] (which replace any
/// value of that key the metadata had).
struct TaskMetadataWire<'a>(Dialect, &'a Task);

impl Serialize for TaskMetadataWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let TaskMetadataWire(d, task) = *self;
        let transitions = !task.transitions.is_empty();
        let mut out = serializer.serialize_map(None)?;
        for (key, value) in task.metadata.iter().flatten() {
            if !(transitions && key == TRANSITIONS_KEY) {
                out.serialize_entry(key, value)?;
            }
        }
        if transitions {
            out.serialize_entry(
                TRANSITIONS_KEY,
                &Each(d, &task.transitions, |d, t| TransitionWire(d, *t)),
            )?;
        }
        out.end()
    }
}

/// One recorded transition: `{"state", "timestamp"}`.
struct TransitionWire(Dialect, Transition);

impl Serialize for TransitionWire {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let TransitionWire(d, t) = *self;
        let mut out = serializer.serialize_map(Some(2))?;
        out.serialize_entry("state", state_name(d, t.state))?;
        out.serialize_entry("timestamp", &t.timestamp.to_rfc3339())?;
        out.end()
    }
}

struct StatusWire<'a>(Dialect, &'a TaskStatus);

impl Serialize for StatusWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let StatusWire(d, status) = *self;
        let mut out = serializer.serialize_map(None)?;
        out.serialize_entry("state", state_name(d, status.state))?;
        if let Some(message) = &status.message {
            out.serialize_entry("message", &MessageWire(d, message))?;
        }
        out.serialize_entry("timestamp", &status.timestamp.to_rfc3339())?;
        out.end()
    }
}

/// An artifact; `index` is its position in the task, which only 0.1 sends. `flags` are
/// the `append` and `lastChunk` of a 0.1 artifact event, which sits inside the artifact.
struct ArtifactWire<'a> {
    d: Dialect,
    artifact: &'a Artifact,
    index: Option<usize>,
    flags: Option<(bool, bool)>,
}

impl Serialize for ArtifactWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (d, artifact) = (self.d, self.artifact);
        let mut out = serializer.serialize_map(None)?;
        if d != Dialect::V01 {
            out.serialize_entry("artifactId", &artifact.artifact_id)?;
        }
        if let Some(name) = &artifact.name {
            out.serialize_entry("name", name)?;
        }
        if let Some(description) = &artifact.description {
            out.serialize_entry("description", description)?;
        }
        out.serialize_entry("parts", &PartsWire(d, &artifact.parts))?;
        if let (Dialect::V01, Some(i)) = (d, self.index) {
            out.serialize_entry("index", &i)?;
        }
        if let Some(metadata) = &artifact.metadata {
            out.serialize_entry("metadata", metadata)?;
        }
        if d != Dialect::V01 && !artifact.extensions.is_empty() {
            out.serialize_entry("extensions", &artifact.extensions)?;
        }
        if let Some((append, last_chunk)) = self.flags {
            out.serialize_entry("append", &append)?;
            out.serialize_entry("lastChunk", &last_chunk)?;
        }
        out.end()
    }
}

/// 0.3 marks the status update that ends the stream: terminal or interrupted.
fn is_final(state: TaskState) -> bool {
    state.ends_turn()
}

fn proto_stream_event<S: Serializer>(
    d: Dialect,
    event: &StreamEvent,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let v03 = d == Dialect::V03Rest;
    match event {
        StreamEvent::Task { task } => Entries([("task", &TaskWire(d, task))]).serialize(serializer),
        StreamEvent::Message { message } => {
            let key = if v03 { "msg" } else { "message" };
            Entries([(key, &MessageWire(d, message))]).serialize(serializer)
        }
        // ProtoJSON leaves default values out; the 0.3 proto shape always had them.
        StreamEvent::StatusUpdate { .. } => Entries([(
            "statusUpdate",
            &UpdateWire {
                d,
                event,
                always_flags: v03,
                kind: None,
            },
        )])
        .serialize(serializer),
        StreamEvent::ArtifactUpdate { .. } => Entries([(
            "artifactUpdate",
            &UpdateWire {
                d,
                event,
                always_flags: v03,
                kind: None,
            },
        )])
        .serialize(serializer),
    }
}

fn v03_rpc_stream_event<S: Serializer>(
    event: &StreamEvent,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let d = Dialect::V03Rpc;
    match event {
        StreamEvent::Task { task } => TaskWire(d, task).serialize(serializer),
        StreamEvent::Message { message } => MessageWire(d, message).serialize(serializer),
        StreamEvent::StatusUpdate { .. } => UpdateWire {
            d,
            event,
            always_flags: true,
            kind: Some("status-update"),
        }
        .serialize(serializer),
        StreamEvent::ArtifactUpdate { .. } => UpdateWire {
            d,
            event,
            always_flags: true,
            kind: Some("artifact-update"),
        }
        .serialize(serializer),
    }
}

/// The fields of a status or artifact update, shared by the proto-shaped dialects and
/// 0.3 JSON-RPC (which adds its `kind`). With `always_flags`, `final` (status) and
/// `append`/`lastChunk` (artifact) are written even when false, as 0.3 did; 1.0 has no
/// `final` at all and leaves false flags out. Snapshots and messages have no update
/// fields (an empty object).
struct UpdateWire<'a> {
    d: Dialect,
    event: &'a StreamEvent,
    always_flags: bool,
    kind: Option<&'static str>,
}

impl Serialize for UpdateWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (d, always_flags) = (self.d, self.always_flags);
        let mut out = serializer.serialize_map(None)?;
        match self.event {
            StreamEvent::StatusUpdate {
                task_id,
                context_id,
                status,
                metadata,
            } => {
                out.serialize_entry("taskId", task_id.as_str())?;
                out.serialize_entry("contextId", context_id.as_str())?;
                out.serialize_entry("status", &StatusWire(d, status))?;
                if always_flags {
                    out.serialize_entry("final", &is_final(status.state))?;
                }
                metadata_entry(&mut out, metadata.as_ref())?;
            }
            StreamEvent::ArtifactUpdate {
                task_id,
                context_id,
                artifact,
                append,
                last_chunk,
                metadata,
            } => {
                out.serialize_entry("taskId", task_id.as_str())?;
                out.serialize_entry("contextId", context_id.as_str())?;
                out.serialize_entry(
                    "artifact",
                    &ArtifactWire {
                        d,
                        artifact,
                        index: None,
                        flags: None,
                    },
                )?;
                if *append || always_flags {
                    out.serialize_entry("append", append)?;
                }
                if *last_chunk || always_flags {
                    out.serialize_entry("lastChunk", last_chunk)?;
                }
                metadata_entry(&mut out, metadata.as_ref())?;
            }
            StreamEvent::Task { .. } | StreamEvent::Message { .. } => {}
        }
        if let Some(kind) = self.kind {
            out.serialize_entry("kind", kind)?;
        }
        out.end()
    }
}

fn metadata_entry<M: SerializeMap>(
    out: &mut M,
    metadata: Option<&Metadata>,
) -> Result<(), M::Error> {
    match metadata {
        Some(metadata) => out.serialize_entry("metadata", metadata),
        None => Ok(()),
    }
}

/// 0.1 streams only knew `{id, status, final}` and `{id, artifact}`; a task snapshot is
/// sent as its status. An artifact's position in the task is unknown to a single event,
/// so its `index` is left to the 0.1 default (0).
fn v01_stream_event<S: Serializer>(event: &StreamEvent, serializer: S) -> Result<S::Ok, S::Error> {
    let d = Dialect::V01;
    let mut out = match event {
        StreamEvent::Message { message } => {
            return V01MessageAsTask(message, true).serialize(serializer);
        }
        _ => serializer.serialize_map(None)?,
    };
    match event {
        StreamEvent::Task { task } => {
            out.serialize_entry("id", task.id.as_str())?;
            out.serialize_entry("status", &StatusWire(d, &task.status))?;
            out.serialize_entry("final", &is_final(task.status.state))?;
        }
        StreamEvent::StatusUpdate {
            task_id,
            status,
            metadata,
            ..
        } => {
            out.serialize_entry("id", task_id.as_str())?;
            out.serialize_entry("status", &StatusWire(d, status))?;
            out.serialize_entry("final", &is_final(status.state))?;
            metadata_entry(&mut out, metadata.as_ref())?;
        }
        StreamEvent::ArtifactUpdate {
            task_id,
            artifact,
            append,
            last_chunk,
            metadata,
            ..
        } => {
            out.serialize_entry("id", task_id.as_str())?;
            out.serialize_entry(
                "artifact",
                &ArtifactWire {
                    d,
                    artifact,
                    index: None,
                    flags: Some((*append, *last_chunk)),
                },
            )?;
            metadata_entry(&mut out, metadata.as_ref())?;
        }
        StreamEvent::Message { .. } => {}
    }
    out.end()
}

/// A message-only reply in 0.1 terms: a completed task status carrying the message
/// (as a stream event it also says `final`). There is no status timestamp to report.
struct V01MessageAsTask<'a>(&'a Message, bool);

impl Serialize for V01MessageAsTask<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let V01MessageAsTask(message, as_event) = *self;
        let id = message.task_id.clone().unwrap_or_else(TaskId::generate);
        let mut out = serializer.serialize_map(None)?;
        out.serialize_entry("id", id.as_str())?;
        if !as_event && let Some(context) = &message.context_id {
            out.serialize_entry("sessionId", context.as_str())?;
        }
        out.serialize_entry("status", &V01CompletedWith(message))?;
        if as_event {
            out.serialize_entry("final", &true)?;
        }
        out.end()
    }
}

struct V01CompletedWith<'a>(&'a Message);

impl Serialize for V01CompletedWith<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_map(Some(2))?;
        out.serialize_entry("state", "completed")?;
        out.serialize_entry("message", &MessageWire(Dialect::V01, self.0))?;
        out.end()
    }
}
