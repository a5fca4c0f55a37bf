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
//! **Supervision.** Each server has a task that holds its connection ([`supervise`]): a
//! stdio server that exits (or whose pipes close) is started again after
//! `restart_backoff_ms`, doubled after each start that did not last a minute (up to 64
//! times it); an HTTP server whose calls find it unreachable is connected to again the
//! same way (a session the server forgot is re-initialized by the client itself). The
//! child runs in a process group of its own with its stderr logged under the server's
//! name, inherits nothing of this server's environment but `PATH`, `HOME`, `LANG` and
//! `TMPDIR`, and is killed when the skill is dropped; a child whose parent died sees
//! its stdin close, which ends an MCP stdio server.
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

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientCapabilities,
    ClientConfig, ClientRequest, Implementation, PingRequest, ProgressNotificationParam,
    ProgressToken, ProtocolVersion, RequestId, ServerResult, Tool,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, Peer, RoleClient, ServiceError, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::{Notify, Semaphore, mpsc, watch};

mod budget;
mod http;
mod oversized;
mod stdio;

use super::tools::Breaker;
use crate::config::{McpServerSettings, Settings};
use crate::domain::{Part, PartContent, TenantId};
use crate::outbound::Secrets;
use crate::outbound::UrlPolicy;
use crate::skills::{
    Caller, ProgressReport, Skill, SkillError, SkillInfo, SkillRegistry, ToolProgress, ToolSpec,
    output,
};
use crate::telemetry;

/// The variables a stdio server inherits from this server's environment.
const INHERITED_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TMPDIR"];

/// A start that lasted this long resets the restart backoff.
const STEADY: Duration = Duration::from_secs(60);

/// The longest stderr line logged whole; longer ones are cut (the log's line, not a bound
/// on anything a client sends).
const MAX_LOG_LINE: usize = 2048;

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

/// How a server is reached, resolved from its settings at start.
#[derive(Clone)]
enum Endpoint {
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        cwd: Option<String>,
        /// The longest line it may write ([`max_message_bytes`]).
        max_line: usize,
    },
    Http {
        url: String,
        bearer: Option<String>,
        client: reqwest::Client,
        /// The largest answer or event it may send ([`max_message_bytes`]).
        max_message: usize,
    },
}

/// The largest message a server may send: its `max_result_bytes` and room for the
/// JSON-RPC envelope. Bounded before it is decoded, so that what a server sends costs
/// memory in proportion to that bound, not to the number of pieces it holds.
fn max_message_bytes(settings: &McpServerSettings) -> usize {
    settings.max_result_bytes.saturating_add(ENVELOPE_BYTES)
}

/// Room for a message's JSON-RPC envelope beside a result of `max_result_bytes`.
const ENVELOPE_BYTES: usize = 64 * 1024;

impl Endpoint {
    /// The bearer token it is given (HTTP).
    fn bearer(&self) -> Option<&str> {
        match self {
            Endpoint::Http { bearer, .. } => bearer.as_deref(),
            Endpoint::Stdio { .. } => None,
        }
    }

