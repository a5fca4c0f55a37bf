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
        metrics::counter!(crate::telemetry::TASK_TRANSITIONS, "state" => "completed").increment(5);
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
