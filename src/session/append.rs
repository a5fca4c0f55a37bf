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
mod tests {
    //! Seed 000/004 and origins §2 `session_service_test.go` scenarios for `append_event`.

    use serde_json::{Map, Value, json};

    use super::*;
    use crate::domain::Timestamp;
    use crate::session::adk::{EventActions, FunctionCall, FunctionResponse};
    use crate::session::{HeuristicEstimator, HistoryConfig, ROLE_TOOL, events};

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    fn event(author: &str, role: &str, parts: Vec<Part>) -> Event {
        Event::new(
            author,
            Some(Content {
                role: role.to_owned(),
                parts,
            }),
            Timestamp(1_000),
        )
    }

    fn text(author: &str, role: &str, t: &str) -> Event {
        event(author, role, vec![Part::Text(t.to_owned())])
    }

    fn call(id: &str, name: &str, args: Value) -> Part {
        Part::FunctionCall(FunctionCall {
            id: id.to_owned(),
            name: name.to_owned(),
            args: object(args),
        })
    }

    fn response(id: &str, name: &str, body: Value) -> Part {
        Part::FunctionResponse(FunctionResponse {
            id: id.to_owned(),
            name: name.to_owned(),
            response: object(body),
        })
    }

    /// The thread actor's sequence: build the record, "commit" it, then push it.
    fn commit(
        history: &mut History,
        store: &mut Vec<StoredMessage>,
        e: &Event,
        ids: &mut IdSource,
    ) -> Appended {
        let appended = append_event(history, e, ids);
        if let Appended::Message { record, .. } = &appended {
            store.push(record.clone());
            history.push(record.clone()).unwrap();
        }
        appended
    }

    fn record(appended: Appended) -> StoredMessage {
        match appended {
            Appended::Message { record, .. } => record,
            other => panic!("expected a record, got {other:?}"),
        }
    }

    #[test]
    fn append_event_updates_in_memory_history() {
        let (mut history, mut db, mut ids) =
            (History::new(1, 100), Vec::new(), IdSource::sequential());
        commit(
            &mut history,
            &mut db,
            &text("user", "user", "hello"),
            &mut ids,
        );
        assert_eq!(history.len(), 1);
        let first = history.iter().next().unwrap();
        assert_eq!(
            (first.role.as_str(), first.content.as_str()),
            ("user", "hello")
        );
        let seen = events(
            history.as_slice(),
            "root",
            &HeuristicEstimator,
            &HistoryConfig::default(),
        );
        assert_eq!(seen.len(), 1);
    }

    #[test]
    fn append_event_multiple_events_accumulate_history() {
        let (mut history, mut db, mut ids) =
            (History::new(1, 100), Vec::new(), IdSource::sequential());
        commit(
            &mut history,
            &mut db,
            &text("user", "user", "hello"),
            &mut ids,
        );
        commit(
            &mut history,
            &mut db,
            &text("root", "model", "hi there"),
            &mut ids,
        );
        let roles: Vec<_> = history.iter().map(|m| (m.seq, m.role.clone())).collect();
        assert_eq!(roles, [(1, "user".to_owned()), (2, "assistant".to_owned())]);
        assert_eq!(history.next_seq(), 3);
        let seen = events(
            history.as_slice(),
            "root",
            &HeuristicEstimator,
            &HistoryConfig::default(),
        );
        assert_eq!(seen.len(), 2);
    }

    #[test]
    fn append_event_state_delta_skips_history() {
        let (mut history, mut db, mut ids) =
            (History::new(1, 100), Vec::new(), IdSource::sequential());
        let mut e = Event::new("root", None, Timestamp(5));
        e.actions = EventActions {
            state_delta: object(json!({"step": 2})),
            transfer_to_agent: None,
        };
        let appended = commit(&mut history, &mut db, &e, &mut ids);
        assert_eq!(appended, Appended::StateOnly(object(json!({"step": 2}))));
        assert!(history.is_empty());
        assert!(db.is_empty());
        assert_eq!(history.next_seq(), 1);
    }