    fn of(settings: &McpServerSettings, policy: Arc<UrlPolicy>) -> Result<Self, String> {
        let name = &settings.name;
        if !settings.url.is_empty() {
            let url = policy
                .check_url(&settings.url)
                .map_err(|e| format!("agent.mcp_servers {name}: {e}"))?;
            let bearer = match settings.bearer_env.as_str() {
                "" => None,
                var => Some(std::env::var(var).map_err(|_| {
                    format!("agent.mcp_servers {name}: bearer_env names {var}, which is not set")
                })?),
            };
            // The client's TLS needs the process's crypto provider (a second install is
            // refused, harmlessly).
            let _ = rustls::crypto::ring::default_provider().install_default();
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(Duration::from_millis(settings.start_timeout_ms))
                .dns_resolver(Arc::new(crate::outbound::CheckedResolver { policy }))
                .user_agent(concat!("agent-a2a/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|e| format!("agent.mcp_servers {name}: client: {e}"))?;
            return Ok(Endpoint::Http {
                url: url.to_string(),
                bearer,
                client,
                max_message: max_message_bytes(settings),
            });
        }
        let mut env = Vec::new();
        for var in INHERITED_ENV {
            if let Ok(value) = std::env::var(var) {
                env.push((var.to_owned(), value));
            }
        }
        for (var, value) in &settings.env {
            let value = match value.strip_prefix("${").and_then(|v| v.strip_suffix('}')) {
                Some(from) => std::env::var(from).map_err(|_| {
                    format!("agent.mcp_servers {name}: env {var} names {from}, which is not set")
                })?,
                None => value.clone(),
            };
            env.retain(|(v, _)| v != var);
            env.push((var.clone(), value));
        }
        Ok(Endpoint::Stdio {
            command: settings.command.clone(),
            args: settings.args.clone(),
            env,
            cwd: (!settings.cwd.is_empty()).then(|| settings.cwd.clone()),
            max_line: max_message_bytes(settings),
        })
    }

    fn is_stdio(&self) -> bool {
        matches!(self, Endpoint::Stdio { .. })
    }
}

/// What the client tells the server, and hears of it between calls.
#[derive(Clone)]
struct Handler {
    server: Arc<str>,
    /// Asks the supervisor to read the tool list again (shared by the server's
    /// connections).
    relist: Arc<Notify>,
    /// The calls in flight on this connection that listen to their progress.
    progress: Arc<Progress>,
    /// The calls in flight on this connection told when their answer is too large
    /// (stdio: the line is dropped undecoded).
    oversized: Arc<oversized::Oversized>,
    /// How many of its log messages, and of its tool list changes, are logged.
    messages: Arc<budget::Budget>,
    list_changes: Arc<budget::Budget>,
}

/// What a call found of the connection it used (by the connection's generation).
#[derive(Debug, Clone, Copy)]
enum Report {
    /// The server could not be reached: connect anew.
    Unreachable(u64),
    /// No answer within the call's timeout: ping, and connect anew if that goes
    /// unanswered too.
    Unanswered(u64),
}

/// Where each call in flight on a connection reports progress, by the progress token
/// its request carried (tokens are numbered per connection).
#[derive(Default)]
struct Progress(std::sync::Mutex<HashMap<ProgressToken, ProgressReport>>);

impl Progress {
    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<ProgressToken, ProgressReport>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Passes the progress notifications naming `token` to `report` until the
    /// returned guard is dropped.
    fn listen(&self, token: ProgressToken, report: ProgressReport) -> Listening<'_> {
        self.calls().insert(token.clone(), report);
        Listening {
            progress: self,
            token,
        }
    }
}

/// A call's progress reporting, while the call is in flight: ends when dropped.
struct Listening<'a> {
    progress: &'a Progress,
    token: ProgressToken,
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.progress.calls().remove(&self.token);
    }
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

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("agent-a2a", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        metrics::counter!(telemetry::MCP_TOOL_LIST_CHANGES, "server" => self.server.to_string())
            .increment(1);
        if let budget::Admit::Log { left_out } = self.list_changes.admit(Instant::now()) {
            if left_out > 0 {
                tracing::info!(server = %self.server, left_out, "MCP server's tool list changes not logged in the last 10 s");
            }
            tracing::info!(server = %self.server, "MCP server's tool list changed; reading it again");
        }
        // Changes heard while a read is pending are taken by that read.
        self.relist.notify_one();
    }

    /// A server's log message: counted, and logged within its budget. (Deprecated by
    /// SEP-2577; servers still send them.)
    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        metrics::counter!(telemetry::MCP_LOG_MESSAGES, "server" => self.server.to_string())
            .increment(1);
        if let budget::Admit::Log { left_out } = self.messages.admit(Instant::now()) {
            if left_out > 0 {
                tracing::info!(server = %self.server, left_out, "MCP server's log messages not logged in the last 10 s");
            }
            let mut data = params.data.to_string();
            if data.len() > MAX_LOG_LINE {
                let cut = (0..=MAX_LOG_LINE)
                    .rev()
                    .find(|&i| data.is_char_boundary(i))
                    .unwrap_or(0);
                data.truncate(cut);
                data.push('…');
            }
            tracing::info!(target: "agent_a2a::mcp::message", server = %self.server, level = ?params.level, "{data}");
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        // A call no longer in flight (or one nobody listens to) hears nothing.
        let report = self.progress.calls().get(&params.progress_token).cloned();
        if let Some(report) = report {
            report.report(ToolProgress {
                progress: params.progress,
                total: params.total,
                message: params.message,
            });
        }
    }
}

type Running = RunningService<RoleClient, Handler>;

