//! The one write connection to the SQLite file: a batch of [`WriteOp`]s committed in one
//! transaction of cached, row-at-a-time statements (`writes::sqlite`), the census kept
//! in the same transaction, and the WAL kept within its bound beside it
//! (`checkpoint.rs`).

use std::path::Path;
use std::sync::{Arc, Mutex};

use super::checkpoint::{Checkpointer, note_wal_pages};
use super::claims::{ClaimIndex, Staged};
use super::error::store_error;
use super::lock::SqliteLock;
use super::pragmas;
use crate::store::writes::{CHUNK, PushRow, Rows, sqlite as sql};
use crate::store::{BlockingCommit, SqliteSynchronous, StoreError, WriteOp};

/// The one write connection to the SQLite file (rusqlite, over the same libsqlite3 as
/// diesel), with its prepared statements cached.
pub struct SqliteWriter {
    pub(super) conn: Mutex<rusqlite::Connection>,
    /// The idempotency claims' index entries not written yet.
    pub(super) claims: Arc<ClaimIndex>,
    /// Checkpoints the WAL beside the writer.
    checkpointer: Checkpointer,
    /// This process's hold on the file, for as long as the store or the persistence
    /// thread can write (dropped after the connection: fields drop in order).
    _lock: SqliteLock,
}

/// Statements the writer keeps prepared: those of `writes::sqlite`, a few shapes of the
/// janitor's expiry, and the claims' (`sqlite/claims.rs`).
const CACHED_STATEMENTS: usize = 32;

impl SqliteWriter {
    pub(in crate::store) fn open(
        path: &Path,
        cfg: &crate::store::StoreConfig,
    ) -> Result<Self, StoreError> {
        let synchronous = cfg.sqlite_synchronous;
        let lock = SqliteLock::acquire(path)?;
        let unavailable = |e: &dyn std::fmt::Display| {
            StoreError::Unavailable(format!("sqlite {}: {e}", path.display()))
        };
        // Frames held until the sync only where every commit ends with one.
        let conn = if cfg.sqlite_wal_one_write && synchronous == SqliteSynchronous::Full {
            super::wal_writes::register().map_err(|rc| {
                unavailable(&format!("registering the WAL writes' VFS: code {rc}"))
            })?;
            rusqlite::Connection::open_with_flags_and_vfs(
                path,
                rusqlite::OpenFlags::default(),
                super::wal_writes::NAME,
            )
        } else {
            rusqlite::Connection::open(path)
        }
        .map_err(|e| unavailable(&e))?;
        conn.execute_batch(&pragmas(synchronous))
            .map_err(store_error)?;
        conn.set_prepared_statement_cache_capacity(CACHED_STATEMENTS);
        // The hook replaces SQLite's own checkpoints at commit (wal_autocheckpoint).
        conn.wal_hook(Some(note_wal_pages));
        // A WAL that starts over is cut back to its bound (SQLite otherwise reuses the
        // file at the largest size it ever reached).
        let page_size: i64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .map_err(store_error)?;
        conn.execute_batch(&format!(
            "PRAGMA journal_size_limit={}",
            page_size * i64::from(cfg.sqlite_max_wal_pages)
        ))
        .map_err(store_error)?;
        let claims = Arc::new(ClaimIndex::open(&conn, cfg.sqlite_claim_buffer)?);
        Ok(Self {
            conn: Mutex::new(conn),
            claims,
            checkpointer: Checkpointer::start(
                path,
                synchronous,
                cfg.sqlite_checkpoint_pages,
                cfg.sqlite_max_wal_pages,
            )?,
            _lock: lock,
        })
    }

    /// The checkpoints the checkpoint thread has run.
    #[cfg(test)]
    pub(in crate::store) fn checkpoints(&self) -> &super::checkpoint::Checkpoints {
        &self.checkpointer.done
    }
}

impl BlockingCommit for SqliteWriter {
    /// Applies a batch in one `BEGIN IMMEDIATE` transaction (the write lock is taken at
    /// once, so the transaction never has to upgrade a read lock), one cached statement
    /// per row.
    fn commit_blocking(&self, batches: &[&[WriteOp]]) -> Result<(), StoreError> {
        let rows = Rows::collect(batches.iter().flat_map(|b| b.iter()))?;
        if rows.is_empty() {
            return Ok(());
        }
        // A panic while holding the lock leaves no transaction open: rusqlite's
        // `Transaction` rolls back when dropped unfinished.
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(store_error)?;
        let mut staged = Staged::default();
        write_rows(&tx, &rows, &self.claims, &mut staged)?;
        tx.commit().map_err(store_error)?;
        self.claims.committed(staged);
        self.checkpointer.after_commit(&conn);
        Ok(())
    }
}

