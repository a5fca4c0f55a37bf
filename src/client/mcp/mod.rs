//! Model Context Protocol servers as skills: each server of `[[agent.mcp_servers]]` is a
//! skill whose tools are the server's, named `<server>__<tool>`, spoken to with the
//! official Rust SDK (`rmcp`) over a child process's stdin and stdout or over Streamable
//! HTTP.
//!
//! **At start** every server is connected at once, each within its `start_timeout_ms`:
//! the initialize handshake, then `tools/list` to its last page. Its tools (those
//! `tools` allows, at most `max_tools`) are registered with the server's input schemas,
//! which the skill actor checks every call's arguments against. A server that cannot
//! be started, refuses the handshake or offers more tools than allowed stops the start,
//! naming it.
//!
//! **A changed list.** When the server sends `notifications/tools/list_changed`, and
//! after each reconnection (a server started again may offer other tools), the list is
//! read again and replaces the skill's tools; the runtime lists the agent's tools anew
//! ([`Skill::tool_changes`]), so the next turn's model is offered the new ones, direct
//! calls reach them, and removed ones are refused as unknown. A tool `tools` allows that
//! the server no longer offers is left out with a warning, and so is a tool whose
//! description or input schema is past `max_description_bytes` or `max_schema_bytes`
//! (what a server writes there reaches the model and the public card); a list longer
//! than `max_tools` is refused (logged) and the tools stay as they were.
//!
//! **Supervision.** Each server has a task that holds its connection
//! ([`supervise`](fn@supervise)): a stdio server that exits (or whose pipes close) is
//! started again after `restart_backoff_ms`, doubled after each start that did not last
//! a minute (up to 64 times it); an HTTP server whose calls find it unreachable is
//! connected to again the same way (a session the server forgot is re-initialized by the
//! client itself). The child runs in a process group of its own with its stderr logged
//! under the server's name, inherits nothing of this server's environment but `PATH`,
//! `HOME`, `LANG` and `TMPDIR`, and is killed when the skill is dropped; a child whose
//! parent died sees its stdin close, which ends an MCP stdio server.
//!
//! **A call** waits for one of `max_concurrency` permits and for a live connection (one
//! being made; after an attempt that failed, calls fail at once until the next), then
//! sends `tools/call`; all within `timeout_ms`, past which the request is dropped,
//! which sends `notifications/cancelled` to the server (as does a turn canceled
//! meanwhile: the call's future is dropped). Its result — the server's `content` blocks
//! and `structuredContent`, at most `max_result_bytes` as JSON — is the tool's result. A
//! result the server marks `isError`, a JSON-RPC error, a server that is down or slow:
//! each fails the call with [`SkillError::ToolServer`] saying which, which the model is
//! told as the tool's failed result. HTTP calls that found the server unreachable count
//! against its breaker (`breaker_failures` in a row open it for `breaker_open_secs`).
//!
//! Here are the servers' registration and the skill of one ([`McpServerSkill`]: its start
//! and its calls); [`connect`](mod@connect) is how a server is reached and connected to,
//! and what the client hears of it between calls; [`list`] the tool list as the agent
//! takes it; [`supervise`](mod@supervise) the task that holds the connection; [`results`]
//! what a call's answer becomes. [`stdio`] and [`http`] are the transports, [`oversized`]
//! tells a call its answer was too large, and [`budget`] keeps notifications from
//! flooding the log.

mod budget;
mod connect;
mod http;
mod list;
mod oversized;
mod results;
mod stdio;
mod supervise;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest, RequestId,
    ServerResult,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleClient};
use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore, mpsc, watch};

use super::tools::Breaker;
use crate::config::{McpServerSettings, Settings};
use crate::domain::{Part, TenantId};
use crate::outbound::{Secrets, UrlPolicy};
use crate::skills::{
    Caller, ProgressReport, Skill, SkillError, SkillInfo, SkillRegistry, ToolSpec,
};
use crate::telemetry;
use connect::{ENVELOPE_BYTES, Endpoint, connect};
use list::{Listed, Listing, missing_allowed, taken};
use results::{Failure, failure, parts_of, text_of, without_bytes};
use supervise::{Connected, Link, Live, NO_GENERATION, Report, Supervised, supervise};

/// Registers a skill for each of `agent.mcp_servers`, after starting them all at once;
/// the first that cannot be started stops the start, naming it.
pub async fn mcp_servers(settings: &Settings, registry: &mut SkillRegistry) -> Result<(), String> {
    if settings.agent.mcp_servers.is_empty() {
        return Ok(());
    }
    let policy = Arc::new(UrlPolicy::new(&settings.push)?);
    let started = settings.agent.mcp_servers.iter().map(|server| {
        let policy = policy.clone();
        async move { McpServerSkill::start(server, policy).await }
    });
    let started = futures_util::future::join_all(started).await;
    for (server, skill) in settings.agent.mcp_servers.iter().zip(started) {
        let mut skill = skill?;
        skill.denied = denied_tenants(settings, &server.name)?;
        registry.register(Arc::new(skill));
    }
    Ok(())
}

