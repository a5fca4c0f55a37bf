//! `convert_messages`: ADK contents become provider messages (contract A.10, A.14).
//!
//! One content gives one message for its text and calls, and one `tool` message per function
//! response: providers pair each result with one call id, so several responses folded into
//! one message would leave all but the last call unanswered (the original's bug).
//!
//! **Id rule** (the same as `session::append_event`): a call keeps its id, an empty one gets
//! a unique `call_<name>_<suffix>` from [`IdSource`]; a response keeps its id, an empty one
//! takes the id of the oldest unanswered call of the same name in the latest calling turn,
//! and only without such a call a fresh id. Never `call_<name>` alone (parallel calls to one
//! tool would collide) and never the bare name (it would match no call).

use serde_json::{Map, Value};

use super::Content;
use crate::providers::{Message, Role, ToolCall};
use crate::session::{IdSource, Part, system_instruction_text};

/// The provider messages for `contents`, preceded by one system message holding the
/// instruction's text when it has any. Ids missing from calls and responses are generated
/// with random suffixes (see the module docs).
pub fn convert_messages(contents: &[Content], system: Option<&Content>) -> Vec<Message> {
    convert_messages_with_ids(contents, system, &mut IdSource::random())
}

/// [`convert_messages`] with the id source given, so tests can predict generated ids.
pub fn convert_messages_with_ids(
    contents: &[Content],
    system: Option<&Content>,
    ids: &mut IdSource,
) -> Vec<Message> {
    let mut messages = Vec::with_capacity(contents.len() + 1);
    if let Some(text) = system_instruction_text(system) {
        messages.push(Message::text(Role::System, text));
    }
    // Calls of the latest calling turn not answered yet, oldest first: (id, name).
    let mut pending: Vec<(String, String)> = Vec::new();
    for content in contents {
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut responses = Vec::new();
        for part in &content.parts {
            match part {
                Part::Text(t) => text.push_str(t),
                // A call without a name cannot be answered or replayed to any provider.
                Part::FunctionCall(call) if call.name.is_empty() => {}
                Part::FunctionCall(call) => {
                    let id = non_empty_or(&call.id, || ids.call_id(&call.name));
                    calls.push(ToolCall {
                        id,
                        name: call.name.clone(),
                        arguments: json_text(&call.args),
                    });
                }
                Part::FunctionResponse(response) => {
                    let id = if response.id.is_empty() {
                        take_pending(&mut pending, &response.name)
                            .unwrap_or_else(|| ids.call_id(&response.name))
                    } else {
                        pending.retain(|(pending_id, _)| *pending_id != response.id);
                        response.id.clone()
                    };
                    responses.push(Message {
                        role: Role::Tool,
                        content: json_text(&response.response),
                        tool_calls: Vec::new(),
                        tool_call_id: Some(id),
                        name: Some(response.name.clone()),
                    });
                }
            }
        }
        if !calls.is_empty() {
            pending = calls
                .iter()
                .map(|c| (c.id.clone(), c.name.clone()))
                .collect();
        }
        if !text.is_empty() || !calls.is_empty() {
            // Calls are the model's whatever the declared role; a response-only content is
            // answered by its tool messages alone (ADK labels those contents `user`).
            let role = if calls.is_empty() {
                provider_role(&content.role)
            } else {
                Role::Assistant
            };
            messages.push(Message {
                role,
                content: text,
                tool_calls: calls,
                tool_call_id: None,
                name: None,
            });
        }
        messages.extend(responses);
    }
    messages
}

/// ADK roles to provider roles: `model`→assistant, `function`→tool, the rest by name.
/// Roles no provider knows are read as the user's (ADK writes only the four known ones).
fn provider_role(role: &str) -> Role {
    match role {
        "model" | "assistant" => Role::Assistant,
        "function" | "tool" => Role::Tool,
        "system" => Role::System,
        _ => Role::User,
    }
}

/// Removes and returns the oldest pending call to `name`.
fn take_pending(pending: &mut Vec<(String, String)>, name: &str) -> Option<String> {
    let position = pending.iter().position(|(_, n)| n == name)?;
    Some(pending.remove(position).0)
}

fn non_empty_or(id: &str, fallback: impl FnOnce() -> String) -> String {
    if id.is_empty() {
        fallback()
    } else {
        id.to_owned()
    }
}

/// A JSON object's text. Serialising a `Map` of `Value`s cannot fail (string keys only).
fn json_text(map: &Map<String, Value>) -> String {
    Value::Object(map.clone()).to_string()
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
