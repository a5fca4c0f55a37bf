//! `[store]` and `[persistence]`: where the data lives and how writes reach it. The
//! store reads them as its own `StoreConfig` (`StoreConfig::from_settings`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{ConfigError, positive};

/// The longest `store.lock_wait_ms`: a start-up that waits longer is stuck, not waiting.
const MAX_LOCK_WAIT_MS: u64 = 600_000;

/// The largest `store.sqlite_checkpoint_pages` (a 4 GiB WAL of 4 KiB pages).
pub const MAX_SQLITE_CHECKPOINT_PAGES: u32 = 1 << 20;

/// The bounds of `store.sqlite_claim_buffer`.
pub const SQLITE_CLAIM_BUFFER: std::ops::RangeInclusive<usize> = 1024..=(1 << 24);

/// Where the data lives (`[store]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSettings {
    /// `postgres://…` selects Postgres; empty selects the embedded SQLite file.
    pub database_url: String,
    /// Directory of the SQLite file (`agent-a2a.db`) and other local data.
    pub data_dir: PathBuf,
    /// Database connections for reads, in all. On Postgres each thread that reads keeps
    /// its own (a connection's I/O runs on the thread that opened it), at most an even
    /// share of these over the cores and one more each (the HTTP workers, one per core,
    /// leave a share to the background tasks).
    pub pool_size: usize,
    /// How long a request waits for a connection before failing with 503, in ms.
    pub acquire_timeout_ms: u64,
    /// Postgres: how long a commit or a read may go unanswered, in ms; then it fails as
    /// unavailable (503 + `Retry-After`: a database cut off by the network answers
    /// nothing, and the requests waiting on it would wait for the heal). Its connection
    /// is not used again. Whether a commit took effect is not known then; a retry by
    /// message id finds out.
    pub answer_timeout_ms: u64,
    /// SQLite's `PRAGMA synchronous`: `full` (the default: one fsync per group commit, a
    /// power loss loses nothing acknowledged; measured within the noise of `normal` at 64
    /// connections, +0.2 ms p50 at one) or `normal` (a commit survives a crash of the
    /// process; a power loss can roll back the last ones).
    pub sqlite_synchronous: SqliteSynchronous,
    /// SQLite with `sqlite_synchronous = "full"`: the writer hands each commit's WAL
    /// frames to the kernel in one write, just before the commit's sync, instead of two
    /// writes per page (see `store/sqlite/wal_writes.rs`). `false` writes them as SQLite
    /// does. With `normal` the frames are always written at once (a commit is
    /// acknowledged without a sync there).
    pub sqlite_wal_one_write: bool,
    /// SQLite: the WAL's growth in pages after which a thread of its own checkpoints it
    /// (copies its pages into the database file) beside the writer, which never stops for
    /// a checkpoint for long (it copies the last pages the thread left, see
    /// `store/sqlite/checkpoint.rs`). At most 1 048 576. 16 000 (64 MiB of WAL): at 64 connections,
    /// against SQLite's own checkpoints every 1 000, +16–20 % sends per second at the same
    /// p99 — a page written by many commits is copied once per checkpoint, and the writer
    /// stops for the last pages four times less often than at 4 000.
    pub sqlite_checkpoint_pages: u32,
    /// SQLite: the most pages the WAL may hold. A commit that leaves it larger — the
    /// checkpoint thread has not caught up with the writer, or readers held on to older
    /// pages — is followed by a checkpoint on the writer that waits for the readers and
    /// copies it all, so that the next commit starts the WAL over (counted in
    /// `agent_a2a_sqlite_wal_bound_checkpoints_total`); the WAL file is cut back to this
    /// size when it starts over. At least `sqlite_checkpoint_pages`; 64 000 (250 MiB).
    pub sqlite_max_wal_pages: u32,
    /// SQLite: idempotency claims whose entries in the key index wait in memory, to be
    /// written in sorted runs (a 64th of them, one range of keys, at a time) rather than
    /// one random page per claim (see `store/sqlite/claims.rs`). From 1 024 to 16 777 216;
    /// about 60 bytes each. Larger keeps the index's writes sequential in larger stores.
    pub sqlite_claim_buffer: usize,
    /// Postgres: how long a starting server waits for a hold on the database it cannot
    /// share to go away (a server without cluster mode holds its database alone, cluster
    /// nodes share theirs), in ms — long enough for the session of a process killed a
    /// moment ago to end. Then it exits naming `cluster.enabled`.
    pub lock_wait_ms: u64,
    /// How long an expired thread is kept after its expiry, in seconds, before the
    /// janitor deletes it with everything in it (messages, tasks, their event logs, push
    /// configs and owed deliveries); 0 keeps every thread forever. A thread expires
    /// `threads.thread_ttl_secs` after its last message, so a task stays readable at least
    /// that long plus this. With idempotency on, the two together must cover
    /// `idempotency.window_secs` (a retried message always finds its task).
    pub retention_secs: u64,
    /// Threads the janitor deletes in one commit (each with its messages, tasks and
    /// logs), so that a request's commit never waits behind a large deletion. From 1 to
    /// 10 000.
    pub retention_batch: usize,
    /// Postgres: how often the server looks for its tables that have grown to twice
    /// their size at their last analysis (from 128 KiB, until they were 8 MiB at the
    /// last one) and runs `ANALYZE` on them, in seconds; 0 leaves it to autovacuum.
    /// Postgres keeps the plan of a prepared statement made from the statistics of its
    /// time, and a plan made while a table was small reads a whole tenant's rows for one
    /// key once it is large; an analysis makes every connection plan again. Autovacuum's
    /// own analyses come a minute apart at best. At most 3600.
    pub postgres_analyze_interval_secs: u64,
}

