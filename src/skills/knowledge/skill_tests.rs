//! Specifications of the `knowledge_*` tools through `Skill::invoke`: complete schemas,
//! the happy path end to end, and a refusal naming the field for every kind of bad input.

use serde_json::json;

use super::*;
use crate::config::KnowledgeSettings;
use crate::domain::{ContextId, TenantId};
use crate::skills::governance::{
    EvalContext, Operator, Report, Scope, Severity, Target, Validator, Violation,
};

fn skill_with(validator: Option<Arc<dyn Validator>>) -> (tempfile::TempDir, KnowledgeSkill) {
    let dir = tempfile::tempdir().unwrap();
    let engine =
        KnowledgeEngine::open(dir.path(), &KnowledgeSettings::default(), validator).unwrap();
    (dir, KnowledgeSkill::new(Arc::new(engine)))
}

fn skill() -> (tempfile::TempDir, KnowledgeSkill) {
    skill_with(None)
}

fn caller(tenant: &str) -> Caller {
    Caller {
        tenant: TenantId::parse(tenant).unwrap(),
        context_id: ContextId::generate(),
        fence_token: None,
        call: None,
        progress: None,
    }
}

async fn call(skill: &KnowledgeSkill, tool: &str, args: Value) -> Result<Value, SkillError> {
    skill.invoke(tool, args, &caller("acme")).await
}

fn invalid(result: Result<Value, SkillError>) -> String {
    match result {
        Err(SkillError::InvalidArguments(text)) => text,
        other => panic!("expected invalid arguments, got {other:?}"),
    }
}

fn adr() -> Value {
    json!({
        "layer": "project", "path": "adr/0001-use-postgres", "type": "adr",
        "title": "Use PostgreSQL", "body": "Because.", "tags": ["db"],
        "constraints": [{"id": "no-mysql", "target": "dependency", "operator": "must_not_use",
                         "value": "mysql", "severity": "block", "message": "We use PostgreSQL"}],
        "status": "proposed"
    })
}

#[test]
fn every_tool_has_a_complete_closed_schema() {
    let (_dir, skill) = skill();
    let names: Vec<String> = skill.tools().into_iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "knowledge_query",
            "knowledge_show",
            "knowledge_propose",
            "knowledge_update_status",
            "knowledge_delete",
            "knowledge_check"
        ]
    );
    for tool in skill.tools() {
        let s = &tool.input_schema;
        assert_eq!(s["type"], "object", "{}", tool.name);
        assert_eq!(s["additionalProperties"], false, "{}", tool.name);
        let props = s["properties"].as_object().unwrap();
        for required in s["required"].as_array().unwrap() {
            assert!(
                props.contains_key(required.as_str().unwrap()),
                "{}",
                tool.name
            );
        }
        for (name, prop) in props {
            assert!(prop["type"].is_string(), "{}.{name} has no type", tool.name);
            assert!(
                prop["description"].is_string(),
                "{}.{name} has no description",
                tool.name
            );
        }
        assert!(!tool.description.is_empty());
    }
    assert_eq!(skill.tools(), skill.tools(), "deterministic");
}

#[test]
fn advertised_rule_enums_are_the_ones_accepted() {
    for t in schema::TARGETS {
        serde_json::from_value::<Target>(json!(t)).unwrap();
    }
    for o in schema::OPERATORS {
        serde_json::from_value::<Operator>(json!(o)).unwrap();
    }
    for s in schema::SEVERITIES {
        serde_json::from_value::<Severity>(json!(s)).unwrap();
    }
}

