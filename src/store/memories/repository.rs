//! The [`MemoryRepository`](super::MemoryRepository) implementation, written once and
//! stamped out per backend by [`memory_repository_impl!`] (generic code over diesel-async
//! connection types is impractical; see `store/queries.rs`).
//!
//! The SQL comes from `statements.rs`; this file encodes values for storage, runs the
//! statements on a pooled connection and decodes the rows.

use serde_json::{Map, Value};

use super::statements::{Gate, InsertRow, UpdateRow};
use super::{MemoryChange, NewMemory, content_hash};
use crate::domain::TenantId;
use crate::store::StoreError;
use crate::store::fence::{HOLD_LOST, THREAD_ELSEWHERE, ThreadHold};

/// The check a write under `hold` makes on a node with id `node` (cluster mode); none
/// without either.
pub(crate) fn gate<'a>(
    node: Option<&'a str>,
    tenant: &'a TenantId,
    hold: Option<ThreadHold<'a>>,
) -> Option<Gate<'a>> {
    Some(Gate::new(node?, tenant, hold?))
}

/// A failed write: [`StoreError::Fenced`] when its hold's check refused it, else as any
/// query error.
pub(crate) fn write_error(e: diesel::result::Error) -> StoreError {
    match &e {
        diesel::result::Error::DatabaseError(_, info)
            if [HOLD_LOST, THREAD_ELSEWHERE].contains(&info.message()) =>
        {
            StoreError::Fenced
        }
        _ => e.into(),
    }
}

/// Encodes a new memory; refuses values the table's constraints would refuse less
/// clearly (or, for non-finite numbers, not at all).
pub(crate) fn insert_row<'a>(
    memory: &'a NewMemory,
    id: &'a str,
    hash: &'a str,
) -> Result<InsertRow<'a>, StoreError> {
    if !(memory.importance.is_finite() && (0.0..=1.0).contains(&memory.importance)) {
        return Err(StoreError::Query(format!(
            "importance {} is not within [0, 1]",
            memory.importance
        )));
    }
    Ok(InsertRow {
        id,
        tenant: memory.tenant.as_str(),
        scope: &memory.scope,
        content: &memory.content,
        content_hash: hash,
        tags: encode_tags(&memory.tags),
        metadata: encode_metadata(&memory.metadata),
        importance: memory.importance,
        embedding: encode_embedding(memory.embedding.as_deref())?,
        at: memory.at.millis(),
    })
}

/// Encodes an update (the new content's hash computed here).
pub(crate) fn update_row(change: &MemoryChange) -> Result<UpdateRow, StoreError> {
    let content = match &change.content {
        Some(content) => Some((
            content.clone(),
            content_hash(content),
            encode_embedding(change.embedding.as_deref())?,
        )),
        None => None,
    };
    Ok(UpdateRow {
        content,
        tags: change.tags.as_deref().map(encode_tags),
        metadata: change.metadata.as_ref().map(encode_metadata),
        at: change.at.millis(),
    })
}

fn encode_tags(tags: &[String]) -> String {
    Value::from(tags.to_vec()).to_string()
}

fn encode_metadata(metadata: &Map<String, Value>) -> String {
    Value::Object(metadata.clone()).to_string()
}

/// JSON array; serde_json would write a non-finite number as `null`, which would not
/// read back, so those are refused.
fn encode_embedding(embedding: Option<&[f32]>) -> Result<Option<String>, StoreError> {
    let Some(vector) = embedding else {
        return Ok(None);
    };
    if vector.is_empty() || !vector.iter().all(|x| x.is_finite()) {
        return Err(StoreError::Query(
            "an embedding must be a non-empty vector of finite numbers".into(),
        ));
    }
    Ok(Some(Value::from(vector.to_vec()).to_string()))
}

