//! The rules of a task's events: an executor output checked against the running turn and
//! the task's state (`plan_emit`: an agent-loop event, a reply, a status, an artifact), a
//! status change no turn asked for (`plan_forced_status`), and the one plan every task
//! event goes through (`plan_status`): a provisional task materialized with it, the
//! transition checked, the task row rewritten, the event logged and queued for each push
//! target.

use super::super::{Emit, Loaded, TaskEntry, ThreadKey, TurnEmit, message_record, session_record};
use super::{Planned, enqueue, event_op, link, thread_write};
use crate::domain::{
    Message, Metadata, StreamEvent, Task, TaskId, TaskState, TaskStatus, Timestamp,
};
use crate::error::Error;
use crate::session::{Appended, Event, IdSource, ThreadState, append_event};
use crate::store::{MessageRecord, TaskRecord, ThreadRecord, WriteOp};

#[allow(
    clippy::large_enum_variant,
    reason = "built once per output and moved into its commit callback; never stored"
)]
pub(in crate::runtime) enum EmitApply {
    /// A session record and/or a new thread state (with the thread row that stores it).
    Session {
        record: Option<MessageRecord>,
        state: Option<(Box<ThreadState>, Box<ThreadRecord>)>,
    },
    Reply {
        message: Message,
        record: MessageRecord,
    },
    Event {
        task: Box<Task>,
        event: StreamEvent,
        seq: i64,
        next_seq: i64,
        new_seqs: Vec<i64>,
        /// The status message's record, for the history.
        record: Option<MessageRecord>,
    },
}

/// Plans an executor output: validates it against the running turn and the task's state
/// and builds the writes.
pub(in crate::runtime) fn plan_emit(
    key: &ThreadKey,
    loaded: &Loaded,
    msg: &TurnEmit,
    now: Timestamp,
) -> Result<Planned<EmitApply>, Error> {
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
    match &msg.emit {
        Emit::Event(event) => plan_session_event(key, loaded, &msg.task_id, event, now),
        Emit::Reply(message) if !entry.materialized => {
            let mut message = message.clone();
            message.context_id = Some(key.context_id.clone());
            message.task_id = None;
            let record = message_record(key, loaded.next_seq, &message, None, now);
            let mut ops = vec![WriteOp::AppendMessage(record.clone())];
            // A retry of the message gets this reply too.
            if let Some(claimed) = &entry.claim_key {
                ops.push(WriteOp::SettleClaim {
                    tenant: key.tenant.clone(),
                    key: claimed.clone(),
                    reply: message.clone(),
                });
            }
            Ok(Planned {
                ops,
                apply: EmitApply::Reply { message, record },
            })
        }
        // Later in a turn, or on an existing task, a reply completes the task.
        Emit::Reply(message) => plan_status(
            key,
            loaded,
            entry,
            Change::Status {
                state: TaskState::Completed,
                message: Some(message.clone()),
                metadata: None,
            },
            now,
        ),
        Emit::Status {
            state,
            message,
            metadata,
        } => plan_status(
            key,
            loaded,
            entry,
            Change::Status {
                state: *state,
                message: message.clone(),
                metadata: metadata.clone(),
            },
            now,
        ),
        Emit::Artifact {
            artifact,
            append,
            last_chunk,
        } => {
            if entry.task.status.state.is_terminal() {
                return Err(Error::InvalidAgentResponse(format!(
                    "artifact after the task became {}",
                    entry.task.status.state.as_str()
                )));
            }
            plan_status(
                key,
                loaded,
                entry,
                Change::Artifact {
                    artifact: artifact.clone(),
                    append: *append,
                    last_chunk: *last_chunk,
                },
                now,
            )
        }
    }
}

/// A status change no turn asked for (a cancel, or a failure after a restart): the task
/// must be resident, materialized and not terminal. Its status message, if any, joins the
/// thread's history like any status message.
pub(in crate::runtime) fn plan_forced_status(
    key: &ThreadKey,
    loaded: &Loaded,
    task_id: &TaskId,
    state: TaskState,
    message: Option<Message>,
    now: Timestamp,
) -> Result<Planned<EmitApply>, Error> {
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
    plan_status(
        key,
        loaded,
        entry,
        Change::Status {
            state,
            message,
            metadata: None,
        },
        now,
    )
}

