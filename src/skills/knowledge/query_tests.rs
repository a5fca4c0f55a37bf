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
