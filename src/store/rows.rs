//! Row types and their conversion to and from the domain and store records.
//!
//! This is the only place that knows how a record is laid out in columns: JSON columns
//! hold the serde encoding of the domain types, states their `as_str` names. Inserts
//! borrow from the record being written; loaded rows own their data and are decoded
//! with [`StoreError::Corrupt`] for anything the database should never have held.
//!
//! Why this file is eight hundred lines: it holds every table's rows, the written form
//! (`New*`, borrowing) beside the read one (`*Row`, owning) and their codecs. They go
//! table by table beside each table's statements once a statement catalogue holds the
//! reads (see `reads.rs`); until then one table's twins sit together here.

use diesel::{Queryable, QueryableByName, Selectable};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::schema::{idempotency_keys, messages, push_configs, task_events, tasks, threads};
use super::{
    Claim, Delivery, MessageRecord, OutboxKey, StoreError, TaskRecord, ThreadRecord, ThreadStatus,
};
use crate::domain::{
    ContextId, Message, MessageId, Metadata, Part, PushAuth, PushConfig, PushDialect, PushPayload,
    Role, StreamEvent, Task, TaskId, TaskState, TaskStatus, TenantId, Timestamp, Transition,
};

fn encode<T: Serialize + ?Sized>(what: &str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::Query(format!("cannot encode {what}: {e}")))
}

fn decode<T: DeserializeOwned>(what: &str, raw: &str) -> Result<T, StoreError> {
    serde_json::from_str(raw).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

fn decode_opt<T: DeserializeOwned>(what: &str, raw: Option<&str>) -> Result<Option<T>, StoreError> {
    raw.map(|raw| decode(what, raw)).transpose()
}

/// Parses an id read back from a column (ids are checked before they are written).
fn id<T>(
    what: &str,
    raw: String,
    parse: fn(String) -> Result<T, crate::domain::IdError>,
) -> Result<T, StoreError> {
    parse(raw).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

/// A thread key read back from its columns.
pub(super) fn thread_key(
    tenant_id: String,
    thread_id: String,
) -> Result<(TenantId, ContextId), StoreError> {
    Ok((
        id("thread tenant", tenant_id, TenantId::from_store)?,
        id("thread id", thread_id, ContextId::parse)?,
    ))
}

pub(super) struct NewThread<'a> {
    pub(super) tenant_id: &'a str,
    pub(super) thread_id: &'a str,
    pub(super) created_at: i64,
    pub(super) updated_at: i64,
    pub(super) expires_at: i64,
    pub(super) status: &'static str,
    pub(super) conversation_context: String,
    /// Cluster mode: the writing node, which must own the thread (set by the Postgres
    /// store; `None` otherwise).
    pub(super) owner_node: Option<&'a str>,
    /// The thread's first row ([`super::WriteOp::InsertThread`]): inserted, not upserted.
    pub(super) first: bool,
}

impl<'a> NewThread<'a> {
    pub(super) fn new(r: &'a ThreadRecord) -> Result<Self, StoreError> {
        Ok(Self {
            tenant_id: r.tenant.as_str(),
            thread_id: r.thread_id.as_str(),
            created_at: r.created_at.millis(),
            updated_at: r.updated_at.millis(),
            expires_at: r.expires_at.millis(),
            status: r.status.as_str(),
            conversation_context: encode("conversation context", &r.conversation_context)?,
            owner_node: None,
            first: false,
        })
    }
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = threads)]
#[diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))]
pub(super) struct ThreadRow {
    tenant_id: String,
    thread_id: String,
    created_at: i64,
    updated_at: i64,
    expires_at: i64,
    status: String,
    conversation_context: String,
}

impl ThreadRow {
    pub(super) fn into_record(self) -> Result<ThreadRecord, StoreError> {
        let status = match self.status.as_str() {
            "active" => ThreadStatus::Active,
            "expired" => ThreadStatus::Expired,
            other => return Err(StoreError::Corrupt(format!("thread status {other:?}"))),
        };
        Ok(ThreadRecord {
            tenant: id("thread tenant", self.tenant_id, TenantId::from_store)?,
            thread_id: id("thread id", self.thread_id, ContextId::parse)?,
            created_at: Timestamp(self.created_at),
            updated_at: Timestamp(self.updated_at),
            expires_at: Timestamp(self.expires_at),
            status,
            conversation_context: decode("conversation context", &self.conversation_context)?,
        })
    }
}

