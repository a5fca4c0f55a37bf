//! Reading a run's answer out of its events (contract A.12) and recognising ADK's
//! "unknown agent" error (contract A.13).
//!
//! Text is gathered per model turn: a streamed turn yields its text twice (the partial
//! fragments, then the final event repeating them all), so a turn contributes its partials
//! when it had any and its final event otherwise — never both. Turns are separated by a
//! blank line so answers from several turns or agents do not run into each other.

use super::Event;

/// The author of the events that carry the user's input; they are not part of the answer.
const USER_AUTHOR: &str = "user";

/// What ADK says when `transfer_to_agent` names an agent that does not exist.
const MISSING_AGENT_MARKER: &str = "failed to find agent: ";

/// The agent name in an error text containing `failed to find agent: <name>` (the
/// `failed to find agent: (\S+)` rule; any wrapping around it is ignored), or `None`.
pub fn extract_missing_agent(error: &str) -> Option<String> {
    error
        .match_indices(MISSING_AGENT_MARKER)
        .map(|(at, marker)| {
            error[at + marker.len()..]
                .split(char::is_whitespace)
                .next()
                .unwrap_or_default()
        })
        .find(|name| !name.is_empty())
        .map(str::to_owned)
}

/// The one correction sent before retrying a run whose model named an agent that does not
/// exist (contract A.13): the name quoted as Go's `%q` would (Rust's debug quoting escapes
/// the same characters for names), and the valid names joined by `", "`.
pub fn missing_agent_correction(name: &str, valid: &[&str]) -> String {
    format!(
        "[System: Agent {name:?} does not exist. Valid agents: {}. Please retry using one of \
         the valid agent names listed above.]",
        valid.join(", ")
    )
}

/// The text of the model turns in `events`, in order, turns joined by a blank line.
/// A turn is a run of partial events closed by a non-partial one (or by the end of the
/// events, when a stream was cut short); events authored by the user are skipped.
pub fn collect_text(events: &[Event]) -> String {
    let mut turns: Vec<String> = Vec::new();
    let mut partials = String::new();
    for event in events.iter().filter(|e| e.author != USER_AUTHOR) {
        if event.partial {
            partials.push_str(&event.text());
            continue;
        }
        let turn = if partials.is_empty() {
            event.text()
        } else {
            std::mem::take(&mut partials)
        };
        if !turn.is_empty() {
            turns.push(turn);
        }
    }
    if !partials.is_empty() {
        turns.push(partials);
    }
    turns.join("\n\n")
}

#[cfg(test)]
mod tests {
    use serde_json::Map;

    use super::*;
    use crate::agent::Part;
    use crate::domain::Timestamp;
    use crate::session::{Content, FunctionCall};

    #[test]
    fn extract_missing_agent_cases() {
        let cases = [
            (
                "agent error: failed to find agent: browser_agent",
                Some("browser_agent"),
            ),
            ("outer: failed to find agent: exec", Some("exec")),
            ("connection refused", None),
            ("failed to find agent: ", None),
            ("failed to find agent: vault (retry)", Some("vault")),
        ];
        for (error, expected) in cases {
            assert_eq!(extract_missing_agent(error).as_deref(), expected, "{error}");
        }
    }

    #[test]
    fn missing_agent_correction_message() {
        assert_eq!(
            missing_agent_correction("browser_agent", &["operator", "librarian"]),
            "[System: Agent \"browser_agent\" does not exist. Valid agents: operator, \
             librarian. Please retry using one of the valid agent names listed above.]"
        );
    }

    fn event(author: &str, parts: Vec<Part>, partial: bool) -> Event {
        let content = Content {
            role: "model".into(),
            parts,
        };
        let mut event = Event::new(author, Some(content), Timestamp::now());
        event.partial = partial;
        event
    }

    fn text_event(text: &str, partial: bool) -> Event {
        event("agent", vec![Part::Text(text.into())], partial)
    }

    #[test]
    fn collect_text_non_stream() {
        assert_eq!(
            collect_text(&[text_event("Hello world", false)]),
            "Hello world"
        );
    }

    #[test]
    fn collect_text_stream_takes_partials_not_final() {
        let events = [
            text_event("Hello ", true),
            text_event("world", true),
            text_event("Hello world", false),
        ];
        assert_eq!(collect_text(&events), "Hello world");
    }

    #[test]
    fn collect_text_per_turn_not_per_run() {
        // Turn 1 streamed, turn 2 not: the run-wide flag of the original dropped turn 2.
        let call = Part::FunctionCall(FunctionCall {
            id: "c1".into(),
            name: "exec".into(),
            args: Map::new(),
        });
        let events = [
            text_event("Checking.", true),
            event("agent", vec![Part::Text("Checking.".into()), call], false),
            text_event("Done.", false),
        ];
        assert_eq!(collect_text(&events), "Checking.\n\nDone.");
    }

    #[test]
    fn collect_text_separates_turns_and_skips_user_and_empty_events() {
        let mut empty = text_event("", false);
        empty.content = None;
        let events = [
            event("user", vec![Part::Text("question".into())], false),
            text_event("First.", false),
            empty,
            event("helper", vec![Part::Text("Second.".into())], false),
        ];
        assert_eq!(collect_text(&events), "First.\n\nSecond.");
    }

    #[test]
    fn collect_text_keeps_partials_of_a_cut_stream() {
        let events = [text_event("Hel", true), text_event("lo", true)];
        assert_eq!(collect_text(&events), "Hello");
    }
}
