//! The load loop of the request scenarios: `--connections` workers, each running one
//! operation at a time, either back to back (closed loop) or on a fixed schedule (open
//! loop, `--rate`).
//!
//! In the open loop every operation has an intended start time, `start + i / rate`,
//! dealt round-robin to the workers as wrk2 does. A worker that falls behind starts its
//! next operation at once, and the latency is measured from the **intended** start, so a
//! slow server cannot hide its queueing delay by slowing the client down (coordinated
//! omission). The delay between intended and actual start is recorded as well.
//!
//! Operations whose intended start falls in the warm-up are run but not recorded. A run
//! ends at `--duration` or after `--requests` measured operations, whichever comes first,
//! or when it is interrupted; operations under way are then finished (each is bounded by
//! `--timeout`). An open loop that is behind schedule when the time is up does not start
//! what it still owes: those operations count as failures ("behind schedule"), so an
//! overloaded server neither stretches the run nor hides the shortfall.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::progress::{Live, Phase};
use crate::protocol::ErrorKind;
use crate::stats::Stats;

/// When operations start, and when the run ends.
#[derive(Debug, Clone)]
pub struct Plan {
    pub connections: usize,
    /// Operations per second over all workers (open loop); `None`: back to back.
    pub rate: Option<f64>,
    pub warmup: Duration,
    pub duration: Option<Duration>,
    pub requests: Option<u64>,
    pub timeout: Duration,
}

/// The name of the histogram of the delay between intended and actual start.
pub const START_DELAY: &str = "start delay (open loop)";

/// One kind of operation, as run by one worker (which may keep state between them, e.g.
/// the conversation a multi-turn worker is in).
pub trait Operation: Send + 'static {
    /// The name of the latency histogram of the whole operation.
    const LATENCY: &'static str;

    /// Runs one operation; `intended` is when it should have started (secondary
    /// latencies are measured from it too). Returns the outcome to count it under.
    fn run(
        &mut self,
        intended: Instant,
        stats: &mut Stats,
    ) -> impl Future<Output = Result<String, ErrorKind>> + Send;

    /// Called after an operation failed or timed out (its future may have been dropped
    /// half-way), to drop any state it left behind.
    fn failed(&mut self, _stats: &mut Stats) {}
}

/// What a run of the driver measured.
pub struct Measured {
    pub stats: Stats,
    /// From the end of the warm-up to the end of the last measured operation.
    pub window: Duration,
}

/// Runs one worker per operation in `workers` (there are `plan.connections` of them).
pub async fn run<O: Operation>(
    plan: &Plan,
    workers: Vec<O>,
    live: Arc<Live>,
    stop: watch::Receiver<bool>,
) -> Measured {
    let start = Instant::now() + Duration::from_millis(10);
    let shared = Arc::new(Shared {
        start,
        measure_from: start + plan.warmup,
        end: plan.duration.map(|d| start + plan.warmup + d),
        tickets: plan.requests.map(AtomicU64::new),
        plan: plan.clone(),
    });
    live.set_phase(if plan.warmup.is_zero() {
        Phase::Measuring
    } else {
        Phase::WarmUp
    });
    let phase_watch = tokio::spawn(enter_measurement(shared.clone(), live.clone()));
    let handles: Vec<_> = workers
        .into_iter()
        .enumerate()
        .map(|(index, op)| {
            tokio::spawn(work(index, op, shared.clone(), live.clone(), stop.clone()))
        })
        .collect();
    let mut stats = Stats::new();
    let mut last_end = shared.measure_from;
    for handle in handles {
        // A worker only ends by returning; a panic there is a bug worth seeing.
        let (worker_stats, worker_end) = handle.await.expect("load worker panicked");
        stats.merge(worker_stats);
        last_end = last_end.max(worker_end);
    }
    phase_watch.abort();
    Measured {
        stats,
        window: last_end.saturating_duration_since(shared.measure_from),
    }
}

struct Shared {
    start: Instant,
    measure_from: Instant,
    end: Option<Instant>,
    /// Measured operations left to start, with `--requests`.
    tickets: Option<AtomicU64>,
    plan: Plan,
}

impl Shared {
    /// Takes a ticket for one measured operation; false when none are left.
    fn claim(&self) -> bool {
        self.tickets.as_ref().is_none_or(|left| {
            left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
        })
    }

    /// The intended start of a worker's `n`-th operation in the open loop.
    fn scheduled(&self, worker: usize, n: u64, rate: f64) -> Instant {
        let slot = n as f64 * self.plan.connections as f64 + worker as f64;
        self.start + Duration::from_secs_f64(slot / rate)
    }

    /// How many measured operations a worker's schedule holds from its `n`-th on.
    fn missed(&self, worker: usize, n: u64, rate: f64, end: Instant) -> u64 {
        (n..)
            .map(|k| self.scheduled(worker, k, rate))
            .take_while(|intended| *intended < end)
            .filter(|intended| *intended >= self.measure_from)
            .count() as u64
    }
}

async fn enter_measurement(shared: Arc<Shared>, live: Arc<Live>) {
    tokio::time::sleep_until(shared.measure_from.into()).await;
    live.set_phase(Phase::Measuring);
}

/// One worker: returns its stats and when its last measured operation ended.
async fn work<O: Operation>(
    index: usize,
    mut op: O,
    shared: Arc<Shared>,
    live: Arc<Live>,
    mut stop: watch::Receiver<bool>,
) -> (Stats, Instant) {
    let mut stats = Stats::new();
    let mut warmup = Stats::new();
    let mut last_end = shared.measure_from;
    for n in 0u64.. {
        let intended = match shared.plan.rate {
            Some(rate) => shared.scheduled(index, n, rate),
            None => Instant::now().max(shared.start),
        };
        if shared.end.is_some_and(|end| intended >= end) || *stop.borrow() {
            break;
        }
        if let (Some(rate), Some(end)) = (shared.plan.rate, shared.end)
            && Instant::now() >= end
        {
            // Behind schedule at the end: the operations this worker still owed are
            // failures, not silently dropped (their latency would only have grown).
            let missed = shared.missed(index, n, rate, end);
            stats.failures(&ErrorKind::BehindSchedule, missed);
            live.failed(missed);
            break;
        }
        if intended > Instant::now() {
            tokio::select! {
                () = tokio::time::sleep_until(intended.into()) => {}
                _ = stop.changed() => break,
            }
        }
        let measured = intended >= shared.measure_from;
        if measured && !shared.claim() {
            break;
        }
        let sink = if measured { &mut stats } else { &mut warmup };
        if shared.plan.rate.is_some() {
            sink.latency(
                START_DELAY,
                Instant::now().saturating_duration_since(intended),
            );
        }
        let result = tokio::time::timeout(shared.plan.timeout, op.run(intended, sink))
            .await
            .unwrap_or(Err(ErrorKind::Timeout));
        let end = Instant::now();
        match result {
            Ok(outcome) => {
                sink.latency(O::LATENCY, end - intended);
                sink.success(&outcome);
                live.succeeded(1);
            }
            Err(kind) => {
                sink.error(&kind);
                op.failed(sink);
                live.failed(1);
            }
        }
        if measured {
            last_end = end;
        }
    }
    (stats, last_end)
}