/// Implements [`MemoryRepository`](super::MemoryRepository) for `$repo`, a struct with a
/// `pool: Pool<$conn>`, an `acquire_timeout: Duration` and a `node()` (this node's id in
/// cluster mode, which writes under a turn's hold check); `$name` is what `backend()`
/// reports and `$dialect` the
/// `statements::Dialect` of its SQL.
macro_rules! memory_repository_impl {
    ($repo:ty, $conn:ty, $name:literal, $dialect:expr) => {
        use diesel_async::RunQueryDsl;

        use $crate::domain::TenantId;
        use $crate::store::StoreError;
        use $crate::store::fence::ThreadHold;
        use $crate::store::memories::repository::{gate, insert_row, update_row, write_error};
        use $crate::store::memories::rows::{IdRow, ImportanceRow, MemoryRow, ScoredRow};
        use $crate::store::memories::statements::{self, Statement};
        use $crate::store::memories::{
            Added, MemoryChange, MemoryRecord, MemoryRepository, MemoryScope, NewMemory,
            ScoredMemory, TextQuery, content_hash,
        };

        const DIALECT: statements::Dialect = $dialect;

        /// `st` as a diesel query, not kept prepared (see `statements.rs`).
        pub(crate) fn query(mut st: Statement) -> Statement {
            st.uncached();
            st
        }

        impl $repo {
            /// A pooled connection, or `Unavailable` once the acquire timeout has passed.
            async fn conn(
                &self,
            ) -> Result<diesel_async::pooled_connection::deadpool::Object<$conn>, StoreError> {
                match tokio::time::timeout(self.acquire_timeout, self.pool.get()).await {
                    Ok(Ok(conn)) => Ok(conn),
                    Ok(Err(e)) => Err(StoreError::Unavailable(format!("{} pool: {e}", $name))),
                    Err(_) => Err(StoreError::Unavailable(format!(
                        "{} pool: no connection within {:?}",
                        $name, self.acquire_timeout
                    ))),
                }
            }
        }

        #[async_trait::async_trait]
        impl MemoryRepository for $repo {
            fn backend(&self) -> &'static str {
                $name
            }

            async fn add(
                &self,
                memory: &NewMemory,
                hold: Option<ThreadHold<'_>>,
            ) -> Result<Added, StoreError> {
                let id = uuid::Uuid::now_v7().to_string();
                let hash = content_hash(&memory.content);
                let hold = gate(self.node(), &memory.tenant, hold);
                let insert =
                    statements::insert(DIALECT, insert_row(memory, &id, &hash)?, hold.as_ref());
                let mut conn = self.conn().await?;
                let inserted: Vec<IdRow> =
                    query(insert).load(&mut *conn).await.map_err(write_error)?;
                if let Some(row) = inserted.into_iter().next() {
                    return Ok(Added {
                        id: row.id,
                        duplicate: false,
                    });
                }
                let find =
                    statements::find_by_hash(DIALECT, memory.tenant.as_str(), &memory.scope, &hash);
                let existing: Vec<IdRow> = query(find).load(&mut *conn).await?;
                match existing.into_iter().next() {
                    Some(row) => Ok(Added {
                        id: row.id,
                        duplicate: true,
                    }),
                    // The duplicate was deleted between the two statements.
                    None => Err(StoreError::Conflict(
                        "the same memory was deleted concurrently; try again".into(),
                    )),
                }
            }

            async fn get(
                &self,
                tenant: &TenantId,
                scopes: &[MemoryScope],
                id: &str,
            ) -> Result<Option<MemoryRecord>, StoreError> {
                if scopes.is_empty() {
                    return Ok(None);
                }
                let select = statements::select(DIALECT, tenant.as_str(), scopes, id);
                let rows: Vec<MemoryRow> = query(select).load(&mut *self.conn().await?).await?;
                rows.into_iter()
                    .next()
                    .map(MemoryRow::into_record)
                    .transpose()
            }

            async fn update(
                &self,
                tenant: &TenantId,
                scopes: &[MemoryScope],
                id: &str,
                change: &MemoryChange,
                hold: Option<ThreadHold<'_>>,
            ) -> Result<Option<MemoryRecord>, StoreError> {
                if scopes.is_empty() {
                    return Ok(None);
                }
                let hold = gate(self.node(), tenant, hold);
                let update = statements::update(
                    DIALECT,
                    tenant.as_str(),
                    scopes,
                    id,
                    update_row(change)?,
                    hold.as_ref(),
                );
                let rows: Vec<MemoryRow> = query(update)
                    .load(&mut *self.conn().await?)
                    .await
                    .map_err(write_error)?;
                rows.into_iter()
                    .next()
                    .map(MemoryRow::into_record)
                    .transpose()
            }

            async fn delete(
                &self,
                tenant: &TenantId,
                scopes: &[MemoryScope],
                id: &str,
                hold: Option<ThreadHold<'_>>,
            ) -> Result<bool, StoreError> {
                if scopes.is_empty() {
                    return Ok(false);
                }
                let hold = gate(self.node(), tenant, hold);
                let delete =
                    statements::delete(DIALECT, tenant.as_str(), scopes, id, hold.as_ref());
                let deleted = query(delete)
                    .execute(&mut *self.conn().await?)
                    .await
                    .map_err(write_error)?;
                Ok(deleted > 0)
            }

            async fn search_text(
                &self,
                tenant: &TenantId,
                scope: &MemoryScope,
                text: &TextQuery,
                tags: &[String],
                max: usize,
            ) -> Result<Vec<ScoredMemory>, StoreError> {
                if max == 0 {
                    return Ok(Vec::new());
                }
                let search =
                    statements::search_text(DIALECT, tenant.as_str(), scope, text, tags, max);
                let rows: Vec<ScoredRow> = query(search).load(&mut *self.conn().await?).await?;
                rows.into_iter().map(ScoredRow::into_scored).collect()
            }

            async fn scan_with_embeddings(
                &self,
                tenant: &TenantId,
                scope: &MemoryScope,
                tags: &[String],
                max: usize,
            ) -> Result<Vec<MemoryRecord>, StoreError> {
                if max == 0 {
                    return Ok(Vec::new());
                }
                let scan =
                    statements::scan_with_embeddings(DIALECT, tenant.as_str(), scope, tags, max);
                let rows: Vec<MemoryRow> = query(scan).load(&mut *self.conn().await?).await?;
                rows.into_iter().map(MemoryRow::into_record).collect()
            }

            async fn adjust_importance(
                &self,
                tenant: &TenantId,
                scopes: &[MemoryScope],
                id: &str,
                delta: f64,
                hold: Option<ThreadHold<'_>>,
            ) -> Result<Option<f64>, StoreError> {
                if !delta.is_finite() {
                    return Err(StoreError::Query(format!(
                        "importance delta {delta} is not finite"
                    )));
                }
                if scopes.is_empty() {
                    return Ok(None);
                }
                let hold = gate(self.node(), tenant, hold);
                let adjust = statements::adjust_importance(
                    DIALECT,
                    tenant.as_str(),
                    scopes,
                    id,
                    delta,
                    hold.as_ref(),
                );
                let rows: Vec<ImportanceRow> = query(adjust)
                    .load(&mut *self.conn().await?)
                    .await
                    .map_err(write_error)?;
                Ok(rows.into_iter().next().map(|r| r.importance))
            }

            async fn ping(&self) -> Result<(), StoreError> {
                diesel::sql_query("SELECT id FROM memories LIMIT 1")
                    .load::<IdRow>(&mut *self.conn().await?)
                    .await?;
                Ok(())
            }
        }
    };
}

pub(crate) use memory_repository_impl;
