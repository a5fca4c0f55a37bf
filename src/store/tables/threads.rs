//! The `threads` table: a conversation thread's row, written and read.

use diesel::{Queryable, Selectable};

use super::{decode, encode, id};
use crate::domain::{ContextId, TenantId, Timestamp};
use crate::store::schema::threads;
use crate::store::{StoreError, ThreadRecord, ThreadStatus};

/// A thread key read back from its columns.
pub(in crate::store) fn thread_key(
    tenant_id: String,
    thread_id: String,
) -> Result<(TenantId, ContextId), StoreError> {
    Ok((
        id("thread tenant", tenant_id, TenantId::from_store)?,
        id("thread id", thread_id, ContextId::parse)?,
    ))
}

pub(in crate::store) struct NewThread<'a> {
    pub(in crate::store) tenant_id: &'a str,
    pub(in crate::store) thread_id: &'a str,
    pub(in crate::store) created_at: i64,
    pub(in crate::store) updated_at: i64,
    pub(in crate::store) expires_at: i64,
    pub(in crate::store) status: &'static str,
    pub(in crate::store) conversation_context: String,
    /// Cluster mode: the writing node, which must own the thread (set by the Postgres
    /// store; `None` otherwise).
    pub(in crate::store) owner_node: Option<&'a str>,
    /// The thread's first row ([`crate::store::WriteOp::InsertThread`]): inserted, not upserted.
    pub(in crate::store) first: bool,
}

impl<'a> NewThread<'a> {
    pub(in crate::store) fn new(r: &'a ThreadRecord) -> Result<Self, StoreError> {
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
pub(in crate::store) struct ThreadRow {
    tenant_id: String,
    thread_id: String,
    created_at: i64,
    updated_at: i64,
    expires_at: i64,
    status: String,
    conversation_context: String,
}

impl ThreadRow {
    pub(in crate::store) fn into_record(self) -> Result<ThreadRecord, StoreError> {
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
