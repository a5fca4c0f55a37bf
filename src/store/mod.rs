//! Durable storage: the `Store` trait and its two implementations, Postgres (diesel-async
//! with a deadpool pool) and embedded SQLite (diesel-async `SyncConnectionWrapper`).
//! The memory skill's repository lives in [`memories`] (same database, own pool).
//!
//! Both share one diesel schema (`schema.rs`); JSON lives in TEXT columns and time in
//! BIGINT epoch milliseconds so the same queries serve both backends. Migrations are
//! embedded per backend (`migrations/postgres`, `migrations/sqlite`) and applied by
//! [`open`] and by `agent-a2a migrate`.
//!
//! **Architecture invariant:** only the `PersistenceActor` calls [`Store::commit`]; every
//! other component reads. Every query that returns content is scoped by tenant, and so is
//! every write. Three maintenance reads span tenants because they serve all of them: the
//! operators' [`Store::census`] (numbers), and the janitor's [`Store::due_threads`] and the
//! start-up recovery's [`Store::recent_threads`] (thread keys only, never content).

pub mod cluster;
pub mod fence;
pub mod memories;
pub mod node_lock;
pub(crate) mod packed;
mod page_token;
mod postgres;
mod queries;
mod reads;
mod rows;
mod schema;
mod silence;
mod sqlite;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
mod writes;

pub use silence::{Silence, Within};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness};
use serde_json::Value;

pub use memories::MemoryRepository;

use crate::config::{self, Settings};
use crate::domain::{
    ContextId, ListTasksQuery, Message, MessageId, Metadata, Part, PushConfig, PushPayload,
    StreamEvent, Task, TaskId, TaskPage, TenantId, Timestamp,
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

/// Why a store call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or the pool timed out: retryable.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A uniqueness or key constraint was violated.
    #[error("store conflict: {0}")]
    Conflict(String),
    /// A query failed for another reason.
    #[error("store query failed: {0}")]
    Query(String),
    /// A stored row could not be decoded.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The store cannot be set up as configured (unsupported URL, unusable path).
    #[error("store misconfigured: {0}")]
    Config(String),
    /// A [`WriteOp::ClaimKey`] met a claim of the same key within the window: another
    /// request was accepted with it first. Nothing of the batch was written.
    #[error("idempotency key {0:?} is already claimed")]
    Duplicate(String),
    /// Cluster mode: another node took over a thread of this node (its lease had
    /// expired) and fenced it; nothing of the batch was written.
    #[error("this node's lease was taken over by another node")]
    Fenced,
    /// Postgres: the database is held by servers this one cannot run beside (a second
    /// server without cluster mode, or a cluster and a server without it).
    #[error("{0}")]
    Held(node_lock::Held),
    /// Another process holds the SQLite database: SQLite serves one process, several
    /// nodes share a Postgres database.
    #[error(
        "the SQLite database {} is in use by another agent-a2a process (lock file {}); \
         SQLite serves one process — stop the other one, give this one another \
         store.data_dir, or use Postgres (DATABASE_URL) to run several nodes",
        .database.display(),
        .lock_file.display()
    )]
    InUse {
        /// The database as configured.
        database: PathBuf,
        /// The lock another process holds, by its canonical path.
        lock_file: PathBuf,
    },
}

impl From<diesel::result::Error> for StoreError {
    fn from(e: diesel::result::Error) -> Self {
        use diesel::result::{DatabaseErrorKind as Kind, Error};
        match e {
            Error::DatabaseError(Kind::UniqueViolation | Kind::ForeignKeyViolation, info) => {
                StoreError::Conflict(info.message().to_owned())
            }
            // diesel-async reports a lost or closed server connection with these kinds.
            Error::DatabaseError(Kind::ClosedConnection | Kind::UnableToSendCommand, info) => {
                StoreError::Unavailable(info.message().to_owned())
            }
            // A serialization failure rolled the transaction back whole: running it
            // again is safe, and the caller is told it may.
            Error::DatabaseError(Kind::SerializationFailure, info) => {
                StoreError::Unavailable(info.message().to_owned())
            }
            // SQLITE_BUSY / SQLITE_LOCKED after the busy timeout: another writer held the
            // lock too long; trying again later is the right answer.
            Error::DatabaseError(_, info)
                if info.message().starts_with("database is locked")
                    || info.message().starts_with("database table is locked") =>
            {
                StoreError::Unavailable(info.message().to_owned())
            }
            // A transaction was interrupted mid-way (e.g. its connection dropped); the
            // pool discards the connection, so a retry gets a fresh one.
            Error::BrokenTransactionManager => StoreError::Unavailable(e.to_string()),
            Error::DeserializationError(cause) => StoreError::Corrupt(cause.to_string()),
            other => StoreError::Query(other.to_string()),
        }
    }
}

