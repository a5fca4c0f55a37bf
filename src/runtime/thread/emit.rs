//! Executor outputs inside a `ThreadActor`: committing and applying status changes,
//! artifacts and message replies (planned by `plan::plan_emit`), and ending a turn
//! (including failures and panics).
//!
//! A failed turn fails its task with a status message that carries an `errorCode` and
//! never the internal detail; a panic additionally stops the actor so its supervisor
//! restarts it from the store.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::control::{resolve_outcomes, resolve_with_message, subscribe_entry};
use super::plan::{self, EmitApply, Planned};
use super::{ActorError, HubEvent, TaskEntry, ThreadActor, Waiter, count_transition};
use crate::domain::{Artifact, Message, Metadata, Part, StreamEvent, TaskId, TaskState, Timestamp};
use crate::error::Error;

/// One output of a running turn.
#[derive(Message)]
#[rtype(result = "Result<(), Error>")]
pub struct TurnEmit {
    pub task_id: TaskId,
    pub turn: u64,
    pub emit: Emit,
}

/// What an executor can report.
#[derive(Debug, Clone)]
pub enum Emit {
    Status {
        state: TaskState,
        message: Option<Message>,
        metadata: Option<Metadata>,
    },
    Artifact {
        artifact: Artifact,
        append: bool,
        last_chunk: bool,
    },
    Reply(Message),
    /// A complete agent-loop event, written through `session::append_event`.
    Event(Box<crate::session::Event>),
}

impl ThreadActor {
    /// Plans an executor output (`plan::plan_emit`).
    pub(in crate::runtime) fn plan_emit(
        &mut self,
        msg: &TurnEmit,
    ) -> Result<Planned<EmitApply>, Error> {
        let key = self.key.clone();
        let loaded = self
            .loaded()
            .map_err(|_| Error::internal("thread actor closed"))?;
        plan::plan_emit(&key, loaded, msg, Timestamp::now())
    }

    /// Applies a committed executor output: memory, hub, waiters.
    pub(in crate::runtime) fn apply_emit(&mut self, task_id: &TaskId, apply: EmitApply) {
        let buffer = self.deps.streaming.subscriber_buffer;
        let key = self.key.clone();
        let shared = self.deps.shared.clone();
        let Ok(loaded) = self.loaded() else { return };
        match apply {
            EmitApply::Session { record, state } => {
                if let Some(record) = record {
                    loaded.next_seq = record.seq + 1;
                    loaded.remember(&record);
                }
                if let Some((state, thread)) = state {
                    loaded.state = *state;
                    loaded.thread = *thread;
                    loaded.thread_persisted = true;
                }
            }
            EmitApply::Reply { message, record } => {
                loaded.next_seq = record.seq + 1;
                loaded.remember(&record);
                if let Some(running) = &mut loaded.running {
                    running.replied = true;
                }
                if let Some(entry) = loaded.tasks.remove(task_id) {
                    for waiter in entry.waiters {
                        resolve_with_message(waiter, &message, &key.tenant);
                    }
                }
            }
            EmitApply::Event {
                task,
                event,
                seq,
                next_seq,
                new_seqs,
                record,
            } => {
                loaded.next_seq = next_seq;
                if let Some(record) = &record {
                    loaded.remember(record);
                }
                let Some(entry) = loaded.tasks.get_mut(task_id) else {
                    return;
                };
                if !entry.materialized {
                    entry.materialized = true;
                    entry.push_unwritten.clear();
                    shared.tasks.insert(
                        (key.tenant.clone(), task_id.clone()),
                        key.context_id.clone(),
                    );
                    // Streams opened by this turn start from the task as first created.
                    let waiters = std::mem::take(&mut entry.waiters);
                    for waiter in waiters {
                        match waiter {
                            Waiter::Stream(tx) => {
                                let _ = tx.send(Ok(subscribe_entry(entry, buffer, None, false)));
                            }
                            outcome => entry.waiters.push(outcome),
                        }
                    }
                }
                entry.history_seqs.extend(new_seqs);
                entry.task = *task;
                entry.last_seq = seq;
                if let StreamEvent::StatusUpdate { status, .. } = &event {
                    count_transition(status.state);
                }
                let ends_turn = entry.task.status.state.ends_turn();
                if let Some(hub) = &entry.hub {
                    let _ = hub.send(HubEvent::new((seq, event)));
                }
                if ends_turn {
                    resolve_outcomes(entry);
                    if entry.task.status.state.is_terminal() {
                        entry.finished_at = Some(Instant::now());
                    }
                }
            }
        }
    }

