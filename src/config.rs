//! Settings: `config.toml`, then `AGENT_A2A__SECTION__KEY` environment variables, then
//! `DATABASE_URL`, then command-line flags (each layer beats the one before).
//!
//! Every bound the server enforces has a key here with its default; `config.toml` at the
//! repository root lists them all with a comment each. Unknown keys are errors, so a typo
//! stops start-up instead of being silently ignored.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

/// All settings of a running server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub server: ServerSettings,
    pub auth: AuthSettings,
    pub rate_limit: RateLimitSettings,
    pub agent: AgentSettings,
    pub store: StoreSettings,
    pub persistence: PersistenceSettings,
    pub threads: ThreadSettings,
    pub streaming: StreamingSettings,
    pub push: PushSettings,
    pub idempotency: IdempotencySettings,
    pub skills: SkillSettings,
    pub memory: MemorySettings,
    pub knowledge: KnowledgeSettings,
    pub governance: GovernanceSettings,
    pub history: HistorySettings,
    pub state: StateSettings,
    pub providers: std::collections::BTreeMap<String, ProviderSettings>,
    pub models: ModelSettings,
    pub log: LogSettings,
    pub metrics: MetricsSettings,
    pub health: HealthSettings,
    pub cluster: ClusterSettings,
}

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
    /// How long a graceful shutdown (SIGTERM, SIGINT) waits for running turns and
    /// requests, in seconds; SSE streams end at once (or when their running turn ends).
    /// Then turns still running are cut, and queued writes get as long again to commit.
    pub shutdown_timeout_secs: u64,
    /// `Retry-After` seconds sent with every 503 (database or actor unavailable).
    pub retry_after_secs: u64,
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
            shutdown_timeout_secs: 30,
            retry_after_secs: 1,
        }
    }
}

/// Who may call the A2A endpoints (`[auth]`). The agent card, health, metrics and the
/// dashboard stay public.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSettings {
    /// Require credentials on every A2A request. On unless turned off explicitly; off,
    /// every request acts for the tenant `default` and rate limits do not apply.
    pub enabled: bool,
    /// API keys, each acting for one tenant at one rate-limit tier.
    pub api_keys: Vec<ApiKeySettings>,
    pub trusted_proxy: TrustedProxySettings,
    /// Failed authentications one client address may make per minute (a minute's worth
    /// at once, then an even refill); past it, every request from that address gets 429
    /// with `Retry-After` until the budget refills, whatever credentials it carries.
    pub failures_per_minute: u32,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            api_keys: Vec::new(),
            trusted_proxy: TrustedProxySettings::default(),
            failures_per_minute: 30,
        }
    }
}

/// One API key (`[[auth.api_keys]]`): `key` in clear or `key_sha256` (its SHA-256, hex).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeySettings {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub key_sha256: String,
    pub tenant: String,
    /// The `[rate_limit.tiers.<tier>]` that applies; unknown tiers get the default limit.
    #[serde(default = "ApiKeySettings::default_tier")]
    pub tier: String,
}

impl ApiKeySettings {
    fn default_tier() -> String {
        "default".into()
    }

    /// The SHA-256 of a presented key, lowercase hex: how keys are compared.
    pub fn digest_of(key: &str) -> String {
        use sha2::{Digest, Sha256};
        format!("{:x}", Sha256::digest(key.as_bytes()))
    }

    /// This entry's digest: of `key`, or `key_sha256` as given (lowercased); `None` unless
    /// exactly one of them is set.
    pub fn digest(&self) -> Option<String> {
        match (self.key.is_empty(), self.key_sha256.is_empty()) {
            (false, true) => Some(Self::digest_of(&self.key)),
            (true, false) => Some(self.key_sha256.to_ascii_lowercase()),
            _ => None,
        }
    }
}

/// A reverse proxy that authenticates callers itself and names the tenant in a header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrustedProxySettings {
    /// Header carrying the tenant; empty: proxy mode is off.
    pub tenant_header: String,
    /// Header carrying the rate-limit tier (optional; empty or absent: `default`).
    pub tier_header: String,
    /// Header carrying the user id (optional), passed to the agent as `userId`.
    pub user_header: String,
    /// Peer addresses the headers are believed from; requests from elsewhere need a key.
    pub addresses: Vec<String>,
}

impl Default for TrustedProxySettings {
    fn default() -> Self {
        Self {
            tenant_header: String::new(),
            tier_header: String::new(),
            user_header: String::new(),
            addresses: vec!["127.0.0.1".into(), "::1".into()],
        }
    }
}

/// Requests per minute per tenant (`[rate_limit]`), by tier, and per skill for direct
/// tool calls. Each limit lets its whole minute's worth through at once, then refills
/// evenly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimitSettings {
    /// Requests per minute of a tenant whose tier has no `[rate_limit.tiers.<tier>]`.
    pub default_per_minute: u32,
    pub tiers: std::collections::BTreeMap<String, LimitSettings>,
    /// Direct tool calls per minute of one tenant to one skill (by skill id).
    pub skills: std::collections::BTreeMap<String, LimitSettings>,
}

