//! A turn's hold on its thread checked without a write: the condition every memory write
//! under a hold makes in its own statement ([`check_hold`]), and [`HoldCheck`], which
//! makes it for the knowledge skill's git commits.

use std::sync::Arc;

use super::statements;
use crate::domain::TenantId;
use crate::store::fence::{Fence, ThreadHold};
use crate::store::{StoreError, postgres, queries};

/// Checks, on Postgres connection `conn`, that node `node` still holds `hold` and no
/// other node owns its thread — the condition every memory write under a hold makes —
/// without writing anything: [`StoreError::Fenced`] otherwise.
pub(crate) async fn check_hold(
    conn: &mut diesel_async::AsyncPgConnection,
    node: &str,
    tenant: &TenantId,
    hold: ThreadHold<'_>,
) -> Result<(), StoreError> {
    use diesel_async::RunQueryDsl;
    let gate = statements::Gate::new(node, tenant, hold);
    super::postgres::query(statements::check_hold(&gate))
        .execute(conn)
        .await
        .map_err(super::repository::write_error)?;
    Ok(())
}

/// Checks a turn's hold on its thread for a tool whose writes cannot join a database
/// statement: the knowledge skill's git commits. It reads what the memory skill's writes
/// check in their own statement (the node's token, the thread's owner) just before the
/// write, so a node that was frozen and has woken up finds its hold gone and writes
/// nothing; only a node frozen between this check and the end of its write (a git
/// commit: milliseconds) can still write after a takeover.
pub struct HoldCheck {
    pool: diesel_async::pooled_connection::deadpool::Pool<diesel_async::AsyncPgConnection>,
    fence: Arc<Fence>,
    acquire_timeout: std::time::Duration,
}

impl HoldCheck {
    /// In cluster mode (`cfg.fence`), a check on the store's database over one connection
    /// of its own (none opened yet); `None` otherwise.
    pub fn open(cfg: &crate::store::StoreConfig) -> Result<Option<Arc<HoldCheck>>, StoreError> {
        let (Some((fence, _)), crate::store::Location::Postgres(url)) =
            (&cfg.fence, cfg.location()?)
        else {
            return Ok(None);
        };
        Ok(Some(Arc::new(HoldCheck {
            pool: postgres::pool(&url, 1, "postgres hold check")?,
            fence: fence.clone(),
            acquire_timeout: cfg.acquire_timeout(),
        })))
    }

    /// `Ok` while this node holds `hold`'s token and no other node owns its thread;
    /// [`StoreError::Fenced`] otherwise (the memory writes' own condition,
    /// [`check_hold`]).
    pub async fn check(
        &self,
        tenant: &crate::domain::TenantId,
        hold: ThreadHold<'_>,
    ) -> Result<(), StoreError> {
        let mut conn = queries::checkout(&self.pool, self.acquire_timeout, "hold check").await?;
        check_hold(&mut conn, self.fence.node_id(), tenant, hold).await
    }
}
