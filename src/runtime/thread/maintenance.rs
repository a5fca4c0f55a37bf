//! The thread actor's side of the janitor, the start-up recovery and the graceful
//! shutdown: [`Sweep`], [`Recover`] and [`Drain`].
//!
//! A sweep changes the thread the way every other change does — planned from the actor's
//! state, committed through the `PersistenceActor`, then applied — so the janitor never
//! writes a resident thread itself: the one-writer invariant holds. It removes expired
//! state entries and marks a thread past its expiry `expired`; the actor also sweeps
//! itself right after loading, so a thread that was out of memory is cleaned the moment
//! it comes back (see `janitor.rs` for why the janitor does not rewrite the state of
//! threads that are not resident).

use std::pin::Pin;

use actix::prelude::*;

use super::{ActorError, ThreadActor};
use crate::domain::{Message, Metadata, Part, TaskId, TaskState, Timestamp};
use crate::error::Error;
use crate::store::{ThreadStatus, WriteOp};
use crate::telemetry;

/// The error for requests that arrive once a graceful shutdown has begun.
pub(in crate::runtime) fn shutting_down() -> Error {
    Error::Unavailable {
        detail: "the server is shutting down".into(),
        retry_after_secs: 1,
    }
}

/// What one sweep of a thread did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Expired state entries removed.
    pub state_entries_removed: usize,
    /// The thread was past its expiry and is now marked expired.
    pub thread_expired: bool,
}

/// Remove the thread's state entries expired at `now`, and mark the thread expired if
/// its expiry is at or before `now` (the janitor passes its clock; tests a later one).
#[derive(Message)]
#[rtype(result = "Result<SweepReport, ActorError>")]
pub struct Sweep {
    pub now: Timestamp,
}

/// Answered once the thread is loaded: start-up recovery sends it to bring a thread
/// into memory.
#[derive(Message)]
#[rtype(result = "Result<(), ActorError>")]
pub struct Recover;

/// Cluster mode: this node lost its lease (another node took a thread of it over), so
/// every commit of this actor would be refused: it leaves memory now, failing whoever
/// waits on it with a retryable error; the thread loads again wherever it is placed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Release;

impl Handler<Release> for ThreadActor {
    type Result = ();

    fn handle(&mut self, _: Release, ctx: &mut Context<Self>) {
        self.discard(
            Error::Unavailable {
                detail: "this node lost its cluster lease; the thread is served again on retry"
                    .into(),
                retry_after_secs: 1,
            },
            ctx,
        );
    }
}

/// A graceful shutdown began: end the task streams no running turn will publish to.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Drain;

/// A draining node is asked for this thread: the actor leaves memory if nothing runs or
/// waits on it, so that the thread can be given to another node. Whether it is gone.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct HandOver;

type SweepFuture = Pin<Box<dyn ActorFuture<ThreadActor, Output = Result<SweepReport, ActorError>>>>;

/// The `errorCode` of a task whose turn was cut short by a crash or a shutdown deadline.
pub const INTERRUPTED: &str = "INTERRUPTED";

impl ThreadActor {
    /// Fails the tasks a turn was working on when the server stopped (a crash, or a
    /// shutdown past its deadline): right after a load no turn runs, so a `submitted` or
    /// `working` task would otherwise stay so forever and strand every client waiting on
    /// it. Each gets a failed status with `errorCode: INTERRUPTED`, one commit each, queued
    /// before any message is handled. Interrupted states (`input-required`, …) wait for the
    /// client and are left alone. A turn its executor can pick up where it stopped (its
    /// unfinished calls can be made again without being made twice) is resumed instead
    /// (`resume_interrupted`).
    pub(in crate::runtime) fn fail_interrupted(&mut self, ctx: &mut Context<Self>) {
        let Ok(loaded) = self.loaded_quietly() else {
            return;
        };
        let orphans: Vec<TaskId> = loaded
            .tasks
            .iter()
            .filter(|(_, entry)| {
                entry.materialized
                    && matches!(
                        entry.task.status.state,
                        TaskState::Submitted | TaskState::Working
                    )
            })
            .map(|(id, _)| id.clone())
            .collect();
        for task_id in orphans {
            if self.resume_interrupted(&task_id, ctx) {
                continue;
            }
            ctx.wait(fut::ready(()).then(move |(), act: &mut Self, ctx| {
                let mut message = Message::agent(
                    act.key.context_id.clone(),
                    Some(task_id.clone()),
                    vec![Part::text(
                        "the server stopped while the agent was working on this task; \
                         send the message again",
                    )],
                );
                let mut metadata = Metadata::new();
                metadata.insert("errorCode".into(), INTERRUPTED.into());
                message.metadata = Some(metadata);
                let planned = act.plan_forced_status(&task_id, TaskState::Failed, Some(message));
                let done: Pin<Box<dyn ActorFuture<Self, Output = ()>>> = match planned {
                    Ok(plan) => {
                        let apply = plan.apply;
                        Box::pin(
                            act.commit(plan.ops, ctx).map(
                                move |committed, act: &mut Self, _ctx| match committed {
                                    Ok(()) => {
                                        tracing::warn!(task_id = %task_id, "task interrupted by a restart marked failed");
                                        act.apply_emit(&task_id, apply);
                                    }
                                    Err(e) => {
                                        tracing::warn!(task_id = %task_id, error = %e, "interrupted task not marked failed; retried on the next load");
                                    }
                                },
                            ),
                        )
                    }
                    Err(e) => {
                        tracing::warn!(task_id = %task_id, error = %e, "interrupted task not marked failed");
                        Box::pin(fut::ready(()))
                    }
                };
                done
            }));
        }
    }

