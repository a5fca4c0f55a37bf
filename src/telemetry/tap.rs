//! The recorder behind the dashboard: installed beside the Prometheus recorder (one
//! `Fanout`), it hands the samples of the metrics the dashboard shows to the
//! per-second [`Stats`] and ignores every other metric.

use std::sync::Arc;

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

use super::stats::{Change, Count, Level, Sample, Stats, now_secs};

/// A recorder that hands the dashboard's metrics to a [`Stats`]. Installed beside the
/// Prometheus recorder, never alone.
pub struct Tap {
    stats: Arc<Stats>,
}

impl Tap {
    pub fn new(stats: Arc<Stats>) -> Self {
        Self { stats }
    }
}

fn label<'k>(key: &'k Key, name: &str) -> Option<&'k str> {
    key.labels().find(|l| l.key() == name).map(|l| l.value())
}

/// Whether a request's `status` label is the server's failure: an HTTP 5xx, or a gRPC
/// code that stands for one (`google.rpc.Code`'s HTTP mapping: `UNKNOWN`, `INTERNAL` and
/// `DATA_LOSS` are 500, `UNIMPLEMENTED` 501, `UNAVAILABLE` 503, `DEADLINE_EXCEEDED` 504).
fn server_error(status: &str) -> bool {
    status.starts_with('5')
        || matches!(
            status,
            "UNKNOWN"
                | "INTERNAL"
                | "DATA_LOSS"
                | "UNIMPLEMENTED"
                | "UNAVAILABLE"
                | "DEADLINE_EXCEEDED"
        )
}

impl Recorder for Tap {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let what = match key.name() {
            super::HTTP_REQUESTS => Count::Request {
                server_error: label(key, "status").is_some_and(server_error),
            },
            super::ERRORS => Count::Error,
            super::RATE_LIMITED => Count::RateLimited,
            super::PUSH_DELIVERIES => match label(key, "outcome") {
                Some("delivered") => Count::PushDelivered,
                _ => Count::PushLost,
            },
            super::REMOTE_AGENT_CALLS => match label(key, "outcome") {
                Some("ok") => Count::RemoteAnswered,
                _ => Count::RemoteFailed,
            },
            super::MCP_CALLS => match label(key, "outcome") {
                Some("ok") => Count::McpAnswered,
                _ => Count::McpFailed,
            },
            _ => return Counter::noop(),
        };
        Counter::from_arc(Arc::new(CounterTap {
            stats: self.stats.clone(),
            what,
        }))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let level = match key.name() {
            super::THREAD_ACTORS => Level::ThreadActors,
            super::THREADS_ACTIVE => Level::ThreadsActive,
            super::SSE_SUBSCRIBERS => Level::SseSubscribers,
            super::PERSIST_QUEUE => Level::PersistQueue,
            super::PUSH_OUTBOX_DEPTH => Level::PushOutbox,
            super::TASKS => match label(key, "state") {
                Some(state) => Level::Tasks(state.to_owned()),
                None => return Gauge::noop(),
            },
            _ => return Gauge::noop(),
        };
        Gauge::from_arc(Arc::new(GaugeTap {
            stats: self.stats.clone(),
            level,
        }))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let what = match key.name() {
            super::HTTP_LATENCY_MS => Sample::RequestLatency,
            super::PERSIST_COMMIT_MS => Sample::CommitLatency,
            super::PERSIST_BATCH => Sample::BatchSize,
            _ => return Histogram::noop(),
        };
        Histogram::from_arc(Arc::new(HistogramTap {
            stats: self.stats.clone(),
            what,
        }))
    }
}

struct CounterTap {
    stats: Arc<Stats>,
    what: Count,
}

impl CounterFn for CounterTap {
    fn increment(&self, value: u64) {
        if value > 0 {
            self.stats.count(now_secs(), self.what, value);
        }
    }

    /// The per-second view counts increments; nothing here sets a counter outright.
    fn absolute(&self, _value: u64) {}
}

struct GaugeTap {
    stats: Arc<Stats>,
    level: Level,
}

impl GaugeFn for GaugeTap {
    fn increment(&self, value: f64) {
        self.stats
            .level(now_secs(), &self.level, Change::Add(value));
    }

    fn decrement(&self, value: f64) {
        self.stats
            .level(now_secs(), &self.level, Change::Add(-value));
    }

    fn set(&self, value: f64) {
        self.stats
            .level(now_secs(), &self.level, Change::Set(value));
    }
}

struct HistogramTap {
    stats: Arc<Stats>,
    what: Sample,
}

impl HistogramFn for HistogramTap {
    fn record(&self, value: f64) {
        self.stats.sample(now_secs(), self.what, value);
    }
}
