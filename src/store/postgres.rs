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
}

impl PgStore {
    /// A store over a pool of at most `pool_size` connections to `url` for reads and
    /// `writers` for commits (one per group commit in flight). Connects nothing yet;
    /// migrations are applied separately ([`migrate`]).
    pub fn new(
        url: &str,
        pool_size: usize,
        writers: usize,
        acquire_timeout: Duration,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            pool: pool(url, pool_size, "postgres pool")?,
            writer: pool(url, writers, "postgres writer pool")?,
            acquire_timeout,
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
        let rows = Rows::collect(ops)?;
        if rows.is_empty() {
            return Ok(());
        }
        let mut conn = self.checkout(&self.writer).await?;
        conn.transaction(async |conn| {
            // Pipelined: every statement is sent before the first answer is read; the
            // server runs them in the order sent (expiries after the thread upserts).
            let conn: &AsyncPgConnection = conn;
            let mut statements = Vec::new();
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
                    PushRow::Done(key) => statements.push(run(writes::delete_outbox(key), conn)),
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
            let counts = futures_util::future::try_join_all(statements).await?;
            if let Some(i) = counts[..claims].iter().position(|&n| n == 0) {
                // The transaction rolls back: nothing of the batch is written.
                return Err(StoreError::Duplicate(rows.claims[i].0.idem_key.to_owned()));
            }
            Ok::<(), StoreError>(())
        })
        .await
    }
}

impl PgStore {
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
