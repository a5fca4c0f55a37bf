//! The `PersistenceActor`: the only writer to the store.
//!
//! Callers hand it a batch of writes and wait for the acknowledgement. It takes whatever
//! queued while the previous transaction ran (up to `persistence.max_batch` batches) and
//! commits it in one transaction — group commit with no timer, so a lone request pays one
//! commit and a crowd shares one. Every waiter is acknowledged only after the commit
//! returned. If a group fails for a reason other than an unreachable database, its
//! batches are retried one by one so that one bad batch cannot fail its neighbours.
//!
//! On SQLite the loop is a thread of its own calling the store's synchronous writer
//! ([`Store::blocking_commit`]): a request's batch crosses threads twice (into the queue,
//! back with the acknowledgement) however many statements it holds. On Postgres it is a
//! task on the persistence arbiter, where the writer connections live, with up to
//! `persistence.commits_in_flight` group commits running at once.
//!
//! Before acknowledging a batch it tells the push hub what the batch wrote
//! ([`PushHub::committed`]): the outbox rows to deliver and the configs that changed. A
//! [`PersistenceHandle::pause`] holds every commit back (after those running returned),
//! so that what the store holds and what was handed over agree while the guard is held.
//!
//! **Architecture invariant:** nothing is acknowledged to a client before the commit that
//! holds it has returned; per-thread order is preserved because each `ThreadActor` waits
//! for one batch before sending the next.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use actix::ArbiterHandle;
use tokio::sync::mpsc::error::SendTimeoutError;
use tokio::sync::{OwnedRwLockWriteGuard, RwLock, mpsc, oneshot};

use crate::config::PersistenceSettings;
use crate::error::{Error, Result};
use crate::runtime::push::PushHub;
use crate::store::{BlockingCommit, Store, StoreError, WriteOp};
use crate::telemetry;

struct WriteRequest {
    ops: Vec<WriteOp>,
    ack: oneshot::Sender<Result<(), StoreError>>,
    /// The commit's span (`Span::none()` without traces): told the group's size.
    span: tracing::Span,
}

/// A handle to the persistence actor. Cheap to clone.
#[derive(Clone)]
pub struct PersistenceHandle {
    tx: mpsc::Sender<WriteRequest>,
    queued: Arc<AtomicI64>,
    enqueue_timeout: Duration,
    /// Held shared by each group commit, from its start until its batches are
    /// acknowledged; exclusively by a pause.
    gate: Arc<RwLock<()>>,
}

