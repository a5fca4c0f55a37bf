//! Property tests: truncation is sequence-safe, within budget and turn-preserving for any
//! history; `append_event` → `events` keeps call ids, names, arguments and responses.

use proptest::prelude::*;
use serde_json::{Map, Value};

use super::super::*;
use crate::domain::Timestamp;

/// One turn of a generated history.
#[derive(Debug, Clone)]
enum Turn {
    User(usize),
    Reply(usize),
    /// A model message with `calls` calls, answered by the first `answered` of them, either
    /// one tool message per response or all in one, or legacy rows without entries.
    Calls {
        calls: usize,
        answered: usize,
        combined: bool,
        legacy: bool,
        size: usize,
    },
}

fn turn() -> impl Strategy<Value = Turn> {
    prop_oneof![
        (0usize..300).prop_map(Turn::User),
        (0usize..300).prop_map(Turn::Reply),
        (
            1usize..4,
            0usize..4,
            any::<bool>(),
            any::<bool>(),
            0usize..200
        )
            .prop_map(|(calls, answered, combined, legacy, size)| Turn::Calls {
                calls,
                answered: answered.min(calls),
                combined,
                legacy,
                size,
            }),
    ]
}

fn build(turns: &[Turn]) -> Vec<StoredMessage> {
    let mut out: Vec<StoredMessage> = Vec::new();
    let mut next_id = 0;
    let push = |out: &mut Vec<StoredMessage>, role: &str, content: String, calls: Vec<ToolCall>| {
        let seq = out.len() as i64 + 1;
        let mut m = StoredMessage::text(seq, role, content, Timestamp(seq));
        m.tool_calls = calls;
        out.push(m);
    };
    for t in turns {
        match *t {
            Turn::User(n) => push(&mut out, "user", "u".repeat(n), Vec::new()),
            Turn::Reply(n) => push(&mut out, "assistant", "r".repeat(n), Vec::new()),
            Turn::Calls {
                calls,
                answered,
                combined,
                legacy,
                size,
            } => {
                let ids: Vec<String> = (0..calls)
                    .map(|_| {
                        next_id += 1;
                        format!("id{next_id}")
                    })
                    .collect();
                let entries = ids
                    .iter()
                    .map(|id| ToolCall::call(id, "exec", "a".repeat(size)))
                    .collect();
                push(&mut out, "assistant", String::new(), entries);
                let body = "o".repeat(size);
                if legacy {
                    for _ in 0..answered {
                        push(&mut out, "tool", body.clone(), Vec::new());
                    }
                } else if combined && answered > 0 {
                    let entries = ids[..answered]
                        .iter()
                        .map(|id| ToolCall::response(id, "exec", &body))
                        .collect();
                    push(&mut out, "tool", body.repeat(answered), entries);
                } else {
                    for id in &ids[..answered] {
                        push(
                            &mut out,
                            "tool",
                            body.clone(),
                            vec![ToolCall::response(id, "exec", &body)],
                        );
                    }
                }
            }
        }
    }
    out
}

