//! The agent layer: turns ADK-shaped conversations into provider requests and provider
//! streams back into ADK-shaped model responses.
//!
//! [`convert_messages`] maps history ([`Content`]s plus a system instruction) to provider
//! [`Message`](crate::providers::Message)s; [`function_declarations`] and
//! [`transfer_to_agent_declaration`] describe the tools the model may call; [`ModelAdapter`]
//! runs one model turn over any [`Provider`](crate::providers::Provider) and yields
//! [`LlmResponse`]s; [`collect_text`] reads a run's answer out of its events and
//! [`extract_missing_agent`] recognises a transfer to an agent that does not exist
//! (seed contract A.10–A.15).
//!
//! **Architecture invariant:** this module knows no actix, no wire format and no SQL; it
//! speaks only the session's ADK types and the providers' vocabulary.

mod collect;
mod convert;
mod model;
mod runner;
mod tools;
mod tree;

pub use crate::session::{Content, Event, EventActions, FunctionCall, FunctionResponse, Part};
pub use collect::{collect_text, extract_missing_agent, missing_agent_correction};
pub use convert::{convert_messages, convert_messages_with_ids};
pub use model::{AgentError, ModelAdapter};
pub use runner::{
    ACTIVE_AGENT_KEY, RunError, RunObserver, RunSettings, Runner, ToolInvoker, run_and_collect,
    unanswered_calls,
};
pub use tools::{TRANSFER_TO_AGENT, function_declarations, transfer_to_agent_declaration};
pub use tree::{AgentNode, AgentTree, TreeError};

use crate::providers::{ToolChoice, ToolDefinition, Usage};

/// The ADK role of content the model wrote.
pub const ROLE_MODEL: &str = "model";

/// One model turn to run: the conversation, the instruction and the tools on offer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LlmRequest {
    /// The conversation so far, oldest first.
    pub contents: Vec<Content>,
    /// Sent as one leading system message when it holds any text (contract A.10).
    pub system_instruction: Option<Content>,
    pub tools: Vec<ToolDefinition>,
    /// Whether the model must call one of `tools`.
    pub tool_choice: ToolChoice,
    pub temperature: Option<f32>,
    /// `None` or `Some(0)`: the provider's default.
    pub max_tokens: Option<u32>,
    /// `None`: the provider's configured model.
    pub model: Option<String>,
}

/// One response of a model turn: a streamed fragment (`partial`) or the turn's final answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LlmResponse {
    /// Role `model`; `None` when the final answer holds neither text nor calls.
    pub content: Option<Content>,
    /// A text fragment already contained in the final response; never holds calls.
    pub partial: bool,
    /// The last response of the turn.
    pub turn_complete: bool,
    /// Token counts, on the final response when the provider reported them.
    pub usage: Option<Usage>,
}
