//! `[server]` and `[streaming]`: the listeners, what every response shares, and SSE
//! streams.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::{ConfigError, positive};

/// The most `server.max_connections` and `streaming.max_streams` (and `reserved_fds`):
/// far past what one process can hold open.
const MAX_CONNECTIONS: usize = 10_000_000;

/// The listeners and what every response shares (`[server]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSettings {
    /// `HOST:PORT` to listen on.
    pub bind: String,
    /// Base URL advertised in the agent card; empty: `http://<bind>`.
    pub public_url: String,
    /// `HOST:PORT` of the gRPC binding (plaintext HTTP/2); empty: no gRPC.
    pub grpc_bind: String,
    /// `host:port` the card advertises for gRPC; empty: the host of `public_url` with
    /// the bound gRPC port, or the bound address when `public_url` is empty.
    pub grpc_public_address: String,
    /// Calls (HTTP/2 streams) one gRPC connection may have open at once; a client past
    /// it waits for one to end (the HTTP/2 SETTINGS limit).
    pub grpc_max_streams_per_connection: u32,
    /// HTTP worker threads; 0: one per core.
    pub workers: usize,
    /// Largest accepted request body in bytes.
    pub max_body_bytes: usize,
    /// `max-age` of the agent card's `Cache-Control`, in seconds.
    pub card_max_age_secs: u64,
    /// The largest public agent card served, in bytes; a card past it is
    /// served without its tools' schemas (with a warning): MCP servers' tools are part
    /// of it, and it is read without authentication.
    pub max_card_bytes: usize,
    /// How long a graceful shutdown (SIGTERM, SIGINT) waits for running turns and
    /// requests, in seconds; SSE streams end at once (or when their running turn ends).
    /// Then turns still running are cut, and queued writes get as long again to commit.
    pub shutdown_timeout_secs: u64,
    /// `Retry-After` seconds sent with every 503 (database or actor unavailable).
    pub retry_after_secs: u64,
    /// Proxies (addresses or CIDR networks) whose word on the client's address is
    /// believed: their PROXY protocol v2 header (HAProxy's `send-proxy-v2`) and their
    /// `Forwarded` / `X-Forwarded-For` headers, on both bindings. The client is the
    /// rightmost hop that is not one of them; it is the address failed authentications
    /// are counted by, and the one logs and traces show. Empty: the peer is the client.
    pub trusted_proxies: Vec<String>,
    /// How long a connection from a trusted proxy may take to send its PROXY header (or
    /// its first bytes), in ms; then it is closed.
    pub proxy_header_timeout_ms: u64,
    /// Connections the node accepts at once over both listeners (HTTP gets three
    /// quarters, gRPC a quarter; each split over the workers); past it a listener stops
    /// accepting until one closes, so the process never runs out of open files. 0: the
    /// open-files limit less `reserved_fds`.
    pub max_connections: usize,
    /// Open files kept out of the connection budget for the process's own use: the
    /// database, SQLite and git files, outgoing requests (push deliveries, models).
    /// Halved while the open-files limit is below twice it.
    pub reserved_fds: usize,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:8080".into(),
            public_url: String::new(),
            grpc_bind: "127.0.0.1:8081".into(),
            grpc_public_address: String::new(),
            grpc_max_streams_per_connection: 200,
            workers: 0,
            max_body_bytes: 1024 * 1024,
            card_max_age_secs: 300,
            max_card_bytes: 512 * 1024,
            shutdown_timeout_secs: 30,
            retry_after_secs: 1,
            trusted_proxies: Vec::new(),
            proxy_header_timeout_ms: 5000,
            max_connections: 0,
            reserved_fds: 256,
        }
    }
}

/// SSE streams, their catch-up from the event log, and long-polls (`[streaming]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamingSettings {
    /// Interval of `: keep-alive` comments on idle SSE streams, in seconds.
    pub keep_alive_secs: u64,
    /// Events buffered per task for live subscribers; a slower subscriber catches up
    /// from the durable event log.
    pub subscriber_buffer: usize,
    /// Most events replayed from the log in one read when a subscriber catches up.
    pub replay_batch: usize,
    /// Longest a `GetTask` long-poll (`currentGeneration`) waits for a new generation,
    /// in seconds; then it answers with the task as it is.
    pub long_poll_secs: u64,
    /// Event streams (SSE and gRPC) open at once on the node; a new one past it is
    /// refused at once with 503 and `Retry-After` (gRPC: `UNAVAILABLE`), before anything
    /// is done, so that health checks, metrics and sends always find a connection. 0:
    /// three quarters of the HTTP listener's connections (`server.max_connections`).
    pub max_streams: usize,
    /// A tool call that reports its progress (an MCP server's `notifications/progress`)
    /// has it sent to the task's streams as a `working` status update, at most one per
    /// this many milliseconds (the latest kept; each is written to the task's event log).
    /// 0: progress is not sent. At most 60 000.
    pub progress_interval_ms: u64,
}

