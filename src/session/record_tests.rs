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
    let back: Vec<ToolCall> = serde_json::from_value(json!([{"id": "a", "name": "b"}])).unwrap();
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
