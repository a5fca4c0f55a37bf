//! Turn execution inside a `ThreadActor`: starting queued turns, applying executor
//! outputs, ending turns (including failures and panics), cancel and subscribe.
//!
//! A new task stays *provisional* — in memory only — until the executor's first output:
//! an agent that answers with a plain message never creates a task. Any other first
//! output materializes the task and that output in one commit. `returnImmediately`
//! materializes the task before the executor starts, since the caller wants it at once.

use std::time::Instant;

use actix::prelude::*;
use tokio::sync::broadcast;

use super::executor::{Turn, TurnSink};
use super::thread::{
    ActorError, CancelTask, Emit, HubEvent, Mode, PendingTurn, RunningTurn, Subscribe,
    Subscription, TaskEntry, ThreadActor, TurnEmit, Waiter, count_transition, message_record,
};
use crate::domain::{
    Message, Part, SendOutcome, StreamEvent, Task, TaskId, TaskState, TaskStatus, Timestamp,
};
use crate::error::Error;
use crate::store::{ThreadStatus, WriteOp};

/// Ops, plus what to apply to memory once they are committed.
struct Planned<A> {
    ops: Vec<WriteOp>,
    apply: A,
}

impl ThreadActor {
    /// Starts the next queued turn when none is running.
    pub(super) fn pump(&mut self, ctx: &mut Context<Self>) {
        let Ok(loaded) = self.loaded() else { return };
        if loaded.running.is_some() {
            return;
        }
        let Some(pending) = loaded.queue.pop_front() else {
            return;
        };
        let named = pending
            .cmd
            .message
            .task_id
            .clone()
            .filter(|id| !loaded.tasks.contains_key(id));
        if let Some(task_id) = named {
            // A follow-up to a task that left memory: bring it back before validating.
            let create_missing = pending.cmd.create_missing_task;
            ctx.wait(
                self.ensure_resident(task_id)
                    .map(move |resident, act: &mut Self, ctx| match resident {
                        Ok(()) => act.begin(pending, ctx),
                        Err(Error::TaskNotFound(_)) if create_missing => act.begin(pending, ctx),
                        Err(e) => {
                            pending.waiter.fail(e);
                            act.pump(ctx);
                        }
                    }),
            );
            return;
        }
        self.begin(pending, ctx);
    }

    /// Plans, commits and starts one turn.
    fn begin(&mut self, pending: PendingTurn, ctx: &mut Context<Self>) {
        match self.plan_start(&pending) {
            Ok(plan) => {
                let persistence = self.deps.persistence.clone();
                let ops = plan.ops;
                let start = plan.apply;
                ctx.wait(
                    fut::wrap_future(async move { persistence.commit(ops).await }).map(
                        move |result, act: &mut Self, ctx| {
                            match result {
                                Ok(()) => act.start(start, pending, ctx),
                                Err(e) => pending.waiter.fail(e),
                            }
                            act.pump(ctx);
                        },
                    ),
                );
            }
            Err(e) => {
                pending.waiter.fail(e);
                self.pump(ctx);
            }
        }
    }

