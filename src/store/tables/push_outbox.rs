//! The `push_outbox` table: the deliveries still owed, written and read.

use diesel::QueryableByName;

use super::push_configs::PushConfigRow;
use super::{decode, encode};
use crate::domain::{PushPayload, TaskId, TenantId, Timestamp};
use crate::store::statement::{Dialect, Statement, limit};
use crate::store::{Delivery, OutboxKey, StoreError};

/// The earliest owed delivery of each config whose time has come, at most `max`, oldest
/// first, with its config: [`DeliveryRow`]s. The owed rows are chosen first, by
/// themselves, so that the planner walks `push_outbox_due` in order and stops after
/// `max` of them, and each one's config is then looked up by its key (on Postgres,
/// `OFFSET 0` keeps the lookup from being merged into a join the planner may run by
/// reading every config). Joined in one query, Postgres misjudged the join's size on
/// tables without statistics and read both whole on every poll (76 ms a poll at 28 000
/// owed). The two numbers are written into the SQL (the statement is not kept
/// prepared), as they always were; a node's id (`share`) is bound.
///
/// On Postgres the owed rows come from the functions `a2a_due_deliveries` and
/// `a2a_owned_due_deliveries` (migration `…_due_plan`), which hold the plan that walks
/// the index in order whatever the statistics say: inline, a plan made from statistics
/// of a smaller outbox read every due row per poll. Each cluster node reads only the
/// rows it owns (`push_outbox.node_id`, through `push_outbox_owned`), and the earliest
/// row of a config may be another node's: the config's later rows then wait for that
/// node (a config's events stay in order while a thread's rows are shared between its
/// old and new owner). SQLite (one process, every row its own) chooses them inline and
/// joins their configs plainly: its planner looks each up by its key anyway, and it has
/// no `LATERAL`.
pub(in crate::store) fn due(
    d: Dialect,
    now: Timestamp,
    max: usize,
    share: OutboxShare<'_>,
) -> Statement {
    let (now, max) = (now.millis(), limit(max));
    let mut st = Statement::new(
        d,
        "SELECT c.tenant_id, c.task_id, c.config_id, c.dialect, c.url, c.token, \
         c.auth_scheme, c.auth_credentials, c.created_at, o.seq, o.payload, \
         o.created_at AS logged_at, o.attempts FROM ",
    );
    st.uncached();
    match d {
        Dialect::Postgres => {
            match share {
                OutboxShare::All => st.push(&format!("a2a_due_deliveries({now}, {max})")),
                OutboxShare::Node(node) => st
                    .push(&format!("a2a_owned_due_deliveries({now}, {max}, "))
                    .text(node)
                    .push(")"),
            };
            st.push(
                " o CROSS JOIN LATERAL (SELECT * FROM push_configs k \
                 WHERE k.tenant_id = o.tenant_id AND k.task_id = o.task_id \
                 AND k.config_id = o.config_id OFFSET 0) c",
            );
        }
        Dialect::Sqlite => {
            st.push(&format!(
                "(SELECT * FROM push_outbox d WHERE d.next_attempt_at <= {now} \
                 AND NOT EXISTS (SELECT 1 FROM push_outbox p \
                     WHERE p.tenant_id = d.tenant_id AND p.task_id = d.task_id \
                     AND p.config_id = d.config_id AND p.seq < d.seq) \
                 ORDER BY d.next_attempt_at, d.seq LIMIT {max}) o \
                 JOIN push_configs c ON c.tenant_id = o.tenant_id \
                 AND c.task_id = o.task_id AND c.config_id = o.config_id"
            ));
        }
    }
    st.push(" ORDER BY o.next_attempt_at, o.seq");
    st
}

/// Which owed rows a store's poll of the outbox reads ([`due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum OutboxShare<'a> {
    /// Every row: a server without cluster mode (on SQLite, which has no owner
    /// column; on Postgres, where such a server makes every row one of no node when it
    /// opens the store).
    All,
    /// The rows of this cluster node.
    Node(&'a str),
}

/// Every owed delivery with its config and next attempt, at most `max`: [`OwedRow`]s.
pub(in crate::store) fn owed(d: Dialect, max: usize) -> Statement {
    let mut st = Statement::new(
        d,
        "SELECT c.tenant_id, c.task_id, c.config_id, c.dialect, c.url, c.token, \
         c.auth_scheme, c.auth_credentials, c.created_at, o.seq, o.payload, \
         o.created_at AS logged_at, o.attempts, o.next_attempt_at \
         FROM push_outbox o JOIN push_configs c ON c.tenant_id = o.tenant_id \
         AND c.task_id = o.task_id AND c.config_id = o.config_id",
    );
    st.limit(max);
    st
}

/// How many deliveries are owed: a [`Count`](super::Count).
pub(in crate::store) fn depth(d: Dialect) -> Statement {
    Statement::new(d, "SELECT count(*) AS n FROM push_outbox")
}

pub(in crate::store) struct NewOutboxRow<'a> {
    pub(in crate::store) tenant_id: &'a str,
    pub(in crate::store) task_id: &'a str,
    pub(in crate::store) config_id: &'a str,
    pub(in crate::store) seq: i64,
    pub(in crate::store) payload: String,
    pub(in crate::store) created_at: i64,
    pub(in crate::store) attempts: i64,
    pub(in crate::store) next_attempt_at: i64,
}

impl<'a> NewOutboxRow<'a> {
    pub(in crate::store) fn new(
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
pub(in crate::store) struct DeliveryRow {
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
    pub(in crate::store) fn into_delivery(self) -> Result<Delivery, StoreError> {
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

/// An owed delivery with when it is next due ([`owed`]).
#[derive(QueryableByName)]
pub(in crate::store) struct OwedRow {
    #[diesel(embed)]
    delivery: DeliveryRow,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    next_attempt_at: i64,
}

impl OwedRow {
    pub(in crate::store) fn into_owed(self) -> Result<(Delivery, Timestamp), StoreError> {
        Ok((
            self.delivery.into_delivery()?,
            Timestamp(self.next_attempt_at),
        ))
    }
}
