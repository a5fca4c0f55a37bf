//! The lease, kept on the session connection (which never waits on a lock): joining,
//! a renewal every `cluster.heartbeat_ms` (bounded by two heartbeats, so a silent
//! database is noticed well before the lease runs out), the live nodes and the leader as
//! each renewal reads them, rejoining with a new token after a loss, and leaving. The
//! LISTENs for other nodes' commits run on the same connection.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{Cluster, lock};
use crate::store::cluster::{self as sql, CLAIMS_CHANNEL, EVENTS_CHANNEL, Joined};
use crate::store::{StoreError, Within};

impl Cluster {
    pub(super) async fn try_join(&self) -> Result<Joined, StoreError> {
        let client = self.session.get().await?;
        let joined = sql::join(&client, &self.node_id, &self.url, self.ttl_ms).await?;
        if let Joined::Token(token) = joined {
            self.fence.set_token(token);
            *lock(&self.held_until) = Instant::now() + self.margin_ttl();
        }
        Ok(joined)
    }

    /// The lease as this node may count on it: a tenth less than the TTL, for the time a
    /// renewal takes to reach the database.
    fn margin_ttl(&self) -> Duration {
        Duration::from_millis((self.ttl_ms - self.ttl_ms / 10).max(1) as u64)
    }

    /// Whether this node leads the work done once for the cluster (the janitor's
    /// store-wide pass, the sweep of dead nodes' threads).
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::SeqCst) && self.holds_lease()
    }

    /// The lease was renewed recently enough to be this node's still.
    pub fn holds_lease(&self) -> bool {
        Instant::now() < *lock(&self.held_until) && !self.fence.is_lost()
    }

    /// Changes each time the node lost its lease: every thread actor must go (their
    /// commits carry the old token and are refused anyway).
    pub fn losses(&self) -> watch::Receiver<u64> {
        self.lost.subscribe()
    }

    /// The live nodes (id, URL) as of the last renewal.
    pub fn live_nodes(&self) -> Vec<(String, String)> {
        lock(&self.live_nodes).clone()
    }

    /// Gives the lease up (a graceful shutdown, once every commit is done): the other
    /// nodes take the threads over at once. Stops the renewals.
    pub async fn leave(&self) {
        let token = self.fence.token();
        // Before the fence: a lost lease wakes the renewals, which must not join again.
        self.left.store(true, Ordering::SeqCst);
        // No commit of this node may pass after this.
        self.fence.mark_lost();
        match self.session.get().await {
            Ok(client) => match sql::leave(&client, &self.node_id, token).await {
                Ok(()) => tracing::info!(node_id = %self.node_id, "left the cluster"),
                Err(e) => {
                    tracing::warn!(error = %e, "could not leave the cluster; the lease expires by itself")
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "could not leave the cluster; the lease expires by itself")
            }
        }
        self.stop();
    }

    pub(super) async fn refresh_nodes(&self) {
        let Ok(client) = self.session.get().await else {
            return;
        };
        match sql::live_nodes(&client).await {
            Ok(nodes) => {
                let leader = nodes.first().is_some_and(|(id, _)| *id == self.node_id);
                if leader != self.leader.swap(leader, Ordering::SeqCst) {
                    tracing::info!(node_id = %self.node_id, leader, "cluster leadership changed");
                }
                metrics::gauge!(crate::telemetry::CLUSTER_NODES).set(nodes.len() as f64);
                *lock(&self.live_nodes) = nodes;
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the cluster's nodes"),
        }
    }

    /// Renews the lease every `cluster.heartbeat_ms`; when a commit or a renewal finds it
    /// taken, drops every actor and joins again with a new token.
    pub(super) async fn renew_loop(self: Arc<Self>) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.heartbeat) => {}
                () = self.fence.lost() => {}
            }
            if self.left.load(Ordering::SeqCst) {
                return;
            }
            if self.fence.is_lost() {
                self.rejoin().await;
                continue;
            }
            let started = Instant::now();
            // A database cut off by the network answers nothing, and the node must know
            // it well before its lease runs out: a renewal has two heartbeats (at most
            // `store.answer_timeout_ms`). Its connection is kept: one the network lost
            // is closed by the kernel (`conn.rs`), and a slow one answers later.
            let bound = (self.heartbeat * 2).min(self.answer_timeout);
            let renewal = async {
                let client = self.session.get().await?;
                sql::renew(&client, &self.node_id, self.fence.token(), self.ttl_ms).await
            };
            let renewed = match self
                .silence
                .within("the cluster lease renewal", bound, renewal)
                .await
            {
                Within::Answered(renewed) => renewed,
                Within::Unanswered | Within::Silenced => Err(StoreError::Unavailable(format!(
                    "the renewal was not answered within two heartbeats ({} ms)",
                    bound.as_millis()
                ))),
            };
            match renewed {
                Ok(true) => {
                    *lock(&self.held_until) = started + self.margin_ttl();
                    self.refresh_nodes().await;
                }
                Ok(false) => {
                    tracing::warn!(node_id = %self.node_id, "the lease was taken over while it could not be renewed");
                    self.fence.mark_lost();
                }
                Err(e) => {
                    tracing::warn!(node_id = %self.node_id, error = %e, "cannot renew the cluster lease");
                    if !self.holds_lease() {
                        self.leader.store(false, Ordering::SeqCst);
                    }
                }
            }
        }
    }

    /// LISTENs for events while a subscriber of this node follows a task of another
    /// node, and UNLISTENs when none does; after it starts listening (again, or on a new
    /// connection) every watcher reads its task's log once. LISTENs for claims once the
    /// runtime's claim filter hears them, and tells it each time it starts again.
    pub(super) async fn listen_loop(self: Arc<Self>) {
        'listen: loop {
            let channels = [
                (
                    EVENTS_CHANNEL,
                    self.hub.watched() > 0,
                    &self.session.listening,
                ),
                (
                    CLAIMS_CHANNEL,
                    self.hub.wants_claims(),
                    &self.session.hearing_claims,
                ),
            ];
            for (channel, want, listening) in channels {
                if want == listening.load(Ordering::SeqCst) {
                    continue;
                }
                let sql = match want {
                    true => format!("LISTEN {channel}"),
                    false => format!("UNLISTEN {channel}"),
                };
                match self.session.get().await {
                    Ok(client) => match client.batch_execute(&sql).await {
                        Ok(()) => {
                            listening.store(want, Ordering::SeqCst);
                            match (channel, want) {
                                (EVENTS_CHANNEL, true) => self.hub.wake_all(),
                                (CLAIMS_CHANNEL, true) => self.hub.began_hearing_claims(),
                                _ => {}
                            }
                            continue 'listen;
                        }
                        Err(e) => tracing::warn!(error = %e, "cluster: {sql} failed"),
                    },
                    Err(e) => tracing::warn!(error = %e, "cluster: cannot {sql}"),
                }
            }
            // A change of the watched tasks, or a retry (and a check that the connection
            // still stands) once a heartbeat.
            tokio::select! {
                () = self.hub.changed() => {}
                () = tokio::time::sleep(self.heartbeat) => {}
            }
        }
    }

    /// After a loss: every actor goes, then the node joins again with a new token.
    async fn rejoin(&self) {
        metrics::counter!(crate::telemetry::CLUSTER_LEASE_LOSSES).increment(1);
        self.leader.store(false, Ordering::SeqCst);
        self.lost.send_modify(|n| *n += 1);
        while !self.left.load(Ordering::SeqCst) {
            match self.try_join().await {
                Ok(Joined::Token(token)) => {
                    tracing::warn!(node_id = %self.node_id, token, "lost the lease; rejoined with a new token (every thread reloads)");
                    self.refresh_nodes().await;
                    return;
                }
                Ok(Joined::InUse { remaining_ms }) => {
                    tokio::time::sleep(Duration::from_millis(remaining_ms.clamp(50, 1000) as u64))
                        .await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot rejoin the cluster");
                    tokio::time::sleep(self.heartbeat).await;
                }
            }
        }
    }
}
