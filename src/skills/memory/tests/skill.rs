//! The tools through `Skill::invoke`: schemas, results, and arguments refused with the
//! offending field named.

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::domain::ContextId;
use crate::skills::memory::{MemorySkill, TOOL_NAMES};
use crate::skills::{Caller, Skill, SkillError};
use crate::store::memories::testing::SqliteMemories;

fn caller(tenant_name: &str) -> Caller {
    Caller {
        tenant: tenant(tenant_name),
        context_id: ContextId::parse("ctx-1").unwrap(),
        fence_token: None,
        call: None,
        progress: None,
    }
}

async fn skill() -> (MemorySkill, SqliteMemories) {
    let db = SqliteMemories::open().await;
    let skill = MemorySkill::new(Arc::new(engine(db.repo.clone())));
    (skill, db)
}

#[tokio::test]
async fn every_tool_has_a_complete_schema() {
    let (skill, _db) = skill().await;
    assert_eq!(skill.info().id, "memory");
    let tools = skill.tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, TOOL_NAMES);
    for tool in &tools {
        let schema = &tool.input_schema;
        assert_eq!(schema["type"], "object", "{}", tool.name);
        assert_eq!(schema["additionalProperties"], false, "{}", tool.name);
        let properties = schema["properties"].as_object().unwrap();
        let required: Vec<&str> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        let mut sorted = required.clone();
        sorted.sort_unstable();
        assert_eq!(required, sorted, "{}: deterministic order", tool.name);
        for name in &required {
            assert!(properties.contains_key(*name), "{}: {name}", tool.name);
        }
        for (name, property) in properties {
            assert!(property["type"].is_string(), "{}.{name}: type", tool.name);
            assert!(
                property["description"].is_string(),
                "{}.{name}: description",
                tool.name
            );
            let camel = !name.contains('_') && name.chars().next().unwrap().is_lowercase();
            assert!(camel, "{}.{name}: camelCase", tool.name);
        }
        for id in [
            "agentId",
            "userId",
            "sessionId",
            "projectId",
            "teamId",
            "orgId",
            "companyId",
        ] {
            assert!(properties.contains_key(id), "{}: {id}", tool.name);
        }
    }
    let add = &tools[0].input_schema;
    assert_eq!(
        add["properties"]["layer"]["enum"],
        json!([
            "agent", "user", "session", "project", "team", "org", "company"
        ])
    );
    assert_eq!(add["required"], json!(["content", "layer"]));
    assert_eq!(
        tools[1].input_schema["properties"]["limit"]["maximum"],
        json!(50)
    );
    assert_eq!(
        tools[5].input_schema["properties"]["kind"]["enum"],
        json!([
            "helpful",
            "irrelevant",
            "outdated",
            "inaccurate",
            "duplicate"
        ])
    );
}

#[tokio::test]
async fn the_tools_add_search_read_change_and_forget() {
    let (skill, _db) = skill().await;
    let me = caller("t1");
    let invoke = |tool: &'static str, args: Value| {
        let (skill, me) = (&skill, &me);
        async move { skill.invoke(tool, args, me).await }
    };
    let args = json!({"content": "Prefers answers in French", "layer": "user", "userId": "u1",
                      "tags": ["language"], "metadata": {"source": "chat"}});
    let added = invoke("memory_add", args.clone()).await.unwrap();
    let id = added["memoryId"].as_str().unwrap().to_owned();
    assert_eq!(added["duplicate"], false);
    let again = invoke("memory_add", args).await.unwrap();
    assert_eq!(again, json!({"memoryId": id, "duplicate": true}));

    let found = invoke(
        "memory_search",
        json!({"query": "french answers", "userId": "u1"}),
    )
    .await
    .unwrap();
    assert_eq!(found["totalCount"], 1);
    assert_eq!(found["searchedLayers"], json!(["user"]));
    let hit = &found["results"][0];
    assert_eq!(hit["memoryId"], id.as_str());
    assert_eq!(hit["layer"], "user");
    assert_eq!(hit["tags"], json!(["language"]));
    assert_eq!(hit["importance"], 0.5);
    assert!(hit["score"].as_f64().unwrap() > 0.0);

    let memory = invoke("memory_get", json!({"memoryId": id, "userId": "u1"}))
        .await
        .unwrap();
    assert_eq!(memory["content"], "Prefers answers in French");
    assert_eq!(memory["scope"], json!({"userId": "u1"}));
    assert_eq!(memory["metadata"], json!({"source": "chat"}));
    assert_eq!(memory["hasEmbedding"], false);
    assert!(memory["createdAt"].as_str().unwrap().ends_with('Z'));

    let updated = invoke(
        "memory_update",
        json!({"memoryId": id, "userId": "u1", "content": "Prefers answers in German"}),
    )
    .await
    .unwrap();
    assert_eq!(updated["content"], "Prefers answers in German");
    assert_eq!(updated["tags"], json!(["language"]));

    let feedback = json!({"memoryId": id, "userId": "u1", "reward": 1, "kind": "helpful"});
    let rated = invoke("memory_feedback", feedback).await.unwrap();
    assert_eq!(rated, json!({"memoryId": id, "importance": 0.75}));

    let deleted = invoke("memory_delete", json!({"memoryId": id, "userId": "u1"})).await;
    assert_eq!(deleted, Ok(json!({"deleted": true})));
    let gone = invoke("memory_get", json!({"memoryId": id, "userId": "u1"})).await;
    assert!(matches!(gone, Err(SkillError::NotFound(_))), "{gone:?}");
}

