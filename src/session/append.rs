//! `append_event`: an ADK event becomes the message record to persist (contract A.1–5).
//!
//! Pure: it reads the history window and returns what to write; the thread actor commits
//! the record through the store and then applies it with [`History::push`] (write-through,
//! nothing in memory that is not durable). A state delta travels beside the record, so the
//! actor applies it to the [`ThreadState`](super::ThreadState) instead of losing it.
//!
//! **Id fallback rule (both sides).** A `FunctionCall` keeps its id; an empty one gets
//! `call_<name>_<unique>` from the [`IdSource`] (never `call_<name>` alone: two calls to
//! one tool in a turn would collide, and never `adk-…`, which ADK strips). A
//! `FunctionResponse` with an empty id takes the id of the oldest unanswered call of the
//! same name in the latest calling turn of the window; only without such a call does it get
//! a fresh id. Reconstructed events always carry the stored, non-empty ids, so the agent's
//! `convert_messages` fallback never has to invent one for history.

use serde_json::{Map, Value};

use super::adk::{Content, Event, Part};
use super::record::{History, ROLE_ASSISTANT, ROLE_TOOL, ROLE_USER, StoredMessage, ToolCall};

/// What an event amounts to.
#[derive(Debug, Clone, PartialEq)]
pub enum Appended {
    /// A record to persist then push; `state_delta` (possibly empty) goes to the state.
    Message {
        record: StoredMessage,
        state_delta: Map<String, Value>,
    },
    /// No content, only a state delta: no record (contract A.2), but the delta is applied.
    StateOnly(Map<String, Value>),
    /// Neither content nor state: nothing to store (the original stored an empty message).
    Nothing,
}

/// Makes the ids of tool calls that arrived without one.
#[derive(Debug, Clone)]
pub struct IdSource {
    /// `None`: random suffixes (production); `Some(n)`: a counter (reproducible tests).
    counter: Option<u64>,
}

impl IdSource {
    /// Ids with a random suffix: unique across turns and restarts without any bookkeeping.
    pub fn random() -> Self {
        Self { counter: None }
    }

    /// Ids `call_<name>_1`, `call_<name>_2`, …: unique within this source's lifetime only.
    pub fn sequential() -> Self {
        Self { counter: Some(0) }
    }

    /// A fresh id for a call to `name`.
    pub fn call_id(&mut self, name: &str) -> String {
        match &mut self.counter {
            Some(n) => {
                *n += 1;
                format!("call_{name}_{n}")
            }
            None => format!("call_{name}_{}", uuid::Uuid::new_v4().simple()),
        }
    }
}

impl Default for IdSource {
    fn default() -> Self {
        Self::random()
    }
}

/// Converts `event` into the record to persist at `history.next_seq()` (see the module
/// docs for the id rule). Roles follow the parts, not the declared role: function
/// responses without calls are `tool` (ADK labels them `user`), calls are `assistant`.
pub fn append_event(history: &History, event: &Event, ids: &mut IdSource) -> Appended {
    let state_delta = event.actions.state_delta.clone();
    let Some(content) = event.content.as_ref().filter(|c| !c.parts.is_empty()) else {
        return if state_delta.is_empty() {
            Appended::Nothing
        } else {
            Appended::StateOnly(state_delta)
        };
    };

    let mut text = String::new();
    let mut tool_calls = Vec::new();
    let mut answered_here: Vec<String> = Vec::new();
    for part in &content.parts {
        match part {
            Part::Text(t) => text.push_str(t),
            Part::FunctionCall(call) => {
                let id = if call.id.is_empty() {
                    ids.call_id(&call.name)
                } else {
                    call.id.clone()
                };
                tool_calls.push(ToolCall::call(id, &call.name, json_text(&call.args)));
            }
            Part::FunctionResponse(response) => {
                let id = if response.id.is_empty() {
                    pending_call_id(history, &response.name, &answered_here)
                        .unwrap_or_else(|| ids.call_id(&response.name))
                } else {
                    response.id.clone()
                };
                let output = json_text(&response.response);
                // Kept in the content too: older readers only look there (contract A.5).
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&output);
                answered_here.push(id.clone());
                tool_calls.push(ToolCall::response(id, &response.name, output));
            }
        }
    }

    if text.is_empty() && tool_calls.is_empty() {
        // Only empty text: nothing a model could read back, so no empty row either.
        return if state_delta.is_empty() {
            Appended::Nothing
        } else {
            Appended::StateOnly(state_delta)
        };
    }
    let role = stored_role(content, &tool_calls, &event.author);
    let author = Some(event.author.clone()).filter(|a| !a.is_empty());
    Appended::Message {
        record: StoredMessage {
            seq: history.next_seq(),
            role,
            author,
            content: text,
            tool_calls,
            created_at: event.timestamp,
        },
        state_delta,
    }
}

/// The stored role: by parts first, then the declared role (`model`→`assistant`,
/// `function`→`tool`), then the author when the content declares none.
fn stored_role(content: &Content, tool_calls: &[ToolCall], author: &str) -> String {
    let calls = tool_calls.iter().any(ToolCall::is_call);
    let responses = tool_calls.iter().any(ToolCall::is_response);
    if calls {
        return ROLE_ASSISTANT.to_owned();
    }
    if responses {
        return ROLE_TOOL.to_owned();
    }
    match content.role.as_str() {
        "model" => ROLE_ASSISTANT.to_owned(),
        "function" => ROLE_TOOL.to_owned(),
        "" if author == ROLE_USER => ROLE_USER.to_owned(),
        "" => ROLE_ASSISTANT.to_owned(),
        other => other.to_owned(),
    }
}

/// The id of the oldest call to `name` in the window's latest calling turn that no stored
/// response (nor one earlier in this event, `taken`) answers yet.
fn pending_call_id(history: &History, name: &str, taken: &[String]) -> Option<String> {
    let messages: Vec<&StoredMessage> = history.iter().collect();
    let turn = messages.iter().rposition(|m| m.has_calls())?;
    let answered: Vec<&str> = messages[turn + 1..]
        .iter()
        .flat_map(|m| m.tool_calls.iter())
        .filter(|tc| tc.is_response())
        .map(|tc| tc.id.as_str())
        .chain(taken.iter().map(String::as_str))
        .collect();
    messages[turn]
        .tool_calls
        .iter()
        .filter(|tc| tc.is_call() && tc.name == name)
        .find(|tc| !answered.contains(&tc.id.as_str()))
        .map(|tc| tc.id.clone())
}

/// A JSON object's text. Serialising a `Map` of `Value`s cannot fail (string keys only).
fn json_text(map: &Map<String, Value>) -> String {
    Value::Object(map.clone()).to_string()
}

#[cfg(test)]
#[path = "append_tests.rs"]
mod tests;