/// The longest `store.postgres_analyze_interval_secs`.
pub const MAX_POSTGRES_ANALYZE_INTERVAL_SECS: u64 = 3600;

/// The largest `store.retention_batch`.
pub const MAX_RETENTION_BATCH: usize = 10_000;

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            database_url: String::new(),
            data_dir: PathBuf::from("data"),
            pool_size: 16,
            acquire_timeout_ms: 2000,
            answer_timeout_ms: 5000,
            sqlite_synchronous: SqliteSynchronous::default(),
            sqlite_wal_one_write: true,
            sqlite_checkpoint_pages: 16_000,
            sqlite_max_wal_pages: 64_000,
            sqlite_claim_buffer: 262_144,
            lock_wait_ms: 3000,
            retention_secs: 0,
            retention_batch: 100,
            postgres_analyze_interval_secs: 2,
        }
    }
}

/// `store.sqlite_synchronous`: SQLite's `PRAGMA synchronous` as the settings spell it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SqliteSynchronous {
    /// A commit survives a crash of the process; a power loss can roll back the last ones.
    Normal,
    /// Every group commit is synced: a power loss loses nothing acknowledged.
    #[default]
    Full,
}

/// `persistence.commits_in_flight` unless configured: group commits in flight at once on
/// Postgres. One: the next group gathers every batch queued while a commit runs, so the
/// database does the per-commit work (statements, the WAL flush) once for all of them;
/// at 64 concurrent sends on a local database, one in flight made groups of ~24 batches
/// and cost Postgres 40 % less CPU per send than four in flight (groups of ~8), at
/// higher throughput and lower p99.
pub const DEFAULT_COMMITS_IN_FLIGHT: usize = 1;

/// The most `persistence.commits_in_flight` (each holds a Postgres connection).
pub const MAX_COMMITS_IN_FLIGHT: usize = 64;

/// The longest `persistence.start_grace_ms`: a user message must not stay uncommitted
/// for longer while its turn runs.
pub const MAX_START_GRACE_MS: u64 = 10_000;

/// The persistence actor's queue and group commits (`[persistence]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PersistenceSettings {
    /// Writes waiting for the persistence actor; when full, callers wait.
    pub queue_capacity: usize,
    /// Most write batches committed in one transaction (group commit).
    pub max_batch: usize,
    /// How long a write waits for room in a full queue before failing with 503, in ms;
    /// also the longest the push delivery may hold commits back to read the whole
    /// outbox (then it goes on reading the outbox instead of holding it in memory).
    pub enqueue_timeout_ms: u64,
    /// How long the first commit of a turn that starts a new task waits for the turn's
    /// first output, so that both share one transaction (a turn that answers at once costs
    /// one commit, not two), in ms. Nothing is acknowledged before that commit; a turn
    /// still running after this long has its message committed on its own. 0 commits it
    /// before the executor starts. At most 10000.
    pub start_grace_ms: u64,
    /// Postgres: group commits in flight at once, each on its connection (its statements
    /// pipelined). A thread's writes stay in order: its actor waits for each commit. More
    /// than one helps when a commit's time is mostly the network's (a distant database);
    /// on a near one it splits groups and costs the database more. SQLite has one writer
    /// and ignores this. From 1 to 64.
    pub commits_in_flight: usize,
}

