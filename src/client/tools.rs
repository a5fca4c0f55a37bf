//! Each remote agent as a skill with one tool, `ask_<name>`: its input `{"text": "…",
//! "data": {…}}`, its result the remote task's state, text and artifacts.
//!
//! A call fails as a tool call with the remote's reason (`SkillError::Remote`, told to
//! the model and to a direct caller in full): a task the remote failed, rejected or
//! canceled, a refused request, an unreadable card or answer, no answer within
//! `timeout_ms`. Calls that found the remote unreachable (no connection, no answer in
//! time, a server error) count against its breaker: after `breaker_failures` in a row it
//! opens, and calls fail at once for `breaker_open_secs`; then one call tries again,
//! and its outcome closes the breaker or opens it anew. A remote agent being down is not
//! this server's outage: it does not make `/health` fail.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::a2a::{Answer, CallError, RemoteAgent, Sent};
use crate::config::{RemoteAgentSettings, Settings};
use crate::domain::TenantId;
use crate::outbound::Secrets;
use crate::outbound::UrlPolicy;
use crate::skills::{
    CallRef, Caller, Question, Skill, SkillError, SkillInfo, SkillRegistry, ToolSpec,
};
use crate::telemetry;

/// Registers a skill for each of `agent.remote_agents`, after reading their cards at
/// once (each within its `card_wait_ms`; see [`RemoteAgentSkill`]'s description); a card
/// URL the URL policy refuses, or an unreadable `ca_file`, stops the start.
pub async fn remote_agents(
    settings: &Settings,
    registry: &mut SkillRegistry,
) -> Result<(), String> {
    if settings.agent.remote_agents.is_empty() {
        return Ok(());
    }
    let policy = Arc::new(UrlPolicy::new(&settings.push)?);
    let skills = settings
        .agent
        .remote_agents
        .iter()
        .map(|remote| RemoteAgentSkill::new(remote, policy.clone()).map(|s| (remote, s)))
        .collect::<Result<Vec<_>, _>>()?;
    // Their cards are read at once, each within its `card_wait_ms`.
    let described = skills.iter().map(|(remote, skill)| async move {
        if !remote.description.is_empty() || remote.card_wait_ms == 0 {
            return None;
        }
        let wait = Duration::from_millis(remote.card_wait_ms);
        // A read still going at `card_wait_ms` goes on, for the first call to use.
        match tokio::time::timeout(wait, skill.agent.about(skill.agent.deadline())).await {
            Ok(Ok(about)) => Some(about),
            Ok(Err(e)) => {
                tracing::warn!(agent = %remote.name, error = %e, "remote agent card not read at start-up; its tool has the default description");
                None
            }
            Err(_) => {
                tracing::warn!(agent = %remote.name, wait_ms = remote.card_wait_ms, "remote agent card not read within card_wait_ms; its tool has the default description");
                None
            }
        }
    });
    let described = futures_util::future::join_all(described).await;
    for ((_, mut skill), about) in skills.into_iter().zip(described) {
        if let Some(about) = about.filter(|a| !a.is_empty()) {
            let about = skill.secrets.text(about);
            skill.info.description = format!(
                "Asks the remote A2A agent `{}`: {about}",
                skill.agent.name()
            );
        }
        registry.register(Arc::new(skill));
    }
    Ok(())
}

/// One remote agent, as a skill.
pub struct RemoteAgentSkill {
    info: SkillInfo,
    tool: String,
    agent: RemoteAgent,
    breaker: Breaker,
    /// Its credentials, cut out of everything it answers.
    secrets: Secrets,
}

impl RemoteAgentSkill {
    pub fn new(settings: &RemoteAgentSettings, policy: Arc<UrlPolicy>) -> Result<Self, String> {
        let description = if settings.description.is_empty() {
            // Not its URL: the description is in this server's public card.
            format!(
                "Asks the remote A2A agent `{}` and returns its answer.",
                settings.name
            )
        } else {
            settings.description.clone()
        };
        Ok(Self {
            info: SkillInfo::new(
                format!("remote-{}", settings.name),
                format!("Remote agent {}", settings.name),
                description,
            )
            .with_tags(&["remote", "a2a"]),
            tool: format!("ask_{}", settings.name),
            agent: RemoteAgent::new(settings, policy)?,
            secrets: Secrets::new([&settings.bearer, &settings.api_key]),
            breaker: Breaker::new(
                settings.breaker_failures,
                Duration::from_secs(settings.breaker_open_secs),
            ),
        })
    }

