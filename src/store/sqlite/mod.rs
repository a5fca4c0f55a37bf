//! The embedded SQLite store (bundled libsqlite3).
//!
//! Commits and reads take different roads:
//!
//! - **Commits** go through one [`SqliteWriter`]: a plain synchronous connection (rusqlite,
//!   on the same libsqlite3 as diesel) behind a mutex. The persistence layer calls it from
//!   a thread of its own ([`BlockingCommit`]), so a group of batches is one call — one
//!   transaction, the statements of `writes.rs` row by row, each prepared once and cached
//!   — instead of one blocking-pool hop per statement. SQLite has one writer at a time
//!   anyway.
//! - **Reads** use a pool of connections wrapped in diesel-async's
//!   `SyncConnectionWrapper`, which runs them on tokio's blocking pool so that a scan never
//!   holds up an arbiter thread — except point reads (a thread's reload, a task), which
//!   run on the calling thread ([`ReadRuntime`]): a few lookups in the page cache cost
//!   less than the two hand-offs.
//!
//! Every connection is set up with WAL journaling (readers never block the writer), a
//! busy timeout (a second writer, such as the memory repository's, waits instead of
//! failing at once), foreign keys on, and the configured `synchronous` level
//! ([`SqliteSynchronous`], `store.sqlite_synchronous`, FULL by default): FULL syncs the
//! WAL at every commit — one fsync per group of batches — so not even a power loss or OS
//! crash takes back an acknowledged write; in WAL mode NORMAL survives a crash of the
//! process, but a power loss can roll back the last commits. The WAL is checkpointed by
//! a thread of its own, the writer copying only the last pages ([`Checkpointer`]).
//!
//! **One process per file.** The writer and the migrations hold an exclusive lock on
//! `<database>.lock` ([`SqliteLock`]): a second process on the same file is refused at
//! start-up with [`StoreError::InUse`] instead of writing beside the first. Several
//! nodes on one database is Postgres's job.

mod checkpoint;
mod claims;
mod error;
pub(super) mod lock;
mod wal_writes;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::{Connection, ConnectionError, ConnectionResult, SqliteConnection};
use diesel_async::pooled_connection::deadpool::Pool;
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
};
use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
use diesel_async::{AsyncConnection, SimpleAsyncConnection};
use diesel_migrations::{EmbeddedMigrations, embed_migrations};

use super::reads::{Reader, Row};
use super::statement::{Dialect, Statement};
use super::tables::messages::MessageRow;
use super::{BlockingCommit, Claim, SqliteSynchronous, StoreError, WriteOp};
use crate::domain::TenantId;
use claims::ClaimIndex;
use error::store_error;
use lock::SqliteLock;
use writer::CENSUS_TASK;
pub use writer::SqliteWriter;

const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");

/// Per-connection settings (see the module documentation for why), with `synchronous`
/// as configured. The busy timeout comes first: switching the journal mode takes a lock,
/// and without the timeout in force a connection that meets another one (a restart racing
/// the old process's last checkpoint) fails at once with "database is locked".
fn pragmas(synchronous: SqliteSynchronous) -> String {
    format!(
        "PRAGMA busy_timeout=5000; PRAGMA journal_mode=WAL; PRAGMA foreign_keys=ON; \
         PRAGMA synchronous={};",
        synchronous.as_str()
    )
}

