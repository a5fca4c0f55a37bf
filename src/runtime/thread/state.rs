//! The thread's state as the actor holds it (`Loaded`: the thread row, the history
//! window, the state map, the resident tasks as `TaskEntry`s, the running and queued
//! turns), how it is built from the store's snapshot, and the stored forms of messages.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use actix::prelude::*;
use tokio::sync::broadcast;

use super::{HubEvent, PendingTurn, RunningTurn, ThreadDeps, ThreadKey, Waiter, plan};
use crate::domain::{Message, PushConfig, PushTarget, StreamEvent, Task, TaskId, Timestamp};
use crate::session::{History, StoredMessage, ThreadState, ToolCall};
use crate::store::{MessageRecord, ThreadRecord, ThreadStatus, WriteOp};

/// A task held in memory.
pub(in crate::runtime) struct TaskEntry {
    pub task: Task,
    /// Persisted and visible to clients (a new task is not, until its first output).
    pub materialized: bool,
    pub last_seq: i64,
    pub hub: Option<broadcast::Sender<HubEvent>>,
    pub waiters: Vec<Waiter>,
    pub finished_at: Option<Instant>,
    /// `seq` of each history message in the thread (for history links).
    pub history_seqs: Vec<i64>,
    /// The task's push configs: each of its events is queued for each of them.
    pub push: Vec<PushTarget>,
    /// Configs of a task not materialized yet, written with it.
    pub push_unwritten: Vec<PushConfig>,
    /// The idempotency key the task's first message was accepted under.
    pub claim_key: Option<String>,
}

pub(in crate::runtime) struct Loaded {
    pub thread: ThreadRecord,
    pub thread_persisted: bool,
    /// The thread's recent messages (A2A messages and the agent loop's records), by `seq`.
    pub history: History,
    /// The thread's state map; its stored form is `thread.conversation_context`.
    pub state: ThreadState,
    pub next_seq: i64,
    pub tasks: HashMap<TaskId, TaskEntry>,
    pub running: Option<RunningTurn>,
    pub queue: VecDeque<PendingTurn>,
    pub last_activity: Instant,
    /// Writes already applied to memory whose commit rides along with the actor's next
    /// one: the start of a turn that opens a new task (thread row, user message), which
    /// nothing outside this actor can see until the task's first output commits it.
    /// Committed on their own after `persistence.start_grace_ms` by `flush`.
    pub unsynced: Vec<WriteOp>,
    /// The timer that commits `unsynced` on its own.
    pub flush: Option<SpawnHandle>,
    /// Events of `unsynced` writes, published once those are committed.
    pub unpublished: Vec<(TaskId, HubEvent)>,
}

impl TaskEntry {
    /// Adds a config (replacing one of the same id); a task not yet materialized writes
    /// it when it is.
    pub(in crate::runtime) fn add_push(&mut self, config: PushConfig) {
        self.push.retain(|t| t.config_id() != config.id);
        self.push.push(config.target());
        if !self.materialized {
            self.push_unwritten.retain(|c| c.id != config.id);
            self.push_unwritten.push(config);
        }
    }
}

/// The push targets of `task` among `configs`.
pub(in crate::runtime) fn targets_of(configs: &[PushConfig], task: &TaskId) -> Vec<PushTarget> {
    configs
        .iter()
        .filter(|c| &c.task_id == task)
        .map(PushConfig::target)
        .collect()
}

impl Loaded {
    pub(in crate::runtime) fn new_thread(key: &ThreadKey, ttl_ms: i64, deps: &ThreadDeps) -> Self {
        let now = Timestamp::now();
        Self::with(
            ThreadRecord {
                tenant: key.tenant.clone(),
                thread_id: key.context_id.clone(),
                created_at: now,
                updated_at: now,
                expires_at: Timestamp(now.0.saturating_add(ttl_ms)),
                status: ThreadStatus::Active,
                conversation_context: serde_json::Value::Object(Default::default()),
            },
            false,
            History::new(1, deps.threads.history_window),
            ThreadState::new(&deps.state),
            HashMap::new(),
        )
    }

    /// A thread's state with no turn running or waiting and nothing unsynced.
    pub(in crate::runtime) fn with(
        thread: ThreadRecord,
        thread_persisted: bool,
        history: History,
        state: ThreadState,
        tasks: HashMap<TaskId, TaskEntry>,
    ) -> Self {
        Self {
            thread,
            thread_persisted,
            next_seq: history.next_seq(),
            history,
            state,
            tasks,
            running: None,
            queue: VecDeque::new(),
            last_activity: Instant::now(),
            unsynced: Vec::new(),
            flush: None,
            unpublished: Vec::new(),
        }
    }

