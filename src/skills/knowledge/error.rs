//! Every way a knowledge operation can fail, and what the caller of a tool sees of it.
//!
//! The caller's mistakes (bad arguments, unsafe paths, refused transitions, an existing
//! item, a governance block) carry a message meant for them; repository failures (git,
//! I/O, an unreadable file) are logged in full and reported as a generic failure.

use std::io;

use super::lifecycle::TransitionError;
use super::paths::PathError;
use crate::skills::SkillError;
use crate::skills::governance::Report;

/// The error of every knowledge engine operation.
#[derive(Debug, thiserror::Error)]
pub enum KnowledgeError {
    /// An argument is wrong; the text names it.
    #[error("{0}")]
    InvalidArguments(String),
    /// A path, tenant or item id that cannot be used (see [`PathError`]).
    #[error(transparent)]
    Path(#[from] PathError),
    /// A status change the lifecycle does not allow.
    #[error(transparent)]
    Lifecycle(#[from] TransitionError),
    /// No item with that id for this tenant.
    #[error("item {0} not found")]
    NotFound(String),
    /// An item with that id already exists.
    #[error("item {0} already exists")]
    Conflict(String),
    /// The item (front matter and body) is over `knowledge.max_item_bytes`.
    #[error("the item is {size} bytes, over the limit of {limit}")]
    TooLarge { size: usize, limit: usize },
    /// Governance refused the proposal; nothing was written.
    #[error("{message}")]
    Blocked { message: String, report: Report },
    /// A stored item could not be read back (edited by hand, or damaged).
    #[error("item {id} is unreadable: {reason}")]
    Corrupt { id: String, reason: String },
    #[error("git: {0}")]
    Git(#[from] git2::Error),
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
}

impl From<KnowledgeError> for SkillError {
    fn from(err: KnowledgeError) -> SkillError {
        match err {
            KnowledgeError::InvalidArguments(message) => SkillError::InvalidArguments(message),
            KnowledgeError::Path(e) => SkillError::InvalidArguments(e.to_string()),
            KnowledgeError::Lifecycle(e) => SkillError::InvalidArguments(e.to_string()),
            KnowledgeError::NotFound(id) => SkillError::NotFound(format!("knowledge item {id}")),
            // `SkillError` has no conflict kind; it is the caller's to fix, so it is
            // reported like an argument error, naming the item.
            e @ KnowledgeError::Conflict(_) => SkillError::Conflict(e.to_string()),
            e @ KnowledgeError::TooLarge { .. } => SkillError::InvalidArguments(e.to_string()),
            KnowledgeError::Blocked { message, report } => SkillError::Blocked {
                message,
                report: serde_json::to_value(&report).unwrap_or_default(),
            },
            e @ (KnowledgeError::Corrupt { .. }
            | KnowledgeError::Git(_)
            | KnowledgeError::Io(_)) => {
                tracing::error!(error = %e, "knowledge repository failure");
                SkillError::Failed("the knowledge repository failed".into())
            }
        }
    }
}
