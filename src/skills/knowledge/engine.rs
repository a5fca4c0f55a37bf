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
mod tests {
    //! Specifications of the knowledge engine's writes, against real git repositories in
    //! temporary folders: commits per write, the lifecycle, path safety, conflicts, limits,
    //! governance and concurrent writers.

    use std::fs;
    use std::sync::Mutex;

    use git2::Repository;

    use super::*;
    use crate::skills::governance::{Operator, Rule, Target};
    use crate::skills::knowledge::test_fixtures::*;
    use crate::skills::knowledge::{PathError, TransitionError};

    #[test]
    fn proposed_items_round_trip_through_show_and_query() {
        let (_dir, engine) = engine();
        let mut new = input(
            "project/adr/0001-use-postgres",
            ItemType::Adr,
            "Use PostgreSQL",
            "# Why\nIt works.\n",
        );
        new.tags = vec!["database".into(), " Database ".into(), "sql".into()];
        let created = engine.propose(T, "alice", new).unwrap();
        assert_eq!(created.front.status, Status::Draft);
        assert_eq!(
            created.front.tags,
            ["database", "sql"],
            "trimmed, deduplicated"
        );
        assert_eq!(created.id.to_string(), "project/adr/0001-use-postgres");
        assert!(
            engine
                .repository()
                .root()
                .join("acme/project/adr/0001-use-postgres.md")
                .is_file()
        );

        let shown = engine.show(T, &created.id, false).unwrap();
        assert_eq!(shown.item.front, created.front);
        assert_eq!(shown.item.body, "# Why\nIt works.\n");
        assert_eq!(shown.item.commit, created.commit, "the item's commit");
        assert_eq!(shown.history, None);

        let drafts = QueryInput {
            text: Some("POSTGRES".into()),
            status: Some(Status::Draft),
            ..QueryInput::default()
        };
        let found = engine.query(T, &drafts).unwrap();
        assert_eq!(found.total, 1);
        assert_eq!(found.items[0].id, created.id);
        assert_eq!(
            engine.query(T, &QueryInput::default()).unwrap().total,
            0,
            "accepted by default"
        );
        assert!(
            matches!(
                engine.show("other", &created.id, false),
                Err(KnowledgeError::NotFound(_))
            ),
            "tenants do not see each other's items"
        );
    }

    #[test]
    fn every_write_is_one_commit_by_the_caller_deletions_included() {
        let (_dir, engine) = engine();
        let start = linear_commits(&engine);
        let item = id("team/pattern/retry");
        engine
            .propose(
                T,
                "alice",
                input("team/pattern/retry", ItemType::Pattern, "Retry", "b"),
            )
            .unwrap();
        let mut to_proposed = change(Status::Proposed);
        to_proposed.reason = Some("ready for review".into());
        engine.update_status(T, "bob", &item, to_proposed).unwrap();
        let shown = engine.show(T, &item, true).unwrap();
        let unrelated = engine
            .propose(
                T,
                "carol",
                input("team/other", ItemType::Spec, "Other", "x"),
            )
            .unwrap();
        assert_eq!(linear_commits(&engine), start + 3);
        assert_eq!(
            shown.item.commit.as_deref(),
            Some(shown.history.as_ref().unwrap()[0].id.as_str())
        );
        assert_ne!(
            shown.item.commit, unrelated.commit,
            "the file's commit, not HEAD"
        );
        assert_eq!(
            engine.show(T, &item, false).unwrap().item.commit,
            shown.item.commit
        );

        let deleted = engine.delete(T, "dave", &item).unwrap();
        assert_eq!(linear_commits(&engine), start + 4);
        assert_eq!(head(&engine), deleted.commit.id);
        assert!(
            !in_head_tree(&engine, "acme/team/pattern/retry.md"),
            "deletion staged"
        );
        assert!(in_head_tree(&engine, "acme/team/other.md"));
        assert!(matches!(
            engine.show(T, &item, true),
            Err(KnowledgeError::NotFound(_))
        ));

        let history = engine
            .repository()
            .history("acme/team/pattern/retry.md", 10)
            .unwrap();
        let summary: Vec<(&str, &str)> = history
            .iter()
            .map(|c| (c.author.as_str(), c.message.lines().next().unwrap()))
            .collect();
        assert_eq!(
            summary,
            [
                ("dave", "Delete team/pattern/retry (proposed): Retry"),
                ("bob", "Change team/pattern/retry from draft to proposed"),
                ("alice", "Create team/pattern/retry as draft: Retry"),
            ]
        );
        assert!(history[1].message.contains("ready for review"));
        let git = Repository::open(engine.repository().root()).unwrap();
        let commit = git
            .find_commit(git2::Oid::from_str(&deleted.commit.id).unwrap())
            .unwrap();
        assert_eq!(commit.committer().name().ok(), Some("kb-bot"));
        assert_eq!(commit.author().email().ok(), Some("kb@example.org"));
    }