    /// Validates a client message against the thread and its task, and plans the first
    /// commit of the turn: the thread (touched), the user message, and for existing or
    /// immediate tasks the task row and history link.
    fn plan_start(&mut self, pending: &PendingTurn) -> Result<Planned<StartTurn>, Error> {
        let ttl_ms = (self.deps.threads.thread_ttl_secs as i64).saturating_mul(1000);
        let key = self.key.clone();
        let loaded = self.loaded().map_err(|e| match e {
            ActorError::Gone => Error::internal("thread actor closed while starting a turn"),
            ActorError::Failed(e) => e,
        })?;
        let now = Timestamp::now();
        if loaded.thread_persisted
            && (loaded.thread.status == ThreadStatus::Expired || loaded.thread.expires_at <= now)
        {
            return Err(Error::ThreadExpired(key.context_id.clone()));
        }
        let cmd = &pending.cmd;
        let (task_id, existing) = match &cmd.message.task_id {
            Some(id) => match loaded.tasks.get(id) {
                Some(entry) if entry.materialized => {
                    if entry.task.status.state.is_terminal() {
                        return Err(Error::UnsupportedOperation(format!(
                            "task {id} is {}; send a new message without taskId to start a new task",
                            entry.task.status.state.as_str()
                        )));
                    }
                    (id.clone(), true)
                }
                Some(_) => return Err(Error::TaskNotFound(id.clone())),
                None if cmd.create_missing_task => (id.clone(), false),
                None => return Err(Error::TaskNotFound(id.clone())),
            },
            None => (TaskId::generate(), false),
        };
        let mut message = cmd.message.clone();
        message.context_id = Some(key.context_id.clone());
        message.task_id = Some(task_id.clone());
        let seq = loaded.next_seq;
        let materialize_now = existing || pending.mode == Mode::Immediate;

        let mut thread = loaded.thread.clone();
        thread.updated_at = now;
        thread.expires_at = Timestamp(now.0.saturating_add(ttl_ms));
        let mut ops = vec![
            WriteOp::UpsertThread(thread.clone()),
            WriteOp::AppendMessage(message_record(
                &key,
                seq,
                &message,
                materialize_now.then_some(&task_id),
                now,
            )),
        ];
        let mut event = None;
        let task = if existing {
            let entry = &loaded.tasks[&task_id];
            let mut task = entry.task.clone();
            task.history.push(message.clone());
            task.updated_at = now;
            ops.push(link(&key, &task_id, entry.task.history.len() as i64, seq));
            if task.status.state.is_interrupted() {
                // The follow-up resumes the task: it is working again until the agent says
                // otherwise, so streams opened by the follow-up do not end on their snapshot.
                let status = TaskStatus {
                    state: TaskState::Working,
                    message: None,
                    timestamp: now,
                };
                task.set_status(status.clone());
                let ev = StreamEvent::StatusUpdate {
                    task_id: task_id.clone(),
                    context_id: key.context_id.clone(),
                    status,
                    metadata: None,
                };
                let ev_seq = entry.last_seq + 1;
                ops.push(WriteOp::AppendTaskEvent {
                    tenant: key.tenant.clone(),
                    task_id: task_id.clone(),
                    seq: ev_seq,
                    event: ev.clone(),
                    created_at: now,
                });
                event = Some((ev_seq, ev));
            }
            ops.push(WriteOp::UpsertTask(task.clone()));
            task
        } else {
            let task = Task::submitted(
                task_id.clone(),
                key.context_id.clone(),
                key.tenant.clone(),
                message.clone(),
                now,
            );
            if materialize_now {
                ops.push(WriteOp::UpsertTask(task.clone()));
                ops.push(link(&key, &task_id, 0, seq));
            }
            task
        };
        Ok(Planned {
            ops,
            apply: StartTurn {
                thread,
                message,
                seq,
                task,
                existing,
                materialized: materialize_now,
                event,
            },
        })
    }

