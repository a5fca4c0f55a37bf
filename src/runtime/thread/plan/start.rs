//! The rules of a turn's start: a client message checked against the thread (not
//! expired) and its task (not terminal, of the generation it names), the push config it
//! registers checked against the task's room, and the first writes of the turn — the
//! thread touched, the message stored, and for an existing or immediate task its row and
//! history link (a follow-up resumes an interrupted task: working again, with its event).

use super::super::{Loaded, Mode, ThreadKey, TurnClaim, message_record};
use super::{Planned, enqueue, event_op, link, thread_write};
use crate::domain::{
    Message, PushConfig, PushTarget, SendMessage, StreamEvent, Task, TaskId, TaskState, TaskStatus,
    Timestamp,
};
use crate::error::Error;
use crate::store::{Claim, MessageRecord, TaskRecord, ThreadRecord, ThreadStatus, WriteOp};

/// A turn's start, applied once planned (see `ThreadActor::start`).
pub(in crate::runtime) struct StartTurn {
    pub thread: ThreadRecord,
    pub message: Message,
    /// The message's stored record, for the history.
    pub record: MessageRecord,
    pub seq: i64,
    pub task: Task,
    /// The message continues a task that exists (and is interrupted).
    pub existing: bool,
    /// The task is persisted and visible once this start is committed.
    pub materialized: bool,
    /// The status event of a resumed task (interrupted → working).
    pub event: Option<(i64, StreamEvent)>,
    /// A push config the message registers for its task.
    pub push: Option<PushConfig>,
    /// The idempotency key the message was accepted under.
    pub claim_key: Option<String>,
}

/// How a turn starts: the caller's mode, its idempotency claim, and the limits.
#[derive(Clone, Copy)]
pub(in crate::runtime) struct HowToStart<'a> {
    pub mode: Mode,
    /// The thread's expiry moves this far ahead.
    pub ttl_ms: i64,
    /// `push.max_configs_per_task`.
    pub max_push_configs: usize,
    pub claim: Option<&'a TurnClaim>,
}

/// Validates a client message against the thread and its task, and plans the first
/// writes of the turn: the thread (touched, its expiry moved `ttl_ms` ahead), the user
/// message, and for existing or immediate tasks the task row and history link.
pub(in crate::runtime) fn plan_start(
    key: &ThreadKey,
    loaded: &Loaded,
    cmd: &SendMessage,
    how: &HowToStart<'_>,
    now: Timestamp,
) -> Result<Planned<StartTurn>, Error> {
    let HowToStart {
        mode,
        ttl_ms,
        max_push_configs,
        claim,
    } = *how;
    if loaded.thread_persisted
        && (loaded.thread.status == ThreadStatus::Expired || loaded.thread.expires_at <= now)
    {
        return Err(Error::ThreadExpired(key.context_id.clone()));
    }
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
        // A claimed message's new task has the id its claim chose.
        None => (
            claim.map_or_else(TaskId::generate, |c| c.task_id.clone()),
            false,
        ),
    };
    if let Some(expected) = cmd.config.if_generation_match {
        let entry = loaded
            .tasks
            .get(&task_id)
            .filter(|_| existing)
            .ok_or_else(|| {
                Error::invalid_params(
                    "configuration.ifGenerationMatch: names the generation of the task the \
                 message continues, so the message needs a taskId",
                )
            })?;
        if entry.task.generation != expected {
            return Err(Error::TaskGenerationMismatch {
                task_id: task_id.clone(),
                expected,
                current: entry.task.generation,
            });
        }
    }
    let mut message = cmd.message.clone();
    message.context_id = Some(key.context_id.clone());
    message.task_id = Some(task_id.clone());
    let seq = loaded.next_seq;
    let materialize_now = existing || mode == Mode::Immediate;
    let push = match &cmd.config.push {
        Some(spec) => {
            let config = spec
                .clone()
                .into_config(key.tenant.clone(), task_id.clone(), now);
            let current = loaded.tasks.get(&task_id).map_or(&[][..], |e| &e.push[..]);
            check_push_room(current, &config, max_push_configs)?;
            Some(config)
        }
        None => None,
    };

    let mut thread = loaded.thread.clone();
    thread.updated_at = now;
    thread.expires_at = Timestamp(now.0.saturating_add(ttl_ms));
    let record = message_record(key, seq, &message, materialize_now.then_some(&task_id), now);
    let mut ops = Vec::with_capacity(4);
    // The claim first: a duplicate refuses the batch before anything else is written.
    if let Some(c) = claim {
        ops.push(WriteOp::ClaimKey(Claim {
            tenant: key.tenant.clone(),
            key: c.key.clone(),
            context_id: key.context_id.clone(),
            task_id: task_id.clone(),
            digest: c.digest.clone(),
            reply: None,
            created_at: c.at,
            taken_over_before: c.taken_over_before,
            known_unclaimed: c.known_unclaimed,
        }));
    }
    ops.push(thread_write(loaded, &thread));
    ops.push(WriteOp::AppendMessage(record.clone()));
    if materialize_now && let Some(config) = &push {
        ops.push(WriteOp::PutPushConfig(config.clone()));
    }
    let mut event = None;
    let task = if existing {
        let entry = &loaded.tasks[&task_id];
        let mut task = entry.task.clone();
        task.history.push(message.clone());
        task.updated_at = now;
        ops.push(link(key, &task_id, entry.task.history.len() as i64, seq));
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
            task.generation = ev_seq + 1;
            ops.push(event_op(key, &task_id, ev_seq, &ev, now));
            let added = push.as_ref().map(PushConfig::target);
            let targets = entry
                .push
                .iter()
                .filter(|t| {
                    added
                        .as_ref()
                        .is_none_or(|a| a.config_id() != t.config_id())
                })
                .chain(added.as_ref());
            enqueue(&mut ops, key, &task, ev_seq, &ev, targets, now);
            event = Some((ev_seq, ev));
        }
        ops.push(WriteOp::UpsertTask(TaskRecord::of(&task)));
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
            // A new task: its id was minted here.
            ops.push(WriteOp::InsertTask(TaskRecord::of(&task)));
            ops.push(link(key, &task_id, 0, seq));
        }
        task
    };
    Ok(Planned {
        ops,
        apply: StartTurn {
            thread,
            message,
            record,
            seq,
            task,
            existing,
            materialized: materialize_now,
            event,
            push,
            claim_key: claim.map(|c| c.key.clone()),
        },
    })
}

/// Refuses a config that would take the task past `max` configs (one replacing a
/// config of the same id takes no room).
pub(in crate::runtime) fn check_push_room(
    current: &[PushTarget],
    config: &PushConfig,
    max: usize,
) -> Result<(), Error> {
    let replaces = current.iter().any(|t| t.config_id() == config.id);
    if !replaces && current.len() >= max {
        return Err(Error::invalid_params(format!(
            "task {} already has {max} push notification configs (push.max_configs_per_task); \
             delete one first",
            config.task_id
        )));
    }
    Ok(())
}