impl Default for StreamingSettings {
    fn default() -> Self {
        Self {
            keep_alive_secs: 15,
            subscriber_buffer: 256,
            replay_batch: 1000,
            long_poll_secs: 30,
            max_streams: 0,
            progress_interval_ms: 1000,
        }
    }
}

impl ServerSettings {
    /// Addresses parse, the public URL and gRPC address are well formed, and bounds are
    /// positive.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.bind_addr()?;
        self.grpc_bind_addr()?;
        let grpc_public = self.grpc_public_address.trim();
        if !grpc_public.is_empty() {
            let port = grpc_public
                .rsplit_once(':')
                .map(|(host, port)| (host, port.parse::<u16>()));
            if !matches!(port, Some((host, Ok(_))) if !host.is_empty() && !host.contains('/')) {
                return Err(ConfigError::Key {
                    key: "server.grpc_public_address",
                    problem: "must be host:port (no scheme, no path)".into(),
                });
            }
        }
        let public_url = &self.public_url;
        let http = public_url.starts_with("http://") || public_url.starts_with("https://");
        if !public_url.is_empty() && !http {
            return Err(ConfigError::Key {
                key: "server.public_url",
                problem: "must start with http:// or https://".into(),
            });
        }
        positive("server.max_body_bytes", self.max_body_bytes as u64)?;
        positive("server.max_card_bytes", self.max_card_bytes as u64)?;
        // A client told to retry after 0 seconds retries at once.
        positive("server.retry_after_secs", self.retry_after_secs)?;
        positive(
            "server.grpc_max_streams_per_connection",
            u64::from(self.grpc_max_streams_per_connection),
        )?;
        for entry in &self.trusted_proxies {
            let entry = entry.trim();
            let parses =
                entry.parse::<ipnet::IpNet>().is_ok() || entry.parse::<std::net::IpAddr>().is_ok();
            if !parses {
                return Err(ConfigError::Key {
                    key: "server.trusted_proxies",
                    problem: format!("{entry:?} is neither an IP address nor a CIDR network"),
                });
            }
        }
        if !(1..=60_000).contains(&self.proxy_header_timeout_ms) {
            return Err(ConfigError::Key {
                key: "server.proxy_header_timeout_ms",
                problem: "must be from 1 to 60000".into(),
            });
        }
        if self.max_connections > MAX_CONNECTIONS {
            return Err(ConfigError::Key {
                key: "server.max_connections",
                problem: format!(
                    "must be at most {MAX_CONNECTIONS} (0: from the open-files limit)"
                ),
            });
        }
        if self.reserved_fds > MAX_CONNECTIONS {
            return Err(ConfigError::Key {
                key: "server.reserved_fds",
                problem: format!("must be at most {MAX_CONNECTIONS}"),
            });
        }
        Ok(())
    }

    /// The HTTP listener's address.
    pub fn bind_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.bind.parse().map_err(|e| ConfigError::Key {
            key: "server.bind",
            problem: format!("is not HOST:PORT ({e})"),
        })
    }

    /// The gRPC listener's address, `None` when the binding is off.
    pub fn grpc_bind_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        let bind = self.grpc_bind.trim();
        if bind.is_empty() {
            return Ok(None);
        }
        bind.parse().map(Some).map_err(|e| ConfigError::Key {
            key: "server.grpc_bind",
            problem: format!("is not HOST:PORT ({e}); empty turns gRPC off"),
        })
    }
}

/// The longest `streaming.progress_interval_ms`: progress a minute old says nothing.
const MAX_PROGRESS_INTERVAL_MS: u64 = 60_000;

impl StreamingSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        positive("streaming.keep_alive_secs", self.keep_alive_secs)?;
        positive("streaming.subscriber_buffer", self.subscriber_buffer as u64)?;
        positive("streaming.replay_batch", self.replay_batch as u64)?;
        positive("streaming.long_poll_secs", self.long_poll_secs)?;
        if self.max_streams > MAX_CONNECTIONS {
            return Err(ConfigError::Key {
                key: "streaming.max_streams",
                problem: format!(
                    "must be at most {MAX_CONNECTIONS} (0: from the connection budget)"
                ),
            });
        }
        if self.progress_interval_ms > MAX_PROGRESS_INTERVAL_MS {
            return Err(ConfigError::Key {
                key: "streaming.progress_interval_ms",
                problem: format!(
                    "must be at most {MAX_PROGRESS_INTERVAL_MS} (0: progress is not sent)"
                ),
            });
        }
        Ok(())
    }
}
