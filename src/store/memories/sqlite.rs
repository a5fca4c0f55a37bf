//! The memory repository on the store's SQLite file: its own small pool of diesel's
//! `SqliteConnection` in diesel-async's `SyncConnectionWrapper` (statements run on
//! tokio's blocking pool, never on an arbiter thread).

use std::path::Path;
use std::time::Duration;

use diesel::{ConnectionError, ConnectionResult, SqliteConnection};
use diesel_async::pooled_connection::deadpool::Pool;
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
};
use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
use diesel_async::{AsyncConnection, SimpleAsyncConnection};

/// The per-connection settings of the main store (`store::sqlite`), repeated because its
/// constant is private there; they must stay the same, since both pools share one file
/// (WAL so that readers never block the writer, a busy timeout so that a second writer
/// waits instead of failing at once).
const PRAGMAS: &str = "PRAGMA busy_timeout=5000; PRAGMA journal_mode=WAL; \
                       PRAGMA foreign_keys=ON; PRAGMA synchronous=NORMAL;";

type SqliteConn = SyncConnectionWrapper<SqliteConnection>;

/// [`MemoryRepository`](super::MemoryRepository) on SQLite.
pub(crate) struct SqliteMemories {
    pool: Pool<SqliteConn>,
    acquire_timeout: Duration,
}

impl SqliteMemories {
    /// A repository over at most `pool_size` connections to the (migrated) file at `path`.
    pub(crate) fn new(
        path: &Path,
        pool_size: usize,
        acquire_timeout: Duration,
    ) -> Result<Self, crate::store::StoreError> {
        let path = path.to_str().ok_or_else(|| {
            crate::store::StoreError::Config(format!(
                "the SQLite path {} is not UTF-8",
                path.display()
            ))
        })?;
        let mut config = ManagerConfig::<SqliteConn>::default();
        config.recycling_method = RecyclingMethod::Fast;
        config.custom_setup = Box::new(|url| Box::pin(establish(url.to_owned())));
        let manager = AsyncDieselConnectionManager::<SqliteConn>::new_with_config(path, config);
        let pool = Pool::builder(manager)
            .max_size(pool_size.max(1))
            .build()
            .map_err(|e| crate::store::StoreError::Config(format!("sqlite memory pool: {e}")))?;
        Ok(Self {
            pool,
            acquire_timeout,
        })
    }
}

async fn establish(path: String) -> ConnectionResult<SqliteConn> {
    let mut conn = SqliteConn::establish(&path).await?;
    conn.batch_execute(PRAGMAS)
        .await
        .map_err(ConnectionError::CouldntSetupConfiguration)?;
    Ok(conn)
}

super::repository::memory_repository_impl!(
    SqliteMemories,
    SqliteConn,
    diesel::sqlite::Sqlite,
    "sqlite",
    statements::Dialect::Sqlite
);
