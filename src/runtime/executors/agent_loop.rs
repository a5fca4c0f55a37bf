//! The agent loop: [`AgentLoopExecutor`] runs the configured agent tree over a turn
//! (the routing model, `routing_model.rs`, shares its tool calls and failures).
//!
//! Both leave explicit tool calls (a data part `{"tool": …}`) to the
//! [`ToolRoutingExecutor`], so clients can always call a tool directly, model or not.
//!
//! How a run maps to A2A: the task goes `working`; model text streams into one artifact
//! (`answer`) in chunks at most every `agent.stream_flush_ms`, turns separated by a blank
//! line, the last chunk marked `lastChunk`; the task completes when the run ends, or fails
//! with an `errorCode` (`MODEL_UNAVAILABLE`, `MODEL_ERROR`, `AGENT_TURN_LIMIT`,
//! `AGENT_NOT_FOUND`) and no internals. Every complete event (calls, tool results,
//! answers) is written to the thread's history through `TurnSink::append_event` before
//! the run goes on, so a later turn — or the same thread after a restart — sees it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::executor::{AgentExecutor, Turn, TurnSink, calling};
use super::tool_router::ToolRoutingExecutor;
use crate::agent::{
    ACTIVE_AGENT_KEY, AgentError, AgentTree, Content, Event, RunError, RunObserver, RunSettings,
    Runner, TRANSFER_TO_AGENT, ToolInvoker, run_and_collect, unanswered_calls,
};
use crate::config::{AgentSettings, HistorySettings};
use crate::domain::{Artifact, Message, Metadata, Part as A2aPart, TaskId, TenantId};
use crate::error::Result;
use crate::providers::ProviderError;
use crate::runtime::Tools;
use crate::session::{FunctionCall, HeuristicEstimator, HistoryConfig};
use crate::skills::{CallJournal, Caller, Question, SkillError};

/// The tool whose output is added to the instruction at the start of each run.
const SESSION_CONTEXT_TOOL: &str = crate::skills::context::SESSION_CONTEXT_TOOL;
/// Request/message metadata keys passed to `session_context` as scope ids.
const SCOPE_KEYS: [&str; 7] = [
    "userId",
    "agentId",
    "sessionId",
    "projectId",
    "teamId",
    "orgId",
    "companyId",
];

/// Runs the configured agent tree: the executor of a server with `agent.provider` set.
pub struct AgentLoopExecutor {
    /// The tree as built for a list of tools, and which one
    /// ([`Tools::generation`]): remade from it when the tools change.
    tree: arc_swap::ArcSwap<(u64, Arc<AgentTree>)>,
    settings: RunSettings,
    history: HistoryConfig,
    flush: Duration,
}

impl AgentLoopExecutor {
    /// An executor of `tree`, built for the tools listed at start.
    pub fn new(tree: AgentTree, agent: &AgentSettings, history: &HistorySettings) -> Self {
        Self {
            tree: arc_swap::ArcSwap::from_pointee((0, Arc::new(tree))),
            settings: RunSettings::from_settings(agent),
            history: HistoryConfig::from(history),
            flush: Duration::from_millis(agent.stream_flush_ms),
        }
    }

    /// The tree for the tools of `tools` as they are now: the one built before, or,
    /// when they changed since, the same agents with their tools taken anew; for a
    /// `tenant` some skill does not admit, without that skill's tools.
    fn tree(&self, tools: &Tools, tenant: &TenantId) -> Arc<AgentTree> {
        let built = self.tree.load();
        let generation = tools.generation();
        let tree = if built.0 == generation {
            built.1.clone()
        } else {
            let tree = Arc::new(built.1.retooled(&tools.specs()));
            self.tree.store(Arc::new((generation, tree.clone())));
            tree
        };
        match tools.restricts(tenant) {
            true => Arc::new(tree.retooled(&tools.specs_for(tenant))),
            false => tree,
        }
    }

    /// The conversation the model sees, from the turn's history.
    fn contents(&self, turn: &Turn) -> Vec<Content> {
        let root = self.tree.load().1.root().name.clone();
        crate::session::events(&turn.history, &root, &HeuristicEstimator, &self.history)
            .into_iter()
            .filter_map(|event| event.content)
            .collect()
    }
}

