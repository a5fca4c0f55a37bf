//! `[[agent.mcp_servers]]`: Model Context Protocol servers whose tools the agent calls,
//! each as `<name>__<tool>`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// An MCP server (`[[agent.mcp_servers]]`): a child process spoken to over its stdin and
/// stdout (`command`), or a Streamable HTTP endpoint (`url`), whose tools the agent
/// calls as `<name>__<tool>`. An HTTP URL passes the push receivers' URL policy
/// (`[push]` `allow_loopback`, `allow_private`, `allow_hosts`, `deny_hosts`).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerSettings {
    /// Lowercase letters, digits and `_`/`-`, without `__`: its tools are
    /// `<name>__<tool>`.
    pub name: String,
    /// stdio: the program to start (looked up in `PATH`); empty with `url`.
    #[serde(default)]
    pub command: String,
    /// stdio: its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// stdio: environment variables set for it, beside `PATH`, `HOME`, `LANG` and `TMPDIR`
    /// (it inherits nothing else). A value written `${NAME}` is this server's variable
    /// `NAME`, read at start (unset: the start stops).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// stdio: its working directory; empty: this server's.
    #[serde(default)]
    pub cwd: String,
    /// Streamable HTTP: its endpoint (`http(s)://host/mcp`); empty with `command`.
    #[serde(default)]
    pub url: String,
    /// Streamable HTTP: the environment variable whose value is sent as
    /// `Authorization: Bearer <value>`; empty: none. Read at start (unset: the start
    /// stops).
    #[serde(default)]
    pub bearer_env: String,
    /// Its tools the agent may call (the server's names); empty: all of them.
    #[serde(default)]
    pub tools: Vec<String>,
    /// One call may take this long; then it is canceled on the server and fails. At
    /// most `skills.timeout_ms`, which ends every tool call.
    #[serde(default = "mcp_timeout_ms")]
    pub timeout_ms: u64,
    /// How long the start waits for the server's handshake and tool list (a server not
    /// ready in time stops the start), and a restart for them.
    #[serde(default = "mcp_start_timeout_ms")]
    pub start_timeout_ms: u64,
    /// The largest result taken from a call (its content and structured content as
    /// JSON); a larger one fails the call.
    #[serde(default = "mcp_max_result_bytes")]
    pub max_result_bytes: usize,
    /// Calls to it at once; more wait for one to end (within the call's timeout).
    #[serde(default = "mcp_max_concurrency")]
    pub max_concurrency: usize,
    /// The most tools taken from it (after `tools`); a server offering more stops the
    /// start.
    #[serde(default = "mcp_max_tools")]
    pub max_tools: usize,
    /// The longest description taken of one of its tools; a tool with a longer one is
    /// left out (with a warning): a server's text goes to the model and the public card.
    #[serde(default = "mcp_max_description_bytes")]
    pub max_description_bytes: usize,
    /// The largest input schema taken of one of its tools (as JSON); a tool with a larger
    /// one is left out (with a warning).
    #[serde(default = "mcp_max_schema_bytes")]
    pub max_schema_bytes: usize,
    /// stdio: a server that exits is started again after this long, doubled after each
    /// start that did not last a minute, up to 64 times it.
    #[serde(default = "mcp_restart_backoff_ms")]
    pub restart_backoff_ms: u64,
    /// HTTP: calls failing in a row (unreachable, no answer in time) that open its
    /// breaker; while open, calls fail at once.
    #[serde(default = "mcp_breaker_failures")]
    pub breaker_failures: u32,
    /// HTTP: how long an open breaker stays open before one call may try again.
    #[serde(default = "mcp_breaker_open_secs")]
    pub breaker_open_secs: u64,
}

fn mcp_timeout_ms() -> u64 {
    25_000
}
fn mcp_start_timeout_ms() -> u64 {
    10_000
}
fn mcp_max_result_bytes() -> usize {
    1 << 20
}
fn mcp_max_concurrency() -> usize {
    4
}
fn mcp_max_tools() -> usize {
    64
}
fn mcp_max_description_bytes() -> usize {
    4096
}
fn mcp_max_schema_bytes() -> usize {
    32 * 1024
}
fn mcp_restart_backoff_ms() -> u64 {
    500
}
fn mcp_breaker_failures() -> u32 {
    5
}
fn mcp_breaker_open_secs() -> u64 {
    30
}

impl std::fmt::Debug for McpServerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Environment values may be secrets: their names only.
        f.debug_struct("McpServerSettings")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .field("url", &self.url)
            .field("bearer_env", &self.bearer_env)
            .field("tools", &self.tools)
            .field("timeout_ms", &self.timeout_ms)
            .field("start_timeout_ms", &self.start_timeout_ms)
            .field("max_result_bytes", &self.max_result_bytes)
            .field("max_concurrency", &self.max_concurrency)
            .field("max_tools", &self.max_tools)
            .field("max_description_bytes", &self.max_description_bytes)
            .field("max_schema_bytes", &self.max_schema_bytes)
            .field("restart_backoff_ms", &self.restart_backoff_ms)
            .field("breaker_failures", &self.breaker_failures)
            .field("breaker_open_secs", &self.breaker_open_secs)
            .finish()
    }
}

