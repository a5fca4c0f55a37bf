//! The turn rules, as pure functions over a thread's state (`Loaded`): what a client
//! message, an executor output or a forced status change is allowed to do, and the writes
//! and the memory change it leads to. No actix and no I/O: the actor's handlers call
//! these, commit the ops, then apply the plan (plan → commit → apply → publish), and the
//! rules are unit-tested on their own (`tests` below).
//!
//! A new task stays *provisional* — in memory only — until the executor's first output:
//! an agent that answers with a plain message never creates a task. Any other first
//! output materializes the task and that output in one commit. `returnImmediately`
//! materializes the task at the start, since the caller wants it at once.

use super::{
    Emit, Loaded, Mode, TaskEntry, ThreadKey, TurnClaim, TurnEmit, message_record, session_record,
};
use crate::domain::{
    Message, Metadata, PushConfig, PushPayload, PushTarget, SendMessage, StreamEvent, Task, TaskId,
    TaskState, TaskStatus, Timestamp,
};
use crate::error::Error;
use crate::session::{Appended, Event, IdSource, ThreadState, append_event};
use crate::store::{Claim, MessageRecord, TaskRecord, ThreadRecord, ThreadStatus, WriteOp};

/// Ops, plus what to apply to memory once they are committed.
pub(in crate::runtime) struct Planned<A> {
    pub ops: Vec<WriteOp>,
    pub apply: A,
}

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

#[cfg(test)]
mod tests {
    //! The turn rules (`plan/`) on a thread state built by hand: no actix, no store.

    use std::collections::HashMap;
    use std::sync::Arc;

    use super::super::{Emit, Loaded, Mode, RunningTurn, TaskEntry, ThreadKey, TurnEmit};
    use super::{
        EmitApply, HowToStart, Planned, StartTurn, plan_emit, plan_forced_status, plan_start,
    };
    use crate::config::StateSettings;
    use crate::domain::{
        Artifact, ContextId, Message, Part, PushDialect, PushPayload, PushSpec, Role, SendConfig,
        SendMessage, StreamEvent, Task, TaskId, TaskState, TaskStatus, TenantId, Timestamp,
    };
    use crate::error::Error;
    use crate::runtime::lifecycle::shutdown::Activity;
    use crate::session::{Content, Event, History, ThreadState};
    use crate::store::{ThreadRecord, ThreadStatus, WriteOp};

    const NOW: Timestamp = Timestamp(1_800_000_000_000);
    const TTL_MS: i64 = 60_000;
    const MAX_PUSH: usize = 2;

    fn key() -> ThreadKey {
        ThreadKey {
            tenant: TenantId::default_tenant(),
            context_id: ContextId::parse("ctx-1").unwrap(),
        }
    }

    /// A thread with nothing in it yet (`persisted`: its row is stored, expiring at
    /// `expires_at`).
    fn thread(persisted: bool, expires_at: Timestamp) -> Loaded {
        let key = key();
        Loaded::with(
            ThreadRecord {
                tenant: key.tenant,
                thread_id: key.context_id,
                created_at: NOW,
                updated_at: NOW,
                expires_at,
                status: ThreadStatus::Active,
                conversation_context: serde_json::json!({}),
            },
            persisted,
            History::new(1, 50),
            ThreadState::new(&StateSettings {
                ttl_secs: 3600,
                max_bytes: 64,
            }),
            HashMap::new(),
        )
    }

    fn fresh() -> Loaded {
        thread(false, Timestamp(NOW.0 + TTL_MS))
    }

    fn user(text: &str, task_id: Option<&TaskId>) -> SendMessage {
        SendMessage {
            message: Message {
                role: Role::User,
                context_id: None,
                ..Message::agent(key().context_id, task_id.cloned(), vec![Part::text(text)])
            },
            config: SendConfig::default(),
            metadata: None,
            create_missing_task: false,
            idempotency_key: None,
        }
    }

