//! What dead nodes left behind, taken over by a live one: their owed push deliveries
//! (by any node, each batch fenced like a thread's takeover) and their threads with a task
//! still working (by the leader's sweep, `runtime/lifecycle/cluster.rs`).

use super::Cluster;
use crate::domain::{ContextId, TenantId};
use crate::error::Result;
use crate::store::cluster::{self as sql, Unswept};

/// The cluster's view of its dead nodes ([`Cluster::dead`]).
#[derive(Clone, Copy)]
pub struct DeadNodes<'a> {
    pub(super) cluster: &'a Cluster,
}

impl DeadNodes<'_> {
    /// Takes over the owed push deliveries of dead nodes (and with `free` those of no
    /// node, which reads the whole outbox), at most [`sql::ADOPT_BATCH`] of each; how
    /// many. Nothing while this node does not hold its lease.
    pub async fn adopt_owed(&self, free: bool) -> Result<u64> {
        if !self.cluster.holds_lease() {
            return Ok(0);
        }
        let client = self.cluster.claims.get().await?;
        let adopted = sql::adopt_owed(&client, &self.cluster.node_id, free).await?;
        if adopted > 0 {
            metrics::counter!(crate::telemetry::CLUSTER_PUSH_ADOPTED).increment(adopted);
            tracing::info!(
                adopted,
                "took over owed push deliveries of nodes whose lease expired"
            );
        }
        Ok(adopted)
    }

    /// The dead nodes whose threads nobody has looked through since they died.
    pub async fn unswept(&self) -> Result<Vec<Unswept>> {
        let client = self.cluster.claims.get().await?;
        Ok(sql::unswept(&client).await?)
    }

    /// Records that a dead node's threads were looked through.
    pub async fn swept(&self, node: &Unswept) -> Result<()> {
        let client = self.cluster.claims.get().await?;
        Ok(sql::swept(&client, node).await?)
    }

    /// Threads `node_id` owns that have a task still working, at most `limit`.
    pub async fn left_working(
        &self,
        node_id: &str,
        limit: i64,
    ) -> Result<Vec<(TenantId, ContextId)>> {
        let client = self.cluster.claims.get().await?;
        let rows = sql::left_working(&client, node_id, limit).await?;
        Ok(rows
            .into_iter()
            .filter_map(|(tenant, thread)| {
                Some((
                    TenantId::from_store(tenant).ok()?,
                    ContextId::parse(thread).ok()?,
                ))
            })
            .collect())
    }
}
