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

#[cfg(test)]
mod tests {
    //! Tests of [`GovernanceSkill`]: both tools through [`Skill::invoke`] with good and bad
    //! arguments, and their input schemas against the structs that parse the arguments.

    use std::collections::HashMap;

    use serde_json::json;

    use super::*;
    use crate::domain::{ContextId, TenantId};
    use crate::skills::governance::rules::{
        Layer, Mode, Operator, PolicySource, PolicySpec, RuleSpec, Target,
    };

    fn rule(id: &str, operator: Operator, value: &str, severity: Severity) -> RuleSpec {
        RuleSpec {
            id: id.into(),
            target: Target::Content,
            operator,
            value: Some(value.into()),
            severity,
            message: format!("{id} broken"),
        }
    }

    struct TenantSource(HashMap<String, Vec<PolicySpec>>);

    impl PolicySource for TenantSource {
        fn policies(&self, tenant: &str) -> Vec<PolicySpec> {
            self.0.get(tenant).cloned().unwrap_or_default()
        }
    }

    /// Config: a mandatory company policy (block + info); tenant `acme`'s knowledge: a
    /// warn rule for project alpha and a policy with an invalid regex.
    fn skill() -> GovernanceSkill {
        let config = vec![PolicySpec {
            id: "security".into(),
            layer: Layer::Company,
            mode: Mode::Mandatory,
            scope_id: None,
            description: Some("No secrets".into()),
            rules: vec![
                rule(
                    "no-password",
                    Operator::MustNotMatch,
                    r"(?i)password\s*=",
                    Severity::Block,
                ),
                rule("no-todo", Operator::MustNotUse, "TODO", Severity::Info),
            ],
        }];
        let knowledge = vec![
            PolicySpec {
                id: "alpha-style".into(),
                layer: Layer::Project,
                mode: Mode::Optional,
                scope_id: Some("alpha".into()),
                description: None,
                rules: vec![rule(
                    "no-println",
                    Operator::MustNotUse,
                    "println!",
                    Severity::Warn,
                )],
            },
            PolicySpec {
                id: "broken".into(),
                layer: Layer::Team,
                mode: Mode::Optional,
                scope_id: None,
                description: None,
                rules: vec![rule("unclosed", Operator::MustMatch, "(", Severity::Warn)],
            },
        ];
        let source = TenantSource(HashMap::from([("acme".to_owned(), knowledge)]));
        let engine = GovernanceEngine::new(config, Some(Arc::new(source))).unwrap();
        GovernanceSkill::new(Arc::new(engine))
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

    async fn call(tool: &str, arguments: Value) -> Result<Value, SkillError> {
        skill().invoke(tool, arguments, &caller("acme")).await
    }

    fn invalid_message(result: Result<Value, SkillError>) -> String {
        match result {
            Err(SkillError::InvalidArguments(message)) => message,
            other => panic!("expected invalid arguments, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn validate_reports_violations_counts_and_the_verdict() {
        let out = call(
            VALIDATE_TOOL,
            json!({"content": "password = 1; TODO; println!()", "projectId": "alpha"}),
        )
        .await
        .unwrap();
        assert_eq!(out["passed"], false);
        assert_eq!(out["counts"], json!({"info": 1, "warn": 1, "block": 1}));
        let rules: Vec<_> = out["violations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["ruleId"].as_str().unwrap(),
                    v["policyId"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            rules,
            [
                ("no-println", "alpha-style"),
                ("no-password", "security"),
                ("no-todo", "security"),
            ]
        );

        let clean = call(
            VALIDATE_TOOL,
            json!({"content": "TODO", "projectId": "beta"}),
        )
        .await
        .unwrap();
        assert_eq!(clean["passed"], true, "info alone passes: {clean}");
        assert_eq!(clean["counts"], json!({"info": 1, "warn": 0, "block": 0}));
    }

    #[tokio::test]
    async fn the_tenant_comes_from_the_caller() {
        let args = json!({"content": "println!()", "projectId": "alpha"});
        let acme = skill()
            .invoke(VALIDATE_TOOL, args.clone(), &caller("acme"))
            .await
            .unwrap();
        let other = skill()
            .invoke(VALIDATE_TOOL, args, &caller("globex"))
            .await
            .unwrap();
        assert_eq!(acme["counts"]["warn"], 1);
        assert_eq!(
            other["counts"]["warn"], 0,
            "acme's knowledge is not globex's"
        );
    }

    #[tokio::test]
    async fn validate_refuses_bad_arguments_naming_the_field() {
        let unknown = invalid_message(call(VALIDATE_TOOL, json!({"contents": "x"})).await);
        assert!(unknown.contains("contents"), "{unknown}");
        let wrong_type =
            invalid_message(call(VALIDATE_TOOL, json!({"dependencies": "tokio"})).await);
        assert!(wrong_type.contains("`dependencies`"), "{wrong_type}");
        let wrong_item = invalid_message(call(VALIDATE_TOOL, json!({"tools": ["a", 1]})).await);
        assert!(wrong_item.contains("`tools`"), "{wrong_item}");
        let empty_id = invalid_message(call(VALIDATE_TOOL, json!({"teamId": " "})).await);
        assert!(empty_id.contains("`teamId`"), "{empty_id}");
        let not_object = invalid_message(call(VALIDATE_TOOL, json!(["content"])).await);
        assert!(not_object.contains("object"), "{not_object}");
    }

    #[tokio::test]
    async fn validate_accepts_no_arguments_at_all() {
        let out = call(VALIDATE_TOOL, Value::Null).await.unwrap();
        assert_eq!(out["passed"], true);
        assert_eq!(out["violations"], json!([]));
    }

    #[tokio::test]
    async fn constraints_list_rules_most_specific_first_with_a_minimum_severity() {
        let out = call(CONSTRAINTS_TOOL, json!({"projectId": "alpha"}))
            .await
            .unwrap();
        let rules: Vec<_> = out["constraints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["ruleId"].as_str().unwrap())
            .collect();
        assert_eq!(rules, ["no-println", "no-password", "no-todo"]);
        let first = &out["constraints"][0];
        assert_eq!(first["layer"], "project");
        assert_eq!(first["mode"], "optional");
        assert_eq!(first["origin"], "knowledge");
        assert_eq!(first["operator"], "must_not_use");
        assert_eq!(first["value"], "println!");
        assert_eq!(first["severity"], "warn");

        let warn_up = call(
            CONSTRAINTS_TOOL,
            json!({"projectId": "alpha", "minSeverity": "warn"}),
        )
        .await
        .unwrap();
        let rules: Vec<_> = warn_up["constraints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["ruleId"].as_str().unwrap())
            .collect();
        assert_eq!(rules, ["no-println", "no-password"]);
    }

    #[tokio::test]
    async fn constraints_report_invalid_source_policies() {
        let out = call(CONSTRAINTS_TOOL, json!({})).await.unwrap();
        let invalid = out["invalidPolicies"].as_array().unwrap();
        assert_eq!(invalid.len(), 1);
        assert_eq!(invalid[0]["policyId"], "broken");
        assert_eq!(invalid[0]["layer"], "team");
        assert!(invalid[0]["error"].as_str().unwrap().contains("unclosed"));
        assert_eq!(out["setAsidePolicies"], json!([]));
    }

    #[tokio::test]
    async fn constraints_refuse_bad_arguments_naming_the_field() {
        let bad_enum =
            invalid_message(call(CONSTRAINTS_TOOL, json!({"minSeverity": "fatal"})).await);
        assert!(bad_enum.contains("`minSeverity`"), "{bad_enum}");
        let unknown = invalid_message(call(CONSTRAINTS_TOOL, json!({"content": "x"})).await);
        assert!(unknown.contains("content"), "{unknown}");
        let wrong_type = invalid_message(call(CONSTRAINTS_TOOL, json!({"orgId": 7})).await);
        assert!(wrong_type.contains("`orgId`"), "{wrong_type}");
    }

    #[tokio::test]
    async fn an_unknown_tool_is_not_found() {
        assert!(matches!(
            call("governance_drift_check", json!({})).await,
            Err(SkillError::NotFound(_))
        ));
    }

    /// A value of the schema's type, to build arguments that use every property.
    fn sample(schema: &Value) -> Value {
        match schema["type"].as_str().unwrap() {
            "string" => schema["enum"].get(0).cloned().unwrap_or(json!("x")),
            "array" => json!([sample(&schema["items"])]),
            other => panic!("no sample for type {other}"),
        }
    }

    const KEYWORDS: [&str; 8] = [
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "description",
        "enum",
        "minLength",
    ];
    const TYPES: [&str; 7] = [
        "object", "array", "string", "number", "integer", "boolean", "null",
    ];

    /// Structural JSON Schema checks: known keywords only, valid types, a described type on
    /// every property, `required` naming properties.
    fn check_schema(schema: &Value, at: &str) {
        let object = schema
            .as_object()
            .unwrap_or_else(|| panic!("{at}: not an object"));
        for key in object.keys() {
            assert!(
                KEYWORDS.contains(&key.as_str()) || key == "default",
                "{at}: unknown keyword {key}"
            );
        }
        let ty = schema["type"]
            .as_str()
            .unwrap_or_else(|| panic!("{at}: no type"));
        assert!(TYPES.contains(&ty), "{at}: bad type {ty}");
        if let Some(items) = schema.get("items") {
            check_schema(items, &format!("{at}.items"));
        }
        if let Some(values) = schema.get("enum") {
            assert!(
                values.as_array().is_some_and(|v| !v.is_empty()),
                "{at}: enum"
            );
        }
        if ty == "object" {
            assert_eq!(schema["additionalProperties"], false, "{at}");
            let properties = schema["properties"].as_object().unwrap();
            for (name, property) in properties {
                assert!(
                    property["description"].is_string(),
                    "{at}.{name}: no description"
                );
                check_schema(property, &format!("{at}.{name}"));
            }
            for required in schema["required"].as_array().unwrap() {
                assert!(
                    properties.contains_key(required.as_str().unwrap()),
                    "{at}: required {required}"
                );
            }
        }
    }

    #[tokio::test]
    async fn schemas_are_json_schema_objects_matching_the_argument_structs() {
        let skill = skill();
        let tools = skill.tools();
        let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, [VALIDATE_TOOL, CONSTRAINTS_TOOL]);
        for tool in &tools {
            assert!(!tool.description.is_empty());
            check_schema(&tool.input_schema, &tool.name);
            // Every property the schema offers is accepted by the parser, all at once.
            let every: Map<String, Value> = tool.input_schema["properties"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(name, schema)| (name.clone(), sample(schema)))
                .collect();
            let result = skill
                .invoke(&tool.name, Value::Object(every), &caller("acme"))
                .await;
            assert!(result.is_ok(), "{}: {result:?}", tool.name);
        }
        // The schema is what the card shows, so it must not change from call to call.
        assert_eq!(skill.tools(), tools);
    }
}
