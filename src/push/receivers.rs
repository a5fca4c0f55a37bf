//! What the delivery loop keeps per receiver (a URL's origin: scheme, host and port), so
//! that one receiver that hangs or fails does not slow deliveries to the others:
//!
//! - at most `push.max_concurrent_per_receiver` attempts to it at once;
//! - a breaker: after `push.breaker_failures` failed attempts in a row it opens for
//!   `push.breaker_open_ms`, during which nothing is sent to it; then one delivery probes
//!   it (half-open) — answered, it closes; failed, it opens again for twice as long, up
//!   to `push.backoff_max_ms`.
//!
//! A row passed over for its receiver is deferred in the store (its next attempt time
//! moved, its attempts unchanged) rather than left due: the outbox is read oldest first,
//! and rows left due would fill every read of it and hide the other receivers' rows.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::config::PushSettings;

/// How long a row waits when its receiver already has its fill of attempts.
pub(super) const BUSY_WAIT: Duration = Duration::from_millis(200);

/// What may be done with a row of a receiver now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admit {
    /// Attempt it (counted against the receiver until [`Receivers::finished`]).
    Go,
    /// Not before this instant: the receiver has its fill of attempts, its breaker is
    /// open, or a probe of it is under way.
    Wait(Instant),
}

/// How an attempt at a receiver ended, for its breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// A 2xx.
    Answered,
    /// No answer, or not a 2xx.
    Failed,
    /// Nothing said of the receiver (the URL policy refused it, the payload could not be
    /// encoded).
    Neither,
}

#[derive(Debug, Clone, Copy)]
enum Breaker {
    Closed,
    Open {
        until: Instant,
        open_for: Duration,
    },
    /// One attempt is probing the receiver; it opens again for `open_for` doubled if
    /// that fails.
    Probing {
        open_for: Duration,
    },
}

#[derive(Debug)]
struct Receiver {
    attempting: usize,
    /// Failed attempts in a row.
    failures: u32,
    breaker: Breaker,
}

/// A breaker that changed state, for the log and the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    Opened {
        receiver: String,
        open_for: Duration,
    },
    Closed {
        receiver: String,
    },
}

/// Every receiver with attempts under way, failures counted, or a breaker not closed.
pub(super) struct Receivers {
    map: HashMap<String, Receiver>,
    per_receiver: usize,
    failures_to_open: u32,
    open_first: Duration,
    open_max: Duration,
    /// The longest an attempt takes: what rows wait for a probe's answer.
    timeout: Duration,
}

impl Receivers {
    pub(super) fn new(settings: &PushSettings) -> Self {
        Self {
            map: HashMap::new(),
            per_receiver: (settings.max_concurrent_per_receiver).min(settings.max_concurrent),
            failures_to_open: settings.breaker_failures,
            open_first: Duration::from_millis(settings.breaker_open_ms),
            open_max: Duration::from_millis(settings.backoff_max_ms.max(settings.breaker_open_ms)),
            timeout: Duration::from_millis(settings.timeout_ms),
        }
    }

    /// The receiver a push URL names: its origin (no credentials, path or query). A URL
    /// that does not parse is its own receiver (its attempts fail at once anyway).
    pub(super) fn of(url: &str) -> String {
        match reqwest::Url::parse(url) {
            Ok(parsed) => parsed.origin().ascii_serialization(),
            Err(_) => url.to_owned(),
        }
    }

    /// Whether a row of `receiver` may be attempted now; `Go` counts the attempt.
    pub(super) fn admit(&mut self, receiver: &str, now: Instant) -> Admit {
        let r = self.map.entry(receiver.to_owned()).or_insert(Receiver {
            attempting: 0,
            failures: 0,
            breaker: Breaker::Closed,
        });
        match r.breaker {
            Breaker::Open { until, .. } if now < until => Admit::Wait(until),
            Breaker::Open { open_for, .. } if r.attempting == 0 => {
                r.breaker = Breaker::Probing { open_for };
                r.attempting += 1;
                Admit::Go
            }
            // Open with attempts from before it opened still out, or probing: the rows
            // wait for the answers.
            Breaker::Open { .. } | Breaker::Probing { .. } => Admit::Wait(now + self.timeout),
            Breaker::Closed if r.attempting >= self.per_receiver => Admit::Wait(now + BUSY_WAIT),
            Breaker::Closed => {
                r.attempting += 1;
                Admit::Go
            }
        }
    }

