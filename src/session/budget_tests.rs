//! Origins §2 `TokenBudgetTruncation`, `DefaultTokenBudget`, `TruncationSequenceSafety` and
//! the estimator's calibration.

use super::*;
use crate::domain::Timestamp;

fn msgs(contents: &[&str]) -> Vec<StoredMessage> {
    contents
        .iter()
        .enumerate()
        .map(|(i, c)| StoredMessage::text(i as i64 + 1, "user", *c, Timestamp(0)))
        .collect()
}

fn repeated(n: usize, len: usize) -> Vec<StoredMessage> {
    let text = "a".repeat(len);
    msgs(&vec![text.as_str(); n])
}

fn assistant_calls(seq: i64, ids: &[&str]) -> StoredMessage {
    let mut m = StoredMessage::text(seq, "assistant", "", Timestamp(0));
    m.tool_calls = ids
        .iter()
        .map(|id| ToolCall::call(*id, "exec", "{}"))
        .collect();
    m
}

fn tool_result(seq: i64, id: &str) -> StoredMessage {
    let mut m = StoredMessage::text(seq, "tool", "{}", Timestamp(0));
    m.tool_calls = vec![ToolCall::response(id, "exec", "{}")];
    m
}

const E: HeuristicEstimator = HeuristicEstimator;

#[test]
fn token_estimation_calibration() {
    assert_eq!(E.message_tokens(&msgs(&["msg"])[0]), 4);
    assert_eq!(E.message_tokens(&repeated(1, 400)[0]), 104);
    assert_eq!(E.message_tokens(&repeated(1, 40)[0]), 14);
    assert_eq!(HeuristicEstimator::text_tokens("你好世界"), 2);
}

#[test]
fn token_estimation_counts_kana_and_hangul_jamo_as_cjk() {
    assert_eq!(HeuristicEstimator::text_tokens("ひらがなカタカナ"), 4);
    assert_eq!(HeuristicEstimator::text_tokens("ㄱㄴㄷㄹ"), 2);
    assert_eq!(HeuristicEstimator::text_tokens("한국어요"), 2);
    assert_eq!(HeuristicEstimator::text_tokens("abcd"), 1);
}

#[test]
fn token_estimation_counts_tool_calls_once() {
    let call = assistant_calls(1, &["abcdefgh"]);
    // 4 overhead + id 2 + name "exec" 1 + input "{}" 0
    assert_eq!(E.message_tokens(&call), 7);
    let mut result = StoredMessage::text(2, "tool", "x".repeat(40), Timestamp(0));
    result.tool_calls = vec![ToolCall::response("abcdefgh", "exec", "x".repeat(40))];
    // the content repeats the output: counted once (4 + 2 + 1 + 10)
    assert_eq!(E.message_tokens(&result), 17);
}

#[test]
fn token_budget_truncation() {
    let five = repeated(5, 10);
    assert_eq!(truncate_to_budget(&five, 10_000, 0, &E).len(), 5);

    let twenty = repeated(20, 400);
    let kept = truncate_to_budget(&twenty, 500, 0, &E).len();
    assert!((1..20).contains(&kept), "kept {kept}");
    assert_eq!(kept, 4);

    let huge = repeated(1, 40_000);
    assert_eq!(truncate_to_budget(&huge, 10, 0, &E).len(), 1);

    assert!(truncate_to_budget(&[], 10, 0, &E).is_empty());

    let ten = repeated(10, 40);
    let kept = truncate_to_budget(&ten, 30, 0, &E);
    assert_eq!(kept, &ten[8..]);
}

#[test]
fn token_budget_default_token_budget() {
    let tiny = repeated(150, 3);
    assert_eq!(truncate_to_budget(&tiny, 0, 0, &E).len(), 150);
    // 32000 / 104 tokens per 400-char message = 307 messages
    let big = repeated(400, 400);
    assert_eq!(truncate_to_budget(&big, 0, 0, &E).len(), 307);
}

#[test]
fn token_budget_max_messages_cap_applies_on_top() {
    let tiny = repeated(150, 3);
    assert_eq!(truncate_to_budget(&tiny, 0, 100, &E).len(), 100);
    assert_eq!(truncate_to_budget(&tiny, 40, 100, &E).len(), 10);
}

#[test]
fn token_budget_truncation_sequence_safety() {
    let mut history = repeated(20, 200);
    history[15] = tool_result(16, "gone");
    history[15].tool_calls[0].output = Some("b".repeat(200));
    for budget in [400, 300] {
        let kept = truncate_to_budget(&history, budget, 0, &E);
        assert!(kept.len() < 20);
        assert!(
            !kept[0].is_tool_result(),
            "budget {budget} starts with a tool message"
        );
    }
    // budget 300 fits 5 messages, starting at the tool message, which is dropped
    assert_eq!(truncate_to_budget(&history, 300, 0, &E).len(), 4);
}

#[test]
fn token_budget_no_truncation_preserves_trailing_function_call() {
    let mut history = msgs(&["run ls"]);
    history.push(assistant_calls(2, &["c1"]));
    assert_eq!(truncate_to_budget(&history, 100_000, 0, &E).len(), 2);
}

#[test]
fn token_budget_truncation_drops_closed_turn_with_unanswered_calls() {
    let mut history = repeated(3, 400);
    history.push(assistant_calls(4, &["a", "b"]));
    history.push(tool_result(5, "a"));
    history.push(StoredMessage::text(6, "user", "next", Timestamp(0)));
    let kept = truncate_to_budget(&history, 40, 0, &E);
    assert_eq!(kept, &history[5..]);
}

#[test]
fn token_budget_truncation_keeps_answered_multi_call_turn_whole() {
    let mut history = repeated(3, 400);
    history.push(assistant_calls(4, &["a", "b"]));
    history.push(tool_result(5, "a"));
    history.push(tool_result(6, "b"));
    history.push(StoredMessage::text(7, "user", "next", Timestamp(0)));
    let kept = truncate_to_budget(&history, 60, 0, &E);
    assert_eq!(kept, &history[3..]);
    // A budget that cuts between the two responses drops the whole turn.
    let kept = truncate_to_budget(&history, 12, 0, &E);
    assert_eq!(kept, &history[6..]);
}

#[test]
fn token_budget_truncation_keeps_a_pending_turn_at_the_end() {
    let mut history = repeated(3, 400);
    history.push(assistant_calls(4, &["a", "b"]));
    history.push(tool_result(5, "a"));
    let kept = truncate_to_budget(&history, 40, 0, &E);
    assert_eq!(kept, &history[3..]);
}

#[test]
fn token_budget_truncation_legacy_results_answer_positionally() {
    let mut history = repeated(3, 400);
    history.push(assistant_calls(4, &["a"]));
    history.push(StoredMessage::text(5, "tool", "ok", Timestamp(0)));
    history.push(StoredMessage::text(6, "user", "next", Timestamp(0)));
    assert_eq!(truncate_to_budget(&history, 40, 0, &E), &history[3..]);
}
