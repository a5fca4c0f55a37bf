//! `SkillActor`s: every registered skill runs behind one, and every tool call — a direct
//! call from a client or a model's function call — goes through it.
//!
//! The actor checks the arguments against the tool's JSON Schema before the engine sees
//! them (the error names the field), bounds how many calls of the skill run at once
//! (`skills.max_concurrency`) and how long one may take (`skills.timeout_ms`), and records
//! calls, latency and errors per skill and tool. Engines do their blocking work (git,
//! SQLite) on the blocking pool, never on an arbiter thread.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use serde_json::Value;
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::skills::{Caller, Skill, SkillError, ToolSpec};
use crate::telemetry::{SKILL_CALLS, SKILL_ERRORS, SKILL_LATENCY_MS};

/// One tool call.
#[derive(Message)]
#[rtype(result = "Result<Value, SkillError>")]
pub struct Invoke {
    pub tool: String,
    /// The tool's schemas as the catalogue held them when the call was made.
    pub schemas: Arc<Schemas>,
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

/// A tool's schemas, compiled: its arguments are checked against `input` before the
/// skill sees them, its results against `output` before the caller does.
pub struct Schemas {
    input: jsonschema::Validator,
    output: jsonschema::Validator,
}

impl Schemas {
    /// Compiles the schemas of `tool`; the error says which one is invalid, and why.
    pub(super) fn compile(tool: &ToolSpec) -> Result<Schemas, String> {
        let compile = |schema: &Value, which: &str| {
            jsonschema::validator_for(schema).map_err(|e| format!("{which} schema: {e}"))
        };
        Ok(Schemas {
            input: compile(&tool.input_schema, "input")?,
            output: compile(&tool.output_schema, "output")?,
        })
    }
}

/// The actor in front of one skill.
pub struct SkillActor {
    pub(super) skill: Arc<dyn Skill>,
    pub(super) permits: Arc<Semaphore>,
    pub(super) timeout: Duration,
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
        let permits = self.permits.clone();
        let timeout = self.timeout;
        let Invoke {
            tool,
            schemas,
            arguments,
            caller,
            span,
            abandoned,
        } = call;
        Box::pin(async move {
            let started = Instant::now();
            let skill_id = skill.info().id.clone();
            let result = match check_arguments(&schemas.input, &arguments) {
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
                            Ok(Ok(value)) => check_output(&schemas.output, &tool, value),
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
fn check_arguments(schema: &jsonschema::Validator, arguments: &Value) -> Result<(), SkillError> {
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
    schema: &jsonschema::Validator,
    tool: &str,
    value: Value,
) -> Result<Value, SkillError> {
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

/// A call's outcome as metrics and spans name it: `ok` or the error's kind.
pub(super) fn outcome(result: &Result<Value, SkillError>) -> &'static str {
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

pub(super) fn timed_out(timeout: Duration) -> String {
    format!(
        "no answer within {} ms (health.timeout_ms)",
        timeout.as_millis()
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> jsonschema::Validator {
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
        jsonschema::validator_for(&schema).unwrap()
    }

    fn problem(arguments: Value) -> String {
        match check_arguments(&schema(), &arguments) {
            Err(SkillError::InvalidArguments(text)) => text,
            other => panic!("expected invalid arguments, got {other:?}"),
        }
    }

    #[test]
    fn results_outside_the_output_schema_fail_the_call() {
        let schema = json!({"type": "object", "required": ["sum"], "properties": {"sum": {"type": "number"}}});
        let outputs = jsonschema::validator_for(&schema).unwrap();
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
        assert!(check_arguments(&schema(), &json!({"query": "x", "limit": 5})).is_ok());
    }
}