impl Default for PersistenceSettings {
    fn default() -> Self {
        Self {
            queue_capacity: 8192,
            max_batch: 256,
            enqueue_timeout_ms: 1000,
            start_grace_ms: 20,
            commits_in_flight: DEFAULT_COMMITS_IN_FLIGHT,
        }
    }
}

impl StoreSettings {
    /// The URL names a known backend; the pool's bounds are positive.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let url = &self.database_url;
        let known = ["postgres://", "postgresql://", "sqlite:"];
        if !url.is_empty() && !known.iter().any(|scheme| url.starts_with(scheme)) {
            return Err(ConfigError::Key {
                key: "store.database_url",
                problem: "must be a postgres://, postgresql:// or sqlite: URL".into(),
            });
        }
        positive("store.pool_size", self.pool_size as u64)?;
        positive("store.acquire_timeout_ms", self.acquire_timeout_ms)?;
        positive("store.answer_timeout_ms", self.answer_timeout_ms)?;
        if !(1..=MAX_SQLITE_CHECKPOINT_PAGES).contains(&self.sqlite_checkpoint_pages) {
            return Err(ConfigError::Key {
                key: "store.sqlite_checkpoint_pages",
                problem: format!("must be from 1 to {MAX_SQLITE_CHECKPOINT_PAGES}"),
            });
        }
        if !(self.sqlite_checkpoint_pages..=MAX_SQLITE_CHECKPOINT_PAGES)
            .contains(&self.sqlite_max_wal_pages)
        {
            return Err(ConfigError::Key {
                key: "store.sqlite_max_wal_pages",
                problem: format!(
                    "must be from store.sqlite_checkpoint_pages ({}) to {MAX_SQLITE_CHECKPOINT_PAGES}",
                    self.sqlite_checkpoint_pages
                ),
            });
        }
        if !SQLITE_CLAIM_BUFFER.contains(&self.sqlite_claim_buffer) {
            return Err(ConfigError::Key {
                key: "store.sqlite_claim_buffer",
                problem: format!(
                    "must be from {} to {}",
                    SQLITE_CLAIM_BUFFER.start(),
                    SQLITE_CLAIM_BUFFER.end()
                ),
            });
        }
        if self.lock_wait_ms > MAX_LOCK_WAIT_MS {
            return Err(ConfigError::Key {
                key: "store.lock_wait_ms",
                problem: format!("must be at most {MAX_LOCK_WAIT_MS} (10 minutes)"),
            });
        }
        if !(1..=MAX_RETENTION_BATCH).contains(&self.retention_batch) {
            return Err(ConfigError::Key {
                key: "store.retention_batch",
                problem: format!("must be from 1 to {MAX_RETENTION_BATCH}"),
            });
        }
        if self.postgres_analyze_interval_secs > MAX_POSTGRES_ANALYZE_INTERVAL_SECS {
            return Err(ConfigError::Key {
                key: "store.postgres_analyze_interval_secs",
                problem: format!(
                    "must be at most {MAX_POSTGRES_ANALYZE_INTERVAL_SECS} (an hour); 0 turns it off"
                ),
            });
        }
        Ok(())
    }

    /// Whether the store is Postgres (the only backend several nodes can share).
    pub fn is_postgres(&self) -> bool {
        let url = &self.database_url;
        url.starts_with("postgres://") || url.starts_with("postgresql://")
    }
}

impl PersistenceSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        positive("persistence.queue_capacity", self.queue_capacity as u64)?;
        positive("persistence.max_batch", self.max_batch as u64)?;
        if !(1..=MAX_COMMITS_IN_FLIGHT).contains(&self.commits_in_flight) {
            return Err(ConfigError::Key {
                key: "persistence.commits_in_flight",
                problem: format!("must be from 1 to {MAX_COMMITS_IN_FLIGHT}"),
            });
        }
        if self.start_grace_ms > MAX_START_GRACE_MS {
            return Err(ConfigError::Key {
                key: "persistence.start_grace_ms",
                problem: format!("must be at most {MAX_START_GRACE_MS}"),
            });
        }
        Ok(())
    }
}