impl From<StoreError> for crate::error::Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(detail) => crate::error::Error::Unavailable {
                detail,
                retry_after_secs: 1,
            },
            // Two requests with one key raced and the other one won: once its turn is
            // durable, sending again gets its outcome.
            StoreError::Duplicate(key) => crate::error::Error::Unavailable {
                detail: format!("a request with the same idempotency key {key:?} is in progress"),
                retry_after_secs: 1,
            },
            // The thread is served by another node now: a retry is routed there.
            StoreError::Fenced => crate::error::Error::Unavailable {
                detail: "this node lost its lease on the thread to another node".into(),
                retry_after_secs: 1,
            },
            StoreError::Conflict(_)
            | StoreError::Query(_)
            | StoreError::Corrupt(_)
            | StoreError::Config(_)
            | StoreError::InUse { .. }
            | StoreError::Held(_) => crate::error::Error::Internal(e.to_string()),
        }
    }
}

/// Durable storage for threads, messages, tasks and task event logs.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// `"postgres"` or `"sqlite"`.
    fn backend(&self) -> &'static str;

    /// Postgres: whether it answers, as the store's bounded calls found it (SQLite, a
    /// file of this process's, always answers).
    fn silence(&self) -> Option<&Arc<Silence>> {
        None
    }

    /// Applies `ops` in order in one transaction: all or nothing.
    async fn commit(&self, ops: &[WriteOp]) -> Result<(), StoreError>;

    /// Applies several batches, in order, in one transaction (a group commit). The
    /// default copies them into one batch; the stores read them in place.
    async fn commit_group(&self, batches: &[&[WriteOp]]) -> Result<(), StoreError> {
        let all: Vec<WriteOp> = batches.iter().flat_map(|b| b.iter().cloned()).collect();
        self.commit(&all).await
    }

    /// The thread with its last `window` messages and its open tasks; `None` if unknown.
    async fn load_thread(
        &self,
        tenant: &TenantId,
        thread_id: &ContextId,
        window: usize,
    ) -> Result<Option<ThreadSnapshot>, StoreError>;

    /// The thread (context) of a task: its row's key alone, for routing a message that
    /// names the task to the task's thread.
    async fn task_context(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
    ) -> Result<Option<ContextId>, StoreError>;

    /// A task with its full history.
    async fn load_task(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
    ) -> Result<Option<StoredTask>, StoreError>;

    /// Tasks of the tenant, newest status first (ties broken by id), filtered and paged.
    /// The page token is opaque; an invalid one is `StoreError::Query`-free: it yields
    /// `Ok(None)` so the caller can answer "invalid params".
    async fn list_tasks(
        &self,
        tenant: &TenantId,
        query: &ListTasksQuery,
    ) -> Result<Option<TaskPage>, StoreError>;

    /// Logged events of a task with `seq > after_seq`, ascending, at most `limit`.
    async fn task_events(
        &self,
        tenant: &TenantId,
        task_id: &TaskId,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<(i64, StreamEvent)>, StoreError>;

    /// A real round trip to the database.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Active threads and tasks by state across every tenant, as of `now`. Two counting
    /// queries (tasks: a scan grouped by state), run every `metrics.census_interval_secs`.
    async fn census(&self, now: Timestamp) -> Result<Census, StoreError>;

    /// Postgres: runs `ANALYZE` on the server's tables that have grown to twice their
    /// size at their last analysis (and past a floor), and names them. A statement
    /// diesel keeps prepared is planned once for all its parameters from the statistics
    /// of that moment; the analysis makes every connection plan it again. SQLite's
    /// planner does not go by the tables' sizes: nothing to do.
    async fn refresh_statistics(&self) -> Result<Vec<&'static str>, StoreError>;

    /// Threads of every tenant marked `status` whose expiry is at or before `now`, ordered
    /// by `(expires_at, tenant, thread_id)`, strictly after `after`, at most `limit`. Keys
    /// only: the janitor expires the `active` ones with [`WriteOp::ExpireThreads`] and
    /// deletes the `expired` ones past `store.retention_secs` with
    /// [`WriteOp::RetireThreads`].
    async fn due_threads(
        &self,
        status: ThreadStatus,
        now: Timestamp,
        after: Option<&DueThread>,
        limit: usize,
    ) -> Result<Vec<DueThread>, StoreError>;

    /// The store's synchronous commit, when it has one (SQLite): the persistence layer
    /// then commits groups of batches from a thread of its own instead of awaiting
    /// [`Store::commit`] — no hop per statement, no async machinery around the disk.
    fn blocking_commit(&self) -> Option<Arc<dyn BlockingCommit>> {
        None
    }

    /// The `limit` threads of every tenant that can still be continued at `now` (active,
    /// expiry ahead) that expire last — the most recently continued —, latest first: what
    /// start-up recovery loads eagerly.
    async fn recent_threads(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<(TenantId, ContextId)>, StoreError>;

    /// The push configs of the tenant's tasks among `task_ids`, by task, then by the
    /// order they were registered in.
    async fn push_configs(
        &self,
        tenant: &TenantId,
        task_ids: &[TaskId],
    ) -> Result<Vec<PushConfig>, StoreError>;

    /// Owed deliveries due at `now`, at most `limit`, oldest first, each the earliest
    /// still owed to its config (a later event never overtakes an earlier one).
    async fn due_deliveries(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<Delivery>, StoreError>;

    /// Deliveries owed across every tenant (the outbox's depth).
    async fn outbox_depth(&self) -> Result<u64, StoreError>;

    /// Every owed delivery, due or not, with when it is next due — at most `limit`, in no
    /// particular order: what the push delivery holds in memory once it knows all of them
    /// (only outside cluster mode, where every row is this process's).
    async fn owed_deliveries(&self, limit: usize)
    -> Result<Vec<(Delivery, Timestamp)>, StoreError>;

    /// The tenant's claim of an idempotency key, whatever its age (`taken_over_before`
    /// reads 0).
    async fn claim(&self, tenant: &TenantId, key: &str) -> Result<Option<Claim>, StoreError>;

    /// Claims made at or after `from` (and before `until`, if given), oldest first, at
    /// most `limit` (all, without one): tenant, key and time. Start-up loads the claim
    /// filter with it.
    async fn claim_keys(
        &self,
        from: Timestamp,
        until: Option<Timestamp>,
        limit: Option<usize>,
    ) -> Result<Vec<(TenantId, String, Timestamp)>, StoreError>;

    /// [`Store::claim`] on the calling thread, when the store can answer a point read
    /// there for less than a hand-off to another thread costs (SQLite: a B-tree lookup
    /// in the page cache); `None` when it cannot (Postgres: a network round trip, which
    /// is awaited instead). Every send asks this.
    fn claim_inline(
        &self,
        _tenant: &TenantId,
        _key: &str,
    ) -> Option<Result<Option<Claim>, StoreError>> {
        None
    }
}

/// A commit that blocks the calling thread until its transaction has returned; same
/// contract as [`Store::commit`].
pub trait BlockingCommit: Send + Sync + 'static {
    /// Applies `batches`, in order, in one transaction.
    fn commit_blocking(&self, batches: &[&[WriteOp]]) -> Result<(), StoreError>;
}

/// SQLite's `PRAGMA synchronous` (`store.sqlite_synchronous`): how often the WAL is
/// flushed to stable storage.
///
/// FULL is the default: with group commit it costs one fsync per group, which measured
/// within the noise of NORMAL at 64 connections (2026-11-23, 2 shared cores, echo agent,
/// two interleaved 10 s rounds each: 10 455 vs 10 302 ok/s, 107–124 vs 116–124 µs of
/// server CPU per request) and 0.58 vs 0.38 ms p50 at one connection, where every
/// request pays its own fsync.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SqliteSynchronous {
    /// Every commit survives a crash of the process; a power loss or OS crash can roll
    /// back the last commits (WAL is synced at checkpoints).
    Normal,
    /// Every commit is synced (one fsync per group commit): a power loss loses nothing
    /// acknowledged.
    #[default]
    Full,
}

