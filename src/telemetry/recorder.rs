//! The process-wide metrics recorder: the Prometheus exporter and the dashboard's tap
//! ([`stats`]) behind one fan-out, installed once ([`metrics_handle`]) with the buckets of
//! the histograms, the `# HELP` text of every metric family, and the series that only move
//! on rare events exported from the start.

use std::sync::{Arc, OnceLock};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::layers::FanoutBuilder;

use super::names::*;
use super::{stats, tap};

/// Millisecond buckets for every `*_ms` histogram: from a tenth of a millisecond (an
/// in-memory answer) to a minute (a long model generation or a stalled database).
const MS_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0,
    10000.0, 30000.0, 60000.0,
];
/// Powers of two up to twice the default `persistence.max_batch`.
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

/// The process-wide Prometheus handle, once [`metrics_handle`] installed the recorder.
static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Whether [`metrics_handle`] has installed the process's recorder: a metric handle taken
/// before would record nowhere, so callers that keep handles wait for this.
pub fn recorder_installed() -> bool {
    HANDLE.get().is_some()
}

/// The process-wide Prometheus recorder, installed on first use together with the
/// dashboard's tap ([`stats::global`]).
pub fn metrics_handle() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_ms".into()), MS_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(PERSIST_BATCH.into()), BATCH_BUCKETS)
                });
            let prometheus = match builder {
                Ok(b) => b.build_recorder(),
                Err(e) => {
                    tracing::error!(error = %e, "invalid metric buckets; using defaults");
                    PrometheusBuilder::new().build_recorder()
                }
            };
            let handle = prometheus.handle();
            let recorder = FanoutBuilder::default()
                .add_recorder(prometheus)
                .add_recorder(tap::Tap::new(Arc::clone(stats::global())))
                .build();
            if let Err(e) = metrics::set_global_recorder(recorder) {
                tracing::warn!(error = %e, "a metrics recorder was already installed");
            }
            describe();
            metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            metrics::gauge!(START_TIME).set(now);
            // Series that only move on rare events are exported from the start, so a
            // query over them has a value (0) before the first event. Adding 0 leaves
            // an existing value alone.
            metrics::counter!(THREAD_RESTARTS).increment(0);
            metrics::counter!(PERSIST_FAILURES).increment(0);
            metrics::counter!(AUTH_FAILURES, "outcome" => "refused").increment(0);
            metrics::counter!(AUTH_FAILURES, "outcome" => "throttled").increment(0);
            metrics::counter!(AUTH_FAILURE_OVERFLOW).increment(0);
            metrics::gauge!(SSE_SUBSCRIBERS).increment(0.0);
            metrics::gauge!(GRPC_STREAMS).increment(0.0);
            for binding in ["jsonrpc", "http_json", "grpc"] {
                metrics::counter!(STREAMS_REFUSED, "binding" => binding).increment(0);
            }
            metrics::gauge!(THREAD_ACTORS).increment(0.0);
            for outcome in ["delivered", "abandoned", "dropped"] {
                metrics::counter!(PUSH_DELIVERIES, "outcome" => outcome).increment(0);
            }
            metrics::gauge!(PUSH_OUTBOX_DEPTH).increment(0.0);
            metrics::counter!(PUSH_DEFERRED).increment(0);
            metrics::counter!(PUSH_BREAKER_OPENED).increment(0);
            metrics::gauge!(PUSH_BREAKERS_OPEN).increment(0.0);
            metrics::gauge!(PUSH_FROM_MEMORY).increment(0.0);
            for reason in ["full", "retired", "store_error"] {
                metrics::counter!(PUSH_FROM_MEMORY_LEFT, "reason" => reason).increment(0);
            }
            metrics::counter!(IDEMPOTENT_REPLAYS).increment(0);
            metrics::counter!(IDEMPOTENCY_KEY_READS).increment(0);
            handle
        })
        .clone()
}

