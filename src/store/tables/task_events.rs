//! The `task_events` table: a task's event log, written and read.

use diesel::QueryableByName;
use serde::Serialize;

use super::{decode, encode};
use crate::domain::{ContextId, Metadata, StreamEvent, TaskId, TaskState, TenantId, Timestamp};
use crate::store::StoreError;
use crate::store::schema::task_events;
use crate::store::statement::{Dialect, List, Statement};

/// The `seq` of the last logged event of each of the tenant's tasks `ids` (not empty):
/// [`LastSeqRow`]s.
pub(in crate::store) fn last_seqs(d: Dialect, tenant: &str, ids: &[&str]) -> Statement {
    let mut st = Statement::new(
        d,
        "SELECT task_id, max(seq) AS seq FROM task_events WHERE tenant_id = ",
    );
    st.text(tenant)
        .push(" AND ")
        .any("task_id", List::ids(ids.iter().copied()));
    st.push(" GROUP BY task_id");
    st
}

/// At most `max` of the task's events after `after_seq`, in order: [`EventRow`]s.
pub(in crate::store) fn after(
    d: Dialect,
    tenant: &str,
    task_id: &str,
    after_seq: i64,
    max: usize,
) -> Statement {
    let mut st = Statement::new(
        d,
        "SELECT seq, payload, message_seq FROM task_events WHERE tenant_id = ",
    );
    st.text(tenant).push(" AND task_id = ").packed(task_id);
    st.push(" AND seq > ").int(after_seq);
    st.push(" ORDER BY seq").limit(max);
    st
}

/// A task's last logged event's `seq` ([`last_seqs`]).
#[derive(QueryableByName)]
pub(in crate::store) struct LastSeqRow {
    #[diesel(sql_type = crate::store::packed::Packed)]
    pub(in crate::store) task_id: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    pub(in crate::store) seq: Option<i64>,
}

pub(in crate::store) struct NewTaskEvent<'a> {
    pub(in crate::store) tenant_id: &'a str,
    pub(in crate::store) task_id: &'a str,
    pub(in crate::store) seq: i64,
    pub(in crate::store) kind: &'static str,
    pub(in crate::store) payload: String,
    pub(in crate::store) created_at: i64,
    pub(in crate::store) message_seq: Option<i64>,
}

impl<'a> NewTaskEvent<'a> {
    /// Refuses `Task` snapshots: they are derived state, never part of the log. With
    /// `message_seq` (the thread's row of a status update's message; `Rows::collect` finds
    /// one for status updates only) the payload leaves the message out.
    pub(in crate::store) fn new(
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
pub(in crate::store) fn decode_event(payload: &str) -> Result<StreamEvent, StoreError> {
    decode("task event", payload)
}

/// A logged event as read back: its payload, and the thread's row of its status
/// message when the payload leaves that out.
#[derive(QueryableByName)]
#[diesel(table_name = task_events)]
pub(in crate::store) struct EventRow {
    pub(in crate::store) seq: i64,
    pub(in crate::store) payload: String,
    pub(in crate::store) message_seq: Option<i64>,
}
