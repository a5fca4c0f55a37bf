//! The `ThreadActor`: the single writer of one A2A thread (`contextId`).
//!
//! It owns the thread's history window, its resident tasks, the queue of turns waiting
//! behind the running one, and each task's broadcast hub. It serialises turns and stays
//! responsive to `GetTask`, `CancelTask` and `SubscribeToTask` while a turn runs: the
//! executor runs as its own task and reports back through messages.
//!
//! Every state change follows the same order — plan from the current state, commit
//! through the `PersistenceActor`, then apply to memory and publish — and the commit is
//! awaited with `ctx.wait`, so no other message interleaves between plan and apply.
//!
//! **Architecture invariant:** memory never holds a change the store does not; a failed
//! commit leaves the actor exactly as it was.
//!
//! This file holds the actor, its lifecycle and its commit discipline. Its state is in
//! `state.rs`, the turn rules over that state in `plan/`, and each message sits with its
//! handler: `turn.rs`, `emit.rs`, `control.rs`, `push.rs`, `rejoin.rs`, `maintenance.rs`.

pub(super) mod control;
mod emit;
pub(super) mod maintenance;
mod plan;
pub(super) mod push;
pub(super) mod rejoin;
mod state;
mod turn;

pub(super) use control::{CancelTask, GetResident, Subscribe, Waiter};
pub(super) use emit::{Emit, TurnEmit};
pub(super) use state::{Loaded, TaskEntry, message_record, session_record, targets_of};
pub(super) use turn::{PendingTurn, RunningTurn, SendTurn, TurnClaim};

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use actix::prelude::*;
use dashmap::DashMap;
// Keys are clients' ids: foldhash seeded per process, a fraction of SipHash's cost.
use foldhash::fast::RandomState;
use tokio::sync::{broadcast, watch};
use tracing::Instrument;

use super::executor::AgentExecutor;
use super::lifecycle::shutdown::Activity;
use super::persistence::PersistenceHandle;
use crate::config::{StateSettings, StreamingSettings, ThreadSettings};
use crate::domain::{ContextId, StreamEvent, TaskId, TaskState, TenantId, Timestamp};
use crate::error::Error;
use crate::store::{Store, WriteOp};
use crate::telemetry;

/// One published event of a task: its log sequence number and the event.
pub type HubEvent = Arc<(i64, StreamEvent)>;

/// Identifies a thread actor: threads are scoped by tenant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ThreadKey {
    pub tenant: TenantId,
    pub context_id: ContextId,
}

/// Why an actor refused a message.
#[derive(Debug)]
pub enum ActorError {
    /// The actor was evicted; ask the registry for a fresh one.
    Gone,
    Failed(Error),
}

impl From<Error> for ActorError {
    fn from(e: Error) -> Self {
        ActorError::Failed(e)
    }
}

/// State shared by the registry and its actors.
pub struct Shared {
    /// Resident actors with the instance id that owns the entry.
    pub actors: DashMap<ThreadKey, (u64, Addr<ThreadActor>), RandomState>,
    /// Resident tasks → their thread, so `GetTask` by id finds the actor.
    pub tasks: DashMap<(TenantId, TaskId), ContextId, RandomState>,
    pub next_actor_id: AtomicU64,
    /// Turns not finished yet (a graceful shutdown waits for them).
    pub activity: Arc<Activity>,
    /// A graceful shutdown has begun: no new turns or subscriptions, and task streams
    /// end once no turn of theirs is running.
    pub draining: AtomicBool,
    /// Turns true when the node begins to leave (a graceful shutdown's notice, or the
    /// drain itself, which follows it): no new subscriptions, and task streams end once
    /// no turn of theirs runs here (a stream following another node's task watches it);
    /// turns are still taken until the drain.
    pub leaving: watch::Sender<bool>,
    /// The runtime's actors are being stopped (the end of a shutdown, after its wait for
    /// turns): a turn's output is refused from here, so that a turn cut off by the stop
    /// leaves its task as last committed — to be resumed or failed when its thread loads
    /// again — and never records what the stop did to it (a skill actor stopped under a
    /// call is not the call's answer).
    pub closing: AtomicBool,
}

