//! The skills a server runs unless its program brings its own: memory, knowledge and
//! governance, built from the settings and wired to each other. (The other tool sources,
//! remote agents and MCP servers, are `client`'s; `startup` registers them beside these.)
//!
//! The engines depend on each other in a circle — knowledge proposals (and memory
//! writes) are validated by governance, and governance reads the policies of accepted
//! knowledge items — so the knowledge engine is opened first, governance is built over
//! its policy source, and the knowledge engine is then given governance as its validator.

use std::sync::Arc;

use super::SkillRegistry;
use super::context::SessionContextSkill;
use super::governance::{
    GovernanceEngine, GovernanceSkill, PolicySource, RuleError, configured_policies,
};
use super::knowledge::{KnowledgeEngine, KnowledgeError, KnowledgeSkill};
use super::memory::{EmbeddingsError, MemoryEngine, MemorySkill};
use crate::config::{ConfigError, Settings};
use crate::store::{StoreConfig, StoreError};

/// Why the configured skills could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("governance policies: {0}")]
    Governance(#[from] RuleError),
    #[error("knowledge repository: {0}")]
    Knowledge(#[from] KnowledgeError),
    #[error("memory store: {0}")]
    MemoryStore(#[from] StoreError),
    #[error("memory embeddings: {0}")]
    Embeddings(#[from] EmbeddingsError),
    #[error("start-up task failed: {0}")]
    Join(String),
}

/// Builds the skills enabled in `settings`, in the order the card lists them. The memory
/// skill's repository opens on `store` (the store's database, and in cluster mode this
/// node's fence, which its writes check under a turn's hold).
pub async fn configured(
    settings: &Settings,
    store: &StoreConfig,
) -> Result<SkillRegistry, BootstrapError> {
    let knowledge = if settings.knowledge.enabled {
        let path = settings.knowledge_repo();
        let knowledge_settings = settings.knowledge.clone();
        // Opening creates the repository on first start: git work, off the async threads.
        let engine = tokio::task::spawn_blocking(move || {
            KnowledgeEngine::open(path, &knowledge_settings, None)
        })
        .await
        .map_err(|e| BootstrapError::Join(e.to_string()))??;
        Some(Arc::new(engine))
    } else {
        None
    };
    let source = knowledge
        .as_ref()
        .map(|k| Arc::new(k.policy_source()) as Arc<dyn PolicySource>);
    let governance = Arc::new(GovernanceEngine::new(
        configured_policies(&settings.governance)?,
        source,
    )?);
    let mut registry = SkillRegistry::default();
    let memory = if settings.memory.enabled {
        // The memory tables share the store's database (migrated by `store::open`).
        let repository = crate::store::open_memories(store)?;
        let engine = Arc::new(MemoryEngine::new(
            repository,
            settings.memory.clone(),
            Some(governance.clone()),
        )?);
        registry.register(Arc::new(MemorySkill::new(engine.clone())));
        Some(engine)
    } else {
        None
    };
    if let Some(knowledge) = knowledge {
        knowledge.set_validator(governance.clone());
        let hold_check = crate::store::memories::HoldCheck::open(store)?;
        registry.register(Arc::new(
            KnowledgeSkill::new(knowledge).with_hold_check(hold_check),
        ));
    }
    registry.register(Arc::new(GovernanceSkill::new(governance.clone())));
    registry.register(Arc::new(SessionContextSkill::new(memory, governance)));
    Ok(registry)
}
