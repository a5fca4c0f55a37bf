//! The default executor: routes explicit tool calls to registered skills, with no model
//! involved, and answers free text honestly with the list of tools it can call.
//!
//! A tool call is a message with a data part `{"tool": "<name>", "arguments": {…}}`
//! (optionally `"skill": "<id>"`). The result becomes an artifact and the task completes;
//! a failing tool fails the task with the tool's message. An unknown tool is the
//! client's error and fails the request. Free text moves the task to `INPUT_REQUIRED`
//! with a message explaining how to call a tool.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::executor::{AgentExecutor, JOURNAL_PREFIX, Turn, TurnSink, calling};
use crate::domain::{Artifact, Part, PartContent, TaskId};
use crate::error::{Error, Result};
use crate::runtime::Tools;
use crate::skills::{Question, SkillError};

/// The default executor (no model): direct tool calls, and help for free text.
#[derive(Debug, Default, Clone, Copy)]
pub struct ToolRoutingExecutor;

/// A tool call found in a message.
struct ToolCall {
    tool: String,
    skill: Option<String>,
    arguments: Value,
}

impl ToolRoutingExecutor {
    /// Whether the turn's message holds an explicit tool call (well formed or not), or
    /// replies to the question a direct call asked in this task.
    pub(in crate::runtime) fn is_tool_call(turn: &Turn) -> bool {
        !matches!(the_call(turn), Ok(None))
    }

    pub(in crate::runtime) fn help(tools: &Tools) -> String {
        let tools = tools.names();
        let listing = if tools.is_empty() {
            "No tools are registered on this server, and no model is configured to answer \
             free text."
                .to_owned()
        } else {
            format!("Available tools: {}.", tools.join(", "))
        };
        format!(
            "{listing} To call a tool, send a message with a data part \
             {{\"tool\": \"<name>\", \"arguments\": {{...}}}}; the agent card lists each \
             tool's input schema."
        )
    }
}

/// The thread-state key of the call a task's question continues: `question:<task id>`,
/// `{"tool", "skill", "arguments"}`, written when a call's result asks the user
/// something (`Tools::question`) and the task goes `input-required`.
fn question_key(task: &TaskId) -> String {
    format!("question:{task}")
}

/// What task `task_id`'s calls started elsewhere and left running or waiting, from the
/// thread's `state`: each remote task a call's journal still records (`call:<task
/// id>/…`) and the one its question continues (`question:<task id>`), once per tool and
/// remote task, as `(tool, what to hand Skill::cancel)`.
pub(in crate::runtime) fn started_elsewhere<'a>(
    state: impl Iterator<Item = (&'a str, &'a Value)>,
    task_id: &TaskId,
) -> Vec<(String, Value)> {
    let journal = format!("{JOURNAL_PREFIX}{task_id}/");
    let question = question_key(task_id);
    let mut started: Vec<(String, Value)> = Vec::new();
    for (key, value) in state {
        let record = if key.starts_with(&journal) {
            value.clone()
        } else if key == question {
            value["arguments"].clone()
        } else {
            continue;
        };
        let Some(tool) = value["tool"].as_str() else {
            continue;
        };
        if !started
            .iter()
            .any(|(t, r)| t == tool && r["taskId"] == record["taskId"])
        {
            started.push((tool.to_owned(), record));
        }
    }
    started
}

/// The task waits for the user's reply to `question`, asked by a call of `tool`: the
/// call to continue with it is kept in the thread's state, and the task goes
/// `input-required` with the question.
pub(super) async fn ask(
    sink: &TurnSink,
    tool: &str,
    skill: Option<&str>,
    question: Question,
) -> Result<()> {
    let continued = json!({
        "tool": tool,
        "skill": skill,
        "arguments": question.continue_with,
    });
    sink.set_state(question_key(sink.task_id()), continued)
        .await?;
    sink.input_required(sink.text(question.text)).await
}

/// The call a turn makes: the message's explicit call, or — a reply in a task whose call
/// asked a question — that call continued with the reply's text.
fn the_call(turn: &Turn) -> Result<Option<ToolCall>> {
    if let Some(call) = find_call(turn)? {
        return Ok(Some(call));
    }
    if !turn.continuation {
        return Ok(None);
    }
    let Some(asked) = turn.state.get(&question_key(&turn.task_id)) else {
        return Ok(None);
    };
    let (Some(tool), Some(Value::Object(arguments))) =
        (asked["tool"].as_str(), asked.get("arguments"))
    else {
        return Ok(None);
    };
    let text = turn.message.text();
    if text.trim().is_empty() {
        return Ok(None);
    }
    let mut arguments = arguments.clone();
    arguments.insert("text".into(), Value::String(text));
    Ok(Some(ToolCall {
        tool: tool.to_owned(),
        skill: asked["skill"].as_str().map(str::to_owned),
        arguments: Value::Object(arguments),
    }))
}

