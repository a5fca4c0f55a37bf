//! The configured skills through A2A: governance and knowledge tools called directly
//! over JSON-RPC and REST, and the card listing every tool's schema.

use agent_a2a::config::{
    PolicyLayer, PolicyMode, PolicySettings, RuleOperator, RuleSettings, RuleSeverity, RuleTarget,
    Settings,
};
use serde_json::{Value, json};

use crate::support::{Backend, call_tool, spawn_configured, tool_result};

/// A company policy that blocks cloud credentials anywhere.
fn no_secrets(settings: &mut Settings) {
    settings.governance.policies = vec![PolicySettings {
        id: "no-secrets".into(),
        layer: PolicyLayer::Company,
        mode: PolicyMode::Mandatory,
        scope_id: None,
        description: None,
        rules: vec![RuleSettings {
            id: "no-aws-keys".into(),
            target: RuleTarget::Content,
            operator: RuleOperator::MustNotMatch,
            value: Some("AKIA[0-9A-Z]{16}".into()),
            severity: RuleSeverity::Block,
            message: "no cloud credentials".into(),
        }],
    }];
}

#[actix_web::test]
async fn governance_validates_and_lists_constraints() {
    let app = spawn_configured(Backend::Sqlite, no_secrets).await;
    let ok =
        tool_result(&call_tool(&app, "governance_validate", json!({"content": "hello"})).await);
    assert_eq!(ok["passed"], true);
    let leaked = json!({"content": "key AKIAABCDEFGHIJKLMNOP"});
    let bad = tool_result(&call_tool(&app, "governance_validate", leaked).await);
    assert_eq!(bad["passed"], false);
    assert_eq!(bad["counts"]["block"], 1);
    assert_eq!(bad["violations"][0]["ruleId"], "no-aws-keys");
    let constraints = tool_result(&call_tool(&app, "governance_constraints", json!({})).await);
    assert_eq!(constraints["constraints"][0]["policyId"], "no-secrets");
}

#[actix_web::test]
async fn knowledge_items_go_through_their_lifecycle_with_history() {
    let app = spawn_configured(Backend::Sqlite, no_secrets).await;
    let proposal = json!({
        "layer": "project", "path": "adr/0001-use-postgres", "type": "adr",
        "title": "Use Postgres", "body": "We store everything in Postgres.", "tags": ["storage"]
    });
    let proposed = tool_result(&call_tool(&app, "knowledge_propose", proposal.clone()).await);
    let id = proposed["item"]["id"].as_str().unwrap().to_owned();
    assert_eq!(id, "project/adr/0001-use-postgres");
    assert_eq!(proposed["item"]["status"], "draft");
    for status in ["proposed", "accepted"] {
        let r = call_tool(
            &app,
            "knowledge_update_status",
            json!({"id": id, "status": status}),
        )
        .await;
        assert_eq!(tool_result(&r)["item"]["status"], status);
    }
    let found =
        tool_result(&call_tool(&app, "knowledge_query", json!({"query": "postgres"})).await);
    assert_eq!(found["items"][0]["id"], id.as_str(), "{found}");
    let shown = tool_result(
        &call_tool(
            &app,
            "knowledge_show",
            json!({"id": id, "includeHistory": true}),
        )
        .await,
    );
    assert_eq!(shown["history"].as_array().unwrap().len(), 3, "{shown}");

    // Accepted items are deprecated, not deleted; an illegal transition is rejected.
    let refused = call_tool(&app, "knowledge_delete", json!({"id": id})).await;
    assert_eq!(
        refused["status"]["state"], "TASK_STATE_REJECTED",
        "{refused}"
    );
    let back = call_tool(
        &app,
        "knowledge_update_status",
        json!({"id": id, "status": "draft"}),
    )
    .await;
    assert_eq!(back["status"]["state"], "TASK_STATE_REJECTED");
    // Proposing the same path again is a conflict.
    let again = call_tool(&app, "knowledge_propose", proposal).await;
    assert_eq!(again["status"]["state"], "TASK_STATE_REJECTED");
    assert!(
        again["status"]["message"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("conflict")
    );
}

#[actix_web::test]
async fn a_governance_block_rejects_a_proposal_and_lists_the_violations() {
    let app = spawn_configured(Backend::Sqlite, no_secrets).await;
    let leaking = json!({
        "layer": "team", "path": "pattern/deploy", "type": "pattern",
        "title": "Deploying", "body": "Use the key AKIAABCDEFGHIJKLMNOP to deploy."
    });
    let task = call_tool(&app, "knowledge_propose", leaking).await;
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED", "{task}");
    let parts = task["status"]["message"]["parts"].as_array().unwrap();
    assert!(
        parts[0]["text"]
            .as_str()
            .unwrap()
            .contains("blocked by governance")
    );
    assert_eq!(parts[1]["data"]["violations"][0]["ruleId"], "no-aws-keys");
    let nothing =
        tool_result(&call_tool(&app, "knowledge_query", json!({"status": "draft"})).await);
    assert_eq!(
        nothing["items"].as_array().unwrap().len(),
        0,
        "nothing was written"
    );
}

#[actix_web::test]
async fn schema_violations_are_rejected_naming_the_field() {
    let app = spawn_configured(Backend::Sqlite, |_| {}).await;
    let task = call_tool(&app, "knowledge_propose", json!({"layer": "project"})).await;
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED");
    let text = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains("path: is required"), "{text}");
}

