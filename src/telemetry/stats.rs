//! The numbers behind the operators' dashboard: the last [`WINDOW_SECS`] seconds, one
//! bucket per second, fed by the tap (`telemetry/tap.rs`) on the metrics recorder.
//!
//! The tap sits beside the Prometheus recorder (see `telemetry::metrics_handle`), so the
//! dashboard counts exactly the samples `/metrics` exports — requests, A2A errors,
//! rate-limit refusals, request and commit latencies, batch sizes — and mirrors the
//! gauges (thread actors, active threads, SSE streams, persistence queue, tasks by
//! state). A bucket exists only for seconds in which something was recorded; a gauge
//! keeps its value through the quiet seconds in between, so each bucket remembers the
//! gauges as they were when it opened and as they are now.
//!
//! Latency quantiles come from a DDSketch per bucket (`metrics_util::storage::Summary`,
//! 1 % relative error), merged for whole-window figures.
//!
//! Like the recorder, the collector is process-wide: every server in the process feeds it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use metrics_util::storage::Summary;
use serde::Serialize;

/// Seconds of history kept and served.
pub const WINDOW_SECS: u64 = 120;

/// Relative error of the latency quantiles.
const SKETCH_ALPHA: f64 = 0.01;
/// Most sub-buckets of one sketch (8 bytes each); at 1 % error, 2048 span 1 µs to hours.
const SKETCH_MAX_BUCKETS: u32 = 2048;
/// Smallest latency told apart from zero, in ms (one microsecond).
const SKETCH_MIN_MS: f64 = 0.001;

fn sketch() -> Summary {
    Summary::new(SKETCH_ALPHA, SKETCH_MAX_BUCKETS, SKETCH_MIN_MS)
}

/// The collector every server of the process feeds and reads.
pub fn global() -> &'static Arc<Stats> {
    static STATS: OnceLock<Arc<Stats>> = OnceLock::new();
    STATS.get_or_init(|| Arc::new(Stats::new()))
}

/// What a tapped counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Count {
    /// An HTTP request (or gRPC call); `server_error` for a 5xx status or a gRPC code
    /// that stands for one.
    Request { server_error: bool },
    /// An A2A error answered.
    Error,
    /// A request refused by the rate limiter.
    RateLimited,
    /// A push delivery acknowledged by its receiver.
    PushDelivered,
    /// A push delivery given up or never queued (abandoned, dropped).
    PushLost,
    /// A remote agent's call that brought an answer.
    RemoteAnswered,
    /// A remote agent's call that failed (refused, unreachable, breaker open).
    RemoteFailed,
    /// An MCP server's tool call that brought a result.
    McpAnswered,
    /// An MCP server's tool call that failed (any outcome but `ok`).
    McpFailed,
}

/// What a tapped histogram measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sample {
    /// HTTP request latency (ms).
    RequestLatency,
    /// Commit latency (ms); one sample per commit.
    CommitLatency,
    /// Write batches in one commit.
    BatchSize,
}

/// Which mirrored gauge a tapped gauge moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Level {
    ThreadActors,
    ThreadsActive,
    SseSubscribers,
    PersistQueue,
    PushOutbox,
    /// Tasks in one state (the label value).
    Tasks(String),
}

/// How a gauge changes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Change {
    Add(f64),
    Set(f64),
}

/// The mirrored gauges at one moment. The ones set by the store census are unknown
/// (`None`) until the first census; the others start at 0 with the recorder.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Gauges {
    thread_actors: f64,
    threads_active: Option<f64>,
    sse_subscribers: f64,
    persist_queue: f64,
    push_outbox: f64,
}

impl Gauges {
    fn change(&mut self, level: &Level, change: Change) {
        let apply = |value: f64| match change {
            Change::Add(delta) => value + delta,
            Change::Set(to) => to,
        };
        match level {
            Level::ThreadActors => self.thread_actors = apply(self.thread_actors),
            Level::ThreadsActive => {
                self.threads_active = Some(apply(self.threads_active.unwrap_or(0.0)))
            }
            Level::SseSubscribers => self.sse_subscribers = apply(self.sse_subscribers),
            Level::PersistQueue => self.persist_queue = apply(self.persist_queue),
            Level::PushOutbox => self.push_outbox = apply(self.push_outbox),
            Level::Tasks(_) => {}
        }
    }
}