    async fn ask(&self, arguments: &Value, caller: &Caller) -> Result<Value, SkillError> {
        let text = arguments
            .get("text")
            .and_then(Value::as_str)
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| SkillError::InvalidArguments("text: a non-empty string".into()))?;
        let data = match arguments.get("data") {
            None | Some(Value::Null) => None,
            Some(data @ Value::Object(_)) => Some(data),
            Some(_) => return Err(SkillError::InvalidArguments("data: an object".into())),
        };
        let id = |key: &str| {
            arguments
                .get(key)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
        };
        let continues = match (id("taskId"), id("contextId")) {
            (task, Some(context)) => Some((task, context)),
            (None, None) => None,
            (Some(_), None) => {
                return Err(SkillError::InvalidArguments(
                    "taskId needs its contextId (to continue the remote task that asked)".into(),
                ));
            }
        };
        let name = self.agent.name();
        let started = Instant::now();
        let outcome = if self.breaker.admit() {
            let result = self.delegate(caller, text, data, continues).await;
            self.breaker
                .settle(!matches!(result, Err(CallError::Unreachable(_))));
            result.map_err(|e| (e, "unreachable"))
        } else {
            Err((
                CallError::Unreachable(format!(
                    "its breaker is open after {} failed calls in a row; it is tried again \
                     after breaker_open_secs",
                    self.breaker.failures
                )),
                "open",
            ))
        };
        let label = match &outcome {
            Ok(_) => "ok",
            Err((CallError::Refused(_), _)) => "refused",
            Err((CallError::Unreachable(_), how)) => how,
        };
        metrics::counter!(telemetry::REMOTE_AGENT_CALLS, "agent" => name.to_owned(), "outcome" => label)
            .increment(1);
        metrics::histogram!(telemetry::REMOTE_AGENT_CALL_MS, "agent" => name.to_owned())
            .record(started.elapsed().as_secs_f64() * 1000.0);
        match outcome {
            Ok(answer) => {
                let mut answer = json!({
                    "agent": name,
                    "state": answer.state,
                    "text": answer.text,
                    "artifacts": answer.artifacts,
                    "taskId": answer.task_id,
                    "contextId": answer.context_id,
                });
                self.secrets.value(&mut answer);
                Ok(answer)
            }
            Err((e, _)) => Err(SkillError::Remote(
                self.secrets.text(format!("remote agent {name}: {e}")),
            )),
        }
    }

    /// One call made durable where the turn allows it (`caller.call`): the message's id
    /// is derived from the call, so the same call made again after a restart sends the
    /// same id (a server that honours message ids answers it with the first send's
    /// task); a task the remote is still running is recorded in the turn's journal
    /// before it is waited on, and the call made again follows it without sending.
    async fn delegate(
        &self,
        caller: &Caller,
        text: &str,
        data: Option<&Value>,
        continues: Option<(Option<&str>, &str)>,
    ) -> Result<Answer, CallError> {
        let deadline = self.agent.deadline();
        let Some(call) = &caller.call else {
            let message_id = uuid::Uuid::new_v4().to_string();
            return match self
                .agent
                .send(&message_id, text, data, continues, deadline)
                .await?
            {
                Sent::Answered(answer) => Ok(answer),
                Sent::Running { task_id, .. } => self.agent.follow(&task_id, true, deadline).await,
            };
        };
        if let Some(task_id) = call
            .recorded()
            .as_ref()
            .and_then(|r| r.get("taskId"))
            .and_then(Value::as_str)
        {
            tracing::info!(
                agent = self.agent.name(),
                task_id,
                "following the remote task a restart interrupted"
            );
            let answer = self.agent.follow(task_id, false, deadline).await;
            self.forget(call).await;
            return answer;
        }
        let message_id = derived_message_id(&caller.tenant, &call.key);
        match self
            .agent
            .send(&message_id, text, data, continues, deadline)
            .await?
        {
            Sent::Answered(answer) => Ok(answer),
            Sent::Running {
                task_id,
                context_id,
            } => {
                call.record(json!({
                    "tool": self.tool,
                    "taskId": task_id,
                    "contextId": context_id,
                    "messageId": message_id,
                }))
                .await
                .map_err(|e| {
                    CallError::Unreachable(format!(
                        "its task {task_id} could not be recorded before waiting on it ({e})"
                    ))
                })?;
                let answer = self.agent.follow(&task_id, true, deadline).await;
                self.forget(call).await;
                answer
            }
        }
    }

    /// The remote task the call followed has ended (or was given up on): its record is
    /// cleared, so that nothing follows or cancels it later. A failure only leaves the
    /// record to expire (a later cancel of it is refused by the remote, harmlessly).
    async fn forget(&self, call: &CallRef) {
        if let Err(e) = call.record(Value::Null).await {
            tracing::debug!(agent = self.agent.name(), error = %e, "remote task's record not cleared");
        }
    }
}

