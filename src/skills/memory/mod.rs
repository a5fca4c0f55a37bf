//! The memory skill: what an agent remembers about its users, their sessions, projects,
//! teams, organisations and companies, found again by full-text search (blended with
//! embedding similarity when an embeddings endpoint is configured).
//!
//! - `requests.rs`: typed requests and their checks;
//! - `engine.rs`: [`MemoryEngine`], scoping, governance, embeddings and ranking rules;
//! - `ranking.rs`: scores and the ranking order;
//! - `embeddings.rs`: the OpenAI-compatible embeddings client;
//! - `tools.rs` and `skill.rs`: the six tools and [`MemorySkill`].
//!
//! Storage is [`crate::store::memories`]. Building the skill:
//! `store::open_memories(&store_config)?` → `MemoryEngine::new(repo, settings.memory,
//! validator)?` → `MemorySkill::new(Arc::new(engine))`.

mod embeddings;
mod engine;
mod ranking;
mod requests;
mod skill;
#[cfg(test)]
mod tests;
mod tools;

pub use embeddings::{EmbeddingsClient, EmbeddingsError, MAX_DIMENSIONS, MAX_RESPONSE_BYTES};
pub use engine::{DEFAULT_IMPORTANCE, FEEDBACK_STEP, MemoryEngine, SearchResults};
pub use ranking::{EMBEDDING_WEIGHT, TEXT_WEIGHT, cosine};
pub use requests::{
    AddMemory, FeedbackKind, MAX_TAG_BYTES, MAX_TAGS, MemoryFeedback, MemoryRef, SearchMemories,
    UpdateMemory, split_scope_ids,
};
pub use skill::MemorySkill;
pub use tools::{TOOL_NAMES, tool_specs};