/// Turns off SQLite's memory statistics for the process, once, before its first
/// connection: with them on (the library's default), every allocation and free of every
/// connection takes one global mutex to count bytes, which the writer and the readers
/// then contend on. Nothing here reads the statistics (`sqlite3_memory_used`, a soft
/// heap limit). Called when the library is already initialized (a connection was opened
/// first), SQLite refuses the change and the statistics stay on: logged, harmless.
pub(super) fn tune_library() {
    static TUNED: std::sync::Once = std::sync::Once::new();
    TUNED.call_once(|| {
        // SAFETY: `sqlite3_config` takes SQLITE_CONFIG_MEMSTATUS with one int argument;
        // the Once keeps this from racing another call of it, and SQLite itself refuses
        // (SQLITE_MISUSE) a configuration after its initialization.
        let rc = unsafe {
            libsqlite3_sys::sqlite3_config(
                libsqlite3_sys::SQLITE_CONFIG_MEMSTATUS,
                0 as std::ffi::c_int,
            )
        };
        if rc != libsqlite3_sys::SQLITE_OK {
            tracing::debug!(
                rc,
                "SQLite's memory statistics stay on (the library was initialized already)"
            );
        }
    });
}

pub(super) type SqliteConn = SyncConnectionWrapper<SqliteConnection, ReadRuntime>;

/// A checked-out read connection.
type ReadObject = diesel_async::pooled_connection::deadpool::Object<SqliteConn>;

thread_local! {
    /// Set while [`SqliteStore::point_read`] polls its read: the pool's connections then
    /// run their statements on this thread.
    static READ_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Where the read pool's connections run their statements: on tokio's blocking pool
/// (diesel-async's way: no arbiter thread waits on the disk), or, inside
/// [`SqliteStore::point_read`], on the calling thread — a reload of a thread or a task is
/// a few key lookups in the page cache, cheaper than the two hand-offs to the pool and
/// back (measured in `benches/results/HISTORY.md`, "SQLite claims as a log").
pub(super) struct ReadRuntime(tokio::runtime::Handle);

impl diesel_async::sync_connection_wrapper::SpawnBlocking for ReadRuntime {
    fn spawn_blocking<'a, R>(
        &mut self,
        task: impl FnOnce() -> R + Send + 'static,
    ) -> futures_util::future::BoxFuture<
        'a,
        Result<R, Box<dyn std::error::Error + Send + Sync + 'static>>,
    >
    where
        R: Send + 'static,
    {
        if READ_HERE.get() {
            return Box::pin(std::future::ready(Ok(task())));
        }
        let running = self.0.spawn_blocking(task);
        Box::pin(async move {
            running
                .await
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
        })
    }

    fn get_runtime() -> Self {
        Self(tokio::runtime::Handle::current())
    }
}

/// A future polled with [`READ_HERE`] set (boxed: pinned without `unsafe`).
struct ReadHere<F>(std::pin::Pin<Box<F>>);

impl<F: std::future::Future> std::future::Future for ReadHere<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let before = READ_HERE.replace(true);
        let poll = self.0.as_mut().poll(cx);
        READ_HERE.set(before);
        poll
    }
}

/// [`Store`](super::Store) on an SQLite file, which it keeps to this process: its writer
/// holds the file's lock ([`SqliteLock`]) from opening until the store and the
/// persistence thread have both let it go, and another process cannot open it meanwhile.
pub struct SqliteStore {
    /// Reads.
    pool: Pool<SqliteConn>,
    /// Commits.
    writer: Arc<SqliteWriter>,
    /// Point reads on the calling thread.
    inline: InlineReader,
    /// The idempotency claims' index entries not written yet (shared with the writer).
    claims: Arc<ClaimIndex>,
    acquire_timeout: Duration,
}

impl SqliteStore {
    /// A file of this process's always answers.
    fn silence_of(&self) -> Option<&Arc<super::Silence>> {
        None
    }

    /// A connection of the pool for a read. Reads share one pool: its connections run
    /// their statements on tokio's blocking pool (or in place, see `ReadRuntime`), not on
    /// the thread that opened them.
    async fn conn(&self) -> Result<ReadObject, StoreError> {
        super::queries::checkout(&self.pool, self.acquire_timeout, "sqlite").await
    }