/// What happens to a task: a status change (with its message and event metadata) or an
/// artifact.
enum Change {
    Status {
        state: TaskState,
        message: Option<Message>,
        metadata: Option<Metadata>,
    },
    Artifact {
        artifact: crate::domain::Artifact,
        append: bool,
        last_chunk: bool,
    },
}

/// The one plan of a task event, whoever asked for it: a provisional task is
/// materialized with it (its first message linked), a status message joins the thread's
/// history and the task's, the task row is rewritten and the event logged with the
/// task's next sequence number. A status must be a legal transition.
fn plan_status(
    key: &ThreadKey,
    loaded: &Loaded,
    entry: &TaskEntry,
    change: Change,
    now: Timestamp,
) -> Result<Planned<EmitApply>, Error> {
    // "Still working", with nothing to say, is no change: a task resumed by its follow-up
    // is working already (`plan_start` said so), and the executor's own `working()`
    // must not be sent and logged a second time.
    if let Change::Status {
        state: TaskState::Working,
        message: None,
        metadata: None,
    } = &change
        && entry.materialized
        && entry.task.status.state == TaskState::Working
    {
        return Ok(Planned {
            ops: Vec::new(),
            apply: EmitApply::Session {
                record: None,
                state: None,
            },
        });
    }
    let mut ops = Vec::new();
    let mut task = entry.task.clone();
    let mut next_seq = loaded.next_seq;
    let mut new_seqs = Vec::new();
    let mut record = None;
    if !entry.materialized {
        let first = entry
            .history_seqs
            .first()
            .ok_or_else(|| Error::internal("provisional task without its message"))?;
        ops.push(link(key, &task.id, 0, *first));
        ops.extend(
            entry
                .push_unwritten
                .iter()
                .map(|c| WriteOp::PutPushConfig(c.clone())),
        );
    }
    let event = match change {
        Change::Status {
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
                let stored = message_record(key, next_seq, m, Some(&task.id), now);
                ops.push(WriteOp::AppendMessage(stored.clone()));
                ops.push(link(key, &task.id, task.history.len() as i64, next_seq));
                record = Some(stored);
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
        Change::Artifact {
            artifact,
            append,
            last_chunk,
        } => {
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
    };
    let seq = entry.last_seq + 1;
    task.generation = seq + 1;
    let row = TaskRecord::of(&task);
    ops.push(if entry.materialized {
        WriteOp::UpsertTask(row)
    } else {
        // A provisional task's first row.
        WriteOp::InsertTask(row)
    });
    ops.push(event_op(key, &task.id, seq, &event, now));
    enqueue(&mut ops, key, &task, seq, &event, entry.push.iter(), now);
    Ok(Planned {
        ops,
        apply: EmitApply::Event {
            task: Box::new(task),
            event,
            seq,
            next_seq,
            new_seqs,
            record,
        },
    })
}

/// Plans a complete agent-loop event: the record `append_event` makes of it (at the
/// thread's next `seq`, linked to the running task) and the state its delta leads to. A
/// delta that would take the state past its limit refuses the whole event and changes
/// nothing.
fn plan_session_event(
    key: &ThreadKey,
    loaded: &Loaded,
    task_id: &TaskId,
    event: &Event,
    now: Timestamp,
) -> Result<Planned<EmitApply>, Error> {
    if event.partial {
        return Err(Error::InvalidAgentResponse(
            "partial events are streamed, not stored".into(),
        ));
    }
    let (record, delta) = match append_event(&loaded.history, event, &mut IdSource::random()) {
        Appended::Message {
            mut record,
            state_delta,
        } => {
            record.seq = loaded.next_seq;
            (Some(record), state_delta)
        }
        Appended::StateOnly(delta) => (None, delta),
        Appended::Nothing => (None, serde_json::Map::new()),
    };
    let mut ops = Vec::new();
    let record = record.map(|r| {
        let stored = session_record(key, &r, task_id);
        ops.push(WriteOp::AppendMessage(stored.clone()));
        stored
    });
    let state = if delta.is_empty() {
        None
    } else {
        let mut state = loaded.state.clone();
        state
            .apply_delta(&delta, now)
            .map_err(|e| Error::InvalidAgentResponse(format!("state delta refused: {e}")))?;
        let mut thread = loaded.thread.clone();
        thread.conversation_context = state.to_json();
        thread.updated_at = now;
        ops.insert(0, thread_write(loaded, &thread));
        Some((Box::new(state), Box::new(thread)))
    };
    Ok(Planned {
        ops,
        apply: EmitApply::Session { record, state },
    })
}