    /// Applies a committed turn start and launches the executor.
    fn start(&mut self, start: StartTurn, pending: PendingTurn, ctx: &mut Context<Self>) {
        let window_cap = self.deps.threads.history_window;
        let buffer = self.deps.streaming.subscriber_buffer;
        let key = self.key.clone();
        self.turn_counter += 1;
        let turn_id = self.turn_counter;
        let shared = self.deps.shared.clone();
        let Ok(loaded) = self.loaded() else {
            pending
                .waiter
                .fail(Error::internal("thread actor closed while starting a turn"));
            return;
        };
        loaded.thread = start.thread;
        loaded.thread_persisted = true;
        loaded.next_seq = start.seq + 1;
        loaded.remember(start.message.clone(), window_cap);
        let task_id = start.task.id.clone();
        let entry = loaded
            .tasks
            .entry(task_id.clone())
            .or_insert_with(|| TaskEntry {
                task: start.task.clone(),
                materialized: false,
                last_seq: 0,
                hub: None,
                waiters: Vec::new(),
                finished_at: None,
                history_seqs: Vec::new(),
            });
        entry.task = start.task;
        entry.materialized = start.materialized;
        entry.history_seqs.push(start.seq);
        if let Some((seq, event)) = start.event {
            entry.last_seq = seq;
            count_transition(TaskState::Working);
            if let Some(hub) = &entry.hub {
                let _ = hub.send(HubEvent::new((seq, event)));
            }
        }
        if start.materialized {
            shared.tasks.insert(
                (key.tenant.clone(), task_id.clone()),
                key.context_id.clone(),
            );
        }
        match (pending.mode, pending.waiter) {
            (Mode::Immediate, Waiter::Outcome { tx, history_length }) => {
                let view = entry.task.view(history_length, true);
                let _ = tx.send(Ok(SendOutcome::Task(view)));
            }
            (Mode::Streaming, Waiter::Stream(tx)) if start.existing => {
                let _ = tx.send(Ok(subscribe_entry(entry, buffer, None)));
            }
            (_, waiter) => entry.waiters.push(waiter),
        }
        if !start.existing {
            count_transition(TaskState::Submitted);
        }

        let turn = Turn {
            tenant: key.tenant.clone(),
            context_id: key.context_id.clone(),
            task_id: task_id.clone(),
            message: start.message,
            continuation: start.existing,
            history: loaded.window.iter().cloned().collect(),
            metadata: pending.cmd.metadata,
        };
        let sink = TurnSink {
            addr: ctx.address(),
            context_id: key.context_id.clone(),
            task_id: task_id.clone(),
            turn: turn_id,
        };
        let executor = self.deps.executor.clone();
        let handle = actix::spawn(async move { executor.execute(turn, sink).await });
        let Ok(loaded) = self.loaded() else { return };
        loaded.running = Some(RunningTurn {
            task_id,
            turn: turn_id,
            abort: Some(handle.abort_handle()),
            replied: false,
        });
        ctx.spawn(
            fut::wrap_future(handle)
                .map(move |result, act: &mut Self, ctx| act.turn_ended(turn_id, result, ctx)),
        );
    }

