//! The `governance` skill: the engine's two questions as tools.
//!
//! `governance_validate` checks an input (content, path, dependencies, tools) against the
//! policies in force at a scope; `governance_constraints` lists those policies' rules.
//! Arguments are parsed here with serde, unknown fields refused, whatever validation ran
//! in front: the schemas in [`GovernanceSkill::tools`] describe the same structs.
//!
//! The engine may read the tenant's policies from the knowledge repository (git), so it
//! runs on the blocking pool rather than on the caller's arbiter thread.

use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::effective::{InvalidPolicy, SetAsidePolicy};
use super::engine::{ActiveConstraint, GovernanceEngine};
use super::rules::{EvalContext, Scope, Severity, Validator};
use crate::skills::{Caller, Skill, SkillError, SkillInfo, ToolSpec};

/// Name of the tool that checks an input against the policies in force.
pub const VALIDATE_TOOL: &str = "governance_validate";
/// Name of the tool that lists the constraints in force.
pub const CONSTRAINTS_TOOL: &str = "governance_constraints";

/// The governance engine as a [`Skill`].
pub struct GovernanceSkill {
    engine: Arc<GovernanceEngine>,
    info: SkillInfo,
}

impl GovernanceSkill {
    /// The engine is shared: memory and knowledge hold it as their [`Validator`].
    pub fn new(engine: Arc<GovernanceEngine>) -> Self {
        let info = SkillInfo::new(
            "governance",
            "Governance",
            "Checks content, paths, dependencies and tools against the company, org, team \
             and project policies in force, and lists the constraints that apply to a \
             scope. A check fails only on a `block` violation; mandatory policies cannot be \
             overridden by a more specific layer.",
        )
        .with_tags(&["governance", "policy", "compliance", "constraints"])
        .with_examples(&[
            "Does this change comply with our policies? Dependencies: tokio, openssl",
            "Which constraints apply to project alpha of team platform?",
            "List only the blocking rules for our company",
        ]);
        Self { engine, info }
    }
}

/// `governance_validate` arguments. Every field is optional: see [`parse`].
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ValidateArgs {
    content: Option<String>,
    path: Option<String>,
    #[serde(default)]
    dependencies: Vec<String>,
    #[serde(default)]
    tools: Vec<String>,
    company_id: Option<String>,
    org_id: Option<String>,
    team_id: Option<String>,
    project_id: Option<String>,
}

/// `governance_constraints` arguments. Every field is optional: see [`parse`].
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConstraintsArgs {
    company_id: Option<String>,
    org_id: Option<String>,
    team_id: Option<String>,
    project_id: Option<String>,
    min_severity: Option<Severity>,
}

/// `governance_constraints` result.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ConstraintsOutput {
    /// The rules in force at or above the requested severity.
    constraints: Vec<ActiveConstraint>,
    /// The tenant's policies that apply here but do not compile (so are not in force).
    invalid_policies: Vec<InvalidPolicy>,
    /// Policies that apply here but lost to a same-id policy (see `effective`).
    set_aside_policies: Vec<SetAsidePolicy>,
}

/// Builds a scope, refusing empty ids (they would silently match no scoped policy).
fn scope(
    company_id: Option<String>,
    org_id: Option<String>,
    team_id: Option<String>,
    project_id: Option<String>,
) -> Result<Scope, SkillError> {
    let fields = [
        ("companyId", &company_id),
        ("orgId", &org_id),
        ("teamId", &team_id),
        ("projectId", &project_id),
    ];
    if let Some((name, _)) = fields
        .iter()
        .find(|(_, id)| id.as_deref().is_some_and(|id| id.trim().is_empty()))
    {
        return Err(SkillError::InvalidArguments(format!(
            "field `{name}`: must not be empty"
        )));
    }
    Ok(Scope {
        company_id,
        org_id,
        team_id,
        project_id,
    })
}

/// Parses tool arguments (`null` counts as `{}`). serde names unknown and missing fields
/// itself but not the field holding a value of the wrong type; every argument struct
/// here has only optional fields, so each field is tried alone to find the culprit.
fn parse<T: DeserializeOwned>(arguments: Value) -> Result<T, SkillError> {
    let object = match arguments {
        Value::Object(object) => object,
        Value::Null => Map::new(),
        _ => {
            return Err(SkillError::InvalidArguments(
                "arguments must be a JSON object".into(),
            ));
        }
    };
    serde_json::from_value::<T>(Value::Object(object.clone())).map_err(|whole| {
        let culprit = object.into_iter().find_map(|(name, value)| {
            let alone = Value::Object(Map::from_iter([(name.clone(), value)]));
            serde_json::from_value::<T>(alone)
                .err()
                .map(|e| format!("field `{name}`: {e}"))
        });
        SkillError::InvalidArguments(culprit.unwrap_or_else(|| whole.to_string()))
    })
}

/// Runs `work` on the blocking pool: the engine may read git through its policy source.
async fn off_thread<R: Send + 'static>(
    work: impl FnOnce() -> R + Send + 'static,
) -> Result<R, SkillError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| {
        tracing::error!(error = %e, "governance check panicked or was cancelled");
        SkillError::Failed(format!("governance check did not finish: {e}"))
    })
}

