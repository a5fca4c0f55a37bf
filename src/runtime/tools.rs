//! The tools of every skill, each reachable by name through its skill's actor
//! (`skill_actor.rs`): listed at start, listed again when a skill's tools change, and
//! called with the skill's bounds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use arc_swap::ArcSwap;
use serde_json::Value;
use tokio::sync::Semaphore;
use tracing::Instrument;

use super::skill_actor::{
    CheckHealth, Invoke, Schemas, SkillActor, SkillStartError, outcome, timed_out,
};
use crate::config::SkillSettings;
use crate::domain::TenantId;
use crate::skills::{Caller, Question, Skill, SkillError, SkillRegistry, ToolSpec};
use crate::telemetry::trace;

/// A tool as the catalogue holds it.
struct Entry {
    /// The id of the skill that serves it.
    owner: String,
    spec: ToolSpec,
    schemas: Arc<Schemas>,
    /// Its skill's actor, which runs its calls.
    actor: Addr<SkillActor>,
    /// Its skill, for what it says of its calls (`Skill::resumable`, `Skill::question`,
    /// `Skill::cancel`, `Skill::for_model`).
    skill: Arc<dyn Skill>,
}

/// The tools as they stand: replaced whole when a skill's tools change (an MCP server's
/// list), so a reader sees one list or the next, never half of each.
struct Catalog {
    by_name: HashMap<String, Arc<Entry>>,
    /// Every tool name, in registration order.
    names: Vec<String>,
    /// Counts the changes since start (0: the tools listed at start).
    generation: u64,
}

/// A registered skill and its actor.
struct Registered {
    id: String,
    actor: Addr<SkillActor>,
    skill: Arc<dyn Skill>,
}

/// Every tool, reachable by name through its skill's actor.
///
/// The tools are listed at start (a schema that does not compile, or a name two skills
/// offer, stops the start) and again whenever a skill says its tools changed
/// ([`Skill::tool_changes`]): then a tool whose schema does not compile, or whose name
/// another skill's tool has, is left out with a warning, and the rest replace the list
/// at once ([`Tools::generation`] counts the lists).
pub struct Tools {
    catalog: ArcSwap<Catalog>,
    /// In registration order.
    skills: Vec<Registered>,
    /// `skills.timeout_ms`: how long a call may take (the skill actor's bound), and a
    /// cancel.
    call_timeout: Duration,
    /// Held while the catalogue is made anew, so two changes never race.
    relisting: std::sync::Mutex<()>,
}

impl Tools {
    /// Starts one actor per skill of `registry`, spread over `arbiters`, and lists their
    /// tools.
    pub fn start(
        registry: &SkillRegistry,
        settings: &SkillSettings,
        arbiters: &[ArbiterHandle],
    ) -> Result<Tools, SkillStartError> {
        let mut skills = Vec::new();
        for (i, skill) in registry.skills().iter().enumerate() {
            let actor = SkillActor {
                skill: skill.clone(),
                permits: Arc::new(Semaphore::new(settings.max_concurrency)),
                timeout: Duration::from_millis(settings.timeout_ms),
            };
            let actor = match arbiters.get(i % arbiters.len().max(1)) {
                Some(arbiter) => SkillActor::start_in_arbiter(arbiter, |_| actor),
                None => actor.start(),
            };
            skills.push(Registered {
                id: skill.info().id.clone(),
                actor,
                skill: skill.clone(),
            });
        }
        let catalog = catalog(&skills, 0, Strict::Yes)?;
        Ok(Tools {
            catalog: ArcSwap::from_pointee(catalog),
            skills,
            call_timeout: Duration::from_millis(settings.timeout_ms),
            relisting: std::sync::Mutex::new(()),
        })
    }

    /// No tools at all.
    pub fn none() -> Tools {
        Tools {
            catalog: ArcSwap::from_pointee(Catalog {
                by_name: HashMap::new(),
                names: Vec::new(),
                generation: 0,
            }),
            skills: Vec::new(),
            call_timeout: Duration::ZERO,
            relisting: std::sync::Mutex::new(()),
        }
    }