/// The statements of `writes::sqlite`, row by row, in the order of [`Rows`]' fields; the
/// claims through [`ClaimIndex`], which may add a run of their index entries at the end.
fn write_rows(
    tx: &rusqlite::Transaction<'_>,
    rows: &Rows<'_>,
    claims: &ClaimIndex,
    staged: &mut Staged,
) -> Result<(), StoreError> {
    // The claims first: a key claimed within its window refuses the whole batch.
    for (claim, taken_over_before, known_unclaimed) in &rows.claims {
        claims.claim(tx, staged, claim, *taken_over_before, *known_unclaimed)?;
    }
    for settled in &rows.settled {
        claims
            .settle(
                tx,
                staged,
                settled.tenant_id,
                settled.key,
                settled.reply.as_deref(),
                settled.reply_seq,
            )
            .map_err(store_error)?;
    }
    for before in &rows.forget_before {
        claims.forget(tx, staged, *before).map_err(store_error)?;
    }
    write_others(tx, rows).map_err(store_error)?;
    claims.index_run(tx, staged).map_err(store_error)
}

/// `census_counts.what` of the tasks' counts by state.
pub(super) const CENSUS_TASK: &str = "task";
/// `census_counts.what` of the threads' counts by status.
pub(super) const CENSUS_THREAD: &str = "thread";

