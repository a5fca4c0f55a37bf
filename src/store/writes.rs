//! The write path's SQL, written once for both backends.
//!
//! A batch of [`WriteOp`]s becomes [`Rows`] (upserts deduplicated to the last write of
//! each key: ops are full rows, so the last one is the state the batch leaves; Postgres
//! also refuses `ON CONFLICT DO UPDATE` touching one row twice in a statement), and the
//! rows become statements:
//!
//! - **Postgres** (`postgres/writer.rs`): one statement per table whatever the row count (the
//!   rows as one array per column through `unnest`), each prepared once per writer
//!   connection, all of a commit's statements and its `BEGIN` and `COMMIT` sent together:
//!   one round trip.
//! - **SQLite** (`sqlite/writer.rs`): the same statements one row at a time ([`sqlite`]), each
//!   prepared once by the writer connection and cached: a statement is an in-process call
//!   there, and preparing it was the writer's largest cost (diesel never caches an upsert,
//!   nor any insert on SQLite, so it parsed every statement of every commit anew).
//!
//! The two forms are kept side by side here; the store tests run every case on both
//! backends, so they cannot drift apart unnoticed.
//!
//! With no foreign keys the order between tables does not matter; within a table it is
//! kept. The statements are applied in the order of [`Rows`]' fields, thread expirations
//! after the thread upserts of the same batch.

use super::tables::idempotency_keys::{NewClaim, encode_reply};
use super::tables::messages::NewMessage;
use super::tables::push_configs::NewPushConfig;
use super::tables::push_outbox::NewOutboxRow;
use super::tables::task_events::NewTaskEvent;
use super::tables::tasks::{NewTask, append_seq};
use super::tables::threads::NewThread;
use super::{MessageRecord, OutboxKey, StoreError, ThreadStatus, WriteOp};
use crate::domain::{ContextId, Message, StreamEvent, TaskId, TenantId};

/// A batch's keys are clients' ids: foldhash seeded per process, a fraction of SipHash's
/// cost.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Rows per multi-row statement: far below Postgres' 65535 bind parameters and SQLite's
/// 32766 for the widest table (12 columns).
pub(super) const CHUNK: usize = 500;

/// Some of a tenant's threads and an instant: a conditional expiry
/// ([`WriteOp::ExpireThreads`]) or deletion ([`WriteOp::RetireThreads`]).
pub(super) struct ThreadsAt<'a> {
    pub tenant: &'a str,
    pub thread_ids: Vec<&'a str>,
    pub at: i64,
}

/// The rows of a batch, per table, in the order they are written.
#[derive(Default)]
pub(super) struct Rows<'a> {
    pub threads: Vec<NewThread<'a>>,
    pub expirations: Vec<ThreadsAt<'a>>,
    pub messages: Vec<NewMessage<'a>>,
    /// Each with the history entries the batch appends to it ([`WriteOp::LinkTaskMessage`]).
    pub tasks: Vec<NewTask<'a>>,
    /// History entries of tasks the batch does not upsert: appended to their rows.
    pub appends: Vec<HistoryAppend<'a>>,
    pub events: Vec<NewTaskEvent<'a>>,
    /// Idempotency claims, each with the instant before which an older claim of its key
    /// is taken over and whether the claiming process vouches that it is unclaimed
    /// (`Claim::known_unclaimed`); applied first, so a duplicate refuses the batch before
    /// anything else is written.
    pub claims: Vec<(NewClaim<'a>, i64, bool)>,
    /// Replies of claimed turns.
    pub settled: Vec<Settled<'a>>,
    /// Claims made before these instants are forgotten.
    pub forget_before: Vec<i64>,
    /// Push configs and outbox rows, in batch order (a config deleted and registered
    /// again in one group ends registered).
    pub push: Vec<PushRow<'a>>,
    /// Cluster mode: the fencing tokens the batch was written under (distinct).
    pub fences: Vec<i64>,
    /// Threads past their retention, deleted with everything in them; applied last.
    pub retirements: Vec<ThreadsAt<'a>>,
}