impl Shared {
    pub fn new() -> Self {
        Self {
            actors: DashMap::default(),
            tasks: DashMap::default(),
            next_actor_id: AtomicU64::new(1),
            activity: Arc::new(Activity::default()),
            draining: AtomicBool::new(false),
            leaving: watch::Sender::new(false),
            closing: AtomicBool::new(false),
        }
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// See [`Shared::leaving`]; true whenever [`Shared::is_draining`] is.
    pub fn is_leaving(&self) -> bool {
        *self.leaving.borrow()
    }
}

/// What every thread actor needs.
pub struct ThreadDeps {
    pub store: Arc<dyn Store>,
    pub persistence: PersistenceHandle,
    pub executor: Arc<dyn AgentExecutor>,
    pub tools: Arc<super::Tools>,
    pub threads: ThreadSettings,
    pub streaming: StreamingSettings,
    pub state: StateSettings,
    pub shared: Arc<Shared>,
    pub push: Arc<super::push::PushHub>,
    /// `persistence.start_grace_ms`.
    pub start_grace: Duration,
    /// Cluster mode: this node's membership (placement, fencing token, node id).
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    /// `agent.name`, as turn spans name the agent.
    pub agent_name: Arc<str>,
    /// `store.retention_secs` in ms (0: threads are kept forever): how long after its
    /// expiry a thread is deleted by the janitor, and from when its actor writes nothing.
    pub retention_ms: i64,
}

/// Whether a stored thread expiring at `expires_at` is past `retention_ms` (0: never) at
/// `now`: its actor writes nothing more, and the janitor deletes it
/// [`RETIREMENT_GRACE_MS`] later.
pub(in crate::runtime) fn past_retention(
    expires_at: Timestamp,
    retention_ms: i64,
    now: Timestamp,
) -> bool {
    retention_ms > 0 && expires_at.millis().saturating_add(retention_ms) <= now.millis()
}

/// How long after a thread's actor stopped writing it (past its retention) the janitor
/// deletes it: far longer than any commit is in flight, and than the clocks of a
/// cluster's nodes differ.
pub(in crate::runtime) const RETIREMENT_GRACE_MS: i64 = 60_000;

/// How a `SendMessage` caller wants its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Wait until the task is terminal or interrupted.
    Blocking,
    /// Return as soon as the task exists.
    Immediate,
    /// Stream the task's events.
    Streaming,
}

/// Where a subscription's live events come from.
pub enum Live {
    /// The task's hub in this node's thread actor: the events themselves.
    Hub(broadcast::Receiver<HubEvent>),
    /// Cluster mode, a task of another node: notifications that the task's log grew
    /// (read at least every `poll`, for a notification missed while reconnecting).
    Notified {
        watch: crate::cluster::notify::Watch,
        poll: Duration,
    },
}

/// A live view of a task's events (or a single message).
pub struct Subscription {
    pub tenant: TenantId,
    pub task_id: Option<TaskId>,
    /// The first event with its id: a task snapshot or a message.
    pub first: Option<(i64, StreamEvent)>,
    /// Live events; `None` when the stream ends after `first` or after the replay.
    pub live: Option<Live>,
    /// Events with `seq <= after_seq` are covered already; later ones come from the
    /// store (catch-up) and then from `live`.
    pub after_seq: i64,
    /// `SubscribeToTask` follows the task to a terminal state (through follow-up turns);
    /// a stream opened by a message ends with its turn (terminal or interrupted).
    pub until_terminal: bool,
}

enum Phase {
    Loading,
    Ready(Box<Loaded>),
    /// Evicted (`None`: ask for a fresh actor) or failed to load.
    Closed(Option<Error>),
}

/// The actor of one thread. Created by the `ThreadRegistry` under a `Supervisor`.
pub struct ThreadActor {
    pub(super) id: u64,
    pub(super) key: ThreadKey,
    pub(super) deps: Arc<ThreadDeps>,
    phase: Phase,
    pub(super) turn_counter: u64,
    timer: Option<SpawnHandle>,
    /// The thread id was minted by this server just now: nothing to load on first start.
    fresh: bool,
    /// Cluster mode: the fencing token this node held when the thread was placed here;
    /// every batch carries it, and is refused once another node took over.
    token: Option<i64>,
}

impl ThreadActor {
    pub fn new(
        id: u64,
        key: ThreadKey,
        deps: Arc<ThreadDeps>,
        fresh: bool,
        token: Option<i64>,
    ) -> Self {
        Self {
            id,
            key,
            deps,
            phase: Phase::Loading,
            turn_counter: 0,
            timer: None,
            fresh,
            token,
        }
    }

    /// The loaded state, or why there is none. Counts as activity: the actor is not idle.
    pub(super) fn loaded(&mut self) -> Result<&mut Loaded, ActorError> {
        let loaded = self.loaded_quietly()?;
        loaded.last_activity = Instant::now();
        Ok(loaded)
    }