/// The tenants whose API keys' `mcp_servers` leave `server` out.
fn denied_tenants(settings: &Settings, server: &str) -> Result<HashSet<String>, String> {
    let mut denied = HashSet::new();
    for entry in &settings.auth.api_keys {
        let Some(allowed) = &entry.mcp_servers else {
            continue;
        };
        if !allowed.iter().any(|a| a == server) {
            let tenant = TenantId::parse(entry.tenant.clone())
                .map_err(|e| format!("auth.api_keys tenant {:?}: {e}", entry.tenant))?;
            denied.insert(tenant.as_str().to_owned());
        }
    }
    Ok(denied)
}

/// A request sent whose answer is awaited: dropped before [`Awaited::answered`], it
/// tells the server the request is canceled (`notifications/cancelled`), as a call
/// abandoned by its turn (canceled, timed out) must be.
struct Awaited {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Awaited {
    fn answered(mut self) {
        self.id = None;
    }
}

impl Drop for Awaited {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let peer = self.peer.clone();
        tokio::spawn(async move {
            let cancelled =
                CancelledNotificationParam::new(Some(id), Some("the call was abandoned".into()));
            let _ = peer.notify_cancelled(cancelled).await;
        });
    }
}

/// One MCP server, as a skill.
pub struct McpServerSkill {
    info: SkillInfo,
    name: Arc<str>,
    listing: Arc<Listing>,
    live: Live,
    /// Tells the supervisor what an HTTP call found of a connection (a report about an
    /// earlier connection than the live one is ignored).
    reconnect: mpsc::Sender<Report>,
    permits: Semaphore,
    timeout: Duration,
    max_result_bytes: usize,
    /// HTTP: counts calls that found the server unreachable.
    breaker: Option<Breaker>,
    /// Tenants whose API keys' `mcp_servers` leave this server out.
    denied: HashSet<String>,
    /// Its bearer token (HTTP), cut out of everything it answers.
    secrets: Secrets,
    /// Dropped with the skill: the supervisor then closes the connection (and the
    /// child).
    _stop: watch::Sender<()>,
}

impl McpServerSkill {
    /// Starts the server of `settings` (its handshake and tool list within
    /// `start_timeout_ms`) and its supervisor.
    pub async fn start(
        settings: &McpServerSettings,
        policy: Arc<UrlPolicy>,
    ) -> Result<Self, String> {
        let name: Arc<str> = Arc::from(settings.name.as_str());
        let endpoint = Endpoint::of(settings, policy)?;
        let wait = Duration::from_millis(settings.start_timeout_ms);
        let relist = Arc::new(Notify::new());
        let running = connect(&name, &endpoint, wait, &relist)
            .await
            .map_err(|e| format!("agent.mcp_servers {name}: {e}"))?;
        let listed = tokio::time::timeout(wait, running.list_all_tools()).await;
        let tools = match listed {
            Ok(Ok(tools)) => match missing_allowed(settings, &tools) {
                Some(missing) => return Err(missing),
                None => taken(settings, tools)?,
            },
            Ok(Err(e)) => return Err(format!("agent.mcp_servers {name}: tools/list failed: {e}")),
            Err(_) => {
                return Err(format!(
                    "agent.mcp_servers {name}: no tool list within {} ms (start_timeout_ms)",
                    settings.start_timeout_ms
                ));
            }
        };
        let listing = Arc::new(Listing {
            settings: settings.clone(),
            current: ArcSwap::from_pointee(Listed::of(settings, &tools)),
            changed: watch::channel(()).0,
        });
        tracing::info!(server = %name, tools = tools.len(), stdio = endpoint.is_stdio(), "MCP server connected");
        // The first connection, published at once: the supervisor numbers the next ones.
        let first = Connected::of(1, &running);
        let (publish, live) = watch::channel(Link::Up(first));
        let (stop, stopped) = watch::channel(());
        let (reconnect, reconnects) = mpsc::channel(8);
        tokio::spawn(supervise(Supervised {
            name: name.clone(),
            endpoint: endpoint.clone(),
            wait,
            backoff: Duration::from_millis(settings.restart_backoff_ms),
            publish,
            reconnects,
            stopped,
            first: Some(running),
            listing: listing.clone(),
            relist,
        }));
        Ok(Self {
            info: SkillInfo::new(
                format!("mcp-{name}"),
                format!("MCP server {name}"),
                format!("The tools of the MCP server `{name}`."),
            )
            .with_tags(&["mcp"]),
            name,
            listing,
            live,
            reconnect,
            permits: Semaphore::new(settings.max_concurrency),
            timeout: Duration::from_millis(settings.timeout_ms),
            max_result_bytes: settings.max_result_bytes,
            breaker: (!endpoint.is_stdio()).then(|| {
                Breaker::new(
                    settings.breaker_failures,
                    Duration::from_secs(settings.breaker_open_secs),
                )
            }),
            denied: HashSet::new(),
            secrets: Secrets::new(endpoint.bearer()),
            _stop: stop,
        })
    }