    /// One process delivers every owed row.
    fn outbox_share(&self) -> super::tables::push_outbox::OutboxShare<'static> {
        super::tables::push_outbox::OutboxShare::All
    }

    /// A point read takes a connection of the pool like any other read.
    async fn point_conn(&self) -> Result<ReadObject, StoreError> {
        self.conn().await
    }

    /// The connection a health check's ping reads on.
    async fn probe_conn(&self) -> Result<ReadObject, StoreError> {
        self.conn().await
    }
}

impl SqliteStore {
    /// A store over a pool of at most `cfg.pool_size` read connections to the file at
    /// `path`, which [`migrate`] has created, and one write connection (opened now).
    pub fn new(path: &Path, cfg: &super::StoreConfig) -> Result<Self, StoreError> {
        let writer = SqliteWriter::open(path, cfg)?;
        Ok(Self {
            pool: pool(path, cfg.pool_size, "sqlite pool", cfg.sqlite_synchronous)?,
            claims: writer.claims.clone(),
            writer: Arc::new(writer),
            inline: InlineReader::new(path),
            acquire_timeout: cfg.acquire_timeout(),
        })
    }

    /// Commits from async code: one hop to the blocking pool for the whole batch. (The
    /// persistence layer calls [`SqliteWriter`] from its own thread instead.)
    async fn commit_ops<'a>(
        &self,
        ops: impl Iterator<Item = &'a WriteOp> + Send,
    ) -> Result<(), StoreError> {
        let writer = self.writer.clone();
        let ops: Vec<WriteOp> = ops.cloned().collect();
        tokio::task::spawn_blocking(move || writer.commit_blocking(&[&ops]))
            .await
            .map_err(|e| StoreError::Unavailable(format!("the sqlite commit task failed: {e}")))?
    }

    /// The writer, for the persistence layer's commit thread.
    fn blocking_writer(&self) -> Option<Arc<dyn BlockingCommit>> {
        Some(self.writer.clone())
    }

    /// A read as it is: a local database has no network to be cut off by.
    fn bounded<F: std::future::Future>(&self, read: F) -> F {
        read
    }

    /// A point read (a thread's reload, a task), run on the calling thread.
    fn point_read<F: std::future::Future>(
        &self,
        read: F,
    ) -> impl std::future::Future<Output = F::Output> {
        ReadHere(Box::pin(read))
    }

    /// A read's outcome as it is: SQLite has no connection to lose (a busy database is
    /// already `Unavailable`, see `StoreError::from`).
    async fn settle<T>(
        &self,
        _conn: &mut ReadObject,
        result: Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        result
    }

    /// The census from the counts the store keeps (`census_counts`, kept by the writer in
    /// the transactions that change the rows: `CensusDelta`), on a connection of its own in the blocking
    /// pool. Counting the rows instead read every task — one read transaction of
    /// seconds on a store of millions, and a reader on old pages keeps the WAL from
    /// starting over, so the WAL grew by every commit meanwhile (gigabytes at ten thousand
    /// sends a second) and stayed that large on disk.
    async fn count_census(
        &self,
        now: crate::domain::Timestamp,
    ) -> Result<super::Census, StoreError> {
        let path = self.inline.path.clone();
        tokio::task::spawn_blocking(move || census_counted(&path, now))
            .await
            .map_err(|e| StoreError::Unavailable(format!("the sqlite census task failed: {e}")))?
    }

    /// Nothing: SQLite plans from no statistics of the tables' sizes (none are
    /// gathered), the same whatever their size.
    async fn analyze_grown_tables(&self) -> Result<Vec<&'static str>, StoreError> {
        Ok(Vec::new())
    }

    fn inline_claim(
        &self,
        tenant: &TenantId,
        key: &str,
    ) -> Option<Result<Option<Claim>, StoreError>> {
        Some(self.claim_here(tenant, key))
    }

    /// The claim of `key`, read on the calling thread, with its reply.
    pub(super) fn claim_here(
        &self,
        tenant: &TenantId,
        key: &str,
    ) -> Result<Option<Claim>, StoreError> {
        let read = self.inline.with(|conn| {
            let Some(claim) = self.claims.read(conn, tenant.as_str(), key)? else {
                return Ok(None);
            };
            let reply = match claim.reply_seq {
                Some(seq) => message_here(conn, tenant.as_str(), &claim.context_id, seq)?,
                None => None,
            };
            Ok(Some((claim, reply)))
        })?;
        let Some((claim, reply)) = read else {
            return Ok(None);
        };
        let reply = match (claim.reply_seq, reply) {
            (Some(seq), None) => {
                return Err(StoreError::Corrupt(format!(
                    "claim {key:?} names message {seq}, which its thread lacks"
                )));
            }
            (_, reply) => reply.map(|m| m.to_message(None)).transpose()?,
        };
        let mut claim = claim.into_claim()?;
        if reply.is_some() {
            claim.reply = reply;
        }
        Ok(Some(claim))
    }
}

