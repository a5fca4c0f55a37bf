//! The `PersistenceActor`: the only writer to the store.
//!
//! Callers hand it a batch of writes and wait for the acknowledgement. It takes whatever
//! queued while the previous transaction ran (up to `persistence.max_batch` batches) and
//! commits it in one transaction — group commit with no timer, so a lone request pays one
//! commit and a crowd shares one. Every waiter is acknowledged only after the commit
//! returned. If a group fails for a reason other than an unreachable database, its
//! batches are retried one by one so that one bad batch cannot fail its neighbours.
//!
//! **Architecture invariant:** nothing is acknowledged to a client before the commit that
//! holds it has returned; per-thread order is preserved because each `ThreadActor` waits
//! for one batch before sending the next.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use actix::ArbiterHandle;
use tokio::sync::mpsc::error::SendTimeoutError;
use tokio::sync::{mpsc, oneshot};

use crate::config::PersistenceSettings;
use crate::error::{Error, Result};
use crate::store::{Store, StoreError, WriteOp};
use crate::telemetry;

struct WriteRequest {
    ops: Vec<WriteOp>,
    ack: oneshot::Sender<Result<(), StoreError>>,
}

/// A handle to the persistence actor. Cheap to clone.
#[derive(Clone)]
pub struct PersistenceHandle {
    tx: mpsc::Sender<WriteRequest>,
    queued: Arc<AtomicI64>,
    enqueue_timeout: Duration,
}

impl PersistenceHandle {
    /// Commits `ops` in order, atomically, and returns once they are durable.
    pub async fn commit(&self, ops: Vec<WriteOp>) -> Result<()> {
        let (ack, done) = oneshot::channel();
        let depth = self.queued.fetch_add(1, Ordering::Relaxed) + 1;
        metrics::gauge!(telemetry::PERSIST_QUEUE).set(depth as f64);
        // A full queue means the database cannot keep up: wait a little for room (that
        // is ordinary backpressure), then fail fast with a retryable error rather than
        // hold the request open without limit.
        match self
            .tx
            .send_timeout(WriteRequest { ops, ack }, self.enqueue_timeout)
            .await
        {
            Ok(()) => {}
            Err(SendTimeoutError::Timeout(_)) => {
                self.queued.fetch_sub(1, Ordering::Relaxed);
                return Err(
                    self.unavailable("the persistence queue is full (persistence.queue_capacity)")
                );
            }
            Err(SendTimeoutError::Closed(_)) => {
                self.queued.fetch_sub(1, Ordering::Relaxed);
                return Err(self.unavailable("the persistence actor has stopped"));
            }
        }
        match done.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(StoreError::Unavailable(detail))) => Err(self.unavailable(&detail)),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(self.unavailable("the persistence actor dropped a write")),
        }
    }

    fn unavailable(&self, detail: &str) -> Error {
        // The HTTP layer replaces the hint with `server.retry_after_secs`.
        Error::Unavailable {
            detail: detail.to_owned(),
            retry_after_secs: 1,
        }
    }
}

/// Starts the persistence loop on `arbiter` (its own thread, so commits never wait
/// behind request handling).
pub fn start(
    store: Arc<dyn Store>,
    settings: &PersistenceSettings,
    arbiter: &ArbiterHandle,
) -> PersistenceHandle {
    let (tx, rx) = mpsc::channel(settings.queue_capacity);
    let queued = Arc::new(AtomicI64::new(0));
    let worker = PersistenceActor {
        store,
        rx,
        queued: queued.clone(),
        max_batch: settings.max_batch,
    };
    arbiter.spawn(worker.run());
    PersistenceHandle {
        tx,
        queued,
        enqueue_timeout: Duration::from_millis(settings.enqueue_timeout_ms),
    }
}

struct PersistenceActor {
    store: Arc<dyn Store>,
    rx: mpsc::Receiver<WriteRequest>,
    queued: Arc<AtomicI64>,
    max_batch: usize,
}

impl PersistenceActor {
    async fn run(mut self) {
        let mut group: Vec<WriteRequest> = Vec::with_capacity(self.max_batch);
        while let Some(first) = self.rx.recv().await {
            group.push(first);
            while group.len() < self.max_batch {
                match self.rx.try_recv() {
                    Ok(next) => group.push(next),
                    Err(_) => break,
                }
            }
            let remaining =
                self.queued.fetch_sub(group.len() as i64, Ordering::Relaxed) - group.len() as i64;
            metrics::gauge!(telemetry::PERSIST_QUEUE).set(remaining.max(0) as f64);
            metrics::histogram!(telemetry::PERSIST_BATCH).record(group.len() as f64);
            self.commit_group(&mut group).await;
        }
        tracing::info!("persistence actor stopped: no more writers");
    }