    /// The loaded state without counting as activity: for housekeeping (the janitor's
    /// sweep, draining), which must not keep an idle actor in memory.
    pub(super) fn loaded_quietly(&mut self) -> Result<&mut Loaded, ActorError> {
        match &mut self.phase {
            Phase::Ready(loaded) => Ok(loaded),
            Phase::Closed(None) | Phase::Loading => Err(ActorError::Gone),
            Phase::Closed(Some(e)) => Err(ActorError::Failed(e.clone())),
        }
    }

    fn load(&mut self, ctx: &mut Context<Self>) {
        let store = self.deps.store.clone();
        let key = self.key.clone();
        let window = self.deps.threads.history_window;
        let ttl_ms = (self.deps.threads.thread_ttl_secs as i64).saturating_mul(1000);
        let load = async move {
            store
                .load_thread(&key.tenant, &key.context_id, window)
                .await
        };
        ctx.wait(fut::wrap_future(load).map(move |result, act: &mut Self, ctx| {
            match result {
                Ok(snapshot) => {
                    let deps = act.deps.clone();
                    let loaded = match snapshot {
                        Some(s) => Loaded::from_snapshot(s, &deps),
                        None => Loaded::new_thread(&act.key, ttl_ms, &deps),
                    };
                    for task_id in loaded.tasks.keys() {
                        act.deps.shared.tasks.insert(
                            (act.key.tenant.clone(), task_id.clone()),
                            act.key.context_id.clone(),
                        );
                    }
                    act.phase = Phase::Ready(Box::new(loaded));
                    // State entries that expired while the thread was out of memory are
                    // removed now (and an overdue thread marked expired), before any
                    // message is handled; the janitor sweeps resident threads itself.
                    ctx.wait(act.sweep(Timestamp::now()).map(|_, _, _| ()));
                    act.fail_interrupted(ctx);
                }
                Err(e) => {
                    tracing::warn!(error = %e, context_id = %act.key.context_id, "thread load failed");
                    act.close(Some(Error::from(e)), ctx);
                }
            }
        }));
    }

    /// Leaves the registry and turns into a tombstone that refuses every message; the
    /// actor stops when the last address to it is dropped.
    fn close(&mut self, reason: Option<Error>, ctx: &mut Context<Self>) {
        let id = self.id;
        self.deps
            .shared
            .actors
            .remove_if(&self.key, |_, (owner, _)| *owner == id);
        if let Phase::Ready(loaded) = &mut self.phase {
            for task_id in loaded.tasks.keys() {
                self.deps
                    .shared
                    .tasks
                    .remove(&(self.key.tenant.clone(), task_id.clone()));
            }
            if let Some(running) = loaded.running.take()
                && let Some(abort) = running.abort
            {
                abort.abort();
            }
        }
        if matches!(self.phase, Phase::Ready(_) | Phase::Loading) {
            telemetry::gauge(telemetry::THREAD_ACTORS).decrement(1.0);
        }
        self.phase = Phase::Closed(reason);
        // A tombstone must not keep itself alive: with the timer gone it stops as soon as
        // the last address to it is dropped (and is then not restarted, having no mailbox).
        if let Some(timer) = self.timer.take() {
            ctx.cancel_future(timer);
        }
    }

    /// Periodic housekeeping: finished tasks leave memory after the retention period,
    /// and an idle actor evicts itself. Eviction stays here rather than in the janitor:
    /// under memory pressure it must react within (twice) the retention period (not a
    /// janitor interval), and only the actor knows whether a turn runs or a client listens. It is
    /// counted as the janitor's work all the same (`agent_a2a_janitor_actors_evicted_total`).
    fn tick(&mut self, ctx: &mut Context<Self>) {
        let retention = Duration::from_millis(self.deps.threads.task_retention_ms);
        // Under memory pressure (too many resident actors) idle means "nothing for the
        // retention period" rather than the full idle timeout.
        let idle = if self.deps.shared.actors.len() > self.deps.threads.max_resident_actors {
            retention
        } else {
            Duration::from_secs(self.deps.threads.idle_timeout_secs)
        };
        let tenant = self.key.tenant.clone();
        let shared = self.deps.shared.clone();
        let Phase::Ready(loaded) = &mut self.phase else {
            return;
        };
        loaded.tasks.retain(|task_id, entry| {
            let expired = entry
                .finished_at
                .is_some_and(|at| at.elapsed() >= retention && entry.waiters.is_empty());
            if expired {
                shared.tasks.remove(&(tenant.clone(), task_id.clone()));
            }
            !expired
        });
        self.evict_if_quiet(idle, ctx);
    }

    /// Whether more actors are resident than `threads.max_resident_actors`.
    pub(super) fn over_resident_limit(&self) -> bool {
        self.deps.shared.actors.len() > self.deps.threads.max_resident_actors
    }

