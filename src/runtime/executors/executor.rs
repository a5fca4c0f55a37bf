//! The agent seam: an [`AgentExecutor`] receives a [`Turn`] and reports through a
//! [`TurnSink`] — status changes, artifacts, or a direct message reply.
//!
//! Each sink call returns only after the change is durable and published, so an executor
//! that awaits its calls can never get ahead of the store. A turn that ends without
//! putting its task into a terminal or interrupted state fails the task: the protocol
//! has no "the agent just stopped" state, and silently leaving a task `working` forever
//! would strand every client waiting on it.

use std::sync::Arc;

use actix::Addr;
use async_trait::async_trait;

use crate::domain::Timestamp;
use crate::domain::{Artifact, ContextId, Message, Metadata, Part, TaskId, TaskState, TenantId};
use crate::error::{Error, Result};
use crate::runtime::Tools;
use crate::runtime::thread::{Emit, ThreadActor, TurnEmit};
use crate::session::{Event, StoredMessage};
use crate::skills::{CallJournal, CallRef, Caller, SkillError, ToolProgress};

/// The agent logic a deployment plugs in.
#[async_trait]
pub trait AgentExecutor: Send + Sync + 'static {
    /// Runs one turn. Returning an A2A error (`InvalidParams`, `UnsupportedOperation`, …)
    /// before any output fails the request with that error; `Internal` errors and panics
    /// fail the task with `INTERNAL_ERROR` (details only in the log).
    async fn execute(&self, turn: Turn, sink: TurnSink) -> Result<()>;

    /// Whether the turn a restart cut short (`turn.resumed`: its task was working, its
    /// message and the history it wrote are in `turn`) can be picked up where it
    /// stopped instead of failed: only when every effect it has not finished can be
    /// made again without being made twice (`Tools::resumable`). Such a turn is then
    /// [`execute`](Self::execute)d with `turn.resumed` set. Default: never.
    fn resumable(&self, _turn: &Turn) -> bool {
        false
    }
}

/// What an executor gets to work on.
#[derive(Debug, Clone)]
pub struct Turn {
    pub tenant: TenantId,
    pub context_id: ContextId,
    pub task_id: TaskId,
    /// The client message that started this turn (ids filled in).
    pub message: Message,
    /// True when the message continues an existing (interrupted) task.
    pub continuation: bool,
    /// The thread's recent history (the actor's window), oldest first, this message last:
    /// the A2A messages and the agent loop's records, as the session layer reads them.
    pub history: Vec<StoredMessage>,
    /// The thread's state (live entries) when the turn started.
    pub state: serde_json::Map<String, serde_json::Value>,
    /// Request metadata sent with the message.
    pub metadata: Option<Metadata>,
    /// Every registered tool, called through its skill's actor.
    pub tools: Arc<Tools>,
    /// Cluster mode: the fencing token the thread's actor was placed under, which the
    /// turn's commits and its tools' writes are checked against (`Caller::fence_token`).
    pub fence_token: Option<i64>,
    /// The turn was cut short by a restart and is picked up again
    /// ([`AgentExecutor::resumable`]); its message and history are as they were stored.
    pub resumed: bool,
    /// How often a tool call's progress may go to the task's streams
    /// (`streaming.progress_interval_ms`); `None`: it does not.
    pub progress_every: Option<std::time::Duration>,
}

impl Turn {
    /// The turn as the caller of a tool: its tenant, thread and hold on the thread.
    pub fn caller(&self) -> Caller {
        Caller {
            tenant: self.tenant.clone(),
            context_id: self.context_id.clone(),
            fence_token: self.fence_token,
            call: None,
            progress: None,
        }
    }

    /// The journal of the turn's tool calls: entries in the thread's state, written
    /// through `sink` (see [`CallRef`]).
    pub fn journal(&self, sink: &TurnSink) -> Arc<dyn CallJournal> {
        let this_task = format!("{JOURNAL_PREFIX}{}/", self.task_id);
        Arc::new(TurnJournal {
            sink: sink.clone(),
            recorded: self
                .state
                .iter()
                .filter(|(key, _)| key.starts_with(&this_task))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
        })
    }
}

