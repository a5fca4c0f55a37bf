//! An SQLite error as the store reports it: busy, locked or out of disk is unavailable
//! (retryable), a constraint a conflict, anything else a failed query.

use crate::store::StoreError;

/// A writer error as the store reports it: a busy or locked database is retryable, a
/// constraint a conflict.
pub(in crate::store) fn store_error(e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            StoreError::Unavailable(e.to_string())
        }
        Some(ErrorCode::ConstraintViolation) => StoreError::Conflict(e.to_string()),
        Some(ErrorCode::CannotOpen | ErrorCode::DiskFull | ErrorCode::SystemIoFailure) => {
            StoreError::Unavailable(e.to_string())
        }
        _ => StoreError::Query(e.to_string()),
    }
}
