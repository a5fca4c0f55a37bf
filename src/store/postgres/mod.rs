//! The Postgres store: diesel-async's `AsyncPgConnection` (tokio-postgres, so no libpq)
//! behind a deadpool pool, and the embedded `migrations/postgres`.
//!
//! Connections are made lazily by the pool, so building the store never touches the
//! network; a database that is down surfaces on the first query as
//! [`StoreError::Unavailable`] within the acquire timeout. Connections are recycled
//! without a test query (closed ones are dropped by the pool's `is_closed` check) so
//! that a commit costs exactly its own statements.

pub(super) mod readers;
pub(super) mod statements;
mod upkeep;
pub(super) mod writer;

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel_async::AsyncPgConnection;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_async::pooled_connection::deadpool::Pool;
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
};
use diesel_migrations::{EmbeddedMigrations, embed_migrations};

use std::sync::Arc;

use super::Within;
use super::fence::Fence;
use super::reads::{Reader, Row};
use super::statement::{Dialect, Statement};
use super::writes::Rows;
use super::{StoreError, WriteOp};
use readers::{PgRead, Readers};
#[cfg(test)]
pub(super) use upkeep::vacuum_gaps;
use upkeep::{analyze_grown, census, warn_if_not_vacuumed};
use writer::{self as pg_writer, WriterManager, WriterPool};

const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");

/// Key of the advisory lock held while migrating (the bytes of "a2a_migr").
const MIGRATION_LOCK: i64 = 0x6132_615f_6d69_6772;

/// `store.answer_timeout_ms`'s default, for stores made without settings.
const DEFAULT_ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// [`Store`](super::Store) on Postgres.
pub struct PgStore {
    /// Reads, on connections of the calling thread's own (`postgres/readers.rs`).
    readers: Arc<Readers>,
    /// Commits only. A pooled connection's I/O task runs on the runtime that opened it,
    /// and commits are made on the persistence actor's arbiter, so these connections live
    /// there: stopping the HTTP workers or the actor arbiters (a graceful shutdown) cannot
    /// cut a commit, and the persistence queue can still be flushed after them.
    writer: WriterPool,
    acquire_timeout: Duration,
    /// How long a commit or a read may go unanswered (`store.answer_timeout_ms`).
    answer_timeout: Duration,
    /// Whether the database answers (`silence.rs`): a call unanswered past
    /// `answer_timeout` makes it silent, and every call waiting then gives up.
    silence: Arc<super::Silence>,
    /// Cluster mode: every commit first checks this node's lease (its fencing token) and
    /// notifies the other nodes of the task events it logged.
    fence: Option<Arc<Fence>>,
    /// The server's hold on the database (`node_lock.rs`), released with the store.
    _lock: Option<super::node_lock::DatabaseLock>,
}

impl PgStore {
    /// A store over at most `pool_size` connections to `url` for reads (a pool per
    /// reading thread, `postgres/readers.rs`) and `writers` for commits (one per group commit
    /// in flight). Connects nothing yet; migrations are applied separately ([`migrate`]).
    ///
    /// With a `fence` (cluster mode) the writer connections end a transaction left idle
    /// for a lease's time (`idle_in_transaction_session_timeout`): a node frozen in the
    /// middle of a commit must not keep the lock that makes a takeover wait.
    pub fn new(
        url: &str,
        pool_size: usize,
        writers: usize,
        acquire_timeout: Duration,
        fence: Option<(Arc<Fence>, Duration)>,
        lock: Option<super::node_lock::DatabaseLock>,
    ) -> Result<Self, StoreError> {
        let writer_url = match &fence {
            Some((_, lease)) => with_idle_transaction_timeout(url, *lease),
            None => url.to_owned(),
        };
        Ok(Self {
            readers: Readers::new(url, pool_size),
            writer: WriterPool::builder(WriterManager::new(writer_url))
                .max_size(writers.max(1))
                .build()
                .map_err(|e| StoreError::Config(format!("postgres writer pool: {e}")))?,
            acquire_timeout,
            answer_timeout: DEFAULT_ANSWER_TIMEOUT,
            silence: Arc::default(),
            fence: fence.map(|(fence, _)| fence),
            _lock: lock,
        })
    }

    /// A read connection of the calling thread's own (`postgres/readers.rs`).
    async fn conn(&self) -> Result<PgRead, StoreError> {
        self.answering()?;
        self.readers.thread()?.own(self.acquire_timeout).await
    }

    /// The read connection the calling thread's point reads share (`postgres/readers.rs`).
    async fn point_conn(&self) -> Result<PgRead, StoreError> {
        self.answering()?;
        self.readers.thread()?.shared(self.acquire_timeout).await
    }

    /// The connection a health check's ping reads on: tried while the database is
    /// silent, its answer ends the silence.
    async fn probe_conn(&self) -> Result<PgRead, StoreError> {
        self.readers.thread()?.shared(self.acquire_timeout).await
    }

