//! Rows of the `memories` table as raw SQL returns them, and their decoding into
//! [`MemoryRecord`]s (a row that does not decode is `StoreError::Corrupt`).

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Double, Nullable, Text};
use serde_json::{Map, Value};

use super::scope::{MemoryLayer, MemoryScope};
use super::{MemoryRecord, ScoredMemory};
use crate::domain::{TenantId, Timestamp};
use crate::store::StoreError;

/// Every column but the search-only ones, named as in `statements::COLUMNS`.
#[derive(Debug, QueryableByName)]
pub(crate) struct MemoryRow {
    #[diesel(sql_type = Text)]
    id: String,
    #[diesel(sql_type = Text)]
    tenant_id: String,
    #[diesel(sql_type = Text)]
    layer: String,
    #[diesel(sql_type = Text)]
    agent_id: String,
    #[diesel(sql_type = Text)]
    user_id: String,
    #[diesel(sql_type = Text)]
    session_id: String,
    #[diesel(sql_type = Text)]
    project_id: String,
    #[diesel(sql_type = Text)]
    team_id: String,
    #[diesel(sql_type = Text)]
    org_id: String,
    #[diesel(sql_type = Text)]
    company_id: String,
    #[diesel(sql_type = Text)]
    content: String,
    #[diesel(sql_type = Text)]
    content_hash: String,
    #[diesel(sql_type = Text)]
    tags: String,
    #[diesel(sql_type = Text)]
    metadata: String,
    #[diesel(sql_type = Double)]
    importance: f64,
    #[diesel(sql_type = Nullable<Text>)]
    embedding: Option<String>,
    #[diesel(sql_type = BigInt)]
    created_at: i64,
    #[diesel(sql_type = BigInt)]
    updated_at: i64,
}

/// A row with its full-text score.
#[derive(Debug, QueryableByName)]
pub(crate) struct ScoredRow {
    // Not named `row`: the derive's generated code has a variable of that name.
    #[diesel(embed)]
    memory: MemoryRow,
    #[diesel(sql_type = Double)]
    score: f64,
}

/// `RETURNING id` and `SELECT id`.
#[derive(Debug, QueryableByName)]
pub(crate) struct IdRow {
    #[diesel(sql_type = Text)]
    pub(crate) id: String,
}

/// `RETURNING importance`.
#[derive(Debug, QueryableByName)]
pub(crate) struct ImportanceRow {
    #[diesel(sql_type = Double)]
    pub(crate) importance: f64,
}

fn corrupt(id: &str, what: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("memory {id}: {what}: {detail}"))
}

impl MemoryRow {
    /// The record this row stores.
    pub(crate) fn into_record(self) -> Result<MemoryRecord, StoreError> {
        let id = self.id;
        let tenant = TenantId::from_store(self.tenant_id).map_err(|e| corrupt(&id, "tenant", e))?;
        let layer =
            MemoryLayer::parse(&self.layer).ok_or_else(|| corrupt(&id, "layer", &self.layer))?;
        let columns = [
            self.agent_id,
            self.user_id,
            self.session_id,
            self.project_id,
            self.team_id,
            self.org_id,
            self.company_id,
        ];
        let scope = MemoryScope::from_columns(layer, columns)
            .ok_or_else(|| corrupt(&id, "scope", "ids do not match the layer"))?;
        let tags: Vec<String> =
            serde_json::from_str(&self.tags).map_err(|e| corrupt(&id, "tags", e))?;
        let metadata: Map<String, Value> =
            serde_json::from_str(&self.metadata).map_err(|e| corrupt(&id, "metadata", e))?;
        let embedding = match self.embedding {
            Some(json) => {
                Some(serde_json::from_str(&json).map_err(|e| corrupt(&id, "embedding", e))?)
            }
            None => None,
        };
        Ok(MemoryRecord {
            id,
            tenant,
            scope,
            content: self.content,
            content_hash: self.content_hash,
            tags,
            metadata,
            importance: self.importance,
            embedding,
            created_at: Timestamp(self.created_at),
            updated_at: Timestamp(self.updated_at),
        })
    }
}

impl ScoredRow {
    /// The record with its score, a non-finite rank counting as 0.
    pub(crate) fn into_scored(self) -> Result<ScoredMemory, StoreError> {
        Ok(ScoredMemory {
            memory: self.memory.into_record()?,
            // A rank the database could not compute is no evidence of relevance.
            score: if self.score.is_finite() {
                self.score.clamp(0.0, 1.0)
            } else {
                0.0
            },
        })
    }
}