#[tokio::test]
async fn the_tools_work_end_to_end() {
    let (_dir, skill) = skill();
    let proposed = call(&skill, "knowledge_propose", adr()).await.unwrap();
    let item = &proposed["item"];
    assert_eq!(item["id"], "project/adr/0001-use-postgres");
    assert_eq!(item["status"], "proposed");
    assert_eq!(item["author"], "acme");
    assert_eq!(item["constraints"][0]["operator"], "must_not_use");
    assert!(item["commit"].as_str().unwrap().len() == 40);

    let id = json!("project/adr/0001-use-postgres");
    let accepted = call(
        &skill,
        "knowledge_update_status",
        json!({"id": id, "status": "accepted", "reason": "agreed"}),
    )
    .await
    .unwrap();
    assert_eq!(accepted["previousStatus"], "proposed");
    assert_eq!(accepted["item"]["status"], "accepted");

    let shown = call(
        &skill,
        "knowledge_show",
        json!({"id": id, "includeConstraints": false, "includeHistory": true}),
    )
    .await
    .unwrap();
    assert!(shown["item"].get("constraints").is_none());
    assert_eq!(shown["item"]["body"], "Because.");
    assert_eq!(shown["history"].as_array().unwrap().len(), 2);
    assert_eq!(shown["history"][0]["author"], "acme");
    assert_eq!(shown["history"][0]["commit"], shown["item"]["commit"]);
    let plain = call(&skill, "knowledge_show", json!({"id": id}))
        .await
        .unwrap();
    assert!(plain.get("history").is_none() && plain["item"]["constraints"].is_array());

    let found = call(
        &skill,
        "knowledge_query",
        json!({"query": "postgresql", "tags": ["DB"]}),
    )
    .await
    .unwrap();
    assert_eq!(found["totalCount"], 1);
    assert_eq!(found["items"][0]["hasConstraints"], true);
    assert_eq!(found["items"][0]["summary"], "Because.");

    let report = call(
        &skill,
        "knowledge_check",
        json!({"dependencies": ["mysql"]}),
    )
    .await
    .unwrap();
    assert_eq!(report["passed"], false);
    assert_eq!(
        report["violations"][0]["policyId"],
        "project/adr/0001-use-postgres"
    );
    assert_eq!(report["counts"]["block"], 1);
    let clean = call(
        &skill,
        "knowledge_check",
        json!({"dependencies": ["mysql"], "layers": ["team"]}),
    )
    .await
    .unwrap();
    assert_eq!(clean["passed"], true);

    call(
        &skill,
        "knowledge_propose",
        json!({"layer": "team", "path": "scratch.md", "type": "spec", "title": "S", "body": ""}),
    )
    .await
    .unwrap();
    let deleted = call(&skill, "knowledge_delete", json!({"id": "team/scratch"}))
        .await
        .unwrap();
    assert_eq!(deleted["deleted"], true);
    assert_eq!(deleted["id"], "team/scratch");
}

