//! Turn starts inside a `ThreadActor`: [`SendTurn`] and the queue of turns
//! ([`PendingTurn`]), the start's commit (or its deferral), and launching the executor
//! ([`RunningTurn`]). The rules are `plan::plan_start`.

use actix::prelude::*;
use tracing::Instrument;

use super::control::subscribe_entry;
use super::plan::{self, Planned, StartTurn};
use super::{ActorError, HubEvent, Mode, ThreadActor, Waiter, count_transition};
use crate::domain::{
    Message, Metadata, Role, SendMessage, SendOutcome, TaskId, TaskState, Timestamp,
};
use crate::error::Error;
use crate::runtime::executor::{Turn, TurnSink};
use crate::runtime::lifecycle::shutdown::Busy;
use crate::telemetry::{self, trace};

/// Start (or queue) a turn for a client message.
#[derive(Message)]
#[rtype(result = "Result<(), ActorError>")]
pub struct SendTurn {
    pub(in crate::runtime) cmd: SendMessage,
    pub(in crate::runtime) mode: Mode,
    pub(in crate::runtime) waiter: Waiter,
    pub(in crate::runtime) busy: Busy,
    pub(in crate::runtime) claim: Option<TurnClaim>,
    /// The request's span (`Span::none()` without traces): the turn's parent.
    pub(in crate::runtime) span: tracing::Span,
}

/// The idempotency claim a turn writes with its first writes.
#[derive(Debug, Clone)]
pub struct TurnClaim {
    pub key: String,
    pub digest: String,
    /// The task the message starts (chosen before the turn, so that a concurrent retry
    /// can be pointed at it) or continues.
    pub task_id: TaskId,
    pub at: Timestamp,
    /// An older claim of the key is past the window and is taken over.
    pub taken_over_before: Timestamp,
    /// No claim of the key within the window exists or can appear before this one is
    /// committed ([`crate::store::Claim::known_unclaimed`]).
    pub known_unclaimed: bool,
}

pub(in crate::runtime) struct PendingTurn {
    pub cmd: SendMessage,
    pub mode: Mode,
    pub waiter: Waiter,
    pub claim: Option<TurnClaim>,
    /// Retries of this turn's message that arrived while it waited: they get its outcome.
    pub rejoined: Vec<(Mode, Waiter)>,
    /// Counts the turn until it has run (or failed to start).
    pub busy: Busy,
    /// The request's span: the turn's parent.
    pub span: tracing::Span,
}

impl PendingTurn {
    /// The turn will not run: its caller and every retry that joined it get `e`.
    pub(in crate::runtime) fn fail(self, e: Error) {
        for (_, waiter) in self.rejoined {
            waiter.fail(e.clone());
        }
        self.waiter.fail(e);
    }
}

pub(in crate::runtime) struct RunningTurn {
    pub task_id: TaskId,
    pub turn: u64,
    pub abort: Option<tokio::task::AbortHandle>,
    /// The turn answered with a message: the task will never exist.
    pub replied: bool,
    /// Counts the turn until it ends (dropped with this record).
    pub _busy: Busy,
    /// The turn's span (`Span::none()` without traces): its commits' parent.
    pub span: tracing::Span,
}

impl Handler<SendTurn> for ThreadActor {
    type Result = Result<(), ActorError>;

    fn handle(&mut self, msg: SendTurn, ctx: &mut Context<Self>) -> Self::Result {
        let cap = self.deps.threads.max_pending_turns;
        let loaded = match self.loaded() {
            Ok(l) => l,
            Err(e) => {
                return Err(e);
            }
        };
        if loaded.queue.len() >= cap {
            return Err(ActorError::Failed(Error::Unavailable {
                detail: format!(
                    "thread {} has {cap} messages waiting (threads.max_pending_turns)",
                    self.key.context_id
                ),
                retry_after_secs: 1,
            }));
        }
        loaded.queue.push_back(PendingTurn {
            cmd: msg.cmd,
            mode: msg.mode,
            waiter: msg.waiter,
            busy: msg.busy,
            claim: msg.claim,
            rejoined: Vec::new(),
            span: msg.span,
        });
        self.pump(ctx);
        Ok(())
    }
}