pub(super) struct NewMessage<'a> {
    pub(super) tenant_id: &'a str,
    pub(super) thread_id: &'a str,
    pub(super) seq: i64,
    pub(super) message_id: Option<&'a str>,
    pub(super) task_id: Option<&'a str>,
    pub(super) role: &'a str,
    pub(super) author: Option<&'a str>,
    /// `''` when the content is the text of the parts ([`stored_content`]).
    pub(super) content: &'a str,
    pub(super) parts: String,
    pub(super) tool_calls: String,
    pub(super) metadata: Option<String>,
    pub(super) created_at: i64,
    pub(super) extensions: Option<String>,
    pub(super) reference_task_ids: Option<String>,
}

impl<'a> NewMessage<'a> {
    pub(super) fn new(r: &'a MessageRecord) -> Result<Self, StoreError> {
        Ok(Self {
            tenant_id: r.tenant.as_str(),
            thread_id: r.thread_id.as_str(),
            seq: r.seq,
            message_id: r.message_id.as_ref().map(MessageId::as_str),
            task_id: r.task_id.as_ref().map(TaskId::as_str),
            role: &r.role,
            author: r.author.as_deref(),
            content: stored_content(&r.content, &r.parts),
            parts: encode("message parts", &r.parts)?,
            tool_calls: encode("tool calls", &r.tool_calls)?,
            metadata: r
                .metadata
                .as_ref()
                .map(|m| encode("message metadata", m))
                .transpose()?,
            created_at: r.created_at.millis(),
            extensions: non_empty(&r.extensions)
                .map(|e| encode("message extensions", e))
                .transpose()?,
            reference_task_ids: non_empty(&r.reference_task_ids)
                .map(|ids| encode("referenced tasks", ids))
                .transpose()?,
        })
    }
}

fn non_empty<T>(list: &[T]) -> Option<&[T]> {
    (!list.is_empty()).then_some(list)
}

/// What the `content` column keeps of a message's text: nothing when it is the text of
/// its parts ([`Part::text_of`]), so an A2A message's text is stored once, in `parts`.
pub(super) fn stored_content<'a>(content: &'a str, parts: &[Part]) -> &'a str {
    if is_text_of(content, parts) {
        ""
    } else {
        content
    }
}

/// `content == Part::text_of(parts)`, without rendering the parts' text; false for an
/// empty `content` (nothing to save).
fn is_text_of(content: &str, parts: &[Part]) -> bool {
    let mut rest = content;
    let mut texts = parts.iter().filter_map(Part::as_text);
    let Some(first) = texts.next() else {
        return false;
    };
    let Some(after) = rest.strip_prefix(first) else {
        return false;
    };
    rest = after;
    for text in texts {
        match rest.strip_prefix('\n').and_then(|r| r.strip_prefix(text)) {
            Some(after) => rest = after,
            None => return false,
        }
    }
    rest.is_empty() && !content.is_empty()
}

#[derive(Clone, Queryable, Selectable)]
#[diesel(table_name = messages)]
#[diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))]
pub(super) struct MessageRow {
    pub(super) tenant_id: String,
    pub(super) thread_id: String,
    pub(super) seq: i64,
    pub(super) message_id: Option<String>,
    pub(super) task_id: Option<String>,
    pub(super) role: String,
    pub(super) author: Option<String>,
    pub(super) content: String,
    pub(super) parts: String,
    pub(super) tool_calls: String,
    pub(super) metadata: Option<String>,
    pub(super) created_at: i64,
    pub(super) extensions: Option<String>,
    pub(super) reference_task_ids: Option<String>,
}

impl MessageRow {
    pub(super) fn into_record(self) -> Result<MessageRecord, StoreError> {
        let parts: Vec<Part> = decode("message parts", &self.parts)?;
        let (extensions, reference_task_ids) = (self.extensions()?, self.reference_task_ids()?);
        Ok(MessageRecord {
            tenant: id("message tenant", self.tenant_id, TenantId::from_store)?,
            thread_id: id("message thread id", self.thread_id, ContextId::parse)?,
            seq: self.seq,
            message_id: self
                .message_id
                .map(|m| id("message id", m, MessageId::parse))
                .transpose()?,
            task_id: self
                .task_id
                .map(|t| id("message task id", t, TaskId::parse))
                .transpose()?,
            role: self.role,
            author: self.author,
            content: if self.content.is_empty() {
                Part::text_of(&parts)
            } else {
                self.content
            },
            parts,
            tool_calls: decode("tool calls", &self.tool_calls)?,
            metadata: decode_opt("message metadata", self.metadata.as_deref())?,
            created_at: Timestamp(self.created_at),
            extensions,
            reference_task_ids,
        })
    }