#[actix_web::test]
async fn tools_are_callable_over_rest_too() {
    let app = spawn_configured(Backend::Sqlite, |_| {}).await;
    let body = json!({"message": {"messageId": "m-rest", "role": "ROLE_USER",
        "parts": [{"data": {"tool": "governance_validate", "arguments": {"content": "fine"}}}]}});
    let r: Value = app
        .post_json("/message:send", body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        r["task"]["artifacts"][0]["parts"][0]["data"]["passed"], true,
        "{r}"
    );
}

#[actix_web::test]
async fn the_card_lists_every_configured_tool_with_its_schema() {
    let app = spawn_configured(Backend::Sqlite, |_| {}).await;
    let card: Value = app
        .get("/.well-known/agent-card.json")
        .await
        .json()
        .await
        .unwrap();
    let skills: Vec<&str> = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(
        skills.contains(&"knowledge") && skills.contains(&"governance"),
        "{skills:?}"
    );
    let schemas = &card["capabilities"]["extensions"][0]["params"]["skills"];
    for (skill, tool) in [
        ("memory", "memory_add"),
        ("memory", "memory_search"),
        ("context", "session_context"),
        ("knowledge", "knowledge_propose"),
        ("knowledge", "knowledge_query"),
        ("governance", "governance_validate"),
    ] {
        let tools = schemas[skill].as_array().unwrap();
        let entry = tools
            .iter()
            .find(|t| t["name"] == tool)
            .unwrap_or_else(|| panic!("{tool}"));
        assert_eq!(entry["inputSchema"]["type"], "object");
        assert_eq!(entry["inputSchema"]["additionalProperties"], false);
        assert_eq!(entry["outputSchema"]["type"], "object", "{tool}");
        assert!(
            entry["outputSchema"]["required"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
        );
    }
}

/// Every memory tool through A2A, with isolation between users and a governance block.
async fn memory_tools_round_trip(app: crate::support::TestApp) {
    let add = json!({"content": "Alice prefers green tea in the morning", "layer": "user",
                     "userId": "alice", "tags": ["preferences"]});
    let added = tool_result(&call_tool(&app, "memory_add", add.clone()).await);
    let id = added["memoryId"].as_str().unwrap().to_owned();
    assert_eq!(added["duplicate"], false);
    let again = tool_result(&call_tool(&app, "memory_add", add).await);
    assert_eq!(
        (again["memoryId"].as_str(), again["duplicate"].as_bool()),
        (Some(id.as_str()), Some(true))
    );

    let search = json!({"query": "green tea", "userId": "alice"});
    let found = tool_result(&call_tool(&app, "memory_search", search).await);
    assert_eq!(found["results"][0]["memoryId"], id.as_str(), "{found}");
    let other = json!({"query": "green tea", "userId": "bob"});
    let none = tool_result(&call_tool(&app, "memory_search", other).await);
    assert_eq!(none["totalCount"], 0, "another user sees nothing: {none}");

    let got = tool_result(
        &call_tool(
            &app,
            "memory_get",
            json!({"memoryId": id, "userId": "alice"}),
        )
        .await,
    );
    assert_eq!(
        got["content"], "Alice prefers green tea in the morning",
        "{got}"
    );
    let hidden = call_tool(&app, "memory_get", json!({"memoryId": id, "userId": "bob"})).await;
    assert_eq!(hidden["status"]["state"], "TASK_STATE_REJECTED", "{hidden}");
    let update = json!({"memoryId": id, "userId": "alice", "content": "Alice prefers jasmine tea"});
    let updated = tool_result(&call_tool(&app, "memory_update", update).await);
    assert_eq!(updated["content"], "Alice prefers jasmine tea");
    let feedback = json!({"memoryId": id, "userId": "alice", "reward": 1.0, "kind": "helpful"});
    let rewarded = tool_result(&call_tool(&app, "memory_feedback", feedback).await);
    assert!(rewarded["importance"].as_f64().unwrap() > 0.5, "{rewarded}");

    let secret =
        json!({"content": "deploy key AKIAABCDEFGHIJKLMNOP", "layer": "user", "userId": "alice"});
    let blocked = call_tool(&app, "memory_add", secret).await;
    assert_eq!(
        blocked["status"]["state"], "TASK_STATE_REJECTED",
        "{blocked}"
    );
    assert_eq!(
        blocked["status"]["message"]["parts"][1]["data"]["violations"][0]["ruleId"],
        "no-aws-keys"
    );
    let missing_scope = call_tool(
        &app,
        "memory_add",
        json!({"content": "x", "layer": "session", "userId": "alice"}),
    )
    .await;
    assert_eq!(missing_scope["status"]["state"], "TASK_STATE_REJECTED");
    assert!(
        missing_scope["status"]["message"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("sessionId")
    );

    let deleted = tool_result(
        &call_tool(
            &app,
            "memory_delete",
            json!({"memoryId": id, "userId": "alice"}),
        )
        .await,
    );
    assert_eq!(deleted["deleted"], true);
}

#[actix_web::test]
async fn memory_tools_on_sqlite() {
    memory_tools_round_trip(spawn_configured(Backend::Sqlite, no_secrets).await).await;
}

#[actix_web::test]
async fn memory_tools_on_postgres() {
    let Some(db) = crate::support::fresh_postgres().await else {
        return;
    };
    memory_tools_round_trip(spawn_configured(Backend::Postgres(db.url.clone()), no_secrets).await)
        .await;
}

#[actix_web::test]
async fn session_context_brings_memories_and_constraints_together() {
    let app = spawn_configured(Backend::Sqlite, no_secrets).await;
    let add = json!({"content": "The staging cluster is in eu-west-1", "layer": "project", "projectId": "atlas"});
    tool_result(&call_tool(&app, "memory_add", add).await);
    let ask = json!({"query": "staging cluster", "projectId": "atlas", "userId": "alice"});
    let context = tool_result(&call_tool(&app, "session_context", ask).await);
    assert_eq!(context["memories"][0]["layer"], "project", "{context}");
    assert_eq!(context["constraints"][0]["ruleId"], "no-aws-keys");
    let text = context["systemPromptAdditions"].as_str().unwrap();
    assert!(
        text.contains("## Relevant memories") && text.contains("eu-west-1"),
        "{text}"
    );
    assert!(text.contains("[BLOCK] no cloud credentials"), "{text}");
}
