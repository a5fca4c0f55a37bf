//! The knowledge skill: the `knowledge_*` tools over a [`KnowledgeEngine`].
//!
//! Arguments are checked against the tool's own schema (unknown keys and missing required
//! keys are refused), then each value is read with serde, so every refusal names its
//! field. The engine blocks, so every call runs on tokio's blocking pool; an actix
//! arbiter thread never waits for git.

use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::engine::{KnowledgeEngine, ProposeInput, StatusChange};
use super::error::KnowledgeError;
use super::item::Item;
use super::paths::{ItemId, ItemPath};
use super::query::{CheckInput, QueryInput};
use super::repo::CommitInfo;
use super::schema;
use crate::skills::governance::{RuleSpec, Scope};
use crate::skills::{Caller, Skill, SkillError, SkillInfo, ToolSpec};
use crate::store::memories::HoldCheck;

/// Characters of the body shown as a query result's summary.
const SUMMARY_CHARS: usize = 200;

/// The `knowledge` skill.
pub struct KnowledgeSkill {
    engine: Arc<KnowledgeEngine>,
    info: SkillInfo,
    tools: Vec<ToolSpec>,
    /// Cluster mode: the check of a calling turn's hold on its thread, made before each
    /// write (`HoldCheck`).
    hold_check: Option<Arc<HoldCheck>>,
}

impl KnowledgeSkill {
    /// The skill over `engine` (which may also serve as the governance engine's policy
    /// source).
    pub fn new(engine: Arc<KnowledgeEngine>) -> Self {
        let info = SkillInfo::new(
            "knowledge",
            "Knowledge",
            "Architecture decisions, policies, patterns and specs per layer (company, org, \
             team, project), versioned in git with an enforced lifecycle; checks work against \
             accepted constraints.",
        )
        .with_tags(&["knowledge", "adr", "policy", "governance"])
        .with_examples(&[
            "Which accepted ADRs mention PostgreSQL?",
            "Propose a team policy forbidding the openssl dependency",
            "Check this diff against our accepted policies",
        ]);
        Self {
            engine,
            info,
            tools: schema::tools(),
            hold_check: None,
        }
    }

    /// In cluster mode: writes made for a turn first check its hold on its thread with
    /// `check`, and a turn another node has taken over writes nothing.
    pub fn with_hold_check(mut self, check: Option<Arc<HoldCheck>>) -> Self {
        self.hold_check = check;
        self
    }

    /// Before a write: refuses it ([`SkillError::Fenced`]) when the calling turn's node no
    /// longer holds its thread.
    async fn check_hold(&self, caller: &Caller) -> Result<(), SkillError> {
        let (Some(check), Some(hold)) = (&self.hold_check, caller.hold()) else {
            return Ok(());
        };
        Ok(check.check(&caller.tenant, hold).await?)
    }

    /// Runs `op` on the blocking pool.
    async fn run<T, F>(&self, op: F) -> Result<T, SkillError>
    where
        T: Send + 'static,
        F: FnOnce(&KnowledgeEngine) -> Result<T, KnowledgeError> + Send + 'static,
    {
        let engine = Arc::clone(&self.engine);
        let joined = tokio::task::spawn_blocking(move || op(&engine)).await;
        match joined {
            Ok(result) => result.map_err(SkillError::from),
            Err(e) => {
                tracing::error!(error = %e, "knowledge operation panicked or was cancelled");
                Err(SkillError::Failed(
                    "the knowledge operation did not complete".into(),
                ))
            }
        }
    }
}

#[async_trait]
impl Skill for KnowledgeSkill {
    fn info(&self) -> &SkillInfo {
        &self.info
    }

    fn tools(&self) -> Vec<ToolSpec> {
        self.tools.clone()
    }