impl Default for RateLimitSettings {
    fn default() -> Self {
        Self {
            default_per_minute: 100,
            tiers: std::collections::BTreeMap::new(),
            skills: std::collections::BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSettings {
    pub per_minute: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSettings {
    pub name: String,
    pub description: String,
    /// The agent's own version (not the protocol's).
    pub version: String,
    /// Media types accepted in message parts (`*/*` accepts any).
    pub input_modes: Vec<String>,
    pub output_modes: Vec<String>,
    /// Organization named in the card's `provider` (omitted when empty).
    pub provider_organization: String,
    pub provider_url: String,
    pub documentation_url: String,
    /// Add the 0.3 top-level fields to the card for 0.3 clients (strict 1.0 schema
    /// validators reject them; turn off for 1.0-only deployments).
    pub card_v03_fields: bool,
    /// The `[providers.<name>]` of the root agent's model; empty: no model, the server
    /// routes explicit tool calls only.
    pub provider: String,
    /// Model name sent to the provider; empty: the provider's `model`.
    pub model: String,
    /// The root agent's system instruction.
    pub instruction: String,
    /// Tools the root agent may call, by name; `"*"` stands for every registered tool.
    pub tools: Vec<String>,
    /// Agents the root agent can hand the conversation to (`transfer_to_agent`).
    pub sub_agents: Vec<SubAgentSettings>,
    /// Model calls one run may make (each tool round trip is one); past it the task fails.
    pub max_turns: u32,
    /// One tool call by the model may take this long; then the model gets an error result.
    pub tool_timeout_ms: u64,
    /// Streamed answer text is sent to clients at most this often (ms), in artifact chunks.
    pub stream_flush_ms: u64,
    /// Most output tokens per model call; 0: the provider's default.
    pub max_output_tokens: u32,
    /// A cheaper provider that turns free text into tool calls when no `provider` is set,
    /// seeing only skill descriptions and tool schemas; empty: none.
    pub routing_provider: String,
    /// Model name for the routing provider; empty: its `model`.
    pub routing_model: String,
}

/// An agent the root agent can transfer to (`[[agent.sub_agents]]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubAgentSettings {
    pub name: String,
    /// Shown to the model deciding whether to transfer.
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub instruction: String,
    /// Empty: the parent agent's provider.
    #[serde(default)]
    pub provider: String,
    /// Empty: the provider's `model`.
    #[serde(default)]
    pub model: String,
    /// Tools by name (`"*"`: all); none by default.
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub sub_agents: Vec<SubAgentSettings>,
}

impl Default for AgentSettings {
    fn default() -> Self {
        Self {
            name: "agent-a2a".into(),
            description: "An A2A agent served by agent-a2a: durable threads, streaming, and \
                          skills callable as tools."
                .into(),
            version: env!("CARGO_PKG_VERSION").into(),
            input_modes: vec!["text/plain".into(), "application/json".into()],
            output_modes: vec!["text/plain".into(), "application/json".into()],
            provider_organization: String::new(),
            provider_url: String::new(),
            documentation_url: String::new(),
            card_v03_fields: true,
            provider: String::new(),
            model: String::new(),
            instruction: "You are a helpful assistant. Use the tools you are given when they \
                          help answer the user; answer concisely."
                .into(),
            tools: vec!["*".into()],
            sub_agents: Vec::new(),
            max_turns: 10,
            tool_timeout_ms: 30_000,
            stream_flush_ms: 100,
            max_output_tokens: 0,
            routing_provider: String::new(),
            routing_model: String::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSettings {
    /// `postgres://…` selects Postgres; empty selects the embedded SQLite file.
    pub database_url: String,
    /// Directory of the SQLite file (`agent-a2a.db`) and other local data.
    pub data_dir: PathBuf,
    /// Database connections in the pool.
    pub pool_size: usize,
    /// How long a request waits for a connection before failing with 503, in ms.
    pub acquire_timeout_ms: u64,
    /// SQLite's `PRAGMA synchronous`: `full` (the default: one fsync per group commit, a
    /// power loss loses nothing acknowledged; measured within the noise of `normal` at 64
    /// connections, +0.2 ms p50 at one) or `normal` (a commit survives a crash of the
    /// process; a power loss can roll back the last ones).
    pub sqlite_synchronous: SqliteSynchronous,
}

/// `store.sqlite_synchronous`: SQLite's `PRAGMA synchronous` as the settings spell it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SqliteSynchronous {
    /// A commit survives a crash of the process; a power loss can roll back the last ones.
    Normal,
    /// Every group commit is synced: a power loss loses nothing acknowledged.
    #[default]
    Full,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            database_url: String::new(),
            data_dir: PathBuf::from("data"),
            pool_size: 16,
            acquire_timeout_ms: 2000,
            sqlite_synchronous: SqliteSynchronous::default(),
        }
    }
}

/// `persistence.commits_in_flight` unless configured: group commits in flight at once on
/// Postgres.
pub const DEFAULT_COMMITS_IN_FLIGHT: usize = 4;

/// The most `persistence.commits_in_flight` (each holds a Postgres connection).
pub const MAX_COMMITS_IN_FLIGHT: usize = 64;

/// The longest `persistence.start_grace_ms`: a user message must not stay uncommitted
/// for longer while its turn runs.
pub const MAX_START_GRACE_MS: u64 = 10_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PersistenceSettings {
    /// Writes waiting for the persistence actor; when full, callers wait.
    pub queue_capacity: usize,
    /// Most write batches committed in one transaction (group commit).
    pub max_batch: usize,
    /// How long a write waits for room in a full queue before failing with 503, in ms.
    pub enqueue_timeout_ms: u64,
    /// How long the first commit of a turn that starts a new task waits for the turn's
    /// first output, so that both share one transaction (a turn that answers at once costs
    /// one commit, not two), in ms. Nothing is acknowledged before that commit; a turn
    /// still running after this long has its message committed on its own. 0 commits it
    /// before the executor starts. At most 10000.
    pub start_grace_ms: u64,
    /// Postgres: group commits in flight at once, each on its connection (its statements
    /// pipelined). A thread's writes stay in order: its actor waits for each commit. SQLite
    /// has one writer and ignores this. From 1 to 64.
    pub commits_in_flight: usize,
}

impl Default for PersistenceSettings {
    fn default() -> Self {
        Self {
            queue_capacity: 8192,
            max_batch: 256,
            enqueue_timeout_ms: 1000,
            start_grace_ms: 20,
            commits_in_flight: DEFAULT_COMMITS_IN_FLIGHT,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThreadSettings {
    /// Arbiter threads hosting thread actors; 0: one per core.
    pub arbiters: usize,
    /// Messages of a thread's history kept in its actor's memory.
    pub history_window: usize,
    /// How long a finished task stays in memory after its last event, in ms.
    pub task_retention_ms: u64,
    /// A thread actor idle this long is stopped (it reloads on demand), in seconds.
    pub idle_timeout_secs: u64,
    /// Thread actors kept in memory; above this, actors idle longer than
    /// `task_retention_ms` are stopped at once instead of after `idle_timeout_secs`.
    pub max_resident_actors: usize,
    /// A thread inactive this long expires and cannot be continued, in seconds.
    pub thread_ttl_secs: u64,
    /// Messages queued behind a running turn in one thread before new ones are refused.
    pub max_pending_turns: usize,
    /// How often the janitor runs (expires threads, removes expired state entries), in
    /// seconds.
    pub janitor_interval_secs: u64,
    /// Threads the janitor expires with one statement, and resident thread actors it
    /// sweeps at once.
    pub janitor_batch: usize,
    /// Active threads loaded into memory at start-up, most recently updated first (in
    /// the background, never beyond `max_resident_actors`); 0: none. The others load on
    /// their first request.
    pub recover_eagerly: usize,
    /// Threads loaded at once by the start-up recovery.
    pub recover_concurrency: usize,
}

impl Default for ThreadSettings {
    fn default() -> Self {
        Self {
            arbiters: 0,
            history_window: 200,
            task_retention_ms: 5000,
            idle_timeout_secs: 600,
            max_resident_actors: 10_000,
            thread_ttl_secs: 86_400,
            max_pending_turns: 64,
            janitor_interval_secs: 300,
            janitor_batch: 500,
            recover_eagerly: 1000,
            recover_concurrency: 8,
        }
    }
}

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
}

impl Default for StreamingSettings {
    fn default() -> Self {
        Self {
            keep_alive_secs: 15,
            subscriber_buffer: 256,
            replay_batch: 1000,
            long_poll_secs: 30,
        }
    }
}

/// Idempotent sends: a retried message is recognised by its id (or `Idempotency-Key`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdempotencySettings {
    /// Recognise retried sends. Off, every send runs its turn (the official conformance
    /// kit reuses one message id per run for unrelated messages, and needs it off).
    pub enabled: bool,
    /// How long an accepted message's id keeps answering retries with the first
    /// outcome, in seconds; after it, the id may be used again.
    pub window_secs: u64,
}

impl Default for IdempotencySettings {
    fn default() -> Self {
        Self {
            enabled: true,
            window_secs: 86_400,
        }
    }
}

/// Cluster mode: several nodes on one Postgres database, each thread served by the one
/// node holding its lease (`src/cluster/`). SQLite is single-node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSettings {
    /// Join the cluster of the nodes on the same Postgres database.
    pub enabled: bool,
    /// This node's name among the others (at most 64 letters, digits, `.`, `_`, `-`);
    /// empty: the host name and a random suffix, new at every start.
    pub node_id: String,
    /// The base URL other nodes reach this node's HTTP listener at, for the requests
    /// they forward to the owner of a thread (e.g. `http://10.0.0.5:8080`); empty:
    /// `http://<server.bind>` when that names a concrete address.
    pub advertise_url: String,
    /// Shared by every node: a forwarded request carries it (at least 16 characters).
    pub secret: String,
    /// How long a node's lease on its threads lasts without a renewal, in ms: a node
    /// that died or froze loses its threads to the others after it.
    pub lease_ttl_ms: u64,
    /// How often a node renews its lease, in ms (at most a third of `lease_ttl_ms`).
    pub heartbeat_ms: u64,
    /// How long a forwarded request may take on the owner (a blocking send waits for
    /// its turn), in seconds.
    pub forward_timeout_secs: u64,
    /// A subscriber following a task of another node reads the task's log at least this
    /// often, in ms, even when no notification came (a notification can be missed while
    /// the listening connection reconnects).
    pub stream_poll_ms: u64,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            node_id: String::new(),
            advertise_url: String::new(),
            secret: String::new(),
            lease_ttl_ms: 10_000,
            heartbeat_ms: 2_000,
            forward_timeout_secs: 300,
            stream_poll_ms: 2_000,
        }
    }
}

/// Push notifications: configs per task, the durable outbox and its delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PushSettings {
    /// Serve the push-config methods and deliver (the card's
    /// `capabilities.pushNotifications`).
    pub enabled: bool,
    /// Configs one task may have; one more is refused.
    pub max_configs_per_task: usize,
    /// Deliveries the outbox may owe across all tasks; an event past it is not queued
    /// for its configs (counted as `outcome="dropped"`).
    pub max_outbox: u64,
    /// Attempts per delivery before it is given up (`outcome="abandoned"`).
    pub max_attempts: u32,
    /// A delivery older than this (since its event) is given up, in seconds.
    pub max_age_secs: u64,
    /// Deliveries in flight at once (each config still gets one at a time, in order).
    pub max_concurrent: usize,
    /// One delivery's time limit (connect, send, response head), in ms.
    pub timeout_ms: u64,
    /// First retry delay, in ms; doubled per attempt (with jitter) up to `backoff_max_ms`.
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
    /// Bytes of a receiver's response body read (for the log); the rest is dropped.
    pub max_response_bytes: usize,
    /// Receivers on loopback addresses (127.0.0.0/8, ::1) are allowed. Off by default.
    pub allow_loopback: bool,
    /// Receivers on private networks (10/8, 172.16/12, 192.168/16, fc00::/7, 100.64/10)
    /// are allowed.
    pub allow_private: bool,
    /// If not empty, only these hosts (names, IP addresses or CIDR ranges) may receive.
    pub allow_hosts: Vec<String>,
    /// Hosts (names, IP addresses or CIDR ranges) that may never receive; link-local
    /// and cloud-metadata addresses are always refused.
    pub deny_hosts: Vec<String>,
    /// How often the delivery looks at the outbox when nothing woke it, in ms.
    pub poll_interval_ms: u64,
}

