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
    let wrong_type = invalid_message(call(VALIDATE_TOOL, json!({"dependencies": "tokio"})).await);
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
    let bad_enum = invalid_message(call(CONSTRAINTS_TOOL, json!({"minSeverity": "fatal"})).await);
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
