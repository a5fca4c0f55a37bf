//! A server's tool list as the agent takes it: the tools `tools` allows, at most
//! `max_tools`, whose names a model can take and whose descriptions and schemas fit their
//! bounds ([`taken`]), each offered as `<server>__<tool>` ([`Listed`]); and the list read
//! again, which replaces the skill's tools when it differs ([`Listing::take`]).

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rmcp::model::Tool;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::config::McpServerSettings;
use crate::skills::{ToolSpec, output};

/// Why a tool list falls short of the server's `tools` allowlist (a tool it allows that
/// the list lacks), if it does.
pub(super) fn missing_allowed(settings: &McpServerSettings, tools: &[Tool]) -> Option<String> {
    let offered: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    let missing = settings
        .tools
        .iter()
        .find(|t| !offered.contains(&t.as_str()))?;
    Some(format!(
        "agent.mcp_servers {}: `tools` allows {missing:?}, which the server does not offer \
         (it offers {offered:?})",
        settings.name
    ))
}

/// The server's tools the agent takes: `allowed` ones (all when empty), at most `max`.
pub(super) fn taken(settings: &McpServerSettings, tools: Vec<Tool>) -> Result<Vec<Tool>, String> {
    let name = &settings.name;
    let tools: Vec<Tool> = tools
        .into_iter()
        .filter(|t| settings.tools.is_empty() || settings.tools.iter().any(|a| a == &t.name))
        .filter(|t| {
            // Model providers take function names of these characters, at most 64.
            let full = settings.tool_name(&t.name);
            let callable = full.len() <= 64
                && full
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !callable {
                tracing::warn!(server = %name, tool = %t.name, "MCP tool left out: `<server>__<tool>` must be at most 64 letters, digits, `_` or `-`");
            }
            callable
        })
        .filter(|t| {
            let description = t.description.as_deref().map_or(0, str::len);
            let schema = serde_json::to_vec(t.input_schema.as_ref()).map_or(usize::MAX, |s| s.len());
            let fits = description <= settings.max_description_bytes
                && schema <= settings.max_schema_bytes;
            if !fits {
                tracing::warn!(server = %name, tool = %t.name, description_bytes = description, schema_bytes = schema,
                    max_description_bytes = settings.max_description_bytes, max_schema_bytes = settings.max_schema_bytes,
                    "MCP tool left out: its description or input schema is past its bound");
            }
            fits
        })
        .collect();
    if tools.len() > settings.max_tools {
        return Err(format!(
            "agent.mcp_servers {name}: the server offers {} tools, more than its max_tools ({}); \
             raise it or list the ones the agent needs in `tools`",
            tools.len(),
            settings.max_tools
        ));
    }
    Ok(tools)
}

/// A tool of the server as the agent offers it: `<server>__<tool>`, the server's
/// description and input schema, and a result of the MCP shape.
fn spec(settings: &McpServerSettings, tool: &Tool) -> ToolSpec {
    let description = tool
        .description
        .as_deref()
        .filter(|d| !d.trim().is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| {
            format!(
                "The tool `{}` of the MCP server `{}`.",
                tool.name, settings.name
            )
        });
    ToolSpec {
        name: settings.tool_name(&tool.name),
        description,
        input_schema: Value::Object(tool.input_schema.as_ref().clone()),
        output_schema: output::object(
            &["content"],
            json!({
                "content": output::array_of(output::of("object")),
                "structuredContent": {},
            }),
        ),
    }
}

/// The server's tools as the agent takes them, replaced whole when the list changes.
pub(super) struct Listed {
    pub(super) specs: Vec<ToolSpec>,
    /// Each tool's name on the server, by its name here.
    pub(super) server_names: HashMap<String, String>,
}

impl Listed {
    pub(super) fn of(settings: &McpServerSettings, tools: &[Tool]) -> Listed {
        Listed {
            specs: tools.iter().map(|t| spec(settings, t)).collect(),
            server_names: tools
                .iter()
                .map(|t| (settings.tool_name(&t.name), t.name.to_string()))
                .collect(),
        }
    }
}

/// The server's tools, shared by the skill and its supervisor (which lists them again).
pub(super) struct Listing {
    pub(super) settings: McpServerSettings,
    pub(super) current: ArcSwap<Listed>,
    /// Told each time `current` changes
    /// ([`Skill::tool_changes`](crate::skills::Skill::tool_changes)).
    pub(super) changed: watch::Sender<()>,
}

