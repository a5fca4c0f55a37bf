//! [`RoutingExecutor`]: a cheap model turns free text into tool calls, which run as an
//! explicit call's would (`agent.routing_provider`).

use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use serde_json::{Map, Value};

use super::agent_loop::{SkillTools, run_failure};
use super::executor::{AgentExecutor, Turn, TurnSink};
use super::tool_router::{self, ToolRoutingExecutor};
use crate::agent::{
    AgentError, Content, Event, LlmRequest, ModelAdapter, Part, RunError, ToolInvoker,
    function_declarations,
};
use crate::config::AgentSettings;
use crate::domain::{Artifact, Part as A2aPart, Timestamp};
use crate::error::Result;
use crate::providers::ToolChoice;
use crate::session::{FunctionCall, FunctionResponse};

/// Turns free text into tool calls with a cheap model that sees only the skills'
/// descriptions and the tools' schemas (no history, no instruction of the agent). The
/// results become artifacts, as for an explicit call; a model that calls nothing asks the
/// user for what is missing (`input-required`), in its own words.
///
/// `agent.routing_tool_choice` can force a call: of some tool, or of one named tool, whose
/// arguments the model then only fills in from the text (the one form a small model on a
/// server that constrains its output to the schema gets right every time).
pub struct RoutingExecutor {
    model: ModelAdapter,
    model_name: Option<String>,
    tool_choice: ToolChoice,
    instruction: String,
    max_output_tokens: u32,
    tool_timeout: Duration,
}

impl RoutingExecutor {
    /// `skills` are the (name, description) of every registered skill.
    pub fn new(model: ModelAdapter, agent: &AgentSettings, skills: &[(String, String)]) -> Self {
        let listing: Vec<String> = skills
            .iter()
            .map(|(name, description)| format!("- {name}: {description}"))
            .collect();
        Self {
            model,
            model_name: (!agent.routing_model.is_empty()).then(|| agent.routing_model.clone()),
            tool_choice: tool_choice(&agent.routing_tool_choice),
            instruction: format!(
                "Turn the user's request into calls of the tools provided, with arguments \
                 that follow each tool's schema. Do not answer the request yourself. When the \
                 request is unclear or lacks a required argument, call no tool and ask one \
                 short question instead.\nSkills:\n{}",
                listing.join("\n")
            ),
            max_output_tokens: agent.max_output_tokens,
            tool_timeout: Duration::from_millis(agent.tool_timeout_ms),
        }
    }
}

impl RoutingExecutor {
    /// The tool `agent.routing_tool_choice` names, if it names one.
    pub(super) fn forced_tool(&self) -> Option<&str> {
        match &self.tool_choice {
            ToolChoice::Tool(tool) => Some(tool),
            ToolChoice::Auto | ToolChoice::Required => None,
        }
    }
}

#[async_trait]
impl AgentExecutor for RoutingExecutor {
    /// Direct calls only: a routed call is the cheap model's, which is not asked again.
    fn resumable(&self, turn: &Turn) -> bool {
        ToolRoutingExecutor::is_tool_call(turn) && ToolRoutingExecutor.resumable(turn)
    }

    async fn execute(&self, turn: Turn, sink: TurnSink) -> Result<()> {
        if ToolRoutingExecutor::is_tool_call(&turn) {
            return ToolRoutingExecutor.execute(turn, sink).await;
        }
        sink.working().await?;
        let mut specs = turn.tools.specs_for(&turn.tenant);
        if let ToolChoice::Tool(forced) = &self.tool_choice {
            specs.retain(|spec| spec.name == *forced);
            if specs.is_empty() {
                let text =
                    format!("tool {forced:?} (agent.routing_tool_choice) is not offered here");
                return sink.fail(sink.failure(text, "TOOL_ERROR")).await;
            }
        }
        let request = LlmRequest {
            contents: vec![Content {
                role: "user".into(),
                parts: vec![Part::Text(turn.message.text())],
            }],
            system_instruction: Some(Content {
                role: "system".into(),
                parts: vec![Part::Text(self.instruction.clone())],
            }),
            tools: function_declarations(&specs),
            tool_choice: self.tool_choice.clone(),
            temperature: Some(0.0),
            max_tokens: Some(self.max_output_tokens),
            model: self.model_name.clone(),
        };
        let mut responses = Box::pin(self.model.generate(request, false));
        let response = match responses.next().await {
            Some(Ok(response)) => response,
            Some(Err(e)) => return sink.fail(run_failure(&sink, &RunError::Model(e))).await,
            None => {
                let e = RunError::Model(AgentError::StreamEndedWithoutDone);
                return sink.fail(run_failure(&sink, &e)).await;
            }
        };
        let root = "router";
        let event = Event::new(root, response.content.clone(), Timestamp::now());
        let calls: Vec<FunctionCall> = event.function_calls().cloned().collect();
        if calls.is_empty() {
            let question = event.text();
            let text = if question.trim().is_empty() {
                ToolRoutingExecutor::help(&turn.tools)
            } else {
                question
            };
            return sink.input_required(sink.text(text)).await;
        }
        sink.append_event(event).await?;
        let tools = SkillTools::new(&turn, &sink);
        let mut failures = Vec::new();
        for call in &calls {
            let invoke = tools.invoke(call);
            let result = match tokio::time::timeout(self.tool_timeout, invoke).await {
                Ok(result) => result,
                Err(_) => Err(format!(
                    "timed out after {} ms",
                    self.tool_timeout.as_millis()
                )),
            };
            let response = match &result {
                Ok(Value::Object(map)) => map.clone(),
                Ok(other) => Map::from_iter([("result".to_owned(), other.clone())]),
                Err(e) => Map::from_iter([("error".to_owned(), Value::String(e.clone()))]),
            };
            let content = Content {
                role: "user".into(),
                parts: vec![Part::FunctionResponse(FunctionResponse {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    response: response.clone(),
                })],
            };
            sink.append_event(Event::new(root, Some(content), Timestamp::now()))
                .await?;
            let mut artifact = Artifact::new(vec![A2aPart {
                media_type: Some("application/json".into()),
                ..A2aPart::data(Value::Object(response))
            }]);
            artifact.name = Some(call.name.clone());
            sink.artifact(artifact, false, true).await?;
            if let Err(e) = result {
                failures.push(format!("{}: {e}", call.name));
            }
        }
        if failures.len() == calls.len() {
            return sink
                .fail(sink.failure(failures.join("; "), "TOOL_ERROR"))
                .await;
        }
        // The last call asked the user something: the reply continues that call directly
        // (the routing model sees no history).
        if let Some((tool, question)) = tools.question() {
            return tool_router::ask(&sink, &tool, None, question).await;
        }
        sink.complete(None).await
    }
}

/// `agent.routing_tool_choice` as the providers take it.
fn tool_choice(setting: &str) -> ToolChoice {
    match setting {
        "auto" => ToolChoice::Auto,
        "required" => ToolChoice::Required,
        tool => ToolChoice::Tool(tool.to_owned()),
    }
}
