//! Opening the configured store ([`StoreConfig`], [`open`]) and applying its embedded
//! migrations ([`migrate`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use diesel_migrations::{EmbeddedMigrations, MigrationHarness};

use super::{MemoryRepository, Store, StoreError, fence, memories, node_lock, postgres, sqlite};
use crate::config::{self, Settings};

/// SQLite's `PRAGMA synchronous` (`store.sqlite_synchronous`): how often the WAL is
/// flushed to stable storage.
///
/// FULL is the default: with group commit it costs one fsync per group, which measured
/// within the noise of NORMAL at 64 connections (2026-11-23, 2 shared cores, echo agent,
/// two interleaved 10 s rounds each: 10 455 vs 10 302 ok/s, 107–124 vs 116–124 µs of
/// server CPU per request) and 0.58 vs 0.38 ms p50 at one connection, where every
/// request pays its own fsync.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SqliteSynchronous {
    /// Every commit survives a crash of the process; a power loss or OS crash can roll
    /// back the last commits (WAL is synced at checkpoints).
    Normal,
    /// Every commit is synced (one fsync per group commit): a power loss loses nothing
    /// acknowledged.
    #[default]
    Full,
}

impl SqliteSynchronous {
    pub fn as_str(self) -> &'static str {
        match self {
            SqliteSynchronous::Normal => "NORMAL",
            SqliteSynchronous::Full => "FULL",
        }
    }
}

impl From<config::SqliteSynchronous> for SqliteSynchronous {
    fn from(setting: config::SqliteSynchronous) -> Self {
        match setting {
            config::SqliteSynchronous::Normal => SqliteSynchronous::Normal,
            config::SqliteSynchronous::Full => SqliteSynchronous::Full,
        }
    }
}

/// Name of the SQLite file inside [`StoreConfig::data_dir`].
pub const SQLITE_FILE: &str = "agent-a2a.db";

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// `postgres://…` selects Postgres; `sqlite://PATH` or None selects SQLite.
    pub database_url: Option<String>,
    /// Directory of the default SQLite file (`agent-a2a.db`).
    pub data_dir: PathBuf,
    /// Most connections the pool opens.
    pub pool_size: usize,
    /// How long a query waits for a pooled connection (including connecting) before the
    /// store answers `Unavailable`.
    pub acquire_timeout_ms: u64,
    /// Postgres only: how long a commit may go unanswered before it fails as
    /// unavailable.
    pub answer_timeout_ms: u64,
    /// SQLite only: `PRAGMA synchronous`.
    pub sqlite_synchronous: SqliteSynchronous,
    /// SQLite only, with FULL: a commit's WAL frames written in one write
    /// (`sqlite/wal_writes.rs`).
    pub sqlite_wal_one_write: bool,
    /// SQLite only: the WAL's pages past which the checkpoint thread checkpoints it.
    pub sqlite_checkpoint_pages: u32,
    /// SQLite only: the WAL's pages past which the writer checkpoints it all.
    pub sqlite_max_wal_pages: u32,
    /// SQLite only: claims whose key-index entries wait in memory (`sqlite/claims.rs`).
    pub sqlite_claim_buffer: usize,
    /// Postgres only: connections for commits, one per group commit in flight.
    pub commits_in_flight: usize,
    /// Cluster mode (Postgres only): this node's lease, checked by every commit, and the
    /// lease's length.
    pub fence: Option<(Arc<fence::Fence>, Duration)>,
    /// Postgres only: how this server holds the database (`node_lock.rs`) — alone, or
    /// shared with the other nodes of a cluster; `None` takes no hold (tools and tests
    /// that read beside a running server).
    pub hold: Option<node_lock::Hold>,
    /// How long opening waits for a hold that refuses this one to go away.
    pub lock_wait_ms: u64,
}

/// What the settings' defaults say.
impl Default for StoreConfig {
    fn default() -> Self {
        Self::from_settings(&Settings::default())
    }
}

/// Where the configuration points.
pub(super) enum Location {
    Postgres(String),
    Sqlite(PathBuf),
}

impl StoreConfig {
    /// `[store]` and `[persistence]` in the store's terms (no fence: cluster mode adds it).
    pub fn from_settings(settings: &Settings) -> Self {
        let store = &settings.store;
        Self {
            database_url: (!store.database_url.is_empty()).then(|| store.database_url.clone()),
            data_dir: store.data_dir.clone(),
            pool_size: store.pool_size,
            acquire_timeout_ms: store.acquire_timeout_ms,
            answer_timeout_ms: store.answer_timeout_ms,
            sqlite_synchronous: store.sqlite_synchronous.into(),
            sqlite_wal_one_write: store.sqlite_wal_one_write,
            sqlite_checkpoint_pages: store.sqlite_checkpoint_pages,
            sqlite_max_wal_pages: store.sqlite_max_wal_pages,
            sqlite_claim_buffer: store.sqlite_claim_buffer,
            commits_in_flight: settings.persistence.commits_in_flight,
            fence: None,
            hold: None,
            lock_wait_ms: store.lock_wait_ms,
        }
    }

    pub(super) fn location(&self) -> Result<Location, StoreError> {
        let url = self
            .database_url
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty());
        let Some(url) = url else {
            return Ok(Location::Sqlite(self.data_dir.join(SQLITE_FILE)));
        };
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Location::Postgres(url.to_owned()));
        }
        match url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            // Every pooled connection to `:memory:` would see a database of its own.
            Some("" | ":memory:") => Err(StoreError::Config(
                "the SQLite URL needs a file path (in-memory databases are not durable)".into(),
            )),
            Some(path) => Ok(Location::Sqlite(PathBuf::from(path))),
            // Only the scheme goes into the error: the rest may hold a password.
            None => Err(StoreError::Config(format!(
                "unsupported database URL scheme {:?} (expected postgres:// or sqlite://)",
                url.split_once(':').map_or(url, |(scheme, _)| scheme)
            ))),
        }
    }

    pub(super) fn acquire_timeout(&self) -> Duration {
        Duration::from_millis(self.acquire_timeout_ms)
    }
}