/// The reply of a claimed turn ([`WriteOp::SettleClaim`]): the row of the claim's thread
/// that the batch appends for it, or (none is, as the runtime writes) a copy.
pub(super) struct Settled<'a> {
    pub tenant_id: &'a str,
    pub key: &'a str,
    /// The reply's JSON, when it is no row of the batch.
    pub reply: Option<String>,
    pub reply_seq: Option<i64>,
}

/// History entries appended to a task's row without rewriting it: (tenant, task, the
/// `seq`s comma-separated).
pub(super) struct HistoryAppend<'a> {
    pub tenant_id: &'a str,
    pub task_id: &'a str,
    pub seqs: String,
}

/// The SQL both backends append history entries with: `old` and `new` are lists of
/// `seq`s, comma-separated, `''` for none.
macro_rules! appended_history {
    ($old:literal, $new:literal) => {
        concat!(
            "CASE WHEN ",
            $old,
            " = '' THEN ",
            $new,
            " WHEN ",
            $new,
            " = '' THEN ",
            $old,
            " ELSE ",
            $old,
            " || ',' || ",
            $new,
            " END"
        )
    };
}
pub(super) use appended_history;

/// A write to the push tables.
pub(super) enum PushRow<'a> {
    PutConfig(NewPushConfig<'a>),
    /// Deletes the config and the deliveries still owed to it.
    DeleteConfig {
        tenant_id: &'a str,
        task_id: &'a str,
        config_id: &'a str,
    },
    Enqueue(NewOutboxRow<'a>),
    Done(&'a OutboxKey),
    Retry {
        key: &'a OutboxKey,
        attempts: i64,
        next_attempt_at: i64,
    },
}

impl PushRow<'_> {
    /// A config registered, a delivery owed or one done: rows a commit may write in any
    /// order by kind (`postgres::writer`), unlike a config's deletion (which takes its owed rows
    /// with it) or a rescheduling.
    pub(super) fn is_common(&self) -> bool {
        matches!(
            self,
            PushRow::PutConfig(_) | PushRow::Enqueue(_) | PushRow::Done(_)
        )
    }
}

impl<'a> Rows<'a> {
    /// The rows `ops` write, upserts deduplicated to the last write of each key.
    pub fn collect(ops: impl IntoIterator<Item = &'a WriteOp>) -> Result<Self, StoreError> {
        let mut rows = Rows::default();
        let mut thread_at = HashMap::default();
        let mut task_at = HashMap::default();
        // History entries (position, seq) by task, in the order the batch links them.
        let mut linked: Vec<(TaskKey, Vec<(i64, i64)>)> = Vec::new();
        // Logged events, written once the batch's messages are known.
        let mut events = Vec::new();
        let mut settles = Vec::new();
        let mut appended = Vec::new();
        for op in ops {
            match op {
                WriteOp::UpsertThread(thread) | WriteOp::InsertThread(thread) => {
                    let key = (thread.tenant.as_str(), thread.thread_id.as_str());
                    let mut row = NewThread::new(thread)?;
                    row.first = matches!(op, WriteOp::InsertThread(_));
                    upsert(&mut rows.threads, &mut thread_at, key, row, |old, new| {
                        new.first |= old.first
                    });
                }
                WriteOp::UpsertTask(task) | WriteOp::InsertTask(task) => {
                    let key = (task.task.tenant.as_str(), task.task.id.as_str());
                    let mut row = NewTask::new(task)?;
                    row.first = matches!(op, WriteOp::InsertTask(_));
                    upsert(&mut rows.tasks, &mut task_at, key, row, |old, new| {
                        new.first |= old.first
                    });
                }
                WriteOp::AppendMessage(message) => {
                    rows.messages.push(NewMessage::new(message)?);
                    appended.push(message);
                }
                WriteOp::LinkTaskMessage {
                    tenant,
                    task_id,
                    position,
                    message_seq,
                } => {
                    let key = (tenant.as_str(), task_id.as_str());
                    match linked.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, entries)) => entries.push((*position, *message_seq)),
                        None => linked.push((key, vec![(*position, *message_seq)])),
                    }
                }
                WriteOp::AppendTaskEvent {
                    tenant,
                    task_id,
                    seq,
                    event,
                    created_at,
                } => events.push((tenant, task_id, *seq, event, *created_at)),
                WriteOp::ExpireThreads {
                    tenant,
                    thread_ids,
                    at,
                } => rows.expirations.push(ThreadsAt {
                    tenant: tenant.as_str(),
                    thread_ids: thread_ids.iter().map(|id| id.as_str()).collect(),
                    at: at.millis(),
                }),
                WriteOp::RetireThreads {
                    tenant,
                    thread_ids,
                    before,
                } => rows.retirements.push(ThreadsAt {
                    tenant: tenant.as_str(),
                    thread_ids: thread_ids.iter().map(|id| id.as_str()).collect(),
                    at: before.millis(),
                }),
                WriteOp::PutPushConfig(config) => rows
                    .push
                    .push(PushRow::PutConfig(NewPushConfig::new(config))),
                WriteOp::DeletePushConfig {
                    tenant,
                    task_id,
                    config_id,
                } => rows.push.push(PushRow::DeleteConfig {
                    tenant_id: tenant.as_str(),
                    task_id: task_id.as_str(),
                    config_id,
                }),
                WriteOp::EnqueuePush {
                    config,
                    seq,
                    payload,
                    created_at,
                } => rows.push.push(PushRow::Enqueue(NewOutboxRow::new(
                    &config.tenant,
                    &config.task_id,
                    &config.id,
                    *seq,
                    payload,
                    *created_at,
                )?)),
                WriteOp::ClaimKey(claim) => rows.claims.push((
                    NewClaim::new(claim)?,
                    claim.taken_over_before.millis(),
                    claim.known_unclaimed,
                )),
                WriteOp::SettleClaim { tenant, key, reply } => settles.push((tenant, key, reply)),
                WriteOp::ForgetClaims { before } => rows.forget_before.push(before.millis()),
                WriteOp::PushDone(key) => rows.push.push(PushRow::Done(key)),
                WriteOp::PushRetry {
                    key,
                    attempts,
                    next_attempt_at,
                } => rows.push.push(PushRow::Retry {
                    key,
                    attempts: *attempts,
                    next_attempt_at: next_attempt_at.millis(),
                }),
                WriteOp::Fence(token) => {
                    if !rows.fences.contains(token) {
                        rows.fences.push(*token);
                    }
                }
            }
        }
        for (tenant, key, reply) in settles {
            // A reply is a message without a task of the claim's thread.
            let reply_seq = reply
                .context_id
                .as_ref()
                .filter(|_| reply.task_id.is_none())
                .and_then(|thread| appended_row(&appended, tenant, thread, None, reply));
            rows.settled.push(Settled {
                tenant_id: tenant.as_str(),
                key: key.as_str(),
                reply: match reply_seq {
                    Some(_) => None,
                    None => Some(encode_reply(reply)?),
                },
                reply_seq,
            });
        }
        // The newest event of each task the batch logs: the only one its row can be.
        let mut newest: HashMap<TaskKey, i64> = HashMap::default();
        for (tenant, task_id, seq, ..) in &events {
            let at = newest
                .entry((tenant.as_str(), task_id.as_str()))
                .or_insert(*seq);
            *at = (*at).max(*seq);
        }
        for (tenant, task_id, seq, event, created_at) in events {
            let message_seq = appended_status_message(&appended, tenant, task_id, event);
            let key = (tenant.as_str(), task_id.as_str());
            let row = task_at.get(&key).map(|&i| &mut rows.tasks[i]);
            if let Some(task) = row.filter(|_| newest.get(&key) == Some(&seq)) {
                let entries = linked.iter().find(|(k, _)| *k == key).map(|(_, e)| &e[..]);
                if is_final_row(task, event, message_seq, entries.unwrap_or_default()) {
                    task.final_event_seq = Some(seq);
                    continue;
                }
            }
            rows.events.push(NewTaskEvent::new(
                tenant,
                task_id,
                seq,
                event,
                created_at,
                message_seq,
            )?);
        }
        // A task's entries ride with its upsert in the batch (every turn writes both);
        // those of a task the batch does not upsert are appended to its row on their own.
        for (key, mut entries) in linked {
            entries.sort_by_key(|(position, _)| *position);
            let mut seqs = String::new();
            for (_, seq) in entries {
                append_seq(&mut seqs, seq);
            }
            match task_at.get(&key) {
                Some(&i) => rows.tasks[i].history = seqs,
                None => rows.appends.push(HistoryAppend {
                    tenant_id: key.0,
                    task_id: key.1,
                    seqs,
                }),
            }
        }
        Ok(rows)
    }

    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
            && self.expirations.is_empty()
            && self.messages.is_empty()
            && self.tasks.is_empty()
            && self.appends.is_empty()
            && self.events.is_empty()
            && self.push.is_empty()
            && self.claims.is_empty()
            && self.settled.is_empty()
            && self.forget_before.is_empty()
            && self.retirements.is_empty()
    }
}