    /// Leaves memory when nothing happened for `idle`, no turn runs or waits, and no client
    /// follows a task; the thread reloads from the store on its next request. Whether it
    /// left.
    pub(super) fn evict_if_quiet(&mut self, idle: Duration, ctx: &mut Context<Self>) -> bool {
        let Phase::Ready(loaded) = &self.phase else {
            return false;
        };
        let quiet = loaded.running.is_none()
            && loaded.queue.is_empty()
            && loaded.unsynced.is_empty()
            && loaded.last_activity.elapsed() >= idle
            && loaded.tasks.values().all(|t| {
                t.waiters.is_empty() && t.hub.as_ref().is_none_or(|h| h.receiver_count() == 0)
            });
        if quiet {
            tracing::debug!(context_id = %self.key.context_id, "evicting idle thread actor");
            metrics::counter!(telemetry::JANITOR_ACTORS_EVICTED).increment(1);
            self.close(None, ctx);
        }
        quiet
    }
}

impl ThreadActor {
    /// Commits `ops` through the persistence actor, preceded by whatever this actor left
    /// unsynced. If a commit that carried unsynced writes fails, memory is ahead of the
    /// store: the actor is discarded (see [`ThreadActor::discard`]).
    pub(super) fn commit(
        &mut self,
        mut ops: Vec<WriteOp>,
        ctx: &mut Context<Self>,
    ) -> impl ActorFuture<Self, Output = Result<(), Error>> + 'static {
        // A thread past its retention is the janitor's to delete: nothing is written to
        // it any more, so the deletion never races a write of this actor.
        let retention_ms = self.deps.retention_ms;
        if retention_ms > 0
            && !ops.is_empty()
            && let Ok(loaded) = self.loaded_quietly()
            && loaded.thread_persisted
            && past_retention(loaded.thread.expires_at, retention_ms, Timestamp::now())
        {
            let refused = Error::ThreadExpired(self.key.context_id.clone());
            return futures_util::future::Either::Left(fut::ready(Err(refused)));
        }
        let mut carried = false;
        if let Ok(loaded) = self.loaded_quietly()
            && !loaded.unsynced.is_empty()
        {
            let mut all = std::mem::take(&mut loaded.unsynced);
            all.append(&mut ops);
            ops = all;
            carried = true;
            if let Some(timer) = loaded.flush.take() {
                ctx.cancel_future(timer);
            }
        }
        self.deps.push.admit(&mut ops);
        self.fence(&mut ops);
        // The running turn's span parents the commit (only when traces are on).
        let span = match telemetry::trace::on().then(|| self.loaded_quietly()) {
            Some(Ok(Loaded {
                running: Some(running),
                ..
            })) => telemetry::trace::commit(&running.span, ops.len()),
            _ => tracing::Span::none(),
        };
        let persistence = self.deps.persistence.clone();
        futures_util::future::Either::Right(
            fut::wrap_future(async move { persistence.commit(ops).instrument(span).await }).map(
                move |result, act: &mut Self, ctx| {
                    if carried {
                        match &result {
                            Ok(()) => act.publish_unpublished(),
                            Err(e) => act.discard(e.clone(), ctx),
                        }
                    }
                    result
                },
            ),
        )
    }

    /// Cluster mode: puts the actor's fencing token at the head of a batch that writes
    /// anything. (The thread's owner is written with the thread's row by the store.)
    fn fence(&self, ops: &mut Vec<WriteOp>) {
        let Some(token) = self.token else {
            return;
        };
        if !ops.is_empty() {
            ops.insert(0, WriteOp::Fence(token));
        }
    }

    /// Resolves once nothing applied to memory is waiting for its commit: what a reader
    /// is shown next is durable. Commits the unsynced writes now if there are any.
    pub(super) fn synced(
        &mut self,
        ctx: &mut Context<Self>,
    ) -> Pin<Box<dyn ActorFuture<Self, Output = Result<(), Error>>>> {
        match self.loaded_quietly() {
            Ok(loaded) if !loaded.unsynced.is_empty() => Box::pin(self.commit(Vec::new(), ctx)),
            _ => Box::pin(fut::ready(Ok(()))),
        }
    }

    fn publish_unpublished(&mut self) {
        let Ok(loaded) = self.loaded_quietly() else {
            return;
        };
        for (task_id, event) in std::mem::take(&mut loaded.unpublished) {
            if let Some(hub) = loaded.tasks.get(&task_id).and_then(|e| e.hub.as_ref()) {
                let _ = hub.send(event);
            }
        }
    }

    /// Defers `ops` (already applied to memory) to the actor's next commit, or to a commit
    /// of their own after `persistence.start_grace_ms`.
    pub(super) fn defer(&mut self, mut ops: Vec<WriteOp>, ctx: &mut Context<Self>) {
        let grace = self.deps.start_grace;
        let Ok(loaded) = self.loaded_quietly() else {
            return;
        };
        loaded.unsynced.append(&mut ops);
        if loaded.flush.is_none() {
            loaded.flush = Some(ctx.run_later(grace, |act, ctx| {
                // Nothing to do once the writes rode with a commit or the actor closed.
                match act.loaded_quietly() {
                    Ok(loaded) if !loaded.unsynced.is_empty() => loaded.flush = None,
                    _ => return,
                }
                let flush = act.commit(Vec::new(), ctx).map(|result, act: &mut Self, _| {
                    if let Err(e) = result {
                        tracing::warn!(context_id = %act.key.context_id, error = %e, "a turn's first writes could not be committed");
                    }
                });
                ctx.wait(flush);
            }));
        }
    }

    /// Memory holds writes the store refused (a commit that carried unsynced writes
    /// failed, or a refused turn's start was never committed): every caller waiting on
    /// this thread gets `error`, the running turn is cut, and the actor leaves memory. The
    /// next request loads the thread as the store has it — as if the refused request had
    /// never come, so a retry of the same message works.
    pub(super) fn discard(&mut self, error: Error, ctx: &mut Context<Self>) {
        tracing::warn!(context_id = %self.key.context_id, error = %error, "thread actor discarded: memory was ahead of the store");
        if let Phase::Ready(loaded) = &mut self.phase {
            loaded.unsynced.clear();
            loaded.unpublished.clear();
            for entry in loaded.tasks.values_mut() {
                for waiter in entry.waiters.drain(..) {
                    waiter.fail(error.clone());
                }
            }
            for pending in loaded.queue.drain(..) {
                pending.fail(Error::Unavailable {
                    detail: "the thread was reloaded; send the message again".into(),
                    retry_after_secs: 1,
                });
            }
        }
        self.close(None, ctx);
    }
}

