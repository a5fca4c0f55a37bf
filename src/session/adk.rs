//! ADK-shaped conversation events: the vocabulary `append_event` reads and `events` writes.
//!
//! These types belong conceptually to the `agent` module (they mirror Google ADK's `Event`
//! and genai's `Content`/`Part`), but `session` sits below `agent` and must speak them, so
//! they live here and `agent` re-exports them. Roles inside [`Content`] are ADK's strings
//! (`user`, `model`, `function`, `system`), not our stored roles.
//!
//! [`system_instruction_text`] is contract A.10's rule for the system message, kept here so
//! the model adapter and any other caller join instructions the same way.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::domain::Timestamp;

/// A request by the model to run one tool.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FunctionCall {
    /// Pairs the call with its response; may arrive empty (then the session layer makes one).
    pub id: String,
    pub name: String,
    pub args: Map<String, Value>,
}

/// The result of one tool call, sent back to the model.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FunctionResponse {
    /// The id of the [`FunctionCall`] this answers.
    pub id: String,
    pub name: String,
    pub response: Map<String, Value>,
}

/// One piece of a [`Content`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Part {
    Text(String),
    FunctionCall(FunctionCall),
    FunctionResponse(FunctionResponse),
}

/// A turn's payload: a role (ADK spelling) and its parts, in order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Content {
    /// `user`, `model`, `function`, `system`, … as ADK writes them.
    pub role: String,
    pub parts: Vec<Part>,
}

impl Content {
    /// All text parts, concatenated.
    pub fn text(&self) -> String {
        self.parts
            .iter()
            .filter_map(|part| match part {
                Part::Text(text) => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The function calls, in order.
    pub fn function_calls(&self) -> impl Iterator<Item = &FunctionCall> {
        self.parts.iter().filter_map(|part| match part {
            Part::FunctionCall(call) => Some(call),
            _ => None,
        })
    }
}

/// Side effects an event asks for besides its content.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventActions {
    /// Keys to set in the thread state.
    pub state_delta: Map<String, Value>,
    /// The agent the conversation is handed to, when the model called `transfer_to_agent`.
    pub transfer_to_agent: Option<String>,
}

/// One event of a conversation, as an ADK runner produces and consumes them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub id: String,
    /// `user`, or the name of the agent that produced the event.
    pub author: String,
    pub content: Option<Content>,
    /// A streaming fragment; runners persist only non-partial events.
    pub partial: bool,
    pub turn_complete: bool,
    pub actions: EventActions,
    pub timestamp: Timestamp,
}

impl Event {
    /// An event with the given author and content, no actions, not partial.
    pub fn new(author: impl Into<String>, content: Option<Content>, timestamp: Timestamp) -> Self {
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            author: author.into(),
            content,
            partial: false,
            turn_complete: false,
            actions: EventActions::default(),
            timestamp,
        }
    }
}

impl Event {
    /// The text of its content (empty without content).
    pub fn text(&self) -> String {
        self.content.as_ref().map(Content::text).unwrap_or_default()
    }

    /// The function calls of its content.
    pub fn function_calls(&self) -> impl Iterator<Item = &FunctionCall> {
        self.content.iter().flat_map(Content::function_calls)
    }
}

/// The text of a system instruction: its non-empty text parts joined with `"\n"`, or `None`
/// when there is no instruction or it holds no text (then no system message is sent).
pub fn system_instruction_text(instruction: Option<&Content>) -> Option<String> {
    let texts: Vec<&str> = instruction?
        .parts
        .iter()
        .filter_map(|part| match part {
            Part::Text(text) if !text.is_empty() => Some(text.as_str()),
            _ => None,
        })
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instruction(parts: &[&str]) -> Content {
        Content {
            role: "system".into(),
            parts: parts.iter().map(|t| Part::Text((*t).to_owned())).collect(),
        }
    }

    #[test]
    fn system_instruction_present_in_request() {
        let one = instruction(&["You are a helpful assistant."]);
        assert_eq!(
            system_instruction_text(Some(&one)).as_deref(),
            Some("You are a helpful assistant.")
        );
    }

    #[test]
    fn multi_part_system_instruction() {
        let two = instruction(&["You are a helpful assistant.", "Always be concise."]);
        assert_eq!(
            system_instruction_text(Some(&two)).as_deref(),
            Some("You are a helpful assistant.\nAlways be concise.")
        );
    }

    #[test]
    fn system_instruction_absent() {
        assert_eq!(system_instruction_text(None), None);
        assert_eq!(system_instruction_text(Some(&instruction(&[]))), None);
        assert_eq!(system_instruction_text(Some(&instruction(&[""]))), None);
    }
}
