//! A remote agent's answer read into the tool's result: a send's reply (a direct message
//! or a task, [`reply`]), a task in either version's shape ([`task_outcome`]) settled into
//! an [`Answer`] once it ends or asks for input, a refusal once it failed, or nothing yet
//! while it runs; its status text and artifacts as the tool gives them.

use a2a_pb::protojson as pb;
use serde_json::{Value, json};

use super::endpoint::CallError;

/// A remote agent's answer: its task (or its direct message) as the tool gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// `completed`, `input-required`, `auth-required`, or `message` for a direct reply.
    pub state: &'static str,
    /// The text of the status message (or of the direct reply), parts joined.
    pub text: String,
    /// The task's artifacts as the tool gives them (`name`, `text`, `data`).
    pub artifacts: Vec<Value>,
    pub task_id: String,
    pub context_id: String,
}

/// What a send left: the remote's answer, or its task still running.
#[derive(Debug, Clone, PartialEq)]
pub enum Sent {
    Answered(Answer),
    Running { task_id: String, context_id: String },
}

/// A task's answer in either version's shape, `None` while it runs.
pub(super) fn task_outcome(v03: bool, task: Value) -> Result<Option<Answer>, CallError> {
    if v03 {
        return outcome_03(&task);
    }
    outcome(
        &serde_json::from_value::<pb::Task>(task)
            .map_err(|e| CallError::Refused(format!("answered with no task ({e})")))?,
    )
}

pub(super) enum Reply {
    Answer(Answer),
    Task(Value),
}

pub(super) fn reply(v03: bool, result: Value) -> Result<Reply, CallError> {
    if v03 {
        return match result.get("kind").and_then(Value::as_str) {
            Some("message") => Ok(Reply::Answer(Answer {
                state: "message",
                text: text_03(&result),
                artifacts: Vec::new(),
                task_id: str_of(&result, "taskId"),
                context_id: str_of(&result, "contextId"),
            })),
            Some("task") => Ok(Reply::Task(result)),
            _ => Err(CallError::Refused(
                "answered message/send with neither a task nor a message".into(),
            )),
        };
    }
    let response: pb::SendMessageResponse = serde_json::from_value(result).map_err(|e| {
        CallError::Refused(format!(
            "answered SendMessage with no task or message ({e})"
        ))
    })?;
    match response.payload {
        Some(pb::send_message_response::Payload::Message(message)) => Ok(Reply::Answer(Answer {
            state: "message",
            text: text_of(&message.parts),
            artifacts: Vec::new(),
            task_id: message.task_id,
            context_id: message.context_id,
        })),
        Some(pb::send_message_response::Payload::Task(task)) => Ok(Reply::Task(
            serde_json::to_value(task).map_err(|e| CallError::Refused(e.to_string()))?,
        )),
        None => Err(CallError::Refused(
            "answered SendMessage with neither a task nor a message".into(),
        )),
    }
}

