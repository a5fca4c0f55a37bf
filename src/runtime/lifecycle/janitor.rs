//! The janitor: every `threads.janitor_interval_secs` it expires threads past their TTL
//! and removes expired thread-state entries (contract B.5, B.6), and counts what it did.
//!
//! One pass, as of a clock reading `now`:
//!
//! 1. **Resident threads** get a [`Sweep`] through their actor, `threads.janitor_batch`
//!    at a time: the actor drops its expired state entries and, past its expiry, marks
//!    itself expired — planned, committed and applied like any other change of the
//!    thread, so the janitor never writes a thread that has an actor (one writer per
//!    thread).
//! 2. **Threads in the store** still marked active but past their expiry are read a page
//!    of `threads.janitor_batch` keys at a time (a keyset over every tenant). A page's
//!    resident threads are swept through their actors as above; the others are expired
//!    with one conditional [`WriteOp::ExpireThreads`] per tenant, committed through the
//!    `PersistenceActor`. The condition (`status = 'active' AND expires_at <= now`) makes
//!    that write safe even against an actor that loads the thread meanwhile: an actor
//!    only ever moves an expiry that has not passed, so a row the condition matches is
//!    one no actor may continue — the janitor writes down a fact that was already true.
//!
//! **State of threads not in memory** is not rewritten by the janitor. Expired entries
//! already read as absent, so nothing observable waits for their removal; finding them
//! would mean reading every stored thread's state (there is no column to index), and
//! rewriting it from outside the actor would race an actor loading the thread (a lost
//! update of a state write). Instead a thread actor sweeps itself right after loading,
//! before it handles any message, and stays in memory at least `threads.idle_timeout_secs`
//! (longer than the janitor interval by default), during which the janitor visits it.
//! Until then the dead entries sit in the stored row, within the thread's
//! `state.max_bytes`.
//!
//! **Idle actors** are evicted by their own housekeeping tick (`thread.rs`), not by the
//! janitor: under memory pressure eviction must follow within `threads.task_retention_ms`,
//! and only the actor knows whether a turn runs or a client listens. The janitor's metric
//! counts those evictions.
//!
//! Each pass also forgets the idempotency keys claimed before `idempotency.window_secs`
//! ago (one conditional delete).
//!
//! **Retention** (`store.retention_secs`, off at 0): last, the pass deletes the threads
//! marked expired for longer than the retention, with everything in them, through the
//! `PersistenceActor` in commits of `store.retention_batch` threads
//! ([`WriteOp::RetireThreads`], conditional like the expiry), so a request's commit
//! never waits behind more than one such batch. A thread past its retention is never
//! written again: its actor refuses every write from that instant (`ThreadActor::commit`)
//! and the janitor deletes it [`RETIREMENT_GRACE_MS`] later, so a deletion never races
//! a commit in flight. A thread whose actor is still in memory is left to a later pass
//! (its actor would still answer from memory). Claims need nothing here: configuration
//! holds the retention and the thread's TTL to cover the claims' window, so a retired
//! thread's claims were forgotten first.
//!
//! Metrics: `agent_a2a_janitor_runs_total`, `agent_a2a_janitor_run_duration_ms`,
//! `agent_a2a_janitor_threads_expired_total` (bulk expiries here, actor sweeps in
//! `maintenance.rs`), `agent_a2a_janitor_state_entries_removed_total`,
//! `agent_a2a_janitor_actors_evicted_total`, `agent_a2a_janitor_threads_deleted_total`
//! and `agent_a2a_janitor_retention_duration_ms`.

use std::collections::BTreeMap;
use std::sync::Weak;
use std::time::{Duration, Instant};

use actix::Addr;
use futures_util::future::join_all;
use tokio::sync::watch;

use crate::domain::{ContextId, TenantId, Timestamp};
use crate::error::Result;
use crate::runtime::Runtime;
use crate::runtime::thread::maintenance::{Sweep, SweepReport};
use crate::runtime::thread::{ActorError, RETIREMENT_GRACE_MS, ThreadActor, ThreadKey};
use crate::store::{DueThread, ThreadStatus, WriteOp};
use crate::telemetry;