/// A task's key in a batch: (tenant, task id).
type TaskKey<'a> = (&'a str, &'a str);

/// Whether `event` is the final status update of the task whose row the batch writes as
/// `task`, and says nothing that row does not — so the row stands for it and the event is
/// not logged (`schema::tasks::final_event_seq`): a terminal status without metadata of
/// its own, the row's state, timestamp and thread, and either no message (the row has no
/// status message either) or a message the batch appends (`message_seq`) and links to the
/// task as the entry the row names its status (`entries`: the batch's (position, seq)
/// history links of the task). Reads build it back from the row as it was logged.
///
/// A terminal task's row is written once more by nothing: the runtime refuses every
/// change to a terminal task (`runtime/thread/plan/`).
fn is_final_row(
    task: &NewTask<'_>,
    event: &StreamEvent,
    message_seq: Option<i64>,
    entries: &[(i64, i64)],
) -> bool {
    let StreamEvent::StatusUpdate {
        task_id,
        context_id,
        status,
        metadata: None,
    } = event
    else {
        return false;
    };
    let same_status = status.state.is_terminal()
        && status.state.as_str() == task.state
        && status.timestamp.millis() == task.status_timestamp
        && context_id.as_str() == task.context_id
        && task_id.as_str() == task.task_id;
    let same_message = match (&status.message, message_seq) {
        (None, _) => task.status_entry.is_none() && task.status_message.is_none(),
        (Some(_), Some(seq)) => {
            task.status_message.is_none()
                && task
                    .status_entry
                    .is_some_and(|entry| entries.contains(&(entry, seq)))
        }
        (Some(_), None) => false,
    };
    same_status && same_message
}

