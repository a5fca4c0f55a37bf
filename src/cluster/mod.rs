//! Cluster mode: several nodes on one Postgres database, each thread served by one node
//! at a time.
//!
//! - **Leases** (`session.rs`). A node joins with a row in `cluster_nodes` (its id, its
//!   URL, a lease renewed every `cluster.heartbeat_ms`, and a fencing token), and owns
//!   the threads whose `owner_node` names it — written with every upsert of the thread,
//!   so owning a new thread costs no statement of its own. A thread's owner is the only
//!   node that loads it into an actor.
//! - **Fencing.** Every batch a thread actor commits carries the token its node held when
//!   the actor was created ([`crate::store::WriteOp::Fence`]); the commit checks it
//!   against the node's row under a KEY SHARE lock. Taking a thread over from a node whose
//!   lease expired raises that node's token first, under a row lock that waits for its
//!   commits in flight — so a node that was only frozen, and wakes up, writes nothing
//!   more. It notices ([`Fence::lost`]), drops every actor, and joins again with a new
//!   token.
//! - **Placement** ([`Cluster::place`]): a thread not in the store yet is this node's
//!   (its first upsert names it, and is refused if another node wrote it first); a thread
//!   with no owner is claimed; a thread of a live node is that node's (the request is
//!   forwarded to it, `forward.rs`); a thread of a dead node is taken over.
//! - **Streams across nodes** (`notify.rs`): commits notify the task and sequence of the
//!   events they log; a subscriber on another node reads them from the log.
//! - **Idempotency keys across nodes** (`notify.rs`): commits notify the keys they claim,
//!   which every other node's claim filter adds, so a new key reads nothing on any node.
//! - **Push deliveries** are made by the node that committed their events (each outbox
//!   row names it); a dead node's are taken over by the next live node that looks
//!   ([`DeadNodes::adopt_owed`]), fenced like a thread's takeover.
//! - **Work done once for the cluster** (the janitor's store-wide pass, the sweep of
//!   dead nodes' threads) runs on the *leader*: the live node with the smallest id, as
//!   every node reads it at each renewal.
//!
//! The SQL is in `crate::store::cluster`. No consensus of our own: Postgres decides.

mod conn;
mod dead;
pub mod deadline;
pub mod forward;
pub mod notify;
mod session;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::Arbiter;
use tokio::sync::watch;

use crate::config::ClusterSettings;
use crate::domain::{ContextId, TenantId};
use crate::error::{Error, Result};
use crate::store::cluster::{self as sql, Joined, Owner, Ownership, Taken};
use crate::store::fence::Fence;
use crate::store::{Silence, StoreError, Within};

use conn::Conn;

pub use dead::DeadNodes;
pub use forward::Peer;

/// Where a thread is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Here: the thread is this node's, confirmed under this fencing token (an actor
    /// created for it commits with it).
    Local { token: i64 },
    /// On another live node.
    Remote(Owner),
}

/// This node's membership of the cluster.
pub struct Cluster {
    node_id: String,
    url: String,
    ttl_ms: i64,
    heartbeat: Duration,
    stream_poll: Duration,
    fence: Arc<Fence>,
    /// Whether Postgres answers, the store's: a renewal unanswered within two heartbeats
    /// makes it silent, an answered one ends the silence.
    silence: Arc<Silence>,
    /// How long a placement's statements may go unanswered (`store.answer_timeout_ms`).
    answer_timeout: Duration,
    /// Lease renewals, joining and leaving, and LISTEN: never waits on a lock.
    session: Conn,
    /// Owner lookups, claims and takeovers.
    claims: Conn,
    hub: Arc<notify::Hub>,
    peer: Peer,
    /// Runs the connections' I/O and the renewals (a thread of its own).
    arbiter: Mutex<Option<Arbiter>>,
    /// Until when the last renewal holds the lease, on this node's clock (minus a margin).
    held_until: Mutex<Instant>,
    /// This node leads the work done once for the cluster.
    leader: AtomicBool,
    /// Bumped each time the node lost its lease: every actor must go.
    lost: watch::Sender<u64>,
    live_nodes: Mutex<Vec<(String, String)>>,
    /// The node gave its lease up ([`Cluster::leave`]): it is not renewed, nor taken
    /// again.
    left: AtomicBool,
}

/// Why the node could not join.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("cluster: {0}")]
    Store(#[from] StoreError),
    #[error("cluster: the client of the calls between nodes: {0}")]
    Client(String),
    #[error(
        "cluster: node id {node_id:?} is held by a live node; its lease runs {remaining_ms} ms \
         more (give each node its own cluster.node_id)"
    )]
    InUse { node_id: String, remaining_ms: i64 },
}