/// Message `seq` of a thread, read on `conn`.
fn message_here(
    conn: &rusqlite::Connection,
    tenant: &str,
    thread: &str,
    seq: i64,
) -> rusqlite::Result<Option<MessageRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT tenant_id, thread_id, seq, message_id, task_id, role, author, content, parts, \
         tool_calls, metadata, created_at, extensions, reference_task_ids FROM messages \
         WHERE tenant_id = ?1 AND thread_id = ?2 AND seq = ?3",
    )?;
    let mut rows = stmt.query(rusqlite::params![tenant, thread, seq])?;
    let Some(row) = rows.next()? else {
        return Ok(None);
    };
    Ok(Some(MessageRow {
        tenant_id: row.get(0)?,
        thread_id: row.get(1)?,
        seq: row.get(2)?,
        message_id: row.get(3)?,
        task_id: row.get(4)?,
        role: row.get(5)?,
        author: row.get(6)?,
        content: row.get(7)?,
        parts: row.get(8)?,
        tool_calls: row.get(9)?,
        metadata: row.get(10)?,
        created_at: row.get(11)?,
        extensions: row.get(12)?,
        reference_task_ids: row.get(13)?,
    }))
}

/// Point reads on the thread that asks: one read-only connection per thread and store,
/// opened on first use and closed with the thread. In WAL mode a reader never waits for
/// the writer, and a lookup in the page cache costs microseconds — less than handing the
/// call to the blocking pool and back.
/// The census of the store at `path` (see `count_census`): the counts the writer keeps in
/// `census_counts`, less the threads still marked active whose expiry is behind
/// `now` (a range of `threads_by_expiry`: those the janitor has not expired yet).
fn census_counted(path: &Path, now: crate::domain::Timestamp) -> Result<super::Census, StoreError> {
    let conn = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(store_error)?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(store_error)?;
    let active = super::ThreadStatus::Active.as_str();
    let mut counts = conn
        .prepare("SELECT what, name, n FROM census_counts WHERE n > 0 ORDER BY what, name")
        .map_err(store_error)?;
    let mut census = super::Census::default();
    let mut active_threads = 0i64;
    let rows = counts
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, i64>(2)?,
            ))
        })
        .map_err(store_error)?;
    for row in rows {
        match row.map_err(store_error)? {
            (what, state, n) if what == CENSUS_TASK => census
                .tasks_by_state
                .push((state, u64::try_from(n).unwrap_or(0))),
            (_, status, n) if status == active => active_threads = n,
            _ => {}
        }
    }
    let overdue: i64 = conn
        .query_row(
            "SELECT count(*) FROM threads WHERE status = ?1 AND expires_at <= ?2",
            rusqlite::params![active, now.millis()],
            |row| row.get(0),
        )
        .map_err(store_error)?;
    census.active_threads = u64::try_from(active_threads - overdue).unwrap_or(0);
    Ok(census)
}

struct InlineReader {
    /// Tells this store's connections from other stores' on the same thread.
    id: u64,
    path: PathBuf,
}