    /// Records how an admitted attempt ended; says when the breaker opened or closed.
    pub(super) fn finished(
        &mut self,
        receiver: &str,
        outcome: Outcome,
        now: Instant,
    ) -> Option<Change> {
        let r = self.map.get_mut(receiver)?;
        r.attempting = r.attempting.saturating_sub(1);
        let change = match (outcome, r.breaker) {
            (Outcome::Answered, breaker) => {
                r.failures = 0;
                r.breaker = Breaker::Closed;
                match breaker {
                    Breaker::Closed => None,
                    _ => Some(Change::Closed {
                        receiver: receiver.to_owned(),
                    }),
                }
            }
            (Outcome::Failed, Breaker::Probing { open_for }) => {
                let open_for = (open_for * 2).min(self.open_max);
                r.breaker = Breaker::Open {
                    until: now + open_for,
                    open_for,
                };
                Some(Change::Opened {
                    receiver: receiver.to_owned(),
                    open_for,
                })
            }
            (Outcome::Failed, Breaker::Closed) => {
                r.failures = r.failures.saturating_add(1);
                if r.failures >= self.failures_to_open {
                    r.breaker = Breaker::Open {
                        until: now + self.open_first,
                        open_for: self.open_first,
                    };
                    Some(Change::Opened {
                        receiver: receiver.to_owned(),
                        open_for: self.open_first,
                    })
                } else {
                    None
                }
            }
            // Already open (an attempt from before it opened): nothing new.
            (Outcome::Failed, Breaker::Open { .. }) => None,
            // A probe that said nothing: the next row probes.
            (Outcome::Neither, Breaker::Probing { open_for }) => {
                r.breaker = Breaker::Open {
                    until: now,
                    open_for,
                };
                None
            }
            (Outcome::Neither, _) => None,
        };
        if r.attempting == 0 && r.failures == 0 && matches!(r.breaker, Breaker::Closed) {
            self.map.remove(receiver);
        }
        change
    }

    /// Receivers whose breaker is not closed.
    pub(super) fn open(&self) -> usize {
        (self.map.values())
            .filter(|r| !matches!(r.breaker, Breaker::Closed))
            .count()
    }

    /// Receivers with state kept (for tests: idle, healthy ones are forgotten).
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receivers(per_receiver: usize, failures: u32) -> Receivers {
        Receivers::new(&PushSettings {
            max_concurrent_per_receiver: per_receiver,
            breaker_failures: failures,
            breaker_open_ms: 1000,
            backoff_max_ms: 3000,
            timeout_ms: 500,
            ..PushSettings::default()
        })
    }

    #[test]
    fn a_receiver_is_its_urls_origin_without_credentials() {
        assert_eq!(
            Receivers::of("https://user:secret@hooks.example.org:443/a/b?token=x"),
            "https://hooks.example.org"
        );
        assert_eq!(
            Receivers::of("http://127.0.0.1:9000/push"),
            Receivers::of("http://127.0.0.1:9000/other")
        );
        assert_ne!(
            Receivers::of("http://127.0.0.1:9000/push"),
            Receivers::of("http://127.0.0.1:9001/push")
        );
    }