    /// Plans an executor output: validates it against the task state and builds the ops.
    fn plan_emit(&mut self, msg: &TurnEmit) -> Result<Planned<EmitApply>, Error> {
        let key = self.key.clone();
        let loaded = self
            .loaded()
            .map_err(|_| Error::internal("thread actor closed"))?;
        let running = loaded
            .running
            .as_ref()
            .filter(|r| r.turn == msg.turn && r.task_id == msg.task_id)
            .ok_or_else(|| {
                Error::UnsupportedOperation(
                    "this turn is over (the task was canceled or failed)".into(),
                )
            })?;
        if running.replied {
            return Err(Error::InvalidAgentResponse(
                "the turn already answered with a message".into(),
            ));
        }
        let entry = loaded
            .tasks
            .get(&msg.task_id)
            .ok_or_else(|| Error::TaskNotFound(msg.task_id.clone()))?;
        let now = Timestamp::now();
        let emit = match &msg.emit {
            Emit::Reply(message) if !entry.materialized => {
                let mut message = message.clone();
                message.context_id = Some(key.context_id.clone());
                message.task_id = None;
                let seq = loaded.next_seq;
                return Ok(Planned {
                    ops: vec![WriteOp::AppendMessage(message_record(
                        &key, seq, &message, None, now,
                    ))],
                    apply: EmitApply::Reply { message, seq },
                });
            }
            Emit::Reply(message) => Emit::Status {
                state: TaskState::Completed,
                message: Some(message.clone()),
                metadata: None,
            },
            other => other.clone(),
        };
        let mut ops = Vec::new();
        let mut task = entry.task.clone();
        let mut next_seq = loaded.next_seq;
        let mut new_seqs = Vec::new();
        if !entry.materialized {
            let first = entry
                .history_seqs
                .first()
                .ok_or_else(|| Error::internal("provisional task without its message"))?;
            ops.push(link(&key, &task.id, 0, *first));
        }
        let event = match emit {
            Emit::Status {
                state,
                message,
                metadata,
            } => {
                if !task.status.state.can_transition_to(state) {
                    return Err(Error::InvalidAgentResponse(format!(
                        "illegal transition {} -> {}",
                        task.status.state.as_str(),
                        state.as_str()
                    )));
                }
                let message = message.map(|mut m| {
                    m.context_id = Some(key.context_id.clone());
                    m.task_id = Some(task.id.clone());
                    m
                });
                if let Some(m) = &message {
                    ops.push(WriteOp::AppendMessage(message_record(
                        &key,
                        next_seq,
                        m,
                        Some(&task.id),
                        now,
                    )));
                    ops.push(link(&key, &task.id, task.history.len() as i64, next_seq));
                    new_seqs.push(next_seq);
                    next_seq += 1;
                }
                let status = TaskStatus {
                    state,
                    message,
                    timestamp: now,
                };
                task.set_status(status.clone());
                StreamEvent::StatusUpdate {
                    task_id: task.id.clone(),
                    context_id: key.context_id.clone(),
                    status,
                    metadata,
                }
            }
            Emit::Artifact {
                artifact,
                append,
                last_chunk,
            } => {
                if task.status.state.is_terminal() {
                    return Err(Error::InvalidAgentResponse(format!(
                        "artifact after the task became {}",
                        task.status.state.as_str()
                    )));
                }
                task.apply_artifact(&artifact, append, now);
                StreamEvent::ArtifactUpdate {
                    task_id: task.id.clone(),
                    context_id: key.context_id.clone(),
                    artifact,
                    append,
                    last_chunk,
                    metadata: None,
                }
            }
            Emit::Reply(_) => {
                return Err(Error::internal("a reply reached the event planner"));
            }
        };
        let seq = entry.last_seq + 1;
        ops.push(WriteOp::UpsertTask(task.clone()));
        ops.push(WriteOp::AppendTaskEvent {
            tenant: key.tenant.clone(),
            task_id: task.id.clone(),
            seq,
            event: event.clone(),
            created_at: now,
        });
        Ok(Planned {
            ops,
            apply: EmitApply::Event {
                task: Box::new(task),
                event,
                seq,
                next_seq,
                new_seqs,
            },
        })
    }