    /// The executor returned (or panicked, or was aborted).
    pub(in crate::runtime) fn turn_ended(
        &mut self,
        turn_id: u64,
        result: Result<Result<(), Error>, tokio::task::JoinError>,
        ctx: &mut Context<Self>,
    ) {
        if self.deps.shared.closing.load(Ordering::SeqCst) {
            // The stop cut the turn off: its task stays as last committed, for the next
            // load to resume or fail (`Shared::closing`).
            return;
        }
        let Ok(loaded) = self.loaded() else { return };
        let Some(running) = loaded.running.as_ref().filter(|r| r.turn == turn_id) else {
            return;
        };
        let task_id = running.task_id.clone();
        let replied = running.replied;
        let entry = loaded.tasks.get_mut(&task_id);
        let (failure, panicked) = match result {
            Ok(Ok(())) if replied => (None, false),
            Ok(Ok(())) => match entry {
                Some(e) if e.task.status.state.ends_turn() => (None, false),
                _ => {
                    tracing::error!(task_id = %task_id, "agent ended its turn without a final state");
                    (
                        Some(Error::InvalidAgentResponse(
                            "the agent ended its turn without a final state".into(),
                        )),
                        false,
                    )
                }
            },
            Ok(Err(e)) => (Some(e), false),
            Err(join) if join.is_panic() => {
                let payload = join.into_panic();
                let text = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".into());
                tracing::error!(task_id = %task_id, panic = %text, "agent turn panicked");
                (Some(Error::Internal(format!("panic: {text}"))), true)
            }
            Err(_) => (None, false),
        };
        let Some(error) = failure else {
            self.finish_turn(ctx);
            return;
        };
        let Ok(loaded) = self.loaded() else { return };
        let entry = loaded.tasks.get_mut(&task_id);
        let client_error =
            !replied && entry.as_ref().is_some_and(|e| !e.materialized) && is_client_error(&error);
        if client_error || replied {
            if let Some(entry) = loaded.tasks.remove(&task_id) {
                for waiter in entry.waiters {
                    waiter.fail(error.clone());
                }
            }
            if !loaded.unsynced.is_empty() {
                // The refused turn's message was never committed: memory forgets it too.
                self.discard(error, ctx);
                return;
            }
            self.finish_turn(ctx);
            if panicked {
                ctx.stop();
            }
            return;
        }
        if !matches!(error, Error::Internal(_)) {
            tracing::warn!(task_id = %task_id, error = %error, "agent turn failed");
        }
        let terminal = entry.is_none_or(|e| e.task.status.state.is_terminal());
        if terminal {
            self.finish_turn(ctx);
            if panicked {
                ctx.stop();
            }
            return;
        }
        let emit = TurnEmit {
            task_id: task_id.clone(),
            turn: turn_id,
            emit: Emit::Status {
                state: TaskState::Failed,
                message: Some(Message {
                    metadata: Some(failure_metadata(&error)),
                    ..Message::agent(
                        self.key.context_id.clone(),
                        Some(task_id.clone()),
                        vec![Part::text(failure_text(&error))],
                    )
                }),
                metadata: None,
            },
        };
        match self.plan_emit(&emit) {
            Ok(plan) => {
                let apply = plan.apply;
                let commit = self.commit(plan.ops, ctx);
                ctx.wait(commit.map(
                    move |result, act: &mut Self, ctx| {
                        match result {
                            Ok(()) => act.apply_emit(&task_id, apply),
                            Err(e) => {
                                // The task is stored as its last commit left it, with no
                                // turn running any more: the actor leaves memory, and the
                                // next load fails the task as INTERRUPTED (a discarded
                                // actor answers every waiter with `e`).
                                tracing::error!(task_id = %task_id, error = %e, "could not record the failed task");
                                // (Already discarded if the commit carried unsynced writes.)
                                if act.loaded_quietly().is_ok() {
                                    act.discard(e, ctx);
                                }
                                return;
                            }
                        }
                        act.finish_turn(ctx);
                        if panicked {
                            // The supervisor restarts the actor, which reloads from the store.
                            ctx.stop();
                        }
                    },
                ));
            }
            Err(e) => {
                tracing::error!(task_id = %task_id, error = %e, "could not fail the task");
                self.fail_waiters(&task_id, error);
                self.finish_turn(ctx);
                if panicked {
                    ctx.stop();
                }
            }
        }
    }

    pub(in crate::runtime) fn fail_waiters(&mut self, task_id: &TaskId, error: Error) {
        if let Ok(loaded) = self.loaded()
            && let Some(entry) = loaded.tasks.get_mut(task_id)
        {
            for waiter in entry.waiters.drain(..) {
                waiter.fail(error.clone());
            }
            if !entry.materialized {
                loaded.tasks.remove(task_id);
            }
        }
    }

    pub(in crate::runtime) fn finish_turn(&mut self, ctx: &mut Context<Self>) {
        if let Ok(loaded) = self.loaded() {
            loaded.running = None;
        }
        if self.deps.shared.is_leaving() {
            // Shutting down: nothing more will be published for these tasks.
            self.end_idle_streams();
        }
        self.pump(ctx);
        if self.over_resident_limit() {
            // Above the resident limit a thread whose turn is over leaves memory at once
            // (its tasks are in the store) instead of after the retention period, so the
            // limit holds under a stream of one-message conversations.
            self.evict_if_quiet(Duration::ZERO, ctx);
        }
    }