/// The `seq` of the message a batch appends (`appended`) that is the message of a status
/// update of `task_id`, as the thread's row reads it back: the row the logged event
/// refers to instead of copying the message.
fn appended_status_message(
    appended: &[&MessageRecord],
    tenant: &TenantId,
    task_id: &TaskId,
    event: &StreamEvent,
) -> Option<i64> {
    let StreamEvent::StatusUpdate {
        context_id, status, ..
    } = event
    else {
        return None;
    };
    let message = status.message.as_ref()?;
    if message.context_id.as_ref() != Some(context_id) || message.task_id.as_ref() != Some(task_id)
    {
        return None;
    }
    appended_row(appended, tenant, context_id, Some(task_id), message)
}

/// The `seq` of the message a batch appends (`appended`) to `thread`, of `task`, that
/// reads back as `message`.
fn appended_row(
    appended: &[&MessageRecord],
    tenant: &TenantId,
    thread: &ContextId,
    task: Option<&TaskId>,
    message: &Message,
) -> Option<i64> {
    appended
        .iter()
        .rev()
        .find(|r| {
            r.message_id.as_ref() == Some(&message.message_id)
                && r.task_id.as_ref() == task
                && r.thread_id == *thread
                && r.tenant == *tenant
                && r.role == message.role.as_str()
                && r.parts == message.parts
                && r.metadata == message.metadata
                && r.extensions == message.extensions
                && r.reference_task_ids == message.reference_task_ids
        })
        .map(|r| r.seq)
}