#[tokio::test]
async fn bad_arguments_are_refused_naming_the_field() {
    let (_dir, skill) = skill();
    let mut unknown = adr();
    unknown["author"] = json!("me");
    assert!(
        invalid(call(&skill, "knowledge_propose", unknown).await)
            .contains("unknown field `author`")
    );
    let mut missing = adr();
    missing.as_object_mut().unwrap().remove("title");
    assert!(
        invalid(call(&skill, "knowledge_propose", missing).await).contains("missing field `title`")
    );
    let mut null_title = adr();
    null_title["title"] = Value::Null;
    assert!(invalid(call(&skill, "knowledge_propose", null_title).await).contains("`title`"));
    let mut bad_layer = adr();
    bad_layer["layer"] = json!("galaxy");
    assert!(invalid(call(&skill, "knowledge_propose", bad_layer).await).starts_with("`layer`"));
    let mut accepted = adr();
    accepted["status"] = json!("accepted");
    assert!(
        invalid(call(&skill, "knowledge_propose", accepted).await).contains("draft or proposed")
    );
    let mut bad_rule = adr();
    bad_rule["constraints"][0]["operator"] = json!("must_be_nice");
    assert!(
        invalid(call(&skill, "knowledge_propose", bad_rule).await).starts_with("`constraints`")
    );
    let mut bad_regex = adr();
    bad_regex["constraints"][0]["operator"] = json!("must_match");
    bad_regex["constraints"][0]["value"] = json!("[a-");
    assert!(invalid(call(&skill, "knowledge_propose", bad_regex).await).contains("invalid regex"));
    for path in ["../x", "a/../../b", "/etc/passwd", "..\\x"] {
        let mut traversal = adr();
        traversal["path"] = json!(path);
        assert!(
            invalid(call(&skill, "knowledge_propose", traversal).await).starts_with("`path`"),
            "{path}"
        );
    }

    assert!(
        invalid(call(&skill, "knowledge_query", json!({"limit": "ten"})).await)
            .starts_with("`limit`")
    );
    assert!(
        invalid(call(&skill, "knowledge_query", json!({"limit": 0})).await).starts_with("`limit`")
    );
    assert!(invalid(call(&skill, "knowledge_query", json!([1])).await).contains("JSON object"));
    assert!(
        invalid(call(&skill, "knowledge_show", json!({})).await).contains("missing field `id`")
    );
    assert!(
        invalid(call(&skill, "knowledge_show", json!({"id": "adr/1"})).await).starts_with("`id`")
    );
    assert!(
        invalid(
            call(
                &skill,
                "knowledge_show",
                json!({"id": "project/x", "includeHistory": "yes"})
            )
            .await
        )
        .starts_with("`includeHistory`")
    );
    let supersede = json!({"id": "project/x", "status": "superseded", "supersededBy": "nowhere"});
    assert!(
        invalid(call(&skill, "knowledge_update_status", supersede).await)
            .starts_with("`supersededBy`")
    );
    assert!(
        invalid(call(&skill, "knowledge_check", json!({"layers": ["moon"]})).await)
            .starts_with("`layers`")
    );

    assert!(matches!(
        call(&skill, "knowledge_show", json!({"id": "project/none"})).await,
        Err(SkillError::NotFound(_))
    ));
    assert!(matches!(
        call(&skill, "knowledge_delete", json!({"id": "project/none"})).await,
        Err(SkillError::NotFound(_))
    ));
    assert!(matches!(
        call(&skill, "knowledge_nope", json!({})).await,
        Err(SkillError::NotFound(_))
    ));

    call(&skill, "knowledge_propose", adr()).await.unwrap();
    assert!(matches!(
        call(&skill, "knowledge_propose", adr()).await,
        Err(SkillError::Conflict(text)) if text.contains("already exists")
    ));
    let refused = json!({"id": "project/adr/0001-use-postgres", "status": "deprecated"});
    assert!(
        invalid(call(&skill, "knowledge_update_status", refused).await)
            .contains("from proposed to deprecated")
    );
    // No request can name such a tenant, but a row stored by 0.1.0 may hold one: the
    // folder check still stands between it and the file system.
    let stored = Caller {
        tenant: TenantId::from_store("a/b").unwrap(),
        context_id: ContextId::generate(),
        fence_token: None,
        call: None,
        progress: None,
    };
    let odd_tenant = skill.invoke("knowledge_query", json!({}), &stored).await;
    assert!(invalid(odd_tenant).contains("tenant"));
}

/// Blocks every proposal.
struct BlocksAll;

impl Validator for BlocksAll {
    fn validate(&self, _tenant: &str, _scope: &Scope, _ctx: &EvalContext) -> Report {
        Report::from_violations(vec![Violation {
            rule_id: "frozen".into(),
            policy_id: Some("config:freeze".into()),
            severity: Severity::Block,
            target: Target::Content,
            message: "the knowledge base is frozen".into(),
        }])
    }
}

#[tokio::test]
async fn a_governance_block_is_reported_with_its_report() {
    let (_dir, skill) = skill_with(Some(Arc::new(BlocksAll)));
    match call(&skill, "knowledge_propose", adr()).await {
        Err(SkillError::Blocked { message, report }) => {
            assert!(
                message.contains("project/adr/0001-use-postgres"),
                "{message}"
            );
            assert_eq!(report["passed"], false);
            assert_eq!(report["violations"][0]["ruleId"], "frozen");
        }
        other => panic!("expected a block, got {other:?}"),
    }
    let found = call(&skill, "knowledge_query", json!({"status": "proposed"}))
        .await
        .unwrap();
    assert_eq!(found["totalCount"], 0);
}
