//! Tasks, their states and legal transitions, messages, parts, artifacts and the
//! stream events that change a task.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ContextId, MessageId, Metadata, TaskId, TenantId, Timestamp};

/// The lifecycle state of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Submitted,
    Working,
    InputRequired,
    AuthRequired,
    Completed,
    Canceled,
    Failed,
    Rejected,
}

impl TaskState {
    pub const ALL: [TaskState; 8] = [
        TaskState::Submitted,
        TaskState::Working,
        TaskState::InputRequired,
        TaskState::AuthRequired,
        TaskState::Completed,
        TaskState::Canceled,
        TaskState::Failed,
        TaskState::Rejected,
    ];

    /// The terminal states, those a task never leaves.
    pub const TERMINAL: [TaskState; 4] = [
        TaskState::Completed,
        TaskState::Canceled,
        TaskState::Failed,
        TaskState::Rejected,
    ];

    /// A terminal task never changes again; follow-ups need a new task.
    pub fn is_terminal(self) -> bool {
        Self::TERMINAL.contains(&self)
    }

    /// The agent waits for the client: the turn is over but the task goes on.
    pub fn is_interrupted(self) -> bool {
        matches!(self, TaskState::InputRequired | TaskState::AuthRequired)
    }

    /// Whether a blocking `SendMessage` (and a stream) ends at this state.
    pub fn ends_turn(self) -> bool {
        self.is_terminal() || self.is_interrupted()
    }

    /// The legal transitions. `Working → Working` is allowed (a new status message).
    pub fn can_transition_to(self, next: TaskState) -> bool {
        match self {
            TaskState::Submitted => next != TaskState::Submitted,
            TaskState::Working => next != TaskState::Submitted,
            TaskState::InputRequired | TaskState::AuthRequired => next != TaskState::Submitted,
            TaskState::Completed
            | TaskState::Canceled
            | TaskState::Failed
            | TaskState::Rejected => false,
        }
    }

    /// Stable lowercase name used in the store, logs and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Submitted => "submitted",
            TaskState::Working => "working",
            TaskState::InputRequired => "input_required",
            TaskState::AuthRequired => "auth_required",
            TaskState::Completed => "completed",
            TaskState::Canceled => "canceled",
            TaskState::Failed => "failed",
            TaskState::Rejected => "rejected",
        }
    }

    pub fn from_str_opt(raw: &str) -> Option<Self> {
        TaskState::ALL.into_iter().find(|s| s.as_str() == raw)
    }
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Agent,
}

impl Role {
    /// The name the store keeps (the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Agent => "agent",
        }
    }
}

/// The payload of a part: exactly one kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartContent {
    Text(String),
    /// Inline bytes (base64 on every wire).
    Raw(#[serde(with = "base64_bytes")] Vec<u8>),
    Url(String),
    /// Any JSON value.
    Data(Value),
}

/// One piece of a message or artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Part {
    pub content: PartContent,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
}

impl Part {
    pub fn text(text: impl Into<String>) -> Self {
        Self::of(PartContent::Text(text.into()))
    }

    pub fn data(value: Value) -> Self {
        Self::of(PartContent::Data(value))
    }

    pub fn of(content: PartContent) -> Self {
        Self {
            content,
            filename: None,
            media_type: None,
            metadata: None,
        }
    }

    pub fn as_text(&self) -> Option<&str> {
        match &self.content {
            PartContent::Text(t) => Some(t),
            _ => None,
        }
    }

    /// The text parts of `parts` joined by newlines (a message's [`Message::text`]).
    pub fn text_of(parts: &[Part]) -> String {
        parts
            .iter()
            .filter_map(Part::as_text)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A message in a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub message_id: MessageId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<ContextId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    pub role: Role,
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_task_ids: Vec<TaskId>,
}

impl Message {
    /// An agent message with a fresh id, for a task in a thread.
    pub fn agent(context_id: ContextId, task_id: Option<TaskId>, parts: Vec<Part>) -> Self {
        Self {
            message_id: MessageId::generate(),
            context_id: Some(context_id),
            task_id,
            role: Role::Agent,
            parts,
            metadata: None,
            extensions: Vec::new(),
            reference_task_ids: Vec::new(),
        }
    }

    /// All text parts joined by newlines.
    pub fn text(&self) -> String {
        Part::text_of(&self.parts)
    }
}

/// An output of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Artifact {
    pub artifact_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
}