/// Everything recorded in one second.
struct Bucket {
    /// Seconds since the Unix epoch.
    second: u64,
    requests: u64,
    server_errors: u64,
    errors: u64,
    rate_limited: u64,
    push_delivered: u64,
    push_lost: u64,
    remote_answered: u64,
    remote_failed: u64,
    mcp_answered: u64,
    mcp_failed: u64,
    latency: Summary,
    commit_latency: Summary,
    batches: u64,
    batched_writes: f64,
    /// The gauges when the bucket opened: their value through the quiet seconds before.
    open: Gauges,
    /// The gauges now (or when the second ended).
    close: Gauges,
}

impl Bucket {
    fn new(second: u64, gauges: Gauges) -> Self {
        Self {
            second,
            requests: 0,
            server_errors: 0,
            errors: 0,
            rate_limited: 0,
            push_delivered: 0,
            push_lost: 0,
            remote_answered: 0,
            remote_failed: 0,
            mcp_answered: 0,
            mcp_failed: 0,
            latency: sketch(),
            commit_latency: sketch(),
            batches: 0,
            batched_writes: 0.0,
            open: gauges,
            close: gauges,
        }
    }
}

struct Inner {
    /// Ascending by second, at most [`WINDOW_SECS`] long.
    buckets: VecDeque<Bucket>,
    gauges: Gauges,
    tasks: BTreeMap<String, f64>,
}

impl Inner {
    /// Applies `f` to the bucket of `second`, opened when needed. A clock that stepped
    /// back lands in the newest bucket rather than rewriting history.
    fn at(&mut self, second: u64, f: impl FnOnce(&mut Bucket)) {
        if self
            .buckets
            .back()
            .is_none_or(|newest| second > newest.second)
        {
            while let Some(front) = self.buckets.front()
                && (front.second + WINDOW_SECS <= second
                    || self.buckets.len() >= WINDOW_SECS as usize)
            {
                self.buckets.pop_front();
            }
            self.buckets.push_back(Bucket::new(second, self.gauges));
        }
        if let Some(bucket) = self.buckets.back_mut() {
            f(bucket);
        }
    }
}

/// The per-second collector.
pub struct Stats {
    inner: Mutex<Inner>,
    started: u64,
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    pub fn new() -> Self {
        Self {
            inner: Mutex::new(Inner {
                buckets: VecDeque::with_capacity(WINDOW_SECS as usize),
                gauges: Gauges::default(),
                tasks: BTreeMap::new(),
            }),
            started: now_secs(),
        }
    }

