//! The memory tools as the agent card and models see them: names, descriptions and a
//! complete JSON Schema per tool (camelCase properties, lowercase enums, a sorted
//! `required`, no additional properties). The schemas state the limits of the running
//! configuration.

use serde_json::{Map, Value, json};

use super::requests::{FeedbackKind, MAX_TAG_BYTES, MAX_TAGS};
use crate::config::MemorySettings;
use crate::skills::ToolSpec;
use crate::store::memories::{MAX_SCOPE_ID_LEN, MemoryLayer, ScopeField};

/// Tool names, in the order the skill lists them.
pub const TOOL_NAMES: [&str; 6] = [
    "memory_add",
    "memory_search",
    "memory_get",
    "memory_update",
    "memory_delete",
    "memory_feedback",
];

fn layer_names() -> Vec<&'static str> {
    MemoryLayer::ALL
        .into_iter()
        .map(MemoryLayer::as_str)
        .collect()
}

fn scope_id_description(field: ScopeField) -> &'static str {
    match field {
        ScopeField::AgentId => "Agent id; with userId, selects the agent layer.",
        ScopeField::UserId => {
            "User id; selects the user layer, and with agentId or sessionId the agent or session layer."
        }
        ScopeField::SessionId => "Session id; with userId, selects the session layer.",
        ScopeField::ProjectId => "Project id; selects the project layer.",
        ScopeField::TeamId => "Team id; selects the team layer.",
        ScopeField::OrgId => "Organisation id; selects the org layer.",
        ScopeField::CompanyId => "Company id; selects the company layer.",
    }
}

fn tags_schema(description: &str) -> Value {
    json!({
        "type": "array",
        "description": description,
        "items": {"type": "string", "minLength": 1, "maxLength": MAX_TAG_BYTES},
        "maxItems": MAX_TAGS,
    })
}

fn memory_id_schema() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 256, "description": "Id of the memory (from memory_add or memory_search)."})
}

/// An object schema of `own` properties plus the seven scope ids.
fn object_schema(own: Vec<(&str, Value)>, required: &[&str]) -> Value {
    let mut properties = Map::new();
    for (name, schema) in own {
        properties.insert(name.to_owned(), schema);
    }
    for field in ScopeField::ALL {
        properties.insert(
            field.wire_name().to_owned(),
            json!({
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_SCOPE_ID_LEN,
                "description": scope_id_description(field),
            }),
        );
    }
    let mut required: Vec<&str> = required.to_vec();
    required.sort_unstable();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn spec(name: &str, description: &str, input_schema: Value) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema,
        output_schema: output_schema(name),
    }
}

/// What each tool answers (see `skill.rs`).
fn output_schema(tool: &str) -> Value {
    use crate::skills::output::{array_of, object, of};
    let memory = || {
        object(
            &[
                "memoryId",
                "content",
                "layer",
                "scope",
                "tags",
                "metadata",
                "importance",
                "createdAt",
                "updatedAt",
            ],
            json!({
                "memoryId": of("string"), "content": of("string"), "layer": of("string"),
                "scope": of("object"), "tags": array_of(of("string")), "metadata": of("object"),
                "importance": of("number"), "hasEmbedding": of("boolean"),
                "createdAt": of("string"), "updatedAt": of("string")
            }),
        )
    };
    match tool {
        "memory_add" => object(
            &["memoryId", "duplicate"],
            json!({"memoryId": of("string"), "duplicate": of("boolean")}),
        ),
        "memory_search" => object(
            &["results", "totalCount", "searchedLayers"],
            json!({
                "results": array_of(object(
                    &["memoryId", "content", "layer", "score"],
                    json!({"memoryId": of("string"), "content": of("string"), "layer": of("string"),
                           "score": of("number"), "tags": array_of(of("string")), "importance": of("number")}),
                )),
                "totalCount": of("integer"),
                "searchedLayers": array_of(of("string")),
            }),
        ),
        "memory_delete" => object(&["deleted"], json!({"deleted": of("boolean")})),
        "memory_feedback" => object(
            &["memoryId", "importance"],
            json!({"memoryId": of("string"), "importance": of("number")}),
        ),
        _ => memory(),
    }
}

