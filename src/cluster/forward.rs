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
        // The caller's time, when it is shorter than the forward timeout.
        let caller = super::deadline::remaining().filter(|left| *left < self.timeout);
        if caller == Some(Duration::ZERO) {
            return Err(caller_gave_up(base, path));
        }
        let called = self.call_now(base, from, path, body, caller).await;
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

    /// [`Peer::call`] without the record of unreachable peers, bounded by the caller's
    /// time `caller` when it has one shorter than the forward timeout.
    async fn call_now<B: Serialize, T: DeserializeOwned>(
        &self,
        base: &str,
        from: &str,
        path: &str,
        body: &B,
        caller: Option<Duration>,
    ) -> std::result::Result<T, Reach> {
        let url = format!("{}{PREFIX}{path}", base.trim_end_matches('/'));
        let started = Instant::now();
        let mut trace = reqwest::header::HeaderMap::new();
        crate::telemetry::trace::inject(&mut trace);
        let mut request = self
            .http
            .post(&url)
            .bearer_auth(&self.secret)
            .header(FROM_HEADER, from)
            .headers(trace);
        if let Some(left) = caller {
            request = request
                .timeout(left)
                .header(super::deadline::HEADER, left.as_millis().max(1).to_string());
        }
        let fail = |e: reqwest::Error| self.reach(base, path, &e, started, caller);
        let response = request.json(body).send().await.map_err(fail)?;
        let status = response.status();
        if !status.is_success() {
            return Err(Reach::Answered(Error::Unavailable {
                detail: format!("node at {base} answered {status} to {path}"),
                retry_after_secs: 1,
            }));
        }
        let answer: Answer<T> = response.json().await.map_err(fail)?;
        metrics::histogram!(crate::telemetry::CLUSTER_FORWARD_MS)
            .record(started.elapsed().as_secs_f64() * 1000.0);
        match answer {
            Answer::Ok(value) => Ok(value),
            Answer::Error(e) => Err(Reach::Answered(e)),
        }
    }
}

/// How a call failed: the peer did not answer, or it answered with an error (or took
/// longer than `cluster.forward_timeout_secs` or the caller's time: a long turn, not a
/// dead peer).
enum Reach {
    Unreachable(Error),
    Answered(Error),
}

impl Peer {
    /// A call that failed after `started`: past the forward timeout or the caller's time
    /// it was a long turn, anything else (the kernel's `TCP_USER_TIMEOUT` too) a peer
    /// that did not answer.
    fn reach(
        &self,
        base: &str,
        path: &str,
        e: &reqwest::Error,
        started: Instant,
        caller: Option<Duration>,
    ) -> Reach {
        let bound = caller.unwrap_or(self.timeout);
        if e.is_timeout() && !e.is_connect() && started.elapsed() >= bound {
            match caller {
                Some(_) => Reach::Answered(caller_gave_up(base, path)),
                None => Reach::Answered(unreachable(base, e)),
            }
        } else {
            Reach::Unreachable(unreachable(base, e))
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

/// The refusal of a forward whose caller's time ran out (`deadline::HEADER`,
/// `grpc-timeout`): the caller no longer waits for it; what the owner did is found by a
/// retry of the same message.
fn caller_gave_up(base: &str, path: &str) -> Error {
    Error::Unavailable {
        detail: format!(
            "the caller's time ran out before the thread's owner at {base} answered {path}"
        ),
        retry_after_secs: 1,
    }
}

fn sha(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer that takes the connection and the request and never answers, as the owner
    /// of a long turn does.
    async fn mute_peer() -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                open.push(stream);
            }
        });
        (base, held)
    }

    #[tokio::test]
    async fn a_forward_gives_up_when_its_caller_does_and_keeps_the_peer_callable() {
        let (base, _held) = mute_peer().await;
        let peer = Peer::new("secret", Duration::from_secs(300), Duration::from_secs(10)).unwrap();
        let started = Instant::now();
        let call = peer.call::<_, serde_json::Value>(&base, "node-a", "/send", &());
        let called = tokio::time::timeout(
            Duration::from_secs(5),
            super::super::deadline::within(Some(Duration::from_millis(300)), call),
        )
        .await
        .expect("the forward ended with its caller's time");
        let waited = started.elapsed();
        let Err(Error::Unavailable { detail, .. }) = called else {
            panic!("{called:?}");
        };
        assert!(detail.contains("the caller's time ran out"), "{detail}");
        assert!(waited >= Duration::from_millis(300), "{waited:?}");
        // A slow owner is not an unreachable one: the next forward is made.
        assert!(peer.unreachable.is_empty());
        // A caller whose time is already up is refused without a call.
        let call = peer.call::<_, serde_json::Value>(&base, "node-a", "/send", &());
        let at_once = super::super::deadline::within(Some(Duration::from_nanos(1)), async {
            tokio::time::sleep(Duration::from_millis(1)).await;
            call.await
        });
        let Err(Error::Unavailable { detail, .. }) = at_once.await else {
            panic!("called");
        };
        assert!(detail.contains("the caller's time ran out"), "{detail}");
    }
}
