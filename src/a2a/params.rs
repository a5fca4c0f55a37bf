//! Wire -> domain for request parameters: `SendMessage`, `GetTask`, `CancelTask` /
//! `SubscribeToTask`, `ListTasks`, and the media-type check on incoming parts.
//!
//! The same functions serve JSON-RPC `params` and REST bodies / query strings (the http
//! layer folds path and query values into one object; query values arrive as strings,
//! which the lenient reader accepts). Every refusal is `Error::InvalidParams` naming the
//! field, except unaccepted media types (`Error::ContentTypeNotSupported`).
//!
//! `historyLength`: 1.0 and 0.1 read `0` as "no history"; 0.3 read `0` (like unset) as
//! "not limited", so 0.3 dialects decode `0` to `None`. Negative values are refused in
//! every dialect.

use serde_json::Value;

use super::Dialect;
use super::client_message::{decode_message, without_reserved_keys};
use super::enums::{parse_state, role_name};
use super::fields::{Fields, invalid, parse_id};
use super::push::decode_send_push;
use crate::domain::{
    ContextId, ListTasksQuery, Message, Role, SendConfig, SendMessage, TaskId, Timestamp,
};
use crate::error::Error;

/// `ListTasks` page size when the client gives none.
pub const DEFAULT_PAGE_SIZE: u32 = 50;
/// Largest `ListTasks` page size a client may ask for.
pub const MAX_PAGE_SIZE: u32 = 100;

/// Decoded `GetTask` parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskQuery {
    /// The task asked for.
    pub id: TaskId,
    /// `None`: all history; `Some(0)`: none.
    pub history_length: Option<u32>,
}

/// Decodes `SendMessage` / `SendStreamingMessage` (0.3 `message/send`, 0.1 `tasks/send`)
/// parameters. The message must come from the user and have at least one part.
pub fn decode_send(d: Dialect, params: &Value) -> Result<SendMessage, Error> {
    let f = Fields::root(params)?;
    if d == Dialect::V01 {
        return decode_send_v01(&f);
    }
    // The 0.3 proto field is `request`, published under the JSON name `message`.
    let key = if d == Dialect::V03Rest && !f.has("message") && f.has("request") {
        "request"
    } else {
        "message"
    };
    let raw = f
        .get(key)
        .ok_or_else(|| invalid("message", "is required"))?;
    let message = decode_message(d, raw, "message")?;
    require_user(d, &message)?;
    let config = match f.opt_child("configuration")? {
        None => SendConfig::default(),
        Some(c) => SendConfig {
            push: decode_send_push(d, &c)?,
            // The task-generations extension's; read where its activation is known.
            if_generation_match: None,
            accepted_output_modes: c.strings("acceptedOutputModes")?,
            history_length: history_length(d, &c)?,
            // 0.3 had the opposite knob: `blocking` (default true).
            return_immediately: match d {
                Dialect::V1 => c.opt_bool("returnImmediately")?.unwrap_or(false),
                _ => c.opt_bool("blocking")? == Some(false),
            },
        },
    };
    Ok(SendMessage {
        message,
        config,
        metadata: without_reserved_keys(f.opt_metadata("metadata")?),
        create_missing_task: false,
        idempotency_key: None,
    })
}

/// 0.1 `TaskSendParams`: the client chooses the task id and may name a session.
fn decode_send_v01(f: &Fields<'_>) -> Result<SendMessage, Error> {
    let d = Dialect::V01;
    let id = parse_id(f.req_str("id")?, "id", TaskId::parse)?;
    let session = f
        .opt_nonempty_str("sessionId")?
        .map(|raw| parse_id(raw, "sessionId", ContextId::parse))
        .transpose()?;
    let raw = f
        .get("message")
        .ok_or_else(|| invalid("message", "is required"))?;
    let mut message = decode_message(d, raw, "message")?;
    require_user(d, &message)?;
    message.task_id = Some(id);
    if session.is_some() {
        message.context_id = session;
    }
    Ok(SendMessage {
        message,
        config: SendConfig {
            accepted_output_modes: f.strings("acceptedOutputModes")?,
            history_length: history_length(d, f)?,
            return_immediately: false,
            push: decode_send_push(d, f)?,
            if_generation_match: None,
        },
        metadata: without_reserved_keys(f.opt_metadata("metadata")?),
        create_missing_task: true,
        idempotency_key: None,
    })
}

fn require_user(d: Dialect, message: &Message) -> Result<(), Error> {
    match message.role {
        Role::User => Ok(()),
        Role::Agent => Err(invalid(
            "message.role",
            format!(
                "must be {} (clients send user messages)",
                role_name(d, Role::User)
            ),
        )),
    }
}