/// The `# HELP` text of every metric family.
fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        HTTP_REQUESTS,
        "Requests by binding (jsonrpc, http_json, grpc, other), method and status (HTTP status; gRPC code name)."
    );
    describe_histogram!(
        HTTP_LATENCY_MS,
        "HTTP request latency in milliseconds (until the response head) by binding and method."
    );
    describe_counter!(
        ERRORS,
        "A2A errors answered, by JSON-RPC code, A2A reason and method."
    );
    describe_gauge!(SSE_SUBSCRIBERS, "Open SSE streams.");
    describe_counter!(
        REMOTE_AGENT_CALLS,
        "Calls of a remote A2A agent's tool (ask_<agent>) by agent and outcome (ok, refused, unreachable, open)."
    );
    describe_counter!(
        REMOTE_AGENT_CARDS_REFUSED,
        "Remote agents' cards refused under verify_with, by agent and reason (unsigned, signature, not_canonical, unreadable)."
    );
    describe_histogram!(
        REMOTE_AGENT_CALL_MS,
        "Duration of a call of a remote A2A agent's tool in milliseconds, by agent (the remote task followed to its end)."
    );
    describe_counter!(
        MCP_CALLS,
        "Calls of an MCP server's tools by server, tool and outcome (ok, refused, tool_error, timeout, unreachable, too_large, garbage, breaker_open)."
    );
    describe_histogram!(
        MCP_CALL_MS,
        "Duration of a call of an MCP server's tool in milliseconds, by server and tool."
    );
    describe_gauge!(
        MCP_BREAKER_OPEN,
        "1 while an HTTP MCP server's breaker is open (its calls are paused), by server."
    );
    describe_counter!(
        MCP_RESTARTS,
        "Connections to an MCP server made again after it ended (a stdio server started again), by server."
    );
    describe_gauge!(
        MCP_SERVER_UP,
        "1 while the connection to an MCP server is up, by server."
    );
    describe_counter!(
        MCP_TOOL_LIST_CHANGES,
        "notifications/tools/list_changed heard from an MCP server, by server (its list is read again and taken)."
    );
    describe_counter!(
        SQLITE_WAL_BOUND_CHECKPOINTS,
        "Checkpoints the SQLite writer ran itself, waiting for readers, because the WAL was past store.sqlite_max_wal_pages."
    );
    describe_counter!(
        CLUSTER_PEERS_UNREACHABLE,
        "Calls to another node that found it unreachable (no connection, or none of its answer): the calls to it then fail at once (503) for cluster.peer_dead_after_ms."
    );
    describe_gauge!(
        STORE_SILENT,
        "1 while Postgres does not answer (a commit or read past store.answer_timeout_ms, or a cluster lease renewal past two cluster.heartbeat_ms, went unanswered, and nothing has been answered since): new sends get 503 and /health/ready fails."
    );
    describe_counter!(
        STORE_ANSWER_TIMEOUTS,
        "Postgres commits and reads not answered within store.answer_timeout_ms: failed as unavailable, their connection not used again (a database cut off by the network answers nothing)."
    );
    describe_counter!(
        MCP_LOG_MESSAGES,
        "notifications/message (its log messages) heard from an MCP server, by server; a few per 10 s are logged, the rest only counted."
    );
    describe_gauge!(
        POSTGRES_AUTOVACUUM_OFF,
        "Postgres: 1 when autovacuum leaves the server's tables out (updated and deleted rows' space is not reused without VACUUM)."
    );
    describe_counter!(
        POSTGRES_ANALYZED,
        "Postgres: ANALYZEs the server ran of a table that had doubled since its last analysis, by table."
    );
    describe_gauge!(GRPC_STREAMS, "Open gRPC event streams.");
    describe_counter!(
        STREAMS_REFUSED,
        "New event streams refused because streaming.max_streams were open, by binding."
    );
    describe_counter!(
        RATE_LIMITED,
        "Requests refused by the rate limiter, by tenant and skill."
    );
    describe_counter!(
        AUTH_FAILURES,
        "Failed authentications by outcome: refused (401) or throttled (429, per client address)."
    );
    describe_counter!(
        AUTH_FAILURE_OVERFLOW,
        "Failed authentications counted in the shared budget of untracked addresses (the table of tracked addresses was full)."
    );
    describe_counter!(JWT_REFUSALS, "Refused bearer tokens (JWT) by reason.");
    describe_counter!(
        JWKS_FETCHES,
        "Fetches of an OIDC issuer's signing keys (JWKS) by issuer and outcome."
    );
    describe_histogram!(
        CENSUS_MS,
        "Duration of one store census (active threads, tasks by state) in milliseconds; censuses are spaced so that they take at most metrics.census_max_busy_percent of the time."
    );
    describe_gauge!(
        THREADS_ACTIVE,
        "Threads that can still be continued (counted in the store)."
    );
    describe_gauge!(TASKS, "Tasks in the store by state.");
    describe_gauge!(THREAD_ACTORS, "Thread actors resident in memory.");
    describe_counter!(
        THREAD_RESTARTS,
        "Thread actors restarted by their supervisor after a panic."
    );
    describe_counter!(TASK_TRANSITIONS, "Task state changes by the state entered.");
    describe_counter!(
        TURNS_RESUMED,
        "Turns a restart cut short that were resumed where they stopped (their unfinished tool calls can be made again without being made twice) instead of failed."
    );
    describe_histogram!(PERSIST_BATCH, "Write batches committed per transaction.");
    describe_histogram!(PERSIST_COMMIT_MS, "Commit latency in milliseconds.");
    describe_histogram!(
        SQLITE_CHECKPOINT_MS,
        "SQLite: WAL checkpoints, in milliseconds, by who ran them (the thread, or the writer copying what it left)."
    );
    describe_gauge!(
        SQLITE_WAL_PAGES,
        "SQLite: pages in the WAL after the last commit."
    );
    describe_gauge!(
        PERSIST_QUEUE,
        "Write batches waiting for the persistence actor."
    );
    describe_counter!(PERSIST_FAILURES, "Failed commits.");
    describe_counter!(
        PUSH_DELIVERIES,
        "Push deliveries finished, by outcome: delivered, abandoned, dropped (outbox full)."
    );
    describe_counter!(
        PUSH_ATTEMPTS,
        "Push delivery attempts by result: ok, http_error, failed, refused."
    );
    describe_gauge!(PUSH_OUTBOX_DEPTH, "Push deliveries owed (outbox rows).");
    describe_counter!(
        PUSH_DEFERRED,
        "Push deliveries put off because their receiver was busy, failing, or being probed."
    );
    describe_counter!(
        PUSH_BREAKER_OPENED,
        "Push receiver breakers opened (failures in a row, or a failed probe)."
    );
    describe_gauge!(
        PUSH_BREAKERS_OPEN,
        "Push receivers whose breaker is open or probing."
    );
    describe_gauge!(
        PUSH_FROM_MEMORY,
        "1 while push deliveries are handed over at commit (the outbox is not read), 0 while the outbox is read."
    );
    describe_counter!(
        PUSH_FROM_MEMORY_LEFT,
        "Times the push delivery went back to reading the outbox, by reason (full, retired, store_error)."
    );
    describe_histogram!(
        PUSH_DELIVERY_MS,
        "From a task event's commit to its receiver's 2xx, in milliseconds (retries included)."
    );
    describe_counter!(
        IDEMPOTENT_REPLAYS,
        "Sends answered with the outcome of an earlier send of the same idempotency key."
    );
    describe_counter!(
        IDEMPOTENCY_KEY_READS,
        "Sends that read the store for an earlier claim of their idempotency key."
    );
    describe_gauge!(
        CLUSTER_NODES,
        "Live nodes of the cluster as of this node's last lease renewal."
    );
    describe_counter!(
        CLUSTER_TAKEOVERS,
        "Threads taken over from nodes whose lease expired."
    );
    describe_counter!(
        CLUSTER_PUSH_ADOPTED,
        "Owed push deliveries taken over from nodes whose lease expired."
    );
    describe_counter!(
        CLUSTER_FENCED_WRITES,
        "Writes refused because another node had taken their thread over (the turn's model and tool calls for them were wasted and may run again there)."
    );
    describe_counter!(
        CLUSTER_HANDOVERS,
        "Threads this node gave up while draining, for another node to serve."
    );
    describe_counter!(
        CLUSTER_LEASE_LOSSES,
        "Times this node found its lease taken over and rejoined."
    );
    describe_counter!(
        CLUSTER_FORWARDED,
        "Requests forwarded to the node owning their thread, by call."
    );
    describe_histogram!(
        CLUSTER_FORWARD_MS,
        "Round trip of a request forwarded to a thread's owner, in milliseconds."
    );
    describe_counter!(SKILL_CALLS, "Tool calls by skill, tool and outcome.");
    describe_counter!(
        SKILL_ERRORS,
        "Failed tool calls by skill, tool and outcome."
    );
    describe_histogram!(
        SKILL_LATENCY_MS,
        "Tool-call latency in milliseconds by skill and tool."
    );
    describe_counter!(MODEL_REQUESTS, "Model generations started, by provider.");
    describe_histogram!(
        MODEL_TTFT_MS,
        "Time to the first event of a model stream in milliseconds, by provider."
    );
    describe_counter!(MODEL_TOKENS, "Model tokens by provider and direction.");
    describe_counter!(
        MODEL_STREAM_DELTAS,
        "Text deltas and tool-call fragments streamed by model providers, by provider."
    );
    describe_counter!(
        MODEL_ERRORS,
        "Failed model generations by provider and kind."
    );
    describe_counter!(JANITOR_RUNS, "Janitor passes run.");
    describe_histogram!(
        JANITOR_RUN_MS,
        "Duration of one janitor pass in milliseconds."
    );
    describe_counter!(
        JANITOR_THREADS_EXPIRED,
        "Threads the janitor marked expired."
    );
    describe_counter!(
        JANITOR_STATE_REMOVED,
        "Expired thread-state entries the janitor removed."
    );
    describe_counter!(
        JANITOR_ACTORS_EVICTED,
        "Idle thread actors the janitor evicted."
    );
    describe_counter!(
        JANITOR_THREADS_DELETED,
        "Threads past store.retention_secs the janitor deleted, with their messages, tasks, event logs and push rows."
    );
    describe_histogram!(
        JANITOR_RETENTION_MS,
        "Duration of one janitor pass's deletions (store.retention_secs) in milliseconds."
    );
    describe_gauge!(BUILD_INFO, "Build information; always 1.");
    describe_gauge!(
        START_TIME,
        "When the process started serving metrics, in seconds since the Unix epoch."
    );
}