#[tokio::test]
async fn bad_arguments_are_refused_naming_the_field() {
    let (skill, _db) = skill().await;
    let me = caller("t1");
    let cases = [
        (
            "memory_add",
            json!({"content": "x", "layer": "user", "userId": "u1", "colour": "red"}),
            "colour",
        ),
        (
            "memory_add",
            json!({"content": "x", "layer": "User", "userId": "u1"}),
            "layer",
        ),
        (
            "memory_add",
            json!({"content": "x", "layer": "user", "userId": "u1", "tags": "x"}),
            "tags",
        ),
        (
            "memory_add",
            json!({"layer": "user", "userId": "u1"}),
            "content",
        ),
        (
            "memory_add",
            json!({"content": "x", "layer": "user", "userId": 5}),
            "userId",
        ),
        (
            "memory_add",
            json!({"content": "x", "layer": "session", "userId": "u1"}),
            "sessionId",
        ),
        (
            "memory_add",
            json!({"content": "x", "layer": "user", "userId": "u1", "metadata": [1]}),
            "metadata",
        ),
        (
            "memory_search",
            json!({"query": "x", "userId": "u1", "limit": -1}),
            "limit",
        ),
        (
            "memory_search",
            json!({"query": "x", "userId": "u1", "layers": ["Agent"]}),
            "layers",
        ),
        (
            "memory_search",
            json!({"query": "x", "userId": "u1", "threshold": "high"}),
            "threshold",
        ),
        ("memory_get", json!({"id": "m1", "userId": "u1"}), "id"),
        (
            "memory_update",
            json!({"memoryId": "m1", "userId": "u1", "tags": [1]}),
            "tags",
        ),
        (
            "memory_feedback",
            json!({"memoryId": "m1", "userId": "u1", "reward": "high", "kind": "helpful"}),
            "reward",
        ),
        (
            "memory_feedback",
            json!({"memoryId": "m1", "userId": "u1", "reward": 1, "kind": "Helpful"}),
            "kind",
        ),
        (
            "memory_feedback",
            json!({"memoryId": "m1", "userId": "u1", "reward": 2, "kind": "helpful"}),
            "reward",
        ),
        ("memory_delete", json!(["m1"]), "arguments"),
    ];
    for (tool, args, field) in cases {
        match skill.invoke(tool, args.clone(), &me).await {
            Err(SkillError::InvalidArguments(message)) => {
                assert!(
                    message.contains(field),
                    "{tool} {args}: {message:?} should name {field}"
                )
            }
            other => panic!("{tool} {args}: expected InvalidArguments, got {other:?}"),
        }
    }
    let unknown = skill.invoke("memory_promote", json!({}), &me).await;
    assert!(
        matches!(unknown, Err(SkillError::NotFound(_))),
        "{unknown:?}"
    );
}

#[tokio::test]
async fn the_callers_tenant_scopes_every_call() {
    let (skill, _db) = skill().await;
    let args = json!({"content": "shared user id, other tenant", "layer": "user", "userId": "u1"});
    let added = skill
        .invoke("memory_add", args, &caller("t1"))
        .await
        .unwrap();
    let search = json!({"query": "shared tenant", "userId": "u1"});
    let other = skill
        .invoke("memory_search", search, &caller("t2"))
        .await
        .unwrap();
    assert_eq!(other["totalCount"], 0);
    let get = json!({"memoryId": added["memoryId"], "userId": "u1"});
    let stolen = skill.invoke("memory_get", get, &caller("t2")).await;
    assert!(matches!(stolen, Err(SkillError::NotFound(_))));
}
