//! The memory engine: checks a request, asks governance about writes, embeds when an
//! embeddings endpoint is configured, and runs the request against the repository.
//!
//! Decisions worth knowing:
//! - **Scopes.** A write names its layer and must give that layer's ids. Reads (get,
//!   update, delete, feedback) reach a memory only through a layer whose ids the caller
//!   gave. A search covers the requested layers (each must have its ids) or, by default,
//!   every layer whose ids are given.
//! - **Ranking.** Layers are searched most specific first; within a layer hits are
//!   ranked by score, then recency. Once `limit` hits are found no broader layer can
//!   enter the page, so the search stops there. A hit needs a score above 0 and at least
//!   `threshold` (default 0: every match).
//! - **Embeddings.** A failing endpoint fails a search (`Unavailable`: without the query
//!   vector the ranking would silently change), but not an add or update: the memory is
//!   stored without a vector (a warning is logged) and stays findable by its words.
//! - **Feedback.** `importance = clamp(importance + 0.25 · reward, 0, 1)`, applied
//!   atomically in the database: four fully helpful votes take a new memory (0.5) to
//!   1.0, two fully unhelpful ones to 0. The kind is logged, not stored.

use std::sync::Arc;

use crate::config::MemorySettings;
use crate::domain::{TenantId, Timestamp};
use crate::skills::SkillError;
use crate::skills::governance::{EvalContext, Scope, Validator};
use crate::store::StoreError;
use crate::store::fence::ThreadHold;
use crate::store::memories::{
    Added, MemoryChange, MemoryLayer, MemoryRecord, MemoryRepository, MemoryScope, NewMemory,
    ScopeField, ScopeIds, ScoredMemory, TextQuery,
};

use super::embeddings::{EmbeddingsClient, EmbeddingsError};
use super::ranking;
use super::requests::{
    AddMemory, MemoryFeedback, MemoryRef, SearchMemories, UpdateMemory, check_ids, check_memory_id,
    check_metadata, check_range, check_text, normalise_tags,
};

/// Importance of a new memory.
pub const DEFAULT_IMPORTANCE: f64 = 0.5;
/// How far one unit of reward moves importance.
pub const FEEDBACK_STEP: f64 = 0.25;

/// The outcome of a search.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchResults {
    /// Ranked best first.
    pub hits: Vec<ScoredMemory>,
    /// The layers searched, most specific first.
    pub searched_layers: Vec<MemoryLayer>,
}

/// Memories of a tenant: add, search, get, update, delete, feedback.
pub struct MemoryEngine {
    repo: Arc<dyn MemoryRepository>,
    settings: MemorySettings,
    validator: Option<Arc<dyn Validator>>,
    embeddings: Option<EmbeddingsClient>,
}

fn invalid(message: impl Into<String>) -> SkillError {
    SkillError::InvalidArguments(message.into())
}

fn not_found(id: &str) -> SkillError {
    SkillError::NotFound(format!("memory {id} (in the scopes given)"))
}

/// The layers a caller can reach with `ids`: every layer whose ids are all given.
fn reachable_scopes(ids: &ScopeIds) -> Result<Vec<MemoryScope>, SkillError> {
    check_ids(ids)?;
    let scopes: Vec<MemoryScope> = ids
        .covered_layers()
        .into_iter()
        .filter_map(|layer| MemoryScope::new(layer, ids).ok())
        .collect();
    if scopes.is_empty() {
        return Err(invalid(
            "scope ids: give the ids of the memory's layer (e.g. userId, or userId and sessionId)",
        ));
    }
    Ok(scopes)
}

impl MemoryEngine {
    /// An engine over `repo`; with an embeddings client when `settings.embeddings_url`
    /// is set, and validating writes with `validator` when there is one.
    pub fn new(
        repo: Arc<dyn MemoryRepository>,
        settings: MemorySettings,
        validator: Option<Arc<dyn Validator>>,
    ) -> Result<MemoryEngine, EmbeddingsError> {
        let embeddings = EmbeddingsClient::from_settings(&settings)?;
        Ok(MemoryEngine {
            repo,
            settings,
            validator,
            embeddings,
        })
    }

    /// The settings it was built with (limits, embeddings endpoint).
    pub fn settings(&self) -> &MemorySettings {
        &self.settings
    }

    /// Whether the memories can be reached: a round trip to their table. The embeddings
    /// endpoint is not called (it may be paid for per request; a failing one shows in
    /// search errors).
    pub async fn health(&self) -> Result<(), SkillError> {
        self.repo.ping().await.map_err(SkillError::from)
    }

