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
    let (mut history, mut db, mut ids) = (History::new(1, 100), Vec::new(), IdSource::sequential());
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
    let (mut history, mut db, mut ids) = (History::new(1, 100), Vec::new(), IdSource::sequential());
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
    let (mut history, mut db, mut ids) = (History::new(1, 100), Vec::new(), IdSource::sequential());
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
    let (mut history, mut db, mut ids) = (History::new(7, 100), Vec::new(), IdSource::sequential());
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
    let (mut history, mut db, mut ids) = (History::new(1, 100), Vec::new(), IdSource::sequential());
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
    let (mut history, mut db, mut ids) = (History::new(1, 100), Vec::new(), IdSource::sequential());
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