    /// Lists the tools again whenever a skill says its tools changed, for as long as
    /// `tools` lives.
    pub fn follow_changes(tools: &Arc<Tools>) {
        for registered in &tools.skills {
            let Some(mut changes) = registered.skill.tool_changes() else {
                continue;
            };
            let tools = Arc::downgrade(tools);
            let skill = registered.id.clone();
            tokio::spawn(async move {
                while changes.changed().await.is_ok() {
                    let Some(tools) = tools.upgrade() else { return };
                    tools.relist(&skill);
                }
            });
        }
    }

    /// Lists every skill's tools anew (`changed` said its tools changed).
    fn relist(&self, changed: &str) {
        let _relisting = self
            .relisting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = self.catalog.load();
        let next = match catalog(&self.skills, before.generation + 1, Strict::No) {
            Ok(next) => next,
            // Not strict: every problem left a tool out instead.
            Err(e) => {
                tracing::error!(skill = %changed, error = %e, "tools not listed anew");
                return;
            }
        };
        let added: Vec<&str> = next
            .names
            .iter()
            .filter(|n| !before.by_name.contains_key(*n))
            .map(String::as_str)
            .collect();
        let removed: Vec<&str> = before
            .names
            .iter()
            .filter(|n| !next.by_name.contains_key(*n))
            .map(String::as_str)
            .collect();
        tracing::info!(skill = %changed, generation = next.generation, tools = next.names.len(), ?added, ?removed, "the tools changed");
        self.catalog.store(Arc::new(next));
    }

    /// Which list of tools is current: 0 for the one listed at start, one more for each
    /// change since.
    pub fn generation(&self) -> u64 {
        self.catalog.load().generation
    }

    /// Every tool name, in registration order.
    pub fn names(&self) -> Vec<String> {
        self.catalog.load().names.clone()
    }

