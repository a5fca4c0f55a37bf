//! The `idempotency_keys` table: the claims of idempotency keys, written and read.

use diesel::QueryableByName;

use super::{decode_opt, encode, id};
use crate::domain::{ContextId, Message, TaskId, TenantId, Timestamp};
use crate::store::schema::idempotency_keys;
use crate::store::statement::{Dialect, Statement};
use crate::store::{Claim, StoreError};

/// The tenant's claim of `key`: a [`ClaimRow`], or none.
pub(in crate::store) fn claim(d: Dialect, tenant: &str, key: &str) -> Statement {
    let mut st = Statement::new(
        d,
        "SELECT tenant_id, idem_key, context_id, task_id, digest, reply, created_at, \
         reply_seq FROM idempotency_keys WHERE tenant_id = ",
    );
    st.text(tenant).push(" AND idem_key = ").packed(key);
    st.push(" LIMIT 1");
    st
}

/// The claims made from `from` (until `until`), oldest first, at most `max`:
/// [`KeyRow`]s.
pub(in crate::store) fn keys(
    d: Dialect,
    from: Timestamp,
    until: Option<Timestamp>,
    max: Option<usize>,
) -> Statement {
    let mut st = Statement::new(
        d,
        "SELECT tenant_id, idem_key, created_at FROM idempotency_keys WHERE created_at >= ",
    );
    st.int(from.millis());
    if let Some(until) = until {
        st.push(" AND created_at < ").int(until.millis());
    }
    st.push(" ORDER BY created_at");
    if let Some(max) = max {
        st.limit(max);
    }
    st
}

/// A claim's key and when it was made ([`keys`]).
#[derive(QueryableByName)]
#[diesel(table_name = idempotency_keys)]
pub(in crate::store) struct KeyRow {
    tenant_id: String,
    idem_key: String,
    created_at: i64,
}

impl KeyRow {
    pub(in crate::store) fn into_key(self) -> Result<(TenantId, String, Timestamp), StoreError> {
        let tenant = id("claim tenant", self.tenant_id, TenantId::from_store)?;
        Ok((tenant, self.idem_key, Timestamp(self.created_at)))
    }
}

pub(in crate::store) struct NewClaim<'a> {
    pub(in crate::store) tenant_id: &'a str,
    pub(in crate::store) idem_key: &'a str,
    pub(in crate::store) context_id: &'a str,
    pub(in crate::store) task_id: &'a str,
    pub(in crate::store) digest: &'a str,
    pub(in crate::store) reply: Option<String>,
    pub(in crate::store) created_at: i64,
}

impl<'a> NewClaim<'a> {
    pub(in crate::store) fn new(c: &'a Claim) -> Result<Self, StoreError> {
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

#[derive(QueryableByName)]
#[diesel(table_name = idempotency_keys)]
pub(in crate::store) struct ClaimRow {
    pub(in crate::store) tenant_id: String,
    pub(in crate::store) idem_key: String,
    pub(in crate::store) context_id: String,
    pub(in crate::store) task_id: String,
    pub(in crate::store) digest: String,
    pub(in crate::store) reply: Option<String>,
    pub(in crate::store) created_at: i64,
    /// The reply as a row of the claim's thread: the reader fills `Claim::reply` from it.
    pub(in crate::store) reply_seq: Option<i64>,
}

impl ClaimRow {
    pub(in crate::store) fn into_claim(self) -> Result<Claim, StoreError> {
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

/// Encodes a reply message for [`crate::store::WriteOp::SettleClaim`].
pub(in crate::store) fn encode_reply(reply: &Message) -> Result<String, StoreError> {
    encode("claim reply", reply)
}