impl Cluster {
    /// Connects, joins as `cluster.node_id` (waiting up to a lease's time for a previous
    /// process of the same id to expire) and starts renewing. `fence` and `silence` are
    /// the store's, and so is the bound of a placement's statements.
    pub async fn join(
        settings: &ClusterSettings,
        database_url: &str,
        url: String,
        fence: Arc<Fence>,
        (silence, answer_timeout): (Arc<Silence>, Duration),
    ) -> Result<Arc<Cluster>, JoinError> {
        let arbiter = Arbiter::new();
        let hub = notify::Hub::new(fence.node_id());
        let name = |role: &str| format!("agent-a2a {} {role}", fence.node_id());
        let on = (&arbiter, answer_timeout);
        let session = Conn::new(database_url, &name("session"), on, Some(hub.clone()));
        let claims = Conn::new(database_url, &name("placement"), on, None);
        let ttl_ms = i64::try_from(settings.lease_ttl_ms).unwrap_or(i64::MAX);
        let cluster = Arc::new(Cluster {
            node_id: fence.node_id().to_owned(),
            url,
            ttl_ms,
            heartbeat: Duration::from_millis(settings.heartbeat_ms),
            stream_poll: Duration::from_millis(settings.stream_poll_ms),
            fence,
            silence,
            answer_timeout,
            session,
            claims,
            hub,
            peer: Peer::new(
                &settings.secret,
                Duration::from_secs(settings.forward_timeout_secs),
                Duration::from_millis(settings.peer_dead_after_ms),
            )
            .map_err(|e| JoinError::Client(e.to_string()))?,
            arbiter: Mutex::new(Some(arbiter)),
            held_until: Mutex::new(Instant::now()),
            leader: AtomicBool::new(false),
            lost: watch::Sender::new(0),
            live_nodes: Mutex::new(Vec::new()),
            left: AtomicBool::new(false),
        });
        let deadline = Instant::now() + Duration::from_millis(settings.lease_ttl_ms * 2);
        loop {
            match cluster.try_join().await? {
                Joined::Token(token) => {
                    tracing::info!(node_id = %cluster.node_id, token, url = %cluster.url, "joined the cluster");
                    break;
                }
                Joined::InUse { remaining_ms } if Instant::now() < deadline => {
                    tracing::info!(node_id = %cluster.node_id, remaining_ms, "node id still held by a previous lease; waiting for it to expire");
                    let wait = remaining_ms.clamp(50, 1000) as u64;
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                }
                Joined::InUse { remaining_ms } => {
                    return Err(JoinError::InUse {
                        node_id: cluster.node_id.clone(),
                        remaining_ms,
                    });
                }
            }
        }
        cluster.refresh_nodes().await;
        let renewing = cluster.clone();
        let listening = cluster.clone();
        if let Some(arbiter) = lock(&cluster.arbiter).as_ref() {
            arbiter.spawn(async move { renewing.renew_loop().await });
            arbiter.spawn(async move { listening.listen_loop().await });
        }
        Ok(cluster)
    }

    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    pub fn hub(&self) -> &Arc<notify::Hub> {
        &self.hub
    }

    /// How often the leader looks for the threads of dead nodes: once a lease.
    pub fn sweep_interval(&self) -> Duration {
        Duration::from_millis(self.ttl_ms.max(1) as u64)
    }

    /// How often a subscriber of another node's task reads its log without a notification.
    pub fn stream_poll(&self) -> Duration {
        self.stream_poll
    }

    /// Where the thread is served: claims it when no node owns it, takes it over when its
    /// owner's lease expired, or names its live owner.
    pub async fn place(&self, tenant: &TenantId, thread: &ContextId) -> Result<Placement> {
        self.bounded("a placement", self.place_unbounded(tenant, thread))
            .await
    }

