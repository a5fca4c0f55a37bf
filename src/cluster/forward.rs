//! Requests forwarded to a thread's owner: `POST <owner>/_cluster/v1/<call>` with the
//! cluster's secret as a bearer token, and a JSON body of domain types (their storage
//! encoding, which every node of one version shares). The owner answers 200 with
//! `{"ok": …}` or `{"error": <Error>}`: an error of the operation travels as itself, so
//! the client sees what it would have seen on the owner.
//!
//! Only what changes a thread is forwarded (sends, cancel, push configs): reads come from
//! the store on any node, and a subscriber follows another node's task through the log
//! (`notify.rs`).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::domain::{PushSpec, SendMessage, SendOutcome, StreamEvent, TaskId, TenantId};
use crate::error::{Error, Result};

/// The path prefix of the calls between nodes.
pub const PREFIX: &str = "/_cluster/v1";

/// Header naming the node a forwarded request comes from (for the owner's log).
pub const FROM_HEADER: &str = "x-a2a-cluster-node";

/// How a forwarded send answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SendMode {
    Blocking,
    Immediate,
    /// The owner starts the turn and answers with where the stream starts; the forwarding
    /// node follows the task's log from there.
    Streaming,
}

/// `POST /_cluster/v1/send`.
#[derive(Debug, Serialize, Deserialize)]
pub struct SendCall {
    pub tenant: TenantId,
    pub cmd: SendMessage,
    pub mode: SendMode,
}

/// The answer to a streaming [`SendCall`]: the subscription's start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StreamStart {
    pub task_id: Option<TaskId>,
    pub first: Option<(i64, StreamEvent)>,
    pub after_seq: i64,
    pub until_terminal: bool,
}

/// What a forwarded send produced.
#[derive(Debug, Serialize, Deserialize)]
#[allow(
    clippy::large_enum_variant,
    reason = "built once per forwarded request and moved"
)]
pub enum Sent {
    Outcome(SendOutcome),
    Stream(StreamStart),
}

/// `POST /_cluster/v1/cancel`.
#[derive(Debug, Serialize, Deserialize)]
pub struct CancelCall {
    pub tenant: TenantId,
    pub task_id: TaskId,
}

/// `POST /_cluster/v1/push/create`.
#[derive(Debug, Serialize, Deserialize)]
pub struct CreatePushCall {
    pub tenant: TenantId,
    pub task_id: TaskId,
    pub spec: PushSpec,
}

/// `POST /_cluster/v1/push/delete`.
#[derive(Debug, Serialize, Deserialize)]
pub struct DeletePushCall {
    pub tenant: TenantId,
    pub task_id: TaskId,
    pub config_id: String,
}

/// The body of every answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer<T> {
    Ok(T),
    Error(Error),
}

impl<T> From<Result<T>> for Answer<T> {
    fn from(result: Result<T>) -> Self {
        match result {
            Ok(value) => Answer::Ok(value),
            Err(e) => Answer::Error(e),
        }
    }
}

/// The client of the calls between nodes.
pub struct Peer {
    http: reqwest::Client,
    secret: String,
    /// `cluster.forward_timeout_secs`.
    timeout: Duration,
    /// `cluster.peer_dead_after_ms`.
    dead_after: Duration,
    /// Peers (by base URL) a call found unreachable, until when they are not called
    /// again: a peer cut off by the network would make every forward to it wait for a
    /// connection timeout or a dead connection, one after another.
    unreachable: dashmap::DashMap<String, Instant>,
}

impl Peer {
    /// A client whose calls end after `timeout` (`cluster.forward_timeout_secs`), and
    /// whose connections are given up once the peer shows no sign of life for
    /// `dead_after` (`cluster.peer_dead_after_ms`): keepalive probes from half of it on, a
    /// quarter of it apart (whole seconds: the kernel takes no less), and the kernel's
    /// `TCP_USER_TIMEOUT` over probes and data alike.
    pub fn new(
        secret: &str,
        timeout: Duration,
        dead_after: Duration,
    ) -> Result<Self, reqwest::Error> {
        // The client's TLS needs the process's crypto provider (a second install is
        // refused, harmlessly).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(dead_after.min(Duration::from_secs(2)))
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_keepalive(whole_seconds(dead_after / 2))
            .tcp_keepalive_interval(whole_seconds(dead_after / 4))
            .tcp_keepalive_retries(2)
            .tcp_user_timeout(dead_after)
            .build()?;
        Ok(Self {
            http,
            secret: secret.to_owned(),
            timeout,
            dead_after,
            unreachable: dashmap::DashMap::new(),
        })
    }