    /// Stores a memory (or reports the existing duplicate).
    pub async fn add(
        &self,
        tenant: &TenantId,
        request: AddMemory,
        hold: Option<ThreadHold<'_>>,
    ) -> Result<Added, SkillError> {
        check_ids(&request.ids)?;
        let scope =
            MemoryScope::new(request.layer, &request.ids).map_err(|e| invalid(e.to_string()))?;
        check_text("content", &request.content, self.settings.max_content_bytes)?;
        let tags = normalise_tags(request.tags)?;
        let metadata = check_metadata(request.metadata, self.settings.max_content_bytes)?;
        self.govern(tenant, &request.ids, &request.content)?;
        let embedding = self.embed_for_storage(&request.content).await;
        let memory = NewMemory {
            tenant: tenant.clone(),
            scope,
            content: request.content,
            tags,
            metadata: metadata.unwrap_or_default(),
            importance: DEFAULT_IMPORTANCE,
            embedding,
            at: Timestamp::now(),
        };
        self.repo.add(&memory, hold).await.map_err(SkillError::from)
    }

    /// Ranked memories of the requested (or all given) layers matching `query`.
    pub async fn search(
        &self,
        tenant: &TenantId,
        request: SearchMemories,
    ) -> Result<SearchResults, SkillError> {
        check_ids(&request.ids)?;
        let scopes = self.search_scopes(request.layers.as_deref(), &request.ids)?;
        let limit = match request.limit {
            None => self.settings.default_limit,
            Some(n) if (1..=self.settings.max_limit).contains(&n) => n,
            Some(_) => {
                return Err(invalid(format!(
                    "limit: must be from 1 to {}",
                    self.settings.max_limit
                )));
            }
        };
        let threshold = check_range("threshold", request.threshold.unwrap_or(0.0), 0.0, 1.0)?;
        let tags = normalise_tags(request.tags)?;
        check_text("query", &request.query, self.settings.max_content_bytes)?;
        let query = TextQuery::parse(&request.query)
            .ok_or_else(|| invalid("query: has no words to search for"))?;
        let query_vector = match &self.embeddings {
            Some(client) => Some(client.embed(&request.query).await.map_err(|e| {
                tracing::warn!(error = %e, "memory search: no query embedding");
                SkillError::Unavailable(e.to_string())
            })?),
            None => None,
        };

        let mut hits: Vec<ScoredMemory> = Vec::new();
        for scope in &scopes {
            if hits.len() >= limit {
                break;
            }
            let candidates = match &query_vector {
                None => self
                    .repo
                    .search_text(tenant, scope, &query, &tags, limit)
                    .await
                    .map_err(SkillError::from)?,
                Some(vector) => {
                    // Every scanned memory needs its text score too, so the text side
                    // is asked for as many candidates as the scan.
                    let max = self.settings.max_scan;
                    let text = self.repo.search_text(tenant, scope, &query, &tags, max);
                    let scanned = self.repo.scan_with_embeddings(tenant, scope, &tags, max);
                    let (text, scanned) =
                        tokio::try_join!(text, scanned).map_err(SkillError::from)?;
                    ranking::blend(text, scanned, vector)
                }
            };
            let mut layer_hits: Vec<ScoredMemory> = candidates
                .into_iter()
                .filter(|h| h.score > 0.0 && h.score >= threshold)
                .collect();
            ranking::rank(&mut layer_hits);
            layer_hits.truncate(limit - hits.len());
            hits.extend(layer_hits);
        }
        Ok(SearchResults {
            hits,
            searched_layers: scopes.iter().map(MemoryScope::layer).collect(),
        })
    }

    /// One memory reachable with the given ids.
    pub async fn get(
        &self,
        tenant: &TenantId,
        request: MemoryRef,
    ) -> Result<MemoryRecord, SkillError> {
        check_memory_id(&request.memory_id)?;
        let scopes = reachable_scopes(&request.ids)?;
        self.repo
            .get(tenant, &scopes, &request.memory_id)
            .await
            .map_err(SkillError::from)?
            .ok_or_else(|| not_found(&request.memory_id))
    }

