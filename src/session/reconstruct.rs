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
#[path = "reconstruct_tests.rs"]
mod tests;
