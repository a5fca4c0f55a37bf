//! What the store reads and writes, as the rest of the server speaks of it: threads,
//! messages, tasks and their snapshots, the write operations a commit applies
//! ([`WriteOp`]), idempotency claims, push deliveries and the operators' census.

use std::sync::Arc;

use serde_json::Value;

use crate::domain::{
    ContextId, Message, MessageId, Metadata, Part, PushConfig, PushPayload, StreamEvent, Task,
    TaskId, TenantId, Timestamp,
};

/// Whether a thread can still be continued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadStatus {
    Active,
    Expired,
}

impl ThreadStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadStatus::Active => "active",
            ThreadStatus::Expired => "expired",
        }
    }
}

/// A thread (A2A context) row.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadRecord {
    pub tenant: TenantId,
    pub thread_id: ContextId,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// When the thread expires unless it sees activity before.
    pub expires_at: Timestamp,
    pub status: ThreadStatus,
    /// The thread's state map (a JSON object).
    pub conversation_context: Value,
}

/// One message of a thread's history, ordered by `seq` (never by time).
#[derive(Debug, Clone, PartialEq)]
pub struct MessageRecord {
    pub tenant: TenantId,
    pub thread_id: ContextId,
    /// Monotonic per thread, starting at 1.
    pub seq: i64,
    pub message_id: Option<MessageId>,
    pub task_id: Option<TaskId>,
    /// `user` or `agent` for A2A messages; the session layer adds `assistant`, `tool`, `system`.
    pub role: String,
    pub author: Option<String>,
    /// The text of the message (text parts joined by newlines).
    pub content: String,
    /// The full A2A parts (empty for messages that only the session layer knows).
    pub parts: Vec<Part>,
    /// Typed tool-call entries as a JSON array (`[]` when none).
    pub tool_calls: Value,
    pub metadata: Option<Metadata>,
    pub created_at: Timestamp,
    /// The A2A message's extension URIs.
    pub extensions: Vec<String>,
    /// The tasks the A2A message refers to.
    pub reference_task_ids: Vec<TaskId>,
}

/// A task as its row stores it ([`WriteOp::UpsertTask`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    /// The task without its history, which the store keeps as references to the
    /// thread's messages (written by [`WriteOp::LinkTaskMessage`]), and without its status
    /// message when `status_entry` names it.
    pub task: Task,
    /// Which entry of the task's history (from 0) is its status message: stored as that
    /// reference rather than as a copy of the message.
    pub status_entry: Option<i64>,
}

impl TaskRecord {
    /// The row of `task`. Its status message is an entry of its history
    /// ([`Task::set_status`] keeps it there): the newest entry equal to it. A status
    /// message that is not one (none is, in practice) is stored as a copy.
    pub fn of(task: &Task) -> Self {
        let status_entry = task
            .status
            .message
            .as_ref()
            .and_then(|m| task.history.iter().rposition(|h| h == m));
        Self {
            task: Task {
                id: task.id.clone(),
                context_id: task.context_id.clone(),
                tenant: task.tenant.clone(),
                status: crate::domain::TaskStatus {
                    state: task.status.state,
                    message: match status_entry {
                        Some(_) => None,
                        None => task.status.message.clone(),
                    },
                    timestamp: task.status.timestamp,
                },
                artifacts: task.artifacts.clone(),
                history: Vec::new(),
                metadata: task.metadata.clone(),
                transitions: task.transitions.clone(),
                created_at: task.created_at,
                updated_at: task.updated_at,
                generation: task.generation,
            },
            status_entry: status_entry.map(|i| i as i64),
        }
    }
}

impl From<Task> for TaskRecord {
    fn from(task: Task) -> Self {
        Self::of(&task)
    }
}

/// A task as loaded from the store, with the sequence number of its last logged event.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredTask {
    pub task: Task,
    pub last_event_seq: i64,
}

/// What a `ThreadActor` needs to (re)start.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadSnapshot {
    pub thread: ThreadRecord,
    /// The most recent messages (at most the requested window), ascending by `seq`.
    pub recent: Vec<MessageRecord>,
    /// The `seq` the next appended message gets.
    pub next_seq: i64,
    /// Tasks of the thread that are not terminal, with their full history.
    pub open_tasks: Vec<StoredTask>,
    /// The open tasks' push configs, by task, then in the order they were registered.
    pub push_configs: Vec<PushConfig>,
}

