//! Connecting to a server: how it is reached, resolved from its settings at start
//! ([`Endpoint`]: a child process over stdio, or Streamable HTTP), the handshake made
//! within `start_timeout_ms` ([`connect`]), and what the client hears of the server
//! between calls ([`Handler`]: its tool list changed, its log messages, the progress of
//! the calls in flight). A stdio child's stderr is logged under the server's name, within
//! a budget.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProgressToken,
    ProtocolVersion,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::sync::Notify;

use super::{budget, http, oversized, stdio};
use crate::config::McpServerSettings;
use crate::outbound::UrlPolicy;
use crate::skills::{ProgressReport, ToolProgress};
use crate::telemetry;

/// The variables a stdio server inherits from this server's environment.
const INHERITED_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TMPDIR"];

/// The longest stderr line logged whole; longer ones are cut (the log's line, not a bound
/// on anything a client sends).
const MAX_LOG_LINE: usize = 2048;

/// How a server is reached, resolved from its settings at start.
#[derive(Clone)]
pub(super) enum Endpoint {
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
pub(super) const ENVELOPE_BYTES: usize = 64 * 1024;

impl Endpoint {
    /// The bearer token it is given (HTTP).
    pub(super) fn bearer(&self) -> Option<&str> {
        match self {
            Endpoint::Http { bearer, .. } => bearer.as_deref(),
            Endpoint::Stdio { .. } => None,
        }
    }

    pub(super) fn of(settings: &McpServerSettings, policy: Arc<UrlPolicy>) -> Result<Self, String> {
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

    pub(super) fn is_stdio(&self) -> bool {
        matches!(self, Endpoint::Stdio { .. })
    }
}

/// What the client tells the server, and hears of it between calls.
#[derive(Clone)]
pub(super) struct Handler {
    server: Arc<str>,
    /// Asks the supervisor to read the tool list again (shared by the server's
    /// connections).
    relist: Arc<Notify>,
    /// The calls in flight on this connection that listen to their progress.
    pub(super) progress: Arc<Progress>,
    /// The calls in flight on this connection told when their answer is too large
    /// (stdio: the line is dropped undecoded).
    pub(super) oversized: Arc<oversized::Oversized>,
    /// How many of its log messages, and of its tool list changes, are logged.
    messages: Arc<budget::Budget>,
    list_changes: Arc<budget::Budget>,
}

/// Where each call in flight on a connection reports progress, by the progress token
/// its request carried (tokens are numbered per connection).
#[derive(Default)]
pub(super) struct Progress(std::sync::Mutex<HashMap<ProgressToken, ProgressReport>>);

impl Progress {
    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<ProgressToken, ProgressReport>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Passes the progress notifications naming `token` to `report` until the
    /// returned guard is dropped.
    pub(super) fn listen(&self, token: ProgressToken, report: ProgressReport) -> Listening<'_> {
        self.calls().insert(token.clone(), report);
        Listening {
            progress: self,
            token,
        }
    }
}

/// A call's progress reporting, while the call is in flight: ends when dropped.
pub(super) struct Listening<'a> {
    progress: &'a Progress,
    token: ProgressToken,
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.progress.calls().remove(&self.token);
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

pub(super) type Running = RunningService<RoleClient, Handler>;

/// Connects to `endpoint`: starts the child or opens the HTTP session, and makes the
/// handshake, within `wait`.
pub(super) async fn connect(
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
