//! Shared set-up for the knowledge engine's tests: an engine on a fresh repository in a
//! temporary folder, item inputs, rules, and questions about the git history.

use std::path::Path;

use git2::Repository;

use super::engine::{KnowledgeEngine, ProposeInput, StatusChange};
use super::item::ItemType;
use super::lifecycle::Status;
use super::paths::ItemId;
use crate::config::KnowledgeSettings;
use crate::skills::governance::{Operator, RuleSpec, Scope, Severity, Target};

/// The tenant of most tests.
pub const T: &str = "acme";

/// Small limits, a known committer.
pub fn settings() -> KnowledgeSettings {
    KnowledgeSettings {
        author_name: "kb-bot".into(),
        author_email: "kb@example.org".into(),
        max_item_bytes: 4096,
        default_limit: 10,
        ..KnowledgeSettings::default()
    }
}

/// An engine on a new repository (in `kb/` of the returned folder).
pub fn engine() -> (tempfile::TempDir, KnowledgeEngine) {
    let dir = tempfile::tempdir().unwrap();
    let engine = KnowledgeEngine::open(dir.path().join("kb"), &settings(), None).unwrap();
    (dir, engine)
}

/// An item id from its wire form.
pub fn id(raw: &str) -> ItemId {
    ItemId::parse(raw).unwrap()
}

/// A draft proposal with no tags, constraints or scope.
pub fn input(raw_id: &str, item_type: ItemType, title: &str, body: &str) -> ProposeInput {
    let id = id(raw_id);
    ProposeInput {
        layer: id.layer,
        path: id.path,
        item_type,
        title: title.into(),
        body: body.into(),
        tags: Vec::new(),
        constraints: Vec::new(),
        mode: None,
        status: None,
        scope: Scope::default(),
    }
}

/// A blocking rule whose message names it.
pub fn rule(rule_id: &str, target: Target, operator: Operator, value: &str) -> RuleSpec {
    RuleSpec {
        id: rule_id.into(),
        target,
        operator,
        value: Some(value.into()),
        severity: Severity::Block,
        message: format!("{rule_id} broken"),
    }
}

/// A status change without reason or successor.
pub fn change(status: Status) -> StatusChange {
    StatusChange {
        status,
        reason: None,
        superseded_by: None,
    }
}

/// Proposes and accepts an item.
pub fn accepted(engine: &KnowledgeEngine, input: ProposeInput) -> ItemId {
    let id = ItemId::new(input.layer, input.path.clone());
    engine.propose(T, T, input).unwrap();
    engine
        .update_status(T, T, &id, change(Status::Proposed))
        .unwrap();
    engine
        .update_status(T, T, &id, change(Status::Accepted))
        .unwrap();
    id
}

/// HEAD's commit id.
pub fn head(engine: &KnowledgeEngine) -> String {
    engine.repository().head().unwrap().id
}

/// Every commit from HEAD, asserting the history is a line.
pub fn linear_commits(engine: &KnowledgeEngine) -> usize {
    let git = Repository::open(engine.repository().root()).unwrap();
    let mut commit = git.head().unwrap().peel_to_commit().unwrap();
    let mut count = 1;
    while commit.parent_count() == 1 {
        commit = commit.parent(0).unwrap();
        count += 1;
    }
    assert_eq!(commit.parent_count(), 0, "a merge in the history");
    count
}

/// Whether HEAD's tree holds `file`.
pub fn in_head_tree(engine: &KnowledgeEngine, file: &str) -> bool {
    let git = Repository::open(engine.repository().root()).unwrap();
    let tree = git.head().unwrap().peel_to_tree().unwrap();
    tree.get_path(Path::new(file)).is_ok()
}