fn str_of(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// The text parts of a 0.3 message or artifact (`parts[].kind == "text"`), joined.
pub(super) fn text_03(holder: &Value) -> String {
    let parts = holder.get("parts").and_then(Value::as_array);
    parts
        .into_iter()
        .flatten()
        .filter(|p| p.get("kind").and_then(Value::as_str) == Some("text"))
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

/// [`outcome`] of a 0.3 task (lowercase states, `kind`-tagged parts).
pub(super) fn outcome_03(task: &Value) -> Result<Option<Answer>, CallError> {
    let status = task.get("status");
    let text = status
        .and_then(|s| s.get("message"))
        .map(text_03)
        .unwrap_or_default();
    let state = status.and_then(|s| s.get("state")).and_then(Value::as_str);
    let artifacts = (task.get("artifacts").and_then(Value::as_array).into_iter())
        .flatten()
        .map(|a| {
            let data = (a.get("parts").and_then(Value::as_array).into_iter())
                .flatten()
                .filter(|p| p.get("kind").and_then(Value::as_str) == Some("data"))
                .filter_map(|p| p.get("data").cloned())
                .collect();
            let name = a.get("name").and_then(Value::as_str).unwrap_or("");
            artifact_view(name, text_03(a), data)
        })
        .collect();
    settle(
        str_of(task, "id"),
        str_of(task, "contextId"),
        state,
        text,
        artifacts,
    )
}

/// The task's answer once it ended or asks for input; `None` while it runs; a refusal
/// for a task that failed, was rejected or canceled.
fn outcome(task: &pb::Task) -> Result<Option<Answer>, CallError> {
    let status = task.status.as_ref();
    let text = status
        .and_then(|s| s.message.as_ref())
        .map(|m| text_of(&m.parts))
        .unwrap_or_default();
    // The 1.0 states by their 0.3 names, which `settle` reads.
    let state = match pb::TaskState::try_from(status.map_or(0, |s| s.state)) {
        Ok(pb::TaskState::Completed) => Some("completed"),
        Ok(pb::TaskState::InputRequired) => Some("input-required"),
        Ok(pb::TaskState::AuthRequired) => Some("auth-required"),
        Ok(pb::TaskState::Submitted) => Some("submitted"),
        Ok(pb::TaskState::Working) => Some("working"),
        Ok(pb::TaskState::Failed) => Some("failed"),
        Ok(pb::TaskState::Rejected) => Some("rejected"),
        Ok(pb::TaskState::Canceled) => Some("canceled"),
        Ok(pb::TaskState::Unspecified) | Err(_) => None,
    };
    let artifacts = task
        .artifacts
        .iter()
        .map(|a| {
            let data = (a.parts.iter())
                .filter_map(|p| match &p.content {
                    Some(pb::part::Content::Data(value)) => serde_json::to_value(value).ok(),
                    _ => None,
                })
                .collect();
            artifact_view(&a.name, text_of(&a.parts), data)
        })
        .collect();
    settle(
        task.id.clone(),
        task.context_id.clone(),
        state,
        text,
        artifacts,
    )
}

/// The answer of a task in `state` (0.3 names), in either dialect: `None` while it
/// runs, a refusal once it failed, was rejected or canceled, or in no known state.
fn settle(
    id: String,
    context_id: String,
    state: Option<&str>,
    text: String,
    artifacts: Vec<Value>,
) -> Result<Option<Answer>, CallError> {
    let ended = |how: &str| match text.as_str() {
        "" => CallError::Refused(format!("its task {id} {how}")),
        text => CallError::Refused(format!("its task {id} {how}: {text}")),
    };
    let state = match state {
        Some("completed") => "completed",
        Some("input-required") => "input-required",
        Some("auth-required") => "auth-required",
        Some("submitted" | "working") => return Ok(None),
        Some(how @ ("failed" | "rejected" | "canceled")) => return Err(ended(how)),
        _ => {
            return Err(CallError::Refused(format!(
                "answered with task {id} in no known state"
            )));
        }
    };
    Ok(Some(Answer {
        state,
        text,
        artifacts,
        task_id: id,
        context_id,
    }))
}

/// An artifact as the tool gives it: its `name`, `text` and `data`, each when present.
fn artifact_view(name: &str, text: String, data: Vec<Value>) -> Value {
    let mut artifact = serde_json::Map::new();
    if !name.is_empty() {
        artifact.insert("name".into(), json!(name));
    }
    if !text.is_empty() {
        artifact.insert("text".into(), json!(text));
    }
    if !data.is_empty() {
        artifact.insert("data".into(), Value::Array(data));
    }
    Value::Object(artifact)
}

/// The text parts of a message or artifact, joined.
fn text_of(parts: &[pb::Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match &p.content {
            Some(pb::part::Content::Text(text)) => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(state: pb::TaskState, text: &str) -> pb::Task {
        serde_json::from_value(json!({
            "id": "t1", "contextId": "c1",
            "status": {"state": state.as_str_name(), "message": {
                "messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": text}]}},
            "artifacts": [{"artifactId": "a", "name": "answer",
                "parts": [{"text": "part one"}, {"data": {"n": 1}}]}],
        }))
        .expect("a task")
    }

    #[test]
    fn a_task_ends_in_an_answer_a_refusal_or_not_yet() {
        let done = outcome(&task(pb::TaskState::Completed, "all good"))
            .unwrap()
            .unwrap();
        assert_eq!(done.state, "completed");
        assert_eq!(done.text, "all good");
        assert_eq!(
            done.artifacts,
            vec![json!({"name": "answer", "text": "part one", "data": [{"n": 1.0}]})]
        );
        assert_eq!(
            (done.task_id.as_str(), done.context_id.as_str()),
            ("t1", "c1")
        );
        let asks = outcome(&task(pb::TaskState::InputRequired, "which account?"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (asks.state, asks.text.as_str()),
            ("input-required", "which account?")
        );
        assert_eq!(outcome(&task(pb::TaskState::Working, "")).unwrap(), None);
        assert_eq!(
            outcome(&task(pb::TaskState::Failed, "no such invoice")),
            Err(CallError::Refused(
                "its task t1 failed: no such invoice".into()
            ))
        );
        assert!(matches!(
            outcome(&task(pb::TaskState::Rejected, "")),
            Err(CallError::Refused(text)) if text == "its task t1 rejected"
        ));
    }

    #[test]
    fn a_0_3_task_reads_as_a_1_0_one() {
        let task = |state: &str| {
            json!({"kind": "task", "id": "t1", "contextId": "c1",
                "status": {"state": state, "message": {"kind": "message", "messageId": "m",
                    "role": "agent", "parts": [{"kind": "text", "text": "why"}]}},
                "artifacts": [{"artifactId": "a", "parts": [
                    {"kind": "text", "text": "one"}, {"kind": "data", "data": {"n": 1}}]}]})
        };
        let done = outcome_03(&task("completed")).unwrap().unwrap();
        assert_eq!((done.state, done.text.as_str()), ("completed", "why"));
        assert_eq!(
            done.artifacts,
            vec![json!({"text": "one", "data": [{"n": 1}]})]
        );
        assert_eq!(outcome_03(&task("working")).unwrap(), None);
        assert_eq!(
            outcome_03(&task("failed")),
            Err(CallError::Refused("its task t1 failed: why".into()))
        );
        assert!(outcome_03(&task("unknown")).is_err());
        let message = reply(
            true,
            json!({"kind": "message", "messageId": "m", "role": "agent",
            "parts": [{"kind": "text", "text": "hi"}]}),
        );
        assert!(matches!(message, Ok(Reply::Answer(a)) if a.state == "message" && a.text == "hi"));
    }
}
