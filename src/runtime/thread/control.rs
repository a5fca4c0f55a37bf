//! Control of resident tasks inside a `ThreadActor`: reading a task from memory,
//! cancel, subscribe, and the resolution of callers waiting for a turn's outcome
//! ([`Waiter`]).

use actix::prelude::*;
use tokio::sync::{broadcast, oneshot};

use super::plan::{self, EmitApply, Planned};
use super::{ActorError, HubEvent, Subscription, TaskEntry, ThreadActor};
use crate::domain::{
    Message, SendOutcome, StreamEvent, Task, TaskId, TaskState, TenantId, Timestamp,
};
use crate::error::Error;
use crate::runtime::executors::started_elsewhere;

pub(in crate::runtime) enum Waiter {
    Outcome {
        tx: oneshot::Sender<Result<SendOutcome, Error>>,
        history_length: Option<u32>,
    },
    Stream(oneshot::Sender<Result<Subscription, Error>>),
}

impl Waiter {
    pub(in crate::runtime) fn fail(self, e: Error) {
        match self {
            Waiter::Outcome { tx, .. } => {
                let _ = tx.send(Err(e));
            }
            Waiter::Stream(tx) => {
                let _ = tx.send(Err(e));
            }
        }
    }
}

/// A task from memory (`None` when it is not resident).
#[derive(Message)]
#[rtype(result = "Result<Option<Task>, ActorError>")]
pub struct GetResident {
    pub task_id: TaskId,
}

/// Cancel a task of this thread.
#[derive(Message)]
#[rtype(result = "Result<Task, ActorError>")]
pub struct CancelTask {
    pub task_id: TaskId,
}

/// Subscribe to a task's events (`last_event_id`: resume after that event).
#[derive(Message)]
#[rtype(result = "Result<Subscription, ActorError>")]
pub struct Subscribe {
    pub task_id: TaskId,
    pub last_event_id: Option<i64>,
}

impl Handler<GetResident> for ThreadActor {
    type Result = AtomicResponse<Self, Result<Option<Task>, ActorError>>;

    fn handle(&mut self, msg: GetResident, ctx: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.loaded() {
            return AtomicResponse::new(Box::pin(fut::ready(Err(e))));
        }
        AtomicResponse::new(Box::pin(self.synced(ctx).map(
            move |synced, act: &mut Self, _ctx| {
                synced?;
                let loaded = act.loaded()?;
                Ok(loaded
                    .tasks
                    .get(&msg.task_id)
                    .filter(|e| e.materialized)
                    .map(|e| e.task.clone()))
            },
        )))
    }
}

type ResidentFuture = std::pin::Pin<Box<dyn ActorFuture<ThreadActor, Output = Result<(), Error>>>>;

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
                .then(move |resident, act: &mut Self, ctx| {
                    let plan = resident.and_then(|()| act.plan_cancel(&task_id));
                    let (ops, apply) = match plan {
                        Ok(p) => (p.ops, Some(p.apply)),
                        Err(e) => {
                            let failed: CancelFuture =
                                Box::pin(fut::ready(Err(ActorError::Failed(e))));
                            return failed;
                        }
                    };
                    let commit: CancelFuture = Box::pin(act.commit(ops, ctx).map(
                        move |result, act: &mut Self, ctx| {
                            result?;
                            let Some(apply) = apply else {
                                return Err(ActorError::Failed(Error::internal("no cancel plan")));
                            };
                            act.apply_emit(&task_id, apply);
                            act.abort_if_running(&task_id, ctx);
                            act.cancel_elsewhere(&task_id);
                            let loaded = act.loaded()?;
                            loaded
                                .tasks
                                .get(&task_id)
                                .map(|e| e.task.clone())
                                .ok_or(ActorError::Failed(Error::TaskNotFound(task_id)))
                        },
                    ));
                    commit
                });
        AtomicResponse::new(Box::pin(fut))
    }
}

impl ThreadActor {
    pub(in crate::runtime) fn plan_cancel(
        &mut self,
        task_id: &TaskId,
    ) -> Result<Planned<EmitApply>, Error> {
        self.plan_forced_status(task_id, TaskState::Canceled, None)
    }

