//! The default executor: direct tool calls routed to a registered skill, and an honest
//! answer to free text.

use std::sync::Arc;

use agent_a2a::cli::{Agent, SkillSource};
use agent_a2a::runtime::ToolRoutingExecutor;
use agent_a2a::skills::{Caller, Skill, SkillError, SkillInfo, SkillRegistry, ToolSpec};
use async_trait::async_trait;
use serde_json::{Value, json};

/// A skill that adds two numbers.
struct Arithmetic(SkillInfo);

impl Arithmetic {
    fn new() -> Self {
        Self(SkillInfo::new("arithmetic", "Arithmetic", "Adds numbers").with_tags(&["math"]))
    }
}

#[async_trait]
impl Skill for Arithmetic {
    fn info(&self) -> &SkillInfo {
        &self.0
    }
    fn tools(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "add".into(),
            description: "a + b".into(),
            input_schema: json!({"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}),
            output_schema: json!({"type":"object","required":["sum"],"properties":{"sum":{"type":"number"}}}),
        }]
    }
    async fn invoke(
        &self,
        _tool: &str,
        args: Value,
        _caller: &Caller,
    ) -> Result<Value, SkillError> {
        let a = args["a"]
            .as_f64()
            .ok_or_else(|| SkillError::InvalidArguments("a: a number is required".into()))?;
        let b = args["b"]
            .as_f64()
            .ok_or_else(|| SkillError::InvalidArguments("b: a number is required".into()))?;
        Ok(json!({"sum": a + b}))
    }
}

async fn app() -> crate::support::TestApp {
    let mut registry = SkillRegistry::default();
    registry.register(Arc::new(Arithmetic::new()));
    let agent = Agent {
        skills: SkillSource::Registry(registry),
        ..Agent::new(Arc::new(ToolRoutingExecutor))
    };
    crate::support::spawn_app_with_agent(agent).await
}

fn call(tool: &str, arguments: Value) -> Value {
    json!({"message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
        "parts": [{"data": {"tool": tool, "arguments": arguments}}]}})
}

#[actix_web::test]
async fn a_direct_tool_call_completes_with_the_result_as_an_artifact() {
    let app = app().await;
    let r = app
        .rpc("SendMessage", call("add", json!({"a": 2, "b": 3})))
        .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    assert_eq!(task["artifacts"][0]["parts"][0]["data"]["sum"], 5.0);
    assert_eq!(task["artifacts"][0]["name"], "add");
}

#[actix_web::test]
async fn bad_arguments_reject_the_task_and_unknown_tools_fail_the_request() {
    let app = app().await;
    let r = app.rpc("SendMessage", call("add", json!({"a": 2}))).await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED", "{r}");
    assert!(
        task["status"]["message"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("b:")
    );
    let r = app.rpc("SendMessage", call("multiply", json!({}))).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

#[actix_web::test]
async fn free_text_gets_input_required_with_the_tool_list() {
    let app = app().await;
    let r = app.send_text("what can you do?").await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let help = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(help.contains("add") && help.contains("\"tool\""), "{help}");
}

#[actix_web::test]
async fn the_card_lists_skills_and_tool_schemas() {
    let app = app().await;
    let card: Value = app
        .get("/.well-known/agent-card.json")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(card["skills"][0]["id"], "arithmetic");
    let ext = &card["capabilities"]["extensions"][0];
    assert_eq!(ext["params"]["skills"]["arithmetic"][0]["name"], "add");
    assert_eq!(
        ext["params"]["skills"]["arithmetic"][0]["inputSchema"]["required"][0],
        "a"
    );
}

/// A tool call that continues a task waiting for input: the stream says "working" once
/// (the resume), then the result and the end — not "working" twice in a row.
#[actix_web::test]
async fn a_tool_call_continuing_a_task_streams_working_once() {
    let app = app().await;
    let asked = app.send_text("hello").await;
    let task = &asked["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );
    let message = json!({
        "messageId": uuid::Uuid::new_v4().to_string(),
        "role": "ROLE_USER",
        "taskId": task["id"],
        "contextId": task["contextId"],
        "parts": [{"data": {"tool": "add", "arguments": {"a": 2, "b": 3}}}],
    });
    let events = app
        .rpc_stream("SendStreamingMessage", json!({"message": message}))
        .await;
    // The states the stream reports: its task snapshot's, then each status update's.
    let states: Vec<String> = events
        .iter()
        .filter_map(|e| {
            let result = &e.data["result"];
            result["task"]["status"]["state"]
                .as_str()
                .or_else(|| result["statusUpdate"]["status"]["state"].as_str())
        })
        .map(str::to_owned)
        .collect();
    assert_eq!(
        states,
        ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"],
        "{events:?}"
    );
}
