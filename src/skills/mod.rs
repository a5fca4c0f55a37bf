//! Skills: named groups of tools (each with a JSON Schema for its input) that the agent
//! can call, directly or from a model's function calls.
//!
//! The registry is filled at start-up; the agent card lists every skill and its tools'
//! schemas. This module knows nothing about actix or wire formats.

pub mod governance;
pub mod memory;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::domain::{ContextId, TenantId};

/// One callable tool of a skill.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the `arguments` object.
    pub input_schema: Value,
}

/// Who is calling a tool.
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant: TenantId,
    pub context_id: ContextId,
}

/// Why a tool call failed. The first three are the caller's business (the task is
/// rejected with the message); `Failed` and `Unavailable` are ours (the detail is logged,
/// the caller gets a generic message).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SkillError {
    /// The arguments are wrong; the text names the field.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The thing the call names does not exist (in the caller's scope).
    #[error("not found: {0}")]
    NotFound(String),
    /// Governance refused the write; `report` lists the violations.
    #[error("blocked by governance: {message}")]
    Blocked { message: String, report: Value },
    /// The call failed for a reason inside the server (logged in full).
    #[error("tool failed: {0}")]
    Failed(String),
    /// A dependency (the database, the embeddings endpoint) is down: retry later.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// A skill: metadata for the card, and its tools.
#[async_trait]
pub trait Skill: Send + Sync + 'static {
    fn id(&self) -> &str;
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    fn tags(&self) -> Vec<String>;
    fn examples(&self) -> Vec<String>;
    fn tools(&self) -> Vec<ToolSpec>;
    async fn invoke(
        &self,
        tool: &str,
        arguments: Value,
        caller: &Caller,
    ) -> Result<Value, SkillError>;
}

/// The skills registered at start-up.
#[derive(Default, Clone)]
pub struct SkillRegistry {
    skills: Vec<Arc<dyn Skill>>,
}

impl SkillRegistry {
    pub fn register(&mut self, skill: Arc<dyn Skill>) {
        self.skills.push(skill);
    }

    pub fn skills(&self) -> &[Arc<dyn Skill>] {
        &self.skills
    }

    /// The skill owning `tool` (restricted to `skill_id` when given) and the tool's spec.
    pub fn find_tool(
        &self,
        tool: &str,
        skill_id: Option<&str>,
    ) -> Option<(Arc<dyn Skill>, ToolSpec)> {
        self.skills
            .iter()
            .filter(|s| skill_id.is_none_or(|id| s.id() == id))
            .find_map(|s| {
                s.tools()
                    .into_iter()
                    .find(|t| t.name == tool)
                    .map(|t| (s.clone(), t))
            })
    }

    /// Every tool name, in registration order.
    pub fn tool_names(&self) -> Vec<String> {
        self.skills
            .iter()
            .flat_map(|s| s.tools().into_iter().map(|t| t.name))
            .collect()
    }
}