/// The message id of the call `call_key` of `tenant`: the same for the same call made
/// again, and no other call's (a name-based UUID, RFC 9562 version 5).
fn derived_message_id(tenant: &TenantId, call_key: &str) -> String {
    let name = format!("{}\u{0}{call_key}", tenant.as_str());
    uuid::Uuid::new_v5(&DELEGATION_NAMESPACE, name.as_bytes()).to_string()
}

/// The namespace of [`derived_message_id`]'s names (a fixed random UUID).
const DELEGATION_NAMESPACE: uuid::Uuid = uuid::uuid!("6f1c9a52-3b8e-4d07-9a61-2c5e8f0b7d43");

#[async_trait]
impl Skill for RemoteAgentSkill {
    fn info(&self) -> &SkillInfo {
        &self.info
    }

    fn tools(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: self.tool.clone(),
            description: format!(
                "{} Give it `text` (and structured `data` if it needs any); the answer is \
                 its task's `state` (completed, input-required, auth-required, or message \
                 for a direct reply), its `text` and `artifacts`, and the task's `taskId` \
                 and `contextId`. When it asks for input, answer with another call that \
                 gives the same `taskId` and `contextId`; a `contextId` alone goes on with \
                 the same conversation in a new task.",
                self.info.description
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "text": {"type": "string", "minLength": 1, "description": "What to ask."},
                    "data": {"type": "object", "description": "Structured input, sent as a data part."},
                    "taskId": {"type": "string", "description": "The remote task to continue (one that asked for input)."},
                    "contextId": {"type": "string", "description": "That task's contextId; alone: the remote conversation to go on with."},
                },
                "required": ["text"],
                "additionalProperties": false,
            }),
            output_schema: json!({
                "type": "object",
                "properties": {
                    "agent": {"type": "string"},
                    "state": {"type": "string", "enum": ["completed", "input-required", "auth-required", "message"]},
                    "text": {"type": "string"},
                    "artifacts": {"type": "array", "items": {"type": "object"}},
                    "taskId": {"type": "string"},
                    "contextId": {"type": "string"},
                },
                "required": ["agent", "state", "text", "artifacts"],
            }),
        }]
    }

    async fn invoke(
        &self,
        tool: &str,
        arguments: Value,
        caller: &Caller,
    ) -> Result<Value, SkillError> {
        if tool != self.tool {
            return Err(SkillError::NotFound(format!("tool {tool}")));
        }
        self.ask(&arguments, caller).await
    }

    fn resumable(&self, tool: &str) -> bool {
        tool == self.tool
    }

    /// The remote task the call started (`taskId` of its record or its question's
    /// arguments) is canceled there.
    async fn cancel(&self, tool: &str, started: &Value) -> Result<(), SkillError> {
        let Some(task_id) = started["taskId"].as_str().filter(|_| tool == self.tool) else {
            return Ok(());
        };
        self.agent.cancel(task_id).await.map_err(|e| {
            SkillError::Remote(
                self.secrets
                    .text(format!("remote agent {}: {e}", self.agent.name())),
            )
        })
    }

    /// A remote task that needs input asks its question through ours; the reply
    /// continues the remote task (its `taskId` and `contextId`).
    fn question(&self, tool: &str, result: &Value) -> Option<Question> {
        if tool != self.tool || result["state"] != "input-required" {
            return None;
        }
        let text = match result["text"].as_str().map(str::trim) {
            Some(text) if !text.is_empty() => text.to_owned(),
            _ => format!("The remote agent {} needs more input.", self.agent.name()),
        };
        let mut continue_with = serde_json::Map::new();
        for key in ["taskId", "contextId"] {
            continue_with.insert(key.into(), result.get(key)?.clone());
        }
        Some(Question {
            text,
            continue_with,
        })
    }
}

/// Consecutive unreachable calls open it; open, it admits one call once its time is up.
pub(super) struct Breaker {
    failures: u32,
    open_for: Duration,
    state: Mutex<BreakerState>,
}

