//! A server's supervisor: the task that holds its connection and publishes it to the calls
//! ([`Link`]), reads the tool list again when the server says it changed, and connects
//! anew — after the restart backoff — when the connection ends (the child exited, the
//! pipes closed) or a call found it unreachable or unanswering (then unanswered to a
//! ping too); it closes the connection, and stops the child, when the skill is dropped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{ClientRequest, PingRequest};
use rmcp::{Peer, RoleClient};
use tokio::sync::{Notify, mpsc, watch};

use super::connect::{Endpoint, Progress, Running, connect};
use super::list::Listing;
use super::oversized;
use crate::telemetry;

/// A start that lasted this long resets the restart backoff.
const STEADY: Duration = Duration::from_secs(60);

/// What a call found of the connection it used (by the connection's generation).
#[derive(Debug, Clone, Copy)]
pub(super) enum Report {
    /// The server could not be reached: connect anew.
    Unreachable(u64),
    /// No answer within the call's timeout: ping, and connect anew if that goes
    /// unanswered too.
    Unanswered(u64),
}

/// The server's connection as the callers see it.
pub(super) type Live = watch::Receiver<Link>;

/// Where the server's connection stands.
#[derive(Clone)]
pub(super) enum Link {
    Up(Connected),
    /// Being made (again): calls wait for it, within their timeout.
    Starting,
    /// The last attempt failed, for this reason; calls fail at once until the next
    /// attempt (after the backoff) starts.
    Down(String),
}

/// A connection, and which of the server's connections it is (counting from 1).
#[derive(Clone)]
pub(super) struct Connected {
    pub(super) generation: u64,
    pub(super) peer: Peer<RoleClient>,
    /// Its calls in flight that listen to their progress.
    pub(super) progress: Arc<Progress>,
    pub(super) oversized: Arc<oversized::Oversized>,
}

impl Connected {
    pub(super) fn of(generation: u64, running: &Running) -> Connected {
        Connected {
            generation,
            peer: running.peer().clone(),
            progress: running.service().progress.clone(),
            oversized: running.service().oversized.clone(),
        }
    }
}

/// No connection was used (the call did not get one).
pub(super) const NO_GENERATION: u64 = 0;

/// What a server's supervisor holds.
pub(super) struct Supervised {
    pub(super) name: Arc<str>,
    pub(super) endpoint: Endpoint,
    pub(super) wait: Duration,
    pub(super) backoff: Duration,
    pub(super) publish: watch::Sender<Link>,
    pub(super) reconnects: mpsc::Receiver<Report>,
    pub(super) stopped: watch::Receiver<()>,
    /// The connection made at start.
    pub(super) first: Option<Running>,
    pub(super) listing: Arc<Listing>,
    /// Notified when the server says its tool list changed.
    pub(super) relist: Arc<Notify>,
}

/// Holds a server's connection: waits for it to end (the child exited, the pipes closed)
/// or for a call to find it unreachable, then connects anew after the backoff; closes it
/// (and stops the child) when the skill is dropped.
pub(super) async fn supervise(mut s: Supervised) {
    let mut delay = s.backoff;
    let mut running = s.first.take();
    // The first connection is published as generation 1.
    let mut generation = 1;
    let mut first = true;
    loop {
        if let Some(service) = running.take() {
            let since = Instant::now();
            let peer = service.peer().clone();
            if !std::mem::take(&mut first) {
                generation += 1;
                let _ = s
                    .publish
                    .send(Link::Up(Connected::of(generation, &service)));
                // A server started again may offer other tools.
                s.relist.notify_one();
            }
            metrics::gauge!(telemetry::MCP_SERVER_UP, "server" => s.name.to_string()).set(1.0);
            let cancel = service.cancellation_token();
            let waiting = service.waiting();
            tokio::pin!(waiting);
            let ended = loop {
                tokio::select! {
                    reason = &mut waiting => break format!("{reason:?}"),
                    _ = s.relist.notified() => {
                        match tokio::time::timeout(s.wait, peer.list_all_tools()).await {
                            Ok(Ok(tools)) => s.listing.take(tools),
                            Ok(Err(e)) => tracing::warn!(server = %s.name, error = %e, "MCP server's tool list could not be read again; its tools stay as they were"),
                            Err(_) => tracing::warn!(server = %s.name, "MCP server's tool list not read again within start_timeout_ms; its tools stay as they were"),
                        }
                    }
                    asked = s.reconnects.recv() => match asked {
                        Some(Report::Unreachable(g)) if g == generation => {
                            cancel.cancel();
                            break "a call found it unreachable".to_owned();
                        }
                        // A call not answered in time: a server that forgot the session
                        // can answer with an error that names no request (which leaves
                        // calls waiting), so a ping says whether the session still works.
                        Some(Report::Unanswered(g)) if g == generation => {
                            let ping = ClientRequest::PingRequest(PingRequest::default());
                            match tokio::time::timeout(s.wait, peer.send_request(ping)).await {
                                Ok(Ok(_)) => {}
                                _ => {
                                    cancel.cancel();
                                    break "a call and a ping went unanswered".to_owned();
                                }
                            }
                        }
                        // About a connection before this one.
                        Some(_) => {}
                        // The skill is gone.
                        None => {
                            cancel.cancel();
                            return;
                        }
                    },
                    _ = s.stopped.changed() => {
                        let _ = s.publish.send(Link::Down("the server is stopping".into()));
                        cancel.cancel();
                        return;
                    }
                }
            };
            let _ = s.publish.send(Link::Starting);
            metrics::gauge!(telemetry::MCP_SERVER_UP, "server" => s.name.to_string()).set(0.0);
            tracing::warn!(server = %s.name, ended = %ended, "MCP server connection ended; connecting again");
            delay = if since.elapsed() >= STEADY {
                s.backoff
            } else {
                delay
            };
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = s.stopped.changed() => return,
        }
        delay = (delay * 2).min(s.backoff * 64);
        metrics::counter!(telemetry::MCP_RESTARTS, "server" => s.name.to_string()).increment(1);
        let _ = s.publish.send(Link::Starting);
        match connect(&s.name, &s.endpoint, s.wait, &s.relist).await {
            Ok(service) => running = Some(service),
            Err(e) => {
                tracing::warn!(server = %s.name, error = %e, "MCP server could not be connected; trying again");
                let _ = s.publish.send(Link::Down(format!("not connected: {e}")));
            }
        }
    }
}
