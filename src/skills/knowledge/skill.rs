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
mod tests {
    //! Specifications of the `knowledge_*` tools through `Skill::invoke`: complete schemas,
    //! the happy path end to end, and a refusal naming the field for every kind of bad input.

    use serde_json::json;

    use super::*;
    use crate::config::KnowledgeSettings;
    use crate::domain::{ContextId, TenantId};
    use crate::skills::governance::{
        EvalContext, Operator, Report, Scope, Severity, Target, Validator, Violation,
    };

    fn skill_with(validator: Option<Arc<dyn Validator>>) -> (tempfile::TempDir, KnowledgeSkill) {
        let dir = tempfile::tempdir().unwrap();
        let engine =
            KnowledgeEngine::open(dir.path(), &KnowledgeSettings::default(), validator).unwrap();
        (dir, KnowledgeSkill::new(Arc::new(engine)))
    }

    fn skill() -> (tempfile::TempDir, KnowledgeSkill) {
        skill_with(None)
    }

    fn caller(tenant: &str) -> Caller {
        Caller {
            tenant: TenantId::parse(tenant).unwrap(),
            context_id: ContextId::generate(),
            fence_token: None,
            call: None,
            progress: None,
        }
    }

    async fn call(skill: &KnowledgeSkill, tool: &str, args: Value) -> Result<Value, SkillError> {
        skill.invoke(tool, args, &caller("acme")).await
    }

    fn invalid(result: Result<Value, SkillError>) -> String {
        match result {
            Err(SkillError::InvalidArguments(text)) => text,
            other => panic!("expected invalid arguments, got {other:?}"),
        }
    }

    fn adr() -> Value {
        json!({
            "layer": "project", "path": "adr/0001-use-postgres", "type": "adr",
            "title": "Use PostgreSQL", "body": "Because.", "tags": ["db"],
            "constraints": [{"id": "no-mysql", "target": "dependency", "operator": "must_not_use",
                             "value": "mysql", "severity": "block", "message": "We use PostgreSQL"}],
            "status": "proposed"
        })
    }

    #[test]
    fn every_tool_has_a_complete_closed_schema() {
        let (_dir, skill) = skill();
        let names: Vec<String> = skill.tools().into_iter().map(|t| t.name).collect();
        assert_eq!(
            names,
            [
                "knowledge_query",
                "knowledge_show",
                "knowledge_propose",
                "knowledge_update_status",
                "knowledge_delete",
                "knowledge_check"
            ]
        );
        for tool in skill.tools() {
            let s = &tool.input_schema;
            assert_eq!(s["type"], "object", "{}", tool.name);
            assert_eq!(s["additionalProperties"], false, "{}", tool.name);
            let props = s["properties"].as_object().unwrap();
            for required in s["required"].as_array().unwrap() {
                assert!(
                    props.contains_key(required.as_str().unwrap()),
                    "{}",
                    tool.name
                );
            }
            for (name, prop) in props {
                assert!(prop["type"].is_string(), "{}.{name} has no type", tool.name);
                assert!(
                    prop["description"].is_string(),
                    "{}.{name} has no description",
                    tool.name
                );
            }
            assert!(!tool.description.is_empty());
        }
        assert_eq!(skill.tools(), skill.tools(), "deterministic");
    }

    #[test]
    fn advertised_rule_enums_are_the_ones_accepted() {
        for t in schema::TARGETS {
            serde_json::from_value::<Target>(json!(t)).unwrap();
        }
        for o in schema::OPERATORS {
            serde_json::from_value::<Operator>(json!(o)).unwrap();
        }
        for s in schema::SEVERITIES {
            serde_json::from_value::<Severity>(json!(s)).unwrap();
        }
    }