impl Actor for ThreadActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        telemetry::gauge(telemetry::THREAD_ACTORS).increment(1.0);
        if self.deps.cluster.is_some() && self.token.is_none() {
            // Created without a placement (its predecessor left memory between the
            // registry's look and its call): the registry places the thread and retries.
            self.close(None, ctx);
            return;
        }
        // One tick per retention period: a finished task leaves memory, and an idle actor
        // under memory pressure evicts itself, within twice the retention period. (Every
        // resident actor ticks, busy or not: at 10 000 actors a one-second tick cost the
        // server 5 % of a core doing nothing.)
        let retention = self.deps.threads.task_retention_ms.max(1);
        let tick = Duration::from_millis(retention.clamp(50, 60_000));
        self.timer = Some(ctx.run_interval(tick, |act, ctx| act.tick(ctx)));
        if std::mem::take(&mut self.fresh) {
            let ttl_ms = (self.deps.threads.thread_ttl_secs as i64).saturating_mul(1000);
            self.phase = Phase::Ready(Box::new(Loaded::new_thread(&self.key, ttl_ms, &self.deps)));
        } else {
            self.load(ctx);
        }
    }
}

impl Supervised for ThreadActor {
    /// After a panic in a turn the actor stops itself; the supervisor restarts it here
    /// and `started` reloads the thread from the store.
    fn restarting(&mut self, ctx: &mut Context<Self>) {
        metrics::counter!(telemetry::THREAD_RESTARTS).increment(1);
        tracing::warn!(context_id = %self.key.context_id, "restarting thread actor; reloading from the store");
        if let Phase::Ready(loaded) = &mut self.phase {
            if let Some(running) = loaded.running.take()
                && let Some(abort) = running.abort
            {
                abort.abort();
            }
            for pending in loaded.queue.drain(..) {
                pending.fail(Error::Unavailable {
                    detail: "thread restarted".into(),
                    retry_after_secs: 1,
                });
            }
            telemetry::gauge(telemetry::THREAD_ACTORS).decrement(1.0);
        }
        let _ = ctx;
        self.timer = None;
        self.phase = Phase::Loading;
    }
}

/// Counts a task state change.
pub(super) fn count_transition(state: TaskState) {
    telemetry::counter(telemetry::TASK_TRANSITIONS, Some(("state", state.as_str()))).increment(1);
}

/// Allocates the next actor instance id.
pub(super) fn next_actor_id(shared: &Shared) -> u64 {
    shared.next_actor_id.fetch_add(1, Ordering::Relaxed)
}
