//! What thread actors and the push delivery share: the outbox's depth and bound, and
//! the signal that new deliveries were committed.
//!
//! Thread actors write outbox rows in the batch that logs each event (`WriteOp::EnqueuePush`,
//! planned in `thread/plan.rs`); the delivery (`crate::push`) reads them back, POSTs
//! them and acknowledges them through the persistence actor.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

use crate::config::PushSettings;
use crate::store::WriteOp;
use crate::telemetry;

/// The outbox as the runtime sees it.
pub struct PushHub {
    max_configs_per_task: usize,
    max_outbox: u64,
    /// Deliveries owed, as last counted: the delivery sets it from the store, actors
    /// add what they commit, the delivery subtracts what it finishes.
    depth: AtomicU64,
    woken: Notify,
}

impl PushHub {
    pub fn new(settings: &PushSettings) -> Self {
        Self {
            max_configs_per_task: settings.max_configs_per_task,
            max_outbox: settings.max_outbox,
            depth: AtomicU64::new(0),
            woken: Notify::new(),
        }
    }

    pub fn max_configs_per_task(&self) -> usize {
        self.max_configs_per_task
    }

    /// Keeps the batch's outbox rows if the outbox has room for them, else drops them
    /// (each counted as a dropped delivery). Returns how many rows the batch carries.
    pub(crate) fn admit(&self, ops: &mut Vec<WriteOp>) -> u64 {
        let rows = ops
            .iter()
            .filter(|op| matches!(op, WriteOp::EnqueuePush { .. }))
            .count() as u64;
        if rows == 0 {
            return 0;
        }
        if self.depth.load(Ordering::Relaxed).saturating_add(rows) <= self.max_outbox {
            return rows;
        }
        ops.retain(|op| match op {
            WriteOp::EnqueuePush {
                task_id, config_id, seq, ..
            } => {
                tracing::warn!(%task_id, config_id, seq, max_outbox = self.max_outbox, "push outbox full (push.max_outbox): delivery dropped");
                false
            }
            _ => true,
        });
        metrics::counter!(telemetry::PUSH_DELIVERIES, "outcome" => "dropped").increment(rows);
        0
    }

    /// `rows` outbox rows were committed: count them and wake the delivery.
    pub(crate) fn committed(&self, rows: u64) {
        if rows > 0 {
            let depth = self.depth.fetch_add(rows, Ordering::Relaxed) + rows;
            metrics::gauge!(telemetry::PUSH_OUTBOX_DEPTH).set(depth as f64);
            self.woken.notify_one();
        }
    }

    /// `rows` deliveries left the outbox.
    pub fn finished(&self, rows: u64) {
        let _ = self
            .depth
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| {
                Some(d.saturating_sub(rows))
            });
        metrics::gauge!(telemetry::PUSH_OUTBOX_DEPTH).set(self.depth() as f64);
    }

    /// The outbox's depth as the store counted it.
    pub fn set_depth(&self, depth: u64) {
        self.depth.store(depth, Ordering::Relaxed);
        metrics::gauge!(telemetry::PUSH_OUTBOX_DEPTH).set(depth as f64);
    }

    pub fn depth(&self) -> u64 {
        self.depth.load(Ordering::Relaxed)
    }

    /// Resolves when deliveries were committed since the last call (or now, if some
    /// were and nobody was waiting).
    pub async fn woken(&self) {
        self.woken.notified().await;
    }
}