/// Replaces the row of `key` if the batch wrote it before (`carry` takes what the new
/// row keeps of the old: a first row stays a first row), else appends it.
fn upsert<'a, R>(
    rows: &mut Vec<R>,
    at: &mut HashMap<(&'a str, &'a str), usize>,
    key: (&'a str, &'a str),
    mut row: R,
    carry: impl FnOnce(&R, &mut R),
) {
    match at.get(&key) {
        Some(&i) => {
            carry(&rows[i], &mut row);
            rows[i] = row;
        }
        None => {
            at.insert(key, rows.len());
            rows.push(row);
        }
    }
}

/// The same writes as single-row SQL for SQLite's cached statements (`?n` parameters in
/// column order), applied in the order of [`Rows`]' fields.
pub(super) mod sqlite {
    pub const UPSERT_THREAD: &str = "INSERT INTO threads (tenant_id, thread_id, created_at, \
        updated_at, expires_at, status, conversation_context) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
        ON CONFLICT (tenant_id, thread_id) DO UPDATE SET updated_at = excluded.updated_at, \
        expires_at = excluded.expires_at, status = excluded.status, \
        conversation_context = excluded.conversation_context";

    /// A thread's first row ([`super::WriteOp::InsertThread`]): one of its key refuses it.
    pub const INSERT_THREAD: &str = "INSERT INTO threads (tenant_id, thread_id, created_at, \
        updated_at, expires_at, status, conversation_context) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

    /// The conditional expiry of `ids` threads of one tenant: `?1` tenant, `?2` the
    /// instant, then the thread ids.
    pub fn expire_threads(ids: usize) -> String {
        use super::ThreadStatus::{Active, Expired};
        let params: Vec<String> = (3..3 + ids).map(|i| format!("?{i}")).collect();
        // `+` keeps SQLite from reading the rows through `threads_by_expiry` (every
        // thread due, for each statement: quadratic while the janitor falls behind)
        // rather than through the key, one lookup per id.
        format!(
            "UPDATE threads SET status = '{}' WHERE tenant_id = ?1 AND +status = '{}' \
             AND +expires_at <= ?2 AND thread_id IN ({})",
            Expired.as_str(),
            Active.as_str(),
            params.join(", ")
        )
    }

    pub const INSERT_MESSAGE: &str = "INSERT INTO messages (tenant_id, thread_id, seq, message_id, \
        task_id, role, author, content, parts, tool_calls, metadata, created_at, extensions, \
        reference_task_ids) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

    /// `?12`: the history entries the batch appends.
    pub const UPSERT_TASK: &str = concat!(
        "INSERT INTO tasks (tenant_id, task_id, context_id, state, \
        status_message, status_timestamp, artifacts, transitions, metadata, created_at, \
        updated_at, history, status_entry, final_event_seq) \
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) \
        ON CONFLICT (tenant_id, task_id) DO UPDATE SET context_id = excluded.context_id, \
        state = excluded.state, status_message = excluded.status_message, \
        status_entry = excluded.status_entry, \
        final_event_seq = coalesce(excluded.final_event_seq, tasks.final_event_seq), \
        status_timestamp = excluded.status_timestamp, artifacts = excluded.artifacts, \
        transitions = excluded.transitions, metadata = excluded.metadata, \
        updated_at = excluded.updated_at, history = ",
        super::appended_history!("tasks.history", "excluded.history")
    );

    /// A task's first row ([`super::WriteOp::InsertTask`]), `?12` its history entries.
    pub const INSERT_TASK: &str = "INSERT INTO tasks (tenant_id, task_id, context_id, state, \
        status_message, status_timestamp, artifacts, transitions, metadata, created_at, \
        updated_at, history, status_entry, final_event_seq) \
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

    /// `?3`: history entries appended to the row of a task the batch does not upsert.
    pub const APPEND_HISTORY: &str = concat!(
        "UPDATE tasks SET history = ",
        super::appended_history!("history", "?3"),
        " WHERE tenant_id = ?1 AND task_id = ?2"
    );