    /// Applies a planned turn start to memory: the touched thread, the message in the
    /// history, the task (created provisional, or updated). Returns the task's id, the
    /// start's status event (for the caller to publish) and the message.
    pub(in crate::runtime) fn apply_start(
        &mut self,
        start: plan::StartTurn,
    ) -> (TaskId, Option<(i64, StreamEvent)>, Message) {
        self.thread = start.thread;
        self.thread_persisted = true;
        self.next_seq = start.seq + 1;
        self.remember(&start.record);
        let task_id = start.task.id.clone();
        let entry = match self.tasks.entry(task_id.clone()) {
            std::collections::hash_map::Entry::Occupied(entry) => {
                let entry = entry.into_mut();
                entry.task = start.task;
                entry
            }
            std::collections::hash_map::Entry::Vacant(entry) => entry.insert(TaskEntry {
                task: start.task,
                materialized: false,
                last_seq: 0,
                hub: None,
                waiters: Vec::new(),
                finished_at: None,
                history_seqs: Vec::new(),
                push: Vec::new(),
                push_unwritten: Vec::new(),
                claim_key: None,
            }),
        };
        entry.materialized = start.materialized;
        if start.claim_key.is_some() {
            entry.claim_key = start.claim_key;
        }
        if let Some(config) = start.push {
            entry.add_push(config);
        }
        entry.history_seqs.push(start.seq);
        if let Some((seq, _)) = &start.event {
            entry.last_seq = *seq;
        }
        (task_id, start.event, start.message)
    }

    pub(super) fn from_snapshot(snapshot: crate::store::ThreadSnapshot, deps: &ThreadDeps) -> Self {
        let crate::store::ThreadSnapshot {
            thread,
            recent,
            next_seq,
            open_tasks,
            push_configs: push,
        } = snapshot;
        let now = Timestamp::now();
        // A state that cannot be read is logged and started afresh rather than making the
        // whole thread unusable; the next state write replaces it.
        let state = ThreadState::from_json(&thread.conversation_context, &deps.state, now)
            .unwrap_or_else(|e| {
                tracing::warn!(context_id = %thread.thread_id, error = %e, "thread state unreadable");
                ThreadState::new(&deps.state)
            });
        let records = recent.iter().map(stored_message).collect();
        let tasks = open_tasks
            .into_iter()
            .map(|stored| {
                let entry = TaskEntry {
                    history_seqs: Vec::new(),
                    push: targets_of(&push, &stored.task.id),
                    task: stored.task,
                    materialized: true,
                    last_seq: stored.last_event_seq,
                    hub: None,
                    waiters: Vec::new(),
                    finished_at: None,
                    push_unwritten: Vec::new(),
                    claim_key: None,
                };
                (entry.task.id.clone(), entry)
            })
            .collect();
        Self::with(
            thread,
            true,
            History::from_records(records, next_seq, deps.threads.history_window),
            state,
            tasks,
        )
    }

    /// Adds a committed message record to the in-memory history (the window drops the
    /// oldest beyond its capacity).
    pub(in crate::runtime) fn remember(&mut self, record: &MessageRecord) {
        if let Err(e) = self.history.push(stored_message(record)) {
            // Every append takes `next_seq` under the actor, so this is a bug; the store
            // holds the truth and the window heals on the next load.
            tracing::error!(error = %e, "history window out of step with the store");
        }
    }
}

/// The stored form of a message of this thread.
pub(in crate::runtime) fn message_record(
    key: &ThreadKey,
    seq: i64,
    message: &Message,
    task_id: Option<&TaskId>,
    now: Timestamp,
) -> MessageRecord {
    MessageRecord {
        tenant: key.tenant.clone(),
        thread_id: key.context_id.clone(),
        seq,
        message_id: Some(message.message_id.clone()),
        task_id: task_id.cloned(),
        role: message.role.as_str().into(),
        author: None,
        content: message.text(),
        parts: message.parts.clone(),
        tool_calls: serde_json::Value::Array(Vec::new()),
        metadata: message.metadata.clone(),
        created_at: now,
        extensions: message.extensions.clone(),
        reference_task_ids: message.reference_task_ids.clone(),
    }
}

/// A stored message as the session layer reads it. Tool-call entries that do not parse
/// (written by something else) are dropped with a warning rather than failing the thread.
pub(in crate::runtime) fn stored_message(record: &MessageRecord) -> StoredMessage {
    let tool_calls = match &record.tool_calls {
        serde_json::Value::Null => Vec::new(),
        value => serde_json::from_value::<Vec<ToolCall>>(value.clone()).unwrap_or_else(|e| {
            tracing::warn!(seq = record.seq, error = %e, "unreadable tool calls in a stored message");
            Vec::new()
        }),
    };
    StoredMessage {
        seq: record.seq,
        role: record.role.clone(),
        author: record.author.clone(),
        content: record.content.clone(),
        tool_calls,
        created_at: record.created_at,
    }
}

/// The stored form of a session record (no A2A parts: only the agent loop reads it).
pub(in crate::runtime) fn session_record(
    key: &ThreadKey,
    record: &StoredMessage,
    task_id: &TaskId,
) -> MessageRecord {
    MessageRecord {
        tenant: key.tenant.clone(),
        thread_id: key.context_id.clone(),
        seq: record.seq,
        message_id: None,
        task_id: Some(task_id.clone()),
        role: record.role.clone(),
        author: record.author.clone(),
        content: record.content.clone(),
        parts: Vec::new(),
        tool_calls: serde_json::to_value(&record.tool_calls)
            .unwrap_or_else(|_| serde_json::Value::Array(Vec::new())),
        metadata: None,
        created_at: record.created_at,
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    }
}