impl PersistenceHandle {
    /// Commits `ops` in order, atomically, and returns once they are durable.
    pub async fn commit(&self, ops: Vec<WriteOp>) -> Result<()> {
        let (ack, done) = oneshot::channel();
        let depth = self.queued.fetch_add(1, Ordering::Relaxed) + 1;
        telemetry::gauge(telemetry::PERSIST_QUEUE).set(depth as f64);
        // A full queue means the database cannot keep up: wait a little for room (that
        // is ordinary backpressure), then fail fast with a retryable error rather than
        // hold the request open without limit.
        match self
            .tx
            .send_timeout(
                WriteRequest {
                    ops,
                    ack,
                    span: if telemetry::trace::on() {
                        tracing::Span::current()
                    } else {
                        tracing::Span::none()
                    },
                },
                self.enqueue_timeout,
            )
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

    /// Resolves once no commit is running, and holds every further commit back until
    /// the guard is dropped: a read made meanwhile sees exactly the commits whose writes
    /// were handed to the push hub. Hold it briefly (writers queue behind it).
    pub async fn pause(&self) -> OwnedRwLockWriteGuard<()> {
        self.gate.clone().write_owned().await
    }

    /// The longest a pause may hold writers back (`persistence.enqueue_timeout_ms`: as
    /// long as a write may wait for room in the queue).
    pub fn max_pause(&self) -> Duration {
        self.enqueue_timeout
    }

    fn unavailable(&self, detail: &str) -> Error {
        // The HTTP layer replaces the hint with `server.retry_after_secs`.
        Error::Unavailable {
            detail: detail.to_owned(),
            retry_after_secs: 1,
        }
    }
}

/// Starts the persistence loop: on a thread of its own when the store commits
/// synchronously (SQLite: a group is one blocking call, no async machinery between the
/// queue and the disk), otherwise on `arbiter` (Postgres), so commits never wait behind
/// request handling either way.
pub fn start(
    store: Arc<dyn Store>,
    settings: &PersistenceSettings,
    arbiter: &ArbiterHandle,
    push: Arc<PushHub>,
) -> PersistenceHandle {
    let (tx, rx) = mpsc::channel(settings.queue_capacity);
    let queued = Arc::new(AtomicI64::new(0));
    let gate = Arc::new(RwLock::new(()));
    let queue = Queue {
        rx,
        queued: queued.clone(),
        max_batch: settings.max_batch,
        push,
        gate: gate.clone(),
    };
    match store.blocking_commit() {
        Some(writer) => {
            let started = std::thread::Builder::new()
                .name("a2a-writer".into())
                .spawn(move || run_blocking(queue, writer.as_ref()));
            if let Err(e) = started {
                // Without its thread the queue's receiver is gone: every commit fails
                // with "the persistence actor has stopped", and health says why.
                tracing::error!(error = %e, "cannot start the persistence thread");
            }
        }
        None => {
            arbiter.spawn(run_async(queue, store, settings.commits_in_flight.max(1)));
        }
    }
    PersistenceHandle {
        tx,
        queued,
        enqueue_timeout: Duration::from_millis(settings.enqueue_timeout_ms),
        gate,
    }
}

/// The receiving end of the write queue.
struct Queue {
    rx: mpsc::Receiver<WriteRequest>,
    queued: Arc<AtomicI64>,
    max_batch: usize,
    push: Arc<PushHub>,
    gate: Arc<RwLock<()>>,
}

impl Queue {
    /// Adds what is already queued behind `first` (up to `max_batch` in all) to `group`.
    fn gather(&mut self, first: WriteRequest, group: &mut Vec<WriteRequest>) {
        group.push(first);
        while group.len() < self.max_batch {
            match self.rx.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        let remaining =
            self.queued.fetch_sub(group.len() as i64, Ordering::Relaxed) - group.len() as i64;
        telemetry::gauge(telemetry::PERSIST_QUEUE).set(remaining.max(0) as f64);
        telemetry::histogram(telemetry::PERSIST_BATCH).record(group.len() as f64);
        if telemetry::trace::on() {
            for request in group.iter() {
                request.span.record("db.operation.batch.size", group.len());
            }
        }
    }
}

/// The commit thread of a synchronous store.
fn run_blocking(mut queue: Queue, writer: &dyn BlockingCommit) {
    let mut group: Vec<WriteRequest> = Vec::with_capacity(queue.max_batch);
    while let Some(first) = queue.rx.blocking_recv() {
        queue.gather(first, &mut group);
        let gate = queue.gate.clone();
        let _open = gate.blocking_read();
        let batches: Vec<&[WriteOp]> = group.iter().map(|r| r.ops.as_slice()).collect();
        let result = timed(|| writer.commit_blocking(&batches));
        drop(batches);
        for request in settle(&mut group, result, &queue.push) {
            let result = timed(|| writer.commit_blocking(&[&request.ops]));
            acknowledge(request, result, &queue.push);
        }
    }
    tracing::info!("persistence thread stopped: no more writers");
}

/// The commit loop of an asynchronous store, on the persistence arbiter: up to
/// `in_flight` group commits at once, each on its own connection. Any two batches in
/// flight belong to different threads (a thread actor waits for each commit before it
/// sends the next), so their order does not matter; a flush (an empty batch) waits for
/// every commit before it to return.
async fn run_async(mut queue: Queue, store: Arc<dyn Store>, in_flight: usize) {
    let slots = Arc::new(tokio::sync::Semaphore::new(in_flight));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let Some(first) = queue.rx.recv().await else {
            break;
        };
        let mut group: Vec<WriteRequest> = Vec::with_capacity(queue.max_batch);
        queue.gather(first, &mut group);
        let flush = group.iter().any(|r| r.ops.is_empty());
        // A flush is acknowledged only once every commit that started before it is done.
        let all = if flush {
            let others = u32::try_from(in_flight - 1).unwrap_or(u32::MAX);
            slots.clone().acquire_many_owned(others).await.ok()
        } else {
            None
        };
        let (store, push, gate) = (store.clone(), queue.push.clone(), queue.gate.clone());
        actix::spawn(async move {
            let open = gate.read_owned().await;
            commit_group_async(store.as_ref(), group, &push).await;
            drop((open, slot, all));
        });
    }
    // Every commit still running holds a slot: wait for them all.
    let _ = slots
        .acquire_many(u32::try_from(in_flight).unwrap_or(u32::MAX))
        .await;
    tracing::info!("persistence actor stopped: no more writers");
}

async fn commit_group_async(store: &dyn Store, mut group: Vec<WriteRequest>, push: &PushHub) {
    let started = Instant::now();
    let batches: Vec<&[WriteOp]> = group.iter().map(|r| r.ops.as_slice()).collect();
    let result = store.commit_group(&batches).await;
    drop(batches);
    record_commit(started, &result);
    for request in settle(&mut group, result, push) {
        let started = Instant::now();
        let result = store.commit(&request.ops).await;
        record_commit(started, &result);
        acknowledge(request, result, push);
    }
}

/// Acknowledges the group after its commit returned; returns the batches to commit again
/// one by one — after a failure other than an unreachable database, so that one bad
/// batch cannot fail its neighbours.
fn settle(
    group: &mut Vec<WriteRequest>,
    result: Result<(), StoreError>,
    push: &PushHub,
) -> Vec<WriteRequest> {
    match result {
        Ok(()) => {
            for request in group.drain(..) {
                push.committed(request.ops);
                let _ = request.ack.send(Ok(()));
            }
            Vec::new()
        }
        Err(e @ StoreError::Unavailable(_)) => {
            tracing::warn!(error = %e, writes = group.len(), "commit failed: database unavailable");
            for request in group.drain(..) {
                let _ = request.ack.send(Err(e.clone()));
            }
            Vec::new()
        }
        Err(e) if group.len() == 1 => {
            match e {
                StoreError::Fenced => fenced(&e),
                _ => tracing::error!(error = %e, "commit failed"),
            }
            for request in group.drain(..) {
                let _ = request.ack.send(Err(e.clone()));
            }
            Vec::new()
        }
        Err(e) => {
            tracing::warn!(error = %e, writes = group.len(), "group commit failed; retrying writes one by one");
            std::mem::take(group)
        }
    }
}

/// A write refused because another node took its thread over (cluster mode; expected
/// once per takeover). What the turn did for it — a model call, tool calls — was for
/// nothing, and the node that took the thread over may do it again: counted.
fn fenced(e: &StoreError) {
    metrics::counter!(crate::telemetry::CLUSTER_FENCED_WRITES).increment(1);
    tracing::warn!(error = %e, "commit refused");
}

fn acknowledge(request: WriteRequest, result: Result<(), StoreError>, push: &PushHub) {
    match &result {
        // Cluster mode: another node took a thread of this one over; expected once.
        Err(e @ StoreError::Fenced) => fenced(e),
        Err(e) => tracing::error!(error = %e, "commit failed"),
        Ok(()) => push.committed(request.ops),
    }
    let _ = request.ack.send(result);
}

fn timed(commit: impl FnOnce() -> Result<(), StoreError>) -> Result<(), StoreError> {
    let started = Instant::now();
    let result = commit();
    record_commit(started, &result);
    result
}

fn record_commit(started: Instant, result: &Result<(), StoreError>) {
    telemetry::histogram(telemetry::PERSIST_COMMIT_MS)
        .record(started.elapsed().as_secs_f64() * 1000.0);
    if result.is_err() {
        metrics::counter!(telemetry::PERSIST_FAILURES).increment(1);
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
        /// Commits that have entered so far.
        entries: std::sync::atomic::AtomicUsize,
    }

    #[async_trait]
    impl Store for GatedStore {
        fn backend(&self) -> &'static str {
            "gated"
        }
        async fn commit(&self, _ops: &[WriteOp]) -> Result<(), StoreError> {
            self.entries.fetch_add(1, Ordering::SeqCst);
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
        async fn task_context(
            &self,
            _: &TenantId,
            _: &TaskId,
        ) -> Result<Option<ContextId>, StoreError> {
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
        async fn refresh_statistics(&self) -> Result<Vec<&'static str>, StoreError> {
            Ok(Vec::new())
        }
        async fn due_threads(
            &self,
            _: crate::store::ThreadStatus,
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
        async fn push_configs(
            &self,
            _: &TenantId,
            _: &[TaskId],
        ) -> Result<Vec<crate::domain::PushConfig>, StoreError> {
            Ok(Vec::new())
        }
        async fn due_deliveries(
            &self,
            _: crate::domain::Timestamp,
            _: usize,
        ) -> Result<Vec<crate::store::Delivery>, StoreError> {
            Ok(Vec::new())
        }
        async fn outbox_depth(&self) -> Result<u64, StoreError> {
            Ok(0)
        }
        async fn owed_deliveries(
            &self,
            _: usize,
        ) -> Result<Vec<(crate::store::Delivery, crate::domain::Timestamp)>, StoreError> {
            Ok(Vec::new())
        }
        async fn claim(
            &self,
            _: &TenantId,
            _: &str,
        ) -> Result<Option<crate::store::Claim>, StoreError> {
            Ok(None)
        }
        async fn claim_keys(
            &self,
            _: crate::domain::Timestamp,
            _: Option<crate::domain::Timestamp>,
            _: Option<usize>,
        ) -> Result<Vec<(TenantId, String, crate::domain::Timestamp)>, StoreError> {
            Ok(Vec::new())
        }
    }

    /// The persistence actor over a [`GatedStore`], one batch a group, with its push hub.
    fn gated(
        settings: PersistenceSettings,
    ) -> (
        Arc<GatedStore>,
        PersistenceHandle,
        Arc<PushHub>,
        actix::Arbiter,
    ) {
        let store = Arc::new(GatedStore {
            entered: Notify::new(),
            gate: Notify::new(),
            entries: Default::default(),
        });
        let arbiter = actix::Arbiter::new();
        let hub = Arc::new(PushHub::new(&Default::default()));
        let settings = PersistenceSettings {
            max_batch: 1,
            ..settings
        };
        let handle = start(store.clone(), &settings, &arbiter.handle(), hub.clone());
        (store, handle, hub, arbiter)
    }

    #[actix_web::test]
    async fn a_full_queue_fails_fast_with_a_retryable_error() {
        let (store, handle, _, arbiter) = gated(PersistenceSettings {
            queue_capacity: 1,
            enqueue_timeout_ms: 20,
            ..PersistenceSettings::default()
        });
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

    #[actix_web::test]
    async fn a_pause_waits_for_running_commits_holds_the_next_and_commits_hand_rows_over_first() {
        let (store, handle, hub, arbiter) = gated(PersistenceSettings {
            commits_in_flight: 2,
            ..PersistenceSettings::default()
        });
        hub.hand_over();
        let owed = |seq: i64| crate::runtime::push::tests::owed("hook", seq);
        let commit = |ops: Vec<WriteOp>| {
            let handle = handle.clone();
            actix_web::rt::spawn(async move { handle.commit(ops).await })
        };
        let first = commit(vec![owed(1)]);
        store.entered.notified().await;
        // The pause waits for the commit inside the store.
        let pausing = {
            let handle = handle.clone();
            actix_web::rt::spawn(async move { handle.pause().await })
        };
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(!pausing.is_finished(), "paused while a commit ran");
        store.gate.notify_one();
        assert_eq!(first.await.unwrap(), Ok(()));
        // Acknowledged after its row was handed over.
        let mut handed = Vec::new();
        hub.take(&mut handed).unwrap();
        assert!(matches!(&handed[..], [crate::runtime::push::Handed::Owed(d)] if d.key.seq == 1));
        assert_eq!(hub.depth(), 1);
        let paused = pausing.await.unwrap();
        // Paused: the next commit waits outside the store.
        let second = commit(vec![owed(2)]);
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            store.entries.load(Ordering::SeqCst),
            1,
            "a commit ran while paused"
        );
        drop(paused);
        store.entered.notified().await;
        store.gate.notify_one();
        assert_eq!(second.await.unwrap(), Ok(()));
        let mut handed = Vec::new();
        hub.take(&mut handed).unwrap();
        assert_eq!(handed.len(), 1);
        arbiter.stop();
    }

    #[actix_web::test]
    async fn commits_run_side_by_side_and_a_flush_waits_for_them() {
        let (store, handle, _, arbiter) = gated(PersistenceSettings {
            commits_in_flight: 2,
            ..PersistenceSettings::default()
        });
        let write = || {
            vec![WriteOp::ExpireThreads {
                tenant: TenantId::default_tenant(),
                thread_ids: Vec::new(),
                at: crate::domain::Timestamp(0),
            }]
        };
        let commit = |ops: Vec<WriteOp>| {
            let handle = handle.clone();
            actix_web::rt::spawn(async move { handle.commit(ops).await })
        };
        // Two commits inside the store at once.
        let first = commit(write());
        store.entered.notified().await;
        let second = commit(write());
        store.entered.notified().await;
        assert_eq!(store.entries.load(Ordering::SeqCst), 2);
        // A flush queued behind them waits for both, not only for a free slot.
        let flush = commit(Vec::new());
        store.gate.notify_one();
        let one_done = tokio::select! {
            r = first => r,
            r = second => r,
        };
        assert_eq!(one_done.unwrap(), Ok(()));
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            store.entries.load(Ordering::SeqCst),
            2,
            "the flush ran while a commit before it was still running"
        );
        store.gate.notify_one();
        store.entered.notified().await;
        store.gate.notify_one();
        assert_eq!(flush.await.unwrap(), Ok(()));
        arbiter.stop();
    }
}
