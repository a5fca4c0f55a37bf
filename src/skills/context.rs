//! Session context: what an agent should know when a turn starts — the memories relevant
//! to the conversation and the governance constraints in force for the caller's scopes —
//! as data and as a block of text for the system instruction. Served as the
//! `session_context` tool, and callable directly by an agent loop.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::governance::{ActiveConstraint, GovernanceEngine, Scope, Severity};
use super::memory::{MemoryEngine, SearchMemories, split_scope_ids};
use super::{Caller, Skill, SkillError, SkillInfo, ToolSpec};
use crate::domain::TenantId;
use crate::store::memories::{ScopeField, ScopeIds};

/// The tool's name.
pub const SESSION_CONTEXT_TOOL: &str = "session_context";
/// Most memories one context holds.
const MAX_MEMORIES: usize = 20;

/// What a turn starts with.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionContext {
    /// `{memoryId, content, layer, score}`, best first.
    pub memories: Vec<Value>,
    /// Constraints at or above the requested severity, most specific layer first.
    pub constraints: Vec<ActiveConstraint>,
}

impl SessionContext {
    /// The text an agent adds to its system instruction (empty when there is nothing).
    pub fn system_prompt_additions(&self) -> String {
        let mut text = String::new();
        if !self.memories.is_empty() {
            text.push_str("## Relevant memories\n");
            for m in &self.memories {
                let layer = m["layer"].as_str().unwrap_or("memory");
                let content = m["content"].as_str().unwrap_or("");
                text.push_str(&format!("- ({layer}) {content}\n"));
            }
        }
        if !self.constraints.is_empty() {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str("## Active constraints\n");
            for c in &self.constraints {
                let severity = match c.severity {
                    Severity::Info => "INFO",
                    Severity::Warn => "WARN",
                    Severity::Block => "BLOCK",
                };
                text.push_str(&format!("- [{severity}] {} ({})\n", c.message, c.policy_id));
            }
        }
        text
    }
}

/// The `context` skill.
pub struct SessionContextSkill {
    memory: Option<Arc<MemoryEngine>>,
    governance: Arc<GovernanceEngine>,
    info: SkillInfo,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Request {
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    min_severity: Option<Severity>,
}

impl SessionContextSkill {
    /// Memories come from `memory` when the memory skill is enabled.
    pub fn new(memory: Option<Arc<MemoryEngine>>, governance: Arc<GovernanceEngine>) -> Self {
        let info = SkillInfo::new(
            "context",
            "Session context",
            "What an agent should know at the start of a turn: the memories relevant to the \
             conversation and the governance constraints in force for the caller's scopes.",
        )
        .with_tags(&["context", "memory", "governance"])
        .with_examples(&[
            r#"{"tool": "session_context", "arguments": {"query": "deployment", "userId": "u1", "projectId": "p1"}}"#,
        ]);
        Self {
            memory,
            governance,
            info,
        }
    }