impl ThreadActor {
    /// Starts the next queued turn when none is running.
    pub(in crate::runtime) fn pump(&mut self, ctx: &mut Context<Self>) {
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
                            pending.fail(e);
                            act.pump(ctx);
                        }
                    }),
            );
            return;
        }
        self.begin(pending, ctx);
    }

    /// Plans, commits and starts one turn. A turn that opens a new task (and whose caller
    /// does not want the task at once) starts before its first writes are committed:
    /// they ride along with the turn's first output, so a turn that answers at once
    /// costs one commit (see [`ThreadActor::defer`]).
    fn begin(&mut self, pending: PendingTurn, ctx: &mut Context<Self>) {
        match self.plan_start(&pending) {
            Ok(plan) => {
                // Deferred unless the caller is answered at the start: `returnImmediately`
                // gets the task at once, and a stream continuing a task starts with it.
                let defer = !self.deps.start_grace.is_zero()
                    && match pending.mode {
                        Mode::Immediate => false,
                        Mode::Streaming => !plan.apply.existing,
                        Mode::Blocking => true,
                    };
                if defer {
                    self.defer(plan.ops, ctx);
                    self.start(plan.apply, pending, true, ctx);
                    return;
                }
                let start = plan.apply;
                let commit = self.commit(plan.ops, ctx);
                ctx.wait(commit.map(move |result, act: &mut Self, ctx| {
                    match result {
                        Ok(()) => act.start(start, pending, false, ctx),
                        Err(e) => pending.fail(e),
                    }
                    act.pump(ctx);
                }));
            }
            Err(e) => {
                pending.fail(e);
                self.pump(ctx);
            }
        }
    }

    /// Validates a client message against the thread and its task, and plans the first
    /// writes of the turn (`plan::plan_start`).
    fn plan_start(&mut self, pending: &PendingTurn) -> Result<Planned<StartTurn>, Error> {
        let ttl_ms = (self.deps.threads.thread_ttl_secs as i64).saturating_mul(1000);
        let max_push = self.deps.push.max_configs_per_task();
        let key = self.key.clone();
        let loaded = self.loaded().map_err(|e| match e {
            ActorError::Gone => Error::internal("thread actor closed while starting a turn"),
            ActorError::Failed(e) => e,
        })?;
        plan::plan_start(
            &key,
            loaded,
            &pending.cmd,
            &plan::HowToStart {
                mode: pending.mode,
                ttl_ms,
                max_push_configs: max_push,
                claim: pending.claim.as_ref(),
            },
            Timestamp::now(),
        )
    }

    /// Applies a turn start and launches the executor. With `deferred` its writes are
    /// not committed yet: its event is published once they are.
    fn start(
        &mut self,
        start: StartTurn,
        pending: PendingTurn,
        deferred: bool,
        ctx: &mut Context<Self>,
    ) {
        let buffer = self.deps.streaming.subscriber_buffer;
        let key = self.key.clone();
        let shared = self.deps.shared.clone();
        let Ok(loaded) = self.loaded() else {
            pending
                .waiter
                .fail(Error::internal("thread actor closed while starting a turn"));
            return;
        };
        let (existing, materialized) = (start.existing, start.materialized);
        let (task_id, event, message) = loaded.apply_start(start);
        let Some(entry) = loaded.tasks.get_mut(&task_id) else {
            return;
        };
        if let Some((seq, event)) = event {
            count_transition(TaskState::Working);
            let event = HubEvent::new((seq, event));
            if deferred {
                loaded.unpublished.push((task_id.clone(), event));
            } else if let Some(hub) = &entry.hub {
                let _ = hub.send(event);
            }
        }
        if materialized {
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
            (Mode::Streaming, Waiter::Stream(tx)) if existing => {
                let _ = tx.send(Ok(subscribe_entry(entry, buffer, None, false)));
            }
            (_, waiter) => entry.waiters.push(waiter),
        }
        for (mode, waiter) in pending.rejoined {
            super::rejoin::attach(entry, mode, waiter, buffer);
        }
        if !existing {
            count_transition(TaskState::Submitted);
        }

        let Some(turn) = self.turn(task_id, message, existing, pending.cmd.metadata) else {
            return;
        };
        self.launch(turn, pending.busy, &pending.span, ctx);
    }

    /// Picks up, instead of failing it, the turn a restart cut short on `task_id` when
    /// the executor can (`AgentExecutor::resumable`): the task is working, its last
    /// message from the client and the thread's history as stored make the turn again,
    /// and it runs with no caller waiting (clients read or subscribe to the task). The
    /// request's metadata was not stored and is absent. Whether it was resumed.
    pub(in crate::runtime) fn resume_interrupted(
        &mut self,
        task_id: &TaskId,
        ctx: &mut Context<Self>,
    ) -> bool {
        let key = self.key.clone();
        let Ok(loaded) = self.loaded_quietly() else {
            return false;
        };
        if loaded.running.is_some() {
            return false;
        }
        let Some(entry) = loaded.tasks.get(task_id) else {
            return false;
        };
        if entry.task.status.state != TaskState::Working {
            return false;
        }
        let Some(message) = entry
            .task
            .history
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .cloned()
        else {
            return false;
        };
        let Some(mut turn) = self.turn(task_id.clone(), message, true, None) else {
            return false;
        };
        turn.resumed = true;
        if !self.deps.executor.resumable(&turn) {
            return false;
        }
        tracing::warn!(task_id = %task_id, context_id = %key.context_id, "turn interrupted by a restart resumed");
        metrics::counter!(telemetry::TURNS_RESUMED).increment(1);
        let busy = self.deps.shared.activity.busy();
        self.launch(turn, busy, &tracing::Span::none(), ctx);
        true
    }

    /// The turn of `message` on task `task_id`, with the thread's history and live state.
    fn turn(
        &mut self,
        task_id: TaskId,
        message: Message,
        continuation: bool,
        metadata: Option<Metadata>,
    ) -> Option<Turn> {
        let tools = self.deps.tools.clone();
        let (tenant, context_id) = (self.key.tenant.clone(), self.key.context_id.clone());
        let fence_token = self.token;
        let loaded = self.loaded_quietly().ok()?;
        Some(Turn {
            tenant,
            context_id,
            task_id,
            message,
            continuation,
            history: loaded.history.iter().cloned().collect(),
            state: loaded
                .state
                .iter(Timestamp::now())
                .map(|(k, v)| (k.to_owned(), v.clone()))
                .collect(),
            metadata,
            tools,
            fence_token,
            resumed: false,
            progress_every: match self.deps.streaming.progress_interval_ms {
                0 => None,
                ms => Some(std::time::Duration::from_millis(ms)),
            },
        })
    }

    /// Runs `turn` on the executor as the thread's running turn.
    fn launch(&mut self, turn: Turn, busy: Busy, parent: &tracing::Span, ctx: &mut Context<Self>) {
        self.turn_counter += 1;
        let turn_id = self.turn_counter;
        let task_id = turn.task_id.clone();
        let sink = TurnSink {
            addr: ctx.address(),
            context_id: turn.context_id.clone(),
            task_id: task_id.clone(),
            turn: turn_id,
        };
        let executor = self.deps.executor.clone();
        let span = trace::turn(
            parent,
            &self.deps.agent_name,
            turn.context_id.as_str(),
            task_id.as_str(),
        );
        let handle = actix::spawn(
            async move { executor.execute(turn, sink).await }.instrument(span.clone()),
        );
        let Ok(loaded) = self.loaded() else { return };
        loaded.running = Some(RunningTurn {
            task_id,
            turn: turn_id,
            abort: Some(handle.abort_handle()),
            replied: false,
            _busy: busy,
            span,
        });
        ctx.spawn(
            fut::wrap_future(handle)
                .map(move |result, act: &mut Self, ctx| act.turn_ended(turn_id, result, ctx)),
        );
    }
}