    /// A call while the database is silent fails at once instead of waiting for its
    /// connection and its bound: only the probes ([`Self::probe_conn`]) and the cluster
    /// lease's renewals go to the database until one is answered.
    fn answering(&self) -> Result<(), StoreError> {
        if self.silence.is_silent() {
            return Err(StoreError::Unavailable(
                "postgres does not answer (a call to it went unanswered past \
                 store.answer_timeout_ms, and none has been answered since)"
                    .into(),
            ));
        }
        Ok(())
    }

    #[cfg(test)]
    pub(super) fn readers(&self) -> &Arc<Readers> {
        &self.readers
    }
}

/// A pool of at most `size` connections to `url` (connects nothing yet).
pub(super) fn pool(
    url: &str,
    size: usize,
    label: &str,
) -> Result<Pool<AsyncPgConnection>, StoreError> {
    let mut config = ManagerConfig::default();
    config.recycling_method = RecyclingMethod::Fast;
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config(url, config);
    Pool::builder(manager)
        .max_size(size.max(1))
        .build()
        .map_err(|e| StoreError::Config(format!("{label}: {e}")))
}

/// The reads of `reads.rs` run on a shared reference to the connection, on which
/// diesel-async lets statements overlap: those run together leave in one write and come
/// back in one round trip (tokio-postgres pipelines them).
impl Reader for &AsyncPgConnection {
    const DIALECT: Dialect = Dialect::Postgres;

    async fn rows<R: Row>(&mut self, st: Statement) -> Result<Vec<R>, StoreError> {
        Ok(diesel_async::RunQueryDsl::load(st, self).await?)
    }

    async fn two<A: Row, B: Row>(
        &mut self,
        a: Statement,
        b: Statement,
    ) -> Result<(Vec<A>, Vec<B>), StoreError> {
        use diesel_async::RunQueryDsl;
        let (mut c1, mut c2) = (*self, *self);
        Ok(futures_util::future::try_join(a.load(&mut c1), b.load(&mut c2)).await?)
    }

    async fn three<A: Row, B: Row, C: Row>(
        &mut self,
        a: Statement,
        b: Statement,
        c: Statement,
    ) -> Result<(Vec<A>, Vec<B>, Vec<C>), StoreError> {
        use diesel_async::RunQueryDsl;
        let (mut c1, mut c2, mut c3) = (*self, *self, *self);
        Ok(
            futures_util::future::try_join3(a.load(&mut c1), b.load(&mut c2), c.load(&mut c3))
                .await?,
        )
    }
}

/// A read's connection ([`PgRead`]) as the reads take it.
macro_rules! lend {
    ($conn:ident) => {
        &mut &*$conn
    };
}

super::queries::store_impl!(PgStore, "postgres", lend);

