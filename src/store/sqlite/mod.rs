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

mod claims;
mod error;
pub(super) mod lock;
mod wal_writes;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
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

use super::rows::{MessageRow, TaskRow, ThreadRow};
use super::writes::{CHUNK, PushRow, Rows, sqlite as sql};
use super::{BlockingCommit, Claim, SqliteSynchronous, StoreError, WriteOp};
use crate::domain::TenantId;
use claims::{ClaimIndex, Staged};
use error::store_error;
use lock::SqliteLock;

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
    fn outbox_share(&self) -> super::reads::OutboxShare<'static> {
        super::reads::OutboxShare::All
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

/// The one write connection to the SQLite file (rusqlite, over the same libsqlite3 as
/// diesel), with its prepared statements cached.
pub struct SqliteWriter {
    conn: Mutex<rusqlite::Connection>,
    /// The idempotency claims' index entries not written yet.
    claims: Arc<ClaimIndex>,
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
    pub(super) fn open(path: &Path, cfg: &super::StoreConfig) -> Result<Self, StoreError> {
        let synchronous = cfg.sqlite_synchronous;
        let lock = SqliteLock::acquire(path)?;
        let unavailable = |e: &dyn std::fmt::Display| {
            StoreError::Unavailable(format!("sqlite {}: {e}", path.display()))
        };
        // Frames held until the sync only where every commit ends with one.
        let conn = if cfg.sqlite_wal_one_write && synchronous == SqliteSynchronous::Full {
            wal_writes::register().map_err(|rc| {
                unavailable(&format!("registering the WAL writes' VFS: code {rc}"))
            })?;
            rusqlite::Connection::open_with_flags_and_vfs(
                path,
                rusqlite::OpenFlags::default(),
                wal_writes::NAME,
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
    pub(super) fn checkpoints(&self) -> &Checkpoints {
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

thread_local! {
    /// The WAL's size in pages after the last commit on this thread (from the writer's
    /// WAL hook, which SQLite calls on the committing thread).
    static WAL_PAGES: std::cell::Cell<i32> = const { std::cell::Cell::new(0) };
}

/// The writer's WAL hook: notes the WAL's size for [`Checkpointer::after_commit`].
fn note_wal_pages(_: &rusqlite::hooks::Wal, pages: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_PAGES.set(pages);
    Ok(())
}

/// Checkpoints the WAL on a thread and connection of its own, so that the writer never
/// stops for one: SQLite's own checkpoint runs inside the commit that grew the WAL past
/// its threshold — copying up to a thousand pages and syncing the database file — and
/// every request of that group commit waited for it (measured: ~9 ms per checkpoint,
/// every few hundred sends). The writer wakes the thread each time the WAL has grown by
/// `store.sqlite_checkpoint_pages`; the thread runs a PASSIVE checkpoint (it never waits
/// for the writer or the readers): it copies the pages and syncs the database file.
/// A checkpoint beside a writer never catches up with it — the commits made meanwhile
/// are still to copy — and a WAL not copied to its end never starts over, so it would
/// grow without end: after each of the thread's checkpoints the writer's next commit
/// copies that remainder itself (a few pages, one short sync), and the commit after it
/// starts the WAL over. Wake-ups during a checkpoint fold into one.
///
/// A WAL past `store.sqlite_max_wal_pages` — the thread has not caught up, or readers
/// held on to older pages — is checkpointed by the writer itself after its commit, in
/// RESTART mode: it waits for the readers (within the busy timeout) and copies it all,
/// so the next commit starts the WAL over. The writer stops for it; the WAL stays
/// bounded.
struct Checkpointer {
    wake: std::sync::mpsc::SyncSender<()>,
    pages: i32,
    max_pages: i32,
    /// The WAL's size past which the writer checkpoints it: `max_pages`, or, after readers
    /// kept a checkpoint from its end, a threshold later (so that a reader holding on does
    /// not make every commit wait for it).
    bound_at: std::sync::atomic::AtomicI32,
    /// The WAL's size when the thread was last woken (the writer's commits, which call
    /// [`Checkpointer::after_commit`], hold the connection's lock).
    woken_at: std::sync::atomic::AtomicI32,
    /// Set by the thread after a checkpoint: the writer copies the rest.
    caught_up: Arc<std::sync::atomic::AtomicBool>,
    /// Held by whoever of the thread and the writer checkpoints: SQLite refuses a second
    /// checkpoint at once, without the busy handler, so a bound checkpoint tried while
    /// the thread was in one of its passes would fail and the WAL would go past its bound.
    checkpointing: Arc<Mutex<()>>,
    /// For tests, which wait for checkpoints.
    #[cfg(test)]
    done: Arc<Checkpoints>,
}

/// Counts the checkpoints run, for whoever waits for one.
#[derive(Default)]
pub(super) struct Checkpoints {
    count: Mutex<u64>,
    changed: std::sync::Condvar,
}

impl Checkpoints {
    fn ran(&self) {
        *self.count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.changed.notify_all();
    }

    /// Waits up to `timeout` for more than `seen` checkpoints: how many there were.
    #[cfg(test)]
    pub(super) fn wait_past(&self, seen: u64, timeout: Duration) -> u64 {
        let count = self.count.lock().unwrap_or_else(|p| p.into_inner());
        let (count, _) = self
            .changed
            .wait_timeout_while(count, timeout, |n| *n <= seen)
            .unwrap_or_else(|p| p.into_inner());
        *count
    }
}

impl Checkpointer {
    fn start(
        path: &Path,
        synchronous: SqliteSynchronous,
        pages: u32,
        max_pages: u32,
    ) -> Result<Self, StoreError> {
        let conn = rusqlite::Connection::open(path)
            .map_err(|e| StoreError::Unavailable(format!("sqlite {}: {e}", path.display())))?;
        conn.execute_batch(&pragmas(synchronous))
            .map_err(store_error)?;
        let (wake, woken) = std::sync::mpsc::sync_channel(1);
        let done = Arc::new(Checkpoints::default());
        let counted = done.clone();
        let caught_up = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let told = caught_up.clone();
        let checkpointing = Arc::new(Mutex::new(()));
        let held = checkpointing.clone();
        std::thread::Builder::new()
            .name("a2a-checkpoint".into())
            .spawn(move || checkpoint_loop(&conn, &woken, &told, &held, &counted))
            .map_err(|e| StoreError::Unavailable(format!("the sqlite checkpoint thread: {e}")))?;
        Ok(Self {
            wake,
            pages: i32::try_from(pages).unwrap_or(i32::MAX),
            max_pages: i32::try_from(max_pages).unwrap_or(i32::MAX),
            bound_at: std::sync::atomic::AtomicI32::new(
                i32::try_from(max_pages).unwrap_or(i32::MAX),
            ),
            woken_at: std::sync::atomic::AtomicI32::new(0),
            caught_up,
            checkpointing,
            #[cfg(test)]
            done,
        })
    }

    /// After a commit on this thread: wakes the checkpoint thread once the WAL has grown
    /// by the threshold since it was last woken. (Not merely when the WAL is that large:
    /// a WAL that cannot start over — a reader still on its older pages — would wake it
    /// at every commit, each wake-up a checkpoint with little to copy and two syncs.)
    ///
    /// After a checkpoint of the thread's, copies what it left (see [`Checkpointer`]) on
    /// the writer's `conn`, between two transactions.
    fn after_commit(&self, conn: &rusqlite::Connection) {
        use std::sync::atomic::Ordering::{AcqRel, Relaxed};
        let pages = WAL_PAGES.replace(0);
        crate::telemetry::gauge(crate::telemetry::SQLITE_WAL_PAGES).set(f64::from(pages));
        if pages < self.max_pages {
            self.bound_at.store(self.max_pages, Relaxed);
        } else if pages >= self.bound_at.load(Relaxed) {
            let started = std::time::Instant::now();
            // Waits for a pass of the thread's to end.
            let held = self.checkpointing.lock().unwrap_or_else(|p| p.into_inner());
            let done = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| r.get::<_, i64>(0));
            drop(held);
            metrics::counter!(crate::telemetry::SQLITE_WAL_BOUND_CHECKPOINTS).increment(1);
            metrics::histogram!(crate::telemetry::SQLITE_CHECKPOINT_MS, "by" => "bound")
                .record(started.elapsed().as_secs_f64() * 1000.0);
            if !matches!(done, Ok(0)) {
                tracing::warn!(wal_pages = pages, outcome = ?done, "sqlite WAL past store.sqlite_max_wal_pages could not be checkpointed to its end (readers held on to it); tried again once it grows by sqlite_checkpoint_pages");
                self.bound_at
                    .store(pages.saturating_add(self.pages), Relaxed);
            }
            self.woken_at.store(0, Relaxed);
            return;
        }
        if self.caught_up.load(Relaxed)
            // The thread in another pass: the rest is copied after a later commit.
            && let Ok(_held) = self.checkpointing.try_lock()
            && self.caught_up.swap(false, AcqRel)
        {
            let started = std::time::Instant::now();
            match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                Ok(()) => {
                    metrics::histogram!(crate::telemetry::SQLITE_CHECKPOINT_MS, "by" => "writer")
                        .record(started.elapsed().as_secs_f64() * 1000.0)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "sqlite checkpoint failed (tried again after the next one)")
                }
            }
        }
        let mut woken_at = self.woken_at.load(Relaxed);
        if pages < woken_at {
            // The WAL started over.
            woken_at = 0;
            self.woken_at.store(0, Relaxed);
        }
        if pages - woken_at >= self.pages {
            self.woken_at.store(pages, Relaxed);
            // Full: a checkpoint is already asked for.
            let _ = self.wake.try_send(());
        }
    }
}

/// Passes of the checkpoint thread per wake-up at most: each copies what the writer
/// committed during the one before, so the remainder left to the writer shrinks.
const CHECKPOINT_PASSES: usize = 4;

/// A pass that copied fewer pages than this leaves the rest to the writer.
const CHECKPOINT_TAIL_PAGES: i64 = 64;

/// The checkpoint thread: PASSIVE checkpoints per wake-up, until the writer is gone.
fn checkpoint_loop(
    conn: &rusqlite::Connection,
    woken: &std::sync::mpsc::Receiver<()>,
    caught_up: &std::sync::atomic::AtomicBool,
    checkpointing: &Mutex<()>,
    done: &Checkpoints,
) {
    while woken.recv().is_ok() {
        let mut copied_before = 0;
        for _ in 0..CHECKPOINT_PASSES {
            let started = std::time::Instant::now();
            let held = checkpointing.lock().unwrap_or_else(|p| p.into_inner());
            let result = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
            });
            drop(held);
            match result {
                Ok((wal, copied)) => {
                    metrics::histogram!(crate::telemetry::SQLITE_CHECKPOINT_MS, "by" => "thread")
                        .record(started.elapsed().as_secs_f64() * 1000.0);
                    caught_up.store(true, std::sync::atomic::Ordering::Release);
                    if copied < wal {
                        tracing::debug!(wal, copied, "sqlite checkpoint: part of the WAL is left");
                    }
                    let progress = copied - copied_before;
                    copied_before = copied;
                    if progress < CHECKPOINT_TAIL_PAGES {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "sqlite checkpoint failed (tried again after the next commit)");
                    break;
                }
            }
        }
        done.ran();
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
const CENSUS_TASK: &str = "task";
/// `census_counts.what` of the threads' counts by status.
const CENSUS_THREAD: &str = "thread";

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
                super::ThreadStatus::Active.as_str(),
                -expired,
            );
            census.add(
                CENSUS_THREAD,
                super::ThreadStatus::Expired.as_str(),
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
                census.add(CENSUS_THREAD, super::ThreadStatus::Expired.as_str(), -1);
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

/// The rows a thread's reload starts from (`reads.rs`), run on the synchronous connection
/// inside (in place, within a point read): diesel keeps these statements prepared by
/// their type and decodes rows where they lie, where the async wrapper writes each
/// query's SQL again and copies every value out first.
async fn thread_rows(
    conn: &mut SqliteConn,
    tenant: &TenantId,
    thread_id: &crate::domain::ContextId,
    window: usize,
) -> Result<super::reads::ThreadRows, StoreError> {
    let (tenant, thread_id) = (tenant.as_str().to_owned(), thread_id.as_str().to_owned());
    Ok(conn
        .spawn_blocking(move |c| {
            use diesel::RunQueryDsl;
            let (thread, messages, open) =
                super::reads::thread_queries!(&tenant, &thread_id, window);
            Ok(super::reads::ThreadRows {
                thread: thread.load::<ThreadRow>(c)?,
                newest_first: messages.load::<MessageRow>(c)?,
                open: open.load::<TaskRow>(c)?,
            })
        })
        .await?)
}

/// How the outbox's poll joins the deliveries it chose with their configs (`reads.rs`).
const CONFIGS_OF_DUE: super::reads::ConfigsOfDue = super::reads::ConfigsOfDue::Joined;

/// What the reads of `reads.rs` run on: the pool's connection itself.
type StoreConn<'c> = SqliteConn;

/// A checked-out read connection as the reads take it.
macro_rules! lend {
    ($conn:ident) => {
        &mut *$conn
    };
}

super::queries::store_impl!(
    SqliteStore,
    diesel::sqlite::Sqlite,
    "sqlite",
    sequential,
    lend
);

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