    /// Loads a task of this thread from the store into memory when it is not resident.
    pub(in crate::runtime) fn ensure_resident(
        &mut self,
        task_id: TaskId,
    ) -> impl ActorFuture<Self, Output = Result<(), Error>> + 'static {
        let resident = self
            .loaded()
            .map(|l| l.tasks.get(&task_id).is_some_and(|e| e.materialized));
        let store = self.deps.store.clone();
        let key = self.key.clone();
        let fetch = async move {
            match resident {
                Ok(true) => Ok(None),
                Ok(false) => {
                    let stored = store.load_task(&key.tenant, &task_id).await?;
                    match stored {
                        Some(s) if s.task.context_id == key.context_id => {
                            let push = store
                                .push_configs(&key.tenant, std::slice::from_ref(&task_id))
                                .await?;
                            Ok(Some((s, push)))
                        }
                        _ => Err(Error::TaskNotFound(task_id)),
                    }
                }
                Err(ActorError::Gone) => Err(Error::internal("thread actor closed")),
                Err(ActorError::Failed(e)) => Err(e),
            }
        };
        fut::wrap_future(fetch).map(|result, act: &mut Self, _ctx| {
            let Some((stored, push)) = result? else {
                return Ok(());
            };
            let shared = act.deps.shared.clone();
            let key = act.key.clone();
            let loaded = act
                .loaded()
                .map_err(|_| Error::internal("thread actor closed"))?;
            let id = stored.task.id.clone();
            let finished = stored.task.status.state.is_terminal();
            loaded.tasks.entry(id.clone()).or_insert(TaskEntry {
                task: stored.task,
                materialized: true,
                last_seq: stored.last_event_seq,
                hub: None,
                waiters: Vec::new(),
                finished_at: finished.then(Instant::now),
                history_seqs: Vec::new(),
                push: super::targets_of(&push, &id),
                push_unwritten: Vec::new(),
                claim_key: None,
            });
            shared.tasks.insert((key.tenant, id), key.context_id);
            Ok(())
        })
    }
}

impl Handler<TurnEmit> for ThreadActor {
    type Result = AtomicResponse<Self, Result<(), Error>>;

    fn handle(&mut self, msg: TurnEmit, ctx: &mut Context<Self>) -> Self::Result {
        if self.deps.shared.closing.load(Ordering::SeqCst) {
            // The stop cuts the turn off here: nothing it says from now on is recorded.
            return AtomicResponse::new(Box::pin(fut::ready(Err(Error::Unavailable {
                detail: "the server is stopping".into(),
                retry_after_secs: 1,
            }))));
        }
        let plan = match self.plan_emit(&msg) {
            Ok(plan) => plan,
            Err(e) => {
                if matches!(e, Error::InvalidAgentResponse(_)) {
                    tracing::error!(task_id = %msg.task_id, error = %e, "invalid agent output");
                }
                return AtomicResponse::new(Box::pin(fut::ready(Err(e))));
            }
        };
        let apply = plan.apply;
        let task_id = msg.task_id;
        if plan.ops.is_empty() {
            self.apply_emit(&task_id, apply);
            return AtomicResponse::new(Box::pin(fut::ready(Ok(()))));
        }
        AtomicResponse::new(Box::pin(self.commit(plan.ops, ctx).map(
            move |result, act: &mut Self, _ctx| {
                result?;
                act.apply_emit(&task_id, apply);
                Ok(())
            },
        )))
    }
}

/// Errors an executor may raise to fail the request itself (the client's fault or a
/// protocol condition), as opposed to failing the task.
fn is_client_error(e: &Error) -> bool {
    match e {
        Error::InvalidParams(_)
        | Error::UnsupportedOperation(_)
        | Error::ContentTypeNotSupported(_)
        | Error::TaskNotFound(_)
        | Error::TaskNotCancelable { .. }
        | Error::ThreadExpired(_)
        | Error::TaskGenerationMismatch { .. }
        | Error::Unauthenticated(_)
        | Error::InvalidToken(_)
        | Error::RateLimited { .. }
        | Error::Unavailable { .. } => true,
        Error::Parse(_)
        | Error::InvalidRequest(_)
        | Error::MethodNotFound(_)
        | Error::VersionNotSupported(_)
        | Error::PayloadTooLarge { .. }
        | Error::PushNotificationNotSupported
        | Error::ExtendedAgentCardNotConfigured
        | Error::InvalidAgentResponse(_)
        | Error::Internal(_) => false,
    }
}

/// The status text of a task failed by an error: what a client may be told of it.
fn failure_text(e: &Error) -> String {
    e.client_message()
}

/// The `errorCode` of a task failed by an error.
fn failure_metadata(e: &Error) -> crate::domain::Metadata {
    let code = e.task_error_code();
    let mut m = crate::domain::Metadata::new();
    m.insert("errorCode".into(), serde_json::Value::String(code.into()));
    m
}
