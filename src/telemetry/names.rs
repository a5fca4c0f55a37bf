//! The name of every metric the server emits, with what it counts and by which labels.
//! Their `# HELP` texts are registered with the recorder (`recorder.rs`); every other
//! module names a metric by these constants (`telemetry::NAME`), never by its string.

// HTTP (recorded by the request middleware in `http`).

/// Requests by `binding` (`jsonrpc`, `http_json`, `grpc`, `other`), `method` (the A2A
/// operation, or the route pattern for other routes) and `status` (the HTTP status; for
/// `grpc`, the gRPC status code's name).
pub const HTTP_REQUESTS: &str = "agent_a2a_http_requests_total";
/// Request latency in milliseconds (until the response head; an SSE stream's lifetime is
/// not included) by `binding` and `method`.
pub const HTTP_LATENCY_MS: &str = "agent_a2a_http_request_duration_ms";
/// A2A errors answered (including those ending an SSE stream), by JSON-RPC `code`, A2A
/// `reason` and `method`.
pub const ERRORS: &str = "agent_a2a_errors_total";
/// Open SSE streams.
pub const SSE_SUBSCRIBERS: &str = "agent_a2a_sse_subscribers";
/// Open gRPC event streams (`SendStreamingMessage`, `SubscribeToTask`).
pub const GRPC_STREAMS: &str = "agent_a2a_grpc_streams";
/// New event streams refused because `streaming.max_streams` were open, by `binding`.
pub const STREAMS_REFUSED: &str = "agent_a2a_streams_refused_total";
/// Requests refused by the rate limiter, by `tenant_id` and `skill_name`.
pub const RATE_LIMITED: &str = "agent_a2a_rate_limited_total";
/// Failed authentications by `outcome`: `refused` (401) or `throttled` (429: the client
/// address spent its `auth.failures_per_minute`). No address label: addresses are
/// unbounded.
pub const AUTH_FAILURES: &str = "agent_a2a_auth_failures_total";
/// Failed authentications counted in the shared overflow budget because the table of
/// tracked addresses was full (`auth.failure_tracking_max_addresses`).
pub const AUTH_FAILURE_OVERFLOW: &str = "agent_a2a_auth_failure_overflow_total";
/// Refused bearer tokens (JWT) by `reason`: `expired`, `not_yet_valid`, `audience`,
/// `issuer`, `unknown_key`, `algorithm`, `signature`, `malformed`, `too_large`,
/// `critical`, `tenant`.
pub const JWT_REFUSALS: &str = "agent_a2a_jwt_refusals_total";
/// Fetches of an issuer's signing keys (JWKS) by `issuer` (configured, so bounded) and
/// `outcome` (`ok`, `error`).
pub const JWKS_FETCHES: &str = "agent_a2a_jwks_fetches_total";

// Threads and tasks.

/// Threads that can still be continued (status `active`, not past their expiry), counted
/// in the store every `metrics.census_interval_secs`.
pub const THREADS_ACTIVE: &str = "agent_a2a_threads_active";
/// How long one store census (the count behind [`THREADS_ACTIVE`] and [`TASKS`]) took,
/// in milliseconds.
pub const CENSUS_MS: &str = "agent_a2a_store_census_duration_ms";
/// Tasks in the store by `state`, counted with [`THREADS_ACTIVE`].
pub const TASKS: &str = "agent_a2a_tasks";
/// Thread actors resident in memory.
pub const THREAD_ACTORS: &str = "agent_a2a_thread_actors";
/// Thread actors restarted by their supervisor after a panic.
pub const THREAD_RESTARTS: &str = "agent_a2a_thread_actor_restarts_total";
/// Task state changes by `state` (the state entered).
pub const TASK_TRANSITIONS: &str = "agent_a2a_task_transitions_total";

// Persistence.

