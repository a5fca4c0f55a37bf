//! How long the caller of a request will wait for it, so that a forward to the thread's
//! owner gives up when the caller does, not at `cluster.forward_timeout_secs`.
//!
//! The bindings learn it from the request — gRPC's `grpc-timeout`, the HTTP header
//! [`HEADER`] (which a balancer can set to its own server timeout) — and run the request
//! [`within`] it; [`crate::cluster::Peer`] reads what is left ([`remaining`]) and passes
//! it on to the owner in the same header. A request that names no deadline is bounded
//! by the forward timeout alone.

use std::future::Future;
use std::time::{Duration, Instant};

/// The HTTP header naming, in milliseconds, how long the caller will wait for an answer.
pub const HEADER: &str = "x-a2a-timeout-ms";

tokio::task_local! {
    /// When the request this task serves stops being awaited by its caller.
    static DEADLINE: Instant;
}

/// Runs `work` as a request whose caller waits `timeout` from now (no deadline when
/// `timeout` is `None`, or too far off to be a time).
pub async fn within<F: Future>(timeout: Option<Duration>, work: F) -> F::Output {
    match timeout.and_then(|t| Instant::now().checked_add(t)) {
        Some(deadline) => DEADLINE.scope(deadline, work).await,
        None => work.await,
    }
}

/// What is left of the caller's time, when the request being served named a deadline.
pub fn remaining() -> Option<Duration> {
    DEADLINE
        .try_with(|deadline| deadline.saturating_duration_since(Instant::now()))
        .ok()
}

/// The value of [`HEADER`]: a whole number of milliseconds, at least one.
pub fn parse_millis(value: &str) -> Result<Duration, String> {
    match value.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(format!(
            "{HEADER} must be a whole number of milliseconds greater than zero, not {value:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_within_a_deadline_sees_what_is_left_of_it() {
        assert_eq!(remaining(), None, "no request, no deadline");
        let left = within(Some(Duration::from_secs(10)), async { remaining() }).await;
        let left = left.expect("inside the scope");
        assert!(left <= Duration::from_secs(10) && left > Duration::from_secs(9));
        assert_eq!(within(None, async { remaining() }).await, None);
        let past = within(Some(Duration::from_millis(1)), async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            remaining()
        })
        .await;
        assert_eq!(past, Some(Duration::ZERO));
        // Too far off to be an instant: as if none was named.
        assert_eq!(
            within(Some(Duration::MAX), async { remaining() }).await,
            None
        );
    }

    #[test]
    fn the_header_is_whole_milliseconds_above_zero() {
        assert_eq!(parse_millis("1500"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_millis(" 7 "), Ok(Duration::from_millis(7)));
        for bad in ["0", "-1", "1.5", "", "10s"] {
            let e = parse_millis(bad).unwrap_err();
            assert!(e.contains(HEADER), "{e}");
        }
    }
}
