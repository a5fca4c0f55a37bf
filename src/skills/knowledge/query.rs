//! What is read out of the items of a tenant: query results, constraint checks, and the
//! policies governance takes from accepted `policy` items.
//!
//! These are pure functions over scanned items; the engine does the scanning. Matching is
//! case-insensitive (the original searched with a case-sensitive substring scan), and
//! results come most specific layer first, then most recently updated.

use std::cmp::Reverse;

use super::item::{Item, ItemType};
use super::lifecycle::Status;
use super::paths::TenantDir;
use super::working_tree::WorkingTree;
use crate::skills::governance::{
    EvalContext, Layer, PolicySource, PolicySpec, Report, Rule, Violation,
};

/// The largest `limit` a query may ask for.
pub const MAX_QUERY_LIMIT: usize = 100;

/// A search over a tenant's items. Absent filters match everything but `status`, which
/// defaults to `accepted` (what is in force).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryInput {
    /// Matched, ignoring case, against title, body, tags and path.
    pub text: Option<String>,
    pub item_type: Option<ItemType>,
    pub layer: Option<Layer>,
    pub status: Option<Status>,
    /// Every one of these must be among the item's tags (ignoring case).
    pub tags: Vec<String>,
    /// At most [`MAX_QUERY_LIMIT`]; `None`: `knowledge.default_limit`.
    pub limit: Option<usize>,
}

/// The first `limit` matches, and how many there were in all.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryResult {
    pub items: Vec<Item>,
    pub total: usize,
}

/// What to check against the constraints of accepted items.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckInput {
    pub content: Option<String>,
    pub path: Option<String>,
    pub dependencies: Vec<String>,
    pub tools: Vec<String>,
    /// The layers whose items apply; `None`: all four.
    pub layers: Option<Vec<Layer>>,
}

/// Filters, orders and truncates `items` for `input`.
pub fn select(items: Vec<Item>, input: &QueryInput, default_limit: usize) -> QueryResult {
    let status = input.status.unwrap_or(Status::Accepted);
    let text = input
        .text
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase);
    let tags: Vec<String> = input.tags.iter().map(|t| t.to_lowercase()).collect();
    let mut matches: Vec<Item> = items
        .into_iter()
        .filter(|item| item.front.status == status)
        .filter(|item| input.item_type.is_none_or(|t| item.front.item_type == t))
        .filter(|item| input.layer.is_none_or(|l| item.id.layer == l))
        .filter(|item| {
            tags.iter()
                .all(|wanted| item.front.tags.iter().any(|t| t.to_lowercase() == *wanted))
        })
        .filter(|item| text.as_deref().is_none_or(|text| mentions(item, text)))
        .collect();
    sort_for_reading(&mut matches);
    let total = matches.len();
    let limit = input.limit.unwrap_or(default_limit).min(MAX_QUERY_LIMIT);
    matches.truncate(limit);
    QueryResult {
        items: matches,
        total,
    }
}

fn mentions(item: &Item, lowercase_text: &str) -> bool {
    item.front.title.to_lowercase().contains(lowercase_text)
        || item.body.to_lowercase().contains(lowercase_text)
        || item
            .id
            .path
            .as_str()
            .to_lowercase()
            .contains(lowercase_text)
        || item
            .front
            .tags
            .iter()
            .any(|t| t.to_lowercase().contains(lowercase_text))
}

/// Most specific layer first, then most recently updated, then by path (so equal times
/// still give one order).
fn sort_for_reading(items: &mut [Item]) {
    items.sort_by(|a, b| {
        (
            a.id.layer.precedence(),
            Reverse(a.front.updated_at),
            &a.id.path,
        )
            .cmp(&(
                b.id.layer.precedence(),
                Reverse(b.front.updated_at),
                &b.id.path,
            ))
    });
}

/// Checks `input` against the constraints of every accepted item in its layers. Each
/// violation names the item (`<layer>/<path>`) as its policy. Constraints that no longer
/// build (a file edited by hand) are skipped with a warning.
pub fn check(items: &[Item], input: &CheckInput) -> Report {
    let ctx = EvalContext {
        content: input.content.clone(),
        path: input.path.clone(),
        dependencies: input.dependencies.clone(),
        tools: input.tools.clone(),
    };
    let mut accepted: Vec<&Item> = items
        .iter()
        .filter(|item| item.front.status == Status::Accepted)
        .filter(|item| {
            input
                .layers
                .as_ref()
                .is_none_or(|layers| layers.contains(&item.id.layer))
        })
        .collect();
    accepted.sort_by(|a, b| {
        (a.id.layer.precedence(), &a.id.path).cmp(&(b.id.layer.precedence(), &b.id.path))
    });
    let mut violations: Vec<Violation> = Vec::new();
    for item in accepted {
        let id = item.id.to_string();
        for spec in &item.front.constraints {
            match Rule::new(spec.clone()) {
                Ok(rule) => violations.extend(rule.check(&ctx, Some(&id))),
                Err(e) => tracing::warn!(item = %id, error = %e, "knowledge constraint skipped"),
            }
        }
    }
    Report::from_violations(violations)
}