/// What one janitor pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JanitorReport {
    /// Threads marked expired: by their actors, plus those handed to the conditional
    /// store write (a thread continued in the instant between the read and that write
    /// is counted but keeps its status).
    pub threads_expired: usize,
    /// Expired state entries removed from resident threads.
    pub state_entries_removed: usize,
    /// Resident thread actors swept.
    pub threads_swept: usize,
    /// Threads past `store.retention_secs` deleted with everything in them.
    pub threads_deleted: usize,
}

impl JanitorReport {
    fn add(&mut self, sweep: SweepReport) {
        self.threads_swept += 1;
        self.state_entries_removed += sweep.state_entries_removed;
        self.threads_expired += usize::from(sweep.thread_expired);
    }
}

impl super::Lifecycle<'_> {
    /// Runs one janitor pass as of `now` (the periodic janitor passes the current time;
    /// tests pass a later one instead of waiting). Fails only when the store cannot be
    /// read or written; what was done until then stays done.
    pub async fn run_janitor(self, now: Timestamp) -> Result<JanitorReport> {
        let started = Instant::now();
        let result = self.janitor_pass(now).await;
        metrics::counter!(telemetry::JANITOR_RUNS).increment(1);
        metrics::histogram!(telemetry::JANITOR_RUN_MS)
            .record(started.elapsed().as_secs_f64() * 1000.0);
        match &result {
            Ok(report) => tracing::debug!(?report, "janitor pass done"),
            Err(e) => tracing::warn!(error = %e, "janitor pass failed"),
        }
        result
    }

    /// Sweeps every resident actor, `batch` at a time.
    async fn sweep_resident(self, now: Timestamp, batch: usize, report: &mut JanitorReport) {
        let resident: Vec<Addr<ThreadActor>> = self
            .0
            .shared
            .actors
            .iter()
            .map(|entry| entry.value().1.clone())
            .collect();
        for chunk in resident.chunks(batch) {
            for swept in join_all(chunk.iter().map(|addr| addr.send(Sweep { now }))).await {
                // An actor evicted or closed meanwhile has nothing in memory to sweep;
                // its thread, if due, is in the store and handled below.
                if let Ok(Ok(sweep)) = swept {
                    report.add(sweep);
                }
            }
        }
    }

    async fn janitor_pass(self, now: Timestamp) -> Result<JanitorReport> {
        let batch = self.0.settings.threads.janitor_batch;
        let mut report = JanitorReport::default();
        // In a cluster every node sweeps its own actors, and the leader alone does the
        // store-wide work below.
        let leads = self.0.cluster.as_ref().is_none_or(|c| c.is_leader());
        if !leads {
            self.sweep_resident(now, batch, &mut report).await;
            return Ok(report);
        }
        // Idempotency keys past `idempotency.window_secs` answer nothing any more.
        let window_start = now
            .millis()
            .saturating_sub(self.0.settings.idempotency_window_ms);
        self.0
            .persistence
            .commit(vec![WriteOp::ForgetClaims {
                before: Timestamp(window_start),
            }])
            .await?;
        self.sweep_resident(now, batch, &mut report).await;
        let mut after: Option<DueThread> = None;
        loop {
            let due = self
                .0
                .store
                .due_threads(ThreadStatus::Active, now, after.as_ref(), batch)
                .await?;
            let last_page = due.len() < batch;
            after = due.last().cloned();
            let mut by_tenant = ByTenant::default();
            for thread in due {
                let key = ThreadKey {
                    tenant: thread.tenant,
                    context_id: thread.thread_id,
                };
                let actor = self
                    .0
                    .shared
                    .actors
                    .get(&key)
                    .map(|entry| entry.value().1.clone())
                    .filter(Addr::connected);
                if let Some(addr) = actor {
                    match addr.send(Sweep { now }).await {
                        Ok(Ok(sweep)) => {
                            report.add(sweep);
                            continue;
                        }
                        // Still resident, so never written from here: the next pass
                        // tries again (the sweep logged why it failed).
                        Ok(Err(ActorError::Failed(_))) => continue,
                        // Evicted meanwhile: the store is all there is.
                        Ok(Err(ActorError::Gone)) | Err(_) => {}
                    }
                }
                by_tenant.push(key);
            }
            let expired = by_tenant.len();
            if expired > 0 {
                let ops = by_tenant.ops(|tenant, thread_ids| WriteOp::ExpireThreads {
                    tenant,
                    thread_ids,
                    at: now,
                });
                self.0.persistence.commit(ops).await?;
                report.threads_expired += expired;
                metrics::counter!(telemetry::JANITOR_THREADS_EXPIRED).increment(expired as u64);
            }
            if last_page {
                break;
            }
        }
        if self.0.settings.retention_ms > 0 {
            let started = Instant::now();
            report.threads_deleted = self.retire_threads(now).await?;
            metrics::histogram!(telemetry::JANITOR_RETENTION_MS)
                .record(started.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(report)
    }

    /// Deletes the threads marked expired for longer than `store.retention_secs` (and
    /// [`RETIREMENT_GRACE_MS`]) at `now` whose actor is not in memory, a commit of
    /// `store.retention_batch` at a time; returns how many.
    async fn retire_threads(self, now: Timestamp) -> Result<usize> {
        let before = Timestamp(
            now.millis()
                .saturating_sub(self.0.settings.retention_ms)
                .saturating_sub(RETIREMENT_GRACE_MS),
        );
        let batch = self.0.settings.retention_batch;
        let mut deleted = 0;
        let mut after: Option<DueThread> = None;
        loop {
            let due = self
                .0
                .store
                .due_threads(ThreadStatus::Expired, before, after.as_ref(), batch)
                .await?;
            let last_page = due.len() < batch;
            after = due.last().cloned();
            let mut by_tenant = ByTenant::default();
            for thread in due {
                let key = ThreadKey {
                    tenant: thread.tenant,
                    context_id: thread.thread_id,
                };
                if !self.0.shared.actors.contains_key(&key) {
                    by_tenant.push(key);
                }
            }
            let retired = by_tenant.len();
            if retired > 0 {
                let ops = by_tenant.ops(|tenant, thread_ids| WriteOp::RetireThreads {
                    tenant,
                    thread_ids,
                    before,
                });
                self.0.persistence.commit(ops).await?;
                deleted += retired;
                metrics::counter!(telemetry::JANITOR_THREADS_DELETED).increment(retired as u64);
            }
            if last_page {
                return Ok(deleted);
            }
        }
    }
}

/// A page's threads by tenant: the janitor writes each tenant's with one conditional op.
#[derive(Default)]
struct ByTenant(BTreeMap<TenantId, Vec<ContextId>>);

impl ByTenant {
    fn push(&mut self, key: ThreadKey) {
        self.0.entry(key.tenant).or_default().push(key.context_id);
    }

    fn len(&self) -> usize {
        self.0.values().map(Vec::len).sum()
    }

    fn ops(self, op: impl Fn(TenantId, Vec<ContextId>) -> WriteOp) -> Vec<WriteOp> {
        self.0
            .into_iter()
            .map(|(tenant, thread_ids)| op(tenant, thread_ids))
            .collect()
    }
}

/// Runs a janitor pass every `every` until `stop` turns true or the runtime is gone.
pub(in crate::runtime) async fn run_periodically(
    runtime: Weak<Runtime>,
    mut stop: watch::Receiver<bool>,
    every: Duration,
) {
    // Every series exists (at 0) before the first pass.
    for counter in [
        telemetry::JANITOR_RUNS,
        telemetry::JANITOR_THREADS_EXPIRED,
        telemetry::JANITOR_STATE_REMOVED,
        telemetry::JANITOR_ACTORS_EVICTED,
        telemetry::JANITOR_THREADS_DELETED,
    ] {
        metrics::counter!(counter).increment(0);
    }
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        let Some(runtime) = runtime.upgrade() else {
            return;
        };
        // Errors are logged by the pass; the next one tries again.
        let _ = runtime.lifecycle().run_janitor(Timestamp::now()).await;
    }
}
