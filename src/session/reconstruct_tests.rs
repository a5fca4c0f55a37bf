//! Origins §2 `TestEventsAdapter*` scenarios and seed 003/004 reconstruction scenarios.

use serde_json::{Value, json};

use super::*;
use crate::domain::Timestamp;
use crate::session::HeuristicEstimator;

fn msg(seq: i64, role: &str, content: &str) -> StoredMessage {
    StoredMessage::text(seq, role, content, Timestamp(1_000 + seq))
}

fn with_calls(mut m: StoredMessage, calls: Vec<ToolCall>) -> StoredMessage {
    m.tool_calls = calls;
    m
}

fn authored(mut m: StoredMessage, author: &str) -> StoredMessage {
    m.author = Some(author.to_owned());
    m
}

fn all(history: &[StoredMessage], root: &str) -> Vec<Event> {
    events(
        history,
        root,
        &HeuristicEstimator,
        &HistoryConfig::default(),
    )
}

fn content(e: &Event) -> &Content {
    e.content.as_ref().unwrap()
}

fn response_part(e: &Event) -> &FunctionResponse {
    match &content(e).parts[0] {
        Part::FunctionResponse(r) => r,
        other => panic!("not a response: {other:?}"),
    }
}

#[test]
fn events_adapter() {
    let out = all(
        &[msg(1, "user", "hi"), msg(2, "assistant", "hello")],
        "root",
    );
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|e| e.timestamp.0 > 0));
    assert_eq!(out[0].id, "msg-1");
    assert_eq!(content(&out[1]).role, "model");
}

#[test]
fn events_adapter_author_mapping() {
    let history = [
        msg(1, "user", "a"),
        msg(2, "assistant", "b"),
        msg(3, "tool", "c"),
        msg(4, "function", "d"),
    ];
    let authors: Vec<_> = all(&history, "").into_iter().map(|e| e.author).collect();
    // Tool rows answering nothing take the agent, never "tool" (a foreign agent to ADK).
    assert_eq!(
        authors,
        ["user", "lango-agent", "lango-agent", "lango-agent"]
    );
}

#[test]
fn events_adapter_author_mapping_multi_agent() {
    let history = [
        authored(msg(1, "assistant", "from a sub-agent"), "researcher"),
        msg(2, "assistant", "from the root"),
    ];
    let authors: Vec<_> = all(&history, "lango-orchestrator")
        .into_iter()
        .map(|e| e.author)
        .collect();
    assert_eq!(authors, ["researcher", "lango-orchestrator"]);
}

#[test]
fn events_adapter_model_role_mapping() {
    let out = all(&[msg(1, "model", "x")], "root");
    assert_eq!(out[0].author, "root");
    let out = all(&[msg(1, "model", "x")], "");
    assert_eq!(out[0].author, FALLBACK_AGENT_NAME);
    assert_ne!(out[0].author, "model");
}

#[test]
fn events_adapter_unknown_role_fallback() {
    let out = all(&[msg(1, "narrator", "x")], "root");
    assert_eq!(out[0].author, "root");
    assert_eq!(content(&out[0]).role, "narrator");
}

#[test]
fn events_adapter_truncation() {
    let history: Vec<_> = (1..=150).map(|i| msg(i, "user", "msg")).collect();
    assert_eq!(all(&history, "root").len(), 150);
    let small = HistoryConfig {
        token_budget: 30,
        max_messages: 0,
    };
    let out = events(&history, "root", &HeuristicEstimator, &small);
    assert!(out.len() < 150);
    assert_eq!(out.len(), 7);
}

#[test]
fn events_adapter_default_token_budget() {
    let history: Vec<_> = (1..=150).map(|i| msg(i, "user", "msg")).collect();
    let zero = HistoryConfig {
        token_budget: 0,
        max_messages: 0,
    };
    assert_eq!(
        events(&history, "root", &HeuristicEstimator, &zero).len(),
        150
    );
}