    /// Calls `tool` (the server's name) with `arguments`: a permit, a live connection,
    /// and the call (the caller bounds the whole by `timeout_ms`).
    /// The generation of the connection it used goes to `used`.
    async fn call(
        &self,
        tool: &str,
        arguments: Value,
        progress: Option<ProgressReport>,
        used: &AtomicU64,
    ) -> Result<Value, Failure> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| Failure::Down("the server is stopping".into()))?;
        let mut live = self.live.clone();
        let link = match live.wait_for(|l| !matches!(l, Link::Starting)).await {
            Ok(link) => link.clone(),
            Err(_) => return Err(Failure::Down("the server is stopping".into())),
        };
        let connected = match link {
            Link::Up(connected) => connected,
            Link::Down(why) => return Err(Failure::Down(why)),
            Link::Starting => return Err(Failure::Down("not connected".into())),
        };
        used.store(connected.generation, Ordering::Relaxed);
        let peer = connected.peer.clone();
        let arguments = match arguments {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => {
                return Err(Failure::Refused(format!(
                    "arguments must be an object, not {other}"
                )));
            }
        };
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = arguments;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let sent = peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
            .map_err(failure)?;
        // Its progress notifications name the token the request carried.
        let _listening = progress.map(|report| {
            let token = sent.progress_token.clone();
            connected.progress.listen(token, report)
        });
        let awaited = Awaited {
            peer: peer.clone(),
            id: Some(sent.id.clone()),
        };
        let mut too_large = connected.oversized.listen(&sent.id);
        let past = || {
            Failure::TooLarge(format!(
                "a message of more than {} bytes",
                self.max_result_bytes + ENVELOPE_BYTES
            ))
        };
        let answer = tokio::select! {
            biased;
            () = too_large.heard() => return Err(past()),
            answer = sent.await_response() => answer,
        };
        // Streamable HTTP: the transport closes as it is told.
        if answer.is_err() && too_large.was_heard() {
            return Err(past());
        }
        awaited.answered();
        let result = match answer.map_err(failure)? {
            ServerResult::CallToolResult(result) => result,
            _ => return Err(Failure::Garbage("its answer is not a tool's result".into())),
        };
        let mut answer = serde_json::to_value(&result)
            .map_err(|e| Failure::Garbage(format!("its result does not serialize: {e}")))?;
        let size = serde_json::to_vec(&answer)
            .map(|b| b.len())
            .unwrap_or(usize::MAX);
        if size > self.max_result_bytes {
            return Err(Failure::TooLarge(format!("{size} bytes")));
        }
        let Value::Object(fields) = &mut answer else {
            return Err(Failure::Garbage("its result is not an object".into()));
        };
        if fields.remove("isError").and_then(|v| v.as_bool()) == Some(true) {
            return Err(Failure::ToolError(text_of(fields.get("content"))));
        }
        let mut out = serde_json::Map::new();
        out.insert(
            "content".into(),
            fields.remove("content").unwrap_or_else(|| json!([])),
        );
        if let Some(structured) = fields.remove("structuredContent") {
            out.insert("structuredContent".into(), structured);
        }
        Ok(Value::Object(out))
    }
}

#[async_trait]
impl Skill for McpServerSkill {
    fn info(&self) -> &SkillInfo {
        &self.info
    }

    fn tools(&self) -> Vec<ToolSpec> {
        self.listing.current.load().specs.clone()
    }

    fn tool_changes(&self) -> Option<watch::Receiver<()>> {
        Some(self.listing.changed.subscribe())
    }