/// Write batches per transaction.
pub const PERSIST_BATCH: &str = "agent_a2a_persistence_batch_size";
/// Commit latency in milliseconds.
pub const PERSIST_COMMIT_MS: &str = "agent_a2a_persistence_commit_duration_ms";
/// Write batches waiting for the persistence actor.
pub const PERSIST_QUEUE: &str = "agent_a2a_persistence_queue_depth";
/// Failed commits.
pub const PERSIST_FAILURES: &str = "agent_a2a_persistence_failures_total";
/// SQLite: how long a checkpoint of the WAL took, in milliseconds, by who ran it (`by`:
/// the checkpoint `thread`, or the `writer` copying what the thread left).
pub const SQLITE_CHECKPOINT_MS: &str = "agent_a2a_sqlite_checkpoint_duration_ms";
/// SQLite: pages in the WAL after the last commit (it starts over once checkpointed).
pub const SQLITE_WAL_PAGES: &str = "agent_a2a_sqlite_wal_pages";
/// Postgres: 1 when the server's tables are left out of autovacuum (the server's
/// `autovacuum` or `track_counts` off, or a table's `autovacuum_enabled = false`), so the
/// space of updated and deleted rows is never reused unless someone runs `VACUUM`.
pub const POSTGRES_AUTOVACUUM_OFF: &str = "agent_a2a_postgres_autovacuum_off";
/// Postgres: `ANALYZE`s the server ran of its own tables, by table, each when the table
/// had grown to twice its size at its last analysis (`store.postgres_analyze_interval_secs`).
pub const POSTGRES_ANALYZED: &str = "agent_a2a_postgres_analyzed_total";

// Push notifications (recorded by the delivery in `push`).

/// Deliveries finished, by `outcome`: `delivered` (2xx), `abandoned` (past
/// `push.max_attempts` or `push.max_age_secs`, or refused by the URL policy at delivery),
/// `dropped` (not queued: the outbox was at `push.max_outbox`).
pub const PUSH_DELIVERIES: &str = "agent_a2a_push_deliveries_total";
/// Delivery attempts by `result`: `ok`, `http_error` (a non-2xx status), `failed` (no
/// answer: refused connection, timeout, DNS), `refused` (the URL policy).
pub const PUSH_ATTEMPTS: &str = "agent_a2a_push_attempts_total";
/// Deliveries owed (outbox rows).
pub const PUSH_OUTBOX_DEPTH: &str = "agent_a2a_push_outbox_depth";
/// From an event's commit to its receiver's 2xx, in milliseconds (retries included).
pub const PUSH_DELIVERY_MS: &str = "agent_a2a_push_delivery_latency_ms";
/// Deliveries whose next attempt was put off because their receiver had its fill of
/// attempts (`push.max_concurrent_per_receiver`), its breaker was open, or a probe of it
/// was under way.
pub const PUSH_DEFERRED: &str = "agent_a2a_push_deferred_total";
/// Receiver breakers opened (`push.breaker_failures` failures in a row, or a failed probe).
pub const PUSH_BREAKER_OPENED: &str = "agent_a2a_push_breaker_opened_total";
/// Receivers whose breaker is open or probing.
pub const PUSH_BREAKERS_OPEN: &str = "agent_a2a_push_breakers_open";
/// 1 while the delivery holds every owed delivery in memory and is handed each one at
/// commit (the outbox written, not read); 0 while it reads the outbox.
pub const PUSH_FROM_MEMORY: &str = "agent_a2a_push_from_memory";
/// Times the delivery went back to reading the outbox, by `reason`: `full` (more owed
/// than `push.memory_rows`), `retired` (threads past their retention took owed rows with
/// them), `store_error` (a write of the delivery's failed).
pub const PUSH_FROM_MEMORY_LEFT: &str = "agent_a2a_push_from_memory_left_total";

/// Sends answered with the outcome of an earlier send of the same idempotency key
/// (message id or `Idempotency-Key`), without running the agent again.
pub const IDEMPOTENT_REPLAYS: &str = "agent_a2a_idempotent_replays_total";

/// Sends that read the store for an earlier claim of their idempotency key: retries, and
/// new keys the claim filter could not rule out (see `idempotency.filter_keys`).
pub const IDEMPOTENCY_KEY_READS: &str = "agent_a2a_idempotency_key_reads_total";

