//! Stored history: the message records a thread keeps, and the in-memory window of them.
//!
//! A [`StoredMessage`] is what the store's `messages` row holds (minus the A2A-only
//! columns); its `tool_calls` serialise to the `{id, name, input?, output?}` array the
//! `messages.tool_calls` column stores. [`History`] is the thread actor's bounded window of
//! recent records, ordered by `seq` (never by time: equal timestamps must not reorder).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::domain::Timestamp;

/// Stored role of a user's message.
pub const ROLE_USER: &str = "user";
/// Stored role of a model's message (ADK's `model`).
pub const ROLE_ASSISTANT: &str = "assistant";
/// Stored role of tool results (ADK's `function`, and ADK's `user`-labelled responses).
pub const ROLE_TOOL: &str = "tool";
/// Stored role of system text.
pub const ROLE_SYSTEM: &str = "system";

/// One tool call or one tool result; the same shape serves both (as in the original
/// store): `input` set means a call, `output` set means a response.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The call's arguments as a JSON object text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// The tool's response as a JSON object text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

impl ToolCall {
    /// A call entry (what an assistant message stores).
    pub fn call(id: impl Into<String>, name: impl Into<String>, input: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            input: Some(input.into()),
            output: None,
        }
    }

    /// A response entry (what a tool message stores).
    pub fn response(
        id: impl Into<String>,
        name: impl Into<String>,
        output: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            input: None,
            output: Some(output.into()),
        }
    }

    /// Whether this entry is a call (carries arguments).
    pub fn is_call(&self) -> bool {
        self.input.is_some()
    }

    /// Whether this entry is a response (carries a result).
    pub fn is_response(&self) -> bool {
        self.output.is_some()
    }
}

/// One message of a thread's history, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredMessage {
    /// Monotonic per thread; the only ordering key.
    pub seq: i64,
    /// `user`, `assistant`, `tool` or `system` (older rows may hold others, e.g. `model`).
    pub role: String,
    /// The agent (or `user`) that produced the message, when known.
    pub author: Option<String>,
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub created_at: Timestamp,
}

impl StoredMessage {
    /// A message without tool calls.
    pub fn text(
        seq: i64,
        role: impl Into<String>,
        content: impl Into<String>,
        created_at: Timestamp,
    ) -> Self {
        Self {
            seq,
            role: role.into(),
            author: None,
            content: content.into(),
            tool_calls: Vec::new(),
            created_at,
        }
    }

    /// Whether the model sees this as tool output: role `tool`/`function`, or (read-time
    /// repair of rows the original stored as `user`) response entries without any call.
    pub fn is_tool_result(&self) -> bool {
        matches!(self.role.as_str(), "tool" | "function")
            || (self.tool_calls.iter().any(ToolCall::is_response)
                && !self.tool_calls.iter().any(ToolCall::is_call))
    }

    /// Whether this is a model message carrying at least one tool call.
    pub fn has_calls(&self) -> bool {
        !self.is_tool_result() && self.tool_calls.iter().any(ToolCall::is_call)
    }
}

/// Why a record could not be pushed onto a [`History`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// The record was built for another position (another append committed in between).
    #[error("message seq {got} does not follow the history (expected {expected})")]
    OutOfOrder { expected: i64, got: i64 },
}

/// The in-memory window of a thread's most recent messages.
///
/// Write-through: `append_event` reads the window and returns the record to persist;
/// the caller commits it to the store and only then calls [`History::push`], so memory
/// never holds what the store does not.
#[derive(Debug, Clone, PartialEq)]
pub struct History {
    messages: VecDeque<StoredMessage>,
    next_seq: i64,
    capacity: usize,
}

impl History {
    /// An empty history whose first message gets `next_seq`, keeping at most `capacity`
    /// messages (at least one).
    pub fn new(next_seq: i64, capacity: usize) -> Self {
        Self {
            messages: VecDeque::new(),
            next_seq,
            capacity: capacity.max(1),
        }
    }

    /// A history resumed from stored records (ascending by `seq`), as a thread restarts.
    /// Only the newest `capacity` are kept.
    pub fn from_records(records: Vec<StoredMessage>, next_seq: i64, capacity: usize) -> Self {
        // Never hand out a seq the store already holds, whatever the caller passed.
        let next_seq = records.last().map_or(next_seq, |m| next_seq.max(m.seq + 1));
        let mut history = Self::new(next_seq, capacity);
        history.messages = records.into();
        history.evict();
        history
    }

    /// The `seq` the next appended message gets.
    pub fn next_seq(&self) -> i64 {
        self.next_seq
    }

    /// How many messages the window holds.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether the window is empty.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The most messages the window keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The messages in order, oldest first, for [`crate::session::events`].
    pub fn as_slice(&mut self) -> &[StoredMessage] {
        self.messages.make_contiguous()
    }

    /// The messages in order, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &StoredMessage> {
        self.messages.iter()
    }

    /// Applies a committed record. Refuses one whose `seq` is not the next, so a stale
    /// record (built before another append committed) cannot reorder the window.
    pub fn push(&mut self, record: StoredMessage) -> Result<(), HistoryError> {
        if record.seq != self.next_seq {
            return Err(HistoryError::OutOfOrder {
                expected: self.next_seq,
                got: record.seq,
            });
        }
        self.next_seq = record.seq + 1;
        self.messages.push_back(record);
        self.evict();
        Ok(())
    }

    fn evict(&mut self) {
        while self.messages.len() > self.capacity {
            self.messages.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    //! The history window (order, bound, resume) and the `tool_calls` column layout.

    use serde_json::json;

    use super::*;

    #[test]
    fn history_push_refuses_a_stale_record_and_keeps_its_window() {
        let mut history = History::new(1, 2);
        for seq in 1..=3 {
            history
                .push(StoredMessage::text(seq, "user", "x", Timestamp(0)))
                .unwrap();
        }
        assert_eq!(history.len(), 2);
        assert_eq!(history.iter().next().unwrap().seq, 2);
        let stale = StoredMessage::text(3, "user", "late", Timestamp(0));
        assert_eq!(
            history.push(stale),
            Err(HistoryError::OutOfOrder {
                expected: 4,
                got: 3
            })
        );
    }

    #[test]
    fn history_resumed_from_records_continues_after_the_last_seq() {
        let records = vec![
            StoredMessage::text(4, "user", "a", Timestamp(0)),
            StoredMessage::text(5, "user", "b", Timestamp(0)),
        ];
        assert_eq!(History::from_records(records.clone(), 6, 10).next_seq(), 6);
        assert_eq!(History::from_records(records, 1, 10).next_seq(), 6);
    }

    #[test]
    fn tool_call_json_is_the_store_column_layout() {
        let calls = vec![
            ToolCall::call("c1", "exec", "{}"),
            ToolCall::response("c1", "exec", "{\"ok\":1}"),
        ];
        let text = serde_json::to_value(&calls).unwrap();
        assert_eq!(
            text,
            json!([{"id": "c1", "name": "exec", "input": "{}"}, {"id": "c1", "name": "exec", "output": "{\"ok\":1}"}])
        );
        let back: Vec<ToolCall> =
            serde_json::from_value(json!([{"id": "a", "name": "b"}])).unwrap();
        assert_eq!(
            back,
            [ToolCall {
                id: "a".into(),
                name: "b".into(),
                input: None,
                output: None
            }]
        );
    }
}
