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
    AgentError, Content, Event, LlmRequest, ModelAdapter, Part, TRANSFER_TO_AGENT, collect_text,
    extract_missing_agent, function_declarations, missing_agent_correction,
    transfer_to_agent_declaration,
};
use crate::config::{AgentSettings, SubAgentSettings};
use crate::domain::Timestamp;
use crate::session::{FunctionCall, FunctionResponse};
use crate::skills::ToolSpec;

/// The thread-state key holding the agent that has the conversation (set on each transfer),
/// so the next turn starts with it; absent or unknown: the root.
pub const ACTIVE_AGENT_KEY: &str = "agent:active";

/// Content role of the user's input (and of function responses, as ADK writes them).
const ROLE_USER: &str = "user";
/// The tool-list entry that stands for every registered tool.
const ALL_TOOLS: &str = "*";

/// One agent of the tree.
#[derive(Clone)]
pub struct AgentNode {
    pub name: String,
    pub description: String,
    pub instruction: String,
    pub model: ModelAdapter,
    /// Sent as the request's model; `None`: the provider's configured model.
    pub model_name: Option<String>,
    /// The tools it offers its model: those of `wanted` that are registered.
    pub tools: Vec<ToolSpec>,
    /// The tools its settings name (`"*"`: all), which [`AgentTree::retooled`] takes
    /// from a new list of tools.
    pub wanted: Vec<String>,
    /// Positions in the tree of the agents this one may transfer to (its sub-agents).
    pub sub_agents: Vec<usize>,
    pub parent: Option<usize>,
    /// A remote A2A agent's node: the tool that asks it (`ask_<name>`, its one tool).
    /// Runs that reach it send it the user's message instead of asking a model (its
    /// `model` is its parent's, unused).
    pub remote: Option<String>,
}

impl std::fmt::Debug for AgentNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentNode")
            .field("name", &self.name)
            .field("provider", &self.model.provider.id())
            .field(
                "tools",
                &self.tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .field("sub_agents", &self.sub_agents)
            .finish()
    }
}

/// Why an agent tree could not be built from the configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error("agent {agent:?}: no provider is configured for it")]
    NoProvider { agent: String },
    #[error("agent {agent:?}: provider {provider:?} is not configured")]
    UnknownProvider { agent: String, provider: String },
    #[error("agent {agent:?}: tool {tool:?} is not registered (known: {known})")]
    UnknownTool {
        agent: String,
        tool: String,
        known: String,
    },
    #[error("agent name {0:?} is used twice")]
    DuplicateName(String),
}

/// The agents of a deployment: the root first, then its sub-agents depth first.
#[derive(Debug, Clone)]
pub struct AgentTree {
    nodes: Vec<AgentNode>,
}

impl AgentTree {
    /// Builds the tree of `[agent]`. `model` gives the adapter of a provider by name;
    /// `tools` are every registered tool.
    pub fn build(
        settings: &AgentSettings,
        model: &dyn Fn(&str) -> Option<ModelAdapter>,
        tools: &[ToolSpec],
    ) -> Result<AgentTree, TreeError> {
        let mut tree = AgentTree { nodes: Vec::new() };
        let root = NodeConfig {
            name: &settings.name,
            description: &settings.description,
            instruction: &settings.instruction,
            provider: &settings.provider,
            model: &settings.model,
            tools: &settings.tools,
            sub_agents: &settings.sub_agents,
            remote: "",
        };
        tree.add(root, None, "", model, tools)?;
        Ok(tree)
    }

