//! The `knowledge_*` tools as the agent card and models see them: names, descriptions and
//! complete JSON Schemas of their arguments (camelCase keys, lowercase enums, no other
//! properties allowed).
//!
//! The schemas are also what the skill checks arguments against (known keys, required
//! keys), so the advertised contract and the accepted one cannot drift apart.

use serde_json::{Value, json};

use super::fields::{
    MAX_CHECK_LIST, MAX_CONSTRAINTS, MAX_QUERY_CHARS, MAX_REASON_CHARS, MAX_TAG_CHARS, MAX_TAGS,
    MAX_TITLE_CHARS,
};
use super::item::ItemType;
use super::lifecycle::Status;
use super::paths::{MAX_PATH_LEN, MAX_SEGMENTS};
use super::query::MAX_QUERY_LIMIT;
use crate::skills::ToolSpec;
use crate::skills::governance::Layer;

/// Tool names.
pub const QUERY: &str = "knowledge_query";
pub const SHOW: &str = "knowledge_show";
pub const PROPOSE: &str = "knowledge_propose";
pub const UPDATE_STATUS: &str = "knowledge_update_status";
pub const DELETE: &str = "knowledge_delete";
pub const CHECK: &str = "knowledge_check";

/// Rule targets, operators and severities as spelled on the wire (checked against the
/// governance enums by a test).
pub const TARGETS: [&str; 4] = ["content", "path", "dependency", "tool"];
pub const OPERATORS: [&str; 6] = [
    "must_use",
    "must_not_use",
    "must_match",
    "must_not_match",
    "must_exist",
    "must_not_exist",
];
pub const SEVERITIES: [&str; 3] = ["info", "warn", "block"];

fn layers() -> Value {
    json!(Layer::ALL.map(Layer::as_str))
}

fn item_types() -> Value {
    json!(ItemType::ALL.map(ItemType::as_str))
}

fn statuses() -> Value {
    json!(Status::ALL.map(Status::as_str))
}

fn item_id(description: &str) -> Value {
    json!({
        "type": "string",
        "description": description,
        "pattern": "^(project|team|org|company)/[A-Za-z0-9._/-]+$",
        "maxLength": MAX_PATH_LEN + "company/".len(),
    })
}

fn string_list(description: &str, max_items: usize) -> Value {
    json!({
        "type": "array",
        "description": description,
        "items": {"type": "string"},
        "maxItems": max_items,
    })
}

fn tag_list(description: &str) -> Value {
    json!({
        "type": "array",
        "description": description,
        "items": {"type": "string", "minLength": 1, "maxLength": MAX_TAG_CHARS},
        "maxItems": MAX_TAGS,
    })
}

