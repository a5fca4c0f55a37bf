//! The knowledge engine: proposing items, moving them through their lifecycle, deleting,
//! showing, querying and checking — every rule of the knowledge contract in one place.
//!
//! Every method blocks (git and file I/O); the skill calls them through
//! `spawn_blocking`. A write holds the repository's writer for its whole
//! read-check-write, so "does it exist / what is its status" cannot change under it.
//! Governance is consulted before anything is written, and without the lock held.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use super::error::KnowledgeError;
use super::fields::{
    check_check, check_constraints, check_query, check_reason, check_tags, check_title, invalid,
};
use super::item::{Document, DocumentError, FrontMatter, Item, ItemType};
use super::lifecycle::{self, Status};
use super::paths::{ItemId, ItemPath, TenantDir};
use super::query::{self, CheckInput, KnowledgePolicies, QueryInput, QueryResult};
use super::repo::{CommitInfo, KnowledgeRepo};
use super::resolve;
use super::working_tree::WorkingTree;
use crate::config::KnowledgeSettings;
use crate::domain::Timestamp;
use crate::skills::governance::{
    EvalContext, Layer, Mode, PolicySource, PolicySpec, Report, RuleSpec, Scope, Validator,
};

/// Most history entries `show` returns.
pub const MAX_HISTORY: usize = 100;

/// A new item.
#[derive(Debug, Clone, PartialEq)]
pub struct ProposeInput {
    pub layer: Layer,
    pub path: ItemPath,
    pub item_type: ItemType,
    pub title: String,
    pub body: String,
    pub tags: Vec<String>,
    pub constraints: Vec<RuleSpec>,
    /// Policies only: whether lower layers may override it (default optional).
    pub mode: Option<Mode>,
    /// `draft` (the default) or `proposed`.
    pub status: Option<Status>,
    /// Where the proposal is made, for choosing the governance policies that apply.
    pub scope: Scope,
}

/// A requested status change.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusChange {
    pub status: Status,
    /// Recorded in the commit message.
    pub reason: Option<String>,
    /// Required with, and only with, `superseded`: an accepted item of the same tenant.
    pub superseded_by: Option<ItemId>,
}

/// An item and, when asked for, the commits that touched it (newest first).
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub item: Item,
    pub history: Option<Vec<CommitInfo>>,
}

/// An item after a status change, and the status it had.
#[derive(Debug, Clone, PartialEq)]
pub struct Updated {
    pub item: Item,
    pub previous: Status,
}

/// A deleted item and the commit that deleted it.
#[derive(Debug, Clone, PartialEq)]
pub struct Deleted {
    pub id: ItemId,
    pub commit: CommitInfo,
}

/// Knowledge items of every tenant, in one git repository.
pub struct KnowledgeEngine {
    repo: KnowledgeRepo,
    tree: WorkingTree,
    max_item_bytes: usize,
    default_limit: usize,
    validator: OnceLock<Arc<dyn Validator>>,
}

impl KnowledgeEngine {
    /// Opens (or creates) the repository at `repo_path` — usually
    /// `Settings::knowledge_repo()` — committing as `settings.author_name`/`author_email`.
    /// Blocks: call it at start-up or through `spawn_blocking`.
    pub fn open(
        repo_path: impl AsRef<Path>,
        settings: &KnowledgeSettings,
        validator: Option<Arc<dyn Validator>>,
    ) -> Result<KnowledgeEngine, KnowledgeError> {
        let repo = KnowledgeRepo::open_or_init(
            repo_path.as_ref(),
            &settings.author_name,
            &settings.author_email,
        )?;
        let tree = WorkingTree::new(repo.root().to_path_buf(), settings.max_item_bytes);
        let engine = KnowledgeEngine {
            repo,
            tree,
            max_item_bytes: settings.max_item_bytes,
            default_limit: settings.default_limit,
            validator: OnceLock::new(),
        };
        if let Some(v) = validator {
            engine.set_validator(v);
        }
        Ok(engine)
    }