/// Applies pending migrations and opens the store.
pub async fn open(cfg: &StoreConfig) -> Result<Arc<dyn Store>, StoreError> {
    let location = cfg.location()?;
    if matches!(location, Location::Sqlite(_)) {
        sqlite::tune_library();
    }
    // Before anything else touches the database: a server that may not run beside the
    // ones serving it stops here.
    let lock = match (&location, cfg.hold) {
        (Location::Postgres(url), Some(hold)) => {
            Some(node_lock::take(url, hold, Duration::from_millis(cfg.lock_wait_ms)).await?)
        }
        _ => None,
    };
    let to_migrate = cfg.clone();
    // A server alone on its database delivers every owed push row, a cluster's included.
    let alone = cfg.fence.is_none() && cfg.hold == Some(node_lock::Hold::Alone);
    // Migrations block (file and network I/O); keep them off the caller's runtime thread.
    // On SQLite the migration's hold on the file is kept until the store holds it too.
    let (applied, _held) = tokio::task::spawn_blocking(move || match to_migrate.location()? {
        Location::Postgres(url) => postgres::migrate(&url, alone).map(|applied| (applied, None)),
        Location::Sqlite(path) => {
            sqlite::migrate_holding(&path).map(|(applied, lock)| (applied, Some(lock)))
        }
    })
    .await
    .map_err(|e| StoreError::Query(format!("the migration task failed: {e}")))??;
    let store: Arc<dyn Store> = match location {
        Location::Postgres(url) => Arc::new(
            postgres::PgStore::new(
                &postgres::with_dead_after(&url, Duration::from_millis(cfg.answer_timeout_ms)),
                cfg.pool_size,
                cfg.commits_in_flight,
                cfg.acquire_timeout(),
                cfg.fence.clone(),
                lock,
            )?
            .with_answer_timeout(Duration::from_millis(cfg.answer_timeout_ms)),
        ),
        Location::Sqlite(_) if cfg.fence.is_some() => {
            return Err(StoreError::Config(
                "cluster mode needs Postgres: SQLite serves one process".into(),
            ));
        }
        Location::Sqlite(path) => Arc::new(sqlite::SqliteStore::new(&path, cfg)?),
    };
    tracing::info!(backend = store.backend(), migrations_applied = ?applied, "store open");
    Ok(store)
}

/// Applies pending migrations; returns the names of those applied now (sync; call off the
/// async runtime or via `spawn_blocking`).
pub fn migrate(cfg: &StoreConfig) -> Result<Vec<String>, StoreError> {
    match cfg.location()? {
        Location::Postgres(url) => postgres::migrate(&url, false),
        Location::Sqlite(path) => sqlite::migrate(&path),
    }
}

/// Tests: reverts the migrations from the newest back to `version` (e.g.
/// `20261125000300`) included, each by its `down.sql`, and runs `sql` on the database, as
/// an older release would have left it; returns the versions reverted; sync.
#[cfg(test)]
pub(crate) fn revert_through_then(
    cfg: &StoreConfig,
    version: &str,
    sql: &str,
) -> Result<Vec<String>, StoreError> {
    match cfg.location()? {
        Location::Postgres(url) => postgres::revert_through_then(&url, version, sql),
        Location::Sqlite(path) => sqlite::revert_through_then(&path, version, sql),
    }
}

/// Reverts `source`'s applied migrations, newest first, through `version`.
#[cfg(test)]
pub(super) fn revert_through<DB, C>(
    conn: &mut C,
    source: fn() -> EmbeddedMigrations,
    version: &str,
) -> Result<Vec<String>, StoreError>
where
    DB: diesel::backend::Backend,
    C: MigrationHarness<DB>,
{
    let failed =
        |e: Box<dyn std::error::Error + Send + Sync>| StoreError::Query(format!("revert: {e}"));
    let mut reverted = Vec::new();
    loop {
        let applied = conn.applied_migrations().map_err(failed)?;
        if !applied.iter().any(|v| v.to_string() == version) {
            return Err(StoreError::Query(format!(
                "migration {version} is not applied"
            )));
        }
        let last = conn
            .revert_last_migration(source())
            .map_err(failed)?
            .to_string();
        let done = last == version;
        reverted.push(last);
        if done {
            return Ok(reverted);
        }
    }
}

/// The memory repository on the configured database, with a small pool of its own; the
/// schema must already be migrated ([`open`] or [`migrate`]). Connects nothing yet.
pub fn open_memories(cfg: &StoreConfig) -> Result<Arc<dyn MemoryRepository>, StoreError> {
    memories::open(cfg)
}

/// Runs `source`'s pending migrations, each in its own transaction, in order.
pub(super) fn run_migrations<DB, C>(
    conn: &mut C,
    source: EmbeddedMigrations,
) -> Result<Vec<String>, StoreError>
where
    DB: diesel::backend::Backend,
    C: MigrationHarness<DB>,
{
    let failed = |e: Box<dyn std::error::Error + Send + Sync>| {
        StoreError::Query(format!("migration failed: {e}"))
    };
    let pending = conn.pending_migrations(source).map_err(failed)?;
    let mut applied = Vec::with_capacity(pending.len());
    for migration in pending {
        conn.run_migration(&*migration).map_err(failed)?;
        applied.push(migration.name().to_string());
    }
    Ok(applied)
}
