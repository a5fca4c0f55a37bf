//! What the delivery loop keeps per receiver (a URL's origin: scheme, host and port), so
//! that one receiver that hangs or fails does not slow deliveries to the others:
//!
//! - at most `push.max_concurrent_per_receiver` attempts to it at once, and fewer while
//!   it is new or failing: a receiver starts at [`FIRST_LIMIT`] attempts at once, each
//!   answer allows one more, each failure halves it — so a receiver that is down when
//!   the first events for it come takes a few slots, not all of them;
//! - a receiver with attempts under way that has answered none of them for [`STALLED`]
//!   is stalled: it gets no new attempt, and those under way stop holding the delivery's
//!   slots (they still end, answered or timed out, within `push.timeout_ms`), so a
//!   receiver that hangs cannot keep the slots from the others;
//! - a breaker: after `push.breaker_failures` failed attempts in a row it opens for
//!   `push.breaker_open_ms`, during which nothing is sent to it; then one delivery probes
//!   it (half-open) — answered, it closes; failed, it opens again for twice as long, up
//!   to `push.backoff_max_ms`.
//!
//! A row whose receiver's breaker is open, or is being probed, or that is stalled, is
//! deferred in the store (its next attempt time moved, its attempts unchanged) rather
//! than left due: the outbox is read oldest first, and rows left due would fill every
//! read of it and hide the other receivers' rows. A receiver that has its fill but
//! answers is only passed over: its next rows are read again as its attempts end, with
//! no write.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::config::PushSettings;

/// Attempts at once to a receiver not heard from yet (or forgotten since: idle and
/// healthy).
pub(super) const FIRST_LIMIT: usize = 4;

/// How often [`Receivers::sweep`] looks through the receivers.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// A healthy receiver with nothing under way is forgotten (its limit with it) after this
/// long.
const FORGET_AFTER: Duration = Duration::from_secs(60);

/// A receiver with attempts under way that has answered none for this long is stalled:
/// its attempts stop holding slots, and its rows wait until those have ended.
pub(super) const STALLED: Duration = Duration::from_secs(1);

