//! The agent loop: model → tool calls → model …, over a tree of agents (seed contract
//! A.12–A.15).
//!
//! A [`Runner`] starts at the root of its [`AgentTree`] and asks the agent's model for the
//! next step. Each final model response is reported to the [`RunObserver`] (which persists
//! it) *before* its tools run, so a crash never leaves a tool effect without the call that
//! caused it. The calls of one response run concurrently, each with the tool timeout; a
//! failure, a timeout or an unknown tool becomes a `{"error": …}` response the model reads,
//! never a failed run. A `transfer_to_agent` call hands the conversation to the named agent;
//! a name that is not a valid target answers the call with an error response (so the
//! conversation stays well formed) and ends the run with `failed to find agent: <name>`,
//! which [`run_and_collect`] corrects once. The run ends when a model answers without calls,
//! or fails after `max_turns` model calls.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use futures_util::future::join_all;
use serde_json::{Map, Value, json};

use super::{
    AgentError, AgentTree, Content, Event, LlmRequest, Part, TRANSFER_TO_AGENT, collect_text,
    extract_missing_agent, function_declarations, missing_agent_correction,
    transfer_to_agent_declaration,
};
use crate::config::AgentSettings;
use crate::domain::Timestamp;
use crate::providers::ToolChoice;
use crate::session::{FunctionCall, FunctionResponse};

/// The thread-state key holding the agent that has the conversation (set on each transfer),
/// so the next turn starts with it; absent or unknown: the root.
pub const ACTIVE_AGENT_KEY: &str = "agent:active";

/// Content role of the user's input (and of function responses, as ADK writes them).
const ROLE_USER: &str = "user";

/// Runs the tools a model calls.
#[async_trait]
pub trait ToolInvoker: Send + Sync {
    /// Runs the tool `call` names with its arguments (its `id` names the call: the same
    /// id when a resumed run makes an unanswered call again). `Err` holds the text the
    /// model is shown.
    async fn invoke(&self, call: &FunctionCall) -> Result<Value, String>;
}

/// Receives every event of a run, in order.
#[async_trait]
pub trait RunObserver: Send {
    /// Partial events are streaming fragments; every other event must be durable when this
    /// returns (the runner acts on it next). An error ends the run with
    /// [`RunError::Observer`].
    async fn on_event(&mut self, event: &Event) -> Result<(), crate::error::Error>;
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Model(#[from] AgentError),
    /// The model transferred to an agent that is not a valid target (ADK's wording, which
    /// [`run_and_collect`] recognises).
    #[error("failed to find agent: {0}")]
    AgentNotFound(String),
    #[error("the agent did not finish within {0} model calls")]
    TurnLimit(u32),
    /// The observer could not take an event (e.g. the store refused it).
    #[error(transparent)]
    Observer(crate::error::Error),
    /// A remote agent the conversation was handed to could not answer (why, as the
    /// failed call says).
    #[error("{0}")]
    Remote(String),
}

/// How runs behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSettings {
    pub max_turns: u32,
    pub tool_timeout: Duration,
    /// 0: the provider's default.
    pub max_output_tokens: u32,
    /// Stream text deltas as partial events.
    pub stream: bool,
}

impl RunSettings {
    pub fn from_settings(settings: &AgentSettings) -> Self {
        Self {
            max_turns: settings.max_turns.max(1),
            tool_timeout: Duration::from_millis(settings.tool_timeout_ms),
            max_output_tokens: settings.max_output_tokens,
            stream: true,
        }
    }
}

/// Runs conversations through an [`AgentTree`].
#[derive(Clone)]
pub struct Runner {
    tree: Arc<AgentTree>,
    tools: Arc<dyn ToolInvoker>,
    settings: RunSettings,
    /// The agent runs start with.
    start: usize,
}

impl Runner {
    pub fn new(tree: Arc<AgentTree>, tools: Arc<dyn ToolInvoker>, settings: RunSettings) -> Self {
        Self {
            tree,
            tools,
            settings,
            start: 0,
        }
    }

    /// Starts runs with the agent named `name` (the one a transfer left the conversation
    /// with); an unknown name keeps the root.
    pub fn starting_with(mut self, name: Option<&str>) -> Self {
        self.start = name.and_then(|n| self.tree.find(n)).unwrap_or(0);
        self
    }

    pub fn tree(&self) -> &AgentTree {
        &self.tree
    }

    /// Runs from the starting agent (the root by default) until an agent answers without
    /// calls. `contents` is the
    /// conversation the model sees (the user's message last); every content the run adds
    /// is pushed onto it, so after a failure it holds the progress made. `context` is
    /// added to every agent's instruction (e.g. memories and constraints of the session).
    ///
    /// A conversation that ends with a model response whose calls are not all answered
    /// (a run a restart cut short after storing the response) is picked up there: those
    /// calls are made and answered first, by the starting agent (the one that has the
    /// conversation, which made them).
    pub async fn run(
        &self,
        contents: &mut Vec<Content>,
        context: &str,
        observer: &mut dyn RunObserver,
    ) -> Result<(), RunError> {
        let mut at = self.start;
        let unanswered = unanswered_calls(contents);
        if !unanswered.is_empty() {
            at = self.answer(at, unanswered, contents, observer).await?;
        }
        for _ in 0..self.settings.max_turns {
            let agent = self.tree.node(at);
            if let Some(ask) = &agent.remote {
                return self.delegate(at, ask, contents, observer).await;
            }
            let request = self.request(at, contents, context);
            let mut responses = Box::pin(agent.model.generate(request, self.settings.stream));
            let mut last = None;
            while let Some(response) = responses.next().await {
                let response = response?;
                if response.partial {
                    let mut event = Event::new(&agent.name, response.content, Timestamp::now());
                    event.partial = true;
                    observe(observer, &event).await?;
                } else {
                    last = Some(response);
                }
            }
            let response = last.ok_or(AgentError::StreamEndedWithoutDone)?;
            let mut event = Event::new(&agent.name, response.content, Timestamp::now());
            event.turn_complete = true;
            observe(observer, &event).await?;
            let Some(content) = event.content else {
                return Ok(());
            };
            let calls: Vec<FunctionCall> = content.function_calls().cloned().collect();
            contents.push(content);
            if calls.is_empty() {
                return Ok(());
            }
            at = self.answer(at, calls, contents, observer).await?;
        }
        Err(RunError::TurnLimit(self.settings.max_turns))
    }

