//! Durable storage: the `Store` trait and its two implementations, Postgres (diesel-async
//! with a deadpool pool) and embedded SQLite (diesel-async `SyncConnectionWrapper`).
//! The memory skill's repository lives in [`memories`] (same database, own pool). What the
//! trait reads and writes is in `records.rs`, its errors in `error.rs`, and opening the
//! configured store and migrating it in `open.rs`.
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
mod error;
pub mod fence;
pub mod memories;
pub mod node_lock;
mod open;
pub(crate) mod packed;
mod page_token;
mod postgres;
mod queries;
mod reads;
mod records;
mod schema;
mod silence;
mod sqlite;
pub(crate) mod statement;
mod tables;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
mod writes;

use std::sync::Arc;

use async_trait::async_trait;

pub use error::StoreError;
pub use memories::MemoryRepository;
#[cfg(test)]
pub(crate) use open::revert_through_then;
pub use open::{SQLITE_FILE, SqliteSynchronous, StoreConfig, migrate, open, open_memories};
pub use records::{
    Census, Claim, Delivery, DueThread, MessageRecord, OutboxKey, StoredTask, TaskRecord,
    ThreadRecord, ThreadSnapshot, ThreadStatus, WriteOp,
};
pub use silence::{Silence, Within};

#[cfg(test)]
use open::revert_through;
use open::{Location, run_migrations};

use crate::domain::{
    ContextId, ListTasksQuery, PushConfig, StreamEvent, TaskId, TaskPage, TenantId, Timestamp,
};

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