    fn extensions(&self) -> Result<Vec<String>, StoreError> {
        Ok(decode_opt("message extensions", self.extensions.as_deref())?.unwrap_or_default())
    }

    fn reference_task_ids(&self) -> Result<Vec<TaskId>, StoreError> {
        Ok(decode_opt("referenced tasks", self.reference_task_ids.as_deref())?.unwrap_or_default())
    }

    /// The A2A message this row records, as an entry of `task`'s history. Messages the
    /// session layer stored without an A2A id get a fresh one: A2A requires an id, and
    /// nothing refers to such a message by it.
    pub(super) fn to_history_message(&self, task: &TaskId) -> Result<Message, StoreError> {
        self.to_message(Some(task))
    }

    /// The A2A message this row records, of `task` or of none (a reply without a task).
    pub(super) fn to_message(&self, task: Option<&TaskId>) -> Result<Message, StoreError> {
        Ok(Message {
            message_id: match &self.message_id {
                Some(m) => id("message id", m.clone(), MessageId::parse)?,
                None => MessageId::generate(),
            },
            context_id: Some(id(
                "message thread id",
                self.thread_id.clone(),
                ContextId::parse,
            )?),
            task_id: task.cloned(),
            role: if self.role == "user" {
                Role::User
            } else {
                Role::Agent
            },
            parts: decode("message parts", &self.parts)?,
            metadata: decode_opt("message metadata", self.metadata.as_deref())?,
            extensions: self.extensions()?,
            reference_task_ids: self.reference_task_ids()?,
        })
    }
}

pub(super) struct NewTask<'a> {
    pub(super) tenant_id: &'a str,
    pub(super) task_id: &'a str,
    pub(super) context_id: &'a str,
    pub(super) state: &'static str,
    pub(super) status_message: Option<String>,
    pub(super) status_timestamp: i64,
    pub(super) artifacts: String,
    pub(super) transitions: String,
    pub(super) metadata: Option<String>,
    pub(super) created_at: i64,
    pub(super) updated_at: i64,
    /// The history entries this write appends (`seq`s, comma-separated; `''` for none):
    /// an upsert adds them to the stored list ([`super::writes`]).
    pub(super) history: String,
    pub(super) status_entry: Option<i64>,
    /// Set when the batch's final status update of the task is this row
    /// (`schema::tasks::final_event_seq`, [`super::writes`]).
    pub(super) final_event_seq: Option<i64>,
    /// The task's first row ([`super::WriteOp::InsertTask`]): inserted, not upserted.
    pub(super) first: bool,
}

impl<'a> NewTask<'a> {
    pub(super) fn new(r: &'a TaskRecord) -> Result<Self, StoreError> {
        let t = &r.task;
        Ok(Self {
            tenant_id: t.tenant.as_str(),
            task_id: t.id.as_str(),
            context_id: t.context_id.as_str(),
            state: t.status.state.as_str(),
            status_message: t
                .status
                .message
                .as_ref()
                .map(|m| encode("status message", m))
                .transpose()?,
            status_timestamp: t.status.timestamp.millis(),
            artifacts: encode("artifacts", &t.artifacts)?,
            transitions: encode("transitions", stored_transitions(t))?,
            metadata: t
                .metadata
                .as_ref()
                .map(|m| encode("task metadata", m))
                .transpose()?,
            created_at: t.created_at.millis(),
            updated_at: t.updated_at.millis(),
            history: String::new(),
            status_entry: r.status_entry,
            final_event_seq: None,
            first: false,
        })
    }
}