/// The policies of accepted `policy` items, most specific layer first.
pub fn policies(items: &[Item]) -> Vec<PolicySpec> {
    let mut policies: Vec<&Item> = items
        .iter()
        .filter(|i| i.front.status == Status::Accepted && i.front.item_type == ItemType::Policy)
        .collect();
    policies.sort_by(|a, b| {
        (a.id.layer.precedence(), &a.id.path).cmp(&(b.id.layer.precedence(), &b.id.path))
    });
    policies
        .into_iter()
        .map(|item| PolicySpec {
            id: format!("knowledge:{}", item.id),
            layer: item.id.layer,
            mode: item.front.mode.unwrap_or_default(),
            scope_id: None,
            description: Some(item.front.title.clone()),
            rules: item.front.constraints.clone(),
        })
        .collect()
}

/// The policies of accepted knowledge items, for the governance engine. It holds only
/// the working tree (not the engine), so the governance engine can keep one while being
/// the knowledge engine's validator without a reference cycle.
///
/// `policies` reads files: it blocks, like every knowledge read.
#[derive(Debug, Clone)]
pub struct KnowledgePolicies {
    tree: WorkingTree,
}

impl KnowledgePolicies {
    /// Policies read from `tree`.
    pub(super) fn new(tree: WorkingTree) -> Self {
        Self { tree }
    }
}

