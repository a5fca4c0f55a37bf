//! The memory repository on Postgres: its own small deadpool pool of diesel-async
//! `AsyncPgConnection`s (tokio-postgres, no libpq) on the store's database.
//!
//! Like the main store's pool, it connects lazily and recycles connections without a
//! test query; a database that is down surfaces as `StoreError::Unavailable` within the
//! acquire timeout.

use std::sync::Arc;
use std::time::Duration;

use diesel_async::AsyncPgConnection;
use diesel_async::pooled_connection::deadpool::Pool;

/// [`MemoryRepository`](super::MemoryRepository) on Postgres.
pub(crate) struct PgMemories {
    pool: Pool<AsyncPgConnection>,
    acquire_timeout: Duration,
    /// Cluster mode: this node's lease, which writes under a turn's hold check.
    fence: Option<Arc<crate::store::fence::Fence>>,
}

impl PgMemories {
    /// A repository over at most `pool_size` connections to `url` (none opened yet); with
    /// a `fence` (cluster mode), writes under a turn's hold check it.
    pub(crate) fn new(
        url: &str,
        pool_size: usize,
        acquire_timeout: Duration,
        fence: Option<Arc<crate::store::fence::Fence>>,
    ) -> Result<Self, crate::store::StoreError> {
        Ok(Self {
            pool: crate::store::postgres::pool(url, pool_size, "postgres memory pool")?,
            acquire_timeout,
            fence,
        })
    }

    /// This node's id in cluster mode.
    fn node(&self) -> Option<&str> {
        self.fence
            .as_deref()
            .map(crate::store::fence::Fence::node_id)
    }
}

super::repository::memory_repository_impl!(
    PgMemories,
    AsyncPgConnection,
    "postgres",
    statements::Dialect::Postgres
);