    /// The lock; a panic elsewhere while holding it leaves counts that are still counts.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn count(&self, second: u64, what: Count, n: u64) {
        self.lock().at(second, |bucket| match what {
            Count::Request { server_error } => {
                bucket.requests += n;
                if server_error {
                    bucket.server_errors += n;
                }
            }
            Count::Error => bucket.errors += n,
            Count::RateLimited => bucket.rate_limited += n,
            Count::PushDelivered => bucket.push_delivered += n,
            Count::PushLost => bucket.push_lost += n,
            Count::RemoteAnswered => bucket.remote_answered += n,
            Count::RemoteFailed => bucket.remote_failed += n,
            Count::McpAnswered => bucket.mcp_answered += n,
            Count::McpFailed => bucket.mcp_failed += n,
        });
    }

    pub(super) fn sample(&self, second: u64, what: Sample, value: f64) {
        if !value.is_finite() {
            return;
        }
        self.lock().at(second, |bucket| match what {
            Sample::RequestLatency => bucket.latency.add(value.max(0.0)),
            Sample::CommitLatency => bucket.commit_latency.add(value.max(0.0)),
            Sample::BatchSize => {
                bucket.batches += 1;
                bucket.batched_writes += value;
            }
        });
    }

    pub(super) fn level(&self, second: u64, level: &Level, change: Change) {
        let mut inner = self.lock();
        if let Level::Tasks(state) = level {
            let value = inner.tasks.entry(state.clone()).or_insert(0.0);
            *value = match change {
                Change::Add(delta) => *value + delta,
                Change::Set(to) => to,
            };
            return;
        }
        // Open the second's bucket first: it must remember the value before the change.
        inner.at(second, |_| {});
        inner.gauges.change(level, change);
        let gauges = inner.gauges;
        inner.at(second, |bucket| bucket.close = gauges);
    }

    /// The last [`WINDOW_SECS`] seconds, oldest first, ending now.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_at(now_secs())
    }

    fn snapshot_at(&self, now: u64) -> Snapshot {
        let inner = self.lock();
        let first = now.saturating_sub(WINDOW_SECS - 1);
        let mut series = Series::default();
        let mut window = WindowTotals::default();
        let mut latency = sketch();
        let mut commit_latency = sketch();
        let mut next = 0;
        // The gauges of a quiet second: the last bucket's closing values, else (before
        // any bucket of the window) the next bucket's opening values, else the present.
        let mut carried: Option<Gauges> = None;
        for second in first..=now {
            while next < inner.buckets.len() && inner.buckets[next].second < second {
                carried = Some(inner.buckets[next].close);
                next += 1;
            }
            let bucket = inner.buckets.get(next).filter(|b| b.second == second);
            let gauges = match bucket {
                Some(b) => b.close,
                None => carried
                    .or_else(|| inner.buckets.get(next).map(|b| b.open))
                    .unwrap_or(inner.gauges),
            };
            series.time.push(second);
            series.thread_actors.push(gauges.thread_actors);
            series.threads_active.push(gauges.threads_active);
            series.sse_subscribers.push(gauges.sse_subscribers);
            series.persist_queue.push(gauges.persist_queue);
            series.push_outbox.push(gauges.push_outbox);
            let Some(b) = bucket else {
                series.push_quiet();
                continue;
            };
            series.requests.push(b.requests);
            series.server_errors.push(b.server_errors);
            series.errors.push(b.errors);
            series.rate_limited.push(b.rate_limited);
            series.push_delivered.push(b.push_delivered);
            series.push_lost.push(b.push_lost);
            series.remote_answered.push(b.remote_answered);
            series.remote_failed.push(b.remote_failed);
            series.mcp_answered.push(b.mcp_answered);
            series.mcp_failed.push(b.mcp_failed);
            series.latency_p50_ms.push(quantile(&b.latency, 0.5));
            series.latency_p99_ms.push(quantile(&b.latency, 0.99));
            series.commits.push(b.commit_latency.count() as u64);
            series.commit_p50_ms.push(quantile(&b.commit_latency, 0.5));
            series.commit_p99_ms.push(quantile(&b.commit_latency, 0.99));
            series
                .mean_batch
                .push((b.batches > 0).then(|| round(b.batched_writes / b.batches as f64)));
            window.requests += b.requests;
            window.server_errors += b.server_errors;
            window.errors += b.errors;
            window.rate_limited += b.rate_limited;
            window.push_delivered += b.push_delivered;
            window.push_lost += b.push_lost;
            window.remote_answered += b.remote_answered;
            window.remote_failed += b.remote_failed;
            window.mcp_answered += b.mcp_answered;
            window.mcp_failed += b.mcp_failed;
            window.commits += b.commit_latency.count() as u64;
            // Every sketch here is built by `sketch()`, so merging cannot fail.
            let _ = latency.merge(&b.latency);
            let _ = commit_latency.merge(&b.commit_latency);
        }
        window.latency_p50_ms = quantile(&latency, 0.5);
        window.latency_p99_ms = quantile(&latency, 0.99);
        window.commit_p99_ms = quantile(&commit_latency, 0.99);
        let current = inner.gauges;
        Snapshot {
            now,
            window_secs: WINDOW_SECS,
            uptime_secs: now.saturating_sub(self.started),
            version: env!("CARGO_PKG_VERSION"),
            series,
            window,
            current: Current {
                thread_actors: current.thread_actors,
                threads_active: current.threads_active,
                sse_subscribers: current.sse_subscribers,
                persist_queue: current.persist_queue,
                push_outbox: current.push_outbox,
            },
            tasks_by_state: inner.tasks.clone(),
        }
    }
}

pub(super) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn quantile(summary: &Summary, q: f64) -> Option<f64> {
    summary.quantile(q).map(round)
}

/// Three decimals: a microsecond is as fine as a dashboard needs.
fn round(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// `/dashboard/stats.json`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// The newest second, in seconds since the Unix epoch.
    pub now: u64,
    pub window_secs: u64,
    pub uptime_secs: u64,
    pub version: &'static str,
    pub series: Series,
    pub window: WindowTotals,
    pub current: Current,
    /// Tasks in the store by state (empty before the first census).
    pub tasks_by_state: BTreeMap<String, f64>,
}

