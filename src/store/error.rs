//! Why a store call failed ([`StoreError`]), from diesel's errors, and as the server's
//! error.

use std::path::PathBuf;

use super::node_lock;

/// Why a store call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or the pool timed out: retryable.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A uniqueness or key constraint was violated.
    #[error("store conflict: {0}")]
    Conflict(String),
    /// A query failed for another reason.
    #[error("store query failed: {0}")]
    Query(String),
    /// A stored row could not be decoded.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The store cannot be set up as configured (unsupported URL, unusable path).
    #[error("store misconfigured: {0}")]
    Config(String),
    /// A [`WriteOp::ClaimKey`] met a claim of the same key within the window: another
    /// request was accepted with it first. Nothing of the batch was written.
    #[error("idempotency key {0:?} is already claimed")]
    Duplicate(String),
    /// Cluster mode: another node took over a thread of this node (its lease had
    /// expired) and fenced it; nothing of the batch was written.
    #[error("this node's lease was taken over by another node")]
    Fenced,
    /// Postgres: the database is held by servers this one cannot run beside (a second
    /// server without cluster mode, or a cluster and a server without it).
    #[error("{0}")]
    Held(node_lock::Held),
    /// Another process holds the SQLite database: SQLite serves one process, several
    /// nodes share a Postgres database.
    #[error(
        "the SQLite database {} is in use by another agent-a2a process (lock file {}); \
         SQLite serves one process — stop the other one, give this one another \
         store.data_dir, or use Postgres (DATABASE_URL) to run several nodes",
        .database.display(),
        .lock_file.display()
    )]
    InUse {
        /// The database as configured.
        database: PathBuf,
        /// The lock another process holds, by its canonical path.
        lock_file: PathBuf,
    },
}

impl From<diesel::result::Error> for StoreError {
    fn from(e: diesel::result::Error) -> Self {
        use diesel::result::{DatabaseErrorKind as Kind, Error};
        match e {
            Error::DatabaseError(Kind::UniqueViolation | Kind::ForeignKeyViolation, info) => {
                StoreError::Conflict(info.message().to_owned())
            }
            // diesel-async reports a lost or closed server connection with these kinds.
            Error::DatabaseError(Kind::ClosedConnection | Kind::UnableToSendCommand, info) => {
                StoreError::Unavailable(info.message().to_owned())
            }
            // A serialization failure rolled the transaction back whole: running it
            // again is safe, and the caller is told it may.
            Error::DatabaseError(Kind::SerializationFailure, info) => {
                StoreError::Unavailable(info.message().to_owned())
            }
            // SQLITE_BUSY / SQLITE_LOCKED after the busy timeout: another writer held the
            // lock too long; trying again later is the right answer.
            Error::DatabaseError(_, info)
                if info.message().starts_with("database is locked")
                    || info.message().starts_with("database table is locked") =>
            {
                StoreError::Unavailable(info.message().to_owned())
            }
            // A transaction was interrupted mid-way (e.g. its connection dropped); the
            // pool discards the connection, so a retry gets a fresh one.
            Error::BrokenTransactionManager => StoreError::Unavailable(e.to_string()),
            Error::DeserializationError(cause) => StoreError::Corrupt(cause.to_string()),
            other => StoreError::Query(other.to_string()),
        }
    }
}

impl From<StoreError> for crate::error::Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(detail) => crate::error::Error::Unavailable {
                detail,
                retry_after_secs: 1,
            },
            // Two requests with one key raced and the other one won: once its turn is
            // durable, sending again gets its outcome.
            StoreError::Duplicate(key) => crate::error::Error::Unavailable {
                detail: format!("a request with the same idempotency key {key:?} is in progress"),
                retry_after_secs: 1,
            },
            // The thread is served by another node now: a retry is routed there.
            StoreError::Fenced => crate::error::Error::Unavailable {
                detail: "this node lost its lease on the thread to another node".into(),
                retry_after_secs: 1,
            },
            StoreError::Conflict(_)
            | StoreError::Query(_)
            | StoreError::Corrupt(_)
            | StoreError::Config(_)
            | StoreError::InUse { .. }
            | StoreError::Held(_) => crate::error::Error::Internal(e.to_string()),
        }
    }
}