    /// Applies a planned start the way the actor does (memory only), with the turn running.
    fn started(loaded: &mut Loaded, start: StartTurn, turn: u64) -> TaskId {
        let (task_id, _, _) = loaded.apply_start(start);
        loaded.running = Some(RunningTurn {
            task_id: task_id.clone(),
            turn,
            abort: None,
            replied: false,
            _busy: Arc::new(Activity::default()).busy(),
            span: tracing::Span::none(),
        });
        task_id
    }

    /// A materialized task of the thread in `state`, with one history message.
    fn stored_task(loaded: &mut Loaded, state: TaskState) -> TaskId {
        let key = key();
        let id = TaskId::generate();
        let first = Message {
            context_id: Some(key.context_id.clone()),
            task_id: Some(id.clone()),
            ..user("first", None).message
        };
        let mut task = Task::submitted(id.clone(), key.context_id, key.tenant, first, NOW);
        task.set_status(TaskStatus {
            state,
            message: None,
            timestamp: NOW,
        });
        loaded.tasks.insert(
            id.clone(),
            TaskEntry {
                task,
                materialized: true,
                last_seq: 3,
                hub: None,
                waiters: Vec::new(),
                finished_at: None,
                history_seqs: vec![1],
                push: Vec::new(),
                push_unwritten: Vec::new(),
                claim_key: None,
            },
        );
        loaded.thread_persisted = true;
        loaded.next_seq = 2;
        id
    }