/// The six tools with schemas reflecting `settings`.
pub fn tool_specs(settings: &MemorySettings) -> Vec<ToolSpec> {
    let content = |what: &str| {
        json!({
            "type": "string",
            "minLength": 1,
            "description": format!("{what} (at most {} bytes).", settings.max_content_bytes),
        })
    };
    let metadata =
        json!({"type": "object", "description": "Free-form JSON object stored with the memory."});
    vec![
        spec(
            "memory_add",
            "Remember a piece of information in one layer (agent, user, session, project, team, org or company). \
             Give the ids that layer is keyed by. Storing the same content twice in one scope returns the existing memory with duplicate: true.",
            object_schema(
                vec![
                    ("content", content("The text to remember")),
                    (
                        "layer",
                        json!({"type": "string", "enum": layer_names(), "description": "The layer to store the memory in."}),
                    ),
                    ("tags", tags_schema("Labels to filter searches by.")),
                    ("metadata", metadata.clone()),
                ],
                &["content", "layer"],
            ),
        ),
        spec(
            "memory_search",
            "Find memories matching a query, ranked by layer (most specific first: agent, user, session, project, team, org, company), \
             then by relevance, then by recency. Searches every layer whose ids are given unless layers is set.",
            object_schema(
                vec![
                    ("query", content("What to look for")),
                    (
                        "layers",
                        json!({
                            "type": "array",
                            "items": {"type": "string", "enum": layer_names()},
                            "minItems": 1,
                            "uniqueItems": true,
                            "description": "Layers to search; each needs its ids. Default: every layer whose ids are given.",
                        }),
                    ),
                    (
                        "tags",
                        tags_schema("Only memories carrying every one of these tags."),
                    ),
                    (
                        "limit",
                        json!({
                            "type": "integer",
                            "minimum": 1,
                            "maximum": settings.max_limit,
                            "description": format!("Most results (default {}).", settings.default_limit),
                        }),
                    ),
                    (
                        "threshold",
                        json!({
                            "type": "number",
                            "minimum": 0,
                            "maximum": 1,
                            "description": "Lowest relevance score (0 to 1) a result may have (default 0).",
                        }),
                    ),
                ],
                &["query"],
            ),
        ),
        spec(
            "memory_get",
            "Read one memory. Give the ids of its layer.",
            object_schema(vec![("memoryId", memory_id_schema())], &["memoryId"]),
        ),
        spec(
            "memory_update",
            "Change a memory's content, tags and/or metadata (tags and metadata are replaced). Give the ids of its layer.",
            object_schema(
                vec![
                    ("memoryId", memory_id_schema()),
                    ("content", content("The new text")),
                    (
                        "tags",
                        tags_schema("The new tags (replacing the old ones)."),
                    ),
                    ("metadata", metadata),
                ],
                &["memoryId"],
            ),
        ),
        spec(
            "memory_delete",
            "Delete a memory. Give the ids of its layer.",
            object_schema(vec![("memoryId", memory_id_schema())], &["memoryId"]),
        ),
        spec(
            "memory_feedback",
            "Say whether a memory helped: importance moves by a quarter of the reward, within 0 to 1.",
            object_schema(
                vec![
                    ("memoryId", memory_id_schema()),
                    (
                        "reward",
                        json!({"type": "number", "minimum": -1, "maximum": 1, "description": "From -1 (harmful) to 1 (very helpful)."}),
                    ),
                    (
                        "kind",
                        json!({
                            "type": "string",
                            "enum": FeedbackKind::ALL.into_iter().map(FeedbackKind::as_str).collect::<Vec<_>>(),
                            "description": "Why the memory did or did not help.",
                        }),
                    ),
                    (
                        "reasoning",
                        json!({"type": "string", "description": "Optional explanation, logged with the feedback."}),
                    ),
                ],
                &["kind", "memoryId", "reward"],
            ),
        ),
    ]
}
