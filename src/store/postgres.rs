//! The Postgres store: diesel-async's `AsyncPgConnection` (tokio-postgres, so no libpq)
//! behind a deadpool pool, and the embedded `migrations/postgres`.
//!
//! Connections are made lazily by the pool, so building the store never touches the
//! network; a database that is down surfaces on the first query as
//! [`StoreError::Unavailable`] within the acquire timeout. Connections are recycled
//! without a test query (closed ones are dropped by the pool's `is_closed` check) so
//! that a commit costs exactly its own statements.

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_async::pooled_connection::deadpool::Pool;
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use diesel_migrations::{EmbeddedMigrations, embed_migrations};

use std::sync::Arc;

use super::cluster::{self, Fence};
use super::writes::{self, CHUNK, PushRow, Rows, Statement};
use super::{StoreError, WriteOp};

const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");

/// Key of the advisory lock held while migrating (the bytes of "a2a_migr").
const MIGRATION_LOCK: i64 = 0x6132_615f_6d69_6772;

/// [`Store`](super::Store) on Postgres.
pub struct PgStore {
    pool: Pool<AsyncPgConnection>,
    /// Commits only. A pooled connection's I/O task runs on the runtime that opened it,
    /// and commits are made on the persistence actor's arbiter, so these connections live
    /// there: stopping the HTTP workers or the actor arbiters (a graceful shutdown) cannot
    /// cut a commit, and the persistence queue can still be flushed after them.
    writer: Pool<AsyncPgConnection>,
    acquire_timeout: Duration,
    /// Cluster mode: every commit first checks this node's lease (its fencing token) and
    /// notifies the other nodes of the task events it logged.
    fence: Option<Arc<Fence>>,
    /// The server's hold on the database (`node_lock.rs`), released with the store.
    _lock: Option<super::node_lock::DatabaseLock>,
}

impl PgStore {
    /// A store over a pool of at most `pool_size` connections to `url` for reads and
    /// `writers` for commits (one per group commit in flight). Connects nothing yet;
    /// migrations are applied separately ([`migrate`]).
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
            pool: pool(url, pool_size, "postgres pool")?,
            writer: pool(&writer_url, writers, "postgres writer pool")?,
            acquire_timeout,
            fence: fence.map(|(fence, _)| fence),
            _lock: lock,
        })
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

super::queries::store_impl!(PgStore, AsyncPgConnection, diesel::pg::Pg, "postgres");

