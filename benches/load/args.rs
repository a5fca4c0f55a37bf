//! The command line, and its checks beyond what clap does by itself.
//!
//! The binary is a `harness = false` bench target, so it also meets the arguments cargo
//! and the test harness conventions give such targets: `--bench` (from `cargo bench`),
//! a positional name filter and `--list`, `--exact`, `--nocapture`, `--show-output`,
//! `--test-threads` (from `cargo test`). They are accepted and, but for the filter, the
//! list and `--bench`, ignored.

use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory, Parser};

use crate::client::AuthHeader;
use crate::protocol::Dialect;
use crate::scenarios::{Scenario, ToolCall};

/// The name the test harness conventions know this target by.
pub const TARGET_NAME: &str = "load";

#[derive(Debug, Parser)]
#[command(
    name = "load",
    about = "An A2A-aware load generator.",
    long_about = "An A2A-aware load generator. Without --url it starts the agent-a2a server \
                  in this process (127.0.0.1, SQLite in a temporary directory, the default \
                  agent) and loads that; with --url it loads any A2A server's JSON-RPC \
                  endpoint. Every run is bounded by --duration and/or --requests.",
    after_help = "Example: cargo bench --bench load -- --url http://127.0.0.1:8080 \
                  --scenario stream --connections 32 --duration 30s --rate 200"
)]
pub struct Args {
    /// JSON-RPC endpoint of the server to load (default: a server started in-process).
    #[arg(long, value_name = "URL")]
    pub url: Option<reqwest::Url>,
    /// Allow a --url that is not a loopback address.
    #[arg(long)]
    pub allow_remote: bool,
    /// What the load is made of.
    #[arg(short, long, value_enum, default_value_t = Scenario::Send)]
    pub scenario: Scenario,
    /// Concurrent connections: operations in flight at once (subscribe: subscribers).
    #[arg(short, long, default_value_t = 16, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub connections: u32,
    /// How long to measure, after the warm-up (e.g. 30s, 2m, 500ms) [default: 5s, or 1s
    /// under `cargo test`, unless --requests is given].
    #[arg(short, long, value_parser = parse_duration, value_name = "TIME")]
    pub duration: Option<Duration>,
    /// Measured operations to run (subscribe: follow-up messages); with --duration,
    /// whichever ends first.
    #[arg(short = 'n', long, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: Option<u64>,
    /// Load run before measuring, not recorded [default: 1s, or 0s under `cargo test`].
    #[arg(short, long, value_parser = parse_duration, value_name = "TIME")]
    pub warmup: Option<Duration>,
    /// Open loop: start this many operations per second in all, at constant intervals,
    /// and measure latency from when each should have started (subscribe: follow-up
    /// messages per second, default one per task per second). Without it: closed loop,
    /// each connection starts its next operation when the last one ends.
    #[arg(short, long, value_parser = parse_rate, value_name = "PER_SECOND")]
    pub rate: Option<f64>,
    /// Longest an operation may take before it counts as a timeout.
    #[arg(long, value_parser = parse_duration, default_value = "30s", value_name = "TIME")]
    pub timeout: Duration,
    /// API key to send with every request.
    #[arg(
        long,
        env = "A2A_LOAD_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub api_key: Option<String>,
    /// Which headers carry the API key.
    #[arg(long, value_enum, default_value_t = AuthHeader::Both)]
    pub auth_header: AuthHeader,
    /// Binding of the calls: JSON-RPC at --url, or gRPC at the address the agent card
    /// (beside --url) lists; gRPC speaks the 1.0 dialect only.
    #[arg(long, value_enum, default_value_t = Binding::Jsonrpc)]
    pub binding: Binding,
    /// Protocol version: method names, payload shapes and the A2A-Version header.
    #[arg(long, value_enum, default_value_t = Dialect::V1)]
    pub dialect: Dialect,
    /// Text of the messages sent.
    #[arg(long, default_value = "hello")]
    pub text: String,
    /// Prefix of every messageId (some test agents choose their behaviour by it).
    #[arg(long, default_value = "load", value_name = "PREFIX")]
    pub message_id_prefix: String,
    /// How the messageIds after the prefix are drawn: `random` (UUIDv4, as clients
    /// usually mint them) or `time-ordered` (UUIDv7: what a store pays for keys that
    /// arrive in order, e.g. the idempotency claims).
    #[arg(long, value_enum, default_value_t = MessageIds::Random)]
    pub message_ids: MessageIds,
    /// multi-turn: messages per conversation.
    #[arg(long, default_value_t = 5, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub turns: u32,
    /// tool: a tool to call, NAME (memory_add and memory_search have built-in
    /// arguments) or NAME=JSON; repeat to alternate [default: memory_add, memory_search].
    #[arg(long = "tool", value_name = "NAME[=JSON]")]
    pub tools: Vec<String>,
    /// push: webhook receivers (each on a port of its own, so a receiver of its own to the
    /// server) the tasks' configs are spread over, in turn.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub push_receivers: u32,
    /// push: receivers that take connections and never answer, among the others (every
    /// `(receivers + dead)`-th config names one); their tasks' events are not waited for.
    #[arg(long, default_value_t = 0, value_name = "N",
          value_parser = clap::value_parser!(u32).range(0..=64))]
    pub push_dead: u32,
    /// subscribe: tasks the subscribers are spread over.
    #[arg(long, default_value_t = 10, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub tasks: u32,
    /// Sample the memory (VmRSS, VmHWM) of this process: the server's, with --url.
    #[arg(long, value_name = "PID")]
    pub server_pid: Option<u32>,
    /// Report format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Fail (exit 1) when more than this fraction of operations failed [default: fail
    /// only when none succeeded].
    #[arg(long, value_parser = parse_fraction, value_name = "FRACTION")]
    pub max_error_rate: Option<f64>,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,

    /// Given by `cargo bench`; without it (`cargo test`) the defaults are a smoke test.
    #[arg(long, hide = true)]
    pub bench: bool,
    /// Test-harness convention: print the target's name and exit.
    #[arg(long, hide = true)]
    pub list: bool,
    /// Test-harness convention: the filter must equal the name.
    #[arg(long, hide = true)]
    pub exact: bool,
    #[arg(long, hide = true)]
    pub nocapture: bool,
    #[arg(long, hide = true)]
    pub show_output: bool,
    #[arg(long, hide = true, value_name = "N")]
    pub test_threads: Option<String>,
    /// Test-harness convention: run only if the name matches.
    #[arg(hide = true)]
    pub filter: Option<String>,
}