    /// Changes content, tags and/or metadata; new content is validated and re-embedded.
    pub async fn update(
        &self,
        tenant: &TenantId,
        request: UpdateMemory,
        hold: Option<ThreadHold<'_>>,
    ) -> Result<MemoryRecord, SkillError> {
        check_memory_id(&request.memory_id)?;
        let scopes = reachable_scopes(&request.ids)?;
        if request.content.is_none() && request.tags.is_none() && request.metadata.is_none() {
            return Err(invalid(
                "content, tags, metadata: give at least one to change",
            ));
        }
        let tags = match request.tags {
            Some(tags) => Some(normalise_tags(Some(tags))?),
            None => None,
        };
        let metadata = check_metadata(request.metadata, self.settings.max_content_bytes)?;
        let mut change = MemoryChange::at(Timestamp::now());
        if let Some(content) = request.content {
            check_text("content", &content, self.settings.max_content_bytes)?;
            self.govern(tenant, &request.ids, &content)?;
            change.embedding = self.embed_for_storage(&content).await;
            change.content = Some(content);
        }
        change.tags = tags;
        change.metadata = metadata;
        match self
            .repo
            .update(tenant, &scopes, &request.memory_id, &change, hold)
            .await
        {
            Ok(Some(memory)) => Ok(memory),
            Ok(None) => Err(not_found(&request.memory_id)),
            Err(StoreError::Conflict(_)) => Err(invalid(
                "content: another memory of the same scope already has this content",
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes one memory reachable with the given ids.
    pub async fn delete(
        &self,
        tenant: &TenantId,
        request: MemoryRef,
        hold: Option<ThreadHold<'_>>,
    ) -> Result<(), SkillError> {
        check_memory_id(&request.memory_id)?;
        let scopes = reachable_scopes(&request.ids)?;
        let deleted = self
            .repo
            .delete(tenant, &scopes, &request.memory_id, hold)
            .await
            .map_err(SkillError::from)?;
        if deleted {
            Ok(())
        } else {
            Err(not_found(&request.memory_id))
        }
    }

    /// Applies feedback; returns the new importance.
    pub async fn feedback(
        &self,
        tenant: &TenantId,
        request: MemoryFeedback,
        hold: Option<ThreadHold<'_>>,
    ) -> Result<f64, SkillError> {
        check_memory_id(&request.memory_id)?;
        let scopes = reachable_scopes(&request.ids)?;
        let reward = check_range("reward", request.reward, -1.0, 1.0)?;
        if let Some(reasoning) = &request.reasoning {
            check_text("reasoning", reasoning, self.settings.max_content_bytes)?;
        }
        let importance = self
            .repo
            .adjust_importance(
                tenant,
                &scopes,
                &request.memory_id,
                FEEDBACK_STEP * reward,
                hold,
            )
            .await
            .map_err(SkillError::from)?
            .ok_or_else(|| not_found(&request.memory_id))?;
        tracing::info!(
            tenant = tenant.as_str(),
            memory_id = request.memory_id,
            kind = request.kind.as_str(),
            reward,
            importance,
            "memory feedback"
        );
        Ok(importance)
    }

    /// The scopes of a search, most specific first.
    fn search_scopes(
        &self,
        layers: Option<&[MemoryLayer]>,
        ids: &ScopeIds,
    ) -> Result<Vec<MemoryScope>, SkillError> {
        let Some(requested) = layers else {
            return reachable_scopes(ids);
        };
        if requested.is_empty() {
            return Err(invalid(
                "layers: must not be empty (omit it to search every layer given)",
            ));
        }
        let mut layers = requested.to_vec();
        layers.sort_by_key(|l| l.precedence());
        layers.dedup();
        layers
            .into_iter()
            .map(|layer| MemoryScope::new(layer, ids).map_err(|e| invalid(e.to_string())))
            .collect()
    }

    /// Refuses a write that governance blocks (only `block` violations do).
    fn govern(&self, tenant: &TenantId, ids: &ScopeIds, content: &str) -> Result<(), SkillError> {
        let Some(validator) = &self.validator else {
            return Ok(());
        };
        let scope = Scope {
            company_id: ids.get(ScopeField::CompanyId).map(str::to_owned),
            org_id: ids.get(ScopeField::OrgId).map(str::to_owned),
            team_id: ids.get(ScopeField::TeamId).map(str::to_owned),
            project_id: ids.get(ScopeField::ProjectId).map(str::to_owned),
        };
        let report = validator.validate(tenant.as_str(), &scope, &EvalContext::content(content));
        if report.passed {
            return Ok(());
        }
        let reasons: Vec<&str> = report
            .violations
            .iter()
            .filter(|v| v.severity == crate::skills::governance::Severity::Block)
            .map(|v| v.message.as_str())
            .collect();
        let message = format!(
            "the memory was refused by governance: {}",
            reasons.join("; ")
        );
        let report = serde_json::to_value(&report)
            .map_err(|e| SkillError::Failed(format!("encoding a governance report: {e}")))?;
        Err(SkillError::Blocked { message, report })
    }

    /// The embedding to store with `content`, if an endpoint is configured and answers.
    async fn embed_for_storage(&self, content: &str) -> Option<Vec<f32>> {
        let client = self.embeddings.as_ref()?;
        match client.embed(content).await {
            Ok(vector) => Some(vector),
            Err(e) => {
                tracing::warn!(error = %e, "storing the memory without an embedding");
                None
            }
        }
    }
}