#[async_trait]
impl AgentExecutor for AgentLoopExecutor {
    /// A direct call as the tool router says; a run cut short after a model response
    /// whose unanswered calls are all resumable tools (or transfers), which the run
    /// picks up by answering them (`Runner::run`).
    fn resumable(&self, turn: &Turn) -> bool {
        if ToolRoutingExecutor::is_tool_call(turn) {
            return ToolRoutingExecutor.resumable(turn);
        }
        let calls = unanswered_calls(&self.contents(turn));
        !calls.is_empty()
            && calls
                .iter()
                .all(|c| c.name == TRANSFER_TO_AGENT || turn.tools.resumable(&c.name))
    }

    async fn execute(&self, turn: Turn, sink: TurnSink) -> Result<()> {
        if ToolRoutingExecutor::is_tool_call(&turn) {
            return ToolRoutingExecutor.execute(turn, sink).await;
        }
        sink.working().await?;
        let context = session_context(&turn).await;
        let mut contents = self.contents(&turn);
        let tools = Arc::new(SkillTools::new(&turn, &sink));
        let active = turn.state.get(ACTIVE_AGENT_KEY).and_then(Value::as_str);
        let tree = self.tree(&turn.tools, &turn.tenant);
        let runner = Runner::new(tree, tools.clone(), self.settings).starting_with(active);
        let mut observer = SinkObserver::new(&sink, self.flush);
        match run_and_collect(&runner, &mut contents, &context, &mut observer).await {
            Ok(answer) => {
                observer.finish().await?;
                // The last call asked the user something, and the model passed it on:
                // the task waits for the reply (which the model continues the call with).
                match tools.question() {
                    Some((_, question)) => {
                        let text = if answer.trim().is_empty() {
                            question.text
                        } else {
                            answer
                        };
                        sink.input_required(sink.text(text)).await
                    }
                    None => sink.complete(None).await,
                }
            }
            Err(RunError::Observer(e)) => Err(e),
            Err(e) => sink.fail(run_failure(&sink, &e)).await,
        }
    }
}