// Cluster mode (exported only by a node in a cluster).

/// Live nodes of the cluster, as this node read them at its last lease renewal.
pub const CLUSTER_NODES: &str = "agent_a2a_cluster_nodes";
/// Threads this node took over from a node whose lease had expired.
pub const CLUSTER_TAKEOVERS: &str = "agent_a2a_cluster_takeovers_total";
/// Owed push deliveries this node took over from nodes whose lease had expired (or from
/// a server that ran without cluster mode), to deliver them itself.
pub const CLUSTER_PUSH_ADOPTED: &str = "agent_a2a_cluster_push_adopted_total";
/// Writes refused because another node had taken their thread over: the turn's work for
/// them (a model call, tool calls) was for nothing, and may be done again there.
pub const CLUSTER_FENCED_WRITES: &str = "agent_a2a_cluster_fenced_writes_total";
/// Threads this node gave up while draining, for another node to serve.
pub const CLUSTER_HANDOVERS: &str = "agent_a2a_cluster_handovers_total";
/// Times this node found its lease taken over (it dropped every thread and rejoined).
pub const CLUSTER_LEASE_LOSSES: &str = "agent_a2a_cluster_lease_losses_total";
/// Requests forwarded to the node that owns their thread, by `call`.
pub const CLUSTER_FORWARDED: &str = "agent_a2a_cluster_forwarded_total";
/// Round trip of a forwarded request, in milliseconds.
pub const CLUSTER_FORWARD_MS: &str = "agent_a2a_cluster_forward_duration_ms";

// Skills (recorded by the skill actors).

/// Tool calls by `skill`, `tool` and `outcome` (`ok` or the error kind).
pub const SKILL_CALLS: &str = "agent_a2a_skill_calls_total";
/// Failed tool calls by `skill`, `tool` and `outcome` (the error kind).
pub const SKILL_ERRORS: &str = "agent_a2a_skill_errors_total";
/// Tool-call latency in milliseconds by `skill` and `tool`.
pub const SKILL_LATENCY_MS: &str = "agent_a2a_skill_call_duration_ms";

// Model providers (recorded by the model actors).

/// Generations started, by `provider`.
pub const MODEL_REQUESTS: &str = "agent_a2a_model_requests_total";
/// Time to the first event of a generation's stream in milliseconds, by `provider`.
pub const MODEL_TTFT_MS: &str = "agent_a2a_model_time_to_first_token_ms";
/// Tokens by `provider` and `direction` (`input`, `output`), as the provider reports them.
pub const MODEL_TOKENS: &str = "agent_a2a_model_tokens_total";
/// Pieces of answer streamed by `provider` (text deltas and tool-call fragments): counted
/// whether or not the provider reports usage; on llama.cpp's server one is one token.
pub const MODEL_STREAM_DELTAS: &str = "agent_a2a_model_stream_deltas_total";
/// Failed generations by `provider` and `kind`.
pub const MODEL_ERRORS: &str = "agent_a2a_model_errors_total";

// The janitor (periodic clean-up).

/// Janitor passes run.
pub const JANITOR_RUNS: &str = "agent_a2a_janitor_runs_total";
/// Duration of one janitor pass in milliseconds.
pub const JANITOR_RUN_MS: &str = "agent_a2a_janitor_run_duration_ms";
/// Threads the janitor marked expired.
pub const JANITOR_THREADS_EXPIRED: &str = "agent_a2a_janitor_threads_expired_total";
/// Expired thread-state entries the janitor removed.
pub const JANITOR_STATE_REMOVED: &str = "agent_a2a_janitor_state_entries_removed_total";
/// Idle thread actors the janitor evicted.
pub const JANITOR_ACTORS_EVICTED: &str = "agent_a2a_janitor_actors_evicted_total";
/// Threads past `store.retention_secs` the janitor deleted, with everything in them.
pub const JANITOR_THREADS_DELETED: &str = "agent_a2a_janitor_threads_deleted_total";
/// Duration of one janitor pass's deletions (`store.retention_secs`) in milliseconds.
pub const JANITOR_RETENTION_MS: &str = "agent_a2a_janitor_retention_duration_ms";

