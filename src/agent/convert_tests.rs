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
