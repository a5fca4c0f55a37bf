//! What the attempts decided, committed through the persistence actor like every other
//! write: a row delivered (2xx) or given up (`push.max_attempts`, `push.max_age_secs`, the
//! URL policy) goes; a failed one is tried again after an exponential backoff with jitter;
//! rows whose receiver cannot take them now are put off until it may.

use std::time::{Duration, Instant};

use super::attempt::Attempt;
use super::{Deliverer, Settled};
use crate::domain::Timestamp;
use crate::push::mirror::{Lane, lane_of};
use crate::runtime::outbox::Settlement;
use crate::store::Delivery;
use crate::telemetry;

impl Deliverer {
    /// Moves the next attempt of rows whose receiver cannot take them now to when it may
    /// (`until`; their attempts unchanged), in one commit, so that the outbox's next read
    /// finds the other receivers' rows rather than these again.
    pub(super) async fn defer(&self, rows: Vec<(Delivery, Instant)>, now: Instant) -> Settled {
        let lanes: Vec<Lane> = rows.iter().map(|(d, _)| lane_of(d)).collect();
        let Some(runtime) = self.runtime.upgrade() else {
            return lanes.into_iter().map(|lane| (lane, Err(()))).collect();
        };
        let stamp = Timestamp::now().millis();
        let ops = (rows.iter())
            .map(|(d, until)| Settlement::Retry {
                key: d.key.clone(),
                attempts: d.attempts,
                next_attempt_at: Timestamp(
                    stamp.saturating_add(
                        i64::try_from(until.saturating_duration_since(now).as_millis())
                            .unwrap_or(i64::MAX),
                    ),
                ),
            })
            .collect();
        match runtime.outbox().settle(ops).await {
            Ok(()) => {
                metrics::counter!(telemetry::PUSH_DEFERRED).increment(rows.len() as u64);
                lanes
                    .into_iter()
                    .zip(rows)
                    .map(|(lane, (delivery, until))| (lane, Ok(Some((until, delivery)))))
                    .collect()
            }
            Err(e) => {
                tracing::warn!(error = %e, rows = lanes.len(), "push outbox: cannot defer deliveries to a busy or failing receiver; they stay due");
                lanes.into_iter().map(|lane| (lane, Err(()))).collect()
            }
        }
    }

    /// Commits what the attempts that answered together decided, in one batch: each row
    /// goes (delivered or given up) or is rescheduled. Returns, per lane, the row as it
    /// stays owed and when its retry is due; `Err` for all if the store refused the
    /// commit (the rows stay owed as they were).
    pub(super) async fn settle(&self, done: Vec<(Delivery, Attempt)>) -> Settled {
        let lanes: Vec<Lane> = done.iter().map(|(d, _)| lane_of(d)).collect();
        let Some(runtime) = self.runtime.upgrade() else {
            return lanes.into_iter().map(|lane| (lane, Err(()))).collect();
        };
        let mut ops = Vec::with_capacity(done.len());
        let mut decided = Vec::with_capacity(done.len());
        for (mut delivery, attempt) in done {
            let (op, outcome, next) = self.decide(&delivery, attempt);
            ops.push(op);
            delivery.attempts += 1;
            decided.push((delivery, outcome, next));
        }
        if let Err(e) = runtime.outbox().settle(ops).await {
            tracing::warn!(rows = lanes.len(), error = %e, "push outbox: cannot record deliveries' outcomes; they stay owed");
            return lanes.into_iter().map(|lane| (lane, Err(()))).collect();
        }
        let mut finished = 0;
        let settled = (lanes.into_iter().zip(decided))
            .map(|(lane, (delivery, outcome, next))| {
                if let Some(outcome) = outcome {
                    metrics::counter!(telemetry::PUSH_DELIVERIES, "outcome" => outcome)
                        .increment(1);
                    finished += 1;
                }
                (lane, Ok(next.map(|at| (at, delivery))))
            })
            .collect();
        if finished > 0 {
            runtime.outbox().hub().finished(finished);
        }
        settled
    }

    /// What an attempt decided for its row: its write, how the delivery ended if it did,
    /// and when its retry is due if not.
    fn decide(
        &self,
        delivery: &Delivery,
        attempt: Attempt,
    ) -> (Settlement, Option<&'static str>, Option<Instant>) {
        let key = delivery.key.clone();
        let attempts = delivery.attempts + 1;
        let age = Duration::from_millis(
            u64::try_from(Timestamp::now().millis() - delivery.created_at.millis()).unwrap_or(0),
        );
        match attempt {
            Attempt::Delivered => {
                metrics::counter!(telemetry::PUSH_ATTEMPTS, "result" => "ok").increment(1);
                metrics::histogram!(telemetry::PUSH_DELIVERY_MS).record(age.as_secs_f64() * 1000.0);
                (Settlement::Done(key), Some("delivered"), None)
            }
            Attempt::Refused(why) => {
                metrics::counter!(telemetry::PUSH_ATTEMPTS, "result" => "refused").increment(1);
                tracing::warn!(task_id = %key.task_id, config_id = key.config_id, seq = key.seq, reason = why, "push delivery refused by the URL policy; given up");
                (Settlement::Done(key), Some("abandoned"), None)
            }
            Attempt::Failed { result, why } => {
                metrics::counter!(telemetry::PUSH_ATTEMPTS, "result" => result).increment(1);
                let exhausted = attempts >= i64::from(self.settings.max_attempts)
                    || age >= Duration::from_secs(self.settings.max_age_secs);
                if exhausted {
                    tracing::warn!(task_id = %key.task_id, config_id = key.config_id, seq = key.seq, attempts, reason = why, "push delivery given up (push.max_attempts / push.max_age_secs)");
                    (Settlement::Done(key), Some("abandoned"), None)
                } else {
                    let delay = self.backoff(attempts);
                    tracing::info!(task_id = %key.task_id, config_id = key.config_id, seq = key.seq, attempts, retry_in_ms = delay.as_millis() as u64, reason = why, "push delivery failed; will retry");
                    let next_attempt_at = Timestamp(
                        Timestamp::now()
                            .millis()
                            .saturating_add(delay.as_millis() as i64),
                    );
                    let op = Settlement::Retry {
                        key,
                        attempts,
                        next_attempt_at,
                    };
                    (op, None, Some(Instant::now() + delay))
                }
            }
        }
    }

    /// The delay before attempt `attempts + 1`: the initial delay doubled per attempt
    /// made, capped, then a random point in its upper half (jitter spreads the retries
    /// of many configs that failed together).
    fn backoff(&self, attempts: i64) -> Duration {
        let exp = u32::try_from(attempts.saturating_sub(1))
            .unwrap_or(u32::MAX)
            .min(30);
        let full = self
            .settings
            .backoff_initial_ms
            .saturating_mul(1u64 << exp)
            .min(self.settings.backoff_max_ms);
        Duration::from_millis(full / 2 + fastrand::u64(0..=full / 2))
    }
}