impl SqliteSynchronous {
    pub fn as_str(self) -> &'static str {
        match self {
            SqliteSynchronous::Normal => "NORMAL",
            SqliteSynchronous::Full => "FULL",
        }
    }
}

impl From<config::SqliteSynchronous> for SqliteSynchronous {
    fn from(setting: config::SqliteSynchronous) -> Self {
        match setting {
            config::SqliteSynchronous::Normal => SqliteSynchronous::Normal,
            config::SqliteSynchronous::Full => SqliteSynchronous::Full,
        }
    }
}

/// Name of the SQLite file inside [`StoreConfig::data_dir`].
pub const SQLITE_FILE: &str = "agent-a2a.db";

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// `postgres://…` selects Postgres; `sqlite://PATH` or None selects SQLite.
    pub database_url: Option<String>,
    /// Directory of the default SQLite file (`agent-a2a.db`).
    pub data_dir: PathBuf,
    /// Most connections the pool opens.
    pub pool_size: usize,
    /// How long a query waits for a pooled connection (including connecting) before the
    /// store answers `Unavailable`.
    pub acquire_timeout_ms: u64,
    /// Postgres only: how long a commit may go unanswered before it fails as
    /// unavailable.
    pub answer_timeout_ms: u64,
    /// SQLite only: `PRAGMA synchronous`.
    pub sqlite_synchronous: SqliteSynchronous,
    /// SQLite only, with FULL: a commit's WAL frames written in one write
    /// (`sqlite/wal_writes.rs`).
    pub sqlite_wal_one_write: bool,
    /// SQLite only: the WAL's pages past which the checkpoint thread checkpoints it.
    pub sqlite_checkpoint_pages: u32,
    /// SQLite only: the WAL's pages past which the writer checkpoints it all.
    pub sqlite_max_wal_pages: u32,
    /// SQLite only: claims whose key-index entries wait in memory (`sqlite/claims.rs`).
    pub sqlite_claim_buffer: usize,
    /// Postgres only: connections for commits, one per group commit in flight.
    pub commits_in_flight: usize,
    /// Cluster mode (Postgres only): this node's lease, checked by every commit, and the
    /// lease's length.
    pub fence: Option<(Arc<fence::Fence>, Duration)>,
    /// Postgres only: how this server holds the database (`node_lock.rs`) — alone, or
    /// shared with the other nodes of a cluster; `None` takes no hold (tools and tests
    /// that read beside a running server).
    pub hold: Option<node_lock::Hold>,
    /// How long opening waits for a hold that refuses this one to go away.
    pub lock_wait_ms: u64,
}