/// The transitions a task's row stores: all but those its other columns say — the first,
/// `submitted` at the task's creation, and the last, into the current state at the
/// status's time (an echo task stores none). [`read_transitions`] adds them back: a list
/// that does not start in `submitted` lacks the first (no task enters `submitted` later),
/// and one that does not end in the current state the last (a task's transitions change
/// state each; a status that keeps the state is not one). Rows written before kept them
/// all, and read the same.
pub(super) fn stored_transitions(t: &Task) -> &[Transition] {
    let mut list = &t.transitions[..];
    if let [rest @ .., last] = list
        && last.state == t.status.state
        && last.timestamp == t.status.timestamp
        && rest.last().is_none_or(|before| before.state != last.state)
    {
        list = rest;
    }
    if let [first, rest @ ..] = list
        && first.state == TaskState::Submitted
        && first.timestamp == t.created_at
    {
        list = rest;
    }
    list
}

/// A task's transitions from what its row stores ([`stored_transitions`]).
pub(super) fn read_transitions(
    mut stored: Vec<Transition>,
    state: TaskState,
    created_at: Timestamp,
    status_at: Timestamp,
) -> Vec<Transition> {
    if stored
        .first()
        .is_none_or(|first| first.state != TaskState::Submitted)
    {
        stored.insert(
            0,
            Transition {
                state: TaskState::Submitted,
                timestamp: created_at,
            },
        );
    }
    if stored.last().is_none_or(|last| last.state != state) {
        stored.push(Transition {
            state,
            timestamp: status_at,
        });
    }
    stored
}

/// Adds `seq` to a comma-separated history list.
pub(super) fn append_seq(list: &mut String, seq: i64) {
    use std::fmt::Write;
    if !list.is_empty() {
        list.push(',');
    }
    // Writing into a String cannot fail.
    let _ = write!(list, "{seq}");
}

/// The `seq`s of a stored history list, oldest first.
pub(super) fn history_seqs(raw: &str) -> Result<Vec<i64>, StoreError> {
    if raw.is_empty() {
        return Ok(Vec::new());
    }
    raw.split(',')
        .map(|n| {
            n.parse::<i64>()
                .map_err(|_| StoreError::Corrupt(format!("task history {raw:?}")))
        })
        .collect()
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = tasks)]
#[diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))]
pub(super) struct TaskRow {
    tenant_id: String,
    pub(super) task_id: String,
    context_id: String,
    state: String,
    status_message: Option<String>,
    pub(super) status_timestamp: i64,
    artifacts: String,
    transitions: String,
    metadata: Option<String>,
    created_at: i64,
    updated_at: i64,
    history: String,
    status_entry: Option<i64>,
    final_event_seq: Option<i64>,
}

impl TaskRow {
    /// The `seq` of the task's final status update if the row is that event (it is then
    /// not in the log): see `schema::tasks::final_event_seq`.
    pub(super) fn final_event_seq(&self) -> Option<i64> {
        self.final_event_seq
    }

    /// The sequence number of the task's last event, given the last one in its log.
    pub(super) fn last_event_seq(&self, logged: Option<i64>) -> i64 {
        logged.max(self.final_event_seq).unwrap_or(0)
    }

    /// The thread the task's history refers to.
    pub(super) fn context_id(&self) -> &str {
        &self.context_id
    }

    /// The `seq`s of the task's history in its thread, oldest first.
    pub(super) fn history_seqs(&self) -> Result<Vec<i64>, StoreError> {
        history_seqs(&self.history)
    }

    /// Which entry of the history list is the status message, if one is.
    pub(super) fn status_entry(&self) -> Option<usize> {
        self.status_entry.and_then(|e| usize::try_from(e).ok())
    }

    /// The task with the given history and, when the row names it by its history entry
    /// ([`Self::status_entry`]), status message; with `include_artifacts` false the
    /// artifacts column is not even decoded.
    pub(super) fn into_task(
        self,
        history: Vec<Message>,
        status_entry: Option<Message>,
        include_artifacts: bool,
    ) -> Result<Task, StoreError> {
        let state = TaskState::from_str_opt(&self.state)
            .ok_or_else(|| StoreError::Corrupt(format!("task state {:?}", self.state)))?;
        Ok(Task {
            id: id("task id", self.task_id, TaskId::parse)?,
            context_id: id("task context id", self.context_id, ContextId::parse)?,
            tenant: id("task tenant", self.tenant_id, TenantId::from_store)?,
            status: TaskStatus {
                state,
                message: match status_entry {
                    Some(message) => Some(message),
                    None => decode_opt("status message", self.status_message.as_deref())?,
                },
                timestamp: Timestamp(self.status_timestamp),
            },
            artifacts: if include_artifacts {
                decode("artifacts", &self.artifacts)?
            } else {
                Vec::new()
            },
            history,
            metadata: decode_opt::<Metadata>("task metadata", self.metadata.as_deref())?,
            transitions: read_transitions(
                decode("transitions", &self.transitions)?,
                state,
                Timestamp(self.created_at),
                Timestamp(self.status_timestamp),
            ),
            created_at: Timestamp(self.created_at),
            updated_at: Timestamp(self.updated_at),
            // The caller knows the event log; until it says, the first generation.
            generation: 1,
        })
    }
}