thread_local! {
    static INLINE: std::cell::RefCell<std::collections::HashMap<u64, rusqlite::Connection>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

impl InlineReader {
    fn new(path: &Path) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Self {
            id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            path: path.to_path_buf(),
        }
    }

    fn with<T>(
        &self,
        read: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        INLINE.with(|cell| {
            let mut conns = cell.borrow_mut();
            let conn = match conns.entry(self.id) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(slot) => {
                    let conn = rusqlite::Connection::open_with_flags(
                        &self.path,
                        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                            | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
                    )
                    .map_err(store_error)?;
                    conn.busy_timeout(Duration::from_secs(5))
                        .map_err(store_error)?;
                    slot.insert(conn)
                }
            };
            read(conn).map_err(store_error)
        })
    }
}

/// A pool of at most `size` connections to the SQLite file at `path`, each set up with
/// [`pragmas`]. Every pool on the file is built here, so they all agree on the settings.
pub(super) fn pool(
    path: &Path,
    size: usize,
    label: &str,
    synchronous: SqliteSynchronous,
) -> Result<Pool<SqliteConn>, StoreError> {
    let mut config = ManagerConfig::<SqliteConn>::default();
    config.recycling_method = RecyclingMethod::Fast;
    config.custom_setup =
        Box::new(move |url| Box::pin(establish(url.to_owned(), pragmas(synchronous))));
    let manager =
        AsyncDieselConnectionManager::<SqliteConn>::new_with_config(path_str(path)?, config);
    Pool::builder(manager)
        .max_size(size.max(1))
        .build()
        .map_err(|e| StoreError::Config(format!("{label}: {e}")))
}

/// The reads of `reads.rs` run on the synchronous connection inside, in one hop to it
/// for the statements run together (in place, within a point read: `ReadRuntime`), where
/// diesel decodes rows where they lie — the async wrapper would copy every value out
/// first.
impl Reader for SqliteConn {
    const DIALECT: Dialect = Dialect::Sqlite;

    async fn rows<R: Row>(&mut self, st: Statement) -> Result<Vec<R>, StoreError> {
        use diesel::RunQueryDsl;
        Ok(self.spawn_blocking(move |c| st.load(c)).await?)
    }

    async fn two<A: Row, B: Row>(
        &mut self,
        a: Statement,
        b: Statement,
    ) -> Result<(Vec<A>, Vec<B>), StoreError> {
        use diesel::RunQueryDsl;
        Ok(self
            .spawn_blocking(move |c| Ok((a.load(c)?, b.load(c)?)))
            .await?)
    }

    async fn three<A: Row, B: Row, C: Row>(
        &mut self,
        a: Statement,
        b: Statement,
        c: Statement,
    ) -> Result<(Vec<A>, Vec<B>, Vec<C>), StoreError> {
        use diesel::RunQueryDsl;
        Ok(self
            .spawn_blocking(move |conn| Ok((a.load(conn)?, b.load(conn)?, c.load(conn)?)))
            .await?)
    }
}

/// A checked-out read connection as the reads take it.
macro_rules! lend {
    ($conn:ident) => {
        &mut *$conn
    };
}

super::queries::store_impl!(SqliteStore, "sqlite", lend);

async fn establish(path: String, pragmas: String) -> ConnectionResult<SqliteConn> {
    let mut conn = SqliteConn::establish(&path).await?;
    conn.batch_execute(&pragmas)
        .await
        .map_err(ConnectionError::CouldntSetupConfiguration)?;
    Ok(conn)
}

/// diesel takes the file name as a string.
fn path_str(path: &Path) -> Result<&str, StoreError> {
    path.to_str().ok_or_else(|| {
        StoreError::Config(format!("the SQLite path {} is not UTF-8", path.display()))
    })
}

