//! Token estimation and budget truncation: which part of the history a model sees
//! (contract A.8–9).
//!
//! History is taken newest-first until the token budget is spent (and, when set, the
//! message cap is reached). The newest message is always taken, even alone over budget:
//! a turn without its own prompt is worse than an oversized request. When something was
//! cut, the kept suffix is made sequence-safe: it never starts with tool output whose call
//! was cut, nor with a model message whose calls are not all answered in a turn that is
//! already over. Because the result is a suffix, a multi-call turn (one model message, its
//! tool messages) is therefore kept or dropped as a whole. The one exception to "newest
//! always kept": a newest message that is tool output whose call was cut is dropped too —
//! every provider refuses a response without its call.

use super::record::{StoredMessage, ToolCall};

/// The budget used when the configured one is 0.
pub const DEFAULT_TOKEN_BUDGET: usize = 32_000;

/// Estimates how many tokens a message costs in a model request.
pub trait TokenEstimator: Send + Sync {
    /// The estimated tokens of `message`, overhead included.
    fn message_tokens(&self, message: &StoredMessage) -> usize;
}

/// The calibrated character heuristic (no tokenizer): ~4 ASCII-rate characters or ~2 CJK
/// characters per token, each field floored separately, plus 4 tokens per message.
///
/// CJK here is wider than the original's (which counted kana and jamo at the ASCII rate and
/// so under-counted Japanese and Korean): CJK ideographs (U+4E00–9FFF, U+3400–4DBF,
/// U+F900–FAFF, U+20000–2FA1F), Hiragana and Katakana (U+3040–30FF, U+31F0–31FF,
/// U+FF66–FF9F), Hangul syllables (U+AC00–D7AF) and Hangul jamo (U+1100–11FF,
/// U+3130–318F, U+A960–A97F, U+D7B0–D7FF). Every other character counts at the ASCII rate.
///
/// Tool-call fields count (id, name, arguments, response). A tool message's content repeats
/// its responses for older readers, but the model gets the response once, so such a
/// message's content is not counted twice.
#[derive(Debug, Clone, Copy, Default)]
pub struct HeuristicEstimator;

/// Tokens every message costs besides its text (role, separators).
const PER_MESSAGE_OVERHEAD: usize = 4;

impl HeuristicEstimator {
    /// The estimated tokens of one text.
    pub fn text_tokens(text: &str) -> usize {
        let (mut cjk, mut other) = (0usize, 0usize);
        for c in text.chars() {
            if is_cjk(c) {
                cjk += 1;
            } else {
                other += 1;
            }
        }
        other / 4 + cjk / 2
    }
}

impl TokenEstimator for HeuristicEstimator {
    fn message_tokens(&self, message: &StoredMessage) -> usize {
        let responses_only = message.tool_calls.iter().any(ToolCall::is_response)
            && message.tool_calls.iter().all(ToolCall::is_response);
        let content = if responses_only {
            0
        } else {
            Self::text_tokens(&message.content)
        };
        let calls: usize = message
            .tool_calls
            .iter()
            .map(|tc| {
                Self::text_tokens(&tc.id)
                    + Self::text_tokens(&tc.name)
                    + tc.input.as_deref().map_or(0, Self::text_tokens)
                    + tc.output.as_deref().map_or(0, Self::text_tokens)
            })
            .sum();
        PER_MESSAGE_OVERHEAD + content + calls
    }
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0xF900..=0xFAFF
        | 0x20000..=0x2FA1F
        | 0x3040..=0x30FF
        | 0x31F0..=0x31FF
        | 0xFF66..=0xFF9F
        | 0xAC00..=0xD7AF
        | 0x1100..=0x11FF
        | 0x3130..=0x318F
        | 0xA960..=0xA97F
        | 0xD7B0..=0xD7FF)
}

/// The newest messages of `history` that fit `budget` tokens (0: [`DEFAULT_TOKEN_BUDGET`])
/// and, when `max_messages` is not 0, at most that many; sequence-safe after a cut (see the
/// module docs).
pub fn truncate_to_budget<'a>(
    history: &'a [StoredMessage],
    budget: usize,
    max_messages: usize,
    estimator: &dyn TokenEstimator,
) -> &'a [StoredMessage] {
    let budget = if budget == 0 {
        DEFAULT_TOKEN_BUDGET
    } else {
        budget
    };
    let cap = if max_messages == 0 {
        usize::MAX
    } else {
        max_messages
    };
    let mut used = 0usize;
    let mut start = history.len();
    for (index, message) in history.iter().enumerate().rev() {
        let taken = history.len() - start;
        if taken >= cap {
            break;
        }
        let cost = estimator.message_tokens(message);
        if taken > 0 && used.saturating_add(cost) > budget {
            break;
        }
        used = used.saturating_add(cost);
        start = index;
    }
    if start == 0 {
        // Nothing cut: a trailing call without response is pending, not orphaned.
        return history;
    }
    while start < history.len() && !safe_start(&history[start..]) {
        start += 1;
    }
    &history[start..]
}

/// Whether a cut history may begin with `kept[0]`.
fn safe_start(kept: &[StoredMessage]) -> bool {
    let Some(first) = kept.first() else {
        return true;
    };
    if first.is_tool_result() {
        return false;
    }
    if !first.has_calls() {
        return true;
    }
    let run = kept[1..].iter().take_while(|m| m.is_tool_result()).count();
    let turn_over = 1 + run < kept.len();
    !turn_over || calls_answered(first, &kept[1..=run])
}

/// Whether every call of `call` is answered by the tool messages `results`: by id, or
/// positionally by legacy tool messages that carry no response entries.
pub(crate) fn calls_answered(call: &StoredMessage, results: &[StoredMessage]) -> bool {
    let answered: Vec<&str> = results
        .iter()
        .flat_map(|m| m.tool_calls.iter())
        .filter(|tc| tc.is_response())
        .map(|tc| tc.id.as_str())
        .collect();
    let legacy = results
        .iter()
        .filter(|m| !m.tool_calls.iter().any(ToolCall::is_response))
        .count();
    let unanswered = call
        .tool_calls
        .iter()
        .filter(|tc| tc.is_call() && !answered.contains(&tc.id.as_str()))
        .count();
    unanswered <= legacy
}

#[cfg(test)]
mod tests {
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
}
