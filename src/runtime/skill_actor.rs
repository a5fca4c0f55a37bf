//! `SkillActor`s: every registered skill runs behind one, and every tool call — a direct
//! call from a client or a model's function call — goes through it.
//!
//! The actor checks the arguments against the tool's JSON Schema before the engine sees
//! them (the error names the field), bounds how many calls of the skill run at once
//! (`skills.max_concurrency`) and how long one may take (`skills.timeout_ms`), and records
//! calls, latency and errors per skill and tool. Engines do their blocking work (git,
//! SQLite) on the blocking pool, never on an arbiter thread.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use serde_json::Value;
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::config::SkillSettings;
use crate::skills::{Caller, Question, Skill, SkillError, SkillRegistry, ToolSpec};
use crate::telemetry::trace;
use crate::telemetry::{SKILL_CALLS, SKILL_ERRORS, SKILL_LATENCY_MS};

/// One tool call.
#[derive(Message)]
#[rtype(result = "Result<Value, SkillError>")]
pub struct Invoke {
    pub tool: String,
    pub arguments: Value,
    pub caller: Caller,
    /// The call's span (`Span::none()` without traces): the skill runs inside it on the
    /// actor's arbiter, so what the skill sends out (a remote agent's request) carries
    /// the trace.
    pub span: tracing::Span,
    /// Resolves when the caller stopped waiting (its turn was canceled, timed out or cut
    /// off: the sender dropped): the call is dropped with it, so a skill's request in
    /// flight is abandoned there too (an MCP server is sent `notifications/cancelled`).
    pub abandoned: tokio::sync::oneshot::Receiver<()>,
}

/// Checks the skill's engine (see [`Skill::health`]), giving up after `timeout`.
#[derive(Message)]
#[rtype(result = "Result<(), String>")]
pub struct CheckHealth {
    pub timeout: Duration,
}

/// The actor in front of one skill.
pub struct SkillActor {
    skill: Arc<dyn Skill>,
    schemas: Arc<HashMap<String, jsonschema::Validator>>,
    outputs: Arc<HashMap<String, jsonschema::Validator>>,
    permits: Arc<Semaphore>,
    timeout: Duration,
}

impl Actor for SkillActor {
    type Context = Context<Self>;
}

impl Handler<CheckHealth> for SkillActor {
    type Result = ResponseFuture<Result<(), String>>;

    fn handle(&mut self, msg: CheckHealth, _ctx: &mut Context<Self>) -> Self::Result {
        // Not a tool call: no permit, so a skill busy with calls still answers. Bounded
        // here too, so a stuck engine leaves no check behind in the actor.
        let skill = self.skill.clone();
        Box::pin(async move {
            tokio::time::timeout(msg.timeout, skill.health())
                .await
                .unwrap_or_else(|_| Err(timed_out(msg.timeout)))
        })
    }
}

impl Handler<Invoke> for SkillActor {
    type Result = ResponseFuture<Result<Value, SkillError>>;

    fn handle(&mut self, call: Invoke, _ctx: &mut Context<Self>) -> Self::Result {
        let skill = self.skill.clone();
        let schemas = self.schemas.clone();
        let outputs = self.outputs.clone();
        let permits = self.permits.clone();
        let timeout = self.timeout;
        let Invoke {
            tool,
            arguments,
            caller,
            span,
            abandoned,
        } = call;
        Box::pin(async move {
            let started = Instant::now();
            let skill_id = skill.info().id.clone();
            let result = match check_arguments(&schemas, &tool, &arguments) {
                Err(e) => Err(e),
                Ok(()) => {
                    // Waiting for a permit counts against the call's time budget too.
                    let run = async {
                        let _permit = permits
                            .acquire_owned()
                            .await
                            .map_err(|_| SkillError::Unavailable("skill shut down".into()))?;
                        skill
                            .invoke(&tool, arguments, &caller)
                            .instrument(span)
                            .await
                    };
                    tokio::select! {
                        finished = tokio::time::timeout(timeout, run) => match finished {
                            Ok(Ok(value)) => check_output(&outputs, &tool, value),
                            Ok(Err(e)) => Err(e),
                            Err(_) => Err(SkillError::Unavailable(format!(
                                "{tool} did not finish within {} ms (skills.timeout_ms)",
                                timeout.as_millis()
                            ))),
                        },
                        // Nobody waits for the answer: stop making it.
                        _ = abandoned => Err(SkillError::Unavailable(format!(
                            "{tool}: the caller stopped waiting"
                        ))),
                    }
                }
            };
            let outcome = outcome(&result);
            metrics::counter!(SKILL_CALLS, "skill" => skill_id.clone(), "tool" => tool.clone(), "outcome" => outcome)
                .increment(1);
            if result.is_err() {
                metrics::counter!(SKILL_ERRORS, "skill" => skill_id.clone(), "tool" => tool.clone(), "outcome" => outcome)
                    .increment(1);
            }
            metrics::histogram!(SKILL_LATENCY_MS, "skill" => skill_id, "tool" => tool)
                .record(started.elapsed().as_secs_f64() * 1000.0);
            result
        })
    }
}