    #[tokio::test]
    async fn the_tools_work_end_to_end() {
        let (_dir, skill) = skill();
        let proposed = call(&skill, "knowledge_propose", adr()).await.unwrap();
        let item = &proposed["item"];
        assert_eq!(item["id"], "project/adr/0001-use-postgres");
        assert_eq!(item["status"], "proposed");
        assert_eq!(item["author"], "acme");
        assert_eq!(item["constraints"][0]["operator"], "must_not_use");
        assert!(item["commit"].as_str().unwrap().len() == 40);

        let id = json!("project/adr/0001-use-postgres");
        let accepted = call(
            &skill,
            "knowledge_update_status",
            json!({"id": id, "status": "accepted", "reason": "agreed"}),
        )
        .await
        .unwrap();
        assert_eq!(accepted["previousStatus"], "proposed");
        assert_eq!(accepted["item"]["status"], "accepted");

        let shown = call(
            &skill,
            "knowledge_show",
            json!({"id": id, "includeConstraints": false, "includeHistory": true}),
        )
        .await
        .unwrap();
        assert!(shown["item"].get("constraints").is_none());
        assert_eq!(shown["item"]["body"], "Because.");
        assert_eq!(shown["history"].as_array().unwrap().len(), 2);
        assert_eq!(shown["history"][0]["author"], "acme");
        assert_eq!(shown["history"][0]["commit"], shown["item"]["commit"]);
        let plain = call(&skill, "knowledge_show", json!({"id": id}))
            .await
            .unwrap();
        assert!(plain.get("history").is_none() && plain["item"]["constraints"].is_array());

        let found = call(
            &skill,
            "knowledge_query",
            json!({"query": "postgresql", "tags": ["DB"]}),
        )
        .await
        .unwrap();
        assert_eq!(found["totalCount"], 1);
        assert_eq!(found["items"][0]["hasConstraints"], true);
        assert_eq!(found["items"][0]["summary"], "Because.");

        let report = call(
            &skill,
            "knowledge_check",
            json!({"dependencies": ["mysql"]}),
        )
        .await
        .unwrap();
        assert_eq!(report["passed"], false);
        assert_eq!(
            report["violations"][0]["policyId"],
            "project/adr/0001-use-postgres"
        );
        assert_eq!(report["counts"]["block"], 1);
        let clean = call(
            &skill,
            "knowledge_check",
            json!({"dependencies": ["mysql"], "layers": ["team"]}),
        )
        .await
        .unwrap();
        assert_eq!(clean["passed"], true);

        call(
            &skill,
            "knowledge_propose",
            json!({"layer": "team", "path": "scratch.md", "type": "spec", "title": "S", "body": ""}),
        )
        .await
        .unwrap();
        let deleted = call(&skill, "knowledge_delete", json!({"id": "team/scratch"}))
            .await
            .unwrap();
        assert_eq!(deleted["deleted"], true);
        assert_eq!(deleted["id"], "team/scratch");
    }

