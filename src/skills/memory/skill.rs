//! `MemorySkill`: the memory engine behind the [`Skill`] interface — tool arguments in,
//! JSON results out.
//!
//! Arguments are parsed strictly (unknown fields refused, lowercase enums, every error
//! naming its field); the caller's tenant comes from [`Caller`], never from arguments.

use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::engine::MemoryEngine;
use super::requests::{
    AddMemory, MemoryFeedback, MemoryRef, SearchMemories, UpdateMemory, split_scope_ids,
};
use super::tools::tool_specs;
use crate::skills::{Caller, Skill, SkillError, SkillInfo, ToolSpec};
use crate::store::memories::{MemoryRecord, MemoryScope, ScopeField, ScopeIds};

/// The `memory` skill.
pub struct MemorySkill {
    engine: Arc<MemoryEngine>,
    info: SkillInfo,
    tools: Vec<ToolSpec>,
}

impl MemorySkill {
    /// The skill over `engine`; its tool schemas state the engine's limits.
    pub fn new(engine: Arc<MemoryEngine>) -> MemorySkill {
        let info = SkillInfo::new(
            "memory",
            "Memory",
            "Remembers facts and preferences per agent, user, session, project, team, org \
             and company, and finds them again by full-text (and, when configured, semantic) \
             search.",
        )
        .with_tags(&["memory", "search", "personalization"])
        .with_examples(&[
            "Remember that I prefer answers in French",
            "What do you know about my coffee preferences?",
            "Forget the note about the old deployment process",
        ]);
        let tools = tool_specs(engine.settings());
        MemorySkill {
            engine,
            info,
            tools,
        }
    }
}

/// Scope ids out, then the rest into `T`; errors name the offending field.
fn parse<T: DeserializeOwned>(arguments: Value) -> Result<(T, ScopeIds), SkillError> {
    let Value::Object(mut map) = arguments else {
        return Err(SkillError::InvalidArguments(
            "arguments: must be a JSON object".into(),
        ));
    };
    let ids = split_scope_ids(&mut map)?;
    let parsed = serde_path_to_error::deserialize(Value::Object(map)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        SkillError::InvalidArguments(if path == "." {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        })
    })?;
    Ok((parsed, ids))
}

fn scope_json(scope: &MemoryScope) -> Value {
    let ids: Map<String, Value> = ScopeField::ALL
        .into_iter()
        .filter_map(|f| scope.id(f).map(|id| (f.wire_name().to_owned(), json!(id))))
        .collect();
    Value::Object(ids)
}

/// A memory as the tools return it (the vector itself is not sent).
fn memory_json(memory: &MemoryRecord) -> Value {
    json!({
        "memoryId": memory.id,
        "content": memory.content,
        "layer": memory.scope.layer(),
        "scope": scope_json(&memory.scope),
        "tags": memory.tags,
        "metadata": memory.metadata,
        "importance": memory.importance,
        "hasEmbedding": memory.embedding.is_some(),
        "createdAt": memory.created_at.to_rfc3339(),
        "updatedAt": memory.updated_at.to_rfc3339(),
    })
}

#[async_trait]
impl Skill for MemorySkill {
    fn info(&self) -> &SkillInfo {
        &self.info
    }

    fn tools(&self) -> Vec<ToolSpec> {
        self.tools.clone()
    }

    async fn invoke(
        &self,
        tool: &str,
        arguments: Value,
        caller: &Caller,
    ) -> Result<Value, SkillError> {
        let tenant = &caller.tenant;
        match tool {
            "memory_add" => {
                let (mut request, ids): (AddMemory, _) = parse(arguments)?;
                request.ids = ids;
                let added = self.engine.add(tenant, request, caller.hold()).await?;
                Ok(json!({"memoryId": added.id, "duplicate": added.duplicate}))
            }
            "memory_search" => {
                let (mut request, ids): (SearchMemories, _) = parse(arguments)?;
                request.ids = ids;
                let found = self.engine.search(tenant, request).await?;
                let results: Vec<Value> = found
                    .hits
                    .iter()
                    .map(|hit| {
                        json!({
                            "memoryId": hit.memory.id,
                            "content": hit.memory.content,
                            "layer": hit.memory.scope.layer(),
                            "score": hit.score,
                            "tags": hit.memory.tags,
                            "importance": hit.memory.importance,
                        })
                    })
                    .collect();
                Ok(json!({
                    "totalCount": results.len(),
                    "results": results,
                    "searchedLayers": found.searched_layers,
                }))
            }
            "memory_get" => {
                let (mut request, ids): (MemoryRef, _) = parse(arguments)?;
                request.ids = ids;
                Ok(memory_json(&self.engine.get(tenant, request).await?))
            }
            "memory_update" => {
                let (mut request, ids): (UpdateMemory, _) = parse(arguments)?;
                request.ids = ids;
                Ok(memory_json(
                    &self.engine.update(tenant, request, caller.hold()).await?,
                ))
            }
            "memory_delete" => {
                let (mut request, ids): (MemoryRef, _) = parse(arguments)?;
                request.ids = ids;
                self.engine.delete(tenant, request, caller.hold()).await?;
                Ok(json!({"deleted": true}))
            }
            "memory_feedback" => {
                let (mut request, ids): (MemoryFeedback, _) = parse(arguments)?;
                request.ids = ids;
                let memory_id = request.memory_id.clone();
                let importance = self.engine.feedback(tenant, request, caller.hold()).await?;
                Ok(json!({"memoryId": memory_id, "importance": importance}))
            }
            other => Err(SkillError::NotFound(format!(
                "tool {other:?} (the memory skill has {})",
                super::tools::TOOL_NAMES.join(", ")
            ))),
        }
    }

    async fn health(&self) -> Result<(), String> {
        self.engine.health().await.map_err(|e| e.to_string())
    }
}
