//! `[cluster]`: several nodes on one Postgres database (`src/cluster/`).

use serde::{Deserialize, Serialize};

use super::{ConfigError, ServerSettings, StoreSettings};

/// Cluster mode: several nodes on one Postgres database, each thread served by the one
/// node holding its lease (`src/cluster/`). SQLite is single-node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSettings {
    /// Join the cluster of the nodes on the same Postgres database.
    pub enabled: bool,
    /// This node's name among the others (at most 64 letters, digits, `.`, `_`, `-`);
    /// empty: the host name and a random suffix, new at every start.
    pub node_id: String,
    /// The base URL other nodes reach this node's HTTP listener at, for the requests
    /// they forward to the owner of a thread (e.g. `http://10.0.0.5:8080`); empty:
    /// `http://<server.bind>` when that names a concrete address.
    pub advertise_url: String,
    /// Shared by every node: a forwarded request carries it (at least 16 characters).
    pub secret: String,
    /// How long a node's lease on its threads lasts without a renewal, in ms: a node
    /// that died or froze loses its threads to the others after it.
    pub lease_ttl_ms: u64,
    /// How often a node renews its lease, in ms (at most a third of `lease_ttl_ms`). A
    /// renewal unanswered for two heartbeats (at most `store.answer_timeout_ms`) counts
    /// Postgres as silent: new sends get 503 and `/health/ready` fails until it answers.
    pub heartbeat_ms: u64,
    /// How long a forwarded request may take on the owner (a blocking send waits for
    /// its turn), in seconds. A request whose caller names a shorter time
    /// (`x-a2a-timeout-ms`, or gRPC's `grpc-timeout`) is forwarded for that long: past
    /// it, 503.
    pub forward_timeout_secs: u64,
    /// A connection to another node that shows no sign of life this long, in ms — its
    /// keepalive probes, or data sent on it, unanswered — is given up, and the call on
    /// it fails (503): a peer cut off by the network neither answers nor resets, and a
    /// forward on an open connection would wait for the heal. A peer found unreachable so
    /// is not called again for as long: those calls fail at once. From 2 000 to 60 000.
    pub peer_dead_after_ms: u64,
    /// A subscriber following a task of another node reads the task's log at least this
    /// often, in ms, even when no notification came (a notification can be missed while
    /// the listening connection reconnects).
    pub stream_poll_ms: u64,
    /// On SIGTERM, how long the node keeps serving while `/health/ready` already fails,
    /// in ms: long enough for the balancer's health checks to take it out of rotation
    /// before it refuses anything (`deploy/haproxy.cfg` checks every 500 ms and needs
    /// two failures). At most 60 000; 0: refuse new work at once.
    pub drain_notice_ms: u64,
}

/// The longest `cluster.drain_notice_ms`.
pub const MAX_DRAIN_NOTICE_MS: u64 = 60_000;

impl Default for ClusterSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            node_id: String::new(),
            advertise_url: String::new(),
            secret: String::new(),
            lease_ttl_ms: 10_000,
            heartbeat_ms: 2_000,
            forward_timeout_secs: 300,
            peer_dead_after_ms: 3_000,
            stream_poll_ms: 2_000,
            drain_notice_ms: 1_500,
        }
    }
}

impl ClusterSettings {
    /// Cluster mode needs Postgres, a shared secret, a way for the other nodes to reach
    /// this one, and a heartbeat well inside the lease.
    pub(super) fn validate(
        &self,
        server: &ServerSettings,
        store: &StoreSettings,
    ) -> Result<(), ConfigError> {
        let problem = |key: &'static str, problem: String| ConfigError::Key { key, problem };
        if !self.enabled {
            return Ok(());
        }
        if !store.is_postgres() {
            return Err(problem(
                "cluster.enabled",
                "needs a Postgres store (store.database_url or DATABASE_URL): the nodes of a \
                 cluster share one Postgres database; SQLite serves one process"
                    .into(),
            ));
        }
        let id = &self.node_id;
        let id_ok = id.len() <= 64
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !id_ok {
            return Err(problem(
                "cluster.node_id",
                "must be at most 64 letters, digits, '.', '_' or '-'".into(),
            ));
        }
        if self.secret.chars().count() < 16 {
            return Err(problem(
                "cluster.secret",
                "must be at least 16 characters, the same on every node".into(),
            ));
        }
        let advertise = &self.advertise_url;
        let scheme = advertise.starts_with("http://") || advertise.starts_with("https://");
        if !advertise.is_empty() && !scheme {
            return Err(problem(
                "cluster.advertise_url",
                "must start with http:// or https://".into(),
            ));
        }
        if advertise.is_empty() && server.bind_addr()?.ip().is_unspecified() {
            return Err(problem(
                "cluster.advertise_url",
                format!(
                    "must be set when server.bind ({}) listens on every address: the other \
                     nodes need an address that reaches this one",
                    server.bind
                ),
            ));
        }
        if self.lease_ttl_ms < 1000 {
            return Err(problem(
                "cluster.lease_ttl_ms",
                "must be at least 1000".into(),
            ));
        }
        if self.heartbeat_ms == 0 || self.heartbeat_ms.saturating_mul(3) > self.lease_ttl_ms {
            return Err(problem(
                "cluster.heartbeat_ms",
                "must be greater than 0 and at most a third of cluster.lease_ttl_ms".into(),
            ));
        }
        if self.forward_timeout_secs == 0 {
            return Err(problem(
                "cluster.forward_timeout_secs",
                "must be greater than 0".into(),
            ));
        }
        if !(2_000..=60_000).contains(&self.peer_dead_after_ms) {
            return Err(problem(
                "cluster.peer_dead_after_ms",
                "must be from 2000 to 60000".into(),
            ));
        }
        if self.stream_poll_ms == 0 {
            return Err(problem(
                "cluster.stream_poll_ms",
                "must be greater than 0".into(),
            ));
        }
        if self.drain_notice_ms > MAX_DRAIN_NOTICE_MS {
            return Err(problem(
                "cluster.drain_notice_ms",
                format!("must be at most {MAX_DRAIN_NOTICE_MS}"),
            ));
        }
        Ok(())
    }
}