    /// `call` on the placement connection, within `store.answer_timeout_ms`: past it the
    /// connection is not used again, Postgres counts as silent, and the call fails (503).
    async fn bounded<T>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        if self.silence.is_silent() {
            // Only the renewals go to the database until one is answered.
            return Err(Error::Unavailable {
                detail: format!("cluster: {what}: postgres does not answer"),
                retry_after_secs: 1,
            });
        }
        let detail = match self.silence.within(what, self.answer_timeout, call).await {
            Within::Answered(done) => return done,
            Within::Unanswered => format!(
                "cluster: {what} was not answered within store.answer_timeout_ms ({} ms)",
                self.answer_timeout.as_millis()
            ),
            Within::Silenced => format!("cluster: postgres stopped answering during {what}"),
        };
        self.claims.forget().await;
        Err(Error::Unavailable {
            detail,
            retry_after_secs: 1,
        })
    }

    async fn place_unbounded(&self, tenant: &TenantId, thread: &ContextId) -> Result<Placement> {
        if !self.holds_lease() {
            return Err(not_holding_lease());
        }
        // The token before the lookup: if the node loses its lease during it, the
        // actor's commits under this token are refused.
        let token = self.fence.token();
        let client = self.claims.get().await?;
        for _ in 0..4 {
            let ownership = sql::ownership(&client, tenant.as_str(), thread.as_str()).await?;
            let dead = match ownership {
                // Not in the store yet: its first write names this node (and is refused
                // if another node wrote it first).
                Ownership::NoThread => return Ok(Placement::Local { token }),
                Ownership::Unowned => {
                    if sql::claim_free(&client, tenant.as_str(), thread.as_str(), &self.node_id)
                        .await?
                    {
                        return Ok(Placement::Local { token });
                    }
                    continue;
                }
                Ownership::Owned(owner) if owner.node_id == self.node_id => {
                    return Ok(Placement::Local { token });
                }
                Ownership::Owned(owner) if owner.alive() => return Ok(Placement::Remote(owner)),
                Ownership::Owned(dead) => dead,
            };
            match sql::take_over(
                &client,
                tenant.as_str(),
                thread.as_str(),
                &self.node_id,
                &dead.node_id,
            )
            .await?
            {
                Taken::Yes => {
                    metrics::counter!(crate::telemetry::CLUSTER_TAKEOVERS).increment(1);
                    tracing::info!(context_id = %thread, from = %dead.node_id, "took the thread over from a node whose lease expired");
                    return Ok(Placement::Local { token });
                }
                Taken::Moved => {}
                Taken::Busy => {
                    return Err(Error::Unavailable {
                        detail: format!(
                            "thread {thread} is being taken over from node {}",
                            dead.node_id
                        ),
                        retry_after_secs: 1,
                    });
                }
            }
        }
        Err(Error::Unavailable {
            detail: format!("thread {thread} changed owner repeatedly"),
            retry_after_secs: 1,
        })
    }

    /// The fencing token commits carry now.
    pub fn token(&self) -> i64 {
        self.fence.token()
    }

    /// How often the lease is renewed: how often a node looks for owed push deliveries
    /// to take over from dead nodes.
    pub fn heartbeat(&self) -> Duration {
        self.heartbeat
    }

    /// What dead nodes left behind: their owed push deliveries and their threads.
    pub fn dead(&self) -> DeadNodes<'_> {
        DeadNodes { cluster: self }
    }

    /// The live node other than this one that owns the thread, if any — read only: a
    /// draining node claims nothing, but forwards what another node serves.
    pub async fn live_owner(&self, tenant: &TenantId, thread: &ContextId) -> Result<Option<Owner>> {
        self.bounded("an owner lookup", async {
            let client = self.claims.get().await?;
            Ok(
                match sql::ownership(&client, tenant.as_str(), thread.as_str()).await? {
                    Ownership::Owned(owner) if owner.alive() && owner.node_id != self.node_id => {
                        Some(owner)
                    }
                    _ => None,
                },
            )
        })
        .await
    }

    /// Gives up a thread this node owns and runs nothing on (a draining node): the next
    /// node asked for it claims it instead of forwarding to this one. Whether it was
    /// given up (not when the thread is another node's, or this node was fenced).
    pub async fn release(&self, tenant: &TenantId, thread: &ContextId) -> Result<bool> {
        let token = self.fence.token();
        let client = self.claims.get().await?;
        let released = sql::release(
            &client,
            tenant.as_str(),
            thread.as_str(),
            &self.node_id,
            token,
        )
        .await?;
        if released {
            metrics::counter!(crate::telemetry::CLUSTER_HANDOVERS).increment(1);
            tracing::info!(context_id = %thread, "draining: gave the thread up for another node to serve");
        }
        Ok(released)
    }

    /// Stops the renewals and the connections (the lease expires by itself).
    pub fn stop(&self) {
        if let Some(arbiter) = lock(&self.arbiter).take() {
            arbiter.stop();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A request refused while this node does not hold its lease (503, retryable).
pub fn not_holding_lease() -> Error {
    Error::Unavailable {
        detail: "this node is not holding its cluster lease (renewal pending)".into(),
        retry_after_secs: 1,
    }
}

/// The default node id: the host name and a random suffix.
pub fn default_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| {
            h.trim()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                .take(40)
                .collect::<String>()
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".into());
    format!("{host}-{:06x}", fastrand::u32(..0x100_0000))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
