//! The write path's SQL, written once for both backends.
//!
//! A batch of [`WriteOp`]s becomes [`Rows`] (upserts deduplicated to the last write of
//! each key: ops are full rows, so the last one is the state the batch leaves; Postgres
//! also refuses `ON CONFLICT DO UPDATE` touching one row twice in a statement), and the
//! rows become one multi-row statement per table and chunk, built by the functions below.
//! A statement is a plain diesel query value; the backends only differ in how they run it:
//! `postgres.rs` awaits it on an `AsyncPgConnection`, `sqlite.rs` runs it on a synchronous
//! `SqliteConnection` inside its writer thread (see [`Statement`]).
//!
//! With no foreign keys the order between tables does not matter; within a table it is
//! kept. The statements are applied in the order of [`Rows`]' fields, thread expirations
//! after the thread upserts of the same batch.

use std::collections::HashMap;

use diesel::sqlite::SqliteConnection;
use diesel::upsert::excluded;
use diesel::{ExpressionMethods, QueryDsl};
use diesel_async::AsyncPgConnection;

use super::rows::{NewHistoryLink, NewMessage, NewTask, NewTaskEvent, NewThread};
use super::schema::{messages, task_events, task_history, tasks, threads};
use super::{StoreError, ThreadStatus, WriteOp};

/// Rows per multi-row statement: far below Postgres' 65535 bind parameters and SQLite's
/// 32766 for the widest table (12 columns).
pub(super) const CHUNK: usize = 500;

/// A write statement both backends can run: awaited on Postgres (diesel-async), called on
/// SQLite (diesel's own synchronous connection, which caches the prepared statement).
pub(super) trait Statement:
    diesel_async::methods::ExecuteDsl<AsyncPgConnection>
    + diesel::query_dsl::methods::ExecuteDsl<SqliteConnection>
    + Send
{
}

impl<T> Statement for T where
    T: diesel_async::methods::ExecuteDsl<AsyncPgConnection>
        + diesel::query_dsl::methods::ExecuteDsl<SqliteConnection>
        + Send
{
}

/// A conditional expiry of some of a tenant's threads ([`WriteOp::ExpireThreads`]).
pub(super) struct Expiration<'a> {
    tenant: &'a str,
    thread_ids: Vec<&'a str>,
    at: i64,
}

/// The rows of a batch, per table, in the order they are written.
#[derive(Default)]
pub(super) struct Rows<'a> {
    pub threads: Vec<NewThread<'a>>,
    pub expirations: Vec<Expiration<'a>>,
    pub messages: Vec<NewMessage<'a>>,
    pub tasks: Vec<NewTask<'a>>,
    pub links: Vec<NewHistoryLink<'a>>,
    pub events: Vec<NewTaskEvent<'a>>,
}

impl<'a> Rows<'a> {
    /// The rows `ops` write, upserts deduplicated to the last write of each key.
    pub fn collect(ops: &'a [WriteOp]) -> Result<Self, StoreError> {
        let mut rows = Rows::default();
        let mut thread_at = HashMap::new();
        let mut task_at = HashMap::new();
        for op in ops {
            match op {
                WriteOp::UpsertThread(thread) => {
                    let key = (thread.tenant.as_str(), thread.thread_id.as_str());
                    upsert(
                        &mut rows.threads,
                        &mut thread_at,
                        key,
                        NewThread::new(thread)?,
                    );
                }
                WriteOp::UpsertTask(task) => {
                    let key = (task.tenant.as_str(), task.id.as_str());
                    upsert(&mut rows.tasks, &mut task_at, key, NewTask::new(task)?);
                }
                WriteOp::AppendMessage(message) => rows.messages.push(NewMessage::new(message)?),
                WriteOp::LinkTaskMessage {
                    tenant,
                    task_id,
                    position,
                    thread_id,
                    message_seq,
                } => rows.links.push(NewHistoryLink {
                    tenant_id: tenant.as_str(),
                    task_id: task_id.as_str(),
                    position: *position,
                    thread_id: thread_id.as_str(),
                    message_seq: *message_seq,
                }),
                WriteOp::AppendTaskEvent {
                    tenant,
                    task_id,
                    seq,
                    event,
                    created_at,
                } => rows.events.push(NewTaskEvent::new(
                    tenant,
                    task_id,
                    *seq,
                    event,
                    *created_at,
                )?),
                WriteOp::ExpireThreads {
                    tenant,
                    thread_ids,
                    at,
                } => rows.expirations.push(Expiration {
                    tenant: tenant.as_str(),
                    thread_ids: thread_ids.iter().map(|id| id.as_str()).collect(),
                    at: at.millis(),
                }),
            }
        }
        Ok(rows)
    }

    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
            && self.expirations.is_empty()
            && self.messages.is_empty()
            && self.tasks.is_empty()
            && self.links.is_empty()
            && self.events.is_empty()
    }

    /// The conditional expiry updates, one per tenant and chunk of thread ids.
    pub fn expiry_chunks(&self) -> impl Iterator<Item = (&'a str, &[&'a str], i64)> {
        self.expirations.iter().flat_map(|e| {
            e.thread_ids
                .chunks(CHUNK)
                .map(move |chunk| (e.tenant, chunk, e.at))
        })
    }
}