/// What the settings' defaults say.
impl Default for StoreConfig {
    fn default() -> Self {
        Self::from_settings(&Settings::default())
    }
}

/// Where the configuration points.
enum Location {
    Postgres(String),
    Sqlite(PathBuf),
}

impl StoreConfig {
    /// `[store]` and `[persistence]` in the store's terms (no fence: cluster mode adds it).
    pub fn from_settings(settings: &Settings) -> Self {
        let store = &settings.store;
        Self {
            database_url: (!store.database_url.is_empty()).then(|| store.database_url.clone()),
            data_dir: store.data_dir.clone(),
            pool_size: store.pool_size,
            acquire_timeout_ms: store.acquire_timeout_ms,
            answer_timeout_ms: store.answer_timeout_ms,
            sqlite_synchronous: store.sqlite_synchronous.into(),
            sqlite_wal_one_write: store.sqlite_wal_one_write,
            sqlite_checkpoint_pages: store.sqlite_checkpoint_pages,
            sqlite_max_wal_pages: store.sqlite_max_wal_pages,
            sqlite_claim_buffer: store.sqlite_claim_buffer,
            commits_in_flight: settings.persistence.commits_in_flight,
            fence: None,
            hold: None,
            lock_wait_ms: store.lock_wait_ms,
        }
    }

    fn location(&self) -> Result<Location, StoreError> {
        let url = self
            .database_url
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty());
        let Some(url) = url else {
            return Ok(Location::Sqlite(self.data_dir.join(SQLITE_FILE)));
        };
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Location::Postgres(url.to_owned()));
        }
        match url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            // Every pooled connection to `:memory:` would see a database of its own.
            Some("" | ":memory:") => Err(StoreError::Config(
                "the SQLite URL needs a file path (in-memory databases are not durable)".into(),
            )),
            Some(path) => Ok(Location::Sqlite(PathBuf::from(path))),
            // Only the scheme goes into the error: the rest may hold a password.
            None => Err(StoreError::Config(format!(
                "unsupported database URL scheme {:?} (expected postgres:// or sqlite://)",
                url.split_once(':').map_or(url, |(scheme, _)| scheme)
            ))),
        }
    }

    fn acquire_timeout(&self) -> Duration {
        Duration::from_millis(self.acquire_timeout_ms)
    }
}