pub(super) struct NewTaskEvent<'a> {
    pub(super) tenant_id: &'a str,
    pub(super) task_id: &'a str,
    pub(super) seq: i64,
    pub(super) kind: &'static str,
    pub(super) payload: String,
    pub(super) created_at: i64,
    pub(super) message_seq: Option<i64>,
}

impl<'a> NewTaskEvent<'a> {
    /// Refuses `Task` snapshots: they are derived state, never part of the log. With
    /// `message_seq` (the thread's row of a status update's message; `Rows::collect` finds
    /// one for status updates only) the payload leaves the message out.
    pub(super) fn new(
        tenant: &'a TenantId,
        task_id: &'a TaskId,
        seq: i64,
        event: &StreamEvent,
        created_at: Timestamp,
        message_seq: Option<i64>,
    ) -> Result<Self, StoreError> {
        let kind = match event {
            StreamEvent::Task { .. } => {
                return Err(StoreError::Query(format!(
                    "task {task_id}: task snapshots are not logged as events"
                )));
            }
            StreamEvent::Message { .. } => "message",
            StreamEvent::StatusUpdate { .. } => "status_update",
            StreamEvent::ArtifactUpdate { .. } => "artifact_update",
        };
        let payload = match (event, message_seq) {
            (
                StreamEvent::StatusUpdate {
                    task_id,
                    context_id,
                    status,
                    metadata,
                },
                Some(_),
            ) => encode(
                "task event",
                &StatusUpdateWithoutMessage {
                    task_id,
                    context_id,
                    status: StatusWithoutMessage {
                        state: status.state,
                        timestamp: status.timestamp,
                    },
                    metadata,
                },
            )?,
            _ => encode("task event", event)?,
        };
        Ok(Self {
            tenant_id: tenant.as_str(),
            task_id: task_id.as_str(),
            seq,
            kind,
            payload,
            created_at: created_at.millis(),
            message_seq,
        })
    }
}

/// `StreamEvent::StatusUpdate`'s serde encoding without `status.message` (which
/// [`NewTaskEvent::message_seq`] names instead), written without copying the event.
#[derive(Serialize)]
#[serde(tag = "kind", rename = "status_update")]
struct StatusUpdateWithoutMessage<'a> {
    task_id: &'a TaskId,
    context_id: &'a ContextId,
    status: StatusWithoutMessage,
    metadata: &'a Option<Metadata>,
}

#[derive(Serialize)]
struct StatusWithoutMessage {
    state: TaskState,
    timestamp: Timestamp,
}

/// Decodes a logged event's payload.
pub(super) fn decode_event(payload: &str) -> Result<StreamEvent, StoreError> {
    decode("task event", payload)
}

/// A logged event as read back: its payload, and the thread's row of its status
/// message when the payload leaves that out.
#[derive(Queryable, Selectable)]
#[diesel(table_name = task_events)]
#[diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))]
pub(super) struct EventRow {
    pub(super) seq: i64,
    pub(super) payload: String,
    pub(super) message_seq: Option<i64>,
}

pub(super) struct NewPushConfig<'a> {
    pub(super) tenant_id: &'a str,
    pub(super) task_id: &'a str,
    pub(super) config_id: &'a str,
    pub(super) dialect: &'static str,
    pub(super) url: &'a str,
    pub(super) token: Option<&'a str>,
    pub(super) auth_scheme: Option<&'a str>,
    pub(super) auth_credentials: Option<&'a str>,
    pub(super) created_at: i64,
}

