//! The store's tables, one module each: a table's rows as they are written (`New*`,
//! borrowing from the record) and as they are read (`*Row`, owning), and their
//! conversion to and from the domain and store records.
//!
//! This is the only place that knows how a record is laid out in columns: JSON columns
//! hold the serde encoding of the domain types, states their `as_str` names. Loaded rows
//! are decoded with [`StoreError::Corrupt`] for anything the database should never have
//! held.

pub(in crate::store) mod idempotency_keys;
pub(in crate::store) mod messages;
pub(in crate::store) mod push_configs;
pub(in crate::store) mod push_outbox;
pub(in crate::store) mod task_events;
pub(in crate::store) mod tasks;
pub(in crate::store) mod threads;

use diesel::QueryableByName;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::store::StoreError;

fn encode<T: Serialize + ?Sized>(what: &str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::Query(format!("cannot encode {what}: {e}")))
}

fn decode<T: DeserializeOwned>(what: &str, raw: &str) -> Result<T, StoreError> {
    serde_json::from_str(raw).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

fn decode_opt<T: DeserializeOwned>(what: &str, raw: Option<&str>) -> Result<Option<T>, StoreError> {
    raw.map(|raw| decode(what, raw)).transpose()
}

/// Parses an id read back from a column (ids are checked before they are written).
fn id<T>(
    what: &str,
    raw: String,
    parse: fn(String) -> Result<T, crate::domain::IdError>,
) -> Result<T, StoreError> {
    parse(raw).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

/// A number of rows (`count(*) AS n`).
#[derive(QueryableByName)]
pub(in crate::store) struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub(in crate::store) n: i64,
}