    /// Answers the calls of agent `at`'s last response: tools run concurrently, then the
    /// transfers. Each answer is observed and pushed onto `contents`. The agent that has
    /// the conversation next.
    async fn answer(
        &self,
        at: usize,
        calls: Vec<FunctionCall>,
        contents: &mut Vec<Content>,
        observer: &mut dyn RunObserver,
    ) -> Result<usize, RunError> {
        let agent = self.tree.node(at);
        let (transfers, tool_calls): (Vec<_>, Vec<_>) =
            calls.into_iter().partition(|c| c.name == TRANSFER_TO_AGENT);
        let results = join_all(tool_calls.iter().map(|call| self.call_tool(at, call))).await;
        for (call, response) in tool_calls.iter().zip(results) {
            let event = response_event(&agent.name, call, response);
            observe(observer, &event).await?;
            contents.extend(event.content);
        }
        let mut next = at;
        let mut missing = None;
        for call in &transfers {
            let target = call
                .args
                .get("agent_name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let valid = self.tree.transfer_targets(at);
            let (response, found) = if valid.contains(&target.as_str()) {
                (json!({"result": format!("transferred to {target}")}), true)
            } else {
                let error = RunError::AgentNotFound(target.clone()).to_string();
                (json!({"error": error}), false)
            };
            let mut event = response_event(&agent.name, call, object(response));
            if found {
                event.actions.transfer_to_agent = Some(target.clone());
                event
                    .actions
                    .state_delta
                    .insert(ACTIVE_AGENT_KEY.into(), Value::String(target.clone()));
                next = self.tree.find(&target).unwrap_or(at);
            } else if missing.is_none() {
                missing = Some(target);
            }
            observe(observer, &event).await?;
            contents.extend(event.content);
        }
        match missing {
            Some(name) => Err(RunError::AgentNotFound(name)),
            None => Ok(next),
        }
    }

    /// Agent `at` is a remote A2A agent: the user's last message goes to it as a call of
    /// `ask` (recorded before it is made, as a model's call is, so a restart picks it up
    /// where it stopped), unless this run already answered that call (a stored one picked
    /// up); its answer — text, then its artifacts' text — ends the run. The conversation
    /// stays with it while it asks for input (the user's reply continues its task), and
    /// goes back to the parent otherwise; each new message goes on in the remote's
    /// conversation (its `contextId`). A failed call fails the run with its reason.
    async fn delegate(
        &self,
        at: usize,
        ask: &str,
        contents: &mut Vec<Content>,
        observer: &mut dyn RunObserver,
    ) -> Result<(), RunError> {
        let agent = self.tree.node(at);
        let picked_up = contents.last().and_then(|c| response_to(c, ask)).cloned();
        let response = match picked_up {
            Some(response) => response,
            None => {
                let call = FunctionCall {
                    id: format!("{ask}-{}", uuid::Uuid::new_v4()),
                    name: ask.to_owned(),
                    args: delegation_arguments(contents, ask),
                };
                let content = Content {
                    role: "model".into(),
                    parts: vec![Part::FunctionCall(call.clone())],
                };
                let event = Event::new(&agent.name, Some(content), Timestamp::now());
                observe(observer, &event).await?;
                contents.extend(event.content);
                let response = self.call_tool(at, &call).await;
                let event = response_event(&agent.name, &call, response.clone());
                observe(observer, &event).await?;
                contents.extend(event.content);
                response
            }
        };
        let waits = response.get("state").and_then(Value::as_str) == Some("input-required");
        let failed = response
            .get("error")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let mut event = Event::new(
            &agent.name,
            Some(Content {
                role: "model".into(),
                parts: vec![Part::Text(match &failed {
                    Some(error) => format!("The remote agent could not answer: {error}"),
                    None => remote_answer_text(&response),
                })],
            }),
            Timestamp::now(),
        );
        // The failure's words are the task's status, not an answer.
        event.turn_complete = failed.is_none();
        if !waits && let Some(parent) = agent.parent {
            let parent = self.tree.node(parent).name.clone();
            event
                .actions
                .state_delta
                .insert(ACTIVE_AGENT_KEY.into(), Value::String(parent));
        }
        observe(observer, &event).await?;
        contents.extend(event.content);
        match failed {
            Some(error) => Err(RunError::Remote(error)),
            None => Ok(()),
        }
    }

    /// The request for agent `at`: its instruction (plus `context` and the agents it may
    /// transfer to), the conversation, and its tools.
    fn request(&self, at: usize, contents: &[Content], context: &str) -> LlmRequest {
        let agent = self.tree.node(at);
        let targets = self.tree.transfer_targets(at);
        let mut instruction = vec![Part::Text(agent.instruction.clone())];
        if !targets.is_empty() {
            let listing: Vec<String> = targets
                .iter()
                .filter_map(|name| self.tree.find(name))
                .map(|i| {
                    let node = self.tree.node(i);
                    format!("- {}: {}", node.name, node.description)
                })
                .collect();
            instruction.push(Part::Text(format!(
                "You can hand the conversation to one of these agents with {TRANSFER_TO_AGENT} \
                 when it is better suited:\n{}",
                listing.join("\n")
            )));
        }
        if !context.trim().is_empty() {
            instruction.push(Part::Text(context.to_owned()));
        }
        let mut tools = function_declarations(&agent.tools);
        if !targets.is_empty() {
            tools.push(transfer_to_agent_declaration(&targets));
        }
        LlmRequest {
            contents: contents.to_vec(),
            system_instruction: Some(Content {
                role: "system".into(),
                parts: instruction,
            }),
            tools,
            tool_choice: ToolChoice::Auto,
            temperature: None,
            max_tokens: Some(self.settings.max_output_tokens),
            model: agent.model_name.clone(),
        }
    }

    /// Runs one call of agent `at`; every failure becomes an `{"error": …}` response.
    async fn call_tool(&self, at: usize, call: &FunctionCall) -> Map<String, Value> {
        let agent = self.tree.node(at);
        if !agent.tools.iter().any(|t| t.name == call.name) {
            return error_response(format!(
                "unknown tool {:?}; the tools available are: {}",
                call.name,
                agent
                    .tools
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let invoke = self.tools.invoke(call);
        match tokio::time::timeout(self.settings.tool_timeout, invoke).await {
            Ok(Ok(value)) => object(value),
            Ok(Err(message)) => error_response(message),
            Err(_) => error_response(format!(
                "tool {} timed out after {} ms",
                call.name,
                self.settings.tool_timeout.as_millis()
            )),
        }
    }
}

/// The calls of the conversation's last model response that no later content answers:
/// what a run cut short after storing that response had yet to answer. Empty when
/// anything but answers follows the response (a new user message, text).
pub fn unanswered_calls(contents: &[Content]) -> Vec<FunctionCall> {
    let mut answered = std::collections::HashSet::new();
    for content in contents.iter().rev() {
        let mut calls = content.function_calls().peekable();
        if calls.peek().is_some() {
            return calls
                .filter(|call| !answered.contains(call.id.as_str()))
                .cloned()
                .collect();
        }
        let mut answers = 0;
        for part in &content.parts {
            match part {
                Part::FunctionResponse(response) => {
                    answered.insert(response.id.as_str());
                    answers += 1;
                }
                _ => return Vec::new(),
            }
        }
        if answers == 0 {
            return Vec::new();
        }
    }
    Vec::new()
}

async fn observe(observer: &mut dyn RunObserver, event: &Event) -> Result<(), RunError> {
    observer.on_event(event).await.map_err(RunError::Observer)
}

/// A tool result as the response object: objects as they are, anything else as `result`.
fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => Map::from_iter([("result".to_owned(), other)]),
    }
}

fn error_response(message: String) -> Map<String, Value> {
    Map::from_iter([("error".to_owned(), Value::String(message))])
}

/// The response to a call of `tool` that `content` is, if it is one.
fn response_to<'c>(content: &'c Content, tool: &str) -> Option<&'c Map<String, Value>> {
    content.parts.iter().find_map(|part| match part {
        Part::FunctionResponse(r) if r.name == tool => Some(&r.response),
        _ => None,
    })
}