/// Index of the model message whose turn the tool result at `i` belongs to.
fn turn_head(history: &[StoredMessage], i: usize) -> Option<usize> {
    (0..i)
        .rev()
        .find(|&j| !history[j].is_tool_result())
        .filter(|&j| history[j].has_calls())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn truncation_is_safe_bounded_and_keeps_turns_whole(
        turns in prop::collection::vec(turn(), 0..40),
        budget in 0usize..3000,
        max_messages in 0usize..30,
    ) {
        let history = build(&turns);
        let estimator = HeuristicEstimator;
        let kept = truncate_to_budget(&history, budget, max_messages, &estimator);
        let start = history.len() - kept.len();
        prop_assert_eq!(kept, &history[start..], "not a suffix");

        let effective = if budget == 0 { DEFAULT_TOKEN_BUDGET } else { budget };
        let tokens: usize = kept.iter().map(|m| estimator.message_tokens(m)).sum();
        prop_assert!(tokens <= effective || kept.len() == 1, "{} tokens over {}", tokens, effective);
        if max_messages > 0 {
            prop_assert!(kept.len() <= max_messages.max(1));
        }

        if start > 0 {
            if let Some(first) = kept.first() {
                prop_assert!(!first.is_tool_result(), "a cut history starts with tool output");
                if first.has_calls() {
                    let run = kept[1..].iter().take_while(|m| m.is_tool_result()).count();
                    let closed = 1 + run < kept.len();
                    prop_assert!(!closed || budget::calls_answered(first, &kept[1..=run]),
                        "a cut history starts with unanswered calls");
                }
            }
        } else {
            prop_assert_eq!(kept.len(), history.len());
        }

        for i in start..history.len() {
            if let Some(head) = turn_head(&history, i).filter(|_| history[i].is_tool_result()) {
                prop_assert!(head >= start, "tool result {} kept without its call {}", i, head);
            }
        }
    }

    #[test]
    fn append_then_events_round_trips_calls_and_responses(
        calls in prop::collection::vec(
            (any::<bool>(), prop::sample::select(vec!["exec", "search", "memory_add"]),
             prop::collection::btree_map("[a-z]{1,6}", prop_oneof![
                 any::<i64>().prop_map(Value::from),
                 ".{0,12}".prop_map(Value::from),
             ], 0..4)),
            1..5),
    ) {
        let mut history = History::new(1, 50);
        let mut ids = IdSource::random();
        let call_parts: Vec<Part> = calls.iter().enumerate().map(|(i, (keep_id, name, args))| {
            Part::FunctionCall(FunctionCall {
                id: if *keep_id { format!("provider-{i}") } else { String::new() },
                name: (*name).to_owned(),
                args: args.clone().into_iter().collect(),
            })
        }).collect();
        let response_parts: Vec<Part> = calls.iter().enumerate().map(|(i, (keep_id, name, args))| {
            Part::FunctionResponse(FunctionResponse {
                id: if *keep_id { format!("provider-{i}") } else { String::new() },
                name: (*name).to_owned(),
                response: args.clone().into_iter().collect::<Map<String, Value>>(),
            })
        }).collect();
        for (role, parts) in [("model", call_parts), ("user", response_parts)] {
            let e = Event::new("worker", Some(Content { role: role.to_owned(), parts }), Timestamp(1));
            match append_event(&history, &e, &mut ids) {
                Appended::Message { record, .. } => history.push(record).map_err(|e| TestCaseError::fail(e.to_string()))?,
                other => return Err(TestCaseError::fail(format!("{other:?}"))),
            }
        }

        let out = events(history.as_slice(), "root", &HeuristicEstimator, &HistoryConfig::default());
        prop_assert_eq!(out.len(), 2);
        let rebuilt_calls: Vec<FunctionCall> = out[0].content.iter().flat_map(|c| c.parts.iter()).filter_map(|p| match p {
            Part::FunctionCall(c) => Some(c.clone()),
            _ => None,
        }).collect();
        let rebuilt_responses: Vec<FunctionResponse> = out[1].content.iter().flat_map(|c| c.parts.iter()).filter_map(|p| match p {
            Part::FunctionResponse(r) => Some(r.clone()),
            _ => None,
        }).collect();
        prop_assert_eq!(rebuilt_calls.len(), calls.len());
        prop_assert_eq!(rebuilt_responses.len(), calls.len());
        prop_assert_eq!(out[1].content.as_ref().map(|c| c.role.as_str()), Some("function"));
        prop_assert_eq!(out[1].author.as_str(), "worker");
        let mut seen = std::collections::HashSet::new();
        for (i, (keep_id, name, args)) in calls.iter().enumerate() {
            let (call, response) = (&rebuilt_calls[i], &rebuilt_responses[i]);
            prop_assert!(!call.id.is_empty());
            prop_assert!(seen.insert(call.id.clone()), "duplicate id {}", call.id);
            if *keep_id {
                prop_assert_eq!(&call.id, &format!("provider-{i}"));
            }
            prop_assert_eq!(&response.id, &call.id);
            prop_assert_eq!(call.name.as_str(), *name);
            prop_assert_eq!(response.name.as_str(), *name);
            let expected: Map<String, Value> = args.clone().into_iter().collect();
            prop_assert_eq!(&call.args, &expected);
            prop_assert_eq!(&response.response, &expected);
        }
    }
}