impl PgStore {
    /// Applies a batch in one transaction: one multi-row statement per table and chunk
    /// (`writes.rs`), nothing read back.
    async fn commit_ops<'a>(
        &self,
        ops: impl Iterator<Item = &'a WriteOp> + Send,
    ) -> Result<(), StoreError> {
        let mut rows = Rows::collect(ops)?;
        // Cluster mode: every thread this node writes names it as the thread's owner, and
        // a thread another node owns is not written (see `upsert_threads`).
        if let Some(fence) = &self.fence {
            for thread in &mut rows.threads {
                thread.owner_node = Some(fence.node_id());
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        let mut conn = self.checkout(&self.writer).await?;
        let committed = conn
            .transaction(async |conn| {
                // Pipelined: every statement is sent before the first answer is read; the
                // server runs them in the order sent (expiries after the thread upserts).
                let conn: &AsyncPgConnection = conn;
                let mut statements = Vec::new();
                // Cluster mode: the node's lease first, for each token the batches were
                // written under (see `cluster.rs`).
                let fences = rows.fences.len();
                if fences > 0 {
                    let Some(fence) = &self.fence else {
                        return Err(StoreError::Config(
                            "a fenced batch on a store that is not in a cluster".into(),
                        ));
                    };
                    for token in &rows.fences {
                        statements.push(run(
                            diesel::sql_query(cluster::FENCE)
                                .bind::<diesel::sql_types::Text, _>(fence.node_id())
                                .bind::<diesel::sql_types::BigInt, _>(*token),
                            conn,
                        ));
                    }
                }
                // The claims first, each checked for the row it must have written.
                for (row, taken_over_before) in &rows.claims {
                    statements.push(run(writes::claim_key(row, *taken_over_before), conn));
                }
                let claims = rows.claims.len();
                for (tenant, key, reply) in &rows.settled {
                    statements.push(run(writes::settle_claim(tenant, key, reply), conn));
                }
                for before in &rows.forget_before {
                    statements.push(run(writes::forget_claims(*before), conn));
                }
                let threads_at = statements.len();
                for chunk in rows.threads.chunks(CHUNK) {
                    statements.push(run(writes::upsert_threads(chunk), conn));
                }
                for (tenant, ids, at) in rows.expiry_chunks() {
                    statements.push(run(writes::expire_threads(tenant, ids, at), conn));
                }
                for chunk in rows.messages.chunks(CHUNK) {
                    statements.push(run(writes::insert_messages(chunk), conn));
                }
                for chunk in rows.tasks.chunks(CHUNK) {
                    statements.push(run(writes::upsert_tasks(chunk), conn));
                }
                for chunk in rows.links.chunks(CHUNK) {
                    statements.push(run(writes::insert_links(chunk), conn));
                }
                for chunk in rows.events.chunks(CHUNK) {
                    statements.push(run(writes::insert_events(chunk), conn));
                }
                // Delivered to the listening nodes only if the transaction commits.
                let notifications = match self.fence {
                    Some(_) => cluster::event_payloads(
                        rows.events.iter().map(|e| (e.tenant_id, e.task_id, e.seq)),
                    ),
                    None => Vec::new(),
                };
                for payload in notifications {
                    statements.push(run(
                        diesel::sql_query("SELECT pg_notify($1, $2)")
                            .bind::<diesel::sql_types::Text, _>(cluster::EVENTS_CHANNEL)
                            .bind::<diesel::sql_types::Text, _>(payload),
                        conn,
                    ));
                }
                for row in &rows.push {
                    match row {
                        PushRow::PutConfig(r) => {
                            statements.push(run(writes::upsert_push_config(r), conn));
                        }
                        PushRow::DeleteConfig {
                            tenant_id,
                            task_id,
                            config_id,
                        } => {
                            statements.push(run(
                                writes::delete_owed(tenant_id, task_id, config_id),
                                conn,
                            ));
                            statements.push(run(
                                writes::delete_push_config(tenant_id, task_id, config_id),
                                conn,
                            ));
                        }
                        PushRow::Enqueue(r) => statements.push(run(writes::insert_outbox(r), conn)),
                        PushRow::Done(key) => {
                            statements.push(run(writes::delete_outbox(key), conn))
                        }
                        PushRow::Retry {
                            key,
                            attempts,
                            next_attempt_at,
                        } => statements.push(run(
                            writes::reschedule_outbox(key, *attempts, *next_attempt_at),
                            conn,
                        )),
                    }
                }
                // Every answer, in order: the fences' come first, and a batch written under a
                // moved token is refused as such even when a later statement of it failed
                // (a stale writer's rows often collide with the new owner's).
                let answers = futures_util::future::join_all(statements).await;
                let stale: Vec<i64> = (0..fences)
                    .filter(|&i| !matches!(answers[i], Ok(1)))
                    .map(|i| rows.fences[i])
                    .collect();
                if !stale.is_empty() {
                    // The transaction rolls back: nothing of the batch is written. A batch of
                    // an actor from before the node's last rejoin only fails; the current
                    // token failing means the lease was taken over just now.
                    if let Some(fence) = &self.fence
                        && stale.contains(&fence.token())
                    {
                        fence.mark_lost();
                    }
                    return Err(StoreError::Fenced);
                }
                let counts = answers.into_iter().collect::<Result<Vec<usize>, _>>()?;
                let owned_elsewhere = rows
                    .threads
                    .chunks(CHUNK)
                    .zip(&counts[threads_at..])
                    .any(|(chunk, &n)| n != chunk.len());
                if owned_elsewhere {
                    // Another node owns one of the threads (it created the thread first): the
                    // request goes there on its retry.
                    return Err(StoreError::Fenced);
                }
                let counts = &counts[fences..];
                if let Some(i) = counts[..claims].iter().position(|&n| n == 0) {
                    // The transaction rolls back: nothing of the batch is written.
                    return Err(StoreError::Duplicate(rows.claims[i].0.idem_key.to_owned()));
                }
                Ok::<(), StoreError>(())
            })
            .await;
        self.settle(&mut conn, committed).await
    }
}

impl PgStore {
    /// A failed read or commit whose error says nothing of the connection (diesel
    /// reports most server errors as `Unknown` and drops their SQLSTATE) is told apart
    /// here: if the connection no longer answers, the database went away under the
    /// statement — an administrator or crash shutdown (57P01–57P03), a failover, a
    /// connection exception (08…) — and the failure is `Unavailable`, which clients may
    /// retry; otherwise it was the statement's own failure. Only failures pay for the
    /// probe, bounded by the acquire timeout.
    async fn settle<T>(
        &self,
        conn: &mut AsyncPgConnection,
        result: Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match result {
            Err(StoreError::Query(detail)) if !self.answers(conn).await => {
                Err(StoreError::Unavailable(detail))
            }
            other => other,
        }
    }

    /// Whether `conn` still runs a statement.
    async fn answers(&self, conn: &mut AsyncPgConnection) -> bool {
        let probe = diesel_async::RunQueryDsl::execute(diesel::sql_query("SELECT 1"), conn);
        matches!(
            tokio::time::timeout(self.acquire_timeout, probe).await,
            Ok(Ok(_))
        )
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
fn with_idle_transaction_timeout(url: &str, lease: Duration) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!(
        "{url}{separator}options=-c%20idle_in_transaction_session_timeout%3D{}",
        lease.as_millis().max(1)
    )
}

/// One write statement on a shared connection (pipelined with the others).
fn run<'a>(
    statement: impl Statement + 'a,
    mut conn: &'a AsyncPgConnection,
) -> futures_util::future::BoxFuture<'a, diesel::QueryResult<usize>> {
    diesel_async::methods::ExecuteDsl::execute(statement, &mut conn)
}

/// Applies pending migrations to the database at `url`; blocks until done.
///
/// The migration harness is synchronous, so it runs over `AsyncConnectionWrapper` on a
/// thread of its own: outside any tokio context the wrapper drives its own runtime, which
/// it could not do on (or `block_in_place` from) the caller's, e.g. an actix arbiter.
pub(super) fn migrate(url: &str) -> Result<Vec<String>, StoreError> {
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
            applied
        })
        .map_err(|e| StoreError::Query(format!("cannot start the migration thread: {e}")))?
        .join()
        .map_err(|_| StoreError::Query("the postgres migration thread panicked".into()))?
}