    /// Sets the validator proposals go through, when it could not be given to
    /// [`KnowledgeEngine::open`] (the governance engine is built from this engine's
    /// [`policy_source`](Self::policy_source)). Returns `false` if one was already set.
    pub fn set_validator(&self, validator: Arc<dyn Validator>) -> bool {
        self.validator.set(validator).is_ok()
    }

    /// The policies of accepted `policy` items, as a source the governance engine can
    /// own without owning this engine.
    pub fn policy_source(&self) -> KnowledgePolicies {
        KnowledgePolicies::new(self.tree.clone())
    }

    /// The git repository (for its history and HEAD).
    pub fn repository(&self) -> &KnowledgeRepo {
        &self.repo
    }

    /// Creates an item, in one commit authored by `author`. Refused before anything is
    /// written when an argument is wrong, the item is too large, governance blocks its
    /// body, or an item already exists at that path.
    pub fn propose(
        &self,
        tenant: &str,
        author: &str,
        input: ProposeInput,
    ) -> Result<Item, KnowledgeError> {
        let tenant = TenantDir::parse(tenant)?;
        let status = input.status.unwrap_or(Status::Draft);
        lifecycle::check_initial(status)?;
        let title = check_title(&input.title)?;
        let tags = check_tags(&input.tags)?;
        check_constraints(&input.constraints)?;
        if input.mode.is_some() && input.item_type != ItemType::Policy {
            return Err(invalid("`mode` applies to items of type policy only"));
        }
        let id = ItemId::new(input.layer, input.path);
        let now = Timestamp::now();
        let doc = Document {
            front: FrontMatter {
                item_type: input.item_type,
                status,
                title,
                tags,
                mode: input.mode,
                superseded_by: None,
                created_at: now,
                updated_at: now,
                author: author.to_owned(),
                constraints: input.constraints,
            },
            body: input.body,
        };
        let text = self.render(&doc)?;
        if let Some(validator) = self.validator.get() {
            let ctx = EvalContext {
                content: Some(doc.body.clone()),
                path: Some(id.path.to_string()),
                ..EvalContext::default()
            };
            let report = validator.validate(tenant.as_str(), &input.scope, &ctx);
            if !report.passed {
                return Err(KnowledgeError::Blocked {
                    message: format!(
                        "governance refused {id}: {} blocking violation(s)",
                        report.counts.block
                    ),
                    report,
                });
            }
        }

        let mut writer = self.repo.writer();
        if resolve::resolve_for_read(self.repo.root(), &tenant, &id)?.is_some() {
            return Err(KnowledgeError::Conflict(id.to_string()));
        }
        let message = format!(
            "Create {id} as {status}: {}\n\nTenant: {}",
            doc.front.title,
            tenant.as_str()
        );
        let commit = writer.write(&tenant, &id, text.as_bytes(), author, &message)?;
        Ok(Item {
            id,
            front: doc.front,
            body: doc.body,
            commit: Some(commit.id),
        })
    }

    /// Moves an item along its lifecycle, in one commit authored by `author`.
    pub fn update_status(
        &self,
        tenant: &str,
        author: &str,
        id: &ItemId,
        change: StatusChange,
    ) -> Result<Updated, KnowledgeError> {
        let tenant = TenantDir::parse(tenant)?;
        let reason = check_reason(change.reason.as_deref())?;
        let mut writer = self.repo.writer();
        let item = self
            .tree
            .read(&tenant, id)?
            .ok_or_else(|| KnowledgeError::NotFound(id.to_string()))?;
        let previous = item.front.status;
        lifecycle::check_transition(previous, change.status, change.superseded_by.is_some())?;
        if let Some(successor) = &change.superseded_by {
            if successor == id {
                return Err(invalid("supersededBy: an item cannot supersede itself"));
            }
            match self.tree.read(&tenant, successor)? {
                Some(s) if s.front.status == Status::Accepted => {}
                Some(s) => {
                    return Err(invalid(format!(
                        "supersededBy: {successor} is {}, not accepted",
                        s.front.status
                    )));
                }
                None => return Err(invalid(format!("supersededBy: {successor} does not exist"))),
            }
        }

        let mut front = item.front;
        front.status = change.status;
        front.superseded_by = change.superseded_by.as_ref().map(ItemId::to_string);
        front.updated_at = Timestamp::now();
        let doc = Document {
            front,
            body: item.body,
        };
        let text = self.render(&doc)?;
        let mut message = format!("Change {id} from {previous} to {}", change.status);
        if let Some(successor) = &change.superseded_by {
            message.push_str(&format!(" (superseded by {successor})"));
        }
        if let Some(reason) = reason {
            message.push_str(&format!("\n\n{reason}"));
        }
        message.push_str(&format!("\n\nTenant: {}", tenant.as_str()));
        let commit = writer.write(&tenant, id, text.as_bytes(), author, &message)?;
        Ok(Updated {
            item: Item {
                id: id.clone(),
                front: doc.front,
                body: doc.body,
                commit: Some(commit.id),
            },
            previous,
        })
    }

