//! Logging (tracing to stderr, text or JSON) and metrics (the Prometheus recorder and
//! the names of every metric the server emits).
//!
//! Metric labels never carry task or thread ids: cardinality stays bounded by the
//! number of methods, bindings, states and error codes.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSettings};

/// HTTP requests by `binding`, `method` and `status`.
pub const HTTP_REQUESTS: &str = "agent_a2a_http_requests_total";
/// Request latency in milliseconds by `binding` and `method`.
pub const HTTP_LATENCY_MS: &str = "agent_a2a_http_request_duration_ms";
/// Errors answered, by A2A `reason`.
pub const ERRORS: &str = "agent_a2a_errors_total";
/// Thread actors resident in memory.
pub const THREAD_ACTORS: &str = "agent_a2a_thread_actors";
/// Thread actors restarted by their supervisor after a panic.
pub const THREAD_RESTARTS: &str = "agent_a2a_thread_actor_restarts_total";
/// Task state changes by `state`.
pub const TASK_TRANSITIONS: &str = "agent_a2a_task_transitions_total";
/// Open SSE streams.
pub const SSE_SUBSCRIBERS: &str = "agent_a2a_sse_subscribers";
/// Write batches per transaction.
pub const PERSIST_BATCH: &str = "agent_a2a_persistence_batch_size";
/// Commit latency in milliseconds.
pub const PERSIST_COMMIT_MS: &str = "agent_a2a_persistence_commit_duration_ms";
/// Write batches waiting for the persistence actor.
pub const PERSIST_QUEUE: &str = "agent_a2a_persistence_queue_depth";
/// Failed commits.
pub const PERSIST_FAILURES: &str = "agent_a2a_persistence_failures_total";
/// Build information (`version`), always 1.
pub const BUILD_INFO: &str = "agent_a2a_build_info";

/// Millisecond buckets for latency histograms.
const MS_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 10000.0,
];
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

/// Installs the tracing subscriber once (later calls are no-ops, so tests may call it).
pub fn init_logging(settings: &LogSettings) {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let filter = EnvFilter::try_from_default_env()
            .or_else(|_| EnvFilter::try_new(&settings.level))
            .unwrap_or_else(|_| EnvFilter::new("info"));
        // Colours only for a person at a terminal, never in files or log collectors.
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(ansi)
            .with_writer(std::io::stderr);
        let result = match settings.format {
            LogFormat::Text => builder.try_init(),
            LogFormat::Json => builder.json().try_init(),
        };
        if let Err(e) = result {
            eprintln!("agent-a2a: logging already initialised: {e}");
        }
    });
}

/// The process-wide Prometheus recorder (installed on first use).
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_ms".into()), MS_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(PERSIST_BATCH.into()), BATCH_BUCKETS)
                });
            let recorder = match builder {
                Ok(b) => b.build_recorder(),
                Err(e) => {
                    tracing::error!(error = %e, "invalid metric buckets; using defaults");
                    PrometheusBuilder::new().build_recorder()
                }
            };
            let handle = recorder.handle();
            if let Err(e) = metrics::set_global_recorder(recorder) {
                tracing::warn!(error = %e, "a metrics recorder was already installed");
            }
            metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
            handle
        })
        .clone()
}
