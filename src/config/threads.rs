//! `[threads]`, `[state]` and `[idempotency]`: the thread actors (their memory,
//! lifetime, janitor and start-up recovery), their state entries, and how retried sends
//! are recognised.

use serde::{Deserialize, Serialize};

use super::{ConfigError, positive};

/// Thread actors: their memory, lifetime, janitor and start-up recovery (`[threads]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThreadSettings {
    /// Arbiter threads hosting thread actors; 0: one per core.
    pub arbiters: usize,
    /// Messages of a thread's history kept in its actor's memory.
    pub history_window: usize,
    /// How long a finished task stays in memory after its last event, in ms.
    pub task_retention_ms: u64,
    /// A thread actor idle this long is stopped (it reloads on demand), in seconds.
    pub idle_timeout_secs: u64,
    /// Thread actors kept in memory; above this, actors idle longer than
    /// `task_retention_ms` are stopped at once instead of after `idle_timeout_secs`.
    pub max_resident_actors: usize,
    /// A thread inactive this long expires and cannot be continued, in seconds.
    pub thread_ttl_secs: u64,
    /// Messages queued behind a running turn in one thread before new ones are refused.
    pub max_pending_turns: usize,
    /// How often the janitor runs (expires threads, removes expired state entries), in
    /// seconds.
    pub janitor_interval_secs: u64,
    /// Threads the janitor expires with one statement, and resident thread actors it
    /// sweeps at once.
    pub janitor_batch: usize,
    /// Active threads loaded into memory at start-up, latest to expire (most recently
    /// continued) first (in
    /// the background, never beyond `max_resident_actors`); 0: none. The others load on
    /// their first request.
    pub recover_eagerly: usize,
    /// Threads loaded at once by the start-up recovery.
    pub recover_concurrency: usize,
}

impl Default for ThreadSettings {
    fn default() -> Self {
        Self {
            arbiters: 0,
            history_window: 200,
            task_retention_ms: 5000,
            idle_timeout_secs: 600,
            max_resident_actors: 10_000,
            thread_ttl_secs: 86_400,
            max_pending_turns: 64,
            janitor_interval_secs: 300,
            janitor_batch: 500,
            recover_eagerly: 1000,
            recover_concurrency: 8,
        }
    }
}

/// Thread state entries (`[state]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateSettings {
    /// How long a thread-state entry lives, in seconds.
    pub ttl_secs: u64,
    /// Largest thread state (all entries, serialised) in bytes; a write past it fails.
    pub max_bytes: usize,
}

impl Default for StateSettings {
    fn default() -> Self {
        Self {
            ttl_secs: 3_600,
            max_bytes: 1024 * 1024,
        }
    }
}

/// Idempotent sends: a retried message is recognised by its id (or `Idempotency-Key`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdempotencySettings {
    /// Recognise retried sends. Off, every send runs its turn (the official conformance
    /// kit reuses one message id per run for unrelated messages, and needs it off).
    pub enabled: bool,
    /// How long an accepted message's id keeps answering retries with the first
    /// outcome, in seconds; after it, the id may be used again.
    pub window_secs: u64,
    /// Claims within the window the in-memory claim filter remembers (~1.35 bytes
    /// each): a send under a key it has surely never seen skips the store read for an
    /// earlier claim. Past it, every send reads the store until the forgotten claims
    /// leave the window. 0 turns the filter off (every send reads). Not used in cluster
    /// mode, where other nodes claim keys too.
    pub filter_keys: u64,
}

/// The largest `idempotency.filter_keys` (~360 MB of filter).
pub const MAX_FILTER_KEYS: u64 = 1 << 28;

impl Default for IdempotencySettings {
    fn default() -> Self {
        Self {
            enabled: true,
            window_secs: 86_400,
            filter_keys: 8 << 20,
        }
    }
}

impl ThreadSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        positive("threads.history_window", self.history_window as u64)?;
        positive("threads.idle_timeout_secs", self.idle_timeout_secs)?;
        positive("threads.thread_ttl_secs", self.thread_ttl_secs)?;
        positive(
            "threads.max_resident_actors",
            self.max_resident_actors as u64,
        )?;
        positive("threads.max_pending_turns", self.max_pending_turns as u64)?;
        positive("threads.janitor_interval_secs", self.janitor_interval_secs)?;
        positive("threads.janitor_batch", self.janitor_batch as u64)?;
        positive(
            "threads.recover_concurrency",
            self.recover_concurrency as u64,
        )
    }

    /// Threads that host thread actors.
    pub fn arbiter_count(&self) -> usize {
        match self.arbiters {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
            n => n,
        }
    }
}

impl IdempotencySettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        positive("idempotency.window_secs", self.window_secs)?;
        if self.filter_keys > MAX_FILTER_KEYS {
            return Err(ConfigError::Key {
                key: "idempotency.filter_keys",
                problem: format!("must be at most {MAX_FILTER_KEYS} (0: no filter)"),
            });
        }
        Ok(())
    }
}
