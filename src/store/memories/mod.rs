//! Memories: short texts an agent keeps about a user, a session, a project… stored per
//! tenant and scope, with full-text search and optional embeddings.
//!
//! The [`MemoryRepository`] trait has a Postgres and an SQLite implementation, stamped
//! out from one body (`repository.rs`) like the main store. The `memories` table is
//! created by the `2026-11-22-000100_memories` migration of each backend, applied by
//! [`crate::store::migrate`] with the others; [`open`] only builds a small pool of its
//! own on the same database.
//!
//! **Architecture invariant:** every statement is filtered by tenant and by complete
//! [`MemoryScope`]s (the layer and every scope column), so a memory is reachable only
//! with the ids of its own scope. Full-text queries are built from the words of the
//! user's text, never from the text itself ([`TextQuery`]).

mod hold;
mod postgres;
mod repository;
mod rows;
mod scope;
mod sqlite;
mod statements;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
mod text_query;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub use hold::HoldCheck;
pub use scope::{
    MAX_SCOPE_ID_LEN, MemoryLayer, MemoryScope, ScopeError, ScopeField, ScopeIds, check_scope_id,
};
pub use text_query::{MAX_QUERY_TERMS, TextQuery};

use super::fence::ThreadHold;
use super::{Location, StoreConfig, StoreError};
use crate::domain::{TenantId, Timestamp};

/// Most connections the memory pool opens: memory calls are short, and the main store's
/// pool keeps the rest of the database's connection budget.
pub const MAX_POOL_SIZE: usize = 4;

/// A stored memory.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryRecord {
    /// UUID v7.
    pub id: String,
    pub tenant: TenantId,
    pub scope: MemoryScope,
    pub content: String,
    /// Hex SHA-256 of `content` ([`content_hash`]).
    pub content_hash: String,
    pub tags: Vec<String>,
    /// A JSON object.
    pub metadata: Map<String, Value>,
    /// In [0, 1]; 0.5 for a new memory, moved by feedback.
    pub importance: f64,
    pub embedding: Option<Vec<f32>>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A memory to store.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMemory {
    pub tenant: TenantId,
    pub scope: MemoryScope,
    pub content: String,
    pub tags: Vec<String>,
    pub metadata: Map<String, Value>,
    /// In [0, 1].
    pub importance: f64,
    pub embedding: Option<Vec<f32>>,
    /// Creation (and update) time.
    pub at: Timestamp,
}

/// Changes to a memory; `None` keeps the stored value.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryChange {
    pub content: Option<String>,
    pub tags: Option<Vec<String>>,
    pub metadata: Option<Map<String, Value>>,
    /// The embedding of the new `content`; ignored unless `content` is given, and then
    /// `None` clears the old one (it describes text that is gone).
    pub embedding: Option<Vec<f32>>,
    pub at: Timestamp,
}

impl MemoryChange {
    /// No change yet, made at `at`.
    pub fn at(at: Timestamp) -> MemoryChange {
        MemoryChange {
            content: None,
            tags: None,
            metadata: None,
            embedding: None,
            at,
        }
    }
}

/// The outcome of [`MemoryRepository::add`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    /// The new memory's id, or the existing one's for a duplicate.
    pub id: String,
    /// The same content already existed in the same scope; nothing was stored.
    pub duplicate: bool,
}

/// A full-text candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredMemory {
    pub memory: MemoryRecord,
    /// In [0, 1); higher is a better match.
    pub score: f64,
}

