//! The version-neutral model every layer speaks.
//!
//! Wire formats (A2A 1.0 ProtoJSON, 0.3, 0.1) are converted to and from these types at
//! the edge (`crate::a2a`); the store persists them (`crate::store`); the runtime moves
//! them between actors (`crate::runtime`). Nothing here knows about HTTP, SQL or actix.
//!
//! The serde derives on these types define the *storage* encoding (stable, snake_case,
//! internally tagged) used for JSON columns. They are never sent to clients.

mod ids;
mod push;
mod task;

pub use ids::{ContextId, IdError, MessageId, TaskId, TenantId, Timestamp};
pub use push::{PushAuth, PushConfig, PushDialect, PushPayload, PushSpec, PushTarget};
pub use task::{
    Artifact, Message, Part, PartContent, Role, StreamEvent, Task, TaskState, TaskStatus,
    Transition,
};

use serde_json::{Map, Value};

/// Free-form metadata attached to messages, parts, artifacts and tasks.
pub type Metadata = Map<String, Value>;

/// Options of a `SendMessage` call, already decoded from whichever dialect carried them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SendConfig {
    /// Media types the client accepts in the answer (empty: anything).
    pub accepted_output_modes: Vec<String>,
    /// How many of the most recent history messages to return (`None`: all, `Some(0)`: none).
    pub history_length: Option<u32>,
    /// Return as soon as the task exists instead of waiting for a terminal or interrupted state.
    pub return_immediately: bool,
    /// A push-notification config to register for the task the message starts or
    /// continues (its task id is filled in by the thread).
    pub push: Option<PushSpec>,
    /// Continue the task only if it is at this generation (the task-generations
    /// extension's `ifGenerationMatch`).
    pub if_generation_match: Option<i64>,
}

/// A request to run a turn: one client message, sent to a thread (and maybe a task).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SendMessage {
    pub message: Message,
    pub config: SendConfig,
    pub metadata: Option<Metadata>,
    /// A2A 0.1 clients choose task ids themselves: when set and the message names a task
    /// that does not exist yet, it is created with that id instead of `TaskNotFound`.
    pub create_missing_task: bool,
    /// The request's `Idempotency-Key`, an alias of the message's id for deduplication;
    /// `None`: the message's id is the key.
    pub idempotency_key: Option<String>,
}

impl SendMessage {
    /// The key a retry of this send is recognised by.
    pub fn idempotency_key(&self) -> &str {
        self.idempotency_key
            .as_deref()
            .unwrap_or(self.message.message_id.as_str())
    }
}

/// Filters and paging of `ListTasks`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListTasksQuery {
    pub context_id: Option<ContextId>,
    pub status: Option<TaskState>,
    /// 1..=100, default 50 (validated by the caller).
    pub page_size: u32,
    /// Opaque cursor from a previous page (`None`: first page).
    pub page_token: Option<String>,
    pub history_length: Option<u32>,
    /// Only tasks whose status changed at or after this instant.
    pub status_timestamp_after: Option<Timestamp>,
    pub include_artifacts: bool,
}

/// One page of `ListTasks`.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskPage {
    pub tasks: Vec<Task>,
    /// Empty on the last page.
    pub next_page_token: String,
    pub page_size: u32,
    /// Matches before paging.
    pub total_size: u64,
}

/// What `SendMessage` answers: a task, or (for agents that reply without one) a message.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[allow(
    clippy::large_enum_variant,
    reason = "built once per request and moved, never stored in bulk: boxing buys nothing"
)]
pub enum SendOutcome {
    Task(Task),
    Message(Message),
}