    pub const INSERT_EVENT: &str = "INSERT INTO task_events (tenant_id, task_id, seq, kind, \
        payload, created_at, message_seq) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

    /// A thread's status before an upsert changes it (the census counts follow it).
    pub const THREAD_STATUS: &str =
        "SELECT status FROM threads WHERE tenant_id = ?1 AND thread_id = ?2";

    /// A task's state before an upsert changes it (the census counts follow it).
    pub const TASK_STATE: &str = "SELECT state FROM tasks WHERE tenant_id = ?1 AND task_id = ?2";

    /// What a commit adds to (or takes from) one census count.
    pub const ADD_TO_CENSUS: &str = "INSERT INTO census_counts (what, name, n) \
        VALUES (?1, ?2, ?3) ON CONFLICT (what, name) DO UPDATE SET n = n + excluded.n";

    /// The tasks a retired thread held, by state (the census counts lose them).
    pub const RETIRED_TASK_STATES: &str = "SELECT state, count(*) FROM tasks \
        WHERE tenant_id = ?1 AND context_id = ?2 GROUP BY state";

    /// [`WriteOp::RetireThreads`], one thread at a time: the thread row goes if it is past
    /// its retention ([`RETIRE_THREAD`]), and only then what is in it ([`RETIRED_ROWS`],
    /// in order: the tasks' rows last, since the others find the tasks through them).
    pub const RETIRE_THREAD: &str = "DELETE FROM threads WHERE tenant_id = ?1 \
        AND thread_id = ?2 AND +status = 'expired' AND +expires_at <= ?3";

    /// What a retired thread held, each statement bound to (tenant, thread).
    pub const RETIRED_ROWS: [&str; 5] = [
        "DELETE FROM task_events WHERE tenant_id = ?1 AND task_id IN \
         (SELECT task_id FROM tasks WHERE tenant_id = ?1 AND context_id = ?2)",
        "DELETE FROM push_outbox WHERE tenant_id = ?1 AND task_id IN \
         (SELECT task_id FROM tasks WHERE tenant_id = ?1 AND context_id = ?2)",
        "DELETE FROM push_configs WHERE tenant_id = ?1 AND task_id IN \
         (SELECT task_id FROM tasks WHERE tenant_id = ?1 AND context_id = ?2)",
        "DELETE FROM tasks WHERE tenant_id = ?1 AND context_id = ?2",
        "DELETE FROM messages WHERE tenant_id = ?1 AND thread_id = ?2",
    ];

    pub const UPSERT_PUSH_CONFIG: &str = "INSERT INTO push_configs (tenant_id, task_id, \
        config_id, dialect, url, token, auth_scheme, auth_credentials, created_at) \
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
        ON CONFLICT (tenant_id, task_id, config_id) DO UPDATE SET dialect = excluded.dialect, \
        url = excluded.url, token = excluded.token, auth_scheme = excluded.auth_scheme, \
        auth_credentials = excluded.auth_credentials, created_at = excluded.created_at";

    pub const DELETE_PUSH_CONFIG: &str =
        "DELETE FROM push_configs WHERE tenant_id = ?1 AND task_id = ?2 AND config_id = ?3";

    pub const DELETE_OWED: &str =
        "DELETE FROM push_outbox WHERE tenant_id = ?1 AND task_id = ?2 AND config_id = ?3";

    pub const INSERT_OUTBOX: &str = "INSERT INTO push_outbox (tenant_id, task_id, config_id, \
        seq, payload, created_at, attempts, next_attempt_at) \
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

    pub const DELETE_OUTBOX: &str = "DELETE FROM push_outbox WHERE tenant_id = ?1 \
        AND task_id = ?2 AND config_id = ?3 AND seq = ?4";

    pub const RESCHEDULE_OUTBOX: &str = "UPDATE push_outbox SET attempts = ?5, \
        next_attempt_at = ?6 WHERE tenant_id = ?1 AND task_id = ?2 AND config_id = ?3 \
        AND seq = ?4";
}
