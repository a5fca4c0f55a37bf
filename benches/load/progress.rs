//! Live counters shared by the workers, and the progress bar that shows them on stderr
//! while a run lasts (hidden when stderr is not a terminal, so logs and CI stay clean).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Setup = 0,
    WarmUp = 1,
    Measuring = 2,
    Draining = 3,
}

impl Phase {
    fn label(self) -> &'static str {
        match self {
            Phase::Setup => "setting up",
            Phase::WarmUp => "warming up",
            Phase::Measuring => "measuring",
            Phase::Draining => "draining",
        }
    }
}

/// Counts the workers update as they go; the report is built from their own stats.
#[derive(Default)]
pub struct Live {
    succeeded: AtomicU64,
    failed: AtomicU64,
    phase: AtomicU8,
}

impl Live {
    pub fn succeeded(&self, n: u64) {
        self.succeeded.fetch_add(n, Ordering::Relaxed);
    }

    pub fn failed(&self, n: u64) {
        self.failed.fetch_add(n, Ordering::Relaxed);
    }

    pub fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Relaxed);
    }

    fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            1 => Phase::WarmUp,
            2 => Phase::Measuring,
            3 => Phase::Draining,
            _ => Phase::Setup,
        }
    }
}

/// How long a run is, for the bar's length.
#[derive(Debug, Clone, Copy)]
pub enum Bound {
    /// Warm-up plus measurement.
    Time(Duration),
    /// This many operations after the warm-up (the bar then counts those).
    Count(u64),
}

/// The progress bar; drawn until [`Progress::finish`].
pub struct Progress {
    bar: ProgressBar,
    ticker: tokio::task::JoinHandle<()>,
}

impl Progress {
    /// Starts drawing; `unit` names what is counted ("requests", "events").
    pub fn start(live: Arc<Live>, bound: Bound, unit: &'static str, hidden: bool) -> Self {
        let target = if hidden {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        let length = match bound {
            Bound::Time(total) => u64::try_from(total.as_millis()).unwrap_or(u64::MAX),
            Bound::Count(n) => n,
        };
        let bar = ProgressBar::with_draw_target(Some(length), target);
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] [{bar:30}] {msg}")
                .expect("constant, valid template")
                .progress_chars("=> "),
        );
        let ticker = tokio::spawn(tick(bar.clone(), live, bound, unit));
        Self { bar, ticker }
    }

    pub fn finish(self) {
        self.ticker.abort();
        self.bar.finish_and_clear();
    }
}

async fn tick(bar: ProgressBar, live: Arc<Live>, bound: Bound, unit: &'static str) {
    let mut interval = tokio::time::interval(Duration::from_millis(200));
    // The load starts after the setup (a subscribe run attaches its subscribers first),
    // and a count-bounded run counts only after its warm-up.
    let mut load_started: Option<Instant> = None;
    let mut measured_from: Option<u64> = None;
    // The rate shown is over the last second or so, not since the start.
    let mut window: VecDeque<(Instant, u64)> = VecDeque::new();
    loop {
        interval.tick().await;
        let now = Instant::now();
        let succeeded = live.succeeded.load(Ordering::Relaxed);
        let failed = live.failed.load(Ordering::Relaxed);
        let done = succeeded + failed;
        window.push_back((now, done));
        while window.len() > 6 {
            window.pop_front();
        }
        let rate = match (window.front(), window.back()) {
            (Some(&(t0, n0)), Some(&(t1, n1))) if t1 > t0 => {
                (n1 - n0) as f64 / (t1 - t0).as_secs_f64()
            }
            _ => 0.0,
        };
        let phase = live.phase();
        if phase != Phase::Setup {
            let started = *load_started.get_or_insert(now);
            if let Bound::Time(_) = bound {
                let elapsed = now.duration_since(started).as_millis();
                bar.set_position(u64::try_from(elapsed).unwrap_or(u64::MAX));
            }
        }
        if phase == Phase::Measuring {
            let baseline = *measured_from.get_or_insert(done);
            if let Bound::Count(_) = bound {
                bar.set_position(done - baseline);
            }
        }
        bar.set_message(format!(
            "{}: {succeeded} {unit} ok, {failed} failed, {rate:.0}/s",
            phase.label()
        ));
    }
}