    async fn invoke(
        &self,
        tool: &str,
        arguments: Value,
        caller: &Caller,
    ) -> Result<Value, SkillError> {
        // Its name on the server, in the list as it is now (not held across the call).
        let on_server = self.listing.current.load().server_names.get(tool).cloned();
        let Some(on_server) = on_server else {
            return Err(SkillError::NotFound(format!(
                "no tool {tool} (the MCP server `{}` no longer offers it)",
                self.name
            )));
        };
        let server = &self.name;
        if !self.admits(&caller.tenant) {
            return Err(SkillError::NotFound(format!(
                "{tool}: this tenant may not use the MCP server `{server}` (its API keys' \
                 mcp_servers)"
            )));
        }
        if let Some(breaker) = &self.breaker
            && !breaker.admit()
        {
            metrics::counter!(telemetry::MCP_CALLS, "server" => server.to_string(), "tool" => on_server.clone(), "outcome" => "breaker_open")
                .increment(1);
            return Err(SkillError::ToolServer(format!(
                "MCP server `{server}` is failing; calls are paused (its breaker is open)"
            )));
        }
        let started = Instant::now();
        let used = AtomicU64::new(NO_GENERATION);
        let outcome = match tokio::time::timeout(
            self.timeout,
            self.call(&on_server, arguments, caller.progress.clone(), &used),
        )
        .await
        {
            Ok(outcome) => outcome,
            // Still waiting for the server to be started again (or reached anew).
            Err(_) if !matches!(*self.live.borrow(), Link::Up(_)) => Err(Failure::Down(
                "not connected within timeout_ms (it is being started or reached again)".into(),
            )),
            // Dropping the call sent `notifications/cancelled` to the server.
            Err(_) => Err(Failure::Slow),
        };
        if let Some(breaker) = &self.breaker {
            breaker.settle(outcome.as_ref().map_or_else(Failure::reached, |_| true));
            let open = if breaker.is_open() { 1.0 } else { 0.0 };
            metrics::gauge!(telemetry::MCP_BREAKER_OPEN, "server" => server.to_string()).set(open);
        }
        let label = outcome.as_ref().map_or_else(Failure::label, |_| "ok");
        metrics::counter!(telemetry::MCP_CALLS, "server" => server.to_string(), "tool" => on_server.clone(), "outcome" => label)
            .increment(1);
        metrics::histogram!(telemetry::MCP_CALL_MS, "server" => server.to_string(), "tool" => on_server.clone())
            .record(started.elapsed().as_secs_f64() * 1e3);
        let outcome = outcome.map(|mut result| {
            self.secrets.value(&mut result);
            result
        });
        outcome.map_err(|failure| {
            let generation = used.load(Ordering::Relaxed);
            if generation != NO_GENERATION {
                // A stdio server that is down has exited (its connection ends by
                // itself); one that does not answer is asked too.
                let report = match failure {
                    Failure::Down(_) if self.breaker.is_some() => {
                        Some(Report::Unreachable(generation))
                    }
                    Failure::Slow => Some(Report::Unanswered(generation)),
                    _ => None,
                };
                // Full: the supervisor has been told already.
                if let Some(report) = report {
                    let _ = self.reconnect.try_send(report);
                }
            }
            SkillError::ToolServer(self.secrets.text(match failure {
                Failure::Refused(why) => format!("MCP server `{server}` refused {on_server}: {why}"),
                // The actor says which tool failed; the server says why.
                Failure::ToolError(text) => text,
                Failure::Slow => format!(
                    "MCP server `{server}` did not answer {on_server} within {} ms (timeout_ms); the call was canceled",
                    self.timeout.as_millis()
                ),
                Failure::Down(why) => format!("MCP server `{server}` is unreachable: {why}"),
                Failure::TooLarge(size) => format!(
                    "MCP server `{server}` answered {on_server} with {size}, more than its max_result_bytes ({})",
                    self.max_result_bytes
                ),
                Failure::Garbage(why) => format!("MCP server `{server}` answered {on_server} unreadably: {why}"),
            }))
        })
    }

    /// Image and audio bytes, and embedded binary resources, stay out of the model's
    /// context (a base64 screenshot is hundreds of thousands of tokens): each is
    /// replaced by what it is and its size. Direct callers get them whole.
    fn for_model(&self, _tool: &str, result: Value) -> Value {
        without_bytes(result)
    }

    fn parts(&self, _tool: &str, result: &Value) -> Option<Vec<Part>> {
        Some(parts_of(result))
    }

    fn admits(&self, tenant: &TenantId) -> bool {
        !self.denied.contains(tenant.as_str())
    }

    // No `health`: a server being down is not this server's outage, as a remote
    // agent's is not; `/health/ready` names it (and `agent_a2a_mcp_server_up` says it).
    fn connection(&self) -> Option<(String, bool)> {
        let up = match &*self.live.borrow() {
            Link::Up(c) => !c.peer.is_transport_closed(),
            Link::Starting | Link::Down(_) => false,
        };
        Some((format!("mcp:{}", self.name), up))
    }
}