impl Listing {
    /// Takes `tools`, the server's list read again: replaces the skill's tools when they
    /// differ (leaving out allowed ones that are gone, with a warning), or keeps them
    /// when the list is past `max_tools`.
    pub(super) fn take(&self, tools: Vec<Tool>) {
        let name = &self.settings.name;
        if let Some(missing) = missing_allowed(&self.settings, &tools) {
            tracing::warn!(server = %name, "{missing}; the others are taken");
        }
        let listed = match taken(&self.settings, tools) {
            Ok(tools) => Listed::of(&self.settings, &tools),
            Err(e) => {
                tracing::error!(server = %name, error = %e, "MCP server's new tool list refused; its tools stay as they were");
                return;
            }
        };
        if listed.specs == self.current.load().specs {
            return;
        }
        let names: Vec<&str> = listed.specs.iter().map(|s| s.name.as_str()).collect();
        tracing::info!(server = %name, tools = ?names, "MCP server's tools changed");
        self.current.store(Arc::new(listed));
        self.changed.send_replace(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tool of the server named `name`, with an empty input schema.
    fn tool(name: &str) -> Tool {
        Tool::new(name.to_owned(), "a tool", Arc::new(serde_json::Map::new()))
    }

    #[test]
    fn a_changed_list_replaces_the_tools_within_the_allowlist_and_the_bound() {
        let mut settings = McpServerSettings::stdio("s", "x", &[]);
        settings.max_tools = 2;
        let listing = Listing {
            current: ArcSwap::from_pointee(Listed::of(&settings, &[tool("a")])),
            settings,
            changed: watch::channel(()).0,
        };
        let mut changes = listing.changed.subscribe();
        let names = |listing: &Listing| -> Vec<String> {
            let listed = listing.current.load();
            let mut on_server: Vec<&String> = listed.server_names.values().collect();
            on_server.sort();
            assert_eq!(listed.specs.len(), on_server.len());
            listed.specs.iter().map(|s| s.name.clone()).collect()
        };
        listing.take(vec![tool("a"), tool("b")]);
        assert_eq!(names(&listing), ["s__a", "s__b"]);
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        // The same list again: nothing to tell.
        listing.take(vec![tool("a"), tool("b")]);
        assert!(!changes.has_changed().unwrap());
        // Past max_tools: refused, the tools stay.
        listing.take(vec![tool("a"), tool("b"), tool("c")]);
        assert_eq!(names(&listing), ["s__a", "s__b"]);
        assert!(!changes.has_changed().unwrap());
        // A tool the allowlist names is gone: the others are taken.
        let mut settings = McpServerSettings::stdio("s", "x", &[]);
        settings.tools = vec!["a".into(), "b".into()];
        let listing = Listing {
            current: ArcSwap::from_pointee(Listed::of(&settings, &[tool("a"), tool("b")])),
            settings,
            changed: watch::channel(()).0,
        };
        listing.take(vec![tool("b"), tool("c")]);
        assert_eq!(names(&listing), ["s__b"]);
    }

    #[test]
    fn tools_the_allowlist_names_must_exist_and_names_a_model_cannot_take_are_left_out() {
        let mut settings = McpServerSettings::stdio("s", "x", &[]);
        let taken_names = |settings: &McpServerSettings, tools: Vec<Tool>| {
            taken(settings, tools).map(|t| t.iter().map(|t| t.name.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(
            taken_names(
                &settings,
                vec![tool("a"), tool("b.c"), tool(&"x".repeat(70))]
            )
            .unwrap(),
            ["a"]
        );
        settings.tools = vec!["b".into()];
        let e = missing_allowed(&settings, &[tool("a")]).unwrap();
        assert!(
            e.contains("allows \"b\", which the server does not offer"),
            "{e}"
        );
        assert_eq!(missing_allowed(&settings, &[tool("a"), tool("b")]), None);
        settings.tools = Vec::new();
        settings.max_tools = 1;
        let e = taken_names(&settings, vec![tool("a"), tool("b")]).unwrap_err();
        assert!(
            e.contains("offers 2 tools, more than its max_tools (1)"),
            "{e}"
        );
    }
}
