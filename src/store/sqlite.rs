//! The embedded SQLite store: diesel's `SqliteConnection` (bundled libsqlite3) wrapped in
//! diesel-async's `SyncConnectionWrapper`, which runs each statement on tokio's blocking
//! pool so no arbiter thread ever waits on the disk.
//!
//! Every pooled connection is set up with WAL journaling (readers never block the
//! writer), a busy timeout (a second writer waits instead of failing at once), foreign
//! keys on, and `synchronous=NORMAL`. In WAL mode NORMAL makes every committed
//! transaction survive a crash of the process, which is the durability we promise; only
//! a power loss or OS crash can roll back the last commits, which FULL would prevent at
//! the price of an fsync per commit.

use std::path::Path;
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

use super::StoreError;

const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");

/// Per-connection settings (see the module documentation for why). The busy timeout
/// comes first: switching the journal mode takes a lock, and without the timeout in
/// force a connection that meets another one (a restart racing the old process's last
/// checkpoint) fails at once with "database is locked".
const PRAGMAS: &str = "PRAGMA busy_timeout=5000; PRAGMA journal_mode=WAL; \
                       PRAGMA foreign_keys=ON; PRAGMA synchronous=NORMAL;";

pub(super) type SqliteConn = SyncConnectionWrapper<SqliteConnection>;

/// [`Store`](super::Store) on an SQLite file.
pub struct SqliteStore {
    pool: Pool<SqliteConn>,
    /// The same pool: an SQLite connection has no I/O task tied to a runtime.
    writer: Pool<SqliteConn>,
    acquire_timeout: Duration,
}

impl SqliteStore {
    /// A store over a pool of at most `pool_size` connections to the file at `path`,
    /// which [`migrate`] has created.
    pub fn new(
        path: &Path,
        pool_size: usize,
        acquire_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let pool = pool(path, pool_size, "sqlite pool")?;
        Ok(Self {
            writer: pool.clone(),
            pool,
            acquire_timeout,
        })
    }
}

/// A pool of at most `size` connections to the SQLite file at `path`, each set up with
/// [`PRAGMAS`]. Every pool on the file is built here, so they all agree on the settings.
pub(super) fn pool(path: &Path, size: usize, label: &str) -> Result<Pool<SqliteConn>, StoreError> {
    let mut config = ManagerConfig::<SqliteConn>::default();
    config.recycling_method = RecyclingMethod::Fast;
    config.custom_setup = Box::new(|url| Box::pin(establish(url.to_owned())));
    let manager =
        AsyncDieselConnectionManager::<SqliteConn>::new_with_config(path_str(path)?, config);
    Pool::builder(manager)
        .max_size(size.max(1))
        .build()
        .map_err(|e| StoreError::Config(format!("{label}: {e}")))
}

super::queries::store_impl!(
    SqliteStore,
    SqliteConn,
    diesel::sqlite::Sqlite,
    "sqlite",
    per_row
);

async fn establish(path: String) -> ConnectionResult<SqliteConn> {
    let mut conn = SqliteConn::establish(&path).await?;
    conn.batch_execute(PRAGMAS)
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

/// Creates the file (and its directory) if needed and applies pending migrations.
pub(super) fn migrate(path: &Path) -> Result<Vec<String>, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::Unavailable(format!("cannot create {}: {e}", dir.display()))
        })?;
    }
    let mut conn = SqliteConnection::establish(path_str(path)?)
        .map_err(|e| StoreError::Unavailable(format!("sqlite {}: {e}", path.display())))?;
    // The busy timeout matters here too: another process may be writing the file.
    conn.batch_execute(PRAGMAS)?;
    super::run_migrations(&mut conn, MIGRATIONS)
}