    async fn invoke(
        &self,
        tool: &str,
        arguments: Value,
        caller: &Caller,
    ) -> Result<Value, SkillError> {
        let spec = self
            .tools
            .iter()
            .find(|t| t.name == tool)
            .ok_or_else(|| SkillError::NotFound(format!("tool {tool}")))?;
        let mut args = Args::parse(arguments, &spec.input_schema)?;
        let tenant = caller.tenant.as_str().to_owned();
        // The caller is recorded as the author; the tenant is who is known to call.
        let author = tenant.clone();
        match tool {
            schema::QUERY => {
                let input = QueryInput {
                    text: args.take("query")?,
                    item_type: args.take("type")?,
                    layer: args.take("layer")?,
                    status: args.take("status")?,
                    tags: args.take("tags")?.unwrap_or_default(),
                    limit: args.take("limit")?,
                };
                if input.limit == Some(0) {
                    return Err(SkillError::InvalidArguments(
                        "`limit`: must be at least 1".into(),
                    ));
                }
                let result = self.run(move |e| e.query(&tenant, &input)).await?;
                let items: Vec<Value> = result.items.iter().map(summary_json).collect();
                Ok(json!({"items": items, "totalCount": result.total}))
            }
            schema::SHOW => {
                let id = item_id(&mut args, "id")?;
                let constraints = args.take("includeConstraints")?.unwrap_or(true);
                let history = args.take("includeHistory")?.unwrap_or(false);
                let shown = self.run(move |e| e.show(&tenant, &id, history)).await?;
                let mut out = json!({"item": item_json(&shown.item, constraints)});
                if let Some(history) = shown.history {
                    out["history"] = history.iter().map(commit_json).collect();
                }
                Ok(out)
            }
            schema::PROPOSE => {
                let path: String = args.require("path")?;
                let input = ProposeInput {
                    layer: args.require("layer")?,
                    path: ItemPath::parse(&path)
                        .map_err(|e| SkillError::InvalidArguments(format!("`path`: {e}")))?,
                    item_type: args.require("type")?,
                    title: args.require("title")?,
                    body: args.require("body")?,
                    tags: args.take("tags")?.unwrap_or_default(),
                    constraints: args
                        .take::<Vec<RuleSpec>>("constraints")?
                        .unwrap_or_default(),
                    mode: args.take("mode")?,
                    status: args.take("status")?,
                    scope: Scope {
                        company_id: args.take("companyId")?,
                        org_id: args.take("orgId")?,
                        team_id: args.take("teamId")?,
                        project_id: args.take("projectId")?,
                    },
                };
                self.check_hold(caller).await?;
                let item = self
                    .run(move |e| e.propose(&tenant, &author, input))
                    .await?;
                Ok(json!({"item": item_json(&item, true)}))
            }
            schema::UPDATE_STATUS => {
                let id = item_id(&mut args, "id")?;
                let superseded_by = match args.take::<String>("supersededBy")? {
                    Some(raw) => Some(ItemId::parse(&raw).map_err(|e| {
                        SkillError::InvalidArguments(format!("`supersededBy`: {e}"))
                    })?),
                    None => None,
                };
                let change = StatusChange {
                    status: args.require("status")?,
                    reason: args.take("reason")?,
                    superseded_by,
                };
                self.check_hold(caller).await?;
                let updated = self
                    .run(move |e| e.update_status(&tenant, &author, &id, change))
                    .await?;
                Ok(json!({
                    "item": item_json(&updated.item, true),
                    "previousStatus": updated.previous,
                }))
            }
            schema::DELETE => {
                let id = item_id(&mut args, "id")?;
                self.check_hold(caller).await?;
                let deleted = self.run(move |e| e.delete(&tenant, &author, &id)).await?;
                Ok(json!({
                    "id": deleted.id.to_string(),
                    "deleted": true,
                    "commit": deleted.commit.id,
                }))
            }
            schema::CHECK => {
                let input = CheckInput {
                    content: args.take("content")?,
                    path: args.take("path")?,
                    dependencies: args.take("dependencies")?.unwrap_or_default(),
                    tools: args.take("tools")?.unwrap_or_default(),
                    layers: args.take("layers")?,
                };
                let report = self.run(move |e| e.check(&tenant, &input)).await?;
                serde_json::to_value(report).map_err(|e| {
                    tracing::error!(error = %e, "could not encode a knowledge check report");
                    SkillError::Failed("could not encode the report".into())
                })
            }
            other => Err(SkillError::NotFound(format!("tool {other}"))),
        }
    }