    #[test]
    fn append_event_with_content_and_state_delta_returns_both() {
        let history = History::new(1, 100);
        let mut e = text("root", "model", "done");
        e.actions.state_delta = object(json!({"k": "v"}));
        match append_event(&history, &e, &mut IdSource::sequential()) {
            Appended::Message {
                record,
                state_delta,
            } => {
                assert_eq!(record.content, "done");
                assert_eq!(state_delta, object(json!({"k": "v"})));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn append_event_user_message_without_content_is_not_stored() {
        // The original persisted an empty message for an event with neither content nor state.
        let history = History::new(1, 100);
        let e = Event::new("user", None, Timestamp(5));
        assert_eq!(
            append_event(&history, &e, &mut IdSource::sequential()),
            Appended::Nothing
        );
        let blank = text("user", "user", "");
        assert_eq!(
            append_event(&history, &blank, &mut IdSource::sequential()),
            Appended::Nothing
        );
        let empty = event("user", "user", Vec::new());
        assert_eq!(
            append_event(&history, &empty, &mut IdSource::sequential()),
            Appended::Nothing
        );
    }

    #[test]
    fn append_event_user_message_without_declared_role() {
        let history = History::new(1, 100);
        let by_user = record(append_event(
            &history,
            &text("user", "", "hi"),
            &mut IdSource::random(),
        ));
        assert_eq!(by_user.role, "user");
        let by_agent = record(append_event(
            &history,
            &text("root", "", "hi"),
            &mut IdSource::random(),
        ));
        assert_eq!(by_agent.role, "assistant");
    }

    #[test]
    fn append_event_db_and_memory_both_updated() {
        let (mut history, mut db, mut ids) =
            (History::new(7, 100), Vec::new(), IdSource::sequential());
        commit(
            &mut history,
            &mut db,
            &text("user", "user", "persist me"),
            &mut ids,
        );
        assert_eq!(db.len(), 1);
        assert_eq!(history.iter().next(), db.first());
        assert_eq!(db[0].seq, 7);
    }

    #[test]
    fn append_event_is_not_visible_before_commit() {
        let history = History::new(1, 100);
        let _ = append_event(
            &history,
            &text("user", "user", "pending"),
            &mut IdSource::random(),
        );
        assert!(
            history.is_empty(),
            "append_event must not touch memory before the commit"
        );
    }

    #[test]
    fn append_event_preserves_author() {
        let (mut history, mut db, mut ids) =
            (History::new(1, 100), Vec::new(), IdSource::sequential());
        commit(
            &mut history,
            &mut db,
            &text("lango-orchestrator", "model", "ok"),
            &mut ids,
        );
        assert_eq!(db[0].author.as_deref(), Some("lango-orchestrator"));
        assert_eq!(
            history.iter().next().unwrap().author.as_deref(),
            Some("lango-orchestrator")
        );
    }

    #[test]
    fn append_event_preserves_function_call_id() {
        let history = History::new(1, 100);
        let e = event(
            "root",
            "model",
            vec![call(
                "adk-original-uuid-123",
                "exec",
                json!({"command": "ls"}),
            )],
        );
        let r = record(append_event(&history, &e, &mut IdSource::sequential()));
        assert_eq!(r.role, "assistant");
        assert_eq!(
            r.tool_calls,
            [ToolCall::call(
                "adk-original-uuid-123",
                "exec",
                r#"{"command":"ls"}"#
            )]
        );
    }

    #[test]
    fn append_event_function_call_fallback_id() {
        let history = History::new(1, 100);
        let e = event("root", "model", vec![call("", "search", json!({}))]);
        let r = record(append_event(&history, &e, &mut IdSource::sequential()));
        assert_eq!(r.tool_calls[0].id, "call_search_1");
        let random = record(append_event(&history, &e, &mut IdSource::random()));
        assert!(random.tool_calls[0].id.starts_with("call_search_"));
        assert_ne!(random.tool_calls[0].id, "call_search");
    }

    #[test]
    fn append_event_fallback_ids_unique_per_call_in_one_turn() {
        let history = History::new(1, 100);
        let e = event(
            "root",
            "model",
            vec![
                call("", "search", json!({"q": 1})),
                call("", "search", json!({"q": 2})),
            ],
        );
        for mut ids in [IdSource::sequential(), IdSource::random()] {
            let r = record(append_event(&history, &e, &mut ids));
            assert_ne!(r.tool_calls[0].id, r.tool_calls[1].id);
        }
    }

    #[test]
    fn append_event_saves_function_response_metadata() {
        let history = History::new(1, 100);
        let e = event(
            "root",
            "function",
            vec![response(
                "adk-uuid-123",
                "exec",
                json!({"output": "file.txt"}),
            )],
        );
        let r = record(append_event(&history, &e, &mut IdSource::sequential()));
        assert_eq!(r.role, ROLE_TOOL);
        assert_eq!(
            r.tool_calls,
            [ToolCall::response(
                "adk-uuid-123",
                "exec",
                r#"{"output":"file.txt"}"#
            )]
        );
        assert_eq!(r.content, r#"{"output":"file.txt"}"#);
    }

    #[test]
    fn append_event_function_response_role_correction() {
        // ADK labels tool results `user`; stored as user text they orphaned the calls.
        let history = History::new(1, 100);
        let e = event(
            "root",
            "user",
            vec![response("c1", "exec", json!({"ok": true}))],
        );
        assert_eq!(
            record(append_event(&history, &e, &mut IdSource::random())).role,
            ROLE_TOOL
        );
    }

    #[test]
    fn append_event_function_call_role_unchanged() {
        let history = History::new(1, 100);
        let e = event(
            "root",
            "model",
            vec![
                Part::Text("let me look".into()),
                call("c1", "exec", json!({})),
            ],
        );
        let r = record(append_event(&history, &e, &mut IdSource::random()));
        assert_eq!(
            (r.role.as_str(), r.content.as_str()),
            ("assistant", "let me look")
        );
    }

    #[test]
    fn append_event_response_without_id_answers_the_pending_call() {
        let (mut history, mut db, mut ids) =
            (History::new(1, 100), Vec::new(), IdSource::sequential());
        let calls = event(
            "root",
            "model",
            vec![
                call("", "search", json!({"q": 1})),
                call("", "search", json!({"q": 2})),
            ],
        );
        let stored = record(commit(&mut history, &mut db, &calls, &mut ids));
        let first = event(
            "root",
            "user",
            vec![response("", "search", json!({"n": 1}))],
        );
        let r1 = record(commit(&mut history, &mut db, &first, &mut ids));
        let second = event(
            "root",
            "user",
            vec![response("", "search", json!({"n": 2}))],
        );
        let r2 = record(commit(&mut history, &mut db, &second, &mut ids));
        assert_eq!(r1.tool_calls[0].id, stored.tool_calls[0].id);
        assert_eq!(r2.tool_calls[0].id, stored.tool_calls[1].id);
        // Both responses in one event pair with the two calls in order too.
        let mut h2 = History::from_records(vec![stored.clone()], 2, 10);
        let both = event(
            "root",
            "user",
            vec![
                response("", "search", json!({})),
                response("", "search", json!({})),
            ],
        );
        let r = record(append_event(&h2, &both, &mut ids));
        let got: Vec<_> = r.tool_calls.iter().map(|t| t.id.clone()).collect();
        let want: Vec<_> = stored.tool_calls.iter().map(|t| t.id.clone()).collect();
        assert_eq!(got, want);
        h2.push(r).unwrap();
    }
}