/// `caller` as the caller of the tool call `call_id` of task `task_id` (the model's
/// function call id, or the message's id for a direct call): keyed by the task and the
/// call, so that the same call made again in a resumed turn finds what it recorded in
/// `journal`. A call without an id stays unnamed.
pub fn calling(
    mut caller: Caller,
    task_id: &TaskId,
    journal: &Arc<dyn CallJournal>,
    call_id: &str,
) -> Caller {
    if !call_id.is_empty() {
        caller.call = Some(CallRef {
            key: format!("{task_id}/{call_id}"),
            journal: journal.clone(),
        });
    }
    caller
}

/// The thread-state keys of the calls' journal: `call:<task id>/<call id>`. Entries live
/// as long as any state entry (`state.ttl_secs`); a turn resumed later than that sends
/// its calls again, under the same derived ids.
pub(super) const JOURNAL_PREFIX: &str = "call:";

/// The author of the state-only events the runtime writes ([`TurnSink::set_state`]).
const STATE_AUTHOR: &str = "agent-a2a";

/// A turn's [`CallJournal`]: entries in the thread's state, written through the turn's
/// sink (durable when `record` returns, refused once the turn is over).
struct TurnJournal {
    sink: TurnSink,
    /// The journal's entries of the turn's task when the turn started.
    recorded: serde_json::Map<String, serde_json::Value>,
}

#[async_trait]
impl CallJournal for TurnJournal {
    fn recorded(&self, key: &str) -> Option<serde_json::Value> {
        self.recorded
            .get(&format!("{JOURNAL_PREFIX}{key}"))
            .filter(|v| !v.is_null())
            .cloned()
    }

    async fn record(
        &self,
        key: &str,
        value: serde_json::Value,
    ) -> std::result::Result<(), SkillError> {
        self.sink
            .set_state(format!("{JOURNAL_PREFIX}{key}"), value)
            .await
            .map_err(|e| SkillError::Unavailable(format!("the call's journal: {e}")))
    }
}

/// Where an executor reports. Cheap to clone.
#[derive(Clone)]
pub struct TurnSink {
    pub(in crate::runtime) addr: Addr<ThreadActor>,
    pub(in crate::runtime) context_id: ContextId,
    pub(in crate::runtime) task_id: TaskId,
    pub(in crate::runtime) turn: u64,
}

impl TurnSink {
    pub fn task_id(&self) -> &TaskId {
        &self.task_id
    }

    pub fn context_id(&self) -> &ContextId {
        &self.context_id
    }

    /// An agent message for this task with a fresh id.
    pub fn agent_message(&self, parts: Vec<Part>) -> Message {
        Message::agent(self.context_id.clone(), Some(self.task_id.clone()), parts)
    }

    /// An agent message holding one text part.
    pub fn text(&self, text: impl Into<String>) -> Message {
        self.agent_message(vec![Part::text(text)])
    }

    /// The status message of a failed task: `text`, and `code` as its `errorCode`.
    pub fn failure(&self, text: impl Into<String>, code: &str) -> Message {
        let mut message = self.text(text);
        let mut metadata = Metadata::new();
        metadata.insert("errorCode".into(), code.into());
        message.metadata = Some(metadata);
        message
    }

    /// Moves the task to `state`, optionally with a status message.
    pub async fn status(&self, state: TaskState, message: Option<Message>) -> Result<()> {
        self.emit(Emit::Status {
            state,
            message,
            metadata: None,
        })
        .await
    }

    /// Moves the task to working. A task that is working already (a follow-up resumed
    /// it) is not reported working a second time: nothing is written or sent.
    pub async fn working(&self) -> Result<()> {
        self.status(TaskState::Working, None).await
    }

    pub async fn complete(&self, message: Option<Message>) -> Result<()> {
        self.status(TaskState::Completed, message).await
    }

    pub async fn input_required(&self, message: Message) -> Result<()> {
        self.status(TaskState::InputRequired, Some(message)).await
    }

    pub async fn fail(&self, message: Message) -> Result<()> {
        self.status(TaskState::Failed, Some(message)).await
    }

    pub async fn reject(&self, message: Message) -> Result<()> {
        self.status(TaskState::Rejected, Some(message)).await
    }

    /// Adds an artifact, or with `append` adds parts to the artifact with the same id.
    pub async fn artifact(&self, artifact: Artifact, append: bool, last_chunk: bool) -> Result<()> {
        self.emit(Emit::Artifact {
            artifact,
            append,
            last_chunk,
        })
        .await
    }