    /// HEAD is readable: the repository is there and intact enough to serve.
    async fn health(&self) -> Result<(), String> {
        let engine = Arc::clone(&self.engine);
        match tokio::task::spawn_blocking(move || engine.repository().head()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("knowledge repository HEAD unreadable: {e}")),
            Err(e) => Err(format!("knowledge health check did not complete: {e}")),
        }
    }
}

/// A tool's arguments, checked against its schema's keys.
struct Args {
    map: Map<String, Value>,
}

impl Args {
    /// Refuses a non-object, keys the schema does not list, and missing required keys
    /// (`null` counts as missing).
    fn parse(arguments: Value, schema: &Value) -> Result<Args, SkillError> {
        let map = match arguments {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            _ => {
                return Err(SkillError::InvalidArguments(
                    "arguments must be a JSON object".into(),
                ));
            }
        };
        let known = schema["properties"].as_object();
        if let Some(key) = map
            .keys()
            .find(|k| known.is_none_or(|props| !props.contains_key(*k)))
        {
            let expected: Vec<&str> = known
                .map(|p| p.keys().map(String::as_str).collect())
                .unwrap_or_default();
            return Err(SkillError::InvalidArguments(format!(
                "unknown field `{key}`, expected one of: {}",
                expected.join(", ")
            )));
        }
        let required = schema["required"].as_array().into_iter().flatten();
        if let Some(key) = required
            .filter_map(Value::as_str)
            .find(|k| map.get(*k).is_none_or(Value::is_null))
        {
            return Err(SkillError::InvalidArguments(format!(
                "missing field `{key}`"
            )));
        }
        Ok(Args { map })
    }

    /// The value of `key` if given (and not `null`).
    fn take<T: DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>, SkillError> {
        match self.map.remove(key) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => serde_json::from_value(value)
                .map(Some)
                .map_err(|e| SkillError::InvalidArguments(format!("`{key}`: {e}"))),
        }
    }

    /// The value of a required `key` (presence was checked by [`Args::parse`]).
    fn require<T: DeserializeOwned>(&mut self, key: &str) -> Result<T, SkillError> {
        self.take(key)?
            .ok_or_else(|| SkillError::InvalidArguments(format!("missing field `{key}`")))
    }
}

fn item_id(args: &mut Args, key: &str) -> Result<ItemId, SkillError> {
    let raw: String = args.require(key)?;
    ItemId::parse(&raw).map_err(|e| SkillError::InvalidArguments(format!("`{key}`: {e}")))
}

/// The fields every view of an item starts from: what identifies and classifies it.
fn identity_json(item: &Item) -> Value {
    let f = &item.front;
    json!({
        "id": item.id.to_string(),
        "layer": item.id.layer,
        "path": item.id.path.as_str(),
        "type": f.item_type,
        "status": f.status,
        "title": f.title,
        "tags": f.tags,
        "updatedAt": f.updated_at.to_rfc3339(),
    })
}

/// An item as `knowledge_show`, `knowledge_propose` and `knowledge_update_status` return it.
fn item_json(item: &Item, include_constraints: bool) -> Value {
    let f = &item.front;
    let mut out = identity_json(item);
    out["body"] = json!(item.body);
    out["author"] = json!(f.author);
    out["createdAt"] = json!(f.created_at.to_rfc3339());
    out["commit"] = json!(item.commit);
    if let Some(mode) = f.mode {
        out["mode"] = json!(mode);
    }
    if let Some(successor) = &f.superseded_by {
        out["supersededBy"] = json!(successor);
    }
    if include_constraints {
        out["constraints"] = json!(f.constraints);
    }
    out
}

/// An item as a query result: no body, a short summary instead.
fn summary_json(item: &Item) -> Value {
    let f = &item.front;
    let body = item.body.trim();
    let mut summary: String = body.chars().take(SUMMARY_CHARS).collect();
    if summary.len() < body.len() {
        summary.push('…');
    }
    let mut out = identity_json(item);
    out["summary"] = json!(summary);
    out["hasConstraints"] = json!(!f.constraints.is_empty());
    out
}

fn commit_json(commit: &CommitInfo) -> Value {
    json!({
        "commit": commit.id,
        "author": commit.author,
        "time": commit.time.to_rfc3339(),
        "message": commit.message,
    })
}

#[cfg(test)]
#[path = "skill_tests.rs"]
mod tests;