/// Connects to `endpoint`: starts the child or opens the HTTP session, and makes the
/// handshake, within `wait`.
async fn connect(
    name: &Arc<str>,
    endpoint: &Endpoint,
    wait: Duration,
    relist: &Arc<Notify>,
) -> Result<Running, String> {
    let handler = Handler {
        server: name.clone(),
        relist: relist.clone(),
        progress: Arc::default(),
        oversized: Arc::default(),
        messages: Arc::default(),
        list_changes: Arc::default(),
    };
    let serving = async {
        match endpoint {
            Endpoint::Stdio {
                command,
                args,
                env,
                cwd,
                max_line,
            } => {
                use std::process::Stdio;
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).env_clear().envs(env.iter().cloned());
                cmd.stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                if let Some(cwd) = cwd {
                    cmd.current_dir(cwd);
                }
                let mut wrapped = process_wrap::tokio::CommandWrap::from(cmd);
                wrapped
                    .wrap(process_wrap::tokio::ProcessGroup::leader())
                    .wrap(process_wrap::tokio::KillOnDrop);
                let mut child = wrapped
                    .spawn()
                    .map_err(|e| format!("{command} could not be started: {e}"))?;
                if let Some(stderr) = child.stderr().take() {
                    tokio::spawn(log_stderr(name.clone(), stderr));
                }
                let transport =
                    stdio::ChildTransport::new(child, *max_line, handler.oversized.clone())
                        .map_err(|e| format!("{command}: {e}"))?;
                handler
                    .serve(transport)
                    .await
                    .map_err(|e| format!("handshake failed: {e}"))
            }
            Endpoint::Http {
                url,
                bearer,
                client,
                max_message,
            } => {
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                config.max_json_response_size = *max_message;
                config.max_sse_event_size = *max_message;
                if let Some(bearer) = bearer {
                    config = config.auth_header(bearer.clone());
                }
                // Its stream of server notifications reconnects a few times, then the
                // next failed call connects anew.
                let mut backoff = ExponentialBackoff::default();
                backoff.max_times = Some(5);
                backoff.max_delay = Some(Duration::from_secs(30));
                config.retry_config = Arc::new(backoff);
                let unsent = Arc::<std::sync::Mutex<Option<String>>>::default();
                let client = http::Watching {
                    client: client.clone(),
                    oversized: handler.oversized.clone(),
                    unsent: unsent.clone(),
                };
                let transport =
                    rmcp::transport::StreamableHttpClientTransport::with_client(client, config);
                handler.serve(transport).await.map_err(|e| {
                    // The token is never part of an error's text (it travels in a header);
                    // why a request was not sent is (a refusal by the URL policy's
                    // resolver among the causes).
                    let unsent = unsent.lock().unwrap_or_else(|e| e.into_inner()).take();
                    match unsent {
                        Some(why) => format!("handshake failed: {why}"),
                        None => format!("handshake failed: {e}"),
                    }
                })
            }
        }
    };
    match tokio::time::timeout(wait, serving).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "no handshake within {} ms (start_timeout_ms)",
            wait.as_millis()
        )),
    }
}

/// Logs the child's stderr, line by line, under the server's name, within a budget
/// ([`budget::STDERR_LINES`] per window; the rest counted in one line).
async fn log_stderr(server: Arc<str>, stderr: tokio::process::ChildStderr) {
    let budget = budget::Budget::of(budget::STDERR_LINES);
    stderr_lines(stderr, MAX_LOG_LINE, |line| {
        if let budget::Admit::Log { left_out } = budget.admit(Instant::now()) {
            if left_out > 0 {
                tracing::info!(target: "agent_a2a::mcp::stderr", server = %server, left_out, "lines of the server's stderr not logged in the last 10 s");
            }
            tracing::info!(target: "agent_a2a::mcp::stderr", server = %server, "{line}");
        }
    })
    .await;
}

