//! Tool declarations for the model: skill tools (contract A.15) and `transfer_to_agent`
//! (the decision of contract A.13).
//!
//! Schemas are made strict and deterministic here, once, so every provider sees the same
//! bytes for the same tools (stable prompts cache better) and the model is told that
//! arguments outside the schema are not accepted.

use serde_json::{Map, Value, json};

use crate::providers::ToolDefinition;
use crate::skills::ToolSpec;

/// The name of the tool a model calls to hand the conversation to another agent (ADK's).
pub const TRANSFER_TO_AGENT: &str = "transfer_to_agent";

/// One declaration per named tool: its input schema with `additionalProperties: false`
/// added when the schema does not decide it, and `required` sorted and deduplicated.
/// A missing or non-object schema becomes an empty object schema (no arguments).
pub fn function_declarations(specs: &[ToolSpec]) -> Vec<ToolDefinition> {
    specs
        .iter()
        .filter(|spec| !spec.name.is_empty())
        .map(|spec| ToolDefinition {
            name: spec.name.clone(),
            description: spec.description.clone(),
            parameters: strict_object_schema(&spec.input_schema),
        })
        .collect()
}

/// The `transfer_to_agent` declaration. Its `agent_name` argument is an enum of `valid`
/// (in the given order, duplicates dropped), so the model cannot name an agent that does
/// not exist; with no valid names the enum is left out (an empty enum admits nothing).
pub fn transfer_to_agent_declaration(valid: &[&str]) -> ToolDefinition {
    let mut names: Vec<&str> = Vec::with_capacity(valid.len());
    for name in valid {
        if !name.is_empty() && !names.contains(name) {
            names.push(name);
        }
    }
    let mut agent_name = json!({
        "type": "string",
        "description": "The name of the agent to hand the conversation to.",
    });
    if !names.is_empty() {
        agent_name["enum"] = json!(names);
    }
    ToolDefinition {
        name: TRANSFER_TO_AGENT.to_owned(),
        description: "Transfer the question to another agent when it is better suited to \
                      answer it."
            .to_owned(),
        parameters: json!({
            "type": "object",
            "properties": { "agent_name": agent_name },
            "required": ["agent_name"],
            "additionalProperties": false,
        }),
    }
}

/// `schema` as a top-level object schema with a decided `additionalProperties` and a sorted
/// `required`. Nested schemas are left as the skill wrote them: tightening them could refuse
/// arguments the skill accepts.
fn strict_object_schema(schema: &Value) -> Value {
    let mut object = match schema {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    object
        .entry("type")
        .or_insert_with(|| Value::String("object".into()));
    object
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    object
        .entry("additionalProperties")
        .or_insert(Value::Bool(false));
    if let Some(Value::Array(required)) = object.get_mut("required") {
        required.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        required.dedup();
    }
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, input_schema: Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("{name} tool"),
            input_schema,
            output_schema: json!({"type": "object"}),
        }
    }

    #[test]
    fn function_declarations_carry_name_description_and_schema() {
        let schema = json!({
            "type": "object",
            "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["q", "limit", "q"],
        });
        let declarations = function_declarations(&[spec("memory_search", schema)]);
        assert_eq!(declarations.len(), 1);
        let d = &declarations[0];
        assert_eq!(d.name, "memory_search");
        assert_eq!(d.description, "memory_search tool");
        assert_eq!(d.parameters["required"], json!(["limit", "q"]));
        assert_eq!(d.parameters["additionalProperties"], json!(false));
        assert_eq!(d.parameters["properties"]["q"], json!({"type": "string"}));
    }

    #[test]
    fn function_declarations_keep_an_explicit_additional_properties() {
        let schema = json!({"type": "object", "additionalProperties": true});
        let declarations = function_declarations(&[spec("open", schema)]);
        assert_eq!(
            declarations[0].parameters["additionalProperties"],
            json!(true)
        );
    }

    #[test]
    fn function_declarations_no_params() {
        let declarations = function_declarations(&[spec("ping", Value::Null)]);
        assert_eq!(
            declarations[0].parameters,
            json!({"type": "object", "properties": {}, "additionalProperties": false})
        );
    }

    #[test]
    fn function_declarations_empty_name_skipped() {
        let declarations = function_declarations(&[spec("", json!({})), spec("a", json!({}))]);
        let names: Vec<&str> = declarations.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["a"]);
    }

    #[test]
    fn function_declarations_are_deterministic() {
        let schema = json!({"type": "object", "required": ["b", "c", "a"]});
        let first = function_declarations(&[spec("t", schema.clone())]);
        let second = function_declarations(&[spec("t", schema)]);
        assert_eq!(first, second);
        assert_eq!(first[0].parameters["required"], json!(["a", "b", "c"]));
    }

    #[test]
    fn transfer_to_agent_lists_valid_agents_as_enum() {
        let d = transfer_to_agent_declaration(&["operator", "librarian", "operator"]);
        assert_eq!(d.name, TRANSFER_TO_AGENT);
        let agent_name = &d.parameters["properties"]["agent_name"];
        assert_eq!(agent_name["enum"], json!(["operator", "librarian"]));
        assert_eq!(d.parameters["required"], json!(["agent_name"]));
        assert_eq!(d.parameters["additionalProperties"], json!(false));
    }

    #[test]
    fn transfer_to_agent_without_valid_agents_has_no_enum() {
        let d = transfer_to_agent_declaration(&[]);
        assert!(
            d.parameters["properties"]["agent_name"]
                .get("enum")
                .is_none()
        );
    }
}