/// What may be done with a row of a receiver now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admit {
    /// Attempt it (counted against the receiver until [`Receivers::finished`]).
    Go,
    /// Not now: the receiver has its fill of attempts, and answers them.
    Pass,
    /// Not before this instant: the receiver's breaker is open, a probe of it is under
    /// way, or it is stalled ([`STALLED`]).
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
    /// When an attempt of it last ended, or the first of those under way began.
    last_heard: Instant,
    /// Attempts under way whose slots were given back (it stalled).
    released: usize,
    /// Attempts it may have under way now (at most `per_receiver`).
    limit: usize,
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
    /// When [`Self::sweep`] last looked.
    swept: Option<Instant>,
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
            swept: None,
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
            last_heard: now,
            released: 0,
            limit: FIRST_LIMIT.min(self.per_receiver),
        });
        let stalled = r.attempting > 0 && now.saturating_duration_since(r.last_heard) >= STALLED;
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
            // Until the attempts under way have ended, at their timeout at the latest.
            Breaker::Closed if stalled => Admit::Wait(now + self.timeout),
            Breaker::Closed if r.attempting >= r.limit => Admit::Pass,
            Breaker::Closed => {
                if r.attempting == 0 {
                    r.last_heard = now;
                }
                r.attempting += 1;
                Admit::Go
            }
        }
    }

    /// At most every [`SWEEP_EVERY`]: gives back the slots of the attempts under way to
    /// receivers that stalled since, and forgets healthy receivers idle for
    /// [`FORGET_AFTER`]; returns how many slots were given back.
    pub(super) fn sweep(&mut self, now: Instant) -> usize {
        if self
            .swept
            .is_some_and(|at| now.saturating_duration_since(at) < SWEEP_EVERY)
        {
            return 0;
        }
        self.swept = Some(now);
        let mut freed = 0;
        self.map.retain(|_, r| {
            let quiet = now.saturating_duration_since(r.last_heard);
            if r.attempting > r.released && quiet >= STALLED {
                freed += r.attempting - r.released;
                r.released = r.attempting;
                r.limit = 1;
            }
            let idle = r.attempting == 0 && r.failures == 0;
            !(idle && matches!(r.breaker, Breaker::Closed) && quiet >= FORGET_AFTER)
        });
        freed
    }

    /// Records how an admitted attempt ended: whether it still held its slot (not given
    /// back by [`Self::sweep`]), and whether the breaker opened or closed.
    pub(super) fn finished(
        &mut self,
        receiver: &str,
        outcome: Outcome,
        now: Instant,
    ) -> (bool, Option<Change>) {
        let Some(r) = self.map.get_mut(receiver) else {
            return (true, None);
        };
        r.attempting = r.attempting.saturating_sub(1);
        r.last_heard = now;
        let held = match r.released {
            0 => true,
            _ => {
                r.released -= 1;
                false
            }
        };
        let change = match (outcome, r.breaker) {
            (Outcome::Answered, breaker) => {
                r.failures = 0;
                r.limit = (r.limit + 1).min(self.per_receiver);
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
                r.limit = (r.limit / 2).max(1);
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
        (held, change)
    }

    /// Receivers whose breaker is not closed.
    pub(super) fn open(&self) -> usize {
        (self.map.values())
            .filter(|r| !matches!(r.breaker, Breaker::Closed))
            .count()
    }

    /// Receivers with state kept (for tests: healthy ones idle for a while are forgotten).
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
        assert_eq!(r.admit("a", now), Admit::Pass, "busy, and answering");
        assert_eq!(r.admit("b", now), Admit::Go);
        // An answer: a slot again.
        assert_eq!(r.finished("a", Outcome::Answered, now), (true, None));
        assert_eq!(r.admit("a", now), Admit::Go);
        for _ in 0..2 {
            assert_eq!(r.finished("a", Outcome::Answered, now), (true, None));
        }
        assert_eq!(r.finished("b", Outcome::Answered, now), (true, None));
        assert_eq!(r.kept(), 2);
        assert_eq!(r.sweep(now + FORGET_AFTER), 0);
        assert_eq!(
            r.kept(),
            0,
            "healthy receivers idle for a while are forgotten"
        );
    }

    #[test]
    fn a_receiver_that_answers_nothing_gives_its_slots_back_and_gets_no_more() {
        let mut r = receivers(4, 5);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(r.admit("a", t0), Admit::Go);
        }
        assert_eq!(r.admit("b", t0), Admit::Go);
        let soon = t0 + STALLED / 2;
        assert_eq!(r.sweep(soon), 0);
        assert_eq!(r.finished("b", Outcome::Answered, soon), (true, None));
        // A second without an answer: stalled. Its three slots are given back once, and
        // its rows wait.
        let t1 = t0 + STALLED;
        assert_eq!(r.sweep(t1), 3);
        assert_eq!(r.sweep(t1), 0);
        assert_eq!(
            r.admit("a", t1),
            Admit::Wait(t1 + Duration::from_millis(500))
        );
        assert_eq!(r.admit("b", t1), Admit::Go, "another receiver is not held");
        // Its attempts end (timed out): they held no slot any more.
        assert_eq!(r.finished("a", Outcome::Failed, t1), (false, None));
        // Heard from (a failure is an answer too): not stalled, but one at a time now,
        // and two are still under way.
        assert_eq!(r.admit("a", t1), Admit::Pass);
        for _ in 0..2 {
            assert_eq!(r.finished("a", Outcome::Failed, t1), (false, None));
        }
        assert_eq!(r.admit("a", t1), Admit::Go);
        assert_eq!(r.finished("a", Outcome::Failed, t1), (true, None));
    }

    #[test]
    fn a_receiver_gets_more_attempts_as_it_answers_and_fewer_as_it_fails() {
        let mut r = receivers(32, 100);
        let now = Instant::now();
        let admitted = |r: &mut Receivers| {
            std::iter::from_fn(|| (r.admit("a", now) == Admit::Go).then_some(()))
                .take(64)
                .count()
        };
        assert_eq!(admitted(&mut r), FIRST_LIMIT, "new: a few at once");
        // Each answer: its slot back, and one more.
        for _ in 0..FIRST_LIMIT {
            r.finished("a", Outcome::Answered, now);
        }
        assert_eq!(admitted(&mut r), 2 * FIRST_LIMIT);
        for _ in 0..2 * FIRST_LIMIT {
            r.finished("a", Outcome::Answered, now);
        }
        assert_eq!(admitted(&mut r), 4 * FIRST_LIMIT);
        for _ in 0..4 * FIRST_LIMIT {
            r.finished("a", Outcome::Answered, now);
        }
        assert_eq!(
            admitted(&mut r),
            32,
            "never past push.max_concurrent_per_receiver"
        );
        // Three failures: halved three times, to 4, with 29 still under way.
        for _ in 0..3 {
            r.finished("a", Outcome::Failed, now);
        }
        assert_eq!(r.admit("a", now), Admit::Pass);
        for _ in 0..29 {
            r.finished("a", Outcome::Answered, now);
        }
        assert_eq!(admitted(&mut r), 32);
        // Stalled: its slots given back, one attempt at a time from now on; its rows
        // wait while it answers nothing, and it climbs again as it does.
        let later = now + STALLED;
        assert_eq!(r.sweep(later), 32);
        assert_eq!(
            r.admit("a", later),
            Admit::Wait(later + Duration::from_millis(500))
        );
        assert_eq!(r.finished("a", Outcome::Answered, later), (false, None));
        assert_eq!(r.admit("a", later), Admit::Pass, "31 under way, 2 allowed");
    }

    #[test]
    fn failures_in_a_row_open_the_breaker_and_a_probe_closes_or_reopens_it() {
        let mut r = receivers(8, 3);
        let t0 = Instant::now();
        // Two failures, an answer: the count starts again.
        for outcome in [Outcome::Failed, Outcome::Failed, Outcome::Answered] {
            assert_eq!(r.admit("a", t0), Admit::Go);
            assert_eq!(r.finished("a", outcome, t0).1, None);
        }
        for _ in 0..2 {
            assert_eq!(r.admit("a", t0), Admit::Go);
            assert_eq!(r.finished("a", Outcome::Failed, t0).1, None);
        }
        assert_eq!(r.admit("a", t0), Admit::Go);
        assert_eq!(
            r.finished("a", Outcome::Failed, t0).1,
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
            r.finished("a", Outcome::Failed, t1).1,
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
            r.finished("a", Outcome::Failed, t2).1,
            Some(Change::Opened {
                receiver: "a".into(),
                open_for: Duration::from_secs(3)
            })
        );
        let t3 = t2 + Duration::from_secs(3);
        // A probe the policy refused says nothing: the next row probes.
        assert_eq!(r.admit("a", t3), Admit::Go);
        assert_eq!(r.finished("a", Outcome::Neither, t3).1, None);
        assert_eq!(r.admit("a", t3), Admit::Go);
        assert_eq!(
            r.finished("a", Outcome::Answered, t3).1,
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
            r.finished("a", Outcome::Failed, t0).1,
            Some(Change::Opened { .. })
        ));
        let t1 = t0 + Duration::from_secs(1);
        // One attempt from before is still out: no probe yet.
        assert_eq!(
            r.admit("a", t1),
            Admit::Wait(t1 + Duration::from_millis(500))
        );
        assert_eq!(r.finished("a", Outcome::Failed, t1).1, None);
        assert_eq!(r.admit("a", t1), Admit::Go);
    }
}