    #[tokio::test]
    async fn bad_arguments_are_refused_naming_the_field() {
        let (_dir, skill) = skill();
        let mut unknown = adr();
        unknown["author"] = json!("me");
        assert!(
            invalid(call(&skill, "knowledge_propose", unknown).await)
                .contains("unknown field `author`")
        );
        let mut missing = adr();
        missing.as_object_mut().unwrap().remove("title");
        assert!(
            invalid(call(&skill, "knowledge_propose", missing).await)
                .contains("missing field `title`")
        );
        let mut null_title = adr();
        null_title["title"] = Value::Null;
        assert!(invalid(call(&skill, "knowledge_propose", null_title).await).contains("`title`"));
        let mut bad_layer = adr();
        bad_layer["layer"] = json!("galaxy");
        assert!(invalid(call(&skill, "knowledge_propose", bad_layer).await).starts_with("`layer`"));
        let mut accepted = adr();
        accepted["status"] = json!("accepted");
        assert!(
            invalid(call(&skill, "knowledge_propose", accepted).await)
                .contains("draft or proposed")
        );
        let mut bad_rule = adr();
        bad_rule["constraints"][0]["operator"] = json!("must_be_nice");
        assert!(
            invalid(call(&skill, "knowledge_propose", bad_rule).await).starts_with("`constraints`")
        );
        let mut bad_regex = adr();
        bad_regex["constraints"][0]["operator"] = json!("must_match");
        bad_regex["constraints"][0]["value"] = json!("[a-");
        assert!(
            invalid(call(&skill, "knowledge_propose", bad_regex).await).contains("invalid regex")
        );
        for path in ["../x", "a/../../b", "/etc/passwd", "..\\x"] {
            let mut traversal = adr();
            traversal["path"] = json!(path);
            assert!(
                invalid(call(&skill, "knowledge_propose", traversal).await).starts_with("`path`"),
                "{path}"
            );
        }

        assert!(
            invalid(call(&skill, "knowledge_query", json!({"limit": "ten"})).await)
                .starts_with("`limit`")
        );
        assert!(
            invalid(call(&skill, "knowledge_query", json!({"limit": 0})).await)
                .starts_with("`limit`")
        );
        assert!(invalid(call(&skill, "knowledge_query", json!([1])).await).contains("JSON object"));
        assert!(
            invalid(call(&skill, "knowledge_show", json!({})).await).contains("missing field `id`")
        );
        assert!(
            invalid(call(&skill, "knowledge_show", json!({"id": "adr/1"})).await)
                .starts_with("`id`")
        );
        assert!(
            invalid(
                call(
                    &skill,
                    "knowledge_show",
                    json!({"id": "project/x", "includeHistory": "yes"})
                )
                .await
            )
            .starts_with("`includeHistory`")
        );
        let supersede =
            json!({"id": "project/x", "status": "superseded", "supersededBy": "nowhere"});
        assert!(
            invalid(call(&skill, "knowledge_update_status", supersede).await)
                .starts_with("`supersededBy`")
        );
        assert!(
            invalid(call(&skill, "knowledge_check", json!({"layers": ["moon"]})).await)
                .starts_with("`layers`")
        );

        assert!(matches!(
            call(&skill, "knowledge_show", json!({"id": "project/none"})).await,
            Err(SkillError::NotFound(_))
        ));
        assert!(matches!(
            call(&skill, "knowledge_delete", json!({"id": "project/none"})).await,
            Err(SkillError::NotFound(_))
        ));
        assert!(matches!(
            call(&skill, "knowledge_nope", json!({})).await,
            Err(SkillError::NotFound(_))
        ));

        call(&skill, "knowledge_propose", adr()).await.unwrap();
        assert!(matches!(
            call(&skill, "knowledge_propose", adr()).await,
            Err(SkillError::Conflict(text)) if text.contains("already exists")
        ));
        let refused = json!({"id": "project/adr/0001-use-postgres", "status": "deprecated"});
        assert!(
            invalid(call(&skill, "knowledge_update_status", refused).await)
                .contains("from proposed to deprecated")
        );
        // No request can name such a tenant, but a row stored by 0.1.0 may hold one: the
        // folder check still stands between it and the file system.
        let stored = Caller {
            tenant: TenantId::from_store("a/b").unwrap(),
            context_id: ContextId::generate(),
            fence_token: None,
            call: None,
            progress: None,
        };
        let odd_tenant = skill.invoke("knowledge_query", json!({}), &stored).await;
        assert!(invalid(odd_tenant).contains("tenant"));
    }

    /// Blocks every proposal.
    struct BlocksAll;

    impl Validator for BlocksAll {
        fn validate(&self, _tenant: &str, _scope: &Scope, _ctx: &EvalContext) -> Report {
            Report::from_violations(vec![Violation {
                rule_id: "frozen".into(),
                policy_id: Some("config:freeze".into()),
                severity: Severity::Block,
                target: Target::Content,
                message: "the knowledge base is frozen".into(),
            }])
        }
    }

    #[tokio::test]
    async fn a_governance_block_is_reported_with_its_report() {
        let (_dir, skill) = skill_with(Some(Arc::new(BlocksAll)));
        match call(&skill, "knowledge_propose", adr()).await {
            Err(SkillError::Blocked { message, report }) => {
                assert!(
                    message.contains("project/adr/0001-use-postgres"),
                    "{message}"
                );
                assert_eq!(report["passed"], false);
                assert_eq!(report["violations"][0]["ruleId"], "frozen");
            }
            other => panic!("expected a block, got {other:?}"),
        }
        let found = call(&skill, "knowledge_query", json!({"status": "proposed"}))
            .await
            .unwrap();
        assert_eq!(found["totalCount"], 0);
    }
}