/// Tests: reverts the newest migration of the file at `path` (its `down.sql`), then runs
/// `sql` on it.
#[cfg(test)]
pub(super) fn revert_through_then(
    path: &Path,
    version: &str,
    sql: &str,
) -> Result<Vec<String>, StoreError> {
    let mut conn = SqliteConnection::establish(path_str(path)?)
        .map_err(|e| StoreError::Unavailable(format!("sqlite {}: {e}", path.display())))?;
    // A store just dropped may still be closing its connections.
    conn.batch_execute("PRAGMA busy_timeout = 10000")?;
    let reverted = super::revert_through(&mut conn, || MIGRATIONS, version)?;
    conn.batch_execute(sql)?;
    Ok(reverted)
}

/// Creates the file (and its directory) if needed and applies pending migrations, under
/// this process's lock on the file: a file another process serves is not migrated under
/// it ([`StoreError::InUse`]).
pub(super) fn migrate(path: &Path) -> Result<Vec<String>, StoreError> {
    migrate_holding(path).map(|(applied, _lock)| applied)
}

/// [`migrate`], returning this process's hold on the file with what was applied: a
/// caller that opens the store next keeps the lock held in between. (Released and taken
/// again, the lock could still be held for a moment by a child process this one is
/// starting — a forked child keeps a copy of every descriptor until it executes — and
/// this very process would be refused.)
pub(super) fn migrate_holding(path: &Path) -> Result<(Vec<String>, SqliteLock), StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::Unavailable(format!("cannot create {}: {e}", dir.display()))
        })?;
    }
    let lock = SqliteLock::acquire(path)?;
    let mut conn = SqliteConnection::establish(path_str(path)?)
        .map_err(|e| StoreError::Unavailable(format!("sqlite {}: {e}", path.display())))?;
    // The busy timeout matters here too: another process may be writing the file.
    conn.batch_execute(&pragmas(SqliteSynchronous::default()))?;
    let applied = super::run_migrations(&mut conn, MIGRATIONS)?;
    Ok((applied, lock))
}

#[cfg(test)]
mod tests {
    use diesel_async::sync_connection_wrapper::SpawnBlocking;

    use super::{ReadHere, ReadRuntime, SqliteSynchronous, SqliteWriter, migrate};

    /// The read pool's statements run on tokio's blocking pool, but inside a point read on
    /// the calling thread — and only there.
    #[tokio::test]
    async fn point_reads_run_on_the_calling_thread_and_other_reads_on_the_blocking_pool() {
        let here = std::thread::current().id();
        let mut runtime = ReadRuntime::get_runtime();
        let mut ran_on = || runtime.spawn_blocking(|| std::thread::current().id());
        assert_ne!(ran_on().await.unwrap(), here);
        let inline = ReadHere(Box::pin(async { ran_on().await.unwrap() })).await;
        assert_eq!(inline, here);
        assert_ne!(
            ran_on().await.unwrap(),
            here,
            "the flag is reset after the poll"
        );
    }

    /// The writer opens its WAL through the VFS that writes a commit's frames at once
    /// where every commit ends with a sync (FULL), and as SQLite does otherwise.
    #[test]
    fn the_writer_holds_its_wal_frames_until_the_sync_with_full_only() {
        use super::wal_writes::counts;
        for (synchronous, one_write, held) in [
            (SqliteSynchronous::Full, true, true),
            (SqliteSynchronous::Full, false, false),
            (SqliteSynchronous::Normal, true, false),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("agent-a2a.db");
            migrate(&path).unwrap();
            let cfg = crate::store::StoreConfig {
                sqlite_synchronous: synchronous,
                sqlite_wal_one_write: one_write,
                ..crate::store::testing::test_config(None, dir.path().to_path_buf())
            };
            let writer = SqliteWriter::open(&path, &cfg).unwrap();
            let conn = writer.conn.lock().unwrap();
            assert_eq!(counts(&conn).is_some(), held, "{synchronous:?} {one_write}");
        }
    }
}
