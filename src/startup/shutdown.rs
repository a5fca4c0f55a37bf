//! Graceful shutdown, the way `serve` ends: on SIGTERM or SIGINT.
//!
//! 0. In cluster mode, the node first gives its balancer notice, for
//!    `cluster.drain_notice_ms`: `/health/ready` turns 503 and task streams end as in 1,
//!    new subscriptions are refused, but messages are still served — so that the
//!    balancer's health checks take the node out of rotation before it refuses anything.
//!    A second signal cuts the notice short.
//! 1. The runtime starts draining: new messages and subscriptions get a retryable 503,
//!    `/health/ready` turns 503, the janitor stops, and every task stream that no running
//!    turn will publish to ends at once (the others when their turn ends) — so open SSE
//!    connections close instead of holding the server until the deadline.
//! 2. The HTTP server stops accepting connections (paused: its workers keep running,
//!    because the actor of a thread started by a request lives on the worker that took
//!    it) and the runtime waits for every accepted turn, including those whose caller
//!    already has its answer (`returnImmediately`). Then the server lets the requests
//!    still in flight finish and stops its workers. All of it is bounded by
//!    `server.shutdown_timeout_secs`; a second signal cuts the wait short.
//! 3. The actors stop (a turn still running is cut: its task stays as last committed),
//!    every write they queued is committed — for at most `server.shutdown_timeout_secs`
//!    again — and the persistence actor stops. `serve` then returns and the process
//!    exits 0.
//!
//! Nothing acknowledged can be lost on the way: an answer is only sent after its commit
//! (the persistence invariant), and step 3 makes the unanswered rest durable too.

use std::time::Duration;

use tokio::time::Instant;

use super::Handles;
use crate::runtime::Runtime;

/// Waits for SIGTERM or SIGINT; returns the signal's name.
pub async fn signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(term), Ok(int)) => (term, int),
        (Err(e), _) | (_, Err(e)) => {
            // Without handlers the default action (exit at once) stays in place.
            tracing::error!(error = %e, "cannot listen for SIGTERM/SIGINT; no graceful shutdown");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

/// Drains and stops the server and the runtime (the sequence above), after `notice` of
/// step 0 (none when zero). Errors are logged: a shutdown goes on to the end regardless.
pub async fn graceful(handle: &Handles, runtime: &Runtime, notice: Duration, timeout: Duration) {
    if !notice.is_zero() {
        runtime.lifecycle().begin_leaving();
        tracing::info!(
            notice_ms = notice.as_millis() as u64,
            "leaving: /health/ready fails; serving until the balancer has taken this node out (cluster.drain_notice_ms)"
        );
        tokio::select! {
            () = tokio::time::sleep(notice) => {}
            name = signal() => {
                tracing::warn!(signal = name, "second signal: draining without waiting for the balancer");
            }
        }
    }
    let deadline = Instant::now() + timeout;
    runtime.lifecycle().begin_drain();
    let drained = async {
        handle.pause().await;
        let left = runtime.lifecycle().wait_for_turns(deadline).await;
        // Every turn is over (or the deadline passed): the requests still in flight
        // are answered or about to be; the workers stop after them.
        if left > 0 {
            handle.stop(false).await;
        } else {
            let stopping = tokio::time::timeout_at(deadline, handle.stop(true)).await;
            if stopping.is_err() {
                handle.stop(false).await;
            }
        }
        left
    };
    let left = tokio::select! {
        left = drained => left,
        name = signal() => {
            tracing::warn!(signal = name, "second signal: not waiting any longer");
            handle.stop(false).await;
            runtime.lifecycle().wait_for_turns(Instant::now()).await
        }
    };
    if left > 0 {
        tracing::warn!(
            turns = left,
            "shutdown deadline passed (server.shutdown_timeout_secs); cutting the turns still running"
        );
    } else {
        tracing::info!("every turn finished; stopping the actors");
    }
    match runtime.lifecycle().close(Instant::now() + timeout).await {
        Ok(()) => tracing::info!("persistence queue flushed; runtime stopped"),
        Err(e) => tracing::error!(error = %e, "the persistence queue could not be flushed"),
    }
    // Every commit is done: the other nodes may take this node's threads over at once.
    if let Some(cluster) = runtime.cluster() {
        cluster.leave().await;
    }
}