impl<'a> NewPushConfig<'a> {
    pub(super) fn new(c: &'a PushConfig) -> Self {
        Self {
            tenant_id: c.tenant.as_str(),
            task_id: c.task_id.as_str(),
            config_id: &c.id,
            dialect: c.dialect.as_str(),
            url: &c.url,
            token: c.token.as_deref(),
            auth_scheme: c.auth.as_ref().map(|a| a.scheme.as_str()),
            auth_credentials: c.auth.as_ref().and_then(|a| a.credentials.as_deref()),
            created_at: c.created_at.millis(),
        }
    }
}

#[derive(Queryable, Selectable, QueryableByName)]
#[diesel(table_name = push_configs)]
#[diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))]
pub(super) struct PushConfigRow {
    tenant_id: String,
    task_id: String,
    config_id: String,
    dialect: String,
    url: String,
    token: Option<String>,
    auth_scheme: Option<String>,
    auth_credentials: Option<String>,
    created_at: i64,
}

impl PushConfigRow {
    pub(super) fn into_config(self) -> Result<PushConfig, StoreError> {
        let dialect = PushDialect::parse(&self.dialect).ok_or_else(|| {
            StoreError::Corrupt(format!("push config dialect {:?}", self.dialect))
        })?;
        Ok(PushConfig {
            tenant: id("push config tenant", self.tenant_id, TenantId::from_store)?,
            task_id: id("push config task", self.task_id, TaskId::parse)?,
            id: self.config_id,
            url: self.url,
            token: self.token,
            auth: self.auth_scheme.map(|scheme| PushAuth {
                scheme,
                credentials: self.auth_credentials,
            }),
            dialect,
            created_at: Timestamp(self.created_at),
        })
    }
}

pub(super) struct NewOutboxRow<'a> {
    pub(super) tenant_id: &'a str,
    pub(super) task_id: &'a str,
    pub(super) config_id: &'a str,
    pub(super) seq: i64,
    pub(super) payload: String,
    pub(super) created_at: i64,
    pub(super) attempts: i64,
    pub(super) next_attempt_at: i64,
}

impl<'a> NewOutboxRow<'a> {
    pub(super) fn new(
        tenant: &'a TenantId,
        task_id: &'a TaskId,
        config_id: &'a str,
        seq: i64,
        payload: &PushPayload,
        created_at: Timestamp,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            tenant_id: tenant.as_str(),
            task_id: task_id.as_str(),
            config_id,
            seq,
            payload: encode("push payload", payload)?,
            created_at: created_at.millis(),
            attempts: 0,
            next_attempt_at: created_at.millis(),
        })
    }
}

/// A due outbox row joined with its config (`Store::due_deliveries`).
#[derive(QueryableByName)]
pub(super) struct DeliveryRow {
    #[diesel(embed)]
    config: PushConfigRow,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    seq: i64,
    #[diesel(sql_type = diesel::sql_types::Text)]
    payload: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    logged_at: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    attempts: i64,
}

impl DeliveryRow {
    pub(super) fn into_delivery(self) -> Result<Delivery, StoreError> {
        let config = self.config.into_config()?;
        Ok(Delivery {
            key: OutboxKey {
                tenant: config.tenant.clone(),
                task_id: config.task_id.clone(),
                config_id: config.id.clone(),
                seq: self.seq,
            },
            payload: decode("push payload", &self.payload)?,
            created_at: Timestamp(self.logged_at),
            attempts: self.attempts,
            config: std::sync::Arc::new(config),
        })
    }
}

/// An owed delivery with when it is next due ([`reads::owed_deliveries`]).
#[derive(diesel::QueryableByName)]
pub(super) struct OwedRow {
    #[diesel(embed)]
    delivery: DeliveryRow,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    next_attempt_at: i64,
}

impl OwedRow {
    pub(super) fn into_owed(self) -> Result<(Delivery, Timestamp), StoreError> {
        Ok((
            self.delivery.into_delivery()?,
            Timestamp(self.next_attempt_at),
        ))
    }
}

pub(super) struct NewClaim<'a> {
    pub(super) tenant_id: &'a str,
    pub(super) idem_key: &'a str,
    pub(super) context_id: &'a str,
    pub(super) task_id: &'a str,
    pub(super) digest: &'a str,
    pub(super) reply: Option<String>,
    pub(super) created_at: i64,
}