/// What a commit does to the census counts (`census_counts`): per count, the rows it
/// adds or (negative) takes away, applied once per count at the end of the commit.
#[derive(Default)]
struct CensusDelta(Vec<(&'static str, String, i64)>);

impl CensusDelta {
    fn add(&mut self, what: &'static str, name: &str, n: i64) {
        if n == 0 {
            return;
        }
        match self.0.iter_mut().find(|(w, m, _)| *w == what && m == name) {
            Some(entry) => entry.2 += n,
            None => self.0.push((what, name.to_owned(), n)),
        }
    }

    /// A row of `what` that was `before` (`None`: it did not exist) and is `after` now.
    fn moved(&mut self, what: &'static str, before: Option<&str>, after: &str) {
        if before == Some(after) {
            return;
        }
        if let Some(before) = before {
            self.add(what, before, -1);
        }
        self.add(what, after, 1);
    }

    fn apply(self, tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
        let mut stmt = tx.prepare_cached(sql::ADD_TO_CENSUS)?;
        for (what, name, n) in self.0 {
            if n != 0 {
                stmt.execute(rusqlite::params![what, name, n])?;
            }
        }
        Ok(())
    }
}

/// The value of the one column `sql` reads of one row, if there is the row.
fn one_text(
    tx: &rusqlite::Transaction<'_>,
    sql: &str,
    key: (&str, &str),
) -> rusqlite::Result<Option<String>> {
    use rusqlite::OptionalExtension;
    tx.prepare_cached(sql)?
        .query_row(rusqlite::params![key.0, key.1], |row| row.get(0))
        .optional()
}

fn write_others(tx: &rusqlite::Transaction<'_>, rows: &Rows<'_>) -> rusqlite::Result<()> {
    use rusqlite::params;
    // The census counts follow the rows written here, and only here.
    let mut census = CensusDelta::default();
    if !rows.threads.is_empty() {
        let mut upsert = tx.prepare_cached(sql::UPSERT_THREAD)?;
        let mut insert = tx.prepare_cached(sql::INSERT_THREAD)?;
        for r in &rows.threads {
            let before = match r.first {
                true => None,
                false => one_text(tx, sql::THREAD_STATUS, (r.tenant_id, r.thread_id))?,
            };
            census.moved(CENSUS_THREAD, before.as_deref(), r.status);
            let stmt = if r.first { &mut insert } else { &mut upsert };
            stmt.execute(params![
                r.tenant_id,
                r.thread_id,
                r.created_at,
                r.updated_at,
                r.expires_at,
                r.status,
                r.conversation_context
            ])?;
        }
    }
    for expiration in &rows.expirations {
        for ids in expiration.thread_ids.chunks(CHUNK) {
            let mut stmt = tx.prepare_cached(&sql::expire_threads(ids.len()))?;
            let mut values: Vec<&dyn rusqlite::ToSql> = vec![&expiration.tenant, &expiration.at];
            values.extend(ids.iter().map(|id| id as &dyn rusqlite::ToSql));
            let expired = i64::try_from(stmt.execute(values.as_slice())?).unwrap_or(i64::MAX);
            census.add(
                CENSUS_THREAD,
                crate::store::ThreadStatus::Active.as_str(),
                -expired,
            );
            census.add(
                CENSUS_THREAD,
                crate::store::ThreadStatus::Expired.as_str(),
                expired,
            );
        }
    }
    if !rows.messages.is_empty() {
        let mut stmt = tx.prepare_cached(sql::INSERT_MESSAGE)?;
        for r in &rows.messages {
            stmt.execute(params![
                r.tenant_id,
                r.thread_id,
                r.seq,
                r.message_id,
                r.task_id,
                r.role,
                r.author,
                r.content,
                r.parts,
                r.tool_calls,
                r.metadata,
                r.created_at,
                r.extensions,
                r.reference_task_ids
            ])?;
        }
    }
    if !rows.tasks.is_empty() {
        let mut upsert = tx.prepare_cached(sql::UPSERT_TASK)?;
        let mut insert = tx.prepare_cached(sql::INSERT_TASK)?;
        for r in &rows.tasks {
            let before = match r.first {
                true => None,
                false => one_text(tx, sql::TASK_STATE, (r.tenant_id, r.task_id))?,
            };
            census.moved(CENSUS_TASK, before.as_deref(), r.state);
            let stmt = if r.first { &mut insert } else { &mut upsert };
            stmt.execute(params![
                r.tenant_id,
                r.task_id,
                r.context_id,
                r.state,
                r.status_message,
                r.status_timestamp,
                r.artifacts,
                r.transitions,
                r.metadata,
                r.created_at,
                r.updated_at,
                r.history,
                r.status_entry,
                r.final_event_seq
            ])?;
        }
    }
    if !rows.appends.is_empty() {
        let mut stmt = tx.prepare_cached(sql::APPEND_HISTORY)?;
        for r in &rows.appends {
            stmt.execute(params![r.tenant_id, r.task_id, r.seqs])?;
        }
    }
    if !rows.events.is_empty() {
        let mut stmt = tx.prepare_cached(sql::INSERT_EVENT)?;
        for r in &rows.events {
            stmt.execute(params![
                r.tenant_id,
                r.task_id,
                r.seq,
                r.kind,
                r.payload,
                r.created_at,
                r.message_seq
            ])?;
        }
    }
    for row in &rows.push {
        write_push(tx, row)?;
    }
    for retirement in &rows.retirements {
        for thread_id in &retirement.thread_ids {
            let gone = tx.prepare_cached(sql::RETIRE_THREAD)?.execute(params![
                retirement.tenant,
                thread_id,
                retirement.at
            ])?;
            if gone == 1 {
                census.add(
                    CENSUS_THREAD,
                    crate::store::ThreadStatus::Expired.as_str(),
                    -1,
                );
                let mut held = tx.prepare_cached(sql::RETIRED_TASK_STATES)?;
                let states = held.query_map(params![retirement.tenant, thread_id], |row| {
                    Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
                })?;
                for state in states {
                    let (state, n) = state?;
                    census.add(CENSUS_TASK, &state, -n);
                }
                for statement in sql::RETIRED_ROWS {
                    tx.prepare_cached(statement)?
                        .execute(params![retirement.tenant, thread_id])?;
                }
            }
        }
    }
    census.apply(tx)
}

fn write_push(tx: &rusqlite::Transaction<'_>, row: &PushRow<'_>) -> rusqlite::Result<()> {
    use rusqlite::params;
    match row {
        PushRow::PutConfig(r) => tx
            .prepare_cached(sql::UPSERT_PUSH_CONFIG)?
            .execute(params![
                r.tenant_id,
                r.task_id,
                r.config_id,
                r.dialect,
                r.url,
                r.token,
                r.auth_scheme,
                r.auth_credentials,
                r.created_at
            ])?,
        PushRow::DeleteConfig {
            tenant_id,
            task_id,
            config_id,
        } => {
            tx.prepare_cached(sql::DELETE_OWED)?
                .execute(params![tenant_id, task_id, config_id])?;
            tx.prepare_cached(sql::DELETE_PUSH_CONFIG)?
                .execute(params![tenant_id, task_id, config_id])?
        }
        PushRow::Enqueue(r) => tx.prepare_cached(sql::INSERT_OUTBOX)?.execute(params![
            r.tenant_id,
            r.task_id,
            r.config_id,
            r.seq,
            r.payload,
            r.created_at,
            r.attempts,
            r.next_attempt_at
        ])?,
        PushRow::Done(key) => tx.prepare_cached(sql::DELETE_OUTBOX)?.execute(params![
            key.tenant.as_str(),
            key.task_id.as_str(),
            key.config_id,
            key.seq
        ])?,
        PushRow::Retry {
            key,
            attempts,
            next_attempt_at,
        } => tx.prepare_cached(sql::RESCHEDULE_OUTBOX)?.execute(params![
            key.tenant.as_str(),
            key.task_id.as_str(),
            key.config_id,
            key.seq,
            attempts,
            next_attempt_at
        ])?,
    };
    Ok(())
}