impl Artifact {
    /// An artifact with a fresh id holding the given parts.
    pub fn new(parts: Vec<Part>) -> Self {
        Self {
            artifact_id: uuid::Uuid::now_v7().to_string(),
            name: None,
            description: None,
            parts,
            metadata: None,
            extensions: Vec::new(),
        }
    }
}

/// The current status of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStatus {
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    pub timestamp: Timestamp,
}

/// One recorded state change (the task's state transition history).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    pub state: TaskState,
    pub timestamp: Timestamp,
}

/// A unit of work in a thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    pub context_id: ContextId,
    pub tenant: TenantId,
    pub status: TaskStatus,
    pub artifacts: Vec<Artifact>,
    /// Messages of this task in order: client messages and agent messages.
    pub history: Vec<Message>,
    pub metadata: Option<Metadata>,
    pub transitions: Vec<Transition>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// 1 when created, +1 with every event (status change or artifact): the sequence
    /// number of the task's last logged event plus one. Not stored; derived from the
    /// event log when a task is loaded.
    #[serde(default = "first_generation")]
    pub generation: i64,
}

fn first_generation() -> i64 {
    1
}

impl Task {
    /// A new task in `Submitted`, with the client's first message as its history.
    pub fn submitted(
        id: TaskId,
        context_id: ContextId,
        tenant: TenantId,
        first: Message,
        now: Timestamp,
    ) -> Self {
        Self {
            id,
            context_id,
            tenant,
            status: TaskStatus {
                state: TaskState::Submitted,
                message: None,
                timestamp: now,
            },
            artifacts: Vec::new(),
            history: vec![first],
            metadata: None,
            transitions: vec![Transition {
                state: TaskState::Submitted,
                timestamp: now,
            }],
            created_at: now,
            updated_at: now,
            generation: 1,
        }
    }

    /// Moves to `status` (the caller checked legality), recording the transition and
    /// keeping the status message in the history.
    pub fn set_status(&mut self, status: TaskStatus) {
        if let Some(message) = &status.message
            && !self
                .history
                .iter()
                .any(|m| m.message_id == message.message_id)
        {
            self.history.push(message.clone());
        }
        if self.status.state != status.state || self.transitions.is_empty() {
            self.transitions.push(Transition {
                state: status.state,
                timestamp: status.timestamp,
            });
        }
        self.updated_at = status.timestamp;
        self.status = status;
    }

    /// Adds or merges an artifact. With `append`, parts go onto the artifact with the same
    /// id (created if absent); otherwise an artifact with that id is replaced.
    pub fn apply_artifact(&mut self, artifact: &Artifact, append: bool, now: Timestamp) {
        self.updated_at = now;
        match self
            .artifacts
            .iter_mut()
            .find(|a| a.artifact_id == artifact.artifact_id)
        {
            Some(existing) if append => existing.parts.extend(artifact.parts.iter().cloned()),
            Some(existing) => *existing = artifact.clone(),
            None => self.artifacts.push(artifact.clone()),
        }
    }

    /// A copy with at most the `n` most recent history messages (`None`: all; `Some(0)`: none)
    /// and, unless asked for, without artifacts. The stored task is never trimmed.
    pub fn view(&self, history_length: Option<u32>, include_artifacts: bool) -> Task {
        let mut copy = self.clone();
        if let Some(n) = history_length {
            let n = n as usize;
            if copy.history.len() > n {
                copy.history.drain(..copy.history.len() - n);
            }
        }
        if !include_artifacts {
            copy.artifacts.clear();
        }
        copy
    }
}

/// One event of a task's stream, as published to subscribers and kept in the
/// durable per-task event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StreamEvent {
    /// A snapshot of the whole task (always the first event of a task stream).
    Task { task: Task },
    /// A reply without a task (a message-only stream has exactly this one event).
    Message { message: Message },
    StatusUpdate {
        task_id: TaskId,
        context_id: ContextId,
        status: TaskStatus,
        metadata: Option<Metadata>,
    },
    ArtifactUpdate {
        task_id: TaskId,
        context_id: ContextId,
        artifact: Artifact,
        append: bool,
        last_chunk: bool,
        metadata: Option<Metadata>,
    },
}