    /// A status change no turn asked for (`plan::plan_forced_status`).
    pub(in crate::runtime) fn plan_forced_status(
        &mut self,
        task_id: &TaskId,
        state: TaskState,
        message: Option<Message>,
    ) -> Result<Planned<EmitApply>, Error> {
        let key = self.key.clone();
        let loaded = self
            .loaded()
            .map_err(|_| Error::internal("thread actor closed"))?;
        plan::plan_forced_status(&key, loaded, task_id, state, message, Timestamp::now())
    }

    /// What the canceled task's tool calls started elsewhere and left running or waiting
    /// — a remote task recorded in a call's journal, or the one a question continues —
    /// is canceled there (`Tools::cancel`), in the background; failures are logged.
    fn cancel_elsewhere(&mut self, task_id: &TaskId) {
        let tools = self.deps.tools.clone();
        let Ok(loaded) = self.loaded() else { return };
        let started = started_elsewhere(loaded.state.iter(Timestamp::now()), task_id);
        if started.is_empty() {
            return;
        }
        let task_id = task_id.clone();
        actix::spawn(async move {
            for (tool, record) in started {
                match tools.cancel(&tool, &record).await {
                    Some(Ok(())) => {
                        tracing::info!(task_id = %task_id, tool, "canceled what the task's call started")
                    }
                    Some(Err(e)) => {
                        tracing::warn!(task_id = %task_id, tool, error = %e, "what the task's call started was not canceled")
                    }
                    None => {}
                }
            }
        });
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

    fn handle(&mut self, msg: Subscribe, ctx: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.loaded() {
            return AtomicResponse::new(Box::pin(fut::ready(Err(e))));
        }
        let buffer = self.deps.streaming.subscriber_buffer;
        let task_id = msg.task_id;
        // A subscriber is shown only what is durable: a turn's first writes are committed
        // before it sees them.
        let synced = self.synced(ctx);
        let wanted = task_id.clone();
        let fut = synced
            .then(move |synced, act: &mut Self, _ctx| -> ResidentFuture {
                match synced {
                    Ok(()) => Box::pin(act.ensure_resident(wanted)),
                    Err(e) => Box::pin(fut::ready(Err(e))),
                }
            })
            .map(move |resident, act: &mut Self, _ctx| {
                resident?;
                let tenant = act.key.tenant.clone();
                let draining = act.deps.shared.is_leaving();
                let loaded = act.loaded()?;
                let running = loaded
                    .running
                    .as_ref()
                    .is_some_and(|r| r.task_id == task_id);
                if draining && !running {
                    // No turn will publish to it again before the server stops.
                    return Err(ActorError::Failed(super::maintenance::shutting_down()));
                }
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
                            until_terminal: true,
                        }),
                        None => Err(ActorError::Failed(Error::UnsupportedOperation(format!(
                            "task {task_id} is {}; there is nothing left to subscribe to",
                            entry.task.status.state.as_str()
                        )))),
                    };
                }
                Ok(subscribe_entry(entry, buffer, msg.last_event_id, true))
            });
        AtomicResponse::new(Box::pin(fut))
    }
}

/// A subscription to a resident task: a snapshot first (or, when resuming after
/// `last_event_id`, the missed events from the log), then live events.
pub(in crate::runtime) fn subscribe_entry(
    entry: &mut TaskEntry,
    buffer: usize,
    last_event_id: Option<i64>,
    until_terminal: bool,
) -> Subscription {
    let hub = entry
        .hub
        .get_or_insert_with(|| broadcast::channel::<HubEvent>(buffer).0);
    let live = Some(super::Live::Hub(hub.subscribe()));
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
        until_terminal,
    }
}

pub(in crate::runtime) fn resolve_outcomes(entry: &mut TaskEntry) {
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
                    until_terminal: false,
                }));
            }
        }
    }
}

pub(in crate::runtime) fn resolve_with_message(
    waiter: Waiter,
    message: &Message,
    tenant: &TenantId,
) {
    match waiter {
        Waiter::Outcome { tx, .. } => {
            let _ = tx.send(Ok(SendOutcome::Message(message.clone())));
        }
        Waiter::Stream(tx) => {
            let _ = tx.send(Ok(Subscription {
                tenant: tenant.clone(),
                task_id: None,
                first: Some((
                    0,
                    StreamEvent::Message {
                        message: message.clone(),
                    },
                )),
                live: None,
                after_seq: 0,
                until_terminal: false,
            }));
        }
    }
}