/// Applies pending migrations and opens the store.
pub async fn open(cfg: &StoreConfig) -> Result<Arc<dyn Store>, StoreError> {
    let location = cfg.location()?;
    if matches!(location, Location::Sqlite(_)) {
        sqlite::tune_library();
    }
    // Before anything else touches the database: a server that may not run beside the
    // ones serving it stops here.
    let lock = match (&location, cfg.hold) {
        (Location::Postgres(url), Some(hold)) => {
            Some(node_lock::take(url, hold, Duration::from_millis(cfg.lock_wait_ms)).await?)
        }
        _ => None,
    };
    let to_migrate = cfg.clone();
    // A server alone on its database delivers every owed push row, a cluster's included.
    let alone = cfg.fence.is_none() && cfg.hold == Some(node_lock::Hold::Alone);
    // Migrations block (file and network I/O); keep them off the caller's runtime thread.
    // On SQLite the migration's hold on the file is kept until the store holds it too.
    let (applied, _held) = tokio::task::spawn_blocking(move || match to_migrate.location()? {
        Location::Postgres(url) => postgres::migrate(&url, alone).map(|applied| (applied, None)),
        Location::Sqlite(path) => {
            sqlite::migrate_holding(&path).map(|(applied, lock)| (applied, Some(lock)))
        }
    })
    .await
    .map_err(|e| StoreError::Query(format!("the migration task failed: {e}")))??;
    let store: Arc<dyn Store> = match location {
        Location::Postgres(url) => Arc::new(
            postgres::PgStore::new(
                &postgres::with_dead_after(&url, Duration::from_millis(cfg.answer_timeout_ms)),
                cfg.pool_size,
                cfg.commits_in_flight,
                cfg.acquire_timeout(),
                cfg.fence.clone(),
                lock,
            )?
            .with_answer_timeout(Duration::from_millis(cfg.answer_timeout_ms)),
        ),
        Location::Sqlite(_) if cfg.fence.is_some() => {
            return Err(StoreError::Config(
                "cluster mode needs Postgres: SQLite serves one process".into(),
            ));
        }
        Location::Sqlite(path) => Arc::new(sqlite::SqliteStore::new(&path, cfg)?),
    };
    tracing::info!(backend = store.backend(), migrations_applied = ?applied, "store open");
    Ok(store)
}

/// Applies pending migrations; returns the names of those applied now (sync; call off the
/// async runtime or via `spawn_blocking`).
pub fn migrate(cfg: &StoreConfig) -> Result<Vec<String>, StoreError> {
    match cfg.location()? {
        Location::Postgres(url) => postgres::migrate(&url, false),
        Location::Sqlite(path) => sqlite::migrate(&path),
    }
}

/// Tests: reverts the migrations from the newest back to `version` (e.g.
/// `20261125000300`) included, each by its `down.sql`, and runs `sql` on the database, as
/// an older release would have left it; returns the versions reverted; sync.
#[cfg(test)]
pub(crate) fn revert_through_then(
    cfg: &StoreConfig,
    version: &str,
    sql: &str,
) -> Result<Vec<String>, StoreError> {
    match cfg.location()? {
        Location::Postgres(url) => postgres::revert_through_then(&url, version, sql),
        Location::Sqlite(path) => sqlite::revert_through_then(&path, version, sql),
    }
}

/// Reverts `source`'s applied migrations, newest first, through `version`.
#[cfg(test)]
fn revert_through<DB, C>(
    conn: &mut C,
    source: fn() -> EmbeddedMigrations,
    version: &str,
) -> Result<Vec<String>, StoreError>
where
    DB: diesel::backend::Backend,
    C: MigrationHarness<DB>,
{
    let failed =
        |e: Box<dyn std::error::Error + Send + Sync>| StoreError::Query(format!("revert: {e}"));
    let mut reverted = Vec::new();
    loop {
        let applied = conn.applied_migrations().map_err(failed)?;
        if !applied.iter().any(|v| v.to_string() == version) {
            return Err(StoreError::Query(format!(
                "migration {version} is not applied"
            )));
        }
        let last = conn
            .revert_last_migration(source())
            .map_err(failed)?
            .to_string();
        let done = last == version;
        reverted.push(last);
        if done {
            return Ok(reverted);
        }
    }
}

/// The memory repository on the configured database, with a small pool of its own; the
/// schema must already be migrated ([`open`] or [`migrate`]). Connects nothing yet.
pub fn open_memories(cfg: &StoreConfig) -> Result<Arc<dyn MemoryRepository>, StoreError> {
    memories::open(cfg)
}

/// Runs `source`'s pending migrations, each in its own transaction, in order.
fn run_migrations<DB, C>(
    conn: &mut C,
    source: EmbeddedMigrations,
) -> Result<Vec<String>, StoreError>
where
    DB: diesel::backend::Backend,
    C: MigrationHarness<DB>,
{
    let failed = |e: Box<dyn std::error::Error + Send + Sync>| {
        StoreError::Query(format!("migration failed: {e}"))
    };
    let pending = conn.pending_migrations(source).map_err(failed)?;
    let mut applied = Vec::with_capacity(pending.len());
    for migration in pending {
        conn.run_migration(&*migration).map_err(failed)?;
        applied.push(migration.name().to_string());
    }
    Ok(applied)
}