fn to_json(value: impl Serialize) -> Result<Value, SkillError> {
    serde_json::to_value(value).map_err(|e| SkillError::Failed(format!("encoding the result: {e}")))
}

impl GovernanceSkill {
    async fn validate(&self, arguments: Value, tenant: String) -> Result<Value, SkillError> {
        let args: ValidateArgs = parse(arguments)?;
        let scope = scope(args.company_id, args.org_id, args.team_id, args.project_id)?;
        let ctx = EvalContext {
            content: args.content,
            path: args.path,
            dependencies: args.dependencies,
            tools: args.tools,
        };
        let engine = self.engine.clone();
        let report = off_thread(move || engine.validate(&tenant, &scope, &ctx)).await?;
        to_json(report)
    }

    async fn constraints(&self, arguments: Value, tenant: String) -> Result<Value, SkillError> {
        let args: ConstraintsArgs = parse(arguments)?;
        let min = args.min_severity.unwrap_or(Severity::Info);
        let scope = scope(args.company_id, args.org_id, args.team_id, args.project_id)?;
        let engine = self.engine.clone();
        let effective = off_thread(move || engine.effective(&tenant, &scope)).await?;
        let constraints = effective
            .constraints()
            .into_iter()
            .filter(|c| c.severity >= min)
            .collect();
        to_json(ConstraintsOutput {
            constraints,
            invalid_policies: effective.invalid,
            set_aside_policies: effective.set_aside,
        })
    }
}

/// The schema properties naming the scope, shared by both tools.
fn scope_properties() -> Map<String, Value> {
    let id = |layer: &str| {
        json!({
            "type": "string",
            "minLength": 1,
            "description": format!(
                "The {layer} the input belongs to; policies limited to another {layer} do not apply."
            ),
        })
    };
    Map::from_iter([
        ("companyId".to_owned(), id("company")),
        ("orgId".to_owned(), id("org")),
        ("teamId".to_owned(), id("team")),
        ("projectId".to_owned(), id("project")),
    ])
}

fn object_schema(mut properties: Map<String, Value>, extra: Map<String, Value>) -> Value {
    properties.extend(extra);
    json!({
        "type": "object",
        "properties": properties,
        "required": [],
        "additionalProperties": false,
    })
}

fn validate_schema() -> Value {
    let strings = |what: &str| {
        json!({
            "type": "array",
            "items": { "type": "string" },
            "description": what,
        })
    };
    let input = Map::from_iter([
        (
            "content".to_owned(),
            json!({ "type": "string", "description": "The text to check (a memory, a document, a file's content)." }),
        ),
        (
            "path".to_owned(),
            json!({ "type": "string", "description": "The path of the file or knowledge item." }),
        ),
        (
            "dependencies".to_owned(),
            strings("Declared dependencies, by name."),
        ),
        ("tools".to_owned(), strings("Tools the work uses, by name.")),
    ]);
    object_schema(input, scope_properties())
}

fn constraints_schema() -> Value {
    let min = Map::from_iter([(
        "minSeverity".to_owned(),
        json!({
            "type": "string",
            "enum": ["info", "warn", "block"],
            "default": "info",
            "description": "Leave out rules below this severity.",
        }),
    )]);
    object_schema(scope_properties(), min)
}

#[async_trait]
impl Skill for GovernanceSkill {
    fn info(&self) -> &SkillInfo {
        &self.info
    }

    fn tools(&self) -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: VALIDATE_TOOL.into(),
                description: "Check an input against the policies in force at a scope. \
                              Returns {passed, counts:{info,warn,block}, violations}; it \
                              passes unless a `block` rule is broken."
                    .into(),
                input_schema: validate_schema(),
                output_schema: super::rules::report_schema(),
            },
            ToolSpec {
                name: CONSTRAINTS_TOOL.into(),
                description: "List the rules in force at a scope, most specific layer first, \
                              with the policies set aside by the layering and the tenant's \
                              policies that are invalid."
                    .into(),
                input_schema: constraints_schema(),
                output_schema: constraints_output_schema(),
            },
        ]
    }

    async fn invoke(
        &self,
        tool: &str,
        arguments: Value,
        caller: &Caller,
    ) -> Result<Value, SkillError> {
        let tenant = caller.tenant.as_str().to_owned();
        match tool {
            VALIDATE_TOOL => self.validate(arguments, tenant).await,
            CONSTRAINTS_TOOL => self.constraints(arguments, tenant).await,
            other => Err(SkillError::NotFound(format!(
                "tool `{other}` in skill governance"
            ))),
        }
    }
}

#[cfg(test)]
#[path = "skill_tests.rs"]
mod tests;

/// What `governance_constraints` answers.
fn constraints_output_schema() -> Value {
    use crate::skills::output::{array_of, object, of};
    object(
        &["constraints", "invalidPolicies", "setAsidePolicies"],
        json!({
            "constraints": array_of(object(
                &["policyId", "layer", "mode", "ruleId", "target", "operator", "severity", "message"],
                json!({"policyId": of("string"), "layer": of("string"), "mode": of("string"),
                       "origin": of("string"), "ruleId": of("string"), "target": of("string"),
                       "operator": of("string"), "value": of("string"), "severity": of("string"),
                       "message": of("string")}),
            )),
            "invalidPolicies": array_of(of("object")),
            "setAsidePolicies": array_of(of("object")),
        }),
    )
}