    /// Applies a committed executor output: memory, hub, waiters.
    fn apply_emit(&mut self, task_id: &TaskId, apply: EmitApply) {
        let window_cap = self.deps.threads.history_window;
        let buffer = self.deps.streaming.subscriber_buffer;
        let key = self.key.clone();
        let shared = self.deps.shared.clone();
        let Ok(loaded) = self.loaded() else { return };
        match apply {
            EmitApply::Reply { message, seq } => {
                loaded.next_seq = seq + 1;
                loaded.remember(message.clone(), window_cap);
                if let Some(running) = &mut loaded.running {
                    running.replied = true;
                }
                if let Some(entry) = loaded.tasks.remove(task_id) {
                    for waiter in entry.waiters {
                        resolve_with_message(waiter, &message);
                    }
                }
            }
            EmitApply::Event {
                task,
                event,
                seq,
                next_seq,
                new_seqs,
            } => {
                loaded.next_seq = next_seq;
                if let StreamEvent::StatusUpdate {
                    status:
                        TaskStatus {
                            message: Some(m), ..
                        },
                    ..
                } = &event
                {
                    loaded.remember(m.clone(), window_cap);
                }
                let Some(entry) = loaded.tasks.get_mut(task_id) else {
                    return;
                };
                if !entry.materialized {
                    entry.materialized = true;
                    shared.tasks.insert(
                        (key.tenant.clone(), task_id.clone()),
                        key.context_id.clone(),
                    );
                    // Streams opened by this turn start from the task as first created.
                    let waiters = std::mem::take(&mut entry.waiters);
                    for waiter in waiters {
                        match waiter {
                            Waiter::Stream(tx) => {
                                let _ = tx.send(Ok(subscribe_entry(entry, buffer, None)));
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
    fn turn_ended(
        &mut self,
        turn_id: u64,
        result: Result<Result<(), Error>, tokio::task::JoinError>,
        ctx: &mut Context<Self>,
    ) {
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
            self.finish_turn(ctx);
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
                let persistence = self.deps.persistence.clone();
                let ops = plan.ops;
                let apply = plan.apply;
                ctx.wait(fut::wrap_future(async move { persistence.commit(ops).await }).map(
                    move |result, act: &mut Self, ctx| {
                        match result {
                            Ok(()) => act.apply_emit(&task_id, apply),
                            Err(e) => {
                                tracing::error!(task_id = %task_id, error = %e, "could not record the failed task");
                                act.fail_waiters(&task_id, e);
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

    fn fail_waiters(&mut self, task_id: &TaskId, error: Error) {
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

    fn finish_turn(&mut self, ctx: &mut Context<Self>) {
        if let Ok(loaded) = self.loaded() {
            loaded.running = None;
        }
        self.pump(ctx);
    }

    /// Loads a task of this thread from the store into memory when it is not resident.
    fn ensure_resident(
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
                        Some(s) if s.task.context_id == key.context_id => Ok(Some(s)),
                        _ => Err(Error::TaskNotFound(task_id)),
                    }
                }
                Err(ActorError::Gone) => Err(Error::internal("thread actor closed")),
                Err(ActorError::Failed(e)) => Err(e),
            }
        };
        fut::wrap_future(fetch).map(|result, act: &mut Self, _ctx| {
            let Some(stored) = result? else { return Ok(()) };
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
            });
            shared.tasks.insert((key.tenant, id), key.context_id);
            Ok(())
        })
    }
}

struct StartTurn {
    thread: crate::store::ThreadRecord,
    message: Message,
    seq: i64,
    task: Task,
    existing: bool,
    materialized: bool,
    /// The status event of a resumed task (interrupted → working).
    event: Option<(i64, StreamEvent)>,
}

#[allow(
    clippy::large_enum_variant,
    reason = "built once per output and moved into its commit callback; never stored"
)]
enum EmitApply {
    Reply {
        message: Message,
        seq: i64,
    },
    Event {
        task: Box<Task>,
        event: StreamEvent,
        seq: i64,
        next_seq: i64,
        new_seqs: Vec<i64>,
    },
}

impl Handler<TurnEmit> for ThreadActor {
    type Result = AtomicResponse<Self, Result<(), Error>>;

    fn handle(&mut self, msg: TurnEmit, _ctx: &mut Context<Self>) -> Self::Result {
        let plan = match self.plan_emit(&msg) {
            Ok(plan) => plan,
            Err(e) => {
                if matches!(e, Error::InvalidAgentResponse(_)) {
                    tracing::error!(task_id = %msg.task_id, error = %e, "invalid agent output");
                }
                return AtomicResponse::new(Box::pin(fut::ready(Err(e))));
            }
        };
        let persistence = self.deps.persistence.clone();
        let ops = plan.ops;
        let apply = plan.apply;
        let task_id = msg.task_id;
        AtomicResponse::new(Box::pin(
            fut::wrap_future(async move { persistence.commit(ops).await }).map(
                move |result, act: &mut Self, _ctx| {
                    result?;
                    act.apply_emit(&task_id, apply);
                    Ok(())
                },
            ),
        ))
    }
}

type CancelFuture =
    std::pin::Pin<Box<dyn ActorFuture<ThreadActor, Output = Result<Task, ActorError>>>>;

impl Handler<CancelTask> for ThreadActor {
    type Result = AtomicResponse<Self, Result<Task, ActorError>>;

    fn handle(&mut self, msg: CancelTask, _ctx: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.loaded() {
            return AtomicResponse::new(Box::pin(fut::ready(Err(e))));
        }
        let task_id = msg.task_id;
        let fut =
            self.ensure_resident(task_id.clone())
                .then(move |resident, act: &mut Self, _ctx| {
                    let plan = resident.and_then(|()| act.plan_cancel(&task_id));
                    let persistence = act.deps.persistence.clone();
                    let (ops, apply) = match plan {
                        Ok(p) => (p.ops, Some(p.apply)),
                        Err(e) => {
                            let failed: CancelFuture =
                                Box::pin(fut::ready(Err(ActorError::Failed(e))));
                            return failed;
                        }
                    };
                    let commit: CancelFuture = Box::pin(
                        fut::wrap_future(async move { persistence.commit(ops).await }).map(
                            move |result, act: &mut Self, ctx| {
                                result?;
                                let Some(apply) = apply else {
                                    return Err(ActorError::Failed(Error::internal(
                                        "no cancel plan",
                                    )));
                                };
                                act.apply_emit(&task_id, apply);
                                act.abort_if_running(&task_id, ctx);
                                let loaded = act.loaded()?;
                                loaded
                                    .tasks
                                    .get(&task_id)
                                    .map(|e| e.task.clone())
                                    .ok_or(ActorError::Failed(Error::TaskNotFound(task_id)))
                            },
                        ),
                    );
                    commit
                });
        AtomicResponse::new(Box::pin(fut))
    }
}

impl ThreadActor {
    fn plan_cancel(&mut self, task_id: &TaskId) -> Result<Planned<EmitApply>, Error> {
        let key = self.key.clone();
        let loaded = self
            .loaded()
            .map_err(|_| Error::internal("thread actor closed"))?;
        let entry = loaded
            .tasks
            .get(task_id)
            .filter(|e| e.materialized)
            .ok_or_else(|| Error::TaskNotFound(task_id.clone()))?;
        if entry.task.status.state.is_terminal() {
            return Err(Error::TaskNotCancelable {
                task_id: task_id.clone(),
                state: entry.task.status.state,
            });
        }
        let now = Timestamp::now();
        let mut task = entry.task.clone();
        let status = TaskStatus {
            state: TaskState::Canceled,
            message: None,
            timestamp: now,
        };
        task.set_status(status.clone());
        let seq = entry.last_seq + 1;
        let event = StreamEvent::StatusUpdate {
            task_id: task_id.clone(),
            context_id: key.context_id.clone(),
            status,
            metadata: None,
        };
        Ok(Planned {
            ops: vec![
                WriteOp::UpsertTask(task.clone()),
                WriteOp::AppendTaskEvent {
                    tenant: key.tenant.clone(),
                    task_id: task_id.clone(),
                    seq,
                    event: event.clone(),
                    created_at: now,
                },
            ],
            apply: EmitApply::Event {
                task: Box::new(task),
                event,
                seq,
                next_seq: loaded.next_seq,
                new_seqs: Vec::new(),
            },
        })
    }

    /// A canceled task's turn stops at once: its executor is aborted.
    fn abort_if_running(&mut self, task_id: &TaskId, ctx: &mut Context<Self>) {
        let Ok(loaded) = self.loaded() else { return };
        if loaded
            .running
            .as_ref()
            .is_some_and(|r| &r.task_id == task_id)
        {
            if let Some(running) = loaded.running.take()
                && let Some(abort) = running.abort
            {
                abort.abort();
            }
            self.pump(ctx);
        }
    }
}

impl Handler<Subscribe> for ThreadActor {
    type Result = AtomicResponse<Self, Result<Subscription, ActorError>>;

    fn handle(&mut self, msg: Subscribe, _ctx: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.loaded() {
            return AtomicResponse::new(Box::pin(fut::ready(Err(e))));
        }
        let buffer = self.deps.streaming.subscriber_buffer;
        let task_id = msg.task_id;
        let fut =
            self.ensure_resident(task_id.clone())
                .map(move |resident, act: &mut Self, _ctx| {
                    resident?;
                    let tenant = act.key.tenant.clone();
                    let loaded = act.loaded()?;
                    let entry = loaded
                        .tasks
                        .get_mut(&task_id)
                        .ok_or_else(|| Error::TaskNotFound(task_id.clone()))?;
                    if entry.task.status.state.is_terminal() {
                        // Resuming with Last-Event-ID after the end replays what was missed.
                        return match msg.last_event_id {
                            Some(after) => Ok(Subscription {
                                tenant,
                                task_id: Some(task_id),
                                first: None,
                                live: None,
                                after_seq: after,
                            }),
                            None => Err(ActorError::Failed(Error::UnsupportedOperation(format!(
                                "task {task_id} is {}; there is nothing left to subscribe to",
                                entry.task.status.state.as_str()
                            )))),
                        };
                    }
                    Ok(subscribe_entry(entry, buffer, msg.last_event_id))
                });
        AtomicResponse::new(Box::pin(fut))
    }
}

/// A subscription to a resident task: a snapshot first (or, when resuming after
/// `last_event_id`, the missed events from the log), then live events.
fn subscribe_entry(
    entry: &mut TaskEntry,
    buffer: usize,
    last_event_id: Option<i64>,
) -> Subscription {
    let hub = entry
        .hub
        .get_or_insert_with(|| broadcast::channel::<HubEvent>(buffer).0);
    let live = Some(hub.subscribe());
    let (first, after_seq) = match last_event_id {
        Some(after) => (None, after.min(entry.last_seq)),
        None => (
            Some((
                entry.last_seq,
                StreamEvent::Task {
                    task: entry.task.clone(),
                },
            )),
            entry.last_seq,
        ),
    };
    Subscription {
        tenant: entry.task.tenant.clone(),
        task_id: Some(entry.task.id.clone()),
        first,
        live,
        after_seq,
    }
}

fn resolve_outcomes(entry: &mut TaskEntry) {
    for waiter in entry.waiters.drain(..) {
        match waiter {
            Waiter::Outcome { tx, history_length } => {
                let _ = tx.send(Ok(SendOutcome::Task(entry.task.view(history_length, true))));
            }
            Waiter::Stream(tx) => {
                // Not reachable in practice (streams are answered at materialization),
                // but a late stream still gets a coherent view.
                let _ = tx.send(Ok(Subscription {
                    tenant: entry.task.tenant.clone(),
                    task_id: Some(entry.task.id.clone()),
                    first: Some((
                        entry.last_seq,
                        StreamEvent::Task {
                            task: entry.task.clone(),
                        },
                    )),
                    live: None,
                    after_seq: entry.last_seq,
                }));
            }
        }
    }
}

fn resolve_with_message(waiter: Waiter, message: &Message) {
    match waiter {
        Waiter::Outcome { tx, .. } => {
            let _ = tx.send(Ok(SendOutcome::Message(message.clone())));
        }
        Waiter::Stream(tx) => {
            let tenant = crate::domain::TenantId::default_tenant();
            let _ = tx.send(Ok(Subscription {
                tenant,
                task_id: None,
                first: Some((
                    0,
                    StreamEvent::Message {
                        message: message.clone(),
                    },
                )),
                live: None,
                after_seq: 0,
            }));
        }
    }
}

fn link(key: &super::thread::ThreadKey, task_id: &TaskId, position: i64, seq: i64) -> WriteOp {
    WriteOp::LinkTaskMessage {
        tenant: key.tenant.clone(),
        task_id: task_id.clone(),
        position,
        thread_id: key.context_id.clone(),
        message_seq: seq,
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

/// The status text of a task failed by an error: no internals for internal errors.
fn failure_text(e: &Error) -> String {
    match e {
        Error::Internal(_) => "internal error".into(),
        Error::InvalidAgentResponse(_) => "the agent produced an invalid response".into(),
        other => other.to_string(),
    }
}

fn failure_metadata(e: &Error) -> crate::domain::Metadata {
    let code = match e {
        Error::Internal(_) => "INTERNAL_ERROR",
        Error::InvalidAgentResponse(_) => "INVALID_AGENT_RESPONSE",
        _ => "AGENT_ERROR",
    };
    let mut m = crate::domain::Metadata::new();
    m.insert("errorCode".into(), serde_json::Value::String(code.into()));
    m
}