impl PgStore {
    /// Applies a batch in one transaction, in one round trip of prepared statements
    /// (`postgres/writer.rs`), nothing read back.
    async fn commit_ops<'a>(
        &self,
        ops: impl Iterator<Item = &'a WriteOp> + Send,
    ) -> Result<(), StoreError> {
        let mut rows = Rows::collect(ops)?;
        // Cluster mode: every thread this node writes names it as the thread's owner, and
        // a thread another node owns is not written (the commit fails, see `postgres::writer`).
        if let Some(fence) = &self.fence {
            for thread in &mut rows.threads {
                thread.owner_node = Some(fence.node_id());
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        self.answering()?;
        let writer = match tokio::time::timeout(self.acquire_timeout, self.writer.get()).await {
            Ok(Ok(writer)) => writer,
            Ok(Err(deadpool::managed::PoolError::Backend(e))) => {
                return Err(pg_writer::classify(&e));
            }
            Ok(Err(e)) => {
                return Err(StoreError::Unavailable(format!(
                    "postgres writer pool: {e}"
                )));
            }
            Err(_) => {
                return Err(StoreError::Unavailable(format!(
                    "postgres writer pool: no connection within {:?}",
                    self.acquire_timeout
                )));
            }
        };
        let commit = pg_writer::commit(&writer, &rows, self.fence.as_deref());
        let detail = match self
            .silence
            .within("a commit", self.answer_timeout, commit)
            .await
        {
            Within::Answered(committed) => return committed,
            Within::Unanswered => {
                metrics::counter!(crate::telemetry::STORE_ANSWER_TIMEOUTS).increment(1);
                format!(
                    "postgres: the commit was not answered within {} ms \
                     (store.answer_timeout_ms); whether it took effect is not known",
                    self.answer_timeout.as_millis()
                )
            }
            Within::Silenced => "postgres stopped answering while the commit waited; \
                                 whether it took effect is not known"
                .to_owned(),
        };
        // Mid-statement: the connection is closed, not used again.
        drop(deadpool::managed::Object::take(writer));
        Err(StoreError::Unavailable(detail))
    }

    /// The store's [`Silence`](super::Silence), for the store trait.
    fn silence_of(&self) -> Option<&Arc<super::Silence>> {
        Some(&self.silence)
    }

    /// Commits left unanswered past `timeout` fail as unavailable.
    pub fn with_answer_timeout(mut self, timeout: Duration) -> Self {
        self.answer_timeout = timeout;
        self
    }

    /// How many statements the writer connection that [`Self::commit_ops`] would use next
    /// has prepared, and how often each ran (`pg_prepared_statements`: its own session's).
    #[cfg(test)]
    pub(super) async fn writer_statements(&self) -> Vec<(String, i64)> {
        let writer = self.writer.get().await.expect("a writer connection");
        pg_writer::prepared_statements(&writer).await
    }
}

impl PgStore {
    /// The outbox rows this server's deliveries read: in cluster mode this node's,
    /// otherwise all of them.
    fn outbox_share(&self) -> super::tables::push_outbox::OutboxShare<'_> {
        match &self.fence {
            Some(fence) => super::tables::push_outbox::OutboxShare::Node(fence.node_id()),
            None => super::tables::push_outbox::OutboxShare::All,
        }
    }

    /// A read, failed as unavailable when it goes unanswered past `store.answer_timeout_ms`
    /// (its connection is then not handed out again: `settle`).
    async fn bounded<T>(
        &self,
        read: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match self
            .silence
            .within("a read", self.answer_timeout, read)
            .await
        {
            Within::Answered(read) => read,
            Within::Unanswered => {
                metrics::counter!(crate::telemetry::STORE_ANSWER_TIMEOUTS).increment(1);
                Err(StoreError::Unavailable(format!(
                    "postgres: a read was not answered within {} ms (store.answer_timeout_ms)",
                    self.answer_timeout.as_millis()
                )))
            }
            Within::Silenced => Err(StoreError::Unavailable(
                "postgres stopped answering while the read waited".into(),
            )),
        }
    }

    /// A point read, as any other: the Postgres connection's I/O is asynchronous.
    fn point_read<F: std::future::Future>(&self, read: F) -> F {
        read
    }

    /// A failed read whose error says nothing of the connection (diesel reports most
    /// server errors as `Unknown` and drops their SQLSTATE; commits run on tokio-postgres
    /// and are told apart by theirs, `pg_writer::classify`) is told apart
    /// here: if the connection no longer answers, the database went away under the
    /// statement — an administrator or crash shutdown (57P01–57P03), a failover, a
    /// connection exception (08…) — and the failure is `Unavailable`, which clients may
    /// retry; otherwise it was the statement's own failure. Only failures pay for the
    /// probe, bounded by the acquire timeout. A connection found gone is not handed out to
    /// the thread's next point reads.
    async fn settle<T>(
        &self,
        conn: &mut PgRead,
        result: Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match result {
            Err(StoreError::Query(detail)) if !self.answers(conn).await => {
                conn.forget().await;
                Err(StoreError::Unavailable(detail))
            }
            Err(StoreError::Unavailable(detail)) => {
                conn.forget().await;
                Err(StoreError::Unavailable(detail))
            }
            other => other,
        }
    }

    /// Whether `conn` still runs a statement.
    async fn answers(&self, conn: &AsyncPgConnection) -> bool {
        let probe = diesel_async::RunQueryDsl::execute(diesel::sql_query("SELECT 1"), &mut &*conn);
        matches!(
            tokio::time::timeout(self.acquire_timeout, probe).await,
            Ok(Ok(_))
        )
    }

    /// `ANALYZE`s each of [`ANALYZED_TABLES`] whose size has reached twice what it was at
    /// its last analysis (or vacuum), and at least [`ANALYZE_FLOOR_PAGES`], while it was
    /// under [`ANALYZE_CEILING_PAGES`] then, and names them (see
    /// [`Store::refresh_statistics`](super::Store::refresh_statistics)). Sizes are the
    /// files' own, not the statistics collector's counts, which reach it late. The
    /// analysis's statistics target is set for it alone on the read connection.
    async fn analyze_grown_tables(&self) -> Result<Vec<&'static str>, StoreError> {
        let mut conn = self.conn().await?;
        let result = analyze_grown(&mut &*conn).await;
        self.settle(&mut conn, result).await
    }

    /// The census as two statements of one read (`reads::census`).
    async fn count_census(
        &self,
        now: crate::domain::Timestamp,
    ) -> Result<super::Census, StoreError> {
        let mut conn = self.conn().await?;
        let result = census(&mut &*conn, now).await;
        self.settle(&mut conn, result).await
    }

    /// None: a claim is a network round trip, awaited like any read.
    fn inline_claim(
        &self,
        _tenant: &crate::domain::TenantId,
        _key: &str,
    ) -> Option<Result<Option<super::Claim>, StoreError>> {
        None
    }

    /// None: commits are awaited on the async connection.
    fn blocking_writer(&self) -> Option<std::sync::Arc<dyn super::BlockingCommit>> {
        None
    }
}