/// What a remote agent is asked: the user's last message's text, going on in the
/// remote's conversation — the task that asked, while its last answer asks for input,
/// else its context — as its last answer in `contents` names them.
fn delegation_arguments(contents: &[Content], ask: &str) -> Map<String, Value> {
    let text = contents
        .iter()
        .rev()
        .find(|c| {
            c.role == ROLE_USER
                && c.parts
                    .iter()
                    .all(|p| !matches!(p, Part::FunctionResponse(_)))
        })
        .map(|c| {
            c.parts
                .iter()
                .filter_map(|p| match p {
                    Part::Text(t) => Some(t.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    let mut arguments = Map::from_iter([("text".to_owned(), Value::String(text))]);
    let last = contents
        .iter()
        .rev()
        .filter_map(|c| response_to(c, ask))
        .find(|r| !r.contains_key("error"));
    if let Some(last) = last {
        let asked = last.get("state").and_then(Value::as_str) == Some("input-required");
        let keys: &[&str] = if asked {
            &["taskId", "contextId"]
        } else {
            &["contextId"]
        };
        for key in keys {
            if let Some(id) = last
                .get(*key)
                .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
            {
                arguments.insert((*key).to_owned(), id.clone());
            }
        }
    }
    arguments
}

/// A remote agent's answer as the text of the turn: its text, then its artifacts' text.
fn remote_answer_text(response: &Map<String, Value>) -> String {
    let text = response.get("text").and_then(Value::as_str).into_iter();
    let artifacts = response
        .get("artifacts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| a.get("text").and_then(Value::as_str));
    text.chain(artifacts)
        .filter(|t| !t.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The event answering `call` (ADK's shape: role `user`, authored by the calling agent).
fn response_event(agent: &str, call: &FunctionCall, response: Map<String, Value>) -> Event {
    let content = Content {
        role: ROLE_USER.into(),
        parts: vec![Part::FunctionResponse(FunctionResponse {
            id: call.id.clone(),
            name: call.name.clone(),
            response,
        })],
    };
    Event::new(agent, Some(content), Timestamp::now())
}

/// Records the events passing to another observer, for [`collect_text`].
struct Collecting<'a> {
    inner: &'a mut dyn RunObserver,
    events: Vec<Event>,
}

#[async_trait]
impl RunObserver for Collecting<'_> {
    async fn on_event(&mut self, event: &Event) -> Result<(), crate::error::Error> {
        self.inner.on_event(event).await?;
        self.events.push(event.clone());
        Ok(())
    }
}

/// Runs `contents` and returns the answer's text (contract A.12). When the run fails
/// because the model named an agent that does not exist and the root has sub-agents, the
/// correction of contract A.13 is sent as a user message (through the observer, so it is
/// persisted like any input) and the run is retried once; the retry's answer is returned,
/// or its error. Other errors, or a root without sub-agents, are returned at once.
pub async fn run_and_collect(
    runner: &Runner,
    contents: &mut Vec<Content>,
    context: &str,
    observer: &mut dyn RunObserver,
) -> Result<String, RunError> {
    let mut collecting = Collecting {
        inner: observer,
        events: Vec::new(),
    };
    let error = match runner.run(contents, context, &mut collecting).await {
        Ok(()) => return Ok(collect_text(&collecting.events)),
        Err(error) => error,
    };
    let valid = runner.tree().root_sub_agent_names();
    let Some(name) = extract_missing_agent(&error.to_string()).filter(|_| !valid.is_empty()) else {
        return Err(error);
    };
    tracing::info!(agent = %name, "model named an agent that does not exist; retrying once");
    let correction = Content {
        role: ROLE_USER.into(),
        parts: vec![Part::Text(missing_agent_correction(&name, &valid))],
    };
    let event = Event::new(ROLE_USER, Some(correction.clone()), Timestamp::now());
    collecting.events.clear();
    observe(&mut collecting, &event).await?;
    contents.push(correction);
    runner.run(contents, context, &mut collecting).await?;
    Ok(collect_text(&collecting.events))
}

#[cfg(test)]
mod tests {
    //! The agent loop and `run_and_collect` (seed 000 "Agent hallucination retry in
    //! RunAndCollect", "Tool Adapter", "Agent Initialization"), over scripted providers.

    use std::sync::Mutex;

    use serde_json::json;

    use super::*;
    use crate::agent::ModelAdapter;
    use crate::agent::tree::tests::{settings, spec};
    use crate::config::SubAgentSettings;
    use crate::providers::{
        ProviderError, ProviderEvent, Role, ScriptedProvider, ToolCallFragment,
    };

    /// Counts calls per tool; `slow` sleeps past any test timeout, `broken` fails.
    #[derive(Default)]
    struct Tools {
        calls: Mutex<Vec<(String, Map<String, Value>)>>,
    }

    #[async_trait]
    impl ToolInvoker for Tools {
        async fn invoke(&self, call: &FunctionCall) -> Result<Value, String> {
            let (name, args) = (call.name.as_str(), &call.args);
            if let Ok(mut calls) = self.calls.lock() {
                calls.push((name.to_owned(), args.clone()));
            }
            match name {
                "slow" => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok(json!("late"))
                }
                "broken" => Err("invalid arguments: q: required".into()),
                "scalar" => Ok(json!(42)),
                _ => Ok(
                    json!({"answer": format!("{name} says {}", args.get("q").unwrap_or(&Value::Null))}),
                ),
            }
        }
    }

    impl Tools {
        fn count(&self) -> usize {
            self.calls.lock().map(|c| c.len()).unwrap_or_default()
        }
    }

    #[derive(Default)]
    struct Recorder {
        events: Vec<Event>,
    }

    #[async_trait]
    impl RunObserver for Recorder {
        async fn on_event(&mut self, event: &Event) -> Result<(), crate::error::Error> {
            self.events.push(event.clone());
            Ok(())
        }
    }

    impl Recorder {
        fn complete(&self) -> Vec<&Event> {
            self.events.iter().filter(|e| !e.partial).collect()
        }
    }

    fn text(t: &str) -> ProviderEvent {
        ProviderEvent::TextDelta(t.into())
    }

    fn call(index: usize, id: &str, name: &str, args: &str) -> ProviderEvent {
        ProviderEvent::ToolCallFragment(ToolCallFragment {
            index: Some(index),
            id: Some(id.into()),
            name: Some(name.into()),
            arguments: args.into(),
        })
    }

    fn answer(events: Vec<ProviderEvent>) -> Result<Vec<ProviderEvent>, ProviderError> {
        let mut events = events;
        events.push(ProviderEvent::Done);
        Ok(events)
    }

    struct Setup {
        provider: Arc<ScriptedProvider>,
        tools: Arc<Tools>,
        runner: Runner,
    }

    fn setup(
        scripts: Vec<Result<Vec<ProviderEvent>, ProviderError>>,
        sub_agents: &[&str],
        max_turns: u32,
    ) -> Setup {
        let provider = Arc::new(ScriptedProvider::new("p", "m", scripts));
        let adapter = ModelAdapter::new(provider.clone());
        let specs = vec![spec("lookup"), spec("slow"), spec("broken"), spec("scalar")];
        let tree = AgentTree::build(
            &settings(sub_agents),
            &|name| (name == "p").then(|| adapter.clone()),
            &specs,
        )
        .unwrap();
        let tools = Arc::new(Tools::default());
        let runner = Runner::new(
            Arc::new(tree),
            tools.clone(),
            RunSettings {
                max_turns,
                tool_timeout: Duration::from_millis(200),
                max_output_tokens: 0,
                stream: true,
            },
        );
        Setup {
            provider,
            tools,
            runner,
        }
    }

    fn user(text: &str) -> Vec<Content> {
        vec![Content {
            role: "user".into(),
            parts: vec![Part::Text(text.into())],
        }]
    }

    fn responses(recorder: &Recorder) -> Vec<Map<String, Value>> {
        recorder
            .complete()
            .iter()
            .flat_map(|e| e.content.iter().flat_map(|c| c.parts.iter()))
            .filter_map(|p| match p {
                Part::FunctionResponse(r) => Some(r.response.clone()),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn agent_initialization() {
        let s = setup(vec![], &["billing"], 4);
        let tree = s.runner.tree();
        assert_eq!(tree.root().name, "root");
        assert_eq!(tree.root().model.name(), "m");
        let tools: Vec<&str> = tree.root().tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(tools, ["lookup", "slow", "broken", "scalar"]);
        assert_eq!(tree.root_sub_agent_names(), ["billing"]);
        let billing = tree.node(tree.find("billing").unwrap());
        assert!(billing.tools.is_empty());
        assert_eq!(
            tree.transfer_targets(tree.find("billing").unwrap()),
            ["root"]
        );
    }

    #[tokio::test]
    async fn execute_legacy_tool() {
        // The model calls a skill tool; the adapter passes the parsed arguments through, the
        // result goes back to the model, and its answer ends the run.
        let s = setup(
            vec![
                answer(vec![call(0, "c1", "lookup", r#"{"q":"rust"}"#)]),
                answer(vec![text("Rust "), text("is fast.")]),
            ],
            &[],
            4,
        );
        let mut contents = user("what is rust?");
        let mut recorder = Recorder::default();
        s.runner
            .run(&mut contents, "", &mut recorder)
            .await
            .unwrap();

        let calls = s.tools.calls.lock().unwrap().clone();
        assert_eq!(
            calls,
            vec![(
                "lookup".to_owned(),
                json!({"q": "rust"}).as_object().unwrap().clone()
            )]
        );
        assert_eq!(
            responses(&recorder),
            vec![
                json!({"answer": "lookup says \"rust\""})
                    .as_object()
                    .unwrap()
                    .clone()
            ]
        );
        // Second request: the call and its response, ids paired.
        let second = &s.provider.requests()[1];
        let tool = second
            .messages
            .iter()
            .find(|m| m.role == Role::Tool)
            .unwrap();
        assert_eq!(tool.tool_call_id.as_deref(), Some("c1"));
        let assistant = second
            .messages
            .iter()
            .find(|m| m.role == Role::Assistant)
            .unwrap();
        assert_eq!(assistant.tool_calls[0].id, "c1");
        // Events: call (complete), response, two partials, the final answer.
        let complete = recorder.complete();
        assert_eq!(complete.len(), 3);
        assert_eq!(contents.len(), 4, "user, call, response, answer");
    }

    #[tokio::test]
    async fn the_system_instruction_carries_the_session_context() {
        let s = setup(vec![answer(vec![text("ok")])], &["billing"], 4);
        let mut recorder = Recorder::default();
        s.runner
            .run(
                &mut user("hi"),
                "## Relevant memories\n- likes tea",
                &mut recorder,
            )
            .await
            .unwrap();
        let request = &s.provider.requests()[0];
        assert_eq!(request.messages[0].role, Role::System);
        let system = &request.messages[0].content;
        assert!(system.starts_with("Be brief.\n"), "{system}");
        assert!(system.contains("- billing: billing things"), "{system}");
        assert!(system.ends_with("- likes tea"), "{system}");
        let transfer = request
            .tools
            .iter()
            .find(|t| t.name == TRANSFER_TO_AGENT)
            .unwrap();
        assert_eq!(
            transfer.parameters["properties"]["agent_name"]["enum"],
            json!(["billing"])
        );
    }

    #[tokio::test]
    async fn tool_failures_and_timeouts_become_error_responses() {
        let s = setup(
            vec![
                answer(vec![
                    call(0, "a", "broken", "{}"),
                    call(1, "b", "slow", "{}"),
                    call(2, "c", "missing", "{}"),
                    call(3, "d", "scalar", "{}"),
                ]),
                answer(vec![text("done")]),
            ],
            &[],
            4,
        );
        let mut recorder = Recorder::default();
        s.runner
            .run(&mut user("go"), "", &mut recorder)
            .await
            .unwrap();
        let got = responses(&recorder);
        assert_eq!(got[0]["error"], json!("invalid arguments: q: required"));
        assert_eq!(got[1]["error"], json!("tool slow timed out after 200 ms"));
        assert!(
            got[2]["error"]
                .as_str()
                .unwrap()
                .starts_with("unknown tool \"missing\"")
        );
        assert_eq!(got[3], json!({"result": 42}).as_object().unwrap().clone());
        assert_eq!(s.tools.count(), 3, "the unknown tool is never invoked");
    }

    #[tokio::test]
    async fn the_turn_limit_ends_a_run_that_keeps_calling_tools() {
        let looping = || answer(vec![call(0, "", "lookup", r#"{"q":"again"}"#)]);
        let s = setup(vec![looping(), looping(), looping()], &[], 2);
        let mut recorder = Recorder::default();
        let e = s
            .runner
            .run(&mut user("go"), "", &mut recorder)
            .await
            .unwrap_err();
        assert!(matches!(e, RunError::TurnLimit(2)), "{e}");
        assert_eq!(s.tools.count(), 2);
        assert_eq!(s.provider.requests().len(), 2);
    }

    #[tokio::test]
    async fn a_transfer_hands_the_conversation_to_the_sub_agent() {
        let s = setup(
            vec![
                answer(vec![call(
                    0,
                    "t1",
                    TRANSFER_TO_AGENT,
                    r#"{"agent_name":"billing"}"#,
                )]),
                answer(vec![text("Billing here.")]),
            ],
            &["billing"],
            4,
        );
        let mut recorder = Recorder::default();
        s.runner
            .run(&mut user("my invoice"), "", &mut recorder)
            .await
            .unwrap();
        let complete = recorder.complete();
        assert_eq!(
            complete[1].actions.transfer_to_agent.as_deref(),
            Some("billing")
        );
        assert_eq!(complete[2].author, "billing");
        let second = &s.provider.requests()[1];
        assert!(second.messages[0].content.starts_with("You are billing."));
        // The sub-agent may hand back to its parent, and has no tools of its own.
        let names: Vec<&str> = second.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, [TRANSFER_TO_AGENT]);
    }

    fn hallucinating() -> Result<Vec<ProviderEvent>, ProviderError> {
        answer(vec![call(
            0,
            "t1",
            TRANSFER_TO_AGENT,
            r#"{"agent_name":"ghost"}"#,
        )])
    }

    #[tokio::test]
    async fn hallucinated_agent_name_triggers_retry() {
        let s = setup(
            vec![
                hallucinating(),
                answer(vec![text("Sorry, answering myself.")]),
            ],
            &["billing", "support"],
            4,
        );
        let mut recorder = Recorder::default();
        let mut contents = user("help");
        run_and_collect(&s.runner, &mut contents, "", &mut recorder)
            .await
            .unwrap();
        let requests = s.provider.requests();
        assert_eq!(requests.len(), 2, "exactly one retry");
        let correction = requests[1].messages.last().unwrap();
        assert_eq!(correction.role, Role::User);
        assert_eq!(
            correction.content,
            "[System: Agent \"ghost\" does not exist. Valid agents: billing, support. Please retry \
         using one of the valid agent names listed above.]"
        );
        // The failed call was answered before the correction, so the history stays well formed.
        let tool = &requests[1].messages[requests[1].messages.len() - 2];
        assert_eq!(tool.role, Role::Tool);
        assert!(
            tool.content.contains("failed to find agent: ghost"),
            "{}",
            tool.content
        );
        // The correction went through the observer (it is persisted like any input).
        assert!(recorder.events.iter().any(|e| e.author == "user"));
    }

    #[tokio::test]
    async fn retry_succeeds() {
        let s = setup(
            vec![
                hallucinating(),
                answer(vec![text("Fixed "), text("answer.")]),
            ],
            &["billing"],
            4,
        );
        let text = run_and_collect(&s.runner, &mut user("help"), "", &mut Recorder::default())
            .await
            .unwrap();
        assert_eq!(text, "Fixed answer.");
    }

    #[tokio::test]
    async fn retry_also_fails() {
        let s = setup(
            vec![
                hallucinating(),
                answer(vec![call(
                    0,
                    "t2",
                    TRANSFER_TO_AGENT,
                    r#"{"agent_name":"phantom"}"#,
                )]),
            ],
            &["billing"],
            4,
        );
        let e = run_and_collect(&s.runner, &mut user("help"), "", &mut Recorder::default())
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to find agent: phantom",
            "the retry's error"
        );
        assert_eq!(s.provider.requests().len(), 2);
    }

    #[tokio::test]
    async fn non_hallucination_error_is_not_retried() {
        let s = setup(
            vec![Err(ProviderError::Timeout), answer(vec![text("never")])],
            &["billing"],
            4,
        );
        let e = run_and_collect(&s.runner, &mut user("help"), "", &mut Recorder::default())
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                RunError::Model(AgentError::Provider(ProviderError::Timeout))
            ),
            "{e}"
        );
        assert_eq!(s.provider.requests().len(), 1);
    }

    #[tokio::test]
    async fn no_sub_agents_means_no_retry() {
        // Without sub-agents no transfer is offered; a model that calls it anyway names an
        // agent that cannot exist, and the error is returned as it is.
        let s = setup(vec![hallucinating(), answer(vec![text("never")])], &[], 4);
        let e = run_and_collect(&s.runner, &mut user("help"), "", &mut Recorder::default())
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "failed to find agent: ghost");
        assert_eq!(s.provider.requests().len(), 1);
    }

    #[tokio::test]
    async fn streamed_text_is_collected_once_per_turn() {
        let s = setup(
            vec![
                answer(vec![text("Let me look. "), call(0, "c", "lookup", "{}")]),
                answer(vec![text("Found "), text("it.")]),
            ],
            &[],
            4,
        );
        let text = run_and_collect(&s.runner, &mut user("find"), "", &mut Recorder::default())
            .await
            .unwrap();
        assert_eq!(text, "Let me look. \n\nFound it.");
    }

    #[tokio::test]
    async fn a_failing_observer_stops_the_run_before_tools_run() {
        struct Refusing;
        #[async_trait]
        impl RunObserver for Refusing {
            async fn on_event(&mut self, event: &Event) -> Result<(), crate::error::Error> {
                if event.partial {
                    return Ok(());
                }
                Err(crate::error::Error::internal("store down"))
            }
        }
        let s = setup(vec![answer(vec![call(0, "c", "lookup", "{}")])], &[], 4);
        let e = s
            .runner
            .run(&mut user("go"), "", &mut Refusing)
            .await
            .unwrap_err();
        assert!(matches!(e, RunError::Observer(_)), "{e}");
        assert_eq!(
            s.tools.count(),
            0,
            "a call that was not persisted never runs"
        );
    }

    #[tokio::test]
    async fn a_run_starts_with_the_agent_that_has_the_conversation() {
        let s = setup(vec![answer(vec![text("Billing again.")])], &["billing"], 4);
        let runner = s.runner.clone().starting_with(Some("billing"));
        let mut recorder = Recorder::default();
        runner
            .run(&mut user("and my refund?"), "", &mut recorder)
            .await
            .unwrap();
        assert_eq!(recorder.complete()[0].author, "billing");
        assert!(
            s.provider.requests()[0].messages[0]
                .content
                .starts_with("You are billing.")
        );
        // An agent that no longer exists starts at the root.
        let s = setup(vec![answer(vec![text("Root.")])], &[], 4);
        let runner = s.runner.clone().starting_with(Some("gone"));
        let mut recorder = Recorder::default();
        runner
            .run(&mut user("hi"), "", &mut recorder)
            .await
            .unwrap();
        assert_eq!(recorder.complete()[0].author, "root");
    }

    fn model_calls(calls: &[(&str, &str)]) -> Content {
        Content {
            role: "model".into(),
            parts: calls
                .iter()
                .map(|(id, name)| {
                    Part::FunctionCall(FunctionCall {
                        id: (*id).into(),
                        name: (*name).into(),
                        args: json!({"q": id}).as_object().unwrap().clone(),
                    })
                })
                .collect(),
        }
    }

    fn answered(id: &str, name: &str) -> Content {
        Content {
            role: "user".into(),
            parts: vec![Part::FunctionResponse(FunctionResponse {
                id: id.into(),
                name: name.into(),
                response: Map::new(),
            })],
        }
    }

    #[test]
    fn unanswered_calls_are_those_of_the_last_response_without_an_answer_after_it() {
        let ids = |contents: &[Content]| -> Vec<String> {
            unanswered_calls(contents)
                .into_iter()
                .map(|c| c.id)
                .collect()
        };
        let mut contents = user("hi");
        assert!(
            ids(&contents).is_empty(),
            "a new message: nothing to pick up"
        );
        contents.push(model_calls(&[("c1", "lookup"), ("c2", "scalar")]));
        assert_eq!(ids(&contents), ["c1", "c2"]);
        contents.push(answered("c2", "scalar"));
        assert_eq!(ids(&contents), ["c1"]);
        contents.push(answered("c1", "lookup"));
        assert!(ids(&contents).is_empty(), "every call answered");
        // A call left unanswered by a run that failed, then a new message: nothing.
        let mut later = user("hi");
        later.push(model_calls(&[("c3", "lookup")]));
        later.extend(user("something else"));
        assert!(ids(&later).is_empty());
    }

    #[tokio::test]
    async fn a_run_picks_up_the_calls_a_stored_response_left_unanswered() {
        // The conversation as a restart left it: the model's response with two calls is
        // stored, one of them answered. The run makes the other call, then asks the model.
        let s = setup(vec![answer(vec![text("Both done.")])], &[], 4);
        let mut contents = user("look both up");
        contents.push(model_calls(&[("c1", "lookup"), ("c2", "scalar")]));
        contents.push(answered("c1", "lookup"));
        let mut recorder = Recorder::default();
        s.runner
            .run(&mut contents, "", &mut recorder)
            .await
            .unwrap();
        let calls: Vec<String> = s
            .tools
            .calls
            .lock()
            .unwrap()
            .iter()
            .map(|(name, _)| name.clone())
            .collect();
        assert_eq!(calls, ["scalar"], "only the unanswered call is made");
        assert_eq!(
            responses(&recorder),
            vec![json!({"result": 42}).as_object().unwrap().clone()]
        );
        // The model's one request pairs every call with its answer.
        let requests = s.provider.requests();
        assert_eq!(requests.len(), 1);
        let answered: Vec<_> = requests[0]
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .filter_map(|m| m.tool_call_id.clone())
            .collect();
        assert_eq!(answered, ["c1", "c2"]);
        assert_eq!(contents.len(), 5, "user, calls, two answers, the text");
    }

    /// A remote agent behind `ask_billing`: answers in order, and the arguments it was
    /// asked with.
    #[derive(Default)]
    struct Remote {
        answers: Mutex<Vec<Result<Value, String>>>,
        asked: Mutex<Vec<Map<String, Value>>>,
    }

    #[async_trait]
    impl ToolInvoker for Remote {
        async fn invoke(&self, call: &FunctionCall) -> Result<Value, String> {
            assert_eq!(call.name, "ask_billing");
            self.asked.lock().unwrap().push(call.args.clone());
            self.answers.lock().unwrap().remove(0)
        }
    }

    impl Remote {
        fn asked(&self) -> Vec<Map<String, Value>> {
            self.asked.lock().unwrap().clone()
        }
    }

    /// A root with the remote agent `billing` as its sub-agent; the model's `scripts`, the
    /// remote's `answers`.
    fn with_remote(
        scripts: Vec<Result<Vec<ProviderEvent>, ProviderError>>,
        answers: Vec<Result<Value, String>>,
    ) -> (Arc<ScriptedProvider>, Arc<Remote>, Runner) {
        let provider = Arc::new(ScriptedProvider::new("p", "m", scripts));
        let adapter = ModelAdapter::new(provider.clone());
        let mut settings = settings(&[]);
        settings.sub_agents = vec![SubAgentSettings::remote("billing", "billing")];
        let tree = AgentTree::build(
            &settings,
            &|name| (name == "p").then(|| adapter.clone()),
            &[spec("lookup"), spec("ask_billing")],
        )
        .unwrap();
        let remote = Arc::new(Remote {
            answers: Mutex::new(answers),
            ..Remote::default()
        });
        let runner = Runner::new(
            Arc::new(tree),
            remote.clone(),
            RunSettings {
                max_turns: 4,
                tool_timeout: Duration::from_millis(200),
                max_output_tokens: 0,
                stream: true,
            },
        );
        (provider, remote, runner)
    }

    fn to_billing() -> Result<Vec<ProviderEvent>, ProviderError> {
        answer(vec![call(
            0,
            "t1",
            TRANSFER_TO_AGENT,
            r#"{"agent_name":"billing"}"#,
        )])
    }

    fn active_agent(event: &Event) -> Option<&str> {
        event
            .actions
            .state_delta
            .get(ACTIVE_AGENT_KEY)
            .and_then(Value::as_str)
    }

    #[tokio::test]
    async fn a_transfer_to_a_remote_agent_asks_it_and_its_answer_ends_the_run() {
        let (provider, remote, runner) = with_remote(
            vec![to_billing()],
            vec![Ok(json!({"state": "completed", "text": "Paid.",
                "artifacts": [{"text": "receipt 7"}], "taskId": "r1", "contextId": "rc"}))],
        );
        // The root's model is told of it, with its default description.
        let tree = runner.tree();
        let billing = tree.node(tree.find("billing").unwrap());
        assert_eq!(billing.description, "The remote A2A agent billing.");
        assert_eq!(billing.remote.as_deref(), Some("ask_billing"));
        let mut recorder = Recorder::default();
        let mut contents = user("my invoice");
        runner.run(&mut contents, "", &mut recorder).await.unwrap();
        assert_eq!(
            provider.requests().len(),
            1,
            "only the root's model is asked"
        );
        assert_eq!(remote.asked(), [json_map(json!({"text": "my invoice"}))]);
        let complete = recorder.complete();
        // Transfer call and answer, then the remote's call (recorded before it is made) and
        // answer, then its answer as the turn's, handing the conversation back.
        assert_eq!(complete.len(), 5, "{complete:?}");
        assert_eq!(complete[2].author, "billing");
        assert_eq!(
            complete[2].function_calls().next().unwrap().name,
            "ask_billing"
        );
        let last = complete[4];
        assert!(last.turn_complete);
        assert_eq!(last.text(), "Paid.\nreceipt 7");
        assert_eq!(active_agent(last), Some("root"));
        assert_eq!(collect_text(&recorder.events), "Paid.\nreceipt 7");
    }

    #[tokio::test]
    async fn a_remote_agent_that_asks_keeps_the_conversation_until_it_answered() {
        let (provider, remote, runner) = with_remote(
            vec![to_billing()],
            vec![
                Ok(json!({"state": "input-required", "text": "Which invoice?",
                    "taskId": "r1", "contextId": "rc"})),
                Ok(
                    json!({"state": "completed", "text": "Refunded.", "taskId": "r1", "contextId": "rc"}),
                ),
                Ok(
                    json!({"state": "completed", "text": "You're welcome.", "taskId": "r2", "contextId": "rc"}),
                ),
            ],
        );
        let mut recorder = Recorder::default();
        let mut contents = user("my invoice");
        runner.run(&mut contents, "", &mut recorder).await.unwrap();
        let last = *recorder.complete().last().unwrap();
        assert_eq!(last.text(), "Which invoice?");
        assert_eq!(
            active_agent(last),
            None,
            "the conversation stays with billing"
        );

        // The reply continues the remote's task; no model is asked.
        let runner = runner.starting_with(Some("billing"));
        contents.extend(user("number 7"));
        let mut recorder = Recorder::default();
        runner.run(&mut contents, "", &mut recorder).await.unwrap();
        let last = *recorder.complete().last().unwrap();
        assert_eq!(last.text(), "Refunded.");
        assert_eq!(active_agent(last), Some("root"));
        // A later message goes on in the remote's conversation, in a new task.
        contents.extend(user("thanks"));
        runner
            .run(&mut contents, "", &mut Recorder::default())
            .await
            .unwrap();
        assert_eq!(provider.requests().len(), 1);
        assert_eq!(
            remote.asked()[1..],
            [
                json_map(json!({"text": "number 7", "taskId": "r1", "contextId": "rc"})),
                json_map(json!({"text": "thanks", "contextId": "rc"})),
            ]
        );
    }

    #[tokio::test]
    async fn a_remote_agent_that_fails_fails_the_run_with_its_reason() {
        let (_, _, runner) = with_remote(
            vec![to_billing()],
            vec![Err("remote agent billing: unreachable".into())],
        );
        let mut recorder = Recorder::default();
        let e = runner
            .run(&mut user("my invoice"), "", &mut recorder)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "remote agent billing: unreachable");
        let last = *recorder.complete().last().unwrap();
        // The call is answered with the error (the history stays paired), the conversation
        // goes back to the root, and the failure is not an answer.
        assert!(!last.turn_complete);
        assert_eq!(active_agent(last), Some("root"));
        assert_eq!(
            responses(&recorder).last().unwrap()["error"],
            "remote agent billing: unreachable"
        );
    }

    #[tokio::test]
    async fn a_stored_call_of_a_remote_agent_is_picked_up_and_not_made_twice() {
        let (provider, remote, runner) = with_remote(
            vec![],
            vec![Ok(
                json!({"state": "completed", "text": "Paid.", "taskId": "r1", "contextId": "rc"}),
            )],
        );
        let mut contents = user("my invoice");
        contents.push(Content {
            role: "model".into(),
            parts: vec![Part::FunctionCall(FunctionCall {
                id: "ask_billing-1".into(),
                name: "ask_billing".into(),
                args: json_map(json!({"text": "my invoice"})),
            })],
        });
        let mut recorder = Recorder::default();
        runner
            .starting_with(Some("billing"))
            .run(&mut contents, "", &mut recorder)
            .await
            .unwrap();
        assert_eq!(remote.asked().len(), 1);
        assert!(provider.requests().is_empty());
        assert_eq!(recorder.complete().last().unwrap().text(), "Paid.");
    }

    fn json_map(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }
}
