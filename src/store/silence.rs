//! Whether Postgres answers, as the last bounded calls found it.
//!
//! A call left unanswered past its bound — a commit or a read past
//! `store.answer_timeout_ms`, a cluster lease renewal past two `cluster.heartbeat_ms` — makes
//! the database *silent*; the next call it answers makes it answering again. While it is
//! silent the runtime refuses new sends at once (503 with `Retry-After`) and
//! `/health/ready` fails without a round trip, and the calls that were waiting when it fell
//! silent give up (their outcome is unknown: a retry of the same message finds what was
//! stored). Calls made while it is silent are tried, each within its own bound, and so are
//! the probes the refusals start: whichever is answered first ends the silence.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tokio::sync::watch;

pub struct Silence {
    /// Since when the database has not answered; `None` while it answers.
    since: watch::Sender<Option<Instant>>,
    /// Mirrors `since.is_some()`, for the check every answered call makes.
    silent: AtomicBool,
    /// A probe is on its way.
    probing: AtomicBool,
}

impl Default for Silence {
    fn default() -> Self {
        Self {
            since: watch::Sender::new(None),
            silent: AtomicBool::new(false),
            probing: AtomicBool::new(false),
        }
    }
}

impl Silence {
    pub fn is_silent(&self) -> bool {
        self.silent.load(Ordering::Relaxed)
    }

    /// A call went unanswered past its bound (`what` says which).
    pub fn unanswered(&self, what: &str) {
        let fell = self.since.send_if_modified(|since| {
            if since.is_some() {
                return false;
            }
            *since = Some(Instant::now());
            true
        });
        if fell {
            self.silent.store(true, Ordering::Relaxed);
            metrics::gauge!(crate::telemetry::STORE_SILENT).set(1.0);
            tracing::warn!(
                call = what,
                "postgres does not answer: new sends are refused (503) and /health/ready fails until it answers again"
            );
        }
    }

    /// A call was answered.
    pub fn answered(&self) {
        if !self.is_silent() {
            return;
        }
        let mut was = None;
        self.since.send_if_modified(|since| {
            was = since.take();
            was.is_some()
        });
        if let Some(since) = was {
            self.silent.store(false, Ordering::Relaxed);
            metrics::gauge!(crate::telemetry::STORE_SILENT).set(0.0);
            tracing::info!(
                silent_ms = since.elapsed().as_millis() as u64,
                "postgres answers again"
            );
        }
    }

    /// Resolves when the database falls silent after now: a call that began while it
    /// answered gives up then. (Never, for a call that began while it was silent: that
    /// one waits for its own bound.)
    pub fn fell_silent(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut since = self.since.subscribe();
        let answering = since.borrow_and_update().is_none();
        async move {
            if !answering || since.wait_for(Option::is_some).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Whether the caller should send a probe now: none is on its way. The caller calls
    /// [`Silence::probed`] when it is back.
    pub fn probe(&self) -> bool {
        self.is_silent() && !self.probing.swap(true, Ordering::AcqRel)
    }

    pub fn probed(&self) {
        self.probing.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_waiting_when_the_database_falls_silent_gives_up_and_one_begun_after_waits() {
        let silence = Silence::default();
        let waiting = silence.fell_silent();
        silence.unanswered("a commit");
        assert!(silence.is_silent());
        tokio::time::timeout(std::time::Duration::from_secs(1), waiting)
            .await
            .expect("the waiting call gives up");
        let begun_after = silence.fell_silent();
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), begun_after)
                .await
                .is_err()
        );
        silence.answered();
        assert!(!silence.is_silent());
    }

    #[test]
    fn one_probe_at_a_time_and_only_while_silent() {
        let silence = Silence::default();
        assert!(!silence.probe(), "answering: no probe");
        silence.unanswered("a read");
        assert!(silence.probe());
        assert!(!silence.probe(), "one on its way");
        silence.probed();
        assert!(silence.probe());
    }
}