    #[test]
    fn status_changes_follow_the_lifecycle() {
        let (_dir, engine) = engine();
        let item = id("org/spec/api");
        engine
            .propose(T, T, input("org/spec/api", ItemType::Spec, "API", "b"))
            .unwrap();
        let before = head(&engine);
        let err = engine
            .update_status(T, T, &item, change(Status::Accepted))
            .unwrap_err();
        assert!(err.to_string().contains("from draft to accepted"), "{err}");
        assert_eq!(head(&engine), before, "a refused change commits nothing");

        let updated = engine
            .update_status(T, T, &item, change(Status::Proposed))
            .unwrap();
        assert_eq!(
            (updated.previous, updated.item.front.status),
            (Status::Draft, Status::Proposed)
        );
        engine
            .update_status(T, T, &item, change(Status::Accepted))
            .unwrap();
        let err = engine
            .update_status(T, T, &item, change(Status::Draft))
            .unwrap_err();
        assert!(matches!(
            err,
            KnowledgeError::Lifecycle(TransitionError::NotAllowed { .. })
        ));
        engine
            .update_status(T, T, &item, change(Status::Deprecated))
            .unwrap();
        let err = engine
            .update_status(T, T, &item, change(Status::Accepted))
            .unwrap_err();
        assert!(err.to_string().contains("deprecated is final"), "{err}");

        let mut accepted_at_birth = input("org/spec/b", ItemType::Spec, "B", "b");
        accepted_at_birth.status = Some(Status::Accepted);
        assert!(matches!(
            engine.propose(T, T, accepted_at_birth),
            Err(KnowledgeError::Lifecycle(TransitionError::InitialStatus(
                Status::Accepted
            )))
        ));
        let mut proposed = input("org/spec/c", ItemType::Spec, "C", "b");
        proposed.status = Some(Status::Proposed);
        assert_eq!(
            engine.propose(T, T, proposed).unwrap().front.status,
            Status::Proposed
        );
        assert!(matches!(
            engine.update_status(T, T, &id("org/spec/none"), change(Status::Proposed)),
            Err(KnowledgeError::NotFound(_))
        ));
    }

    #[test]
    fn superseding_needs_an_accepted_successor() {
        let (_dir, engine) = engine();
        let old = accepted(&engine, input("company/adr/old", ItemType::Adr, "Old", "b"));
        engine
            .propose(T, T, input("company/adr/new", ItemType::Adr, "New", "b"))
            .unwrap();
        let new = id("company/adr/new");
        let supersede = |by: &str| StatusChange {
            status: Status::Superseded,
            reason: None,
            superseded_by: Some(id(by)),
        };
        let refused = |by: &str| {
            engine
                .update_status(T, T, &old, supersede(by))
                .unwrap_err()
                .to_string()
        };
        assert!(refused("company/adr/new").contains("is draft, not accepted"));
        assert!(refused("company/adr/missing").contains("does not exist"));
        assert!(refused("company/adr/old").contains("cannot supersede itself"));
        assert!(matches!(
            engine.update_status(T, T, &old, change(Status::Superseded)),
            Err(KnowledgeError::Lifecycle(TransitionError::MissingSuccessor))
        ));

        engine
            .update_status(T, T, &new, change(Status::Proposed))
            .unwrap();
        engine
            .update_status(T, T, &new, change(Status::Accepted))
            .unwrap();
        let done = engine
            .update_status(T, T, &old, supersede("company/adr/new"))
            .unwrap();
        assert_eq!(
            done.item.front.superseded_by.as_deref(),
            Some("company/adr/new")
        );
        let shown = engine.show(T, &old, false).unwrap();
        assert_eq!(shown.item.front.status, Status::Superseded);
        assert_eq!(
            shown.item.front.superseded_by.as_deref(),
            Some("company/adr/new")
        );
    }

    #[test]
    fn only_items_that_never_took_effect_are_deleted() {
        let (_dir, engine) = engine();
        let item = accepted(&engine, input("project/x", ItemType::Spec, "X", "b"));
        let before = head(&engine);
        let err = engine.delete(T, T, &item).unwrap_err();
        assert!(
            err.to_string().contains("accepted cannot be deleted"),
            "{err}"
        );
        assert_eq!(head(&engine), before);
        engine
            .propose(T, T, input("project/r", ItemType::Spec, "R", "b"))
            .unwrap();
        engine
            .update_status(T, T, &id("project/r"), change(Status::Rejected))
            .unwrap();
        engine.delete(T, T, &id("project/r")).unwrap();
        assert!(matches!(
            engine.delete(T, T, &id("project/r")),
            Err(KnowledgeError::NotFound(_))
        ));
    }

