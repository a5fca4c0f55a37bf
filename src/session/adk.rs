//! ADK-shaped conversation events: the vocabulary `append_event` reads and `events` writes.
//!
//! These types belong conceptually to the `agent` module (they mirror Google ADK's `Event`
//! and genai's `Content`/`Part`), but `session` sits below `agent` and must speak them, so
//! they live here and `agent` re-exports them. Roles inside [`Content`] are ADK's strings
//! (`user`, `model`, `function`, `system`), not our stored roles.

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
