//! The 0.3 HTTP+JSON answers (the 0.3 proto's JSON) in the 0.3 JSON-RPC shape, which
//! the client reads: `kind` tags, `parts`, lowercase states.

use serde_json::{Map, Value, json};

/// A send's answer (`{"task"}` or `{"msg"}`, `{"message"}` by its JSON name), or a
/// task.
pub(super) fn as_rpc(answer: Value) -> Value {
    let Value::Object(mut answer) = answer else {
        return answer;
    };
    if let Some(task) = answer.remove("task") {
        return task_of(task);
    }
    if let Some(message) = answer.remove("msg").or_else(|| answer.remove("message")) {
        return message_of(message);
    }
    task_of(Value::Object(answer))
}

fn task_of(task: Value) -> Value {
    let Value::Object(mut task) = task else {
        return task;
    };
    task.insert("kind".into(), json!("task"));
    if let Some(Value::Object(status)) = task.get_mut("status") {
        if let Some(state) = status.get("state").and_then(Value::as_str) {
            let state = state_of(state);
            status.insert("state".into(), json!(state));
        }
        // The proto's `update`, whose JSON name is `message`.
        if let Some(message) = status.remove("message").or_else(|| status.remove("update")) {
            status.insert("message".into(), message_of(message));
        }
    }
    if let Some(Value::Array(artifacts)) = task.get_mut("artifacts") {
        for artifact in artifacts.iter_mut().filter_map(Value::as_object_mut) {
            tag_parts(artifact, "parts");
        }
    }
    Value::Object(task)
}

fn message_of(message: Value) -> Value {
    let Value::Object(mut message) = message else {
        return message;
    };
    message.insert("kind".into(), json!("message"));
    tag_parts(&mut message, "content");
    Value::Object(message)
}

/// The parts under `key` (or `parts`) as `kind`-tagged 0.3 JSON-RPC parts.
fn tag_parts(holder: &mut Map<String, Value>, key: &str) {
    let Some(Value::Array(parts)) = holder.remove(key).or_else(|| holder.remove("parts")) else {
        return;
    };
    let parts = parts
        .into_iter()
        .map(|part| {
            let Value::Object(mut part) = part else {
                return part;
            };
            if part.contains_key("text") {
                part.insert("kind".into(), json!("text"));
            } else if let Some(data) = part.remove("data") {
                // A DataPart holds its Struct under `data`.
                let data = match data {
                    Value::Object(mut wrapper) if wrapper.contains_key("data") => {
                        wrapper.remove("data").unwrap_or(Value::Null)
                    }
                    bare => bare,
                };
                part.insert("kind".into(), json!("data"));
                part.insert("data".into(), data);
            } else if part.contains_key("file") {
                part.insert("kind".into(), json!("file"));
            }
            Value::Object(part)
        })
        .collect();
    holder.insert("parts".into(), Value::Array(parts));
}

/// `TASK_STATE_INPUT_REQUIRED` → `input-required`; 0.3 spelled canceled
/// `TASK_STATE_CANCELLED`.
fn state_of(state: &str) -> String {
    match state.strip_prefix("TASK_STATE_") {
        Some("CANCELLED") => "canceled".into(),
        Some(name) => name.to_ascii_lowercase().replace('_', "-"),
        None => state.to_owned(),
    }
}
