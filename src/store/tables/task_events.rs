//! The `task_events` table: a task's event log, written and read.

use diesel::{Queryable, Selectable};
use serde::Serialize;

use super::{decode, encode};
use crate::domain::{ContextId, Metadata, StreamEvent, TaskId, TaskState, TenantId, Timestamp};
use crate::store::StoreError;
use crate::store::schema::task_events;

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
#[derive(Queryable, Selectable)]
#[diesel(table_name = task_events)]
#[diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))]
pub(in crate::store) struct EventRow {
    pub(in crate::store) seq: i64,
    pub(in crate::store) payload: String,
    pub(in crate::store) message_seq: Option<i64>,
}
