//! `[skills]`, `[memory]`, `[knowledge]` and `[governance]`: the limits every skill's
//! actor enforces, and the settings of the three skills the server comes with.
//!
//! Governance policies are plain data here, with enums of their own: the governance skill
//! maps them onto its vocabulary and checks their rules (`skills::governance::configured`)
//! when the server starts.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{ConfigError, positive};

/// Limits every skill's actor enforces (`[skills]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SkillSettings {
    /// Calls one skill runs at once; more wait.
    pub max_concurrency: usize,
    /// How long one tool call may take, in ms (then it fails with a timeout).
    pub timeout_ms: u64,
}

impl Default for SkillSettings {
    fn default() -> Self {
        Self {
            max_concurrency: 64,
            timeout_ms: 30_000,
        }
    }
}

/// The memory skill (`[memory]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemorySettings {
    /// Register the memory skill.
    pub enabled: bool,
    /// Results of `memory_search` when the caller gives no limit.
    pub default_limit: usize,
    /// Most results one search may ask for.
    pub max_limit: usize,
    /// Largest memory content in bytes.
    pub max_content_bytes: usize,
    /// OpenAI-compatible base URL for `/embeddings` (e.g. `http://127.0.0.1:11434/v1`);
    /// empty: full-text search only.
    pub embeddings_url: String,
    pub embeddings_model: String,
    /// Name of the environment variable holding the embeddings API key (empty: none).
    pub embeddings_api_key_env: String,
    pub embeddings_timeout_ms: u64,
    /// Most memories of one scope compared by embedding in one search.
    pub max_scan: usize,
}

impl Default for MemorySettings {
    fn default() -> Self {
        Self {
            enabled: true,
            default_limit: 10,
            max_limit: 100,
            max_content_bytes: 64 * 1024,
            embeddings_url: String::new(),
            embeddings_model: String::new(),
            embeddings_api_key_env: String::new(),
            embeddings_timeout_ms: 10_000,
            max_scan: 5_000,
        }
    }
}

/// The knowledge skill and its git repository (`[knowledge]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KnowledgeSettings {
    /// Register the knowledge skill.
    pub enabled: bool,
    /// The git repository; empty: `<store.data_dir>/knowledge` (created on first start).
    pub repo_path: PathBuf,
    /// Committer of every change (the caller is recorded as the author when known).
    pub author_name: String,
    pub author_email: String,
    /// Largest item (front matter and body) in bytes.
    pub max_item_bytes: usize,
    /// Results of `knowledge_query` when the caller gives no limit.
    pub default_limit: usize,
}

impl Default for KnowledgeSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            repo_path: PathBuf::new(),
            author_name: "agent-a2a".into(),
            author_email: "agent-a2a@localhost".into(),
            max_item_bytes: 256 * 1024,
            default_limit: 10,
        }
    }
}

/// The governance skill's policies from configuration (`[governance]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct GovernanceSettings {
    /// Policies from configuration (`[[governance.policies]]`); accepted knowledge items
    /// of type `policy` add to them.
    pub policies: Vec<PolicySettings>,
}

/// One `[[governance.policies]]`, as plain data: the governance skill maps it onto its
/// own types and checks its rules (a regex that does not compile, a missing value) when
/// the server starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySettings {
    pub id: String,
    pub layer: PolicyLayer,
    #[serde(default)]
    pub mode: PolicyMode,
    /// The company, org, team or project (matching `layer`) it applies to; `None`: every
    /// one of that layer.
    #[serde(default)]
    pub scope_id: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    pub rules: Vec<RuleSettings>,
}

/// One rule of a configured policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSettings {
    pub id: String,
    pub target: RuleTarget,
    pub operator: RuleOperator,
    /// The value or regex; required by every operator but `must_exist`/`must_not_exist`.
    #[serde(default)]
    pub value: Option<String>,
    pub severity: RuleSeverity,
    /// Shown to whoever breaks the rule.
    pub message: String,
}

/// The layer a policy is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyLayer {
    Project,
    Team,
    Org,
    Company,
}

/// Whether a more specific layer may replace a policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyMode {
    /// Applies below its layer whatever lower layers say.
    Mandatory,
    /// A policy with the same id at a more specific layer replaces it.
    #[default]
    Optional,
}

/// What part of the checked input a rule reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleTarget {
    Content,
    Path,
    Dependency,
    Tool,
}

/// How a rule judges its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleOperator {
    MustUse,
    MustNotUse,
    MustMatch,
    MustNotMatch,
    MustExist,
    MustNotExist,
}

/// How much a broken rule matters; only `block` fails a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleSeverity {
    Info,
    Warn,
    Block,
}

impl SkillSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        positive("skills.max_concurrency", self.max_concurrency as u64)?;
        positive("skills.timeout_ms", self.timeout_ms)
    }
}

impl MemorySettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        positive("memory.default_limit", self.default_limit as u64)?;
        positive("memory.max_limit", self.max_limit as u64)?;
        positive("memory.max_content_bytes", self.max_content_bytes as u64)?;
        positive("memory.embeddings_timeout_ms", self.embeddings_timeout_ms)?;
        positive("memory.max_scan", self.max_scan as u64)
    }
}

impl KnowledgeSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        positive("knowledge.max_item_bytes", self.max_item_bytes as u64)?;
        positive("knowledge.default_limit", self.default_limit as u64)
    }
}