/// Hex SHA-256 of a memory's content: the key duplicates are detected by.
pub fn content_hash(content: &str) -> String {
    let digest = Sha256::digest(content.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Durable memories. Every method is scoped by tenant; those taking `scopes` reach only
/// memories of one of them (an empty slice reaches nothing). The writes take the calling
/// turn's `hold` on its thread: in cluster mode a write under a hold this node no longer
/// has is refused with [`StoreError::Fenced`] and writes nothing (`ThreadHold`); without
/// cluster mode, or without a hold (an operator's call), it is not checked.
#[async_trait]
pub trait MemoryRepository: Send + Sync + 'static {
    /// `"postgres"` or `"sqlite"`.
    fn backend(&self) -> &'static str;

    /// Stores a memory, unless the same content exists in the same scope: then nothing is
    /// written and the existing id is returned as a duplicate.
    async fn add(
        &self,
        memory: &NewMemory,
        hold: Option<ThreadHold<'_>>,
    ) -> Result<Added, StoreError>;

    async fn get(
        &self,
        tenant: &TenantId,
        scopes: &[MemoryScope],
        id: &str,
    ) -> Result<Option<MemoryRecord>, StoreError>;

    /// Applies `change` (recomputing the content hash) and returns the memory as stored;
    /// `None` if no such memory. New content that another memory of the scope already
    /// has is [`StoreError::Conflict`].
    async fn update(
        &self,
        tenant: &TenantId,
        scopes: &[MemoryScope],
        id: &str,
        change: &MemoryChange,
        hold: Option<ThreadHold<'_>>,
    ) -> Result<Option<MemoryRecord>, StoreError>;

    /// Whether a memory was deleted.
    async fn delete(
        &self,
        tenant: &TenantId,
        scopes: &[MemoryScope],
        id: &str,
        hold: Option<ThreadHold<'_>>,
    ) -> Result<bool, StoreError>;

    /// At most `max` memories of `scope` matching any word of `query` and carrying every
    /// one of `tags`, best first, scored in [0, 1).
    async fn search_text(
        &self,
        tenant: &TenantId,
        scope: &MemoryScope,
        query: &TextQuery,
        tags: &[String],
        max: usize,
    ) -> Result<Vec<ScoredMemory>, StoreError>;

    /// At most `max` memories of `scope` that have an embedding and every one of `tags`,
    /// most recently updated first.
    async fn scan_with_embeddings(
        &self,
        tenant: &TenantId,
        scope: &MemoryScope,
        tags: &[String],
        max: usize,
    ) -> Result<Vec<MemoryRecord>, StoreError>;

    /// Adds `delta` to a memory's importance, clamped to [0, 1], atomically (concurrent
    /// adjustments all count); returns the new importance, or `None` if no such memory.
    /// A non-finite `delta` is refused.
    async fn adjust_importance(
        &self,
        tenant: &TenantId,
        scopes: &[MemoryScope],
        id: &str,
        delta: f64,
        hold: Option<ThreadHold<'_>>,
    ) -> Result<Option<f64>, StoreError>;

    /// A real round trip to the memories table (at most one id read, of any tenant, and
    /// discarded): the memory engine's health check.
    async fn ping(&self) -> Result<(), StoreError>;
}

/// The memory repository on the configured database, with a pool of its own of at most
/// [`MAX_POOL_SIZE`] connections. Connects nothing yet; the schema must have been
/// migrated ([`crate::store::open`] or [`crate::store::migrate`]).
pub fn open(cfg: &StoreConfig) -> Result<Arc<dyn MemoryRepository>, StoreError> {
    let pool_size = cfg.pool_size.clamp(1, MAX_POOL_SIZE);
    let repository: Arc<dyn MemoryRepository> = match cfg.location()? {
        Location::Postgres(url) => Arc::new(postgres::PgMemories::new(
            &url,
            pool_size,
            cfg.acquire_timeout(),
            cfg.fence.as_ref().map(|(fence, _)| fence.clone()),
        )?),
        Location::Sqlite(path) => {
            // Before its first connection, if the store's did not come first.
            crate::store::sqlite::tune_library();
            Arc::new(sqlite::SqliteMemories::new(
                &path,
                pool_size,
                cfg.acquire_timeout(),
                cfg.sqlite_synchronous,
            )?)
        }
    };
    Ok(repository)
}