    fn how(mode: Mode) -> HowToStart<'static> {
        HowToStart {
            mode,
            ttl_ms: TTL_MS,
            max_push_configs: MAX_PUSH,
            claim: None,
        }
    }

    /// Plans the start of a turn whose caller waits for its outcome.
    fn start_blocking(loaded: &Loaded, cmd: &SendMessage) -> Result<Planned<StartTurn>, Error> {
        plan_start(&key(), loaded, cmd, &how(Mode::Blocking), NOW)
    }

    /// A fresh thread whose first message started turn `turn` on a provisional task.
    fn new_turn(turn: u64) -> (Loaded, TaskId) {
        let mut loaded = fresh();
        let start = start_blocking(&loaded, &user("hi", None))
            .expect("a plan")
            .apply;
        let task_id = started(&mut loaded, start, turn);
        (loaded, task_id)
    }

    fn emit(task_id: &TaskId, turn: u64, emit: Emit) -> TurnEmit {
        TurnEmit {
            task_id: task_id.clone(),
            turn,
            emit,
        }
    }

    fn status(state: TaskState, message: Option<&str>) -> Emit {
        Emit::Status {
            state,
            message: message
                .map(|text| Message::agent(key().context_id, None, vec![Part::text(text)])),
            metadata: None,
        }
    }

    fn kinds(ops: &[WriteOp]) -> Vec<&'static str> {
        ops.iter()
            .map(|op| match op {
                WriteOp::UpsertThread(_) | WriteOp::InsertThread(_) => "thread",
                WriteOp::AppendMessage(_) => "message",
                WriteOp::UpsertTask(_) | WriteOp::InsertTask(_) => "task",
                WriteOp::LinkTaskMessage { .. } => "link",
                WriteOp::AppendTaskEvent { .. } => "event",
                WriteOp::ExpireThreads { .. } => "expire",
                WriteOp::RetireThreads { .. } => "retire",
                WriteOp::PutPushConfig(_) => "push_config",
                WriteOp::DeletePushConfig { .. } => "push_delete",
                WriteOp::EnqueuePush { .. } => "enqueue",
                WriteOp::PushDone(_) | WriteOp::PushRetry { .. } => "outbox",
                WriteOp::ClaimKey(_) => "claim",
                WriteOp::SettleClaim { .. } => "settle",
                WriteOp::ForgetClaims { .. } => "forget",
                WriteOp::Fence(_) => "fence",
            })
            .collect()
    }

    #[test]
    fn a_new_task_writes_only_the_thread_and_the_message_until_its_first_output() {
        let loaded = fresh();
        let plan = start_blocking(&loaded, &user("hi", None)).expect("a plan");
        assert_eq!(kinds(&plan.ops), ["thread", "message"]);
        assert!(!plan.apply.materialized && !plan.apply.existing);
        assert_eq!(plan.apply.seq, 1);
        assert_eq!(plan.apply.task.status.state, TaskState::Submitted);
        assert_eq!(plan.apply.thread.expires_at, Timestamp(NOW.0 + TTL_MS));
        // The message is not linked to a task that may never exist.
        let WriteOp::AppendMessage(record) = &plan.ops[1] else {
            unreachable!()
        };
        assert_eq!(record.task_id, None);
    }

    #[test]
    fn return_immediately_materializes_the_task_at_the_start() {
        let loaded = fresh();
        let plan = plan_start(
            &key(),
            &loaded,
            &user("hi", None),
            &how(Mode::Immediate),
            NOW,
        )
        .expect("a plan");
        assert_eq!(kinds(&plan.ops), ["thread", "message", "task", "link"]);
        assert!(plan.apply.materialized);
    }

    #[test]
    fn an_expired_thread_takes_no_message() {
        let expired = thread(true, NOW);
        let refused = start_blocking(&expired, &user("hi", None));
        assert!(
            matches!(refused, Err(Error::ThreadExpired(_))),
            "{:?}",
            refused.err()
        );
        // A thread that only exists in memory has nothing to expire.
        let unsaved = thread(false, NOW);
        assert!(start_blocking(&unsaved, &user("hi", None)).is_ok());
    }

    #[test]
    fn a_follow_up_needs_a_known_task_that_is_not_terminal() {
        let mut loaded = fresh();
        let unknown = TaskId::generate();
        let refused = start_blocking(&loaded, &user("x", Some(&unknown)));
        assert!(matches!(refused, Err(Error::TaskNotFound(_))));
        // A 0.1 client may name the task it creates.
        let mut create = user("x", Some(&unknown));
        create.create_missing_task = true;
        let plan = start_blocking(&loaded, &create).expect("created");
        assert_eq!(plan.apply.task.id, unknown);

        let done = stored_task(&mut loaded, TaskState::Completed);
        let refused = start_blocking(&loaded, &user("x", Some(&done)));
        assert!(matches!(refused, Err(Error::UnsupportedOperation(_))));
    }

    #[test]
    fn a_follow_up_resumes_an_interrupted_task_and_links_the_message_after_its_history() {
        let mut loaded = fresh();
        let asked = stored_task(&mut loaded, TaskState::InputRequired);
        let plan = start_blocking(&loaded, &user("more", Some(&asked))).expect("a plan");
        assert_eq!(
            kinds(&plan.ops),
            ["thread", "message", "link", "event", "task"]
        );
        let WriteOp::LinkTaskMessage {
            position,
            message_seq,
            ..
        } = &plan.ops[2]
        else {
            unreachable!()
        };
        assert_eq!((*position, *message_seq), (1, 2));
        let (seq, event) = plan.apply.event.expect("a resume event");
        assert_eq!(seq, 4, "after the task's last logged event");
        assert!(
            matches!(event, StreamEvent::StatusUpdate { status, .. } if status.state == TaskState::Working)
        );
        assert_eq!(plan.apply.task.history.len(), 2);
    }

    #[test]
    fn working_again_without_a_message_is_not_a_second_event() {
        let mut loaded = fresh();
        let asked = stored_task(&mut loaded, TaskState::InputRequired);
        let start = start_blocking(&loaded, &user("more", Some(&asked)))
            .expect("a plan")
            .apply;
        let task_id = started(&mut loaded, start, 7);
        assert_eq!(loaded.tasks[&task_id].task.status.state, TaskState::Working);
        // The executor says "working" as every turn does: the resume already said it.
        let plan = plan_emit(
            &key(),
            &loaded,
            &emit(&task_id, 7, status(TaskState::Working, None)),
            NOW,
        )
        .expect("a plan");
        assert!(plan.ops.is_empty(), "{:?}", kinds(&plan.ops));
        assert!(matches!(
            plan.apply,
            EmitApply::Session {
                record: None,
                state: None
            }
        ));
        // Working with something to say is an event.
        let plan = plan_emit(
            &key(),
            &loaded,
            &emit(
                &task_id,
                7,
                status(TaskState::Working, Some("looking it up")),
            ),
            NOW,
        )
        .expect("a plan");
        assert!(kinds(&plan.ops).contains(&"event"));
    }

    #[test]
    fn the_first_output_of_a_provisional_task_materializes_it_with_its_message() {
        let (loaded, task_id) = new_turn(7);
        let plan = plan_emit(
            &key(),
            &loaded,
            &emit(&task_id, 7, status(TaskState::Completed, Some("done"))),
            NOW,
        )
        .expect("a plan");
        // The user message becomes history entry 0, the status message entry 1.
        assert_eq!(
            kinds(&plan.ops),
            ["link", "message", "link", "task", "event"]
        );
        let EmitApply::Event {
            task,
            seq,
            next_seq,
            new_seqs,
            ..
        } = plan.apply
        else {
            panic!("an event plan")
        };
        assert_eq!(task.status.state, TaskState::Completed);
        assert_eq!((seq, next_seq, new_seqs), (1, 3, vec![2]));
        // The task's first row: inserted, not upserted.
        assert!(matches!(plan.ops[3], WriteOp::InsertTask(_)));
    }

    #[test]
    fn a_thread_and_a_task_no_store_holds_are_written_as_first_rows() {
        // A thread the store did not have: its first row; a thread loaded from it: updated.
        let plan = start_blocking(&fresh(), &user("hi", None)).expect("a plan");
        assert!(matches!(plan.ops[0], WriteOp::InsertThread(_)));
        let mut loaded = fresh();
        let id = stored_task(&mut loaded, TaskState::InputRequired);
        let plan = start_blocking(&loaded, &user("more", Some(&id))).expect("a plan");
        assert!(matches!(plan.ops[0], WriteOp::UpsertThread(_)));
        // A stored task's next write is an update.
        assert!(
            plan.ops
                .iter()
                .any(|op| matches!(op, WriteOp::UpsertTask(_)))
        );
        // A task made at the start (`returnImmediately`) is a first row.
        let plan = plan_start(
            &key(),
            &fresh(),
            &user("hi", None),
            &how(Mode::Immediate),
            NOW,
        )
        .expect("a plan");
        assert!(
            plan.ops
                .iter()
                .any(|op| matches!(op, WriteOp::InsertTask(_)))
        );
    }

    #[test]
    fn outputs_are_checked_against_the_turn_and_the_task() {
        let (mut loaded, task_id) = new_turn(7);
        // Another turn's output.
        let stale = plan_emit(
            &key(),
            &loaded,
            &emit(&task_id, 6, status(TaskState::Working, None)),
            NOW,
        );
        assert!(matches!(stale, Err(Error::UnsupportedOperation(_))));
        // A transition the state machine does not allow.
        let illegal = plan_emit(
            &key(),
            &loaded,
            &emit(&task_id, 7, status(TaskState::Submitted, None)),
            NOW,
        );
        assert!(
            matches!(illegal, Err(Error::InvalidAgentResponse(_))),
            "{:?}",
            illegal.err()
        );
        // An artifact after the end.
        loaded
            .tasks
            .get_mut(&task_id)
            .unwrap()
            .task
            .set_status(TaskStatus {
                state: TaskState::Completed,
                message: None,
                timestamp: NOW,
            });
        let late = plan_emit(
            &key(),
            &loaded,
            &emit(
                &task_id,
                7,
                Emit::Artifact {
                    artifact: Artifact::new(vec![Part::text("a")]),
                    append: false,
                    last_chunk: true,
                },
            ),
            NOW,
        );
        assert!(matches!(late, Err(Error::InvalidAgentResponse(_))));
    }

    #[test]
    fn a_reply_answers_without_a_task_only_before_the_task_exists() {
        let (mut loaded, task_id) = new_turn(1);
        let reply = Emit::Reply(Message::agent(
            key().context_id,
            None,
            vec![Part::text("hello")],
        ));
        let plan = plan_emit(&key(), &loaded, &emit(&task_id, 1, reply.clone()), NOW).unwrap();
        assert_eq!(kinds(&plan.ops), ["message"]);
        assert!(matches!(plan.apply, EmitApply::Reply { .. }));
        // Once the task exists, the same reply completes it.
        loaded.tasks.get_mut(&task_id).unwrap().materialized = true;
        let plan = plan_emit(&key(), &loaded, &emit(&task_id, 1, reply), NOW).unwrap();
        let EmitApply::Event { task, .. } = plan.apply else {
            panic!("an event plan")
        };
        assert_eq!(task.status.state, TaskState::Completed);
    }

    #[test]
    fn a_state_delta_past_the_limit_refuses_the_whole_event() {
        let (loaded, task_id) = new_turn(1);
        let mut event = Event::new(
            "agent",
            Some(Content {
                role: "model".into(),
                parts: vec![crate::session::Part::Text("thinking".into())],
            }),
            NOW,
        );
        event
            .actions
            .state_delta
            .insert("notes".into(), serde_json::json!("x".repeat(100)));
        let refused = plan_emit(
            &key(),
            &loaded,
            &emit(&task_id, 1, Emit::Event(Box::new(event.clone()))),
            NOW,
        );
        assert!(
            matches!(refused, Err(Error::InvalidAgentResponse(_))),
            "{:?}",
            refused.err()
        );
        // Within the limit: the record and the thread row carrying the new state.
        event
            .actions
            .state_delta
            .insert("notes".into(), serde_json::json!("ok"));
        let plan = plan_emit(
            &key(),
            &loaded,
            &emit(&task_id, 1, Emit::Event(Box::new(event))),
            NOW,
        )
        .expect("a plan");
        assert_eq!(kinds(&plan.ops), ["thread", "message"]);
    }

    #[test]
    fn a_forced_status_needs_a_materialized_task_that_is_not_terminal() {
        let mut loaded = fresh();
        let open = stored_task(&mut loaded, TaskState::Working);
        let text = Message::agent(key().context_id, None, vec![Part::text("stopped")]);
        let plan = plan_forced_status(&key(), &loaded, &open, TaskState::Canceled, Some(text), NOW)
            .expect("a plan");
        // The same writes as any status with a message: message, link, task, event.
        assert_eq!(kinds(&plan.ops), ["message", "link", "task", "event"]);
        let done = stored_task(&mut loaded, TaskState::Failed);
        let refused = plan_forced_status(&key(), &loaded, &done, TaskState::Canceled, None, NOW);
        assert!(matches!(refused, Err(Error::TaskNotCancelable { .. })));
        let unknown = plan_forced_status(
            &key(),
            &loaded,
            &TaskId::generate(),
            TaskState::Canceled,
            None,
            NOW,
        );
        assert!(matches!(unknown, Err(Error::TaskNotFound(_))));
    }

    fn push_config(task_id: &TaskId, id: &str, dialect: PushDialect) -> crate::domain::PushConfig {
        PushSpec {
            id: Some(id.into()),
            url: "https://hooks.example.org/a2a".into(),
            token: None,
            auth: None,
            dialect,
        }
        .into_config(key().tenant, task_id.clone(), NOW)
    }

    fn with_push(mut cmd: SendMessage, id: &str, dialect: PushDialect) -> SendMessage {
        cmd.config.push = Some(PushSpec {
            id: Some(id.into()),
            url: "https://hooks.example.org/a2a".into(),
            token: None,
            auth: None,
            dialect,
        });
        cmd
    }

    #[test]
    fn a_push_config_sent_with_a_new_task_is_written_with_the_task_and_gets_its_first_event() {
        let mut loaded = fresh();
        let cmd = with_push(user("hi", None), "c-1", PushDialect::V1);
        let start = start_blocking(&loaded, &cmd).expect("a plan");
        // Nothing of a provisional task is written, its config neither.
        assert_eq!(kinds(&start.ops), ["thread", "message"]);
        let task_id = started(&mut loaded, start.apply, 1);
        let plan = plan_emit(
            &key(),
            &loaded,
            &emit(&task_id, 1, status(TaskState::Completed, None)),
            NOW,
        )
        .expect("a plan");
        assert_eq!(
            kinds(&plan.ops),
            ["link", "push_config", "task", "event", "enqueue"]
        );
        let Some(WriteOp::EnqueuePush {
            config,
            seq,
            payload,
            ..
        }) = plan.ops.last()
        else {
            panic!("an outbox row last")
        };
        assert_eq!((config.id.as_str(), *seq), ("c-1", 1));
        assert_eq!(config.task_id, task_id);
        assert!(matches!(
            payload,
            PushPayload::Event { event } if matches!(**event, StreamEvent::StatusUpdate { .. })
        ));
    }

    #[test]
    fn every_event_of_a_task_is_queued_for_each_config_in_its_dialects_payload() {
        let mut loaded = fresh();
        let task_id = stored_task(&mut loaded, TaskState::InputRequired);
        let entry = loaded.tasks.get_mut(&task_id).unwrap();
        for (id, dialect) in [("a", PushDialect::V1), ("b", PushDialect::V03)] {
            entry.push.push(push_config(&task_id, id, dialect).target());
        }
        let plan = plan_forced_status(&key(), &loaded, &task_id, TaskState::Canceled, None, NOW)
            .expect("a plan");
        assert_eq!(kinds(&plan.ops), ["task", "event", "enqueue", "enqueue"]);
        let payloads: Vec<&PushPayload> = plan
            .ops
            .iter()
            .filter_map(|op| match op {
                WriteOp::EnqueuePush { payload, seq, .. } => {
                    assert_eq!(*seq, 4);
                    Some(payload)
                }
                _ => None,
            })
            .collect();
        assert!(matches!(payloads[0], PushPayload::Event { .. }));
        // The 0.3 receiver gets the task as the event leaves it, without its history.
        let PushPayload::Task { task } = payloads[1] else {
            panic!("a task payload")
        };
        assert_eq!(task.status.state, TaskState::Canceled);
        assert!(task.history.is_empty());
    }

    #[test]
    fn a_follow_up_past_the_config_limit_is_refused_but_one_replacing_an_id_is_not() {
        let mut loaded = fresh();
        let task_id = stored_task(&mut loaded, TaskState::InputRequired);
        let entry = loaded.tasks.get_mut(&task_id).unwrap();
        for id in ["a", "b"] {
            entry
                .push
                .push(push_config(&task_id, id, PushDialect::V1).target());
        }
        let third = with_push(user("more", Some(&task_id)), "c", PushDialect::V1);
        let refused = start_blocking(&loaded, &third);
        assert!(
            matches!(refused, Err(Error::InvalidParams(ref m)) if m.contains("push.max_configs_per_task"))
        );
        let again = with_push(user("more", Some(&task_id)), "b", PushDialect::V03);
        let plan = start_blocking(&loaded, &again).expect("a replacement takes no room");
        // The resumed task's working event goes to both configs, `b` once.
        assert_eq!(
            kinds(&plan.ops),
            [
                "thread",
                "message",
                "push_config",
                "link",
                "event",
                "enqueue",
                "enqueue",
                "task"
            ]
        );
    }

    #[test]
    fn a_claimed_message_claims_its_key_first_and_a_reply_settles_it() {
        let claim = super::super::TurnClaim {
            key: "m-1".into(),
            digest: "d".into(),
            task_id: TaskId::parse("chosen-task").unwrap(),
            at: NOW,
            taken_over_before: Timestamp(NOW.0 - 1000),
            known_unclaimed: true,
        };
        let mut loaded = fresh();
        let plan = plan_start(
            &key(),
            &loaded,
            &user("hi", None),
            &HowToStart {
                claim: Some(&claim),
                ..how(Mode::Blocking)
            },
            NOW,
        )
        .expect("a plan");
        assert_eq!(kinds(&plan.ops), ["claim", "thread", "message"]);
        assert_eq!(plan.apply.task.id.as_str(), "chosen-task");
        let task_id = started(&mut loaded, plan.apply, 1);
        let reply = Emit::Reply(Message::agent(
            key().context_id,
            None,
            vec![Part::text("hey")],
        ));
        let plan = plan_emit(&key(), &loaded, &emit(&task_id, 1, reply), NOW).expect("a plan");
        assert_eq!(kinds(&plan.ops), ["message", "settle"]);
    }
}
