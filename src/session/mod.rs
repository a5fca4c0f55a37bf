//! Conversation history and thread state, below the agent loop and above the store.
//!
//! The thread actor owns a [`History`] (the recent window of [`StoredMessage`]s) and a
//! [`ThreadState`]. Each non-partial ADK [`Event`] goes through [`append_event`], which
//! returns the record to commit; after the commit the actor pushes it. Before each model
//! turn, [`events`] rebuilds ADK events from the window, cut to the token budget by
//! [`truncate_to_budget`] with a pluggable [`TokenEstimator`].
//!
//! **Architecture invariant:** this module knows no actix, no wire format and no SQL; the
//! runtime maps [`StoredMessage`] to the store's message rows (`tool_calls` is the JSON of
//! `Vec<ToolCall>`) and [`ThreadState::to_json`] to the thread's `conversation_context`.

pub mod adk;
mod append;
mod budget;
mod reconstruct;
mod record;
mod state;

#[cfg(test)]
mod tests;

pub use adk::{
    Content, Event, EventActions, FunctionCall, FunctionResponse, Part, system_instruction_text,
};
pub use append::{Appended, IdSource, append_event};
pub use budget::{DEFAULT_TOKEN_BUDGET, HeuristicEstimator, TokenEstimator, truncate_to_budget};
pub use reconstruct::{FALLBACK_AGENT_NAME, HistoryConfig, events};
pub use record::{
    History, HistoryError, ROLE_ASSISTANT, ROLE_SYSTEM, ROLE_TOOL, ROLE_USER, StoredMessage,
    ToolCall,
};
pub use state::{StateError, ThreadState};
