//! Skills: named groups of tools (each with a JSON Schema for its input) that the agent
//! can call, directly or from a model's function calls.
//!
//! The registry is filled at start-up; the agent card lists every skill and its tools'
//! schemas. This module knows nothing about actix or wire formats.

pub mod bootstrap;
pub mod context;
pub mod governance;
pub mod knowledge;
pub mod memory;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::domain::{ContextId, TenantId};
use crate::store::StoreError;
use crate::store::fence::ThreadHold;

/// One callable tool of a skill.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the `arguments` object.
    pub input_schema: Value,
    /// JSON Schema of the result. Results are checked against it: a tool that answers
    /// outside its contract fails instead of surprising its callers.
    pub output_schema: Value,
}

/// Helpers for output schemas: objects list the properties they always carry; further
/// properties are allowed so results can grow without breaking callers.
pub mod output {
    use serde_json::{Value, json};

    /// An object that always has `required`, typed by `properties`.
    pub fn object(required: &[&str], properties: Value) -> Value {
        json!({"type": "object", "required": required, "properties": properties})
    }

    /// An array of `items`.
    pub fn array_of(items: Value) -> Value {
        json!({"type": "array", "items": items})
    }

    /// A value of JSON type `name`.
    pub fn of(name: &str) -> Value {
        json!({"type": name})
    }
}

/// Who is calling a tool.
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant: TenantId,
    pub context_id: ContextId,
    /// Cluster mode: the fencing token under which the calling turn's thread was placed
    /// on this node. Tools' writes are checked against it as the turn's own commits are,
    /// so a turn another node has taken over writes nothing (`SkillError::Fenced`).
    /// `None` outside cluster mode.
    pub fence_token: Option<i64>,
    /// The call being made, when the executor can name it so that a retry of the same
    /// call names it the same (a turn resumed after a restart): `None` for calls made
    /// outside a turn.
    pub call: Option<CallRef>,
    /// Where the tool reports how far the call has come, when a turn passes it on to the
    /// task's stream; `None`: nobody listens.
    pub progress: Option<ProgressReport>,
}

/// How far a tool call has come, as the tool says (an MCP server's
/// `notifications/progress`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolProgress {
    /// Grows as the call goes on, whether or not `total` is known.
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// Where a tool reports its call's progress: the latest report is kept for the reader
/// (the calling turn), which passes it on as it can. Cheap to clone.
#[derive(Clone)]
pub struct ProgressReport(Arc<tokio::sync::watch::Sender<Option<ToolProgress>>>);

impl ProgressReport {
    /// A report, and what reads its latest progress.
    pub fn channel() -> (
        ProgressReport,
        tokio::sync::watch::Receiver<Option<ToolProgress>>,
    ) {
        let (report, read) = tokio::sync::watch::channel(None);
        (ProgressReport(Arc::new(report)), read)
    }

    /// Reports `progress`, replacing a report not yet read.
    pub fn report(&self, progress: ToolProgress) {
        self.0.send_replace(Some(progress));
    }
}

impl std::fmt::Debug for ProgressReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressReport").finish_non_exhaustive()
    }
}

/// One tool call of a turn, as the tool sees it: a key that stays the same when the call
/// is made again after a restart, and a journal where the tool records what it started,
/// durably, so that the call made again follows it instead of starting it a second time.
#[derive(Clone)]
pub struct CallRef {
    /// Unique among the calls of the deployment: the calling task's id and the call's
    /// own id (the model's function call id, or the message that made a direct call).
    pub key: String,
    pub journal: Arc<dyn CallJournal>,
}

impl std::fmt::Debug for CallRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallRef").field("key", &self.key).finish()
    }
}

impl CallRef {
    /// What this call recorded before it was made again, if anything.
    pub fn recorded(&self) -> Option<Value> {
        self.journal.recorded(&self.key)
    }

