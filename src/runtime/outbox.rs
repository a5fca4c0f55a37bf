//! What the push delivery reaches of the runtime, the [`Outbox`] handle: the outbox's
//! rows, the commit of what its attempts decided (nothing but outbox rows), every owed
//! row read while no commit runs, the hub the thread actors hand rows over by, and the
//! cluster's say in which node delivers. Not the store, nor the persistence actor.

use std::sync::Arc;

use tokio::time::timeout;

use super::Runtime;
use super::push::PushHub;
use crate::cluster::Cluster;
use crate::domain::Timestamp;
use crate::error::Result;
use crate::store::{Delivery, OutboxKey, StoreError, WriteOp};

/// The push delivery's view of the runtime ([`Runtime::outbox`]).
#[derive(Clone, Copy)]
pub struct Outbox<'a>(&'a Runtime);

impl Runtime {
    /// What the push delivery reads and commits.
    pub fn outbox(&self) -> Outbox<'_> {
        Outbox(self)
    }
}

/// What an attempt decided for its row.
#[derive(Debug, Clone)]
pub enum Settlement {
    /// The row goes: delivered, or given up.
    Done(OutboxKey),
    /// The row stays owed, next tried at `next_attempt_at`.
    Retry {
        key: OutboxKey,
        attempts: i64,
        next_attempt_at: Timestamp,
    },
}

impl From<Settlement> for WriteOp {
    fn from(settlement: Settlement) -> WriteOp {
        match settlement {
            Settlement::Done(key) => WriteOp::PushDone(key),
            Settlement::Retry {
                key,
                attempts,
                next_attempt_at,
            } => WriteOp::PushRetry {
                key,
                attempts,
                next_attempt_at,
            },
        }
    }
}

/// Why every owed row could not be held ([`Outbox::hold_owed`]); the delivery polls the
/// outbox instead.
#[derive(Debug)]
pub enum NotHeld {
    /// More are owed than the bound.
    TooMany,
    /// The store refused the read.
    Store(StoreError),
    /// The read took longer than commits may be held back.
    TooSlow,
}

impl<'a> Outbox<'a> {
    /// What thread actors and the delivery share.
    pub fn hub(self) -> &'a Arc<PushHub> {
        &self.0.push
    }

    /// Cluster mode: this node's membership (it delivers only while it holds its lease,
    /// and takes dead nodes' rows over).
    pub fn cluster(self) -> Option<&'a Arc<Cluster>> {
        self.0.cluster.as_ref()
    }

    /// A graceful shutdown has begun.
    pub fn is_draining(self) -> bool {
        self.0.shared.is_draining()
    }

    /// Deliveries owed across every tenant, counted in the store.
    pub async fn depth(self) -> Result<u64, StoreError> {
        self.0.store.outbox_depth().await
    }

    /// Owed deliveries due at `now`, at most `limit` (`Store::due_deliveries`).
    pub async fn due(self, now: Timestamp, limit: usize) -> Result<Vec<Delivery>, StoreError> {
        self.0.store.due_deliveries(now, limit).await
    }

    /// Commits what attempts decided, in one batch through the persistence actor.
    pub async fn settle(self, settlements: Vec<Settlement>) -> Result<()> {
        let ops = settlements.into_iter().map(WriteOp::from).collect();
        self.0.persistence.commit(ops).await
    }

    /// Every owed delivery with when it is next due, read while no commit runs — if at
    /// most `max_rows` are owed and the read ends within the longest pause commits may
    /// take (`persistence.enqueue_timeout_ms`). From then on each commit hands its rows
    /// over through the hub ([`PushHub::hand_over`]), whose depth is set to what was read.
    pub async fn hold_owed(self, max_rows: usize) -> Result<Vec<(Delivery, Timestamp)>, NotHeld> {
        let hub = &self.0.push;
        let persistence = &self.0.persistence;
        let paused = persistence.pause().await;
        hub.hand_over();
        let read = self.0.store.owed_deliveries(max_rows.saturating_add(1));
        let owed = match timeout(persistence.max_pause(), read).await {
            Ok(Ok(owed)) if owed.len() <= max_rows => owed,
            outcome => {
                hub.abandon_hand_over();
                return Err(match outcome {
                    Ok(Ok(_)) => NotHeld::TooMany,
                    Ok(Err(e)) => NotHeld::Store(e),
                    Err(_) => NotHeld::TooSlow,
                });
            }
        };
        hub.set_depth(owed.len() as u64);
        drop(paused);
        Ok(owed)
    }
}