impl<'a> NewClaim<'a> {
    pub(super) fn new(c: &'a Claim) -> Result<Self, StoreError> {
        Ok(Self {
            tenant_id: c.tenant.as_str(),
            idem_key: &c.key,
            context_id: c.context_id.as_str(),
            task_id: c.task_id.as_str(),
            digest: &c.digest,
            reply: c
                .reply
                .as_ref()
                .map(|m| encode("claim reply", m))
                .transpose()?,
            created_at: c.created_at.millis(),
        })
    }
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = idempotency_keys)]
#[diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))]
pub(super) struct ClaimRow {
    pub(super) tenant_id: String,
    pub(super) idem_key: String,
    pub(super) context_id: String,
    pub(super) task_id: String,
    pub(super) digest: String,
    pub(super) reply: Option<String>,
    pub(super) created_at: i64,
    /// The reply as a row of the claim's thread: the reader fills `Claim::reply` from it.
    pub(super) reply_seq: Option<i64>,
}

impl ClaimRow {
    pub(super) fn into_claim(self) -> Result<Claim, StoreError> {
        Ok(Claim {
            known_unclaimed: false,
            tenant: id("claim tenant", self.tenant_id, TenantId::from_store)?,
            key: self.idem_key,
            context_id: id("claim context", self.context_id, ContextId::parse)?,
            task_id: id("claim task", self.task_id, TaskId::parse)?,
            digest: self.digest,
            reply: decode_opt("claim reply", self.reply.as_deref())?,
            created_at: Timestamp(self.created_at),
            taken_over_before: Timestamp(0),
        })
    }
}

/// Encodes a reply message for [`super::WriteOp::SettleClaim`].
pub(super) fn encode_reply(reply: &Message) -> Result<String, StoreError> {
    encode("claim reply", reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task_going_through(steps: &[(TaskState, i64)]) -> Task {
        let first = Message::agent(ContextId::parse("c").unwrap(), None, vec![Part::text("hi")]);
        let mut task = Task::submitted(
            TaskId::parse("t").unwrap(),
            ContextId::parse("c").unwrap(),
            TenantId::parse("acme").unwrap(),
            first,
            Timestamp(10),
        );
        for &(state, at) in steps {
            task.set_status(TaskStatus {
                state,
                message: None,
                timestamp: Timestamp(at),
            });
        }
        task
    }

    /// Every way through the states a task's row stores fewer transitions for reads back
    /// the same; an echo task stores none.
    #[test]
    fn transitions_the_row_says_otherwise_are_not_stored_and_read_back_the_same() {
        use TaskState::*;
        let cases: &[(&[(TaskState, i64)], usize)] = &[
            (&[], 0),
            (&[(Completed, 10)], 0),
            (&[(Completed, 20)], 0),
            (&[(Working, 10), (Completed, 20)], 1),
            (&[(Working, 15), (Working, 20)], 1),
            (&[(Working, 15), (InputRequired, 20), (Working, 30)], 2),
            (
                &[
                    (Working, 15),
                    (InputRequired, 20),
                    (Working, 30),
                    (Failed, 40),
                ],
                3,
            ),
            (&[(Submitted, 12)], 0),
            (&[(Rejected, 10)], 0),
        ];
        for (steps, stored) in cases {
            let task = task_going_through(steps);
            let kept = stored_transitions(&task);
            assert_eq!(kept.len(), *stored, "{steps:?}");
            let read = read_transitions(
                kept.to_vec(),
                task.status.state,
                task.created_at,
                task.status.timestamp,
            );
            assert_eq!(read, task.transitions, "{steps:?}");
        }
        // A task made at another time than its first transition keeps that one.
        let mut task = task_going_through(&[(Completed, 20)]);
        task.created_at = Timestamp(5);
        let kept = stored_transitions(&task);
        assert_eq!(kept.len(), 1);
        let read = read_transitions(kept.to_vec(), Completed, Timestamp(5), Timestamp(20));
        assert_eq!(read, task.transitions);
        // Rows written before stored every transition: read as they are.
        let task = task_going_through(&[(Working, 15), (Completed, 20)]);
        let read = read_transitions(
            task.transitions.clone(),
            Completed,
            task.created_at,
            Timestamp(20),
        );
        assert_eq!(read, task.transitions);
    }
}