/// Reads `reader` to its end and gives `each` line, at most `max` bytes of it (a longer
/// one is cut and says so; bytes that are not UTF-8 are replaced). It keeps reading
/// whatever the child writes — a child whose stderr is not drained blocks — and holds at
/// most `max` bytes of a line in memory, however long the line.
async fn stderr_lines<R: tokio::io::AsyncRead + Unpin>(
    reader: R,
    max: usize,
    mut each: impl FnMut(&str),
) {
    use tokio::io::AsyncBufReadExt;
    let mut reader = tokio::io::BufReader::new(reader);
    let mut line = Vec::new();
    let mut cut = false;
    let mut emit = |line: &mut Vec<u8>, cut: &mut bool| {
        let text = String::from_utf8_lossy(line);
        match std::mem::take(cut) {
            true => each(&format!("{text}… (cut at {max} bytes)")),
            false => each(&text),
        }
        line.clear();
    };
    loop {
        let chunk = match reader.fill_buf().await {
            Ok(chunk) if !chunk.is_empty() => chunk,
            _ => break,
        };
        let end = chunk.iter().position(|&b| b == b'\n');
        let taken = end.unwrap_or(chunk.len());
        let room = max.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..taken.min(room)]);
        cut |= taken > room;
        reader.consume(end.map_or(taken, |at| at + 1));
        if end.is_some() {
            emit(&mut line, &mut cut);
        }
    }
    if !line.is_empty() || cut {
        emit(&mut line, &mut cut);
    }
}