    #[test]
    fn attempts_to_one_receiver_are_capped_and_others_go_on() {
        let mut r = receivers(2, 5);
        let now = Instant::now();
        assert_eq!(r.admit("a", now), Admit::Go);
        assert_eq!(r.admit("a", now), Admit::Go);
        assert_eq!(r.admit("a", now), Admit::Wait(now + BUSY_WAIT));
        assert_eq!(r.admit("b", now), Admit::Go);
        assert_eq!(r.finished("a", Outcome::Answered, now), None);
        assert_eq!(r.admit("a", now), Admit::Go);
        for _ in 0..2 {
            r.finished("a", Outcome::Answered, now);
        }
        r.finished("b", Outcome::Answered, now);
        assert_eq!(r.kept(), 0, "healthy idle receivers are forgotten");
    }

    #[test]
    fn failures_in_a_row_open_the_breaker_and_a_probe_closes_or_reopens_it() {
        let mut r = receivers(8, 3);
        let t0 = Instant::now();
        // Two failures, an answer: the count starts again.
        for outcome in [Outcome::Failed, Outcome::Failed, Outcome::Answered] {
            assert_eq!(r.admit("a", t0), Admit::Go);
            assert_eq!(r.finished("a", outcome, t0), None);
        }
        for _ in 0..2 {
            assert_eq!(r.admit("a", t0), Admit::Go);
            assert_eq!(r.finished("a", Outcome::Failed, t0), None);
        }
        assert_eq!(r.admit("a", t0), Admit::Go);
        assert_eq!(
            r.finished("a", Outcome::Failed, t0),
            Some(Change::Opened {
                receiver: "a".into(),
                open_for: Duration::from_secs(1)
            })
        );
        assert_eq!(r.open(), 1);
        let open_until = t0 + Duration::from_secs(1);
        assert_eq!(r.admit("a", t0), Admit::Wait(open_until));
        assert_eq!(r.admit("b", t0), Admit::Go, "another receiver is not held");

        // Half-open: one probe; the other rows wait for its answer.
        let t1 = open_until;
        assert_eq!(r.admit("a", t1), Admit::Go);
        assert_eq!(
            r.admit("a", t1),
            Admit::Wait(t1 + Duration::from_millis(500))
        );
        // It fails: open again, twice as long.
        assert_eq!(
            r.finished("a", Outcome::Failed, t1),
            Some(Change::Opened {
                receiver: "a".into(),
                open_for: Duration::from_secs(2)
            })
        );
        let t2 = t1 + Duration::from_secs(2);
        assert_eq!(r.admit("a", t1), Admit::Wait(t2));
        assert_eq!(r.admit("a", t2), Admit::Go);
        // Failed again: capped at push.backoff_max_ms.
        assert_eq!(
            r.finished("a", Outcome::Failed, t2),
            Some(Change::Opened {
                receiver: "a".into(),
                open_for: Duration::from_secs(3)
            })
        );
        let t3 = t2 + Duration::from_secs(3);
        // A probe the policy refused says nothing: the next row probes.
        assert_eq!(r.admit("a", t3), Admit::Go);
        assert_eq!(r.finished("a", Outcome::Neither, t3), None);
        assert_eq!(r.admit("a", t3), Admit::Go);
        assert_eq!(
            r.finished("a", Outcome::Answered, t3),
            Some(Change::Closed {
                receiver: "a".into()
            })
        );
        assert_eq!(r.open(), 0);
        assert_eq!(r.admit("a", t3), Admit::Go);
    }

    #[test]
    fn attempts_out_when_the_breaker_opened_end_before_a_probe() {
        let mut r = receivers(8, 1);
        let t0 = Instant::now();
        assert_eq!(r.admit("a", t0), Admit::Go);
        assert_eq!(r.admit("a", t0), Admit::Go);
        assert!(matches!(
            r.finished("a", Outcome::Failed, t0),
            Some(Change::Opened { .. })
        ));
        let t1 = t0 + Duration::from_secs(1);
        // One attempt from before is still out: no probe yet.
        assert_eq!(
            r.admit("a", t1),
            Admit::Wait(t1 + Duration::from_millis(500))
        );
        assert_eq!(r.finished("a", Outcome::Failed, t1), None);
        assert_eq!(r.admit("a", t1), Admit::Go);
    }
}
