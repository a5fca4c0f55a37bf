//! Knowledge: architecture decisions, policies, patterns and specs, kept as Markdown
//! files with TOML front matter in a git repository (`<tenant>/<layer>/<path>.md`).
//!
//! Code map:
//! - `paths`: item paths, tenants and ids, and the on-disk checks that keep every file
//!   inside its tenant's layer folder;
//! - `item`: the item file format; `fields`: checks on client-given fields;
//!   `lifecycle`: the status graph;
//! - `repo`: git (one commit per write, deletions included; a file's own history);
//! - `working_tree`: reading items back; `query`: query, check and policies over them;
//! - `engine`: [`KnowledgeEngine`], the operations and their rules;
//! - `skill`: [`KnowledgeSkill`], the `knowledge_*` tools; `schema`: their JSON Schemas.
//!
//! **Architecture invariant:** nothing is written outside `<repo>/<tenant>/<layer>/`,
//! and nothing is written without a commit; git work never runs on an async thread.

mod error;
mod fields;
mod item;
mod lifecycle;
mod paths;
mod query;
mod repo;
mod resolve;
mod schema;
#[cfg(test)]
mod test_fixtures;
mod working_tree;

/// The knowledge engine and its inputs and outputs.
pub mod engine;
/// The `knowledge` skill.
pub mod skill;

pub use engine::{Deleted, KnowledgeEngine, ProposeInput, Shown, StatusChange, Updated};
pub use error::KnowledgeError;
pub use item::{FrontMatter, Item, ItemType};
pub use lifecycle::{Status, TransitionError};
pub use paths::{ItemId, ItemPath, PathError, TenantDir};
pub use query::{CheckInput, KnowledgePolicies, QueryInput, QueryResult};
pub use repo::{CommitInfo, KnowledgeRepo};
pub use skill::KnowledgeSkill;