    /// The context for `ids`: memories matching `query` (none without a query) and the
    /// constraints of at least `min_severity`.
    pub async fn session_context(
        &self,
        tenant: &TenantId,
        ids: ScopeIds,
        query: Option<String>,
        limit: usize,
        min_severity: Severity,
    ) -> Result<SessionContext, SkillError> {
        let scope = Scope {
            company_id: ids.get(ScopeField::CompanyId).map(str::to_owned),
            org_id: ids.get(ScopeField::OrgId).map(str::to_owned),
            team_id: ids.get(ScopeField::TeamId).map(str::to_owned),
            project_id: ids.get(ScopeField::ProjectId).map(str::to_owned),
        };
        let memories = match (&self.memory, query) {
            (Some(engine), Some(query))
                if !query.trim().is_empty() && !ids.covered_layers().is_empty() =>
            {
                let found = engine
                    .search(
                        tenant,
                        SearchMemories {
                            query,
                            layers: None,
                            tags: None,
                            limit: Some(limit),
                            threshold: None,
                            ids,
                        },
                    )
                    .await?;
                found
                    .hits
                    .iter()
                    .map(|hit| {
                        json!({
                            "memoryId": hit.memory.id,
                            "content": hit.memory.content,
                            "layer": hit.memory.scope.layer(),
                            "score": hit.score,
                        })
                    })
                    .collect()
            }
            _ => Vec::new(),
        };
        // Accepted knowledge policies are read from the repository: blocking work.
        let governance = self.governance.clone();
        let tenant_name = tenant.as_str().to_owned();
        let constraints =
            tokio::task::spawn_blocking(move || governance.constraints(&tenant_name, &scope))
                .await
                .map_err(|e| SkillError::Failed(format!("constraints task: {e}")))?
                .into_iter()
                .filter(|c| c.severity >= min_severity)
                .collect();
        Ok(SessionContext {
            memories,
            constraints,
        })
    }
}

#[async_trait]
impl Skill for SessionContextSkill {
    fn info(&self) -> &SkillInfo {
        &self.info
    }

    fn tools(&self) -> Vec<ToolSpec> {
        let id = |what: &str| json!({"type": "string", "minLength": 1, "description": what});
        vec![ToolSpec {
            name: SESSION_CONTEXT_TOOL.into(),
            description: "Memories relevant to `query` in the layers whose ids are given, the \
                          active constraints for the given company/org/team/project, and both \
                          rendered for a system instruction."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What the conversation is about; without it no memories are returned."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_MEMORIES, "description": "Most memories (default 10)."},
                    "minSeverity": {"type": "string", "enum": ["info", "warn", "block"], "description": "Least severity of the constraints listed (default warn)."},
                    "agentId": id("Agent id (agent layer, with userId)."),
                    "userId": id("User id (user, session and agent layers)."),
                    "sessionId": id("Session id (session layer, with userId)."),
                    "projectId": id("Project id."),
                    "teamId": id("Team id."),
                    "orgId": id("Organisation id."),
                    "companyId": id("Company id.")
                },
                "required": [],
                "additionalProperties": false
            }),
            output_schema: {
                use crate::skills::output::{array_of, object, of};
                object(
                    &["memories", "constraints", "systemPromptAdditions"],
                    json!({
                        "memories": array_of(object(
                            &["memoryId", "content", "layer", "score"],
                            json!({"memoryId": of("string"), "content": of("string"),
                                   "layer": of("string"), "score": of("number")}),
                        )),
                        "constraints": array_of(object(
                            &["policyId", "ruleId", "severity", "message"],
                            json!({"policyId": of("string"), "ruleId": of("string"),
                                   "severity": of("string"), "message": of("string")}),
                        )),
                        "systemPromptAdditions": of("string"),
                    }),
                )
            },
        }]
    }

    async fn invoke(
        &self,
        tool: &str,
        arguments: Value,
        caller: &Caller,
    ) -> Result<Value, SkillError> {
        if tool != SESSION_CONTEXT_TOOL {
            return Err(SkillError::NotFound(format!("tool {tool:?}")));
        }
        let mut object: Map<String, Value> = match arguments {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            _ => {
                return Err(SkillError::InvalidArguments(
                    "arguments: must be an object".into(),
                ));
            }
        };
        let ids = split_scope_ids(&mut object)?;
        let request: Request = serde_path_to_error::deserialize(Value::Object(object))
            .map_err(|e| SkillError::InvalidArguments(format!("{}: {}", e.path(), e.inner())))?;
        let limit = request.limit.unwrap_or(10).clamp(1, MAX_MEMORIES);
        let context = self
            .session_context(
                &caller.tenant,
                ids,
                request.query,
                limit,
                request.min_severity.unwrap_or(Severity::Warn),
            )
            .await?;
        Ok(json!({
            "memories": context.memories,
            "constraints": context.constraints,
            "systemPromptAdditions": context.system_prompt_additions(),
        }))
    }
}