    /// Every tool's spec, in registration order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let catalog = self.catalog.load();
        catalog
            .names
            .iter()
            .filter_map(|name| catalog.by_name.get(name))
            .map(|entry| entry.spec.clone())
            .collect()
    }

    /// Whether some skill does not admit `tenant` ([`crate::skills::Skill::admits`]):
    /// then [`Tools::specs_for`] leaves tools out for it.
    pub fn restricts(&self, tenant: &TenantId) -> bool {
        self.skills.iter().any(|r| !r.skill.admits(tenant))
    }

    /// Every tool's spec that `tenant` may call, in registration order.
    pub fn specs_for(&self, tenant: &TenantId) -> Vec<ToolSpec> {
        let catalog = self.catalog.load();
        catalog
            .names
            .iter()
            .filter_map(|name| catalog.by_name.get(name))
            .filter(|entry| entry.skill.admits(tenant))
            .map(|entry| entry.spec.clone())
            .collect()
    }

    /// The outside servers the skills keep connections to that are not connected now
    /// ([`crate::skills::Skill::connection`]), by skill id, in registration order.
    pub fn disconnected(&self) -> Vec<(String, String)> {
        self.skills
            .iter()
            .filter_map(|r| match r.skill.connection() {
                Some((server, false)) => Some((r.id.clone(), server)),
                _ => None,
            })
            .collect()
    }

    /// The tool named `tool` (served by `skill` when given).
    fn entry(&self, tool: &str, skill: Option<&str>) -> Option<Arc<Entry>> {
        self.catalog
            .load()
            .by_name
            .get(tool)
            .filter(|entry| skill.is_none_or(|s| s == entry.owner))
            .cloned()
    }

    /// The id of the skill that serves `tool`.
    pub fn skill_of(&self, tool: &str) -> Option<String> {
        self.entry(tool, None).map(|entry| entry.owner.clone())
    }

    /// Whether a call of `tool` cut short by a restart may be made again
    /// ([`crate::skills::Skill::resumable`]).
    pub fn resumable(&self, tool: &str) -> bool {
        self.entry(tool, None)
            .is_some_and(|entry| entry.skill.resumable(tool))
    }

    /// What a model is shown of `result` of `tool`
    /// ([`crate::skills::Skill::for_model`]).
    pub fn for_model(&self, tool: &str, result: Value) -> Value {
        match self.entry(tool, None) {
            Some(entry) => entry.skill.for_model(tool, result),
            None => result,
        }
    }

    /// The parts of a direct call's artifact for `result` of `tool`
    /// ([`crate::skills::Skill::parts`]): the skill's, or one JSON data part.
    pub fn parts(&self, tool: &str, result: Value) -> Vec<crate::domain::Part> {
        let parts = self
            .entry(tool, None)
            .and_then(|entry| entry.skill.parts(tool, &result));
        parts.unwrap_or_else(|| {
            vec![crate::domain::Part {
                media_type: Some("application/json".into()),
                ..crate::domain::Part::data(result)
            }]
        })
    }

    /// The question `result` of `tool` asks the user, if it is one
    /// ([`crate::skills::Skill::question`]).
    pub fn question(&self, tool: &str, result: &Value) -> Option<Question> {
        self.entry(tool, None)?.skill.question(tool, result)
    }

    /// Cancels what a call of `tool` started elsewhere (`started`: its journal record, or
    /// its question's arguments; [`crate::skills::Skill::cancel`]), within
    /// `skills.timeout_ms`. `None`: no such tool.
    pub async fn cancel(&self, tool: &str, started: &Value) -> Option<Result<(), SkillError>> {
        let entry = self.entry(tool, None)?;
        let timeout = self.call_timeout;
        Some(
            tokio::time::timeout(timeout, entry.skill.cancel(tool, started))
                .await
                .unwrap_or_else(|_| {
                    Err(SkillError::Unavailable(format!(
                        "{tool}: not canceled within {} ms (skills.timeout_ms)",
                        timeout.as_millis()
                    )))
                }),
        )
    }

    /// Whether there is a tool `tool` (served by `skill` when given).
    pub fn has(&self, tool: &str, skill: Option<&str>) -> bool {
        self.entry(tool, skill).is_some()
    }

    /// Every skill's health, by skill id in registration order, asked through its actor
    /// (so a stopped actor counts as down) and bounded by `timeout`.
    /// Each with how long it took.
    pub async fn health(&self, timeout: Duration) -> Vec<(String, Result<(), String>, Duration)> {
        let checks = self.skills.iter().map(|r| async move {
            let started = Instant::now();
            let check = r.actor.send(CheckHealth { timeout });
            let result = match tokio::time::timeout(timeout, check).await {
                Ok(Ok(result)) => result,
                Ok(Err(e)) => Err(format!("skill actor unreachable: {e}")),
                Err(_) => Err(timed_out(timeout)),
            };
            (r.id.clone(), result, started.elapsed())
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
        let entry = self.entry(tool, skill)?;
        let owner = entry.owner.as_str();
        let span = trace::tool(owner, tool);
        // Held while this waits: dropped with it, it tells the actor to drop the call.
        let (_waiting, abandoned) = tokio::sync::oneshot::channel();
        let invoke = Invoke {
            tool: tool.to_owned(),
            schemas: entry.schemas.clone(),
            arguments,
            caller,
            span: span.clone(),
            abandoned,
        };
        let result = match entry.actor.send(invoke).instrument(span.clone()).await {
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

/// Whether a problem with a tool stops the listing (at start) or leaves the tool out
/// (a change at run time, which must not take the other tools away).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Strict {
    Yes,
    No,
}

/// The tools of `skills`, compiled: a schema that does not compile or a name two skills
/// offer is an error when `strict`, else that tool is left out with a warning.
fn catalog(
    skills: &[Registered],
    generation: u64,
    strict: Strict,
) -> Result<Catalog, SkillStartError> {
    let mut by_name: HashMap<String, Arc<Entry>> = HashMap::new();
    let mut names = Vec::new();
    for registered in skills {
        for tool in registered.skill.tools() {
            let problem = match (Schemas::compile(&tool), by_name.get(&tool.name)) {
                (_, Some(first)) => SkillStartError::DuplicateTool {
                    tool: tool.name.clone(),
                    first: first.owner.clone(),
                    second: registered.id.clone(),
                },
                (Err(reason), None) => SkillStartError::InvalidSchema {
                    skill: registered.id.clone(),
                    tool: tool.name.clone(),
                    reason,
                },
                (Ok(schemas), None) => {
                    names.push(tool.name.clone());
                    by_name.insert(
                        tool.name.clone(),
                        Arc::new(Entry {
                            owner: registered.id.clone(),
                            spec: tool,
                            schemas: Arc::new(schemas),
                            actor: registered.actor.clone(),
                            skill: registered.skill.clone(),
                        }),
                    );
                    continue;
                }
            };
            if strict == Strict::Yes {
                return Err(problem);
            }
            tracing::warn!(skill = %registered.id, error = %problem, "tool left out");
        }
    }
    Ok(Catalog {
        by_name,
        names,
        generation,
    })
}

impl std::fmt::Debug for Tools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let catalog = self.catalog.load();
        f.debug_struct("Tools")
            .field("names", &catalog.names)
            .field("generation", &catalog.generation)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A skill whose tools are whatever `tools` holds, announcing each change.
    struct Changing {
        info: crate::skills::SkillInfo,
        tools: std::sync::Mutex<Vec<ToolSpec>>,
        changed: tokio::sync::watch::Sender<()>,
    }

    impl Changing {
        fn new(id: &str, tools: &[(&str, Value)]) -> Arc<Changing> {
            let changing = Changing {
                info: crate::skills::SkillInfo::new(id, id, id),
                tools: std::sync::Mutex::new(Vec::new()),
                changed: tokio::sync::watch::channel(()).0,
            };
            changing.set(tools);
            Arc::new(changing)
        }

        fn set(&self, tools: &[(&str, Value)]) {
            *self.tools.lock().unwrap() = tools
                .iter()
                .map(|(name, input_schema)| ToolSpec {
                    name: (*name).into(),
                    description: String::new(),
                    input_schema: input_schema.clone(),
                    output_schema: json!({}),
                })
                .collect();
            self.changed.send_replace(());
        }
    }

    #[async_trait::async_trait]
    impl Skill for Changing {
        fn info(&self) -> &crate::skills::SkillInfo {
            &self.info
        }
        fn tools(&self) -> Vec<ToolSpec> {
            self.tools.lock().unwrap().clone()
        }
        fn tool_changes(&self) -> Option<tokio::sync::watch::Receiver<()>> {
            Some(self.changed.subscribe())
        }
        async fn invoke(&self, tool: &str, _: Value, _: &Caller) -> Result<Value, SkillError> {
            Ok(json!({"tool": tool}))
        }
    }

    #[actix_web::test]
    async fn a_change_lists_the_tools_anew_leaving_out_what_it_cannot_take() {
        let object = json!({"type": "object"});
        let first = Changing::new("first", &[("a", object.clone())]);
        let second = Changing::new("second", &[("b", object.clone())]);
        let mut registry = SkillRegistry::default();
        registry.register(first.clone());
        registry.register(second.clone());
        let settings = SkillSettings::default();
        let tools = Tools::start(&registry, &settings, &[]).unwrap();
        assert_eq!(
            (tools.names(), tools.generation()),
            (vec!["a".into(), "b".into()], 0)
        );

        // At start, a name two skills offer stops it; so does a schema that does not
        // compile.
        second.set(&[("a", object.clone())]);
        let e = Tools::start(&registry, &settings, &[]).unwrap_err();
        assert!(matches!(e, SkillStartError::DuplicateTool { .. }), "{e}");
        second.set(&[("b", json!({"type": 7}))]);
        let e = Tools::start(&registry, &settings, &[]).unwrap_err();
        assert!(matches!(e, SkillStartError::InvalidSchema { .. }), "{e}");

        // At run time the tool is left out and the rest are listed.
        second.set(&[
            ("a", object.clone()),
            ("c", object.clone()),
            ("d", json!({"type": 7})),
        ]);
        tools.relist("second");
        assert_eq!(
            (tools.names(), tools.generation()),
            (vec!["a".into(), "c".into()], 1)
        );
        assert_eq!(tools.skill_of("a").as_deref(), Some("first"));
        assert!(tools.has("c", Some("second")) && !tools.has("c", Some("first")));
        let caller = Caller {
            tenant: crate::domain::TenantId::parse("t".to_owned()).unwrap(),
            context_id: crate::domain::ContextId::generate(),
            fence_token: None,
            call: None,
            progress: None,
        };
        let called = tools.call("c", None, json!({}), caller.clone()).await;
        assert_eq!(called, Some(Ok(json!({"tool": "c"}))));
        assert_eq!(tools.call("b", None, json!({}), caller).await, None);

        // Followed: a skill's announcement lists them anew by itself.
        let tools = Arc::new(tools);
        Tools::follow_changes(&tools);
        second.set(&[("e", object)]);
        let deadline = Instant::now() + Duration::from_secs(5);
        while tools.names() != ["a", "e"] {
            assert!(Instant::now() < deadline, "{:?}", tools.names());
            tokio::task::yield_now().await;
        }
        assert_eq!(tools.generation(), 2);
    }
}