/// The memories and constraints of the session, from the `session_context` tool when it is
/// registered: the user's text is the query, and scope ids come from the request's or the
/// message's metadata. A failure is logged and the run goes on without context.
async fn session_context(turn: &Turn) -> String {
    if !turn.tools.has(SESSION_CONTEXT_TOOL, None) {
        return String::new();
    }
    let mut arguments = Map::new();
    let text = turn.message.text();
    if !text.trim().is_empty() {
        arguments.insert("query".into(), Value::String(text));
    }
    let sources = [turn.metadata.as_ref(), turn.message.metadata.as_ref()];
    for key in SCOPE_KEYS {
        let id = sources
            .iter()
            .flatten()
            .find_map(|m: &&Metadata| m.get(key).and_then(Value::as_str))
            .filter(|id| !id.is_empty());
        if let Some(id) = id {
            arguments.insert(key.into(), Value::String(id.to_owned()));
        }
    }
    match turn
        .tools
        .call(
            SESSION_CONTEXT_TOOL,
            None,
            Value::Object(arguments),
            turn.caller(),
        )
        .await
    {
        Some(Ok(value)) => value["systemPromptAdditions"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        Some(Err(e)) => {
            tracing::warn!(error = %e, "session context unavailable; running without it");
            String::new()
        }
        None => String::new(),
    }
}

/// The status message of a failed run: what went wrong in a sentence, and an `errorCode`.
pub(super) fn run_failure(sink: &TurnSink, error: &RunError) -> Message {
    let (code, text) = match error {
        RunError::Model(AgentError::Provider(e)) if e.is_retryable() => (
            "MODEL_UNAVAILABLE",
            format!(
                "the model is unavailable ({}); retry later",
                provider_kind(e)
            ),
        ),
        RunError::Model(AgentError::StreamEndedWithoutDone) => (
            "MODEL_UNAVAILABLE",
            "the model's answer was cut off; retry later".to_owned(),
        ),
        RunError::Model(AgentError::Provider(e)) => (
            "MODEL_ERROR",
            format!("the model request failed ({})", provider_kind(e)),
        ),
        RunError::TurnLimit(_) => ("AGENT_TURN_LIMIT", error.to_string()),
        RunError::AgentNotFound(_) => ("AGENT_NOT_FOUND", error.to_string()),
        RunError::Remote(why) => ("REMOTE_AGENT_FAILED", why.clone()),
        RunError::Observer(_) => ("INTERNAL_ERROR", "internal error".to_owned()),
    };
    tracing::warn!(error = %error, code, "agent run failed");
    sink.failure(text, code)
}

/// A provider error's kind, without the provider's own words (they stay in the log).
fn provider_kind(error: &ProviderError) -> String {
    match error {
        ProviderError::Http { status, .. } => format!("HTTP {status}"),
        ProviderError::RateLimited { .. } => "rate limited".into(),
        ProviderError::Timeout => "timed out".into(),
        ProviderError::Connect(_) => "unreachable".into(),
        ProviderError::Decode(_) => "unreadable response".into(),
        ProviderError::StreamEnded => "stream cut off".into(),
        ProviderError::Config(_) => "misconfigured".into(),
        ProviderError::CircuitOpen { .. } => "failing repeatedly".into(),
    }
}

/// The turn's tools as the runner calls them: through the skill actors, as the turn's
/// tenant and thread, each call named by its function call id.
pub(super) struct SkillTools {
    tools: Arc<Tools>,
    /// Where the calls' progress goes (`Turn::progress_every`).
    sink: TurnSink,
    progress_every: Option<Duration>,
    caller: Caller,
    task_id: TaskId,
    journal: Arc<dyn CallJournal>,
    /// What the last call's result asked the user, if it asked (`Tools::question`), and
    /// the tool that asked.
    asked: std::sync::Mutex<Option<(String, Question)>>,
}

impl SkillTools {
    pub(super) fn new(turn: &Turn, sink: &TurnSink) -> Self {
        Self {
            tools: turn.tools.clone(),
            sink: sink.clone(),
            progress_every: turn.progress_every,
            caller: turn.caller(),
            task_id: turn.task_id.clone(),
            journal: turn.journal(sink),
            asked: std::sync::Mutex::new(None),
        }
    }

    /// What the last call made asked the user, if it asked, and the tool that asked.
    pub(super) fn question(&self) -> Option<(String, Question)> {
        self.asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl ToolInvoker for SkillTools {
    async fn invoke(&self, call: &FunctionCall) -> std::result::Result<Value, String> {
        let name = call.name.as_str();
        let caller = calling(
            self.caller.clone(),
            &self.task_id,
            &self.journal,
            &model_call_id(call),
        );
        let arguments = Value::Object(call.args.clone());
        let result = self
            .sink
            .call_tool(
                &self.tools,
                self.progress_every,
                name,
                None,
                arguments,
                caller,
            )
            .await;
        let asked = match &result {
            Some(Ok(value)) => self
                .tools
                .question(name, value)
                .map(|q| (name.to_owned(), q)),
            _ => None,
        };
        *self
            .asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = asked;
        match result {
            Some(Ok(value)) => Ok(self.tools.for_model(name, value)),
            Some(Err(e)) => Err(model_error_text(name, e)),
            None => Err(format!("unknown tool {name:?}")),
        }
    }
}

/// A model's call as its key names it: its id and a digest of its name and arguments. A
/// call made again from the stored response has both the same; two calls of one task
/// never share a key even from a provider that numbers its calls per response
/// (`call_0`), so a remote never takes one for the other's retry.
fn model_call_id(call: &FunctionCall) -> String {
    use sha2::{Digest, Sha256};
    let mut digest = Sha256::new();
    digest.update(call.name.as_bytes());
    digest.update([0]);
    digest.update(Value::Object(call.args.clone()).to_string().as_bytes());
    let digest = digest.finalize();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{}.{hex}", call.id)
}

/// What the model is told about a failed tool call: the caller's mistakes in full, our own
/// failures without internals (those are logged).
fn model_error_text(tool: &str, error: SkillError) -> String {
    match error {
        SkillError::Failed(detail) => {
            tracing::error!(tool, detail = %detail, "tool failed");
            "the tool failed with an internal error".into()
        }
        SkillError::Unavailable(detail) => {
            tracing::warn!(tool, detail = %detail, "tool unavailable");
            "the tool is temporarily unavailable".into()
        }
        // The turn's own next commit is refused the same way, which ends it.
        SkillError::Fenced(detail) => {
            tracing::warn!(tool, detail = %detail, "tool call fenced");
            "the tool is temporarily unavailable".into()
        }
        SkillError::Blocked { message, report } => {
            format!("blocked by governance: {message} (report: {report})")
        }
        // The caller's mistakes, told in full so the model can correct the call; and a
        // remote agent's or MCP server's failure, which is theirs and says what happened
        // there.
        told @ (SkillError::InvalidArguments(_)
        | SkillError::NotFound(_)
        | SkillError::Conflict(_)
        | SkillError::Remote(_)
        | SkillError::ToolServer(_)) => told.to_string(),
    }
}

/// Writes a run's events to the thread and streams its text into the `answer` artifact.
struct SinkObserver<'a> {
    sink: &'a TurnSink,
    artifact_id: String,
    /// Answer text not yet sent.
    pending: String,
    /// Chunks sent so far (the artifact exists).
    sent: bool,
    /// The next chunk replaces the artifact (the run was retried).
    replace: bool,
    /// Any answer text exists (the next turn's text needs a separator).
    wrote: bool,
    /// The current model turn streamed partial text.
    streaming_turn: bool,
    last_flush: Instant,
    flush: Duration,
}

impl<'a> SinkObserver<'a> {
    fn new(sink: &'a TurnSink, flush: Duration) -> Self {
        Self {
            sink,
            artifact_id: uuid::Uuid::new_v4().to_string(),
            pending: String::new(),
            sent: false,
            replace: false,
            wrote: false,
            streaming_turn: false,
            last_flush: Instant::now(),
            flush,
        }
    }

    /// Adds answer text of the current turn (a separator first when a new turn starts).
    fn add_text(&mut self, text: &str, new_turn: bool) {
        if text.is_empty() {
            return;
        }
        if new_turn && self.wrote {
            self.pending.push_str("\n\n");
        }
        self.pending.push_str(text);
        self.wrote = true;
    }

    async fn send_chunk(&mut self, last_chunk: bool) -> Result<()> {
        if self.pending.is_empty() && !(last_chunk && self.sent) {
            return Ok(());
        }
        let mut artifact = Artifact::new(vec![A2aPart::text(std::mem::take(&mut self.pending))]);
        artifact.artifact_id = self.artifact_id.clone();
        artifact.name = Some("answer".into());
        let append = self.sent && !self.replace;
        self.sink.artifact(artifact, append, last_chunk).await?;
        self.sent = true;
        self.replace = false;
        self.last_flush = Instant::now();
        Ok(())
    }

    /// Sends what is left of the answer as the last chunk.
    async fn finish(&mut self) -> Result<()> {
        self.send_chunk(true).await
    }
}

#[async_trait]
impl RunObserver for SinkObserver<'_> {
    async fn on_event(&mut self, event: &Event) -> Result<()> {
        if event.partial {
            let new_turn = !self.streaming_turn;
            self.streaming_turn = true;
            self.add_text(&event.text(), new_turn);
            if self.last_flush.elapsed() >= self.flush {
                self.send_chunk(false).await?;
            }
            return Ok(());
        }
        if event.author == "user" {
            // The run is being retried: its answer starts over.
            self.pending.clear();
            self.wrote = false;
            self.streaming_turn = false;
            self.replace = self.sent;
        } else if event.turn_complete {
            if !self.streaming_turn {
                self.add_text(&event.text(), true);
            }
            self.streaming_turn = false;
        }
        self.sink.append_event(event.clone()).await?;
        if event.function_calls().next().is_some() {
            // Text said before the tools run reaches the client before they do.
            self.send_chunk(false).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(id: &str, text: &str) -> FunctionCall {
        FunctionCall {
            id: id.into(),
            name: "ask_billing".into(),
            args: Map::from_iter([("text".to_owned(), json!(text))]),
        }
    }

    #[test]
    fn a_calls_key_is_the_same_made_again_and_differs_for_a_reused_provider_id() {
        let first = model_call_id(&call("call_0", "refund order 7"));
        assert_eq!(first, model_call_id(&call("call_0", "refund order 7")));
        assert!(first.starts_with("call_0."), "{first}");
        // A provider numbering calls per response: the same id, another call.
        assert_ne!(first, model_call_id(&call("call_0", "order 8")));
        assert_ne!(first, model_call_id(&call("call_1", "refund order 7")));
    }
}
