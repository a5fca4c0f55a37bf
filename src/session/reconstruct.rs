//! `events`: stored history back to ADK events for the next model turn (contract A.6–7).
//!
//! Model records (`assistant`, `model`, and A2A `agent` rows) give a text part and one
//! `FunctionCall` per stored call, content role `model`. Tool records give
//! `FunctionResponse` parts, content role `function`: from their response entries, or for
//! legacy rows without entries positionally from the preceding model message's calls.
//! Tool output with no call to answer becomes plain `user` text (a `tool` turn without a
//! call id is refused by every provider). Authors: the stored one wins; tool records
//! without one take the author of the call they answer (ADK treats an unknown author such
//! as `tool` as a foreign agent and flattens the response into text); everything else that
//! is not `user` is the root agent — never the literal `model`.

use std::collections::{HashMap, VecDeque};

use serde_json::{Map, Value};

use super::adk::{Content, Event, EventActions, FunctionCall, FunctionResponse, Part};
use super::budget::{TokenEstimator, truncate_to_budget};
use super::record::{ROLE_USER, StoredMessage, ToolCall};
use crate::config::HistorySettings;

/// The author used for agent messages when the root agent has no name.
pub const FALLBACK_AGENT_NAME: &str = "lango-agent";

/// How much history a model sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryConfig {
    /// Token budget; 0 means [`super::DEFAULT_TOKEN_BUDGET`].
    pub token_budget: usize,
    /// Message cap on top of the budget; 0 means none.
    pub max_messages: usize,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            token_budget: super::DEFAULT_TOKEN_BUDGET,
            max_messages: 0,
        }
    }
}

impl From<&HistorySettings> for HistoryConfig {
    fn from(settings: &HistorySettings) -> Self {
        Self {
            token_budget: settings.token_budget,
            max_messages: settings.max_messages,
        }
    }
}

/// The events a model turn starts from: `history` truncated to the budget, each record
/// rebuilt as an ADK event (records that yield no part are skipped). Event ids are
/// `msg-<seq>`, stable across calls.
pub fn events(
    history: &[StoredMessage],
    root_agent: &str,
    estimator: &dyn TokenEstimator,
    cfg: &HistoryConfig,
) -> Vec<Event> {
    let agent = if root_agent.is_empty() {
        FALLBACK_AGENT_NAME
    } else {
        root_agent
    };
    // Over the whole window, not just the kept part: a kept response may answer a call
    // whose message was cut, and it still belongs to that call's agent.
    let call_authors: HashMap<&str, String> = history
        .iter()
        .filter(|m| m.has_calls())
        .flat_map(|m| {
            let author = author_of(m, agent);
            m.tool_calls
                .iter()
                .filter(|tc| tc.is_call())
                .map(move |tc| (tc.id.as_str(), author.clone()))
        })
        .collect();

    let kept = truncate_to_budget(history, cfg.token_budget, cfg.max_messages, estimator);
    let mut pending: VecDeque<&ToolCall> = VecDeque::new();
    let mut pending_author = agent.to_owned();
    let mut out = Vec::with_capacity(kept.len());
    for message in kept {
        let rebuilt = if message.is_tool_result() {
            tool_event(message, &call_authors, &mut pending, &pending_author, agent)
        } else if is_model_role(&message.role) {
            pending = message
                .tool_calls
                .iter()
                .filter(|tc| tc.is_call())
                .collect();
            pending_author = author_of(message, agent);
            Some(model_event(message, agent))
        } else {
            let parts = text_part(&message.content);
            let author = author_of(message, agent);
            Some((message.role.clone(), parts, author))
        };
        if let Some((role, parts, author)) = rebuilt.filter(|(_, parts, _)| !parts.is_empty()) {
            out.push(Event {
                id: format!("msg-{}", message.seq),
                author,
                content: Some(Content { role, parts }),
                partial: false,
                turn_complete: false,
                actions: EventActions::default(),
                timestamp: message.created_at,
            });
        }
    }
    out
}

type Rebuilt = (String, Vec<Part>, String);

fn model_event(message: &StoredMessage, agent: &str) -> Rebuilt {
    let mut parts = text_part(&message.content);
    parts.extend(
        message
            .tool_calls
            .iter()
            .filter(|tc| tc.is_call())
            .map(|tc| {
                Part::FunctionCall(FunctionCall {
                    id: tc.id.clone(),
                    name: tc.name.clone(),
                    args: parse_object(tc.input.as_deref().unwrap_or_default()),
                })
            }),
    );
    ("model".to_owned(), parts, author_of(message, agent))
}

fn tool_event(
    message: &StoredMessage,
    call_authors: &HashMap<&str, String>,
    pending: &mut VecDeque<&ToolCall>,
    pending_author: &str,
    agent: &str,
) -> Option<Rebuilt> {
    let responses: Vec<&ToolCall> = message
        .tool_calls
        .iter()
        .filter(|tc| tc.is_response())
        .collect();
    if !responses.is_empty() {
        let parts = responses
            .iter()
            .map(|tc| {
                pending.retain(|p| p.id != tc.id);
                Part::FunctionResponse(FunctionResponse {
                    id: tc.id.clone(),
                    name: tc.name.clone(),
                    response: parse_object(tc.output.as_deref().unwrap_or_default()),
                })
            })
            .collect();
        let author = message
            .author
            .clone()
            .filter(|a| !a.is_empty())
            .or_else(|| call_authors.get(responses[0].id.as_str()).cloned())
            .unwrap_or_else(|| pending_author.to_owned());
        return Some(("function".to_owned(), parts, author));
    }
    if let Some(call) = pending.pop_front() {
        // Legacy row: answers the next call of the preceding model message, in order.
        let response = match serde_json::from_str::<Value>(&message.content) {
            Ok(Value::Object(map)) => map,
            _ if message.content.is_empty() => Map::new(),
            _ => Map::from_iter([("result".to_owned(), Value::String(message.content.clone()))]),
        };
        let part = Part::FunctionResponse(FunctionResponse {
            id: call.id.clone(),
            name: call.name.clone(),
            response,
        });
        let author = message
            .author
            .clone()
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| pending_author.to_owned());
        return Some(("function".to_owned(), vec![part], author));
    }
    Some((
        ROLE_USER.to_owned(),
        text_part(&message.content),
        author_of(message, agent),
    ))
}

fn is_model_role(role: &str) -> bool {
    matches!(role, "assistant" | "model" | "agent")
}

/// Stored author, else `user` for user rows, else the root agent.
fn author_of(message: &StoredMessage, agent: &str) -> String {
    match &message.author {
        Some(author) if !author.is_empty() => author.clone(),
        _ if message.role == ROLE_USER => ROLE_USER.to_owned(),
        _ => agent.to_owned(),
    }
}

fn text_part(content: &str) -> Vec<Part> {
    if content.is_empty() {
        Vec::new()
    } else {
        vec![Part::Text(content.to_owned())]
    }
}

/// A stored JSON object text; anything else (corrupt or legacy data) reads as `{}` so one
/// bad row cannot fail the whole turn.
fn parse_object(text: &str) -> Map<String, Value> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
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
}