    #[test]
    fn an_existing_item_is_a_conflict() {
        let (_dir, engine) = engine();
        engine
            .propose(T, T, input("project/adr/1", ItemType::Adr, "One", "b"))
            .unwrap();
        let before = head(&engine);
        let mut again = input("project/adr/1", ItemType::Adr, "Again", "c");
        again.path = ItemPath::parse("adr/1.md").unwrap();
        let err = engine.propose(T, T, again).unwrap_err();
        assert!(
            matches!(&err, KnowledgeError::Conflict(id) if id == "project/adr/1"),
            "{err}"
        );
        assert_eq!(head(&engine), before);
        assert_eq!(
            engine
                .show(T, &id("project/adr/1"), false)
                .unwrap()
                .item
                .body,
            "b"
        );
    }

    #[cfg(unix)]
    #[test]
    fn traversal_attempts_write_nothing_outside_the_repository() {
        let (dir, engine) = engine();
        let outside = dir.path().join("outside");
        fs::create_dir(&outside).unwrap();
        for raw in [
            "../x",
            "a/../../b",
            "/etc/passwd",
            "..\\x",
            "a/./b",
            "",
            "a//b",
            ".git/config",
        ] {
            assert!(ItemPath::parse(raw).is_err(), "{raw:?} accepted");
            assert!(
                ItemId::parse(&format!("project/{raw}")).is_err(),
                "{raw:?} accepted as id"
            );
        }
        let before = head(&engine);
        for tenant in ["..", "../outside", "a/b", ".git", ""] {
            let err = engine
                .propose(tenant, T, input("project/x", ItemType::Adr, "X", "b"))
                .unwrap_err();
            assert!(
                matches!(err, KnowledgeError::Path(PathError::Tenant(_))),
                "{tenant:?}: {err}"
            );
        }
        let layer = engine.repository().root().join("acme/project");
        fs::create_dir_all(&layer).unwrap();
        std::os::unix::fs::symlink(&outside, layer.join("evil")).unwrap();
        std::os::unix::fs::symlink(&outside, engine.repository().root().join("acme/team")).unwrap();
        for raw in ["project/evil/x", "project/evil/deeper/x", "team/x"] {
            let err = engine
                .propose(T, T, input(raw, ItemType::Adr, "X", "b"))
                .unwrap_err();
            assert!(
                matches!(err, KnowledgeError::Path(PathError::Symlink(_))),
                "{raw}: {err}"
            );
        }
        assert_eq!(head(&engine), before, "nothing committed");
        assert_eq!(
            fs::read_dir(&outside).unwrap().count(),
            0,
            "nothing written outside"
        );
        let mut top: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        top.sort();
        assert_eq!(top, ["kb", "outside"]);
        assert_eq!(
            engine
                .query(
                    T,
                    &QueryInput {
                        layer: Some(Layer::Team),
                        ..QueryInput::default()
                    }
                )
                .unwrap()
                .total,
            0
        );
    }

    #[test]
    fn bad_constraints_modes_and_oversized_items_are_refused() {
        let (_dir, engine) = engine();
        let before = head(&engine);
        let mut bad_regex = input("team/p", ItemType::Policy, "P", "b");
        bad_regex.constraints = vec![
            rule("ok", Target::Content, Operator::MustUse, "x"),
            rule("broken", Target::Content, Operator::MustMatch, "(open"),
        ];
        let err = engine.propose(T, T, bad_regex).unwrap_err().to_string();
        assert!(
            err.contains("constraints[1]") && err.contains("broken") && err.contains("(open"),
            "{err}"
        );
        let mut twice = input("team/p", ItemType::Policy, "P", "b");
        twice.constraints = vec![
            rule("r", Target::Path, Operator::MustUse, "x"),
            rule("r", Target::Path, Operator::MustUse, "y"),
        ];
        assert!(
            engine
                .propose(T, T, twice)
                .unwrap_err()
                .to_string()
                .contains("used twice")
        );
        let mut mode = input("team/adr", ItemType::Adr, "A", "b");
        mode.mode = Some(Mode::Mandatory);
        assert!(
            engine
                .propose(T, T, mode)
                .unwrap_err()
                .to_string()
                .contains("`mode`")
        );
        let big = input("team/big", ItemType::Spec, "Big", &"x".repeat(5000));
        assert!(matches!(
            engine.propose(T, T, big),
            Err(KnowledgeError::TooLarge { limit: 4096, .. })
        ));
        let untitled = input("team/u", ItemType::Spec, "  ", "b");
        assert!(
            engine
                .propose(T, T, untitled)
                .unwrap_err()
                .to_string()
                .contains("title")
        );
        let mut dangerous = input("team/d", ItemType::Spec, "D", "b");
        dangerous.constraints = vec![RuleSpec {
            message: "a\n+++\nb".into(),
            ..rule("r", Target::Path, Operator::MustUse, "x")
        }];
        assert!(matches!(
            engine.propose(T, T, dangerous),
            Err(KnowledgeError::InvalidArguments(_))
        ));
        assert_eq!(head(&engine), before);
    }