#[test]
fn events_adapter_with_tool_calls() {
    let history = [with_calls(
        msg(1, "assistant", ""),
        vec![ToolCall::call(
            "adk-uuid-123",
            "exec",
            r#"{"command":"ls"}"#,
        )],
    )];
    let out = all(&history, "root");
    assert_eq!(out.len(), 1);
    match &content(&out[0]).parts[..] {
        [Part::FunctionCall(c)] => {
            assert_eq!((c.id.as_str(), c.name.as_str()), ("adk-uuid-123", "exec"));
            assert_eq!(c.args.get("command"), Some(&json!("ls")));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn events_adapter_empty_history() {
    assert!(all(&[], "root").is_empty());
}

#[test]
fn events_adapter_at() {
    let history = [
        msg(1, "user", "first"),
        msg(2, "assistant", "second"),
        msg(3, "user", "third"),
    ];
    let out = all(&history, "root");
    assert_eq!(content(&out[0]).parts, [Part::Text("first".into())]);
    assert_eq!(content(&out[2]).parts, [Part::Text("third".into())]);
}

#[test]
fn events_adapter_skips_records_without_parts() {
    let history = [msg(1, "user", ""), msg(2, "assistant", "kept")];
    let out = all(&history, "root");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].id, "msg-2");
}

#[test]
fn events_adapter_function_response_reconstruction() {
    let new_format = [
        msg(1, "user", "list files"),
        with_calls(
            msg(2, "assistant", ""),
            vec![ToolCall::call("adk-abc-123", "exec", "{}")],
        ),
        with_calls(
            msg(3, "tool", r#"{"result":"file.txt"}"#),
            vec![ToolCall::response(
                "adk-abc-123",
                "exec",
                r#"{"result":"file.txt"}"#,
            )],
        ),
    ];
    let out = all(&new_format, "root");
    assert_eq!(out.len(), 3);
    assert_eq!(content(&out[1]).role, "model");
    assert_eq!(content(&out[2]).role, "function");
    let r = response_part(&out[2]);
    assert_eq!((r.id.as_str(), r.name.as_str()), ("adk-abc-123", "exec"));
    assert_eq!(r.response.get("result"), Some(&json!("file.txt")));

    let legacy = [
        with_calls(
            msg(1, "assistant", ""),
            vec![ToolCall::call("call_exec", "exec", "{}")],
        ),
        msg(2, "tool", r#"{"result":"file.txt"}"#),
    ];
    let out = all(&legacy, "root");
    let r = response_part(&out[1]);
    assert_eq!((r.id.as_str(), r.name.as_str()), ("call_exec", "exec"));
    assert_eq!(r.response.get("result"), Some(&json!("file.txt")));
    assert_eq!(content(&out[1]).role, "function");

    let orphan = [msg(1, "user", "hi"), msg(2, "tool", "plain output")];
    let out = all(&orphan, "root");
    assert_eq!(content(&out[1]).parts, [Part::Text("plain output".into())]);
}

#[test]
fn events_adapter_legacy_response_positional_and_non_object() {
    let history = [
        with_calls(
            msg(1, "assistant", ""),
            vec![
                ToolCall::call("c1", "a", "{}"),
                ToolCall::call("c2", "b", "{}"),
            ],
        ),
        msg(2, "tool", "[1,2]"),
        msg(3, "tool", ""),
    ];
    let out = all(&history, "root");
    let (first, second) = (response_part(&out[1]), response_part(&out[2]));
    assert_eq!((first.id.as_str(), second.id.as_str()), ("c1", "c2"));
    assert_eq!(
        first.response.get("result"),
        Some(&Value::String("[1,2]".into()))
    );
    assert!(second.response.is_empty());
}

#[test]
fn events_adapter_function_response_user_role() {
    // Rows the original stored as `user` because ADK labels responses so.
    let history = [
        authored(
            with_calls(
                msg(1, "assistant", ""),
                vec![ToolCall::call("c1", "exec", "{}")],
            ),
            "worker",
        ),
        with_calls(
            msg(2, "user", "{}"),
            vec![ToolCall::response("c1", "exec", "{}")],
        ),
    ];
    let out = all(&history, "root");
    assert_eq!(content(&out[1]).role, "function");
    assert_eq!(response_part(&out[1]).id, "c1");
    assert_eq!(out[1].author, "worker");
}

#[test]
fn events_adapter_tool_author_is_the_call_author() {
    let history = [
        authored(
            with_calls(
                msg(1, "assistant", ""),
                vec![ToolCall::call("c1", "exec", "{}")],
            ),
            "researcher",
        ),
        with_calls(
            msg(2, "tool", "{}"),
            vec![ToolCall::response("c1", "exec", "{}")],
        ),
        msg(3, "tool", "legacy"),
    ];
    let out = all(&history, "root");
    assert_eq!(out[1].author, "researcher");
    // A call cut by the budget still lends its author through the whole window.
    let cut = events(
        &history[1..],
        "root",
        &HeuristicEstimator,
        &HistoryConfig::default(),
    );
    assert_eq!(cut[0].author, "root");
    let whole_window_but_cut = HistoryConfig {
        token_budget: 1,
        max_messages: 0,
    };
    let out = events(
        &history[..2],
        "root",
        &HeuristicEstimator,
        &whole_window_but_cut,
    );
    assert!(
        out.is_empty(),
        "a response whose call was cut is not sent alone"
    );
}

#[test]
fn history_config_from_settings() {
    let settings = crate::config::HistorySettings {
        token_budget: 500,
        max_messages: 20,
    };
    assert_eq!(
        HistoryConfig::from(&settings),
        HistoryConfig {
            token_budget: 500,
            max_messages: 20
        }
    );
}