/// How the report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
}

impl Args {
    /// Whether the harness conventions select this target (a name filter may not).
    pub fn selected(&self) -> bool {
        match &self.filter {
            None => true,
            Some(filter) if self.exact => filter == TARGET_NAME,
            Some(filter) => TARGET_NAME.contains(filter.as_str()),
        }
    }

    /// The tool calls of the tool scenario, checked.
    pub fn tool_calls(&self) -> Vec<ToolCall> {
        if self.tools.is_empty() {
            return vec![ToolCall::MemoryAdd, ToolCall::MemorySearch];
        }
        self.tools
            .iter()
            .map(|spec| ToolCall::parse(spec).unwrap_or_else(|e| fail(&format!("--tool {e}"))))
            .collect()
    }

    /// The measured duration: given, defaulted, or none when --requests bounds the run.
    pub fn duration(&self) -> Option<Duration> {
        match (self.duration, self.requests) {
            (Some(d), _) => Some(d),
            (None, Some(_)) => None,
            (None, None) if self.bench => Some(Duration::from_secs(5)),
            (None, None) => Some(Duration::from_secs(1)),
        }
    }

    pub fn warmup(&self) -> Duration {
        self.warmup.unwrap_or(if self.bench {
            Duration::from_secs(1)
        } else {
            Duration::ZERO
        })
    }

    /// Checks what clap cannot; exits with a usage error (status 2) when wrong.
    pub fn validate(&self) {
        if self.duration.is_some_and(|d| d.is_zero()) {
            fail("--duration must be longer than zero");
        }
        if self.timeout.is_zero() {
            fail("--timeout must be longer than zero");
        }
        if self.scenario == Scenario::Subscribe && self.tasks > self.connections {
            fail(&format!(
                "--tasks {} is more than --connections {}: every task needs a subscriber",
                self.tasks, self.connections
            ));
        }
        if self.scenario == Scenario::Tool {
            // Exits on a bad --tool, before any server is started.
            self.tool_calls();
        } else if !self.tools.is_empty() {
            fail("--tool only applies to --scenario tool");
        }
        if self.url.is_none() && self.allow_remote {
            fail("--allow-remote only applies with --url");
        }
        if self.binding == Binding::Grpc && self.dialect != Dialect::V1 {
            fail("--binding grpc speaks --dialect v1 only");
        }
        if self.message_id_prefix.is_empty() {
            fail("--message-id-prefix must not be empty");
        }
    }
}

/// How message ids are drawn (`--message-ids`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MessageIds {
    Random,
    TimeOrdered,
}

/// The binding the load generator calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Binding {
    Jsonrpc,
    Grpc,
}

/// Exits with a usage error in clap's format.
pub fn fail(message: &str) -> ! {
    Args::command()
        .error(clap::error::ErrorKind::ValueValidation, message)
        .exit()
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (write e.g. 30s, 2m, 500ms)"))
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(rate),
        Ok(_) => Err("must be a positive number of operations per second".into()),
        Err(e) => Err(format!("{e}")),
    }
}

fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        Ok(_) => Err("must be between 0 and 1 (e.g. 0.01 for 1 %)".into()),
        Err(e) => Err(format!("{e}")),
    }
}