impl McpServerSettings {
    /// The stdio server `name` started as `command args…`, with the default bounds.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>, args: &[&str]) -> Self {
        Self {
            command: command.into(),
            args: args.iter().map(|&a| a.to_owned()).collect(),
            ..Self::empty(name.into())
        }
    }

    /// The Streamable HTTP server `name` at `url`, with the default bounds.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ..Self::empty(name.into())
        }
    }

    fn empty(name: String) -> Self {
        Self {
            name,
            command: String::new(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: String::new(),
            url: String::new(),
            bearer_env: String::new(),
            tools: Vec::new(),
            timeout_ms: mcp_timeout_ms(),
            start_timeout_ms: mcp_start_timeout_ms(),
            max_result_bytes: mcp_max_result_bytes(),
            max_concurrency: mcp_max_concurrency(),
            max_tools: mcp_max_tools(),
            max_description_bytes: mcp_max_description_bytes(),
            max_schema_bytes: mcp_max_schema_bytes(),
            restart_backoff_ms: mcp_restart_backoff_ms(),
            breaker_failures: mcp_breaker_failures(),
            breaker_open_secs: mcp_breaker_open_secs(),
        }
    }

    /// The name a tool of this server has in the agent: `<name>__<tool>`.
    pub fn tool_name(&self, tool: &str) -> String {
        format!("{}__{tool}", self.name)
    }

    pub(super) fn validate(&self, seen: &mut Vec<String>) -> Result<(), ConfigError> {
        let key = "agent.mcp_servers";
        let refuse = |problem: String| Err(ConfigError::Key { key, problem });
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 48
            && !self.name.contains("__")
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !name_ok {
            return refuse(format!(
                "has the name {:?}: 1 to 48 lowercase letters, digits, `_` or `-`, without \
                 `__` (its tools are `<name>__<tool>`)",
                self.name
            ));
        }
        if seen.contains(&self.name) {
            return refuse(format!("names {:?} twice", self.name));
        }
        seen.push(self.name.clone());
        let name = &self.name;
        match (self.command.is_empty(), self.url.is_empty()) {
            (true, true) => {
                return refuse(format!(
                    "{name}: set `command` (a server started over stdio) or `url` (Streamable \
                     HTTP)"
                ));
            }
            (false, false) => {
                return refuse(format!("{name}: set `command` or `url`, not both"));
            }
            (true, false) => {
                let url = reqwest::Url::parse(&self.url).ok();
                if !url
                    .is_some_and(|u| matches!(u.scheme(), "https" | "http") && u.host().is_some())
                {
                    return refuse(format!(
                        "{name}: `url` is {:?}, not an http(s) URL",
                        self.url
                    ));
                }
                if !self.args.is_empty() || !self.env.is_empty() || !self.cwd.is_empty() {
                    return refuse(format!(
                        "{name}: `args`, `env` and `cwd` are for a `command`, not a `url`"
                    ));
                }
            }
            (false, true) => {
                if !self.bearer_env.is_empty() {
                    return refuse(format!(
                        "{name}: `bearer_env` is for a `url`; a command's secrets go in `env`"
                    ));
                }
            }
        }
        for (var, value) in &self.env {
            if var.is_empty() || var.contains('=') || var.contains('\0') || value.contains('\0') {
                return refuse(format!("{name}: `env` holds the variable {var:?}"));
            }
        }
        for (field, value) in [
            ("timeout_ms", self.timeout_ms),
            ("start_timeout_ms", self.start_timeout_ms),
            ("max_result_bytes", self.max_result_bytes as u64),
            ("max_concurrency", self.max_concurrency as u64),
            ("max_tools", self.max_tools as u64),
            ("max_description_bytes", self.max_description_bytes as u64),
            ("max_schema_bytes", self.max_schema_bytes as u64),
            ("restart_backoff_ms", self.restart_backoff_ms),
            ("breaker_failures", u64::from(self.breaker_failures)),
            ("breaker_open_secs", self.breaker_open_secs),
        ] {
            if value == 0 {
                return refuse(format!("{name}: `{field}` must be at least 1"));
            }
        }
        if self.max_result_bytes > 16 << 20 {
            return refuse(format!(
                "{name}: `max_result_bytes` ({}) is over 16777216, the largest message the MCP \
                 client reads",
                self.max_result_bytes
            ));
        }
        if self.tools.len() > self.max_tools {
            return refuse(format!(
                "{name}: `tools` lists {} tools, more than its `max_tools` ({})",
                self.tools.len(),
                self.max_tools
            ));
        }
        Ok(())
    }
}