impl PolicySource for KnowledgePolicies {
    fn policies(&self, tenant: &str) -> Vec<PolicySpec> {
        let Ok(tenant_dir) = TenantDir::parse(tenant) else {
            // Such a tenant can never have written an item.
            return Vec::new();
        };
        match self.tree.scan(&tenant_dir, &Layer::ALL) {
            Ok(items) => policies(&items),
            Err(e) => {
                tracing::error!(%tenant, error = %e, "could not read knowledge policies");
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Specifications of reading: query filters and order, checks against accepted
    //! constraints, and the policies handed to governance.

    use super::*;
    use crate::skills::governance::{Mode, Operator, RuleSpec, Severity, Target};
    use crate::skills::knowledge::test_fixtures::*;

    #[test]
    fn queries_order_by_layer_then_recency_and_match_without_case() {
        let (_dir, engine) = engine();
        let mut tagged = input(
            "company/adr/db",
            ItemType::Adr,
            "Database choice",
            "We use PostgreSQL.",
        );
        tagged.tags = vec!["Storage".into()];
        accepted(&engine, tagged);
        accepted(
            &engine,
            input(
                "project/adr/a-old",
                ItemType::Adr,
                "Old project note",
                "postgresql everywhere",
            ),
        );
        accepted(
            &engine,
            input(
                "team/pattern/pool",
                ItemType::Pattern,
                "Pooling",
                "Pool POSTGRESQL connections",
            ),
        );
        // Timestamps have millisecond precision: make sure the newer item is newer, so the
        // order below (against the alphabetical tie-break) can only come from recency.
        std::thread::sleep(std::time::Duration::from_millis(5));
        accepted(
            &engine,
            input(
                "project/adr/z-new",
                ItemType::Adr,
                "New project note",
                "PostgreSQL 17",
            ),
        );
        engine
            .propose(
                T,
                T,
                input("project/adr/draft", ItemType::Adr, "Draft", "postgresql"),
            )
            .unwrap();

        let ids = |q: QueryInput| -> Vec<String> {
            engine
                .query(T, &q)
                .unwrap()
                .items
                .iter()
                .map(|i| i.id.to_string())
                .collect()
        };
        let text = |t: &str| QueryInput {
            text: Some(t.into()),
            ..QueryInput::default()
        };
        assert_eq!(
            ids(text("postgresql")),
            [
                "project/adr/z-new",
                "project/adr/a-old",
                "team/pattern/pool",
                "company/adr/db"
            ]
        );
        assert_eq!(
            ids(QueryInput {
                tags: vec!["storage".into()],
                ..text("")
            }),
            ["company/adr/db"]
        );
        assert_eq!(
            ids(QueryInput {
                item_type: Some(ItemType::Pattern),
                ..text("")
            }),
            ["team/pattern/pool"]
        );
        assert_eq!(
            ids(QueryInput {
                layer: Some(Layer::Company),
                ..text("")
            }),
            ["company/adr/db"]
        );
        assert_eq!(
            ids(QueryInput {
                status: Some(Status::Draft),
                ..text("")
            }),
            ["project/adr/draft"]
        );
        assert_eq!(ids(text("NOTE")).len(), 2, "titles match too");
        let limited = engine
            .query(
                T,
                &QueryInput {
                    limit: Some(1),
                    ..text("postgresql")
                },
            )
            .unwrap();
        assert_eq!((limited.items.len(), limited.total), (1, 4));
    }

    #[test]
    fn checks_use_the_constraints_of_accepted_items_only() {
        let (_dir, engine) = engine();
        let mut policy = input("org/policy/deps", ItemType::Policy, "Deps", "b");
        policy.constraints = vec![
            rule(
                "no-openssl",
                Target::Dependency,
                Operator::MustNotUse,
                "openssl",
            ),
            RuleSpec {
                severity: Severity::Warn,
                ..rule(
                    "no-todo",
                    Target::Content,
                    Operator::MustNotMatch,
                    "(?i)todo",
                )
            },
        ];
        let policy_id = accepted(&engine, policy);
        let mut draft = input("project/policy/draft", ItemType::Policy, "Draft", "b");
        draft.constraints = vec![rule(
            "no-tokio",
            Target::Dependency,
            Operator::MustNotUse,
            "tokio",
        )];
        engine.propose(T, T, draft).unwrap();

        let work = CheckInput {
            content: Some("// TODO later".into()),
            dependencies: vec!["tokio".into(), "OpenSSL".into()],
            ..CheckInput::default()
        };
        let report = engine.check(T, &work).unwrap();
        assert!(!report.passed);
        let found: Vec<(&str, Option<&str>)> = report
            .violations
            .iter()
            .map(|v| (v.rule_id.as_str(), v.policy_id.as_deref()))
            .collect();
        assert_eq!(
            found,
            [
                ("no-openssl", Some("org/policy/deps")),
                ("no-todo", Some("org/policy/deps"))
            ]
        );
        assert_eq!((report.counts.block, report.counts.warn), (1, 1));
        let elsewhere = CheckInput {
            layers: Some(vec![Layer::Project, Layer::Team]),
            ..work.clone()
        };
        assert!(engine.check(T, &elsewhere).unwrap().violations.is_empty());
        engine
            .update_status(T, T, &policy_id, change(Status::Deprecated))
            .unwrap();
        assert!(
            engine.check(T, &work).unwrap().passed,
            "deprecated items no longer apply"
        );
    }

    #[test]
    fn accepted_policies_are_a_policy_source() {
        let (_dir, engine) = engine();
        let mut policy = input("team/policy/no-unsafe", ItemType::Policy, "No unsafe", "b");
        policy.mode = Some(Mode::Mandatory);
        policy.constraints = vec![rule(
            "no-unsafe",
            Target::Content,
            Operator::MustNotUse,
            "unsafe",
        )];
        accepted(&engine, policy.clone());
        accepted(
            &engine,
            input("project/policy/plain", ItemType::Policy, "Plain", "b"),
        );
        accepted(
            &engine,
            input("team/adr/not-a-policy", ItemType::Adr, "ADR", "b"),
        );
        engine
            .propose(
                T,
                T,
                input("team/policy/draft", ItemType::Policy, "Draft", "b"),
            )
            .unwrap();

        let policies = engine.policies(T);
        assert_eq!(
            policies[1],
            PolicySpec {
                id: "knowledge:team/policy/no-unsafe".into(),
                layer: Layer::Team,
                mode: Mode::Mandatory,
                scope_id: None,
                description: Some("No unsafe".into()),
                rules: policy.constraints,
            }
        );
        assert_eq!(policies[0].id, "knowledge:project/policy/plain");
        assert_eq!(policies[0].mode, Mode::Optional);
        assert_eq!(policies.len(), 2);
        assert_eq!(engine.policy_source().policies(T), policies);
        assert!(engine.policies("other").is_empty());
        assert!(engine.policies("../acme").is_empty());
    }

    #[test]
    fn oversized_queries_and_checks_are_refused() {
        let (_dir, engine) = engine();
        let long = QueryInput {
            text: Some("x".repeat(1001)),
            ..QueryInput::default()
        };
        assert!(
            engine
                .query(T, &long)
                .unwrap_err()
                .to_string()
                .starts_with("query:")
        );
        let many = CheckInput {
            tools: vec!["t".into(); 1001],
            ..CheckInput::default()
        };
        assert!(
            engine
                .check(T, &many)
                .unwrap_err()
                .to_string()
                .starts_with("tools:")
        );
    }
}