/// `url` with `idle_in_transaction_session_timeout` set to `lease` for its sessions.
/// `url` with its connections closed by the kernel once data sent on them, or their
/// keepalive probes, go unacknowledged for `dead_after` (`store.answer_timeout_ms`,
/// whole seconds): a connection the network lost in the middle of a statement would
/// otherwise come back only when TCP's retransmissions, spaced further and further
/// apart, get through — seconds after the network healed. Not where the URL sets
/// either itself.
pub(super) fn with_dead_after(url: &str, dead_after: Duration) -> String {
    if url.contains("tcp_user_timeout=") || url.contains("keepalives_idle=") {
        return url.to_owned();
    }
    let seconds = dead_after.as_millis().div_ceil(1000).max(1);
    let separator = if url.contains('?') { '&' } else { '?' };
    format!(
        "{url}{separator}tcp_user_timeout={seconds}&keepalives_idle={}&keepalives_interval=1&keepalives_retries=2",
        (seconds / 2).max(1)
    )
}

fn with_idle_transaction_timeout(url: &str, lease: Duration) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!(
        "{url}{separator}options=-c%20idle_in_transaction_session_timeout%3D{}",
        lease.as_millis().max(1)
    )
}

/// Tests: reverts the newest migration of the database at `url` (its `down.sql`), then
/// runs `sql` on it; blocks until done.
#[cfg(test)]
pub(super) fn revert_through_then(
    url: &str,
    version: &str,
    sql: &str,
) -> Result<Vec<String>, StoreError> {
    let (url, version, sql) = (url.to_owned(), version.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        let mut conn =
            <AsyncConnectionWrapper<AsyncPgConnection> as diesel::Connection>::establish(&url)
                .map_err(|e| StoreError::Unavailable(format!("postgres: {e}")))?;
        let reverted = super::revert_through(&mut conn, || MIGRATIONS, &version)?;
        conn.batch_execute(&sql)?;
        Ok(reverted)
    })
    .join()
    .map_err(|_| StoreError::Query("the revert thread panicked".into()))?
}

/// Applies pending migrations to the database at `url`; blocks until done.
///
/// The migration harness is synchronous, so it runs over `AsyncConnectionWrapper` on a
/// thread of its own: outside any tokio context the wrapper drives its own runtime, which
/// it could not do on (or `block_in_place` from) the caller's, e.g. an actix arbiter.
///
/// `alone`: the server opening the store runs without cluster mode (and holds the
/// database alone): every owed push delivery becomes its own (`push_outbox.node_id`
/// '', no node), those a cluster's nodes owned included.
pub(super) fn migrate(url: &str, alone: bool) -> Result<Vec<String>, StoreError> {
    let url = url.to_owned();
    std::thread::Builder::new()
        .name("pg-migrate".into())
        .spawn(move || {
            let mut conn =
                <AsyncConnectionWrapper<AsyncPgConnection> as diesel::Connection>::establish(&url)
                    .map_err(|e| StoreError::Unavailable(format!("postgres: {e}")))?;
            // Nodes sharing one database may start together: the advisory lock makes
            // them migrate one after the other, so the later ones find nothing pending.
            // It is held by the session, so a crash cannot leave it behind.
            conn.batch_execute(&format!("SELECT pg_advisory_lock({MIGRATION_LOCK})"))?;
            let applied = super::run_migrations(&mut conn, MIGRATIONS);
            conn.batch_execute(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK})"))?;
            let applied = applied?;
            warn_if_not_vacuumed(&mut conn);
            if alone {
                release_owed(&mut conn)?;
            }
            Ok(applied)
        })
        .map_err(|e| StoreError::Query(format!("cannot start the migration thread: {e}")))?
        .join()
        .map_err(|_| StoreError::Query("the postgres migration thread panicked".into()))?
}

/// Makes every owed push delivery a server's without cluster mode: rows a cluster's
/// nodes owned (`push_outbox.node_id`) are nobody's, which is what such a server
/// delivers.
fn release_owed(conn: &mut AsyncConnectionWrapper<AsyncPgConnection>) -> Result<(), StoreError> {
    use diesel::RunQueryDsl;
    let released = diesel::sql_query("UPDATE push_outbox SET node_id = '' WHERE node_id > ''")
        .execute(conn)?;
    if released > 0 {
        tracing::info!(
            released,
            "owed push deliveries of cluster nodes are this server's: it runs without \
             cluster mode"
        );
    }
    Ok(())
}