/// One write. A batch of writes is applied in order in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOp {
    /// Insert the thread, or update every column but `created_at`.
    UpsertThread(ThreadRecord),
    /// A thread's first row, written without looking for one: the writer read none (the
    /// thread was not in the store when its actor loaded it). A row of its key refuses
    /// the batch: `StoreError::Fenced` in a cluster (another node made the thread first),
    /// `StoreError::Conflict` otherwise. Later writes of the thread are `UpsertThread`s;
    /// in one batch with them, the row is inserted as the last of them says.
    InsertThread(ThreadRecord),
    AppendMessage(MessageRecord),
    /// Insert the task row, or update it (its history is written by `LinkTaskMessage`).
    UpsertTask(TaskRecord),
    /// A task's first row (a task this process minted the id of), written without looking
    /// for one, as [`WriteOp::InsertThread`] is.
    InsertTask(TaskRecord),
    /// Makes message `message_seq` of the task's thread the `position`-th history entry of
    /// the task: the next after those stored. The entry is kept in the task's row, written
    /// with the batch's `UpsertTask` of the task (or, without one, appended to the row on
    /// its own).
    LinkTaskMessage {
        tenant: TenantId,
        task_id: TaskId,
        position: i64,
        message_seq: i64,
    },
    /// Appends to the task's durable event log. `seq` starts at 1 and has no gaps.
    /// Only `StatusUpdate`, `ArtifactUpdate` and `Message` events are logged. A status
    /// update whose message the same batch appends to the thread (`AppendMessage`, as
    /// every turn does) refers to that row instead of copying the message.
    AppendTaskEvent {
        tenant: TenantId,
        task_id: TaskId,
        seq: i64,
        event: StreamEvent,
        created_at: Timestamp,
    },
    /// Marks the tenant's threads among `thread_ids` expired — those still `active` whose
    /// expiry is at or before `at`. A thread continued since (its expiry moved past `at`)
    /// is left alone, so this never races the thread's actor: the janitor's write of a
    /// fact that was already true. Applied after the batch's thread upserts.
    ExpireThreads {
        tenant: TenantId,
        thread_ids: Vec<ContextId>,
        at: Timestamp,
    },
    /// Registers a push config, or replaces the task's config of the same id.
    PutPushConfig(PushConfig),
    /// Removes a push config and every delivery still owed to it.
    DeletePushConfig {
        tenant: TenantId,
        task_id: TaskId,
        config_id: String,
    },
    /// Owes `config_id` the delivery of the task's event `seq`: written in the batch that
    /// logs the event, so an event is never logged without its deliveries.
    /// The row names the config's tenant, task and id; the config itself rides along for
    /// the delivery, which is handed the row once it is committed.
    EnqueuePush {
        config: Arc<PushConfig>,
        seq: i64,
        payload: PushPayload,
        created_at: Timestamp,
    },
    /// Records that `claim.key` was accepted (the turn's first write). Refused with
    /// [`StoreError::Duplicate`] — and the whole batch with it — if the tenant already
    /// has a claim of that key made after `claim.taken_over_before`.
    ClaimKey(Claim),
    /// The turn of a claimed key answered with a message instead of a task.
    SettleClaim {
        tenant: TenantId,
        key: String,
        reply: Message,
    },
    /// Forgets every claim made before `before` (the janitor, past the window).
    ForgetClaims {
        before: Timestamp,
    },
    /// Deletes the tenant's threads among `thread_ids` that are marked `expired` with an
    /// expiry at or before `before` (`store.retention_secs`), with everything in them:
    /// their messages, their tasks and each task's event log, push configs and owed
    /// deliveries. An expired thread is never continued, and an actor writes nothing to
    /// a thread past its retention (`ThreadActor::commit`), so this races no writer.
    /// Applied last in the batch.
    RetireThreads {
        tenant: TenantId,
        thread_ids: Vec<ContextId>,
        before: Timestamp,
    },
    /// A delivery is done (acknowledged, or given up): its outbox row goes.
    PushDone(OutboxKey),
    /// A delivery failed and is tried again at `next_attempt_at`.
    PushRetry {
        key: OutboxKey,
        attempts: i64,
        next_attempt_at: Timestamp,
    },
    /// Cluster mode: the batch is written only while this node's fencing token is still
    /// this one ([`StoreError::Fenced`] otherwise: another node took over). A thread actor
    /// puts the token it was created under at the head of each batch. SQLite, which is
    /// never in a cluster, has no tokens and ignores it.
    Fence(i64),
}

/// A send accepted under an idempotency key.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub tenant: TenantId,
    /// The message's id, or the request's `Idempotency-Key`.
    pub key: String,
    pub context_id: ContextId,
    pub task_id: TaskId,
    /// What the key was first sent with ([`crate::domain::SendMessage::digest`]).
    pub digest: String,
    /// The agent's reply, when the turn answered without a task.
    pub reply: Option<Message>,
    pub created_at: Timestamp,
    /// A claim of the same key made before this instant is past the window: taken over.
    pub taken_over_before: Timestamp,
    /// The claiming process found no claim of the key within the window, heard of every
    /// claim it could have missed (its claim filter rules the key out), and holds the key
    /// against its own other sends until this claim is committed. A store that no other
    /// process writes (SQLite) need not look again; Postgres always does. `false` in a
    /// claim read from the store.
    pub known_unclaimed: bool,
}

/// One owed delivery: a config of a task, and the event's sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OutboxKey {
    pub tenant: TenantId,
    pub task_id: TaskId,
    pub config_id: String,
    pub seq: i64,
}

/// An owed delivery that is due, with the config it goes to.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub key: OutboxKey,
    pub payload: PushPayload,
    /// When the event was logged.
    pub created_at: Timestamp,
    /// Attempts made so far.
    pub attempts: i64,
    pub config: Arc<PushConfig>,
}

/// A thread still marked active whose expiry has passed: the janitor's work. The list
/// is ordered by `(expires_at, tenant, thread_id)`; the last entry of a page is the
/// cursor of the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueThread {
    pub tenant: TenantId,
    pub thread_id: ContextId,
    pub expires_at: Timestamp,
}

/// Counts for operators across every tenant (the `agent_a2a_threads_active` and
/// `agent_a2a_tasks` gauges).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// Threads with status `active` whose expiry is still ahead.
    pub active_threads: u64,
    /// Tasks per state name, ascending by name; states without tasks are absent.
    pub tasks_by_state: Vec<(String, u64)>,
}