impl Default for PushSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            max_configs_per_task: 10,
            max_outbox: 100_000,
            max_attempts: 12,
            max_age_secs: 86_400,
            max_concurrent: 32,
            timeout_ms: 10_000,
            backoff_initial_ms: 500,
            backoff_max_ms: 300_000,
            max_response_bytes: 4096,
            allow_loopback: false,
            allow_private: true,
            allow_hosts: Vec::new(),
            deny_hosts: Vec::new(),
            poll_interval_ms: 1000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SkillSettings {
    /// Calls one skill runs at once; more wait.
    pub max_concurrency: usize,
    /// How long one tool call may take, in ms (then it fails with a timeout).
    pub timeout_ms: u64,
}

impl Default for SkillSettings {
    fn default() -> Self {
        Self {
            max_concurrency: 64,
            timeout_ms: 30_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemorySettings {
    /// Register the memory skill.
    pub enabled: bool,
    /// Results of `memory_search` when the caller gives no limit.
    pub default_limit: usize,
    /// Most results one search may ask for.
    pub max_limit: usize,
    /// Largest memory content in bytes.
    pub max_content_bytes: usize,
    /// OpenAI-compatible base URL for `/embeddings` (e.g. `http://127.0.0.1:11434/v1`);
    /// empty: full-text search only.
    pub embeddings_url: String,
    pub embeddings_model: String,
    /// Name of the environment variable holding the embeddings API key (empty: none).
    pub embeddings_api_key_env: String,
    pub embeddings_timeout_ms: u64,
    /// Most memories of one scope compared by embedding in one search.
    pub max_scan: usize,
}

impl Default for MemorySettings {
    fn default() -> Self {
        Self {
            enabled: true,
            default_limit: 10,
            max_limit: 100,
            max_content_bytes: 64 * 1024,
            embeddings_url: String::new(),
            embeddings_model: String::new(),
            embeddings_api_key_env: String::new(),
            embeddings_timeout_ms: 10_000,
            max_scan: 5_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KnowledgeSettings {
    /// Register the knowledge skill.
    pub enabled: bool,
    /// The git repository; empty: `<store.data_dir>/knowledge` (created on first start).
    pub repo_path: PathBuf,
    /// Committer of every change (the caller is recorded as the author when known).
    pub author_name: String,
    pub author_email: String,
    /// Largest item (front matter and body) in bytes.
    pub max_item_bytes: usize,
    /// Results of `knowledge_query` when the caller gives no limit.
    pub default_limit: usize,
}

impl Default for KnowledgeSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            repo_path: PathBuf::new(),
            author_name: "agent-a2a".into(),
            author_email: "agent-a2a@localhost".into(),
            max_item_bytes: 256 * 1024,
            default_limit: 10,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct GovernanceSettings {
    /// Policies from configuration (`[[governance.policies]]`); accepted knowledge items
    /// of type `policy` add to them.
    pub policies: Vec<PolicySettings>,
}

/// One `[[governance.policies]]`, as plain data: the governance skill maps it onto its
/// own types and checks its rules (a regex that does not compile, a missing value) when
/// the server starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySettings {
    pub id: String,
    pub layer: PolicyLayer,
    #[serde(default)]
    pub mode: PolicyMode,
    /// The company, org, team or project (matching `layer`) it applies to; `None`: every
    /// one of that layer.
    #[serde(default)]
    pub scope_id: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    pub rules: Vec<RuleSettings>,
}

/// One rule of a configured policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSettings {
    pub id: String,
    pub target: RuleTarget,
    pub operator: RuleOperator,
    /// The value or regex; required by every operator but `must_exist`/`must_not_exist`.
    #[serde(default)]
    pub value: Option<String>,
    pub severity: RuleSeverity,
    /// Shown to whoever breaks the rule.
    pub message: String,
}

/// The layer a policy is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyLayer {
    Project,
    Team,
    Org,
    Company,
}

/// Whether a more specific layer may replace a policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyMode {
    /// Applies below its layer whatever lower layers say.
    Mandatory,
    /// A policy with the same id at a more specific layer replaces it.
    #[default]
    Optional,
}

/// What part of the checked input a rule reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleTarget {
    Content,
    Path,
    Dependency,
    Tool,
}

/// How a rule judges its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleOperator {
    MustUse,
    MustNotUse,
    MustMatch,
    MustNotMatch,
    MustExist,
    MustNotExist,
}

/// How much a broken rule matters; only `block` fails a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleSeverity {
    Info,
    Warn,
    Block,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistorySettings {
    /// Tokens of history sent to a model (newest first until spent); 0 means 32000.
    pub token_budget: usize,
    /// Most history messages sent to a model on top of the budget; 0: no cap.
    pub max_messages: usize,
}

