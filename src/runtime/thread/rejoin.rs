//! Retries of an accepted message (idempotent sends): the retry runs nothing; it gets
//! the outcome of the turn its message started — the same task, the same events on a
//! stream — whether that turn is queued, running or over.
//!
//! **Only an outcome that holds the message.** A retry that joined a first send still in
//! flight in this process (`unconfirmed`) may reach the thread after that send's turn was
//! refused — its commit failed and its actor was discarded (a lost lease, an unreachable
//! database) — and find the task as it was before the message. It is not answered with
//! it: unless its message is in the task's history or its turn is queued, it gets a
//! retryable 503, and the message sent again runs anew. A retry of a claim read from the
//! store joins a turn that was committed, message and claim in one transaction.

use actix::prelude::*;

use super::control::subscribe_entry;
use super::{ActorError, Mode, Subscription, TaskEntry, ThreadActor, Waiter};
use crate::domain::{MessageId, SendOutcome, TaskId};
use crate::error::Error;

/// A retry of the message that started (or will start) `task_id` in this thread.
#[derive(Message)]
#[rtype(result = "Result<(), ActorError>")]
pub struct Rejoin {
    pub task_id: TaskId,
    /// The retried message.
    pub message_id: MessageId,
    /// The first send was in flight in this process, not read from the store: its turn
    /// may have been refused.
    pub unconfirmed: bool,
    pub mode: Mode,
    pub waiter: Waiter,
}

/// Why a retry that joined a first send in flight is not answered: that send's turn was
/// not stored.
fn not_stored() -> Error {
    Error::Unavailable {
        detail: "the first request with this message was not stored (its turn was refused); \
                 send it again"
            .into(),
        retry_after_secs: 1,
    }
}

impl Handler<Rejoin> for ThreadActor {
    type Result = Result<(), ActorError>;

    fn handle(&mut self, msg: Rejoin, ctx: &mut Context<Self>) -> Self::Result {
        let buffer = self.deps.streaming.subscriber_buffer;
        let loaded = self.loaded()?;
        let Rejoin {
            task_id,
            message_id,
            unconfirmed,
            mode,
            waiter,
        } = msg;
        let holds = move |entry: &TaskEntry| {
            !unconfirmed
                || entry
                    .task
                    .history
                    .iter()
                    .any(|m| m.message_id == message_id)
        };
        // Started (maybe still provisional): join it now.
        if let Some(entry) = loaded.tasks.get_mut(&task_id)
            && holds(entry)
        {
            attach(entry, mode, waiter, buffer);
            return Ok(());
        }
        // Still queued behind another turn: join it when it starts.
        if let Some(pending) = loaded
            .queue
            .iter_mut()
            .find(|p| p.claim.as_ref().is_some_and(|c| c.task_id == task_id))
        {
            pending.rejoined.push((mode, waiter));
            return Ok(());
        }
        // In memory without the message, and not queued: its turn was refused.
        if loaded.tasks.contains_key(&task_id) {
            waiter.fail(not_stored());
            return Ok(());
        }
        // Over and out of memory: bring the task back from the store.
        ctx.wait(
            self.ensure_resident(task_id.clone())
                .map(move |resident, act: &mut Self, _| {
                    let entry = resident.and_then(|()| {
                        act.loaded()
                            .ok()
                            .and_then(|l| l.tasks.get_mut(&task_id))
                            .ok_or_else(|| Error::TaskNotFound(task_id.clone()))
                    });
                    match entry {
                        Ok(entry) if holds(entry) => attach(entry, mode, waiter, buffer),
                        Ok(_) => waiter.fail(not_stored()),
                        // A new task whose first turn was refused was never stored.
                        Err(Error::TaskNotFound(_)) if unconfirmed => waiter.fail(not_stored()),
                        Err(e) => waiter.fail(e),
                    }
                }),
        );
        Ok(())
    }
}

/// Gives a retry the outcome of `entry`'s turn: at once if the caller would have had it
/// by now, else when the original caller gets it.
pub(super) fn attach(entry: &mut TaskEntry, mode: Mode, waiter: Waiter, buffer: usize) {
    let turn_over = entry.materialized && entry.task.status.state.ends_turn();
    match waiter {
        Waiter::Outcome { tx, history_length }
            if turn_over || (entry.materialized && mode == Mode::Immediate) =>
        {
            let _ = tx.send(Ok(SendOutcome::Task(entry.task.view(history_length, true))));
        }
        // Before the task exists, a stream gets what the original one gets when it does.
        waiter @ (Waiter::Outcome { .. } | Waiter::Stream(_)) if !entry.materialized => {
            entry.waiters.push(waiter)
        }
        waiter @ Waiter::Outcome { .. } => entry.waiters.push(waiter),
        // Once it exists: every event of the task from the first (the durable log), then
        // the live ones until the turn ends.
        Waiter::Stream(tx) if entry.task.status.state.is_terminal() => {
            let _ = tx.send(Ok(Subscription {
                tenant: entry.task.tenant.clone(),
                task_id: Some(entry.task.id.clone()),
                first: None,
                live: None,
                after_seq: 0,
                until_terminal: true,
            }));
        }
        Waiter::Stream(tx) => {
            let _ = tx.send(Ok(subscribe_entry(entry, buffer, Some(0), false)));
        }
    }
}