    /// Deletes a draft, proposed or rejected item, in one commit authored by `author`.
    pub fn delete(
        &self,
        tenant: &str,
        author: &str,
        id: &ItemId,
    ) -> Result<Deleted, KnowledgeError> {
        let tenant = TenantDir::parse(tenant)?;
        let mut writer = self.repo.writer();
        let item = self
            .tree
            .read(&tenant, id)?
            .ok_or_else(|| KnowledgeError::NotFound(id.to_string()))?;
        lifecycle::check_deletable(item.front.status)?;
        let message = format!(
            "Delete {id} ({}): {}\n\nTenant: {}",
            item.front.status,
            item.front.title,
            tenant.as_str()
        );
        let commit = writer.delete(&tenant, id, author, &message)?;
        Ok(Deleted {
            id: id.clone(),
            commit,
        })
    }

    /// One item, with the last commit that changed it and, if asked, its history.
    pub fn show(
        &self,
        tenant: &str,
        id: &ItemId,
        include_history: bool,
    ) -> Result<Shown, KnowledgeError> {
        let tenant = TenantDir::parse(tenant)?;
        let mut item = self
            .tree
            .read(&tenant, id)?
            .ok_or_else(|| KnowledgeError::NotFound(id.to_string()))?;
        let limit = if include_history { MAX_HISTORY } else { 1 };
        let history = self.repo.history(&id.relative_file(&tenant), limit)?;
        item.commit = history.first().map(|c| c.id.clone());
        Ok(Shown {
            item,
            history: include_history.then_some(history),
        })
    }

    /// Items matching `input`, most specific layer first, then most recently updated.
    pub fn query(&self, tenant: &str, input: &QueryInput) -> Result<QueryResult, KnowledgeError> {
        let tenant = TenantDir::parse(tenant)?;
        check_query(input)?;
        let layers: Vec<Layer> = match input.layer {
            Some(layer) => vec![layer],
            None => Layer::ALL.to_vec(),
        };
        let items = self.tree.scan(&tenant, &layers)?;
        Ok(query::select(items, input, self.default_limit))
    }

    /// Checks `input` against the constraints of the accepted items in its layers.
    pub fn check(&self, tenant: &str, input: &CheckInput) -> Result<Report, KnowledgeError> {
        let tenant = TenantDir::parse(tenant)?;
        check_check(input)?;
        let layers = input.layers.clone().unwrap_or_else(|| Layer::ALL.to_vec());
        let items = self.tree.scan(&tenant, &layers)?;
        Ok(query::check(&items, input))
    }

    fn render(&self, doc: &Document) -> Result<String, KnowledgeError> {
        let text = doc.render().map_err(|e| match e {
            DocumentError::DelimiterInValue => {
                invalid("no title, tag or constraint may contain a line `+++`")
            }
            other => KnowledgeError::Corrupt {
                id: "(new)".into(),
                reason: other.to_string(),
            },
        })?;
        if text.len() > self.max_item_bytes {
            return Err(KnowledgeError::TooLarge {
                size: text.len(),
                limit: self.max_item_bytes,
            });
        }
        Ok(text)
    }
}

impl PolicySource for KnowledgeEngine {
    fn policies(&self, tenant: &str) -> Vec<PolicySpec> {
        self.policy_source().policies(tenant)
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