    /// Writes a complete agent-loop event through `session::append_event` into the
    /// thread's history (and its state delta into the thread state); returns once durable.
    /// A state delta past the thread's state limit refuses the event and changes nothing.
    pub async fn append_event(&self, event: Event) -> Result<()> {
        self.emit(Emit::Event(Box::new(event))).await
    }

    /// Sets `key` of the thread's state (a state-only session event); returns once
    /// durable. Past the thread's state limit it is refused and nothing changes.
    pub async fn set_state(&self, key: String, value: serde_json::Value) -> Result<()> {
        let mut event = Event::new(STATE_AUTHOR, None, Timestamp::now());
        event.actions.state_delta.insert(key, value);
        self.append_event(event).await
    }

    /// Calls `tool` (of `skill`, when given) through `tools` as `caller`, sending what
    /// the tool reports of its progress to the task's streams when `every` is set
    /// ([`TurnSink::with_progress`]). `None`: no such tool.
    pub async fn call_tool(
        &self,
        tools: &Tools,
        every: Option<std::time::Duration>,
        tool: &str,
        skill: Option<&str>,
        arguments: serde_json::Value,
        mut caller: Caller,
    ) -> Option<std::result::Result<serde_json::Value, SkillError>> {
        let Some(every) = every else {
            return tools.call(tool, skill, arguments, caller).await;
        };
        let (report, progress) = crate::skills::ProgressReport::channel();
        caller.progress = Some(report);
        let call = tools.call(tool, skill, arguments, caller);
        self.with_progress(tool, every, progress, call).await
    }

    /// Runs `call`, a call of `tool` whose progress reports arrive at `progress`, and
    /// sends each report on as a `working` status update of the task whose metadata
    /// says how far the call has come — `{"progress": {"tool", "progress", "total",
    /// "message"}}` — with no status message, so nothing joins the history. At most one
    /// goes out per `every`, the latest report kept for the next; none after the call
    /// ends. An update that cannot be written is skipped (logged): progress never fails
    /// a call.
    pub async fn with_progress<F: std::future::Future>(
        &self,
        tool: &str,
        every: std::time::Duration,
        mut progress: tokio::sync::watch::Receiver<Option<ToolProgress>>,
        call: F,
    ) -> F::Output {
        tokio::pin!(call);
        let mut next = tokio::time::Instant::now();
        let mut pending = false;
        let mut reporting = true;
        loop {
            tokio::select! {
                biased;
                out = &mut call => return out,
                changed = progress.changed(), if reporting && !pending => match changed {
                    Ok(()) => pending = true,
                    // The tool is done reporting.
                    Err(_) => reporting = false,
                },
                _ = tokio::time::sleep_until(next), if pending => {
                    pending = false;
                    let Some(report) = progress.borrow_and_update().clone() else {
                        continue;
                    };
                    let mut said = serde_json::json!({"tool": tool, "progress": report.progress});
                    if let Some(total) = report.total {
                        said["total"] = serde_json::json!(total);
                    }
                    if let Some(message) = report.message {
                        said["message"] = serde_json::json!(message);
                    }
                    let mut metadata = Metadata::new();
                    metadata.insert("progress".into(), said);
                    let update = Emit::Status {
                        state: TaskState::Working,
                        message: None,
                        metadata: Some(metadata),
                    };
                    if let Err(e) = self.emit(update).await {
                        tracing::debug!(tool, error = %e, "a tool's progress not sent");
                    }
                    next = tokio::time::Instant::now() + every;
                }
            }
        }
    }

    /// Answers with a message instead of a task. Only valid as the first output of a
    /// turn that started a new task; the task is then never created. Later in a turn,
    /// or on an existing task, the message completes the task instead.
    pub async fn reply(&self, message: Message) -> Result<()> {
        self.emit(Emit::Reply(message)).await
    }

    async fn emit(&self, emit: Emit) -> Result<()> {
        self.addr
            .send(TurnEmit {
                task_id: self.task_id.clone(),
                turn: self.turn,
                emit,
            })
            .await
            .map_err(|e| Error::internal(format!("thread actor unreachable: {e}")))?
    }
}
