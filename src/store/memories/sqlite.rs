//! The memory repository on the store's SQLite file: its own small pool of diesel's
//! `SqliteConnection` in diesel-async's `SyncConnectionWrapper` (statements run on
//! tokio's blocking pool, never on an arbiter thread).

use std::path::Path;
use std::time::Duration;

use diesel_async::pooled_connection::deadpool::Pool;

use crate::store::sqlite::SqliteConn;
use crate::store::sqlite::lock::SqliteLock;

/// [`MemoryRepository`](super::MemoryRepository) on SQLite.
pub(crate) struct SqliteMemories {
    pool: Pool<SqliteConn>,
    acquire_timeout: Duration,
    /// This process's hold on the file it shares with the store: a repository alone
    /// (without a store in this process) keeps other processes off the file too.
    _lock: SqliteLock,
}

impl SqliteMemories {
    /// A repository over at most `pool_size` connections to the (migrated) file at `path`,
    /// set up exactly like the main store's (they share the file and this process's lock
    /// on it: `StoreError::InUse` when another process holds the file).
    pub(crate) fn new(
        path: &Path,
        pool_size: usize,
        acquire_timeout: Duration,
        synchronous: crate::store::SqliteSynchronous,
    ) -> Result<Self, crate::store::StoreError> {
        let lock = SqliteLock::acquire(path)?;
        Ok(Self {
            pool: crate::store::sqlite::pool(path, pool_size, "sqlite memory pool", synchronous)?,
            acquire_timeout,
            _lock: lock,
        })
    }

    /// No cluster mode on SQLite: nothing to check a turn's hold against.
    fn node(&self) -> Option<&str> {
        None
    }
}

super::repository::memory_repository_impl!(
    SqliteMemories,
    SqliteConn,
    "sqlite",
    statements::Dialect::Sqlite
);