    async fn commit_group(&self, group: &mut Vec<WriteRequest>) {
        let result = if group.len() == 1 {
            self.timed_commit(&group[0].ops).await
        } else {
            let all: Vec<WriteOp> = group.iter().flat_map(|r| r.ops.iter().cloned()).collect();
            self.timed_commit(&all).await
        };
        match result {
            Ok(()) => {
                for request in group.drain(..) {
                    let _ = request.ack.send(Ok(()));
                }
            }
            Err(e @ StoreError::Unavailable(_)) => {
                tracing::warn!(error = %e, writes = group.len(), "commit failed: database unavailable");
                for request in group.drain(..) {
                    let _ = request.ack.send(Err(e.clone()));
                }
            }
            Err(e) if group.len() == 1 => {
                tracing::error!(error = %e, "commit failed");
                for request in group.drain(..) {
                    let _ = request.ack.send(Err(e.clone()));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, writes = group.len(), "group commit failed; retrying writes one by one");
                for request in group.drain(..) {
                    let result = self.timed_commit(&request.ops).await;
                    if let Err(e) = &result {
                        tracing::error!(error = %e, "commit failed");
                    }
                    let _ = request.ack.send(result);
                }
            }
        }
    }

    async fn timed_commit(&self, ops: &[WriteOp]) -> Result<(), StoreError> {
        let started = Instant::now();
        let result = self.store.commit(ops).await;
        metrics::histogram!(telemetry::PERSIST_COMMIT_MS)
            .record(started.elapsed().as_secs_f64() * 1000.0);
        if result.is_err() {
            metrics::counter!(telemetry::PERSIST_FAILURES).increment(1);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use async_trait::async_trait;
    use tokio::sync::Notify;

    use super::*;
    use crate::domain::{ContextId, ListTasksQuery, StreamEvent, TaskId, TaskPage, TenantId};
    use crate::store::{Census, StoredTask, ThreadSnapshot};

    /// A store whose commits wait at a gate, so a test can hold the persistence actor
    /// busy. Only `commit` is exercised here.
    struct GatedStore {
        entered: Notify,
        gate: Notify,
    }

    #[async_trait]
    impl Store for GatedStore {
        fn backend(&self) -> &'static str {
            "gated"
        }
        async fn commit(&self, _ops: &[WriteOp]) -> Result<(), StoreError> {
            self.entered.notify_one();
            self.gate.notified().await;
            Ok(())
        }
        async fn load_thread(
            &self,
            _: &TenantId,
            _: &ContextId,
            _: usize,
        ) -> Result<Option<ThreadSnapshot>, StoreError> {
            Ok(None)
        }
        async fn load_task(
            &self,
            _: &TenantId,
            _: &TaskId,
        ) -> Result<Option<StoredTask>, StoreError> {
            Ok(None)
        }
        async fn list_tasks(
            &self,
            _: &TenantId,
            _: &ListTasksQuery,
        ) -> Result<Option<TaskPage>, StoreError> {
            Ok(None)
        }
        async fn task_events(
            &self,
            _: &TenantId,
            _: &TaskId,
            _: i64,
            _: usize,
        ) -> Result<Vec<(i64, StreamEvent)>, StoreError> {
            Ok(Vec::new())
        }
        async fn ping(&self) -> Result<(), StoreError> {
            Ok(())
        }
        async fn census(&self, _: crate::domain::Timestamp) -> Result<Census, StoreError> {
            Ok(Census::default())
        }
        async fn due_threads(
            &self,
            _: crate::domain::Timestamp,
            _: Option<&crate::store::DueThread>,
            _: usize,
        ) -> Result<Vec<crate::store::DueThread>, StoreError> {
            Ok(Vec::new())
        }
        async fn recent_threads(
            &self,
            _: crate::domain::Timestamp,
            _: usize,
        ) -> Result<Vec<(TenantId, ContextId)>, StoreError> {
            Ok(Vec::new())
        }
    }

    #[actix_web::test]
    async fn a_full_queue_fails_fast_with_a_retryable_error() {
        let store = Arc::new(GatedStore {
            entered: Notify::new(),
            gate: Notify::new(),
        });
        let settings = PersistenceSettings {
            queue_capacity: 1,
            max_batch: 1,
            enqueue_timeout_ms: 20,
        };
        let arbiter = actix::Arbiter::new();
        let handle = start(store.clone(), &settings, &arbiter.handle());
        // The first write occupies the actor (its commit waits at the gate)…
        let first = actix_web::rt::spawn({
            let handle = handle.clone();
            async move { handle.commit(Vec::new()).await }
        });
        store.entered.notified().await;
        // …the second fills the queue…
        let second = actix_web::rt::spawn({
            let handle = handle.clone();
            async move { handle.commit(Vec::new()).await }
        });
        while handle.tx.capacity() > 0 {
            tokio::task::yield_now().await;
        }
        // …and the third finds no room.
        let third = handle.commit(Vec::new()).await;
        assert!(
            matches!(&third, Err(Error::Unavailable { detail, .. }) if detail.contains("queue_capacity")),
            "{third:?}"
        );
        store.gate.notify_one();
        assert_eq!(first.await.unwrap(), Ok(()));
        store.entered.notified().await;
        store.gate.notify_one();
        assert_eq!(second.await.unwrap(), Ok(()));
        arbiter.stop();
    }
}