    /// Records `value` for this call; returns once it is durable.
    pub async fn record(&self, value: Value) -> Result<(), SkillError> {
        self.journal.record(&self.key, value).await
    }
}

/// Where a turn keeps what its tool calls started (see [`CallRef`]).
#[async_trait]
pub trait CallJournal: Send + Sync {
    /// The value recorded under `key` by an earlier run of the call.
    fn recorded(&self, key: &str) -> Option<Value>;
    /// Records `value` under `key`, durably, before returning.
    async fn record(&self, key: &str, value: Value) -> Result<(), SkillError>;
}

impl Caller {
    /// The calling turn's hold on its thread, which writes made for it must check.
    pub fn hold(&self) -> Option<ThreadHold<'_>> {
        self.fence_token.map(|token| ThreadHold {
            thread: &self.context_id,
            token,
        })
    }
}

/// Why a tool call failed. The first four are the caller's business (the task is
/// rejected with the message); `Failed`, `Unavailable` and `Fenced` are ours (the detail
/// is logged, the caller gets a generic message).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SkillError {
    /// The arguments are wrong; the text names the field.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The thing the call names does not exist (in the caller's scope).
    #[error("not found: {0}")]
    NotFound(String),
    /// The call clashes with what exists (an item already at that path).
    #[error("conflict: {0}")]
    Conflict(String),
    /// Governance refused the write; `report` lists the violations.
    #[error("blocked by governance: {message}")]
    Blocked { message: String, report: Value },
    /// The call failed for a reason inside the server (logged in full).
    #[error("tool failed: {0}")]
    Failed(String),
    /// A dependency (the database, the embeddings endpoint) is down: retry later.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A remote agent the tool asks failed, refused or could not be reached; the text says
    /// which and why, and is told in full (it is the remote's business, not ours).
    #[error("{0}")]
    Remote(String),
    /// An MCP server the tool lives on failed the call, refused it, answered past its
    /// bounds or could not be reached; the text says which, and is told in full.
    #[error("{0}")]
    ToolServer(String),
    /// Cluster mode: another node has taken the calling turn's thread over, so the call's
    /// writes were refused and nothing was written. The turn's own commits are refused
    /// too; its client retries on the thread's new owner.
    #[error("fenced: {0}")]
    Fenced(String),
}

/// A store error as a tool's caller sees it: the database being down is retryable, and
/// so is a write refused because another node took the turn's thread over; anything
/// else is ours to look into.
impl From<StoreError> for SkillError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(detail) => SkillError::Unavailable(detail),
            StoreError::Fenced => SkillError::Fenced(
                "this node no longer holds the turn's thread (another node took it over); \
                 nothing was written"
                    .into(),
            ),
            StoreError::Conflict(_)
            | StoreError::Duplicate(_)
            | StoreError::Query(_)
            | StoreError::Corrupt(_)
            | StoreError::Config(_)
            | StoreError::InUse { .. }
            | StoreError::Held(_) => SkillError::Failed(e.to_string()),
        }
    }
}

/// What the agent card says about a skill, and the id it is known by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillInfo {
    /// Unique among the registered skills: it names the skill in the card, in metrics, in
    /// `/health` and in `[rate_limit.skills.<id>]`.
    pub id: String,
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
    /// Requests a client might make of the skill.
    pub examples: Vec<String>,
}

impl SkillInfo {
    /// A skill without tags or examples.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            description: description.into(),
            tags: Vec::new(),
            examples: Vec::new(),
        }
    }

    pub fn with_tags(mut self, tags: &[&str]) -> Self {
        self.tags = tags.iter().map(|&t| t.to_owned()).collect();
        self
    }

    pub fn with_examples(mut self, examples: &[&str]) -> Self {
        self.examples = examples.iter().map(|&e| e.to_owned()).collect();
        self
    }
}