// The process.

/// Build information (`version`), always 1.
pub const BUILD_INFO: &str = "agent_a2a_build_info";
/// When the process installed its metrics recorder, in seconds since the Unix epoch.
pub const START_TIME: &str = "agent_a2a_start_time_seconds";

// Remote A2A agents (recorded by `client::tools`).

/// Calls of `ask_<agent>` by `agent` and `outcome`: `ok`, `refused` (the remote refused,
/// failed the task, or answered unreadably), `unreachable` (no connection, no answer in
/// time, a server error: these open its breaker), `open` (not sent: its breaker is open).
pub const REMOTE_AGENT_CALLS: &str = "agent_a2a_remote_agent_calls_total";
/// How long a call of `ask_<agent>` took, by `agent`, in milliseconds (the remote task
/// followed to its end included).
pub const REMOTE_AGENT_CALL_MS: &str = "agent_a2a_remote_agent_call_ms";

// MCP servers' tools (recorded by `client::mcp`).

/// Calls of an MCP server's tools by `server`, `tool` (its name on the server) and
/// `outcome`: `ok`, `refused` (a JSON-RPC error), `tool_error` (the result says
/// `isError`), `timeout`, `unreachable`, `too_large` (over `max_result_bytes`),
/// `garbage`, `breaker_open` (not sent).
pub const MCP_CALLS: &str = "agent_a2a_mcp_calls_total";
/// How long a call of an MCP server's tool took, by `server` and `tool`, in
/// milliseconds.
pub const MCP_CALL_MS: &str = "agent_a2a_mcp_call_ms";
/// 1 while an HTTP MCP server's breaker is open (its calls are paused), by `server`.
pub const MCP_BREAKER_OPEN: &str = "agent_a2a_mcp_breaker_open";
/// Connections to an MCP server made again (a stdio server started again), by `server`.
pub const MCP_RESTARTS: &str = "agent_a2a_mcp_restarts_total";
/// 1 while the connection to an MCP server is up, by `server`.
pub const MCP_SERVER_UP: &str = "agent_a2a_mcp_server_up";
/// `notifications/tools/list_changed` heard from an MCP server, by `server` (its list is
/// read again and taken).
pub const MCP_TOOL_LIST_CHANGES: &str = "agent_a2a_mcp_tool_list_changes_total";
/// `notifications/message` (a server's log messages) heard from an MCP server, by `server`.
pub const MCP_LOG_MESSAGES: &str = "agent_a2a_mcp_log_messages_total";
/// Postgres commits and reads that went unanswered past `store.answer_timeout_ms`.
pub const STORE_ANSWER_TIMEOUTS: &str = "agent_a2a_store_answer_timeouts_total";
/// Forwards that found a peer unreachable (then not called for `cluster.peer_dead_after_ms`).
pub const CLUSTER_PEERS_UNREACHABLE: &str = "agent_a2a_cluster_peers_unreachable_total";
/// 1 while Postgres does not answer (`store::Silence`): new sends are refused.
pub const STORE_SILENT: &str = "agent_a2a_store_silent";
/// Checkpoints the SQLite writer ran itself because the WAL was past
/// `store.sqlite_max_wal_pages`.
pub const SQLITE_WAL_BOUND_CHECKPOINTS: &str = "agent_a2a_sqlite_wal_bound_checkpoints_total";

/// Turns a restart cut short that were picked up where they stopped instead of failed
/// (their unfinished calls could be made again: `Skill::resumable`).
pub const TURNS_RESUMED: &str = "agent_a2a_turns_resumed_total";
/// Remote agents' cards not used because their signature did not verify with the keys
/// of `verify_with`, by `agent`.
pub const REMOTE_AGENT_CARDS_REFUSED: &str = "agent_a2a_remote_agent_cards_refused_total";