fn rule() -> Value {
    json!({
        "type": "object",
        "description": "A rule checked by knowledge_check (and by governance, for accepted policies).",
        "properties": {
            "id": {"type": "string", "description": "Unique within the item.", "minLength": 1},
            "target": {"type": "string", "enum": TARGETS, "description": "What the rule reads."},
            "operator": {"type": "string", "enum": OPERATORS, "description": "How it judges the target."},
            "value": {"type": "string", "description": "The value or regex; required by all but must_exist and must_not_exist."},
            "severity": {"type": "string", "enum": SEVERITIES, "description": "Only block fails a check."},
            "message": {"type": "string", "description": "Shown to whoever breaks the rule."},
        },
        "required": ["id", "target", "operator", "severity", "message"],
        "additionalProperties": false,
    })
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// Every tool of the knowledge skill, in a fixed order.
pub fn tools() -> Vec<ToolSpec> {
    let tool = |name: &str, description: &str, input_schema: Value| ToolSpec {
        output_schema: output_schema(name),
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema,
    };
    vec![
        tool(
            QUERY,
            "Find knowledge items (ADRs, policies, patterns, specs), most specific layer first, then most recently updated.",
            object(
                json!({
                    "query": {"type": "string", "maxLength": MAX_QUERY_CHARS,
                              "description": "Text to find, ignoring case, in title, body, tags and path."},
                    "type": {"type": "string", "enum": item_types(), "description": "Only items of this type."},
                    "layer": {"type": "string", "enum": layers(), "description": "Only items of this layer."},
                    "status": {"type": "string", "enum": statuses(), "default": "accepted",
                               "description": "Only items in this status."},
                    "tags": tag_list("Only items carrying every one of these tags (ignoring case)."),
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_QUERY_LIMIT,
                              "description": "Most items returned (default from configuration)."},
                }),
                &[],
            ),
        ),
        tool(
            SHOW,
            "Show one knowledge item: front matter, body, the last commit that changed it and, if asked, its history.",
            object(
                json!({
                    "id": item_id("The item: `<layer>/<path>`, e.g. `project/adr/0001-use-postgres`."),
                    "includeConstraints": {"type": "boolean", "default": true,
                                           "description": "Include the item's constraints."},
                    "includeHistory": {"type": "boolean", "default": false,
                                       "description": "Include the commits that changed the item, newest first."},
                }),
                &["id"],
            ),
        ),
        tool(
            PROPOSE,
            "Create a knowledge item as draft or proposed, in one commit. Governance checks the body first.",
            object(
                json!({
                    "layer": {"type": "string", "enum": layers(), "description": "The layer it belongs to."},
                    "path": {"type": "string", "minLength": 1, "maxLength": MAX_PATH_LEN,
                             "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*$",
                             "description": format!("Path inside the layer, e.g. `adr/0001-use-postgres` (at most {MAX_SEGMENTS} segments, no `.md`).")},
                    "type": {"type": "string", "enum": item_types(), "description": "The kind of item."},
                    "title": {"type": "string", "minLength": 1, "maxLength": MAX_TITLE_CHARS, "description": "One line."},
                    "body": {"type": "string", "description": "Markdown."},
                    "tags": tag_list("Tags for finding it."),
                    "constraints": {"type": "array", "items": rule(), "maxItems": MAX_CONSTRAINTS,
                                    "description": "Rules in force once the item is accepted."},
                    "mode": {"type": "string", "enum": ["mandatory", "optional"],
                             "description": "Policies only: whether lower layers may override it (default optional)."},
                    "status": {"type": "string", "enum": ["draft", "proposed"], "default": "draft",
                               "description": "The status it starts in."},
                    "companyId": {"type": "string", "description": "Governance scope: company."},
                    "orgId": {"type": "string", "description": "Governance scope: organisation."},
                    "teamId": {"type": "string", "description": "Governance scope: team."},
                    "projectId": {"type": "string", "description": "Governance scope: project."},
                }),
                &["layer", "path", "type", "title", "body"],
            ),
        ),
        tool(
            UPDATE_STATUS,
            "Move a knowledge item along its lifecycle: draft→proposed|rejected, proposed→accepted|rejected, accepted→deprecated|superseded.",
            object(
                json!({
                    "id": item_id("The item: `<layer>/<path>`."),
                    "status": {"type": "string", "enum": statuses(), "description": "The new status."},
                    "reason": {"type": "string", "maxLength": MAX_REASON_CHARS, "description": "Why; recorded in the commit."},
                    "supersededBy": item_id("With status superseded only: the accepted item replacing it."),
                }),
                &["id", "status"],
            ),
        ),
        tool(
            DELETE,
            "Delete a draft, proposed or rejected knowledge item, in one commit (deprecate accepted ones instead).",
            object(
                json!({"id": item_id("The item: `<layer>/<path>`.")}),
                &["id"],
            ),
        ),
        tool(
            CHECK,
            "Check content, a path, dependencies or tools against the constraints of accepted knowledge items. Passes unless a block violation is found.",
            object(
                json!({
                    "content": {"type": "string", "description": "Text to check (code, a document)."},
                    "path": {"type": "string", "description": "A file path to check."},
                    "dependencies": string_list("Dependency names to check.", MAX_CHECK_LIST),
                    "tools": string_list("Tool names to check.", MAX_CHECK_LIST),
                    "layers": {"type": "array", "items": {"type": "string", "enum": layers()},
                               "description": "Only items of these layers (default all)."},
                }),
                &[],
            ),
        ),
    ]
}

/// What each tool answers (see `skill.rs`).
fn output_schema(tool: &str) -> Value {
    use crate::skills::output::{array_of, object, of};
    let item = || {
        object(
            &["id", "layer", "path", "type", "status", "title"],
            json!({"id": of("string"), "layer": of("string"), "path": of("string"),
                   "type": of("string"), "status": of("string"), "title": of("string"),
                   "tags": array_of(of("string"))}),
        )
    };
    let commit = object(
        &["commit", "author", "time", "message"],
        json!({"commit": of("string"), "author": of("string"), "time": of("string"), "message": of("string")}),
    );
    match tool {
        QUERY => object(
            &["items", "totalCount"],
            json!({"items": array_of(item()), "totalCount": of("integer")}),
        ),
        SHOW => object(
            &["item"],
            json!({"item": item(), "history": array_of(commit)}),
        ),
        UPDATE_STATUS => object(
            &["item", "previousStatus"],
            json!({"item": item(), "previousStatus": of("string")}),
        ),
        DELETE => object(
            &["id", "deleted", "commit"],
            json!({"id": of("string"), "deleted": of("boolean"), "commit": of("string")}),
        ),
        CHECK => crate::skills::governance::report_schema(),
        _ => object(&["item"], json!({"item": item()})),
    }
}
