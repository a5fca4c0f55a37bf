//! Whether Postgres answers, as the last bounded calls found it.
//!
//! A call left unanswered past its bound — a commit or a read past
//! `store.answer_timeout_ms`, a cluster lease renewal past two `cluster.heartbeat_ms` —
//! makes the database *silent*; the next call it answers makes it answering again. While
//! it is silent the runtime refuses new sends at once (503 with `Retry-After`),
//! `/health/ready` fails without a round trip, the calls that were waiting when it fell
//! silent give up within [`CHECK`] (their outcome is unknown: a retry of the same message
//! finds what was stored), and the store's other calls fail without a connection. Only
//! the lease renewals and the probes the refusals start reach the database; the first one
//! answered ends the silence.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often a call waiting for its answer looks whether the database fell silent (a
/// timer the call's bound needs anyway, re-armed: nothing is registered per call).
const CHECK: Duration = Duration::from_millis(200);

#[derive(Default)]
pub struct Silence {
    /// Since when the database has not answered; `None` while it answers.
    since: Mutex<Option<Instant>>,
    /// Mirrors `since.is_some()`, for the check every call makes.
    silent: AtomicBool,
    /// A probe is on its way.
    probing: AtomicBool,
}

/// How a call made [`Silence::within`] ended.
pub enum Within<T> {
    Answered(T),
    /// Its bound passed.
    Unanswered,
    /// The database fell silent while it waited.
    Silenced,
}

impl Silence {
    pub fn is_silent(&self) -> bool {
        self.silent.load(Ordering::Relaxed)
    }

    /// A call went unanswered past its bound (`what` says which).
    pub fn unanswered(&self, what: &str) {
        let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
        if since.is_some() {
            return;
        }
        *since = Some(Instant::now());
        self.silent.store(true, Ordering::Relaxed);
        metrics::gauge!(crate::telemetry::STORE_SILENT).set(1.0);
        tracing::warn!(
            call = what,
            "postgres does not answer: new sends are refused (503) and /health/ready fails until it answers again"
        );
    }

    /// A call was answered.
    pub fn answered(&self) {
        if !self.is_silent() {
            return;
        }
        let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(since) = since.take() {
            self.silent.store(false, Ordering::Relaxed);
            metrics::gauge!(crate::telemetry::STORE_SILENT).set(0.0);
            tracing::info!(
                silent_ms = since.elapsed().as_millis() as u64,
                "postgres answers again"
            );
        }
    }

    /// `call` (`what` names it) until its answer or `bound`, whichever comes first — or,
    /// for a call begun while the database answered, until it falls silent (seen within
    /// [`CHECK`]). An answer ends a silence; a call unanswered at its bound begins one.
    pub async fn within<F: Future>(
        &self,
        what: &str,
        bound: Duration,
        call: F,
    ) -> Within<F::Output> {
        let within = self.wait(bound, call).await;
        match within {
            Within::Answered(_) => self.answered(),
            Within::Unanswered => self.unanswered(what),
            Within::Silenced => {}
        }
        within
    }

    async fn wait<F: Future>(&self, bound: Duration, call: F) -> Within<F::Output> {
        let began_silent = self.is_silent();
        let deadline = tokio::time::Instant::now() + bound;
        let tick = tokio::time::sleep(CHECK.min(bound));
        tokio::pin!(call, tick);
        loop {
            tokio::select! {
                biased;
                answer = &mut call => return Within::Answered(answer),
                () = &mut tick => {
                    let now = tokio::time::Instant::now();
                    if now >= deadline {
                        return Within::Unanswered;
                    }
                    if !began_silent && self.is_silent() {
                        return Within::Silenced;
                    }
                    tick.as_mut().reset((now + CHECK).min(deadline));
                }
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
        let silence = std::sync::Arc::new(Silence::default());
        let bound = Duration::from_secs(5);
        let falling = silence.clone();
        let waiting = tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let within = falling
                .within("a commit", bound, std::future::pending::<()>())
                .await;
            (matches!(within, Within::Silenced), started.elapsed())
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        silence.unanswered("another commit");
        let (silenced, waited) = waiting.await.unwrap();
        assert!(silenced);
        // Given up at the next check after the fall, not at its bound.
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        // Begun while silent: it waits for its own bound.
        let short = Duration::from_millis(300);
        let started = tokio::time::Instant::now();
        let begun_after = silence
            .within("a read", short, std::future::pending::<()>())
            .await;
        assert!(started.elapsed() >= short);
        assert!(matches!(begun_after, Within::Unanswered));
        silence.answered();
        assert!(!silence.is_silent());
        let answered = silence.within("a read", bound, async { 7 }).await;
        assert!(matches!(answered, Within::Answered(7)));
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
