//! The task-generations extension: the A2A 1.1 draft's `Task.generation`, `GetTask`
//! long-poll (`currentGeneration`) and optimistic concurrency (`ifGenerationMatch`), on
//! the 1.0 wire for the requests that activate it.
//!
//! 1.1 is not released and the 1.0 schema forbids unknown fields, so nothing of it
//! appears unless a request names [`GENERATIONS_EXTENSION`] in its `A2A-Extensions`
//! header (1.0 dialect, JSON-RPC or HTTP+JSON); the response then echoes the header.
//! With it:
//!
//! - every task (`GetTask`, `ListTasks`, `CancelTask`, a send's task, a stream's
//!   snapshot) carries `generation`, and so do `statusUpdate` and `artifactUpdate`
//!   events: int64, a JSON string as ProtoJSON writes int64;
//! - a task's generation is 1 when created and +1 with every event, i.e. the sequence
//!   number of its last event in the durable log plus one: an SSE event with `id: n`
//!   carries generation `n + 1`, and `Last-Event-ID: n` resumes after generation `n + 1`;
//! - `GetTask` with `currentGeneration: g` answers once the task's generation exceeds `g`
//!   (or it is terminal), waiting at most `streaming.long_poll_secs`;
//! - `SendMessage` with `configuration.ifGenerationMatch: g` continues its task only if
//!   the task is at generation `g`; otherwise `TaskGenerationMismatchError` (-32010,
//!   HTTP 409, reason `TASK_GENERATION_MISMATCH`).
//!
//! Without the extension, those two parameters are refused (`InvalidParams` naming the
//! extension) rather than ignored: a client relying on them must not be served as if
//! they held.

use serde_json::Value;

use super::fields::{Fields, invalid};
use crate::domain::{StreamEvent, Task};
use crate::error::Error;

/// The extension's URI (the card lists it in `capabilities.extensions`).
pub const GENERATIONS_EXTENSION: &str = "urn:agent-a2a:task-generations:v1";

/// Whether an `A2A-Extensions` value (comma-separated URIs) names the extension.
pub fn names_generations(header: Option<&str>) -> bool {
    header.is_some_and(|h| h.split(',').any(|uri| uri.trim() == GENERATIONS_EXTENSION))
}

/// int64 in ProtoJSON: a string.
fn int64(n: i64) -> Value {
    Value::String(n.to_string())
}

/// Adds `generation` to an encoded 1.0 task.
pub fn annotate_task(encoded: &mut Value, task: &Task) {
    if let Some(object) = encoded.as_object_mut() {
        object.insert("generation".into(), int64(task.generation));
    }
}

/// Adds `generation` to every task of an encoded answer: a send's `{task}`, a list's
/// `{tasks}`, or a task itself, matched against the tasks it was encoded from.
pub fn annotate_tasks(encoded: &mut Value, tasks: &[&Task]) {
    let slot = |v: &mut Value, task: &Task| annotate_task(v, task);
    if let Some(task) = encoded.get_mut("task") {
        if let Some(t) = tasks.first() {
            slot(task, t);
        }
    } else if let Some(list) = encoded.get_mut("tasks").and_then(Value::as_array_mut) {
        for (v, t) in list.iter_mut().zip(tasks) {
            slot(v, t);
        }
    } else if let Some(t) = tasks.first() {
        slot(encoded, t);
    }
}

/// Adds `generation` to an encoded 1.0 `StreamResponse` logged as event `seq`.
pub fn annotate_event(encoded: &mut Value, seq: i64, event: &StreamEvent) {
    let (key, generation) = match event {
        StreamEvent::Task { task } => ("task", task.generation),
        StreamEvent::StatusUpdate { .. } => ("statusUpdate", seq + 1),
        StreamEvent::ArtifactUpdate { .. } => ("artifactUpdate", seq + 1),
        StreamEvent::Message { .. } => return,
    };
    if let Some(object) = encoded.get_mut(key).and_then(Value::as_object_mut) {
        object.insert("generation".into(), int64(generation));
    }
}

/// `GetTask`'s `currentGeneration`, if given.
pub fn decode_current_generation(params: &Value, active: bool) -> Result<Option<i64>, Error> {
    generation_param(&Fields::root(params)?, "currentGeneration", active)
}

/// `configuration.ifGenerationMatch` of a send, if given.
pub fn decode_if_generation_match(params: &Value, active: bool) -> Result<Option<i64>, Error> {
    let f = Fields::root(params)?;
    match f.opt_child("configuration")? {
        Some(c) => generation_param(&c, "ifGenerationMatch", active),
        None => Ok(None),
    }
}

fn generation_param(f: &Fields<'_>, key: &str, active: bool) -> Result<Option<i64>, Error> {
    let Some(n) = f.opt_int(key)? else {
        return Ok(None);
    };
    let path = f.path_of(key);
    if !active {
        return Err(invalid(
            &path,
            format!(
                "is part of the task-generations extension: activate it with the header \
                 A2A-Extensions: {GENERATIONS_EXTENSION}"
            ),
        ));
    }
    if n < 1 {
        return Err(invalid(&path, "must be a generation (1 or more)"));
    }
    Ok(Some(n))
}