    /// Plans the sweep, commits it and applies it. Nothing to do commits nothing.
    pub(in crate::runtime) fn sweep(&mut self, now: Timestamp) -> SweepFuture {
        let retention_ms = self.deps.retention_ms;
        let loaded = match self.loaded_quietly() {
            Ok(loaded) => loaded,
            Err(e) => return Box::pin(fut::ready(Err(e))),
        };
        // A thread that only exists in memory (no turn committed yet) has nothing stored;
        // one whose turn has just started (writes not committed yet) is swept next time.
        if !loaded.thread_persisted || !loaded.unsynced.is_empty() {
            return Box::pin(fut::ready(Ok(SweepReport::default())));
        }
        // Past its retention the thread is the janitor's to delete, and never written.
        if super::past_retention(loaded.thread.expires_at, retention_ms, now) {
            return Box::pin(fut::ready(Ok(SweepReport::default())));
        }
        let mut state = loaded.state.clone();
        let removed = state.remove_expired(now);
        let expire =
            loaded.thread.status == ThreadStatus::Active && loaded.thread.expires_at <= now;
        if removed == 0 && !expire {
            return Box::pin(fut::ready(Ok(SweepReport::default())));
        }
        let mut thread = loaded.thread.clone();
        thread.conversation_context = state.to_json();
        if expire {
            thread.status = ThreadStatus::Expired;
        }
        let ops = vec![WriteOp::UpsertThread(thread.clone())];
        let persistence = self.deps.persistence.clone();
        Box::pin(
            fut::wrap_future(async move { persistence.commit(ops).await }).map(
                move |committed, act: &mut Self, _ctx| {
                    if let Err(e) = committed {
                        tracing::warn!(context_id = %act.key.context_id, error = %e, "thread sweep not committed");
                        return Err(ActorError::Failed(e));
                    }
                    let loaded = act.loaded_quietly()?;
                    loaded.state = state;
                    loaded.thread = thread;
                    metrics::counter!(telemetry::JANITOR_STATE_REMOVED).increment(removed as u64);
                    if expire {
                        metrics::counter!(telemetry::JANITOR_THREADS_EXPIRED).increment(1);
                    }
                    Ok(SweepReport {
                        state_entries_removed: removed,
                        thread_expired: expire,
                    })
                },
            ),
        )
    }

    /// Ends the streams of every task but the one whose turn is running: dropping a
    /// task's hub ends its subscribers' live feed, and each stream then catches up from
    /// the durable log and closes.
    pub(in crate::runtime) fn end_idle_streams(&mut self) {
        let Ok(loaded) = self.loaded_quietly() else {
            return;
        };
        let running = loaded.running.as_ref().map(|r| r.task_id.clone());
        for (task_id, entry) in &mut loaded.tasks {
            if running.as_ref() != Some(task_id) {
                entry.hub = None;
            }
        }
    }
}

impl Handler<Sweep> for ThreadActor {
    type Result = AtomicResponse<Self, Result<SweepReport, ActorError>>;

    fn handle(&mut self, msg: Sweep, _ctx: &mut Context<Self>) -> Self::Result {
        AtomicResponse::new(self.sweep(msg.now))
    }
}

impl Handler<Recover> for ThreadActor {
    type Result = Result<(), ActorError>;

    fn handle(&mut self, _msg: Recover, _ctx: &mut Context<Self>) -> Self::Result {
        // Messages wait for the load, so answering means the thread is in memory.
        self.loaded_quietly().map(|_| ())
    }
}

impl Handler<Drain> for ThreadActor {
    type Result = ();

    fn handle(&mut self, _msg: Drain, _ctx: &mut Context<Self>) {
        self.end_idle_streams();
    }
}

impl Handler<HandOver> for ThreadActor {
    type Result = bool;

    fn handle(&mut self, _msg: HandOver, ctx: &mut Context<Self>) -> bool {
        match self.phase {
            super::Phase::Closed(_) => true,
            _ => self.evict_if_quiet(std::time::Duration::ZERO, ctx),
        }
    }
}