/// A skill: what the card says of it, and its tools.
#[async_trait]
pub trait Skill: Send + Sync + 'static {
    fn info(&self) -> &SkillInfo;
    /// The skill's tools now: listed at start, and again after each change
    /// [`Skill::tool_changes`] announces.
    fn tools(&self) -> Vec<ToolSpec>;

    /// Says when the skill's tools change (an MCP server's list did): the runtime then
    /// lists them anew, and the next turn offers the new ones. `None` (the default): they
    /// never change.
    fn tool_changes(&self) -> Option<tokio::sync::watch::Receiver<()>> {
        None
    }
    async fn invoke(
        &self,
        tool: &str,
        arguments: Value,
        caller: &Caller,
    ) -> Result<Value, SkillError>;

    /// Whether the skill's engine can serve: a cheap real round trip to what it depends
    /// on (its repository, its database), for `/health`. The error text is for the log
    /// only. Skills without a dependency of their own are always healthy.
    async fn health(&self) -> Result<(), String> {
        Ok(())
    }

    /// What a model is shown of `result` (of `tool`), and keeps in its history: the
    /// result itself unless the skill leaves something out (an MCP server's image bytes).
    /// A direct caller gets the whole result.
    fn for_model(&self, _tool: &str, result: Value) -> Value {
        result
    }

    /// The parts a direct call's artifact carries for `result` (of `tool`), when the
    /// result has pieces of their own kinds (an MCP server's texts, images, resources);
    /// `None` (the default): one JSON data part holding the result.
    fn parts(&self, _tool: &str, _result: &Value) -> Option<Vec<crate::domain::Part>> {
        None
    }

    /// Whether `tenant` may call the skill's tools (an MCP server a tenant's API keys
    /// leave out refuses it): a model running for a tenant is not offered the tools of
    /// skills that do not admit it. Default: every tenant.
    fn admits(&self, _tenant: &TenantId) -> bool {
        true
    }

    /// The server outside this one that the skill's tools reach, when it keeps a
    /// connection to it (an MCP server): its name and whether it is connected now.
    /// `/health/ready` names those that are not, without failing (they are not this
    /// server's outage). Default: none.
    fn connection(&self) -> Option<(String, bool)> {
        None
    }

    /// Whether a call of `tool` may be made again after a restart cut it short: the
    /// tool repeats nothing the first call did (it follows what that call recorded in
    /// its [`CallRef`] journal, and what it sends again carries the same ids). A turn
    /// whose unfinished calls are all such calls is resumed instead of failed.
    fn resumable(&self, _tool: &str) -> bool {
        false
    }

    /// Whether `result` (of `tool`) is a question for the user rather than an answer —
    /// a remote agent's task that needs input — and how to continue the call with the
    /// user's reply. A turn whose call ends in a question leaves its task
    /// `input-required`; the reply in that task continues the call.
    fn question(&self, _tool: &str, _result: &Value) -> Option<Question> {
        None
    }

    /// The calling task was canceled: cancel what a call of `tool` started elsewhere and
    /// left running or waiting — `started` is what the call recorded in its journal
    /// ([`CallRef::record`]) or the arguments its question continues with
    /// ([`Question::continue_with`]). Default: nothing to cancel.
    async fn cancel(&self, _tool: &str, _started: &Value) -> Result<(), SkillError> {
        Ok(())
    }
}

/// A tool's result that asks the user something (see [`Skill::question`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// What to ask, as the user reads it.
    pub text: String,
    /// The call's arguments that continue it; the reply's text is added as `text`.
    pub continue_with: serde_json::Map<String, Value>,
}

/// The skills registered at start-up.
#[derive(Default, Clone)]
pub struct SkillRegistry {
    skills: Vec<Arc<dyn Skill>>,
}

impl SkillRegistry {
    pub fn register(&mut self, skill: Arc<dyn Skill>) {
        self.skills.push(skill);
    }

    pub fn skills(&self) -> &[Arc<dyn Skill>] {
        &self.skills
    }
}