/// Replaces the row of `key` if the batch wrote it before, else appends it.
fn upsert<'a, R>(
    rows: &mut Vec<R>,
    at: &mut HashMap<(&'a str, &'a str), usize>,
    key: (&'a str, &'a str),
    row: R,
) {
    match at.get(&key) {
        Some(&i) => rows[i] = row,
        None => {
            at.insert(key, rows.len());
            rows.push(row);
        }
    }
}

/// Inserts threads, or updates every column but `created_at`.
pub(super) fn upsert_threads<'a>(rows: &'a [NewThread<'a>]) -> impl Statement + 'a {
    diesel::insert_into(threads::table)
        .values(rows)
        .on_conflict((threads::tenant_id, threads::thread_id))
        .do_update()
        .set((
            threads::updated_at.eq(excluded(threads::updated_at)),
            threads::expires_at.eq(excluded(threads::expires_at)),
            threads::status.eq(excluded(threads::status)),
            threads::conversation_context.eq(excluded(threads::conversation_context)),
        ))
}

/// Marks the tenant's threads among `ids` expired — only those still active whose expiry
/// is at or before `at`, so a thread continued since keeps its status.
pub(super) fn expire_threads<'a>(
    tenant: &'a str,
    ids: &'a [&'a str],
    at: i64,
) -> impl Statement + 'a {
    diesel::update(
        threads::table
            .filter(threads::tenant_id.eq(tenant))
            .filter(threads::thread_id.eq_any(ids))
            .filter(threads::status.eq(ThreadStatus::Active.as_str()))
            .filter(threads::expires_at.le(at)),
    )
    .set(threads::status.eq(ThreadStatus::Expired.as_str()))
}

pub(super) fn insert_messages<'a>(rows: &'a [NewMessage<'a>]) -> impl Statement + 'a {
    diesel::insert_into(messages::table).values(rows)
}

/// Inserts tasks, or updates every column but the keys and `created_at`.
pub(super) fn upsert_tasks<'a>(rows: &'a [NewTask<'a>]) -> impl Statement + 'a {
    diesel::insert_into(tasks::table)
        .values(rows)
        .on_conflict((tasks::tenant_id, tasks::task_id))
        .do_update()
        .set((
            tasks::context_id.eq(excluded(tasks::context_id)),
            tasks::state.eq(excluded(tasks::state)),
            tasks::status_message.eq(excluded(tasks::status_message)),
            tasks::status_timestamp.eq(excluded(tasks::status_timestamp)),
            tasks::artifacts.eq(excluded(tasks::artifacts)),
            tasks::transitions.eq(excluded(tasks::transitions)),
            tasks::metadata.eq(excluded(tasks::metadata)),
            tasks::updated_at.eq(excluded(tasks::updated_at)),
        ))
}

pub(super) fn insert_links<'a>(rows: &'a [NewHistoryLink<'a>]) -> impl Statement + 'a {
    diesel::insert_into(task_history::table).values(rows)
}

pub(super) fn insert_events<'a>(rows: &'a [NewTaskEvent<'a>]) -> impl Statement + 'a {
    diesel::insert_into(task_events::table).values(rows)
}