/// Validates `arguments` against the tool's schema; the message names each bad field.
fn check_arguments(
    schemas: &HashMap<String, jsonschema::Validator>,
    tool: &str,
    arguments: &Value,
) -> Result<(), SkillError> {
    let Some(schema) = schemas.get(tool) else {
        return Err(SkillError::InvalidArguments(format!(
            "unknown tool {tool:?}"
        )));
    };
    let problems: Vec<String> = schema
        .iter_errors(arguments)
        .map(|e| {
            let path = e.instance_path().to_string();
            let mut field = path.trim_start_matches('/').replace('/', ".");
            // A missing property is reported at its parent: name the property itself.
            if let jsonschema::error::ValidationErrorKind::Required { property } = e.kind() {
                let name = property
                    .as_str()
                    .map_or_else(|| property.to_string(), str::to_owned);
                field = if field.is_empty() {
                    name
                } else {
                    format!("{field}.{name}")
                };
                return format!("{field}: is required");
            }
            if field.is_empty() {
                e.to_string()
            } else {
                format!("{field}: {e}")
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(SkillError::InvalidArguments(problems.join("; ")))
    }
}

/// A result that breaks its tool's output schema is a bug of the skill: it fails the
/// call (logged with the problems) rather than reaching callers who rely on the schema.
fn check_output(
    outputs: &HashMap<String, jsonschema::Validator>,
    tool: &str,
    value: Value,
) -> Result<Value, SkillError> {
    let Some(schema) = outputs.get(tool) else {
        return Ok(value);
    };
    let problems: Vec<String> = schema
        .iter_errors(&value)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    if problems.is_empty() {
        Ok(value)
    } else {
        Err(SkillError::Failed(format!(
            "{tool} answered outside its output schema: {}",
            problems.join("; ")
        )))
    }
}

/// Why the skills could not start.
#[derive(Debug, thiserror::Error)]
pub enum SkillStartError {
    #[error("skill {skill}: tool {tool} has an invalid {reason}")]
    InvalidSchema {
        skill: String,
        tool: String,
        reason: String,
    },
    #[error("tool {tool} is offered by both {first} and {second}")]
    DuplicateTool {
        tool: String,
        first: String,
        second: String,
    },
}

/// A registered tool: its skill's id, its spec, the actor that runs its calls, and the
/// skill.
type Registered = (String, ToolSpec, Addr<SkillActor>, Arc<dyn Skill>);

/// Every tool, reachable by name through its skill's actor.
pub struct Tools {
    /// Each tool's skill id, spec, actor, and skill (for what it says of its calls:
    /// `Skill::resumable`, `Skill::question`, `Skill::cancel`).
    by_name: HashMap<String, Registered>,
    names: Vec<String>,
    /// Each skill's actor by skill id, in registration order.
    skills: Vec<(String, Addr<SkillActor>)>,
    /// `skills.timeout_ms`: how long a call may take (the skill actor's bound), and a
    /// cancel.
    call_timeout: Duration,
}

impl Tools {
    /// Starts one actor per skill of `registry`, spread over `arbiters`.
    pub fn start(
        registry: &SkillRegistry,
        settings: &SkillSettings,
        arbiters: &[ArbiterHandle],
    ) -> Result<Tools, SkillStartError> {
        let mut by_name: HashMap<String, Registered> = HashMap::new();
        let mut names = Vec::new();
        let mut skills = Vec::new();
        for (i, skill) in registry.skills().iter().enumerate() {
            let mut schemas = HashMap::new();
            let mut outputs = HashMap::new();
            for tool in skill.tools() {
                let compile = |schema: &Value, which: &str| {
                    jsonschema::validator_for(schema).map_err(|e| SkillStartError::InvalidSchema {
                        skill: skill.info().id.clone(),
                        tool: tool.name.clone(),
                        reason: format!("{which} schema: {e}"),
                    })
                };
                schemas.insert(tool.name.clone(), compile(&tool.input_schema, "input")?);
                outputs.insert(tool.name.clone(), compile(&tool.output_schema, "output")?);
            }
            let actor = SkillActor {
                skill: skill.clone(),
                schemas: Arc::new(schemas),
                outputs: Arc::new(outputs),
                permits: Arc::new(Semaphore::new(settings.max_concurrency)),
                timeout: Duration::from_millis(settings.timeout_ms),
            };
            let addr = match arbiters.get(i % arbiters.len().max(1)) {
                Some(arbiter) => SkillActor::start_in_arbiter(arbiter, |_| actor),
                None => actor.start(),
            };
            skills.push((skill.info().id.clone(), addr.clone()));
            for tool in skill.tools() {
                if let Some((first, ..)) = by_name.get(&tool.name) {
                    return Err(SkillStartError::DuplicateTool {
                        tool: tool.name.clone(),
                        first: String::clone(first),
                        second: skill.info().id.clone(),
                    });
                }
                names.push(tool.name.clone());
                by_name.insert(
                    tool.name.clone(),
                    (skill.info().id.clone(), tool, addr.clone(), skill.clone()),
                );
            }
        }
        Ok(Tools {
            by_name,
            names,
            skills,
            call_timeout: Duration::from_millis(settings.timeout_ms),
        })
    }

    /// No tools at all.
    pub fn none() -> Tools {
        Tools {
            by_name: HashMap::new(),
            names: Vec::new(),
            skills: Vec::new(),
            call_timeout: Duration::ZERO,
        }
    }

    /// Every tool name, in registration order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The outside servers the skills keep connections to that are not connected now
    /// ([`crate::skills::Skill::connection`]), by skill id, in registration order.
    pub fn disconnected(&self) -> Vec<(String, String)> {
        let mut seen = Vec::new();
        let mut down = Vec::new();
        for name in &self.names {
            let Some((owner, .., skill)) = self.by_name.get(name) else {
                continue;
            };
            if seen.contains(owner) {
                continue;
            }
            seen.push(owner.clone());
            if let Some((server, false)) = skill.connection() {
                down.push((owner.clone(), server));
            }
        }
        down
    }

    /// The id of the skill that serves `tool`.
    pub fn skill_of(&self, tool: &str) -> Option<&str> {
        self.by_name.get(tool).map(|(owner, ..)| owner.as_str())
    }

    /// The skill that serves `tool`.
    fn skill(&self, tool: &str) -> Option<&Arc<dyn Skill>> {
        self.by_name.get(tool).map(|(.., skill)| skill)
    }

    /// Whether a call of `tool` cut short by a restart may be made again
    /// ([`crate::skills::Skill::resumable`]).
    pub fn resumable(&self, tool: &str) -> bool {
        self.skill(tool).is_some_and(|s| s.resumable(tool))
    }

    /// What a model is shown of `result` of `tool`
    /// ([`crate::skills::Skill::for_model`]).
    pub fn for_model(&self, tool: &str, result: Value) -> Value {
        match self.skill(tool) {
            Some(skill) => skill.for_model(tool, result),
            None => result,
        }
    }

    /// The question `result` of `tool` asks the user, if it is one
    /// ([`crate::skills::Skill::question`]).
    pub fn question(&self, tool: &str, result: &Value) -> Option<Question> {
        self.skill(tool)?.question(tool, result)
    }

    /// Cancels what a call of `tool` started elsewhere (`started`: its journal record, or
    /// its question's arguments; [`crate::skills::Skill::cancel`]), within
    /// `skills.timeout_ms`. `None`: no such tool.
    pub async fn cancel(&self, tool: &str, started: &Value) -> Option<Result<(), SkillError>> {
        let skill = self.skill(tool)?;
        let timeout = self.call_timeout;
        Some(
            tokio::time::timeout(timeout, skill.cancel(tool, started))
                .await
                .unwrap_or_else(|_| {
                    Err(SkillError::Unavailable(format!(
                        "{tool}: not canceled within {} ms (skills.timeout_ms)",
                        timeout.as_millis()
                    )))
                }),
        )
    }

    /// The spec of a tool (restricted to `skill` when given).
    pub fn spec(&self, tool: &str, skill: Option<&str>) -> Option<&ToolSpec> {
        self.by_name
            .get(tool)
            .filter(|(owner, ..)| skill.is_none_or(|s| s == owner))
            .map(|(_, spec, ..)| spec)
    }

    /// Every skill's health, by skill id in registration order, asked through its actor
    /// (so a stopped actor counts as down) and bounded by `timeout`.
    /// Each with how long it took.
    pub async fn health(&self, timeout: Duration) -> Vec<(String, Result<(), String>, Duration)> {
        let checks = self.skills.iter().map(|(id, addr)| async move {
            let started = Instant::now();
            let check = addr.send(CheckHealth { timeout });
            let result = match tokio::time::timeout(timeout, check).await {
                Ok(Ok(result)) => result,
                Ok(Err(e)) => Err(format!("skill actor unreachable: {e}")),
                Err(_) => Err(timed_out(timeout)),
            };
            (id.clone(), result, started.elapsed())
        });
        futures_util::future::join_all(checks).await
    }

    /// Calls a tool through its skill's actor. `None`: no such tool (in that skill).
    pub async fn call(
        &self,
        tool: &str,
        skill: Option<&str>,
        arguments: Value,
        caller: Caller,
    ) -> Option<Result<Value, SkillError>> {
        let (owner, _, addr, _) = self.by_name.get(tool)?;
        if skill.is_some_and(|s| s != owner) {
            return None;
        }
        let span = trace::tool(owner, tool);
        // Held while this waits: dropped with it, it tells the actor to drop the call.
        let (_waiting, abandoned) = tokio::sync::oneshot::channel();
        let invoke = Invoke {
            tool: tool.to_owned(),
            arguments,
            caller,
            span: span.clone(),
            abandoned,
        };
        let result = match addr.send(invoke).instrument(span.clone()).await {
            Ok(result) => result,
            Err(e) => Err(SkillError::Unavailable(format!(
                "skill {owner} unreachable: {e}"
            ))),
        };
        if !span.is_disabled() {
            let outcome = outcome(&result);
            span.record("a2a.tool.outcome", outcome);
            if result.is_err() {
                trace::failed(&span, outcome);
            }
        }
        Some(result)
    }
}

/// A call's outcome as metrics and spans name it: `ok` or the error's kind.
fn outcome(result: &Result<Value, SkillError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(SkillError::InvalidArguments(_)) => "invalid_arguments",
        Err(SkillError::NotFound(_)) => "not_found",
        Err(SkillError::Conflict(_)) => "conflict",
        Err(SkillError::Blocked { .. }) => "blocked",
        Err(SkillError::Failed(_)) => "failed",
        Err(SkillError::Unavailable(_)) => "unavailable",
        Err(SkillError::Fenced(_)) => "fenced",
        Err(SkillError::Remote(_)) => "remote",
        Err(SkillError::ToolServer(_)) => "tool_server",
    }
}

fn timed_out(timeout: Duration) -> String {
    format!(
        "no answer within {} ms (health.timeout_ms)",
        timeout.as_millis()
    )
}

impl std::fmt::Debug for Tools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tools").field("names", &self.names).finish()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schemas() -> HashMap<String, jsonschema::Validator> {
        let schema = json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "filter": {"type": "object", "properties": {"layer": {"enum": ["user", "team"]}},
                           "required": ["layer"], "additionalProperties": false},
                "limit": {"type": "integer", "minimum": 1}
            },
            "required": ["query"],
            "additionalProperties": false
        });
        HashMap::from([(
            "search".to_owned(),
            jsonschema::validator_for(&schema).unwrap(),
        )])
    }

    fn problem(arguments: Value) -> String {
        match check_arguments(&schemas(), "search", &arguments) {
            Err(SkillError::InvalidArguments(text)) => text,
            other => panic!("expected invalid arguments, got {other:?}"),
        }
    }

    #[test]
    fn results_outside_the_output_schema_fail_the_call() {
        let schema = json!({"type": "object", "required": ["sum"], "properties": {"sum": {"type": "number"}}});
        let outputs = HashMap::from([(
            "add".to_owned(),
            jsonschema::validator_for(&schema).unwrap(),
        )]);
        assert_eq!(
            check_output(&outputs, "add", json!({"sum": 3})),
            Ok(json!({"sum": 3}))
        );
        let wrong = check_output(&outputs, "add", json!({"sum": "three"}));
        assert!(
            matches!(&wrong, Err(SkillError::Failed(text)) if text.contains("/sum")),
            "{wrong:?}"
        );
        assert!(matches!(
            check_output(&outputs, "add", json!({})),
            Err(SkillError::Failed(_))
        ));
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(problem(json!({})), "query: is required");
        assert!(problem(json!({"query": 3})).starts_with("query: "));
        assert!(problem(json!({"query": "x", "limit": 0})).starts_with("limit: "));
        assert_eq!(
            problem(json!({"query": "x", "filter": {}})),
            "filter.layer: is required"
        );
        assert!(
            problem(json!({"query": "x", "filter": {"layer": "org"}}))
                .starts_with("filter.layer: ")
        );
        assert!(problem(json!({"query": "x", "extra": true})).contains("extra"));
        assert!(check_arguments(&schemas(), "search", &json!({"query": "x", "limit": 5})).is_ok());
        assert!(matches!(
            check_arguments(&schemas(), "nope", &json!({})),
            Err(SkillError::InvalidArguments(_))
        ));
    }
}