fn find_call(turn: &Turn) -> Result<Option<ToolCall>> {
    for part in &turn.message.parts {
        let PartContent::Data(Value::Object(data)) = &part.content else {
            continue;
        };
        let Some(tool) = data.get("tool") else {
            continue;
        };
        let tool = tool
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| Error::invalid_params("tool: must be a non-empty string"))?;
        let skill = match data.get("skill") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(Error::invalid_params("skill: must be a string")),
        };
        let arguments = match data.get("arguments") {
            None | Some(Value::Null) => json!({}),
            Some(v @ Value::Object(_)) => v.clone(),
            Some(_) => return Err(Error::invalid_params("arguments: must be an object")),
        };
        return Ok(Some(ToolCall {
            tool: tool.to_owned(),
            skill,
            arguments,
        }));
    }
    Ok(None)
}

#[async_trait]
impl AgentExecutor for ToolRoutingExecutor {
    /// A direct call of a tool that can be called again (`Tools::resumable`), or the reply
    /// that continues one: made again as it was, under the same call key.
    fn resumable(&self, turn: &Turn) -> bool {
        matches!(the_call(turn), Ok(Some(call))
            if turn.tools.resumable(&call.tool)
                && turn.tools.has(&call.tool, call.skill.as_deref()))
    }

    async fn execute(&self, turn: Turn, sink: TurnSink) -> Result<()> {
        let Some(call) = the_call(&turn)? else {
            return sink
                .input_required(sink.text(Self::help(&turn.tools)))
                .await;
        };
        let unknown = || {
            Error::invalid_params(format!(
                "tool: unknown tool {:?}. {}",
                call.tool,
                Self::help(&turn.tools)
            ))
        };
        if !turn.tools.has(&call.tool, call.skill.as_deref()) {
            return Err(unknown());
        }
        sink.working().await?;
        let caller = calling(
            turn.caller(),
            &turn.task_id,
            &turn.journal(&sink),
            turn.message.message_id.as_str(),
        );
        let result = sink
            .call_tool(
                &turn.tools,
                turn.progress_every,
                &call.tool,
                call.skill.as_deref(),
                call.arguments,
                caller,
            )
            .await
            .ok_or_else(unknown)?;
        match result {
            Ok(result) => {
                let question = turn.tools.question(&call.tool, &result);
                let mut artifact = Artifact::new(turn.tools.parts(&call.tool, result));
                artifact.name = Some(call.tool.clone());
                sink.artifact(artifact, false, true).await?;
                match question {
                    Some(question) => ask(&sink, &call.tool, call.skill.as_deref(), question).await,
                    None => sink.complete(None).await,
                }
            }
            Err(SkillError::InvalidArguments(e)) => {
                sink.reject(sink.text(format!("{}: invalid arguments: {e}", call.tool)))
                    .await
            }
            Err(SkillError::NotFound(e)) => {
                sink.reject(sink.text(format!("{}: not found: {e}", call.tool)))
                    .await
            }
            Err(SkillError::Conflict(e)) => {
                sink.reject(sink.text(format!("{}: conflict: {e}", call.tool)))
                    .await
            }
            Err(SkillError::Blocked { message, report }) => {
                let mut status =
                    sink.text(format!("{}: blocked by governance: {message}", call.tool));
                status.parts.push(Part::data(report));
                sink.reject(status).await
            }
            Err(SkillError::Failed(detail)) => {
                tracing::error!(tool = %call.tool, detail = %detail, "tool failed");
                sink.fail(failure(
                    &sink,
                    &call.tool,
                    "internal error",
                    "INTERNAL_ERROR",
                ))
                .await
            }
            Err(SkillError::Remote(detail)) => {
                tracing::warn!(tool = %call.tool, detail = %detail, "remote agent call failed");
                sink.fail(failure(&sink, &call.tool, &detail, "REMOTE_AGENT_FAILED"))
                    .await
            }
            Err(SkillError::ToolServer(detail)) => {
                tracing::warn!(tool = %call.tool, detail = %detail, "MCP tool call failed");
                sink.fail(failure(&sink, &call.tool, &detail, "MCP_TOOL_FAILED"))
                    .await
            }
            // Fenced: the failure's commit is refused too, and the client retries on the
            // thread's new owner.
            Err(SkillError::Unavailable(detail) | SkillError::Fenced(detail)) => {
                tracing::warn!(tool = %call.tool, detail = %detail, "tool unavailable");
                let text = "temporarily unavailable; retry later";
                sink.fail(failure(&sink, &call.tool, text, "UNAVAILABLE"))
                    .await
            }
        }
    }
}

/// A failure status message that names the tool and an error code, and no internals.
fn failure(sink: &TurnSink, tool: &str, text: &str, code: &str) -> crate::domain::Message {
    sink.failure(format!("{tool} failed: {text}"), code)
}
