//! The `threads` table: a conversation thread's row, written and read.

use diesel::QueryableByName;

use super::{decode, encode, id};
use crate::domain::{ContextId, TenantId, Timestamp};
use crate::store::schema::threads;
use crate::store::statement::{Dialect, Statement};
use crate::store::{DueThread, StoreError, ThreadRecord, ThreadStatus};

/// The columns a [`ThreadRow`] is read from.
const COLUMNS: &str =
    "tenant_id, thread_id, created_at, updated_at, expires_at, status, conversation_context";

/// The tenant's thread `thread_id`: a [`ThreadRow`], or none.
pub(in crate::store) fn row(d: Dialect, tenant: &str, thread_id: &str) -> Statement {
    let mut st = Statement::new(d, "SELECT ");
    st.push(COLUMNS)
        .push(" FROM threads WHERE tenant_id = ")
        .text(tenant);
    st.push(" AND thread_id = ")
        .packed(thread_id)
        .push(" LIMIT 1");
    st
}

/// At most `max` threads in `status` whose time ran out by `now`, after `after`, by
/// expiry then key: [`ThreadKeyRow`]s (the janitor's pages).
pub(in crate::store) fn due(
    d: Dialect,
    status: ThreadStatus,
    now: Timestamp,
    after: Option<&DueThread>,
    max: usize,
) -> Statement {
    let mut st = Statement::new(
        d,
        "SELECT tenant_id, thread_id, expires_at FROM threads WHERE status = ",
    );
    st.text(status.as_str())
        .push(" AND expires_at <= ")
        .int(now.millis());
    if let Some(c) = after {
        let (at, tenant) = (c.expires_at.millis(), c.tenant.as_str());
        st.push(" AND (expires_at > ").int(at);
        st.push(" OR (expires_at = ").int(at);
        st.push(" AND (tenant_id > ").text(tenant);
        st.push(" OR (tenant_id = ").text(tenant);
        st.push(" AND thread_id > ").packed(c.thread_id.as_str());
        st.push("))))");
    }
    st.push(" ORDER BY expires_at, tenant_id, thread_id")
        .limit(max);
    st
}

/// At most `max` active threads that have not expired by `now`, the latest to expire
/// first: [`ThreadKeyRow`]s (the start-up recovery's).
pub(in crate::store) fn recent(d: Dialect, now: Timestamp, max: usize) -> Statement {
    let mut st = Statement::new(
        d,
        "SELECT tenant_id, thread_id, expires_at FROM threads WHERE status = ",
    );
    st.text(ThreadStatus::Active.as_str())
        .push(" AND expires_at > ")
        .int(now.millis());
    st.push(" ORDER BY expires_at DESC, tenant_id, thread_id")
        .limit(max);
    st
}

/// A thread's key and expiry, as [`due`] and [`recent`] read them.
#[derive(QueryableByName)]
#[diesel(table_name = threads)]
pub(in crate::store) struct ThreadKeyRow {
    tenant_id: String,
    thread_id: String,
    expires_at: i64,
}

impl ThreadKeyRow {
    pub(in crate::store) fn into_due(self) -> Result<DueThread, StoreError> {
        let (tenant, thread_id) = thread_key(self.tenant_id, self.thread_id)?;
        Ok(DueThread {
            tenant,
            thread_id,
            expires_at: Timestamp(self.expires_at),
        })
    }

    pub(in crate::store) fn into_key(self) -> Result<(TenantId, ContextId), StoreError> {
        thread_key(self.tenant_id, self.thread_id)
    }
}

/// A thread key read back from its columns.
fn thread_key(tenant_id: String, thread_id: String) -> Result<(TenantId, ContextId), StoreError> {
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

#[derive(QueryableByName)]
#[diesel(table_name = threads)]
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