/// One value per second of the window, oldest first. Quantiles of a second without
/// samples are `null`, as are active threads before the first census.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Series {
    pub time: Vec<u64>,
    pub requests: Vec<u64>,
    pub server_errors: Vec<u64>,
    pub errors: Vec<u64>,
    pub rate_limited: Vec<u64>,
    pub push_delivered: Vec<u64>,
    pub push_lost: Vec<u64>,
    pub remote_answered: Vec<u64>,
    pub remote_failed: Vec<u64>,
    pub mcp_answered: Vec<u64>,
    pub mcp_failed: Vec<u64>,
    pub latency_p50_ms: Vec<Option<f64>>,
    pub latency_p99_ms: Vec<Option<f64>>,
    pub commits: Vec<u64>,
    pub commit_p50_ms: Vec<Option<f64>>,
    pub commit_p99_ms: Vec<Option<f64>>,
    pub mean_batch: Vec<Option<f64>>,
    pub persist_queue: Vec<f64>,
    pub push_outbox: Vec<f64>,
    pub thread_actors: Vec<f64>,
    pub threads_active: Vec<Option<f64>>,
    pub sse_subscribers: Vec<f64>,
}

impl Series {
    /// The event columns of a second in which nothing happened.
    fn push_quiet(&mut self) {
        self.requests.push(0);
        self.server_errors.push(0);
        self.errors.push(0);
        self.rate_limited.push(0);
        self.push_delivered.push(0);
        self.push_lost.push(0);
        self.remote_answered.push(0);
        self.remote_failed.push(0);
        self.mcp_answered.push(0);
        self.mcp_failed.push(0);
        self.latency_p50_ms.push(None);
        self.latency_p99_ms.push(None);
        self.commits.push(0);
        self.commit_p50_ms.push(None);
        self.commit_p99_ms.push(None);
        self.mean_batch.push(None);
    }
}

/// Sums and quantiles over the whole window.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowTotals {
    pub requests: u64,
    pub server_errors: u64,
    pub errors: u64,
    pub rate_limited: u64,
    pub push_delivered: u64,
    pub push_lost: u64,
    pub remote_answered: u64,
    pub remote_failed: u64,
    pub mcp_answered: u64,
    pub mcp_failed: u64,
    pub commits: u64,
    pub latency_p50_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    pub commit_p99_ms: Option<f64>,
}

/// The gauges now.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Current {
    pub thread_actors: f64,
    pub threads_active: Option<f64>,
    pub sse_subscribers: f64,
    pub persist_queue: f64,
    pub push_outbox: f64,
}

#[cfg(test)]
mod tests {
    //! Unit tests of the per-second collector and of the tap that feeds it.

    use super::*;
    use crate::telemetry::tap::Tap;

    const T: u64 = 1_000_000;

    #[test]
    fn counts_and_latencies_land_in_their_second() {
        let stats = Stats::new();
        stats.count(
            T - 2,
            Count::Request {
                server_error: false,
            },
            3,
        );
        stats.count(T - 2, Count::Request { server_error: true }, 1);
        for ms in 1..=100 {
            stats.sample(T - 2, Sample::RequestLatency, f64::from(ms));
        }
        stats.count(T, Count::Error, 2);
        stats.count(T, Count::RateLimited, 1);
        stats.sample(T, Sample::CommitLatency, 8.0);
        stats.sample(T, Sample::BatchSize, 3.0);
        stats.sample(T, Sample::BatchSize, 1.0);
        let s = stats.snapshot_at(T);
        let n = s.series.time.len();
        assert_eq!(n, WINDOW_SECS as usize);
        assert_eq!(s.series.time[n - 1], T);
        assert_eq!(s.series.requests[n - 3], 4);
        assert_eq!(s.series.server_errors[n - 3], 1);
        assert_eq!(s.series.requests[n - 2], 0, "a quiet second counts nothing");
        assert_eq!(s.series.errors[n - 1], 2);
        assert_eq!(s.series.rate_limited[n - 1], 1);
        let p50 = s.series.latency_p50_ms[n - 3].unwrap();
        assert!((p50 - 50.0).abs() <= 1.5, "{p50}");
        let p99 = s.series.latency_p99_ms[n - 3].unwrap();
        assert!((p99 - 99.0).abs() <= 2.0, "{p99}");
        assert_eq!(s.series.latency_p50_ms[n - 2], None);
        assert_eq!(s.series.commits[n - 1], 1);
        assert_eq!(s.series.mean_batch[n - 1], Some(2.0));
        assert_eq!(s.window.requests, 4);
        assert_eq!(s.window.errors, 2);
        assert_eq!(s.window.commits, 1);
        assert!(s.window.latency_p99_ms.is_some());
    }

