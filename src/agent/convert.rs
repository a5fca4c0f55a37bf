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
mod tests {
    //! Contract A.10 and A.14 scenarios for `convert_messages` (origins' `TestConvertMessages_*`).

    use serde_json::{Map, Value, json};

    use super::*;
    use crate::session::{FunctionCall, FunctionResponse};

    fn text(role: &str, t: &str) -> Content {
        Content {
            role: role.into(),
            parts: vec![Part::Text(t.into())],
        }
    }

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    fn call(id: &str, name: &str, args: Value) -> Part {
        Part::FunctionCall(FunctionCall {
            id: id.into(),
            name: name.into(),
            args: object(args),
        })
    }

    fn response(id: &str, name: &str, body: Value) -> Part {
        Part::FunctionResponse(FunctionResponse {
            id: id.into(),
            name: name.into(),
            response: object(body),
        })
    }

    fn content(role: &str, parts: Vec<Part>) -> Content {
        Content {
            role: role.into(),
            parts,
        }
    }

    fn convert(contents: &[Content]) -> Vec<Message> {
        convert_messages_with_ids(contents, None, &mut IdSource::sequential())
    }

    #[test]
    fn convert_messages_role_mapping() {
        let messages = convert(&[
            text("user", "u"),
            text("model", "m"),
            text("function", "f"),
            text("system", "s"),
        ]);
        let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::User, Role::Assistant, Role::Tool, Role::System]
        );
    }

    #[test]
    fn convert_messages_text_content() {
        let messages = convert(&[content(
            "user",
            vec![Part::Text("Hello ".into()), Part::Text("world".into())],
        )]);
        assert_eq!(messages, [Message::text(Role::User, "Hello world")]);
    }

    #[test]
    fn convert_messages_empty() {
        assert!(convert(&[]).is_empty());
        assert!(convert(&[content("user", vec![])]).is_empty());
    }

    #[test]
    fn convert_messages_function_call() {
        let messages = convert(&[content(
            "model",
            vec![call("call-1", "exec", json!({"command": "ls"}))],
        )]);
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].role, Role::Assistant);
        assert_eq!(messages[0].tool_calls.len(), 1);
        let tc = &messages[0].tool_calls[0];
        assert_eq!((tc.id.as_str(), tc.name.as_str()), ("call-1", "exec"));
        let args: Value = serde_json::from_str(&tc.arguments).unwrap();
        assert_eq!(args, json!({"command": "ls"}));
    }

    #[test]
    fn convert_messages_function_call_fallback_ids_are_unique() {
        let messages = convert(&[content(
            "model",
            vec![
                call("", "search", json!({"q": "a"})),
                call("", "search", json!({"q": "b"})),
            ],
        )]);
        let ids: Vec<&str> = messages[0]
            .tool_calls
            .iter()
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(ids, ["call_search_1", "call_search_2"]);
    }

    #[test]
    fn convert_messages_empty_function_call_name() {
        let messages = convert(&[content(
            "model",
            vec![Part::Text("thinking".into()), call("x", "", json!({}))],
        )]);
        assert_eq!(messages.len(), 1);
        assert!(messages[0].tool_calls.is_empty());
        assert_eq!(messages[0].content, "thinking");
    }

    #[test]
    fn convert_messages_function_response() {
        let messages = convert(&[
            content(
                "model",
                vec![call("exec", "exec", json!({"command": "ls"}))],
            ),
            content(
                "function",
                vec![response("exec", "exec", json!({"output": "file.txt"}))],
            ),
        ]);
        assert_eq!(messages.len(), 2);
        let tool = &messages[1];
        assert_eq!(tool.role, Role::Tool);
        assert_eq!(tool.tool_call_id.as_deref(), Some("exec"));
        assert_eq!(tool.name.as_deref(), Some("exec"));
        let body: Value = serde_json::from_str(&tool.content).unwrap();
        assert_eq!(body, json!({"output": "file.txt"}));
    }

    #[test]
    fn convert_messages_function_response_in_user_role_is_tool() {
        // ADK labels tool results `user`; the parts decide (contract A.3).
        let messages = convert(&[
            content("model", vec![call("c1", "exec", json!({}))]),
            content("user", vec![response("c1", "exec", json!({"ok": true}))]),
        ]);
        assert_eq!(messages[1].role, Role::Tool);
        assert_eq!(messages.len(), 2);
    }

    #[test]
    fn convert_messages_function_response_without_id_answers_pending_call() {
        let messages = convert(&[
            content(
                "model",
                vec![
                    call("", "search", json!({"q": "a"})),
                    call("", "search", json!({"q": "b"})),
                ],
            ),
            content(
                "function",
                vec![
                    response("", "search", json!({"r": "a"})),
                    response("", "search", json!({"r": "b"})),
                ],
            ),
        ]);
        let call_ids: Vec<&str> = messages[0]
            .tool_calls
            .iter()
            .map(|c| c.id.as_str())
            .collect();
        let answered: Vec<&str> = messages[1..]
            .iter()
            .filter_map(|m| m.tool_call_id.as_deref())
            .collect();
        assert_eq!(call_ids, answered);
    }

    #[test]
    fn convert_messages_function_response_without_any_call_gets_fresh_id() {
        let messages = convert(&[content(
            "function",
            vec![response("", "exec", json!({"ok": true}))],
        )]);
        assert_eq!(messages[0].tool_call_id.as_deref(), Some("call_exec_1"));
    }

    #[test]
    fn convert_messages_multiple_function_responses_split() {
        let messages = convert(&[
            content(
                "model",
                vec![
                    call("a", "exec", json!({"command": "ls"})),
                    call("b", "read", json!({"path": "x"})),
                ],
            ),
            content(
                "function",
                vec![
                    response("a", "exec", json!({"output": "x"})),
                    response("b", "read", json!({"output": "y"})),
                ],
            ),
        ]);
        assert_eq!(messages.len(), 3, "{messages:#?}");
        assert_eq!(messages[0].tool_calls.len(), 2, "calls stay merged");
        for (message, (id, name)) in messages[1..].iter().zip([("a", "exec"), ("b", "read")]) {
            assert_eq!(message.role, Role::Tool);
            assert_eq!(message.tool_call_id.as_deref(), Some(id));
            assert_eq!(message.name.as_deref(), Some(name));
        }
    }

    #[test]
    fn convert_messages_system_instruction() {
        let system = content(
            "system",
            vec![
                Part::Text("You are a helpful assistant.".into()),
                Part::Text("Always be concise.".into()),
            ],
        );
        let messages = convert_messages(&[text("user", "hi")], Some(&system));
        assert_eq!(
            messages,
            [
                Message::text(
                    Role::System,
                    "You are a helpful assistant.\nAlways be concise."
                ),
                Message::text(Role::User, "hi"),
            ]
        );
    }

    #[test]
    fn convert_messages_no_system_instruction() {
        let empty = content("system", vec![Part::Text(String::new())]);
        for system in [None, Some(&empty)] {
            let messages = convert_messages(&[text("user", "hi")], system);
            assert_eq!(messages, [Message::text(Role::User, "hi")]);
        }
    }
}