#[derive(Default)]
struct BreakerState {
    failed_in_a_row: u32,
    open_until: Option<Instant>,
    /// A call is trying the remote again after the breaker was open.
    probing: bool,
}

impl Breaker {
    pub(super) fn new(failures: u32, open_for: Duration) -> Self {
        Self {
            failures: failures.max(1),
            open_for,
            state: Mutex::new(BreakerState::default()),
        }
    }

    /// Whether a call may go out now.
    pub(super) fn admit(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.open_until {
            None => true,
            Some(until) if Instant::now() >= until && !state.probing => {
                state.probing = true;
                true
            }
            Some(_) => false,
        }
    }

    /// Whether it is open now (calls are refused, or one probe is out).
    pub(super) fn is_open(&self) -> bool {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.open_until.is_some()
    }

    /// The outcome of an admitted call: `reached` closes the breaker; a failure counts,
    /// and opens it at the threshold (or again, after a failed probe).
    pub(super) fn settle(&self, reached: bool) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let probing = std::mem::take(&mut state.probing);
        if reached {
            *state = BreakerState::default();
            return;
        }
        state.failed_in_a_row = state.failed_in_a_row.saturating_add(1);
        if probing || state.failed_in_a_row >= self.failures {
            state.open_until = Some(Instant::now() + self.open_for);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_made_again_sends_the_same_message_id_and_no_other_call_does() {
        let tenant = TenantId::default_tenant();
        let first = derived_message_id(&tenant, "task-1/call-1");
        assert_eq!(first, derived_message_id(&tenant, "task-1/call-1"));
        assert_ne!(first, derived_message_id(&tenant, "task-1/call-2"));
        assert_ne!(first, derived_message_id(&tenant, "task-2/call-1"));
        let other = TenantId::parse("acme").expect("a tenant id");
        assert_ne!(first, derived_message_id(&other, "task-1/call-1"));
        let id = uuid::Uuid::parse_str(&first).expect("a UUID");
        assert_eq!(id.get_version_num(), 5);
    }

    #[tokio::test]
    async fn a_card_url_the_push_policy_refuses_stops_the_start() {
        let mut settings = Settings::default();
        settings.agent.remote_agents = vec![RemoteAgentSettings::new(
            "local",
            "http://127.0.0.1:9000/.well-known/agent-card.json",
        )];
        let mut registry = SkillRegistry::default();
        let e = remote_agents(&settings, &mut registry).await.err().unwrap();
        assert!(e.contains("local") && e.contains("loopback"), "{e}");
        for url in [
            "http://169.254.169.254/card",
            "http://metadata.google.internal/card",
        ] {
            settings.agent.remote_agents[0].card_url = url.into();
            let e = remote_agents(&settings, &mut registry).await.err().unwrap();
            assert!(e.contains("card_url"), "{url}: {e}");
        }
        settings.push.allow_loopback = true;
        settings.agent.remote_agents[0].card_url =
            "http://127.0.0.1:9000/.well-known/agent-card.json".into();
        // Not read at start-up: nothing listens there.
        settings.agent.remote_agents[0].card_wait_ms = 0;
        remote_agents(&settings, &mut registry).await.unwrap();
        let tools: Vec<String> = registry.skills()[0]
            .tools()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(tools, ["ask_local"]);
        assert_eq!(registry.skills()[0].info().id, "remote-local");
    }

    #[test]
    fn the_breaker_opens_after_failures_in_a_row_and_one_probe_closes_it() {
        let breaker = Breaker::new(2, Duration::ZERO);
        assert!(breaker.admit());
        breaker.settle(false);
        assert!(breaker.admit(), "one failure: still closed");
        breaker.settle(true);
        assert!(breaker.admit());
        breaker.settle(false);
        assert!(breaker.admit());
        breaker.settle(false);
        // Open (for no time at all here): one probe goes out, the next call waits for it.
        assert!(breaker.admit());
        assert!(!breaker.admit(), "a probe is out");
        breaker.settle(false);
        assert!(
            breaker.admit(),
            "the failed probe opened it again, for no time"
        );
        breaker.settle(true);
        assert!(breaker.admit() && breaker.admit(), "closed");

        let slow = Breaker::new(1, Duration::from_secs(3600));
        assert!(slow.admit());
        slow.settle(false);
        assert!(!slow.admit(), "open for an hour");
    }
}