    #[test]
    fn gauges_hold_their_value_through_quiet_seconds() {
        let stats = Stats::new();
        stats.level(T - 10, &Level::ThreadActors, Change::Add(2.0));
        stats.level(T - 5, &Level::ThreadActors, Change::Add(-1.0));
        stats.level(T - 5, &Level::ThreadsActive, Change::Set(7.0));
        let s = stats.snapshot_at(T);
        let n = s.series.time.len();
        let at = |ago: usize| s.series.thread_actors[n - 1 - ago];
        // Before the first change the gauge had its opening value (0).
        assert_eq!(at(11), 0.0);
        assert_eq!(at(10), 2.0);
        assert_eq!(at(6), 2.0);
        assert_eq!(at(5), 1.0);
        assert_eq!(at(0), 1.0);
        assert_eq!(
            s.series.threads_active[n - 7],
            None,
            "unknown before the census"
        );
        assert_eq!(s.series.threads_active[n - 1], Some(7.0));
        assert_eq!(s.current.thread_actors, 1.0);
    }

    #[test]
    fn old_seconds_fall_out_of_the_window() {
        let stats = Stats::new();
        stats.count(T, Count::Error, 1);
        stats.level(T, &Level::SseSubscribers, Change::Add(1.0));
        stats.count(T + WINDOW_SECS + 5, Count::Error, 1);
        let s = stats.snapshot_at(T + WINDOW_SECS + 5);
        assert_eq!(s.window.errors, 1);
        assert_eq!(stats.lock().buckets.len(), 1);
        // The evicted bucket's gauges still carry through: the new bucket opened with them.
        assert!(s.series.sse_subscribers.iter().all(|&v| v == 1.0));
    }

    #[test]
    fn a_clock_that_steps_back_does_not_rewrite_history() {
        let stats = Stats::new();
        stats.count(T, Count::Error, 1);
        stats.count(T - 30, Count::Error, 1);
        let s = stats.snapshot_at(T);
        assert_eq!(s.series.errors.last(), Some(&2));
        assert_eq!(s.window.errors, 2);
    }

    #[test]
    fn the_tap_sees_only_the_dashboard_metrics() {
        let stats = Arc::new(Stats::new());
        let tap = Tap::new(stats.clone());
        metrics::with_local_recorder(&tap, || {
            metrics::counter!(crate::telemetry::HTTP_REQUESTS, "binding" => "jsonrpc", "method" => "SendMessage", "status" => "200").increment(2);
            metrics::counter!(crate::telemetry::HTTP_REQUESTS, "status" => "503").increment(1);
            // gRPC calls: the client's bad input is not the server's error, INTERNAL is.
            metrics::counter!(crate::telemetry::HTTP_REQUESTS, "binding" => "grpc", "method" => "GetTask", "status" => "INVALID_ARGUMENT").increment(3);
            metrics::counter!(crate::telemetry::HTTP_REQUESTS, "binding" => "grpc", "method" => "GetTask", "status" => "INTERNAL").increment(1);
            metrics::counter!(crate::telemetry::ERRORS, "reason" => "TASK_NOT_FOUND").increment(1);
            metrics::counter!(crate::telemetry::RATE_LIMITED, "tenant_id" => "t", "skill_name" => "s")
                .increment(1);
            metrics::counter!(crate::telemetry::TASK_TRANSITIONS, "state" => "completed")
                .increment(5);
            metrics::histogram!(crate::telemetry::HTTP_LATENCY_MS).record(4.0);
            metrics::histogram!(crate::telemetry::SKILL_LATENCY_MS).record(400.0);
            metrics::gauge!(crate::telemetry::SSE_SUBSCRIBERS).increment(1.0);
            metrics::gauge!(crate::telemetry::PERSIST_QUEUE).set(3.0);
            metrics::gauge!(crate::telemetry::TASKS, "state" => "working").set(4.0);
        });
        let s = stats.snapshot();
        assert_eq!(s.window.requests, 7);
        assert_eq!(s.window.server_errors, 2);
        assert_eq!(s.window.errors, 1);
        assert_eq!(s.window.rate_limited, 1);
        assert_eq!(s.window.latency_p50_ms.map(f64::round), Some(4.0));
        assert_eq!(s.current.sse_subscribers, 1.0);
        assert_eq!(s.current.persist_queue, 3.0);
        assert_eq!(s.tasks_by_state.get("working"), Some(&4.0));
    }
}
