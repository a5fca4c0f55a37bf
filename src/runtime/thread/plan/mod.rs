//! The turn rules, as pure functions over a thread's state (`Loaded`): what a client
//! message, an executor output or a forced status change is allowed to do, and the writes
//! and the memory change it leads to. No actix and no I/O: the actor's handlers call
//! these, commit the ops, then apply the plan (plan → commit → apply → publish), and the
//! rules are unit-tested on their own (`tests.rs`).
//!
//! A new task stays *provisional* — in memory only — until the executor's first output:
//! an agent that answers with a plain message never creates a task. Any other first
//! output materializes the task and that output in one commit. `returnImmediately`
//! materializes the task at the start, since the caller wants it at once.
//!
//! `start.rs` holds the rules of a turn's start, `emit.rs` those of a task's events (an
//! executor's output, a forced status); this file the writes both build.

mod emit;
mod start;
#[cfg(test)]
mod tests;

pub(in crate::runtime) use emit::{EmitApply, plan_emit, plan_forced_status};
pub(in crate::runtime) use start::{HowToStart, StartTurn, check_push_room, plan_start};

use super::{Loaded, ThreadKey};
use crate::domain::{PushPayload, PushTarget, StreamEvent, Task, TaskId, Timestamp};
use crate::store::{ThreadRecord, WriteOp};

/// Ops, plus what to apply to memory once they are committed.
pub(in crate::runtime) struct Planned<A> {
    pub ops: Vec<WriteOp>,
    pub apply: A,
}

/// Queues `event` (the task's `seq`-th) for each push target, in the payload of the
/// target's dialect.
fn enqueue<'a>(
    ops: &mut Vec<WriteOp>,
    key: &ThreadKey,
    task: &Task,
    seq: i64,
    event: &StreamEvent,
    targets: impl Iterator<Item = &'a PushTarget>,
    now: Timestamp,
) {
    for target in targets {
        debug_assert!(target.config.tenant == key.tenant && target.config.task_id == task.id);
        ops.push(WriteOp::EnqueuePush {
            config: target.config.clone(),
            seq,
            payload: PushPayload::of(target.dialect(), event, task),
            created_at: now,
        });
    }
}

/// The write of the thread's row: its first (an insert) when the store had no row of the
/// thread as it was loaded, an upsert otherwise.
fn thread_write(loaded: &Loaded, thread: &ThreadRecord) -> WriteOp {
    if loaded.thread_persisted {
        WriteOp::UpsertThread(thread.clone())
    } else {
        WriteOp::InsertThread(thread.clone())
    }
}

/// Makes message `seq` of the thread the `position`-th history entry of the task.
pub(in crate::runtime) fn link(
    key: &ThreadKey,
    task_id: &TaskId,
    position: i64,
    seq: i64,
) -> WriteOp {
    WriteOp::LinkTaskMessage {
        tenant: key.tenant.clone(),
        task_id: task_id.clone(),
        position,
        message_seq: seq,
    }
}

fn event_op(
    key: &ThreadKey,
    task_id: &TaskId,
    seq: i64,
    event: &StreamEvent,
    now: Timestamp,
) -> WriteOp {
    WriteOp::AppendTaskEvent {
        tenant: key.tenant.clone(),
        task_id: task_id.clone(),
        seq,
        event: event.clone(),
        created_at: now,
    }
}