/// `historyLength` of `f`, with the 0.3 reading of `0`.
fn history_length(d: Dialect, f: &Fields<'_>) -> Result<Option<u32>, Error> {
    let n = f.opt_count("historyLength")?;
    Ok(match d {
        Dialect::V03Rpc | Dialect::V03Rest => n.filter(|&n| n > 0),
        Dialect::V1 | Dialect::V01 => n,
    })
}

/// Decodes `GetTask` (`tasks/get`) parameters: `{id, historyLength?}`.
pub fn decode_get_task(d: Dialect, params: &Value) -> Result<TaskQuery, Error> {
    let f = Fields::root(params)?;
    Ok(TaskQuery {
        id: task_id(&f)?,
        history_length: history_length(d, &f)?,
    })
}

/// Decodes the task id of `CancelTask` / `SubscribeToTask` (0.3 `tasks/cancel`,
/// `tasks/resubscribe`): `id`, also accepted as `taskId`.
pub fn decode_task_id(_d: Dialect, params: &Value) -> Result<TaskId, Error> {
    task_id(&Fields::root(params)?)
}

/// `id`, `taskId`, or a 0.3 REST resource name `tasks/{id}`.
fn task_id(f: &Fields<'_>) -> Result<TaskId, Error> {
    if let Some(raw) = f.opt_str("id")? {
        return parse_id(raw, "id", TaskId::parse);
    }
    if let Some(raw) = f.opt_str("taskId")? {
        return parse_id(raw, "taskId", TaskId::parse);
    }
    if let Some(name) = f.opt_str("name")? {
        let raw = name.strip_prefix("tasks/").unwrap_or(name);
        return parse_id(raw, "name", TaskId::parse);
    }
    Err(invalid("id", "is required"))
}

/// Decodes `ListTasks` parameters (JSON-RPC params or REST query values).
pub fn decode_list_tasks(d: Dialect, params: &Value) -> Result<ListTasksQuery, Error> {
    let f = Fields::root(params)?;
    let context_id = f
        .opt_nonempty_str("contextId")?
        .map(|raw| parse_id(raw, "contextId", ContextId::parse))
        .transpose()?;
    // An empty query value (`?status=`) means no filter; UNSPECIFIED / 0 is refused.
    let status = match f.get("status") {
        None => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(raw) => Some(parse_state(raw, "status")?),
    };
    let page_size = match f.opt_int("pageSize")? {
        None => DEFAULT_PAGE_SIZE,
        Some(n) if (1..=i64::from(MAX_PAGE_SIZE)).contains(&n) => n as u32,
        Some(_) => {
            return Err(invalid(
                "pageSize",
                format!("must be between 1 and {MAX_PAGE_SIZE}"),
            ));
        }
    };
    let status_timestamp_after = f
        .opt_nonempty_str("statusTimestampAfter")?
        .map(|raw| {
            Timestamp::parse_rfc3339(raw)
                .ok_or_else(|| invalid("statusTimestampAfter", "must be an RFC 3339 timestamp"))
        })
        .transpose()?;
    Ok(ListTasksQuery {
        context_id,
        status,
        page_size,
        page_token: f.opt_nonempty_str("pageToken")?.map(str::to_owned),
        history_length: history_length(d, &f)?,
        status_timestamp_after,
        include_artifacts: f.opt_bool("includeArtifacts")?.unwrap_or(false),
    })
}

/// Refuses a message with a part whose `mediaType` the agent does not accept. A type is
/// accepted when `accepted` is empty, or lists it exactly, `*/*`, or `type/*`
/// (compared without parameters, case-insensitively). Parts without a media type pass.
pub fn check_input_modes(message: &Message, accepted: &[String]) -> Result<(), Error> {
    if accepted.is_empty() {
        return Ok(());
    }
    let accepted: Vec<String> = accepted.iter().map(|a| essence(a)).collect();
    for part in &message.parts {
        let Some(media_type) = &part.media_type else {
            continue;
        };
        let wanted = essence(media_type);
        let family = wanted.split('/').next().unwrap_or_default();
        let ok = accepted.iter().any(|a| {
            *a == wanted || a == "*/*" || a.strip_suffix("/*").is_some_and(|f| f == family)
        });
        if !ok {
            return Err(Error::ContentTypeNotSupported(media_type.clone()));
        }
    }
    Ok(())
}

/// `Text/Plain; charset=utf-8` -> `text/plain`.
fn essence(media_type: &str) -> String {
    media_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

#[cfg(test)]
#[path = "params_tests.rs"]
mod tests;