    fn add(
        &mut self,
        config: NodeConfig<'_>,
        parent: Option<usize>,
        parent_provider: &str,
        model: &dyn Fn(&str) -> Option<ModelAdapter>,
        tools: &[ToolSpec],
    ) -> Result<usize, TreeError> {
        if self.find(config.name).is_some() {
            return Err(TreeError::DuplicateName(config.name.to_owned()));
        }
        let provider = if config.provider.is_empty() {
            parent_provider
        } else {
            config.provider
        };
        if provider.is_empty() {
            return Err(TreeError::NoProvider {
                agent: config.name.to_owned(),
            });
        }
        let adapter = model(provider).ok_or_else(|| TreeError::UnknownProvider {
            agent: config.name.to_owned(),
            provider: provider.to_owned(),
        })?;
        let remote = (!config.remote.is_empty()).then(|| format!("ask_{}", config.remote));
        let wanted = match &remote {
            Some(ask) => vec![ask.clone()],
            None => config.tools.to_vec(),
        };
        let own_tools = select_tools(config.name, &wanted, tools)?;
        let description = match (&remote, config.description) {
            (Some(_), "") => format!("The remote A2A agent {}.", config.remote),
            (_, description) => description.to_owned(),
        };
        let node = AgentNode {
            name: config.name.to_owned(),
            description,
            instruction: config.instruction.to_owned(),
            model: adapter,
            model_name: (!config.model.is_empty()).then(|| config.model.to_owned()),
            tools: own_tools,
            wanted,
            sub_agents: Vec::new(),
            parent,
            remote,
        };
        self.nodes.push(node);
        let at = self.nodes.len() - 1;
        for sub in config.sub_agents {
            let child = self.add(NodeConfig::sub(sub), Some(at), provider, model, tools)?;
            self.nodes[at].sub_agents.push(child);
        }
        Ok(at)
    }

    /// The same tree with each agent's tools taken from `tools`, a list that changed
    /// since the tree was built (an MCP server's): a tool an agent names that is no
    /// longer there is left out (the agent's model is no longer offered it), one that
    /// has appeared is offered to the agents that take all (`"*"`).
    pub fn retooled(&self, tools: &[ToolSpec]) -> AgentTree {
        let mut nodes = self.nodes.clone();
        for node in &mut nodes {
            node.tools = match node.wanted.iter().any(|w| w == ALL_TOOLS) {
                true => tools.to_vec(),
                false => node
                    .wanted
                    .iter()
                    .filter_map(|name| tools.iter().find(|t| &t.name == name).cloned())
                    .collect(),
            };
        }
        AgentTree { nodes }
    }

    /// The root agent.
    pub fn root(&self) -> &AgentNode {
        &self.nodes[0]
    }

    /// The agent at `at` (a position this tree handed out).
    pub fn node(&self, at: usize) -> &AgentNode {
        &self.nodes[at]
    }

    /// The position of the agent named `name`.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The names agent `at` may transfer to: its sub-agents, then its parent.
    pub fn transfer_targets(&self, at: usize) -> Vec<&str> {
        let node = &self.nodes[at];
        node.sub_agents
            .iter()
            .chain(node.parent.iter())
            .map(|&i| self.nodes[i].name.as_str())
            .collect()
    }

    /// The names of the root's sub-agents (the valid names of the A.13 correction).
    pub fn root_sub_agent_names(&self) -> Vec<&str> {
        self.root()
            .sub_agents
            .iter()
            .map(|&i| self.nodes[i].name.as_str())
            .collect()
    }
}

/// The fields the root (`[agent]`) and sub-agents share.
struct NodeConfig<'a> {
    name: &'a str,
    description: &'a str,
    instruction: &'a str,
    provider: &'a str,
    model: &'a str,
    tools: &'a [String],
    sub_agents: &'a [SubAgentSettings],
    /// The `[[agent.remote_agents]]` this agent is; empty: none.
    remote: &'a str,
}

impl<'a> NodeConfig<'a> {
    fn sub(sub: &'a SubAgentSettings) -> Self {
        Self {
            name: &sub.name,
            description: &sub.description,
            instruction: &sub.instruction,
            provider: &sub.provider,
            model: &sub.model,
            tools: &sub.tools,
            sub_agents: &sub.sub_agents,
            remote: &sub.remote,
        }
    }
}

/// The specs named by `wanted` (`"*"`: all of them, in registration order).
fn select_tools(
    agent: &str,
    wanted: &[String],
    tools: &[ToolSpec],
) -> Result<Vec<ToolSpec>, TreeError> {
    if wanted.iter().any(|w| w == ALL_TOOLS) {
        return Ok(tools.to_vec());
    }
    wanted
        .iter()
        .map(|name| {
            tools
                .iter()
                .find(|t| &t.name == name)
                .cloned()
                .ok_or_else(|| TreeError::UnknownTool {
                    agent: agent.to_owned(),
                    tool: name.clone(),
                    known: tools
                        .iter()
                        .map(|t| t.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                })
        })
        .collect()
}

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
#[path = "runner_tests.rs"]
mod tests;