    /// Whether a request carries the cluster's secret (compared in constant time).
    pub fn admits(&self, authorization: Option<&str>) -> bool {
        use subtle::ConstantTimeEq;
        let Some(token) = authorization.and_then(|h| h.strip_prefix("Bearer ")) else {
            return false;
        };
        let given = sha(token.as_bytes());
        let expected = sha(self.secret.as_bytes());
        bool::from(given.ct_eq(&expected))
    }

    /// Calls `path` on the node at `base` with `body` as `from`.
    pub async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        base: &str,
        from: &str,
        path: &str,
        body: &B,
    ) -> Result<T> {
        let started = Instant::now();
        if let Some(until) = self.unreachable.get(base).map(|u| *u) {
            if started < until {
                return Err(Error::Unavailable {
                    detail: format!(
                        "the thread's owner at {base} could not be reached a moment ago; \
                         not called again for cluster.peer_dead_after_ms ({} ms)",
                        self.dead_after.as_millis()
                    ),
                    retry_after_secs: 1,
                });
            }
            self.unreachable.remove(base);
        }
        let called = self.call_now(base, from, path, body).await;
        if let Err(Reach::Unreachable(e)) = &called {
            self.unreachable
                .insert(base.to_owned(), Instant::now() + self.dead_after);
            metrics::counter!(crate::telemetry::CLUSTER_PEERS_UNREACHABLE).increment(1);
            tracing::warn!(peer = base, error = %e, "a peer could not be reached: forwards to it fail at once for cluster.peer_dead_after_ms");
        }
        called.map_err(|e| match e {
            Reach::Unreachable(e) => e,
            Reach::Answered(e) => e,
        })
    }

    /// [`Peer::call`] without the record of unreachable peers.
    async fn call_now<B: Serialize, T: DeserializeOwned>(
        &self,
        base: &str,
        from: &str,
        path: &str,
        body: &B,
    ) -> std::result::Result<T, Reach> {
        let url = format!("{}{PREFIX}{path}", base.trim_end_matches('/'));
        let started = Instant::now();
        let mut trace = reqwest::header::HeaderMap::new();
        crate::telemetry::trace::inject(&mut trace);
        let response = self
            .http
            .post(&url)
            .bearer_auth(&self.secret)
            .header(FROM_HEADER, from)
            .headers(trace)
            .json(body)
            .send()
            .await
            .map_err(|e| self.reach(base, &e, started))?;
        let status = response.status();
        if !status.is_success() {
            return Err(Reach::Answered(Error::Unavailable {
                detail: format!("node at {base} answered {status} to {path}"),
                retry_after_secs: 1,
            }));
        }
        let answer: Answer<T> = response
            .json()
            .await
            .map_err(|e| self.reach(base, &e, started))?;
        metrics::histogram!(crate::telemetry::CLUSTER_FORWARD_MS)
            .record(started.elapsed().as_secs_f64() * 1000.0);
        match answer {
            Answer::Ok(value) => Ok(value),
            Answer::Error(e) => Err(Reach::Answered(e)),
        }
    }
}

/// How a call failed: the peer did not answer, or it answered with an error (or took
/// longer than `cluster.forward_timeout_secs`: a long turn, not a dead peer).
enum Reach {
    Unreachable(Error),
    Answered(Error),
}

impl Peer {
    /// A call that failed after `started`: past the forward timeout it was a long turn,
    /// anything else (the kernel's `TCP_USER_TIMEOUT` too) a peer that did not answer.
    fn reach(&self, base: &str, e: &reqwest::Error, started: Instant) -> Reach {
        let error = unreachable(base, e);
        if e.is_timeout() && !e.is_connect() && started.elapsed() >= self.timeout {
            Reach::Answered(error)
        } else {
            Reach::Unreachable(error)
        }
    }
}

/// `d` in whole seconds, at least one.
fn whole_seconds(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs().max(1))
}

fn unreachable(base: &str, e: &reqwest::Error) -> Error {
    Error::Unavailable {
        detail: format!("the thread's owner at {base} cannot be reached: {e}"),
        retry_after_secs: 1,
    }
}

fn sha(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}