impl Default for HistorySettings {
    fn default() -> Self {
        Self {
            token_budget: 32_000,
            max_messages: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateSettings {
    /// How long a thread-state entry lives, in seconds.
    pub ttl_secs: u64,
    /// Largest thread state (all entries, serialised) in bytes; a write past it fails.
    pub max_bytes: usize,
}

impl Default for StateSettings {
    fn default() -> Self {
        Self {
            ttl_secs: 3_600,
            max_bytes: 1024 * 1024,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelSettings {
    /// Consecutive failed generations after which a provider's circuit opens.
    pub breaker_failures: u32,
    /// How long an open circuit fails calls at once before letting one through, in seconds.
    pub breaker_cooldown_secs: u64,
}

impl Default for ModelSettings {
    fn default() -> Self {
        Self {
            breaker_failures: 5,
            breaker_cooldown_secs: 30,
        }
    }
}

/// Which API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI-compatible Chat Completions (OpenAI, vLLM, Ollama, llama.cpp, LM Studio, …).
    Openai,
    /// Anthropic Messages.
    Anthropic,
    /// Google Gemini `streamGenerateContent`.
    Gemini,
}

/// One model provider (`[providers.<name>]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSettings {
    pub kind: ProviderKind,
    /// e.g. `http://127.0.0.1:11434/v1` for a local Ollama.
    pub base_url: String,
    pub model: String,
    /// Name of the environment variable holding the API key (empty: no key).
    #[serde(default)]
    pub api_key_env: String,
    /// Whole-request timeout (including the stream), in ms.
    #[serde(default = "ProviderSettings::default_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default = "ProviderSettings::default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Retries of a request answered 429 or 5xx (or not connected), with backoff.
    #[serde(default = "ProviderSettings::default_max_retries")]
    pub max_retries: u32,
    /// First backoff delay in ms (doubled each retry; `Retry-After` wins when given).
    #[serde(default = "ProviderSettings::default_retry_base_ms")]
    pub retry_base_ms: u64,
    /// Requests to this provider at once.
    #[serde(default = "ProviderSettings::default_max_concurrency")]
    pub max_concurrency: usize,
}

impl ProviderSettings {
    fn default_timeout_ms() -> u64 {
        120_000
    }
    fn default_connect_timeout_ms() -> u64 {
        5_000
    }
    fn default_max_retries() -> u32 {
        2
    }
    fn default_retry_base_ms() -> u64 {
        500
    }
    fn default_max_concurrency() -> usize {
        8
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    /// `text` or `json` (to stderr).
    pub format: LogFormat,
    /// A tracing filter such as `info` or `agent_a2a=debug,info` (`RUST_LOG` wins).
    pub level: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSettings {
    /// Serve the operators' dashboard at `/dashboard` (and its `/dashboard/stats.json`).
    pub dashboard: bool,
    /// How often active threads and tasks by state are counted in the store, in
    /// seconds; 0: never (those gauges are then not exported).
    pub census_interval_secs: u64,
    /// When set, `/metrics` answers only `Authorization: Bearer <this token>` (its labels
    /// name tenants); empty: open to whoever reaches the port.
    pub bearer_token: String,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        Self {
            dashboard: true,
            census_interval_secs: 15,
            bearer_token: String::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthSettings {
    /// How long `/health` waits for one dependency's check (the store's round trip, a
    /// skill's engine, a model actor's circuit state) before reporting it down, in ms.
    pub timeout_ms: u64,
}

impl Default for HealthSettings {
    fn default() -> Self {
        Self { timeout_ms: 2_000 }
    }
}

/// Values given on the command line; `None` leaves the lower layers in force.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub config_file: Option<PathBuf>,
    pub bind: Option<String>,
    /// `server.grpc_bind` (empty: no gRPC).
    pub grpc_bind: Option<String>,
    pub database_url: Option<String>,
    pub data_dir: Option<PathBuf>,
}

/// A configuration problem, naming the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration file {0} does not exist")]
    MissingFile(PathBuf),
    #[error("invalid configuration: {0}")]
    Invalid(String),
    #[error("invalid configuration: `{key}` {problem}")]
    Key { key: &'static str, problem: String },
}

impl Settings {
    /// Loads the layers. Without `--config`, `./config.toml` is read when it exists.
    pub fn load(overrides: &Overrides) -> Result<Settings, ConfigError> {
        Self::load_from(overrides, std::env::vars())
    }

    /// Like [`Settings::load`] with an explicit environment (tests pass their own).
    pub fn load_from(
        overrides: &Overrides,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        match &overrides.config_file {
            Some(path) if !path.exists() => return Err(ConfigError::MissingFile(path.clone())),
            Some(path) => figment = figment.merge(Toml::file_exact(path)),
            None if Path::new("config.toml").exists() => {
                figment = figment.merge(Toml::file_exact("config.toml"))
            }
            None => {}
        }
        let env: Vec<(String, String)> = env.into_iter().collect();
        let prefixed: Vec<(String, String)> = env
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix("AGENT_A2A__")
                    .map(|rest| (rest.to_owned(), v.clone()))
            })
            .collect();
        if !prefixed.is_empty() {
            let mut section = figment::value::Dict::new();
            for (key, value) in prefixed {
                let path: Vec<String> = key.split("__").map(str::to_lowercase).collect();
                insert_path(&mut section, &path, &value);
            }
            figment = figment.merge(Serialized::defaults(section));
        }
        let mut settings: Settings = figment
            .extract()
            .map_err(|e| ConfigError::Invalid(describe(&e)))?;
        if let Some((_, url)) = env.iter().find(|(k, _)| k == "DATABASE_URL")
            && !url.is_empty()
        {
            settings.store.database_url = url.clone();
        }
        if let Some(bind) = &overrides.bind {
            settings.server.bind = bind.clone();
        }
        if let Some(bind) = &overrides.grpc_bind {
            settings.server.grpc_bind = bind.clone();
        }
        if let Some(url) = &overrides.database_url {
            settings.store.database_url = url.clone();
        }
        if let Some(dir) = &overrides.data_dir {
            settings.store.data_dir = dir.clone();
        }
        settings.validate()?;
        Ok(settings)
    }

    /// Checks what types alone cannot: addresses parse and bounds are positive.
    pub fn validate(&self) -> Result<(), ConfigError> {
        fn positive(key: &'static str, v: u64) -> Result<(), ConfigError> {
            if v == 0 {
                return Err(ConfigError::Key {
                    key,
                    problem: "must be greater than 0".into(),
                });
            }
            Ok(())
        }
        self.bind_addr()?;
        self.grpc_bind_addr()?;
        let grpc_public = self.server.grpc_public_address.trim();
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
        let public_url = &self.server.public_url;
        let http = public_url.starts_with("http://") || public_url.starts_with("https://");
        if !public_url.is_empty() && !http {
            return Err(ConfigError::Key {
                key: "server.public_url",
                problem: "must start with http:// or https://".into(),
            });
        }
        let url = &self.store.database_url;
        let known = ["postgres://", "postgresql://", "sqlite:"];
        if !url.is_empty() && !known.iter().any(|scheme| url.starts_with(scheme)) {
            return Err(ConfigError::Key {
                key: "store.database_url",
                problem: "must be a postgres://, postgresql:// or sqlite: URL".into(),
            });
        }
        positive("server.max_body_bytes", self.server.max_body_bytes as u64)?;
        // A client told to retry after 0 seconds retries at once.
        positive("server.retry_after_secs", self.server.retry_after_secs)?;
        positive(
            "server.grpc_max_streams_per_connection",
            u64::from(self.server.grpc_max_streams_per_connection),
        )?;
        positive("store.pool_size", self.store.pool_size as u64)?;
        positive("store.acquire_timeout_ms", self.store.acquire_timeout_ms)?;
        positive(
            "persistence.queue_capacity",
            self.persistence.queue_capacity as u64,
        )?;
        positive("persistence.max_batch", self.persistence.max_batch as u64)?;
        if !(1..=MAX_COMMITS_IN_FLIGHT).contains(&self.persistence.commits_in_flight) {
            return Err(ConfigError::Key {
                key: "persistence.commits_in_flight",
                problem: format!("must be from 1 to {MAX_COMMITS_IN_FLIGHT}"),
            });
        }
        if self.persistence.start_grace_ms > MAX_START_GRACE_MS {
            return Err(ConfigError::Key {
                key: "persistence.start_grace_ms",
                problem: format!("must be at most {MAX_START_GRACE_MS}"),
            });
        }
        positive("threads.history_window", self.threads.history_window as u64)?;
        positive("threads.idle_timeout_secs", self.threads.idle_timeout_secs)?;
        positive("threads.thread_ttl_secs", self.threads.thread_ttl_secs)?;
        positive(
            "threads.max_resident_actors",
            self.threads.max_resident_actors as u64,
        )?;
        positive(
            "threads.max_pending_turns",
            self.threads.max_pending_turns as u64,
        )?;
        positive(
            "threads.janitor_interval_secs",
            self.threads.janitor_interval_secs,
        )?;
        positive("threads.janitor_batch", self.threads.janitor_batch as u64)?;
        positive(
            "threads.recover_concurrency",
            self.threads.recover_concurrency as u64,
        )?;
        positive("health.timeout_ms", self.health.timeout_ms)?;
        positive("streaming.keep_alive_secs", self.streaming.keep_alive_secs)?;
        positive(
            "streaming.subscriber_buffer",
            self.streaming.subscriber_buffer as u64,
        )?;
        positive("streaming.replay_batch", self.streaming.replay_batch as u64)?;
        positive("streaming.long_poll_secs", self.streaming.long_poll_secs)?;
        positive("idempotency.window_secs", self.idempotency.window_secs)?;
        positive(
            "push.max_configs_per_task",
            self.push.max_configs_per_task as u64,
        )?;
        positive("push.max_outbox", self.push.max_outbox)?;
        positive("push.max_attempts", self.push.max_attempts.into())?;
        positive("push.max_age_secs", self.push.max_age_secs)?;
        positive("push.max_concurrent", self.push.max_concurrent as u64)?;
        positive("push.timeout_ms", self.push.timeout_ms)?;
        positive("push.backoff_initial_ms", self.push.backoff_initial_ms)?;
        positive("push.poll_interval_ms", self.push.poll_interval_ms)?;
        if self.push.backoff_max_ms < self.push.backoff_initial_ms {
            return Err(ConfigError::Key {
                key: "push.backoff_max_ms",
                problem: "must be at least push.backoff_initial_ms".into(),
            });
        }
        positive("skills.max_concurrency", self.skills.max_concurrency as u64)?;
        positive("skills.timeout_ms", self.skills.timeout_ms)?;
        positive("memory.default_limit", self.memory.default_limit as u64)?;
        positive("memory.max_limit", self.memory.max_limit as u64)?;
        positive(
            "memory.max_content_bytes",
            self.memory.max_content_bytes as u64,
        )?;
        positive(
            "memory.embeddings_timeout_ms",
            self.memory.embeddings_timeout_ms,
        )?;
        positive("memory.max_scan", self.memory.max_scan as u64)?;
        positive(
            "knowledge.max_item_bytes",
            self.knowledge.max_item_bytes as u64,
        )?;
        positive(
            "knowledge.default_limit",
            self.knowledge.default_limit as u64,
        )?;
        if self.agent.name.trim().is_empty() {
            return Err(ConfigError::Key {
                key: "agent.name",
                problem: "must not be empty".into(),
            });
        }
        self.validate_auth()?;
        positive(
            "rate_limit.default_per_minute",
            u64::from(self.rate_limit.default_per_minute),
        )?;
        for limit in self.rate_limit.tiers.values() {
            positive("rate_limit.tiers", u64::from(limit.per_minute))?;
        }
        for limit in self.rate_limit.skills.values() {
            positive("rate_limit.skills", u64::from(limit.per_minute))?;
        }
        positive("agent.max_turns", u64::from(self.agent.max_turns))?;
        positive("agent.tool_timeout_ms", self.agent.tool_timeout_ms)?;
        self.validate_agents()?;
        self.validate_cluster()?;
        Ok(())
    }

    /// Cluster mode needs Postgres, a shared secret, a way for the other nodes to reach
    /// this one, and a heartbeat well inside the lease.
    fn validate_cluster(&self) -> Result<(), ConfigError> {
        let cluster = &self.cluster;
        let problem = |key: &'static str, problem: String| ConfigError::Key { key, problem };
        if !cluster.enabled {
            return Ok(());
        }
        let url = &self.store.database_url;
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(problem(
                "cluster.enabled",
                "needs a Postgres store (store.database_url or DATABASE_URL): the nodes of a \
                 cluster share one Postgres database; SQLite serves one process"
                    .into(),
            ));
        }
        let id = &cluster.node_id;
        let id_ok = id.len() <= 64
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !id_ok {
            return Err(problem(
                "cluster.node_id",
                "must be at most 64 letters, digits, '.', '_' or '-'".into(),
            ));
        }
        if cluster.secret.chars().count() < 16 {
            return Err(problem(
                "cluster.secret",
                "must be at least 16 characters, the same on every node".into(),
            ));
        }
        let advertise = &cluster.advertise_url;
        let scheme = advertise.starts_with("http://") || advertise.starts_with("https://");
        if !advertise.is_empty() && !scheme {
            return Err(problem(
                "cluster.advertise_url",
                "must start with http:// or https://".into(),
            ));
        }
        if advertise.is_empty() && self.bind_addr()?.ip().is_unspecified() {
            return Err(problem(
                "cluster.advertise_url",
                format!(
                    "must be set when server.bind ({}) listens on every address: the other \
                     nodes need an address that reaches this one",
                    self.server.bind
                ),
            ));
        }
        if cluster.lease_ttl_ms < 1000 {
            return Err(problem(
                "cluster.lease_ttl_ms",
                "must be at least 1000".into(),
            ));
        }
        if cluster.heartbeat_ms == 0
            || cluster.heartbeat_ms.saturating_mul(3) > cluster.lease_ttl_ms
        {
            return Err(problem(
                "cluster.heartbeat_ms",
                "must be greater than 0 and at most a third of cluster.lease_ttl_ms".into(),
            ));
        }
        if cluster.forward_timeout_secs == 0 {
            return Err(problem(
                "cluster.forward_timeout_secs",
                "must be greater than 0".into(),
            ));
        }
        if cluster.stream_poll_ms == 0 {
            return Err(problem(
                "cluster.stream_poll_ms",
                "must be greater than 0".into(),
            ));
        }
        Ok(())
    }

    /// Keys are well formed and unique, proxy addresses parse, and an enabled auth has
    /// some way in. (The keys' tenants are checked by the gate when the server starts.)
    fn validate_auth(&self) -> Result<(), ConfigError> {
        let auth = &self.auth;
        let problem = |key: &'static str, problem: String| ConfigError::Key { key, problem };
        if auth.failures_per_minute == 0 {
            return Err(problem(
                "auth.failures_per_minute",
                "must be greater than 0".into(),
            ));
        }
        let mut digests = Vec::new();
        for (i, entry) in auth.api_keys.iter().enumerate() {
            let n = i + 1;
            let Some(digest) = entry.digest() else {
                return Err(problem(
                    "auth.api_keys",
                    format!("entry {n}: set exactly one of key and key_sha256"),
                ));
            };
            if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(problem(
                    "auth.api_keys",
                    format!("entry {n}: key_sha256 must be 64 hex digits"),
                ));
            }
            if digests.contains(&digest) {
                return Err(problem(
                    "auth.api_keys",
                    format!("entry {n}: the key is listed twice"),
                ));
            }
            digests.push(digest);
        }
        for address in &auth.trusted_proxy.addresses {
            address.parse::<std::net::IpAddr>().map_err(|e| {
                problem(
                    "auth.trusted_proxy.addresses",
                    format!("{address:?} is not an IP address ({e})"),
                )
            })?;
        }
        if auth.enabled && auth.api_keys.is_empty() && auth.trusted_proxy.tenant_header.is_empty() {
            return Err(problem(
                "auth.enabled",
                "is true but no [[auth.api_keys]] and no auth.trusted_proxy.tenant_header are \
                 configured, so every request would be refused (set auth.enabled = false for \
                 a local server without authentication)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Providers named by agents exist, agent names are unique, and sub-agents have a model.
    fn validate_agents(&self) -> Result<(), ConfigError> {
        let provider = |key: &'static str, name: &str| {
            if name.is_empty() || self.providers.contains_key(name) {
                Ok(())
            } else {
                Err(ConfigError::Key {
                    key,
                    problem: format!(
                        "names provider {name:?}, which no [providers.{name}] defines"
                    ),
                })
            }
        };
        provider("agent.provider", &self.agent.provider)?;
        provider("agent.routing_provider", &self.agent.routing_provider)?;
        let mut names = vec![self.agent.name.as_str()];
        let mut stack: Vec<(&SubAgentSettings, &str)> = self
            .agent
            .sub_agents
            .iter()
            .map(|sub| (sub, self.agent.provider.as_str()))
            .collect();
        while let Some((sub, parent_provider)) = stack.pop() {
            let sub_provider = if sub.provider.is_empty() {
                parent_provider
            } else {
                sub.provider.as_str()
            };
            if sub.name.trim().is_empty() {
                return Err(ConfigError::Key {
                    key: "agent.sub_agents",
                    problem: "an agent has an empty name".into(),
                });
            }
            if names.contains(&sub.name.as_str()) {
                return Err(ConfigError::Key {
                    key: "agent.sub_agents",
                    problem: format!("agent name {:?} is used twice", sub.name),
                });
            }
            names.push(&sub.name);
            provider("agent.sub_agents", &sub.provider)?;
            if sub_provider.is_empty() {
                return Err(ConfigError::Key {
                    key: "agent.sub_agents",
                    problem: format!(
                        "agent {:?} has no provider (set agent.provider or its own)",
                        sub.name
                    ),
                });
            }
            stack.extend(sub.sub_agents.iter().map(|s| (s, sub_provider)));
        }
        Ok(())
    }

    pub fn bind_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.server.bind.parse().map_err(|e| ConfigError::Key {
            key: "server.bind",
            problem: format!("is not HOST:PORT ({e})"),
        })
    }

    /// The gRPC listener's address, `None` when the binding is off.
    pub fn grpc_bind_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        let bind = self.server.grpc_bind.trim();
        if bind.is_empty() {
            return Ok(None);
        }
        bind.parse().map(Some).map_err(|e| ConfigError::Key {
            key: "server.grpc_bind",
            problem: format!("is not HOST:PORT ({e}); empty turns gRPC off"),
        })
    }

    /// The knowledge repository's directory.
    pub fn knowledge_repo(&self) -> PathBuf {
        if self.knowledge.repo_path.as_os_str().is_empty() {
            self.store.data_dir.join("knowledge")
        } else {
            self.knowledge.repo_path.clone()
        }
    }

    /// Threads that host thread actors.
    pub fn arbiter_count(&self) -> usize {
        match self.threads.arbiters {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
            n => n,
        }
    }
}

/// Puts an environment value at `path` in a nested dictionary. Values are parsed as
/// TOML scalars or arrays when they can be (`8080`, `true`, `["a"]`), else kept as strings.
fn insert_path(dict: &mut figment::value::Dict, path: &[String], raw: &str) {
    use figment::value::Value;
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if rest.is_empty() {
        let value = raw
            .parse::<figment::value::Value>()
            .unwrap_or_else(|_| Value::from(raw.to_owned()));
        dict.insert(first.clone(), value);
        return;
    }
    let entry = dict
        .entry(first.clone())
        .or_insert_with(|| Value::from(figment::value::Dict::new()));
    if let Value::Dict(_, inner) = entry {
        insert_path(inner, rest, raw);
    }
}

fn describe(e: &figment::Error) -> String {
    e.clone()
        .into_iter()
        .map(|e| {
            let key = e.path.join(".");
            if key.is_empty() {
                e.kind.to_string()
            } else {
                format!("`{key}`: {}", e.kind)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(env: &[(&str, &str)], overrides: Overrides) -> Result<Settings, ConfigError> {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Settings::load_from(&overrides, env)
    }

    fn with_file(text: &str) -> (tempfile::TempDir, Overrides) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).unwrap();
        let o = Overrides {
            config_file: Some(path),
            ..Default::default()
        };
        (dir, o)
    }

    #[test]
    fn a_partial_file_keeps_every_other_default() {
        let (_d, o) = with_file("auth.enabled = false\n[threads]\nhistory_window = 7\n");
        let s = load(&[], o).unwrap();
        assert_eq!(s.threads.history_window, 7);
        assert_eq!(s.server, ServerSettings::default());
    }

    #[test]
    fn flags_beat_env_beat_file() {
        let (_d, mut o) = with_file("auth.enabled = false\n[server]\nbind = \"127.0.0.1:1000\"\n");
        let env = [("AGENT_A2A__SERVER__BIND", "127.0.0.1:2000")];
        assert_eq!(load(&env, o.clone()).unwrap().server.bind, "127.0.0.1:2000");
        o.bind = Some("127.0.0.1:3000".into());
        assert_eq!(load(&env, o).unwrap().server.bind, "127.0.0.1:3000");
    }

    #[test]
    fn env_values_are_typed() {
        let env = [
            ("AGENT_A2A__THREADS__HISTORY_WINDOW", "9"),
            ("AGENT_A2A__LOG__FORMAT", "json"),
        ];
        let s = load(&env, Overrides::default()).unwrap();
        assert_eq!(s.threads.history_window, 9);
        assert_eq!(s.log.format, LogFormat::Json);
    }

    #[test]
    fn database_url_env_selects_postgres_and_the_flag_beats_it() {
        let env = [("DATABASE_URL", "postgres://a@127.0.0.1/x")];
        let s = load(&env, Overrides::default()).unwrap();
        assert_eq!(s.store.database_url, "postgres://a@127.0.0.1/x");
        let o = Overrides {
            database_url: Some("sqlite:/tmp/x.db".into()),
            ..Default::default()
        };
        assert_eq!(
            load(&env, o).unwrap().store.database_url,
            "sqlite:/tmp/x.db"
        );
    }

    #[test]
    fn invalid_values_name_the_key() {
        let (_d, o) = with_file("[threads]\nhistory_window = \"lots\"\n");
        let e = load(&[], o).unwrap_err().to_string();
        assert!(e.contains("threads.history_window"), "{e}");

        let (_d, o) = with_file("[threads]\nhistory_window = 0\n");
        let e = load(&[], o).unwrap_err().to_string();
        assert!(e.contains("threads.history_window"), "{e}");

        let e = load(
            &[("AGENT_A2A__SERVER__BIND", "nowhere")],
            Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("server.bind"), "{e}");
    }

    #[test]
    fn cluster_mode_needs_postgres_a_secret_and_a_heartbeat_inside_the_lease() {
        let base = [
            ("AGENT_A2A__CLUSTER__ENABLED", "true"),
            ("DATABASE_URL", "postgres://postgres@127.0.0.1/a2a"),
            ("AGENT_A2A__CLUSTER__SECRET", "sixteen-chars-ok"),
        ];
        let s = load(&base, Overrides::default()).unwrap();
        assert!(s.cluster.enabled);
        let refused = |extra: &[(&str, &str)], key: &str| {
            let mut env: Vec<(&str, &str)> = base.to_vec();
            env.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
            env.extend_from_slice(extra);
            let e = load(&env, Overrides::default()).unwrap_err().to_string();
            assert!(e.contains(key), "{extra:?}: {e}");
        };
        refused(&[("DATABASE_URL", "")], "cluster.enabled");
        refused(&[("AGENT_A2A__CLUSTER__SECRET", "short")], "cluster.secret");
        refused(
            &[("AGENT_A2A__CLUSTER__NODE_ID", "a node")],
            "cluster.node_id",
        );
        refused(
            &[("AGENT_A2A__CLUSTER__ADVERTISE_URL", "10.0.0.5:8080")],
            "cluster.advertise_url",
        );
        refused(
            &[("AGENT_A2A__SERVER__BIND", "0.0.0.0:8080")],
            "cluster.advertise_url",
        );
        refused(
            &[("AGENT_A2A__CLUSTER__LEASE_TTL_MS", "999")],
            "cluster.lease_ttl_ms",
        );
        refused(
            &[("AGENT_A2A__CLUSTER__HEARTBEAT_MS", "0")],
            "cluster.heartbeat_ms",
        );
        refused(
            &[
                ("AGENT_A2A__CLUSTER__LEASE_TTL_MS", "3000"),
                ("AGENT_A2A__CLUSTER__HEARTBEAT_MS", "1001"),
            ],
            "cluster.heartbeat_ms",
        );
        refused(
            &[("AGENT_A2A__CLUSTER__FORWARD_TIMEOUT_SECS", "0")],
            "cluster.forward_timeout_secs",
        );
        refused(
            &[("AGENT_A2A__CLUSTER__STREAM_POLL_MS", "0")],
            "cluster.stream_poll_ms",
        );
    }

    #[test]
    fn the_grpc_binding_is_on_by_default_and_checked() {
        let s = load(&[], Overrides::default()).unwrap();
        assert_eq!(
            s.grpc_bind_addr().unwrap(),
            Some("127.0.0.1:8081".parse().unwrap())
        );
        let off = Overrides {
            grpc_bind: Some(String::new()),
            ..Default::default()
        };
        assert_eq!(load(&[], off).unwrap().grpc_bind_addr().unwrap(), None);
        let e = load(
            &[("AGENT_A2A__SERVER__GRPC_BIND", "nowhere")],
            Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("server.grpc_bind"), "{e}");
        for bad in ["http://h:1", "h", ":1", "h:port"] {
            let e = load(
                &[("AGENT_A2A__SERVER__GRPC_PUBLIC_ADDRESS", bad)],
                Overrides::default(),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains("server.grpc_public_address"), "{bad}: {e}");
        }
        let s = load(
            &[(
                "AGENT_A2A__SERVER__GRPC_PUBLIC_ADDRESS",
                "a2a.example.org:443",
            )],
            Overrides::default(),
        )
        .unwrap();
        assert_eq!(s.server.grpc_public_address, "a2a.example.org:443");
        let e = load(
            &[("AGENT_A2A__SERVER__GRPC_MAX_STREAMS_PER_CONNECTION", "0")],
            Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("server.grpc_max_streams_per_connection"), "{e}");
    }

    #[test]
    fn failed_authentications_have_a_positive_budget() {
        let e = load(
            &[("AGENT_A2A__AUTH__FAILURES_PER_MINUTE", "0")],
            Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("auth.failures_per_minute"), "{e}");
    }

    #[test]
    fn retry_after_is_never_zero() {
        let e = load(
            &[("AGENT_A2A__SERVER__RETRY_AFTER_SECS", "0")],
            Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("server.retry_after_secs"), "{e}");
    }

    const OLLAMA: &str = "auth.enabled = false\n[providers.default]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:11434/v1\"\nmodel = \"llama3.1\"\n";

    #[test]
    fn the_readme_ollama_lines_configure_the_agent() {
        let text = format!("{OLLAMA}[agent]\nprovider = \"default\"\n");
        let (_d, o) = with_file(&text);
        let s = load(&[], o).unwrap();
        assert_eq!(s.agent.provider, "default");
        assert_eq!(s.providers["default"].model, "llama3.1");
        assert_eq!(
            s.providers["default"].max_retries, 2,
            "unset keys take defaults"
        );
        // The same through the environment only.
        let s = load(
            &[
                ("AGENT_A2A__PROVIDERS__DEFAULT__KIND", "openai"),
                (
                    "AGENT_A2A__PROVIDERS__DEFAULT__BASE_URL",
                    "http://127.0.0.1:11434/v1",
                ),
                ("AGENT_A2A__PROVIDERS__DEFAULT__MODEL", "llama3.1"),
                ("AGENT_A2A__AGENT__PROVIDER", "default"),
                ("AGENT_A2A__AUTH__ENABLED", "false"),
            ],
            Overrides::default(),
        )
        .unwrap();
        assert_eq!(s.providers["default"].base_url, "http://127.0.0.1:11434/v1");
    }

    #[test]
    fn the_readme_two_environment_lines_configure_the_agent() {
        let readme = include_str!("../README.md");
        let env: Vec<(String, String)> = readme
            .lines()
            .filter_map(|l| l.strip_prefix("export AGENT_A2A__"))
            .map(|l| {
                let (key, value) = l.split_once('=').unwrap();
                (
                    format!("AGENT_A2A__{key}"),
                    value.trim_matches('\'').to_owned(),
                )
            })
            .collect();
        assert_eq!(env.len(), 2, "the README shows two lines: {env:?}");
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml");
        let o = Overrides {
            config_file: Some(path),
            ..Default::default()
        };
        let s = Settings::load_from(&o, env).unwrap();
        assert_eq!(s.agent.provider, "default");
        let provider = &s.providers["default"];
        assert_eq!(provider.kind, ProviderKind::Openai);
        assert_eq!(provider.base_url, "http://127.0.0.1:11434/v1");
        assert_eq!(provider.model, "llama3.1");
        let mut rest = s.clone();
        rest.agent.provider = String::new();
        rest.providers.clear();
        let mut expected = Settings::default();
        expected.auth.enabled = false;
        assert_eq!(rest, expected, "nothing else changes");
    }

    #[test]
    fn agent_settings_are_checked() {
        let cases = [
            ("[agent]\nprovider = \"nope\"\n", "agent.provider"),
            (
                "[agent]\nrouting_provider = \"nope\"\n",
                "agent.routing_provider",
            ),
            ("[agent]\nmax_turns = 0\n", "agent.max_turns"),
            ("[agent]\ntool_timeout_ms = 0\n", "agent.tool_timeout_ms"),
            (
                "[[agent.sub_agents]]\nname = \"billing\"\n",
                "agent \"billing\" has no provider",
            ),
            (
                "[agent]\nprovider = \"default\"\n[[agent.sub_agents]]\nname = \"a\"\n[[agent.sub_agents]]\nname = \"a\"\n",
                "\"a\" is used twice",
            ),
            (
                "[agent]\nprovider = \"default\"\n[[agent.sub_agents]]\nname = \"agent-a2a\"\n",
                "is used twice",
            ),
        ];
        for (agent, expected) in cases {
            let (_d, o) = with_file(&format!("{OLLAMA}{agent}"));
            let e = load(&[], o).unwrap_err().to_string();
            assert!(e.contains(expected), "{agent}: {e}");
        }
        let nested = "[agent]\nprovider = \"default\"\n[[agent.sub_agents]]\nname = \"a\"\ntools = [\"memory_add\"]\n[[agent.sub_agents.sub_agents]]\nname = \"b\"\n";
        let (_d, o) = with_file(&format!("{OLLAMA}{nested}"));
        let s = load(&[], o).unwrap();
        assert_eq!(s.agent.sub_agents[0].sub_agents[0].name, "b");
    }

    #[test]
    fn lifecycle_bounds_must_be_positive() {
        for (section, key) in [
            ("threads", "janitor_interval_secs"),
            ("threads", "janitor_batch"),
            ("threads", "recover_concurrency"),
            ("health", "timeout_ms"),
        ] {
            let (_d, o) = with_file(&format!("auth.enabled = false\n[{section}]\n{key} = 0\n"));
            let e = load(&[], o).unwrap_err().to_string();
            assert!(
                e.contains(&format!("`{section}.{key}` must be greater than 0")),
                "{e}"
            );
        }
        // No eager recovery at all is a valid choice.
        let (_d, o) = with_file("auth.enabled = false\n[threads]\nrecover_eagerly = 0\n");
        assert_eq!(load(&[], o).unwrap().threads.recover_eagerly, 0);
    }

    #[test]
    fn persistence_bounds_and_sqlite_synchronous_are_checked() {
        let (_d, o) = with_file("auth.enabled = false\n[persistence]\nstart_grace_ms = 10001\n");
        let e = load(&[], o).unwrap_err().to_string();
        assert!(
            e.contains("`persistence.start_grace_ms` must be at most 10000"),
            "{e}"
        );
        for bad in [0, 65] {
            let (_d, o) = with_file(&format!(
                "auth.enabled = false\n[persistence]\ncommits_in_flight = {bad}\n"
            ));
            let e = load(&[], o).unwrap_err().to_string();
            assert!(
                e.contains("`persistence.commits_in_flight` must be from 1 to 64"),
                "{e}"
            );
        }
        let (_d, o) = with_file("auth.enabled = false\n[persistence]\nstart_grace_ms = 0\n");
        assert_eq!(load(&[], o).unwrap().persistence.start_grace_ms, 0);
        let (_d, o) = with_file("auth.enabled = false\n[store]\nsqlite_synchronous = \"full\"\n");
        assert_eq!(
            load(&[], o).unwrap().store.sqlite_synchronous,
            SqliteSynchronous::Full
        );
        let (_d, o) = with_file("auth.enabled = false\n[store]\nsqlite_synchronous = \"off\"\n");
        let e = load(&[], o).unwrap_err().to_string();
        assert!(e.contains("sqlite_synchronous"), "{e}");
    }

    #[test]
    fn unknown_keys_are_refused() {
        let (_d, o) = with_file("[threads]\nhistory_windo = 3\n");
        let e = load(&[], o).unwrap_err().to_string();
        assert!(e.contains("history_windo"), "{e}");
    }

    #[test]
    fn a_missing_config_file_is_an_error() {
        let o = Overrides {
            config_file: Some("/nonexistent/agent-a2a.toml".into()),
            ..Default::default()
        };
        assert!(matches!(load(&[], o), Err(ConfigError::MissingFile(_))));
    }

    #[test]
    fn the_repository_config_file_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml");
        let o = Overrides {
            config_file: Some(path),
            ..Default::default()
        };
        // The one deliberate difference: the file is for local runs and turns auth off
        // (the server says so loudly at start-up); the built-in default keeps it on.
        let mut expected = Settings::default();
        expected.auth.enabled = false;
        assert_eq!(load(&[], o).unwrap(), expected);
    }

    #[test]
    fn auth_is_on_by_default_and_needs_a_way_in() {
        assert!(Settings::default().auth.enabled);
        let (_d, o) = with_file("[server]\nworkers = 1\n");
        let e = load(&[], o).unwrap_err().to_string();
        assert!(e.contains("auth.enabled"), "{e}");
        let (_d, o) = with_file("[auth]\nenabled = false\n");
        assert!(!load(&[], o).unwrap().auth.enabled);
    }

    #[test]
    fn auth_and_rate_limit_settings_are_checked() {
        let on = "[auth]\nenabled = true\n";
        let cases = [
            (
                "[[auth.api_keys]]\ntenant = \"acme\"\n",
                "exactly one of key and key_sha256",
            ),
            (
                "[[auth.api_keys]]\nkey = \"k\"\nkey_sha256 = \"00\"\ntenant = \"acme\"\n",
                "exactly one of key and key_sha256",
            ),
            (
                "[[auth.api_keys]]\nkey_sha256 = \"xyz\"\ntenant = \"acme\"\n",
                "64 hex digits",
            ),
            (
                "[[auth.api_keys]]\nkey = \"k\"\ntenant = \"a\"\n[[auth.api_keys]]\nkey = \"k\"\ntenant = \"b\"\n",
                "listed twice",
            ),
            (
                "[auth.trusted_proxy]\ntenant_header = \"X-Tenant\"\naddresses = [\"proxy\"]\n",
                "not an IP address",
            ),
            (
                "[[auth.api_keys]]\nkey = \"k\"\ntenant = \"a\"\n[rate_limit]\ndefault_per_minute = 0\n",
                "rate_limit.default_per_minute",
            ),
            (
                "[[auth.api_keys]]\nkey = \"k\"\ntenant = \"a\"\n[rate_limit.tiers.pro]\nper_minute = 0\n",
                "rate_limit.tiers",
            ),
            (
                "[[auth.api_keys]]\nkey = \"k\"\ntenant = \"a\"\n[rate_limit.skills.memory]\nper_minute = 0\n",
                "rate_limit.skills",
            ),
        ];
        for (text, expected) in cases {
            let (_d, o) = with_file(&format!("{on}{text}"));
            let e = load(&[], o).unwrap_err().to_string();
            assert!(e.contains(expected), "{text}: {e}");
        }
        // The example shape loads.
        let example = "[auth]\nenabled = true\n[[auth.api_keys]]\nkey = \"dev-key-1\"\ntenant = \"acme\"\ntier = \"free\"\n[rate_limit]\ndefault_per_minute = 100\n[rate_limit.tiers.pro]\nper_minute = 1000\n[rate_limit.skills.memory]\nper_minute = 600\n";
        let (_d, o) = with_file(example);
        let s = load(&[], o).unwrap();
        assert_eq!(s.auth.api_keys[0].tier, "free");
        assert_eq!(s.rate_limit.tiers["pro"].per_minute, 1000);
        assert_eq!(s.rate_limit.skills["memory"].per_minute, 600);
    }
}