/// Why a tool list falls short of the server's `tools` allowlist (a tool it allows that
/// the list lacks), if it does.
fn missing_allowed(settings: &McpServerSettings, tools: &[Tool]) -> Option<String> {
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
fn taken(settings: &McpServerSettings, tools: Vec<Tool>) -> Result<Vec<Tool>, String> {
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

/// The server's connection as the callers see it.
type Live = watch::Receiver<Link>;

/// Where the server's connection stands.
#[derive(Clone)]
enum Link {
    Up(Connected),
    /// Being made (again): calls wait for it, within their timeout.
    Starting,
    /// The last attempt failed, for this reason; calls fail at once until the next
    /// attempt (after the backoff) starts.
    Down(String),
}

/// A connection, and which of the server's connections it is (counting from 1).
#[derive(Clone)]
struct Connected {
    generation: u64,
    peer: Peer<RoleClient>,
    /// Its calls in flight that listen to their progress.
    progress: Arc<Progress>,
    oversized: Arc<oversized::Oversized>,
}

impl Connected {
    fn of(generation: u64, running: &Running) -> Connected {
        Connected {
            generation,
            peer: running.peer().clone(),
            progress: running.service().progress.clone(),
            oversized: running.service().oversized.clone(),
        }
    }
}

/// No connection was used (the call did not get one).
const NO_GENERATION: u64 = 0;

/// The server's tools as the agent takes them, replaced whole when the list changes.
struct Listed {
    specs: Vec<ToolSpec>,
    /// Each tool's name on the server, by its name here.
    server_names: HashMap<String, String>,
}

impl Listed {
    fn of(settings: &McpServerSettings, tools: &[Tool]) -> Listed {
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
struct Listing {
    settings: McpServerSettings,
    current: ArcSwap<Listed>,
    /// Told each time `current` changes ([`Skill::tool_changes`]).
    changed: watch::Sender<()>,
}

impl Listing {
    /// Takes `tools`, the server's list read again: replaces the skill's tools when they
    /// differ (leaving out allowed ones that are gone, with a warning), or keeps them
    /// when the list is past `max_tools`.
    fn take(&self, tools: Vec<Tool>) {
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

/// Why a request failed, as a call's failure.
fn failure(error: ServiceError) -> Failure {
    match error {
        // A Streamable HTTP server that forgot the session and says so with a 400 rather
        // than the 404 the client re-initializes on: connect anew.
        ServiceError::McpError(error)
            if error.code.0 == -32000 && error.message.to_lowercase().contains("session") =>
        {
            Failure::Down(format!("the server forgot the session: {}", error.message))
        }
        ServiceError::McpError(error) => Failure::Refused(format!(
            "{} (JSON-RPC error {})",
            error.message, error.code.0
        )),
        ServiceError::Timeout { .. } => Failure::Slow,
        // Streamable HTTP: an answer past `max_json_response_size`, dropped undecoded.
        other if other.to_string().contains("exceeded the maximum size") => {
            Failure::TooLarge(format!("an answer {other}"))
        }
        other => Failure::Down(other.to_string()),
    }
}

/// The text blocks of a result's `content`, joined.
fn text_of(content: Option<&Value>) -> String {
    let texts: Vec<&str> = content
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect();
    if texts.is_empty() {
        "(no text)".into()
    } else {
        texts.join("\n")
    }
}

/// A result's pieces as parts of their kinds, for a direct call's artifact: a text
/// block is a text part; an image or audio block, or an embedded binary resource, a
/// part of its bytes with its media type; an embedded text resource a text part with
/// its media type; a resource link a URL part (its name as the filename); a block of
/// another kind (or whose bytes are not base64) a data part holding the block; and the
/// structured content, last, a JSON data part. A resource's URI is in its part's
/// metadata (`uri`). A result with no pieces is one data part holding it.
fn parts_of(result: &Value) -> Vec<Part> {
    use base64::Engine as _;
    let bytes = |data: &Value| {
        let text = data.as_str()?;
        base64::engine::general_purpose::STANDARD.decode(text).ok()
    };
    let typed = |content: PartContent, media: &Value| Part {
        media_type: media.as_str().map(str::to_owned),
        ..Part::of(content)
    };
    let with_uri = |mut part: Part, uri: &Value| {
        if let Some(uri) = uri.as_str() {
            part.metadata
                .get_or_insert_with(Default::default)
                .insert("uri".into(), json!(uri));
        }
        part
    };
    let mut parts = Vec::new();
    for block in result["content"].as_array().into_iter().flatten() {
        let part = match block["type"].as_str() {
            Some("text") => block["text"].as_str().map(Part::text),
            Some("image" | "audio") => {
                bytes(&block["data"]).map(|raw| typed(PartContent::Raw(raw), &block["mimeType"]))
            }
            Some("resource") => {
                let resource = &block["resource"];
                let content = match (resource["text"].as_str(), bytes(&resource["blob"])) {
                    (Some(text), _) => Some(PartContent::Text(text.to_owned())),
                    (None, Some(raw)) => Some(PartContent::Raw(raw)),
                    (None, None) => None,
                };
                content.map(|c| with_uri(typed(c, &resource["mimeType"]), &resource["uri"]))
            }
            Some("resource_link") => block["uri"].as_str().map(|uri| Part {
                filename: block["name"].as_str().map(str::to_owned),
                ..typed(PartContent::Url(uri.to_owned()), &block["mimeType"])
            }),
            _ => None,
        };
        parts.push(part.unwrap_or_else(|| Part::data(block.clone())));
    }
    if let Some(structured) = result.get("structuredContent") {
        parts.push(Part {
            media_type: Some("application/json".into()),
            ..Part::data(structured.clone())
        });
    }
    if parts.is_empty() {
        parts.push(Part::data(result.clone()));
    }
    parts
}

/// `result` with the base64 of its image and audio blocks and embedded binary
/// resources replaced by what they are and their size.
fn without_bytes(mut result: Value) -> Value {
    if let Some(blocks) = result.get_mut("content").and_then(Value::as_array_mut) {
        for block in blocks {
            let kind = block["type"].as_str().unwrap_or_default().to_owned();
            let media = block["mimeType"].as_str().unwrap_or("unknown").to_owned();
            match kind.as_str() {
                "image" | "audio" => elide(block, "data", &format!("{kind} {media}")),
                "resource" => {
                    let resource = &mut block["resource"];
                    let media = resource["mimeType"]
                        .as_str()
                        .unwrap_or("unknown")
                        .to_owned();
                    elide(resource, "blob", &format!("resource {media}"));
                }
                _ => {}
            }
        }
    }
    result
}

/// Replaces the base64 text at `field` of `block` (if there is one) by a note of what
/// it was.
fn elide(block: &mut Value, field: &str, what: &str) {
    if let Some(Value::String(data)) = block.get(field) {
        let padding = data.bytes().rev().take_while(|&b| b == b'=').count();
        let bytes = (data.len() / 4 * 3).saturating_sub(padding);
        block[field] = Value::String(format!("({what}, ~{bytes} bytes, not shown to the model)"));
    }
}

/// Why a call failed.
#[derive(Debug)]
enum Failure {
    /// The server answered with a JSON-RPC error.
    Refused(String),
    /// The tool ran and says it failed (`isError`).
    ToolError(String),
    /// No answer within `timeout_ms`.
    Slow,
    /// Not connected, or the connection broke.
    Down(String),
    /// The answer was larger than `max_result_bytes` (how large it was, or how large it
    /// was found to be before it was dropped).
    TooLarge(String),
    /// The answer could not be read.
    Garbage(String),
}

impl Failure {
    /// Whether the server was reached (for its breaker).
    fn reached(&self) -> bool {
        !matches!(self, Failure::Slow | Failure::Down(_))
    }

    fn label(&self) -> &'static str {
        match self {
            Failure::Refused(_) => "refused",
            Failure::ToolError(_) => "tool_error",
            Failure::Slow => "timeout",
            Failure::Down(_) => "unreachable",
            Failure::TooLarge(_) => "too_large",
            Failure::Garbage(_) => "garbage",
        }
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

/// What a server's supervisor holds.
struct Supervised {
    name: Arc<str>,
    endpoint: Endpoint,
    wait: Duration,
    backoff: Duration,
    publish: watch::Sender<Link>,
    reconnects: mpsc::Receiver<Report>,
    stopped: watch::Receiver<()>,
    /// The connection made at start.
    first: Option<Running>,
    listing: Arc<Listing>,
    /// Notified when the server says its tool list changed.
    relist: Arc<Notify>,
}

/// Holds a server's connection: waits for it to end (the child exited, the pipes closed)
/// or for a call to find it unreachable, then connects anew after the backoff; closes it
/// (and stops the child) when the skill is dropped.
async fn supervise(mut s: Supervised) {
    let mut delay = s.backoff;
    let mut running = s.first.take();
    // The first connection is published as generation 1.
    let mut generation = 1;
    let mut first = true;
    loop {
        if let Some(service) = running.take() {
            let since = Instant::now();
            let peer = service.peer().clone();
            if !std::mem::take(&mut first) {
                generation += 1;
                let _ = s
                    .publish
                    .send(Link::Up(Connected::of(generation, &service)));
                // A server started again may offer other tools.
                s.relist.notify_one();
            }
            metrics::gauge!(telemetry::MCP_SERVER_UP, "server" => s.name.to_string()).set(1.0);
            let cancel = service.cancellation_token();
            let waiting = service.waiting();
            tokio::pin!(waiting);
            let ended = loop {
                tokio::select! {
                    reason = &mut waiting => break format!("{reason:?}"),
                    _ = s.relist.notified() => {
                        match tokio::time::timeout(s.wait, peer.list_all_tools()).await {
                            Ok(Ok(tools)) => s.listing.take(tools),
                            Ok(Err(e)) => tracing::warn!(server = %s.name, error = %e, "MCP server's tool list could not be read again; its tools stay as they were"),
                            Err(_) => tracing::warn!(server = %s.name, "MCP server's tool list not read again within start_timeout_ms; its tools stay as they were"),
                        }
                    }
                    asked = s.reconnects.recv() => match asked {
                        Some(Report::Unreachable(g)) if g == generation => {
                            cancel.cancel();
                            break "a call found it unreachable".to_owned();
                        }
                        // A call not answered in time: a server that forgot the session
                        // can answer with an error that names no request (which leaves
                        // calls waiting), so a ping says whether the session still works.
                        Some(Report::Unanswered(g)) if g == generation => {
                            let ping = ClientRequest::PingRequest(PingRequest::default());
                            match tokio::time::timeout(s.wait, peer.send_request(ping)).await {
                                Ok(Ok(_)) => {}
                                _ => {
                                    cancel.cancel();
                                    break "a call and a ping went unanswered".to_owned();
                                }
                            }
                        }
                        // About a connection before this one.
                        Some(_) => {}
                        // The skill is gone.
                        None => {
                            cancel.cancel();
                            return;
                        }
                    },
                    _ = s.stopped.changed() => {
                        let _ = s.publish.send(Link::Down("the server is stopping".into()));
                        cancel.cancel();
                        return;
                    }
                }
            };
            let _ = s.publish.send(Link::Starting);
            metrics::gauge!(telemetry::MCP_SERVER_UP, "server" => s.name.to_string()).set(0.0);
            tracing::warn!(server = %s.name, ended = %ended, "MCP server connection ended; connecting again");
            delay = if since.elapsed() >= STEADY {
                s.backoff
            } else {
                delay
            };
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = s.stopped.changed() => return,
        }
        delay = (delay * 2).min(s.backoff * 64);
        metrics::counter!(telemetry::MCP_RESTARTS, "server" => s.name.to_string()).increment(1);
        let _ = s.publish.send(Link::Starting);
        match connect(&s.name, &s.endpoint, s.wait, &s.relist).await {
            Ok(service) => running = Some(service),
            Err(e) => {
                tracing::warn!(server = %s.name, error = %e, "MCP server could not be connected; trying again");
                let _ = s.publish.send(Link::Down(format!("not connected: {e}")));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tool of the server named `name`, with an empty input schema.
    fn tool(name: &str) -> Tool {
        Tool::new(name.to_owned(), "a tool", Arc::new(serde_json::Map::new()))
    }

    #[tokio::test]
    async fn stderr_is_read_to_its_end_in_lines_cut_at_the_bound() {
        let mut input = b"first\nsecond line\n".to_vec();
        input.extend_from_slice(&[b'x'; 100]);
        input.extend_from_slice(b"\nbad \xff byte\nlast without newline");
        let mut lines = Vec::new();
        stderr_lines(&input[..], 16, |l| lines.push(l.to_owned())).await;
        assert_eq!(
            lines,
            [
                "first",
                "second line",
                "xxxxxxxxxxxxxxxx… (cut at 16 bytes)",
                "bad \u{fffd} byte",
                "last without new… (cut at 16 bytes)",
            ]
        );
    }

    #[test]
    fn a_results_pieces_become_parts_of_their_kinds() {
        let result = json!({
            "content": [
                {"type": "text", "text": "here"},
                {"type": "image", "mimeType": "image/png", "data": "aGk="},
                {"type": "audio", "mimeType": "audio/wav", "data": "not base64!"},
                {"type": "resource", "resource": {"uri": "file:///a.zip", "mimeType": "application/zip", "blob": "UEs="}},
                {"type": "resource", "resource": {"uri": "file:///b.md", "mimeType": "text/markdown", "text": "# b"}},
                {"type": "resource_link", "uri": "https://example.com/c.pdf", "name": "c.pdf", "mimeType": "application/pdf"},
                {"type": "hologram", "x": 1},
            ],
            "structuredContent": {"n": 1},
        });
        let parts: Vec<Value> = parts_of(&result)
            .iter()
            .map(|p| serde_json::to_value(p).unwrap())
            .collect();
        assert_eq!(
            parts,
            [
                json!({"content": {"text": "here"}}),
                json!({"content": {"raw": "aGk="}, "media_type": "image/png"}),
                json!({"content": {"data": {"type": "audio", "mimeType": "audio/wav", "data": "not base64!"}}}),
                json!({"content": {"raw": "UEs="}, "media_type": "application/zip", "metadata": {"uri": "file:///a.zip"}}),
                json!({"content": {"text": "# b"}, "media_type": "text/markdown", "metadata": {"uri": "file:///b.md"}}),
                json!({"content": {"url": "https://example.com/c.pdf"}, "filename": "c.pdf", "media_type": "application/pdf"}),
                json!({"content": {"data": {"type": "hologram", "x": 1}}}),
                json!({"content": {"data": {"n": 1}}, "media_type": "application/json"}),
            ]
        );
        assert_eq!(
            parts_of(&json!({"content": []})),
            [Part::data(json!({"content": []}))]
        );
    }

    #[test]
    fn a_model_is_shown_what_binary_blocks_are_not_their_bytes() {
        let result = json!({
            "content": [
                {"type": "text", "text": "here"},
                {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
                {"type": "audio", "mimeType": "audio/wav", "data": "UklGRg=="},
                {"type": "resource", "resource": {"uri": "file:///a", "mimeType": "application/zip", "blob": "UEsDBA=="}},
                {"type": "resource", "resource": {"uri": "file:///b", "text": "plain"}},
            ],
            "structuredContent": {"n": 1},
        });
        let shown = without_bytes(result);
        assert_eq!(
            shown,
            json!({
                "content": [
                    {"type": "text", "text": "here"},
                    {"type": "image", "mimeType": "image/png", "data": "(image image/png, ~8 bytes, not shown to the model)"},
                    {"type": "audio", "mimeType": "audio/wav", "data": "(audio audio/wav, ~4 bytes, not shown to the model)"},
                    {"type": "resource", "resource": {"uri": "file:///a", "mimeType": "application/zip", "blob": "(resource application/zip, ~4 bytes, not shown to the model)"}},
                    {"type": "resource", "resource": {"uri": "file:///b", "text": "plain"}},
                ],
                "structuredContent": {"n": 1},
            })
        );
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