impl StreamEvent {
    /// Whether the task is over after this event (a message reply is final too).
    pub fn is_final(&self) -> bool {
        match self {
            StreamEvent::Task { task } => task.status.state.is_terminal(),
            StreamEvent::Message { .. } => true,
            StreamEvent::StatusUpdate { status, .. } => status.state.is_terminal(),
            StreamEvent::ArtifactUpdate { .. } => false,
        }
    }

    /// Whether a stream closes after this event (terminal or interrupted status).
    pub fn ends_stream(&self) -> bool {
        match self {
            StreamEvent::Task { task } => task.status.state.ends_turn(),
            StreamEvent::Message { .. } => true,
            StreamEvent::StatusUpdate { status, .. } => status.state.ends_turn(),
            StreamEvent::ArtifactUpdate { .. } => false,
        }
    }
}

mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let raw = String::deserialize(d)?;
        STANDARD.decode(raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> Task {
        let ctx = ContextId::generate();
        let msg = Message {
            message_id: MessageId::generate(),
            context_id: Some(ctx.clone()),
            task_id: None,
            role: Role::User,
            parts: vec![Part::text("hi")],
            metadata: None,
            extensions: vec![],
            reference_task_ids: vec![],
        };
        Task::submitted(
            TaskId::generate(),
            ctx,
            TenantId::default_tenant(),
            msg,
            Timestamp(1),
        )
    }

    #[test]
    fn terminal_states_allow_no_transition() {
        for from in TaskState::ALL.into_iter().filter(|s| s.is_terminal()) {
            for to in TaskState::ALL {
                assert!(!from.can_transition_to(to), "{from:?} -> {to:?}");
            }
        }
        assert!(TaskState::Submitted.can_transition_to(TaskState::Working));
        assert!(TaskState::InputRequired.can_transition_to(TaskState::Working));
        assert!(!TaskState::Working.can_transition_to(TaskState::Submitted));
    }

    #[test]
    fn state_names_round_trip() {
        for s in TaskState::ALL {
            assert_eq!(TaskState::from_str_opt(s.as_str()), Some(s));
        }
    }

    #[test]
    fn status_changes_are_recorded_as_transitions() {
        let mut t = task();
        t.set_status(TaskStatus {
            state: TaskState::Working,
            message: None,
            timestamp: Timestamp(2),
        });
        t.set_status(TaskStatus {
            state: TaskState::Completed,
            message: Some(Message::agent(
                t.context_id.clone(),
                Some(t.id.clone()),
                vec![],
            )),
            timestamp: Timestamp(3),
        });
        let states: Vec<_> = t.transitions.iter().map(|x| x.state).collect();
        assert_eq!(
            states,
            [
                TaskState::Submitted,
                TaskState::Working,
                TaskState::Completed
            ]
        );
        assert_eq!(t.history.len(), 2, "status message joins the history");
        assert_eq!(t.updated_at, Timestamp(3));
    }

    #[test]
    fn appended_artifact_chunks_merge_by_id() {
        let mut t = task();
        let mut a = Artifact::new(vec![Part::text("chunk-1 ")]);
        t.apply_artifact(&a, true, Timestamp(2));
        a.parts = vec![Part::text("chunk-2")];
        t.apply_artifact(&a, true, Timestamp(3));
        assert_eq!(t.artifacts.len(), 1);
        assert_eq!(t.artifacts[0].parts.len(), 2);
        t.apply_artifact(&a, false, Timestamp(4));
        assert_eq!(t.artifacts[0].parts.len(), 1, "non-append replaces");
    }

    #[test]
    fn views_trim_a_copy_only() {
        let mut t = task();
        t.history.push(t.history[0].clone());
        t.apply_artifact(&Artifact::new(vec![Part::text("x")]), false, Timestamp(2));
        let v = t.view(Some(1), false);
        assert_eq!(v.history.len(), 1);
        assert!(v.artifacts.is_empty());
        assert_eq!(t.view(Some(0), true).history.len(), 0);
        assert_eq!(t.history.len(), 2);
        assert_eq!(t.artifacts.len(), 1);
    }

    #[test]
    fn parts_round_trip_through_storage_json() {
        let p = Part {
            content: PartContent::Raw(b"hello".to_vec()),
            filename: Some("output.txt".into()),
            media_type: Some("text/plain".into()),
            metadata: None,
        };
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Part>(&json).unwrap(), p);
    }
}