    /// Blocks any content containing "forbidden", and remembers the scopes it was asked about.
    #[derive(Default)]
    struct Forbids {
        scopes: Mutex<Vec<Scope>>,
    }

    impl Validator for Forbids {
        fn validate(&self, _tenant: &str, scope: &Scope, ctx: &EvalContext) -> Report {
            self.scopes.lock().unwrap().push(scope.clone());
            let rule = Rule::new(rule(
                "no-forbidden",
                Target::Content,
                Operator::MustNotUse,
                "forbidden",
            ))
            .unwrap();
            Report::from_violations(rule.check(ctx, Some("config:p")).into_iter().collect())
        }
    }

    #[test]
    fn a_blocking_validator_stops_the_proposal_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let validator = Arc::new(Forbids::default());
        let engine =
            KnowledgeEngine::open(dir.path(), &settings(), Some(validator.clone())).unwrap();
        assert!(!engine.set_validator(validator.clone()), "set once");
        let before = head(&engine);
        let mut blocked = input("project/adr/bad", ItemType::Adr, "Bad", "a forbidden idea");
        blocked.scope.project_id = Some("p1".into());
        match engine.propose(T, T, blocked) {
            Err(KnowledgeError::Blocked { report, message }) => {
                assert!(!report.passed);
                assert_eq!(report.violations[0].rule_id, "no-forbidden");
                assert!(message.contains("project/adr/bad"), "{message}");
            }
            other => panic!("expected a block, got {other:?}"),
        }
        assert_eq!(head(&engine), before, "nothing committed");
        assert!(
            !engine.repository().root().join("acme/project/adr").exists(),
            "nothing written"
        );
        assert_eq!(
            validator.scopes.lock().unwrap()[0].project_id.as_deref(),
            Some("p1")
        );
        engine
            .propose(
                T,
                T,
                input("project/adr/good", ItemType::Adr, "Good", "fine"),
            )
            .unwrap();
    }

    #[test]
    fn concurrent_proposals_are_all_committed_in_one_line() {
        let (_dir, engine) = engine();
        let engine = Arc::new(engine);
        let start = linear_commits(&engine);
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let engine = Arc::clone(&engine);
                std::thread::spawn(move || {
                    for i in 0..5 {
                        let raw = format!("project/t{t}/item{i}");
                        engine
                            .propose(T, &format!("w{t}"), input(&raw, ItemType::Spec, &raw, "b"))
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(linear_commits(&engine), start + 30);
        let all = QueryInput {
            status: Some(Status::Draft),
            limit: Some(100),
            ..QueryInput::default()
        };
        assert_eq!(engine.query(T, &all).unwrap().total, 30);
        let git = Repository::open(engine.repository().root()).unwrap();
        assert!(
            git.statuses(None).unwrap().is_empty(),
            "every file committed"
        );
    }

    #[test]
    fn a_failed_commit_leaves_the_working_tree_as_it_was() {
        let (_dir, engine) = engine();
        engine
            .propose(T, T, input("project/kept", ItemType::Spec, "Kept", "v1"))
            .unwrap();
        // Without its git directory the repository cannot commit: the write must be undone.
        fs::rename(
            engine.repository().root().join(".git"),
            engine.repository().root().join("git-moved"),
        )
        .unwrap();
        let err = engine
            .propose(T, T, input("project/new", ItemType::Spec, "New", "b"))
            .unwrap_err();
        assert!(matches!(err, KnowledgeError::Git(_)), "{err:?}");
        assert!(matches!(
            crate::skills::SkillError::from(err),
            crate::skills::SkillError::Failed(_)
        ));
        let root = engine.repository().root();
        assert!(
            !root.join("acme/project/new.md").exists(),
            "new file removed"
        );
        let err = engine
            .update_status(T, T, &id("project/kept"), change(Status::Proposed))
            .unwrap_err();
        assert!(matches!(err, KnowledgeError::Git(_)), "{err:?}");
        let kept = fs::read_to_string(root.join("acme/project/kept.md")).unwrap();
        assert!(kept.contains("status = \"draft\""), "old content restored");
    }
}
