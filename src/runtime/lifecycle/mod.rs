//! The runtime's lifecycle around the thread actors: start-up recovery (`recovery.rs`),
//! start-up's load of the idempotency claim filter (`claims.rs`),
//! the periodic janitor (`janitor.rs`), health checks of every dependency (`health.rs`)
//! and the graceful shutdown (`shutdown.rs`).

pub(super) mod claims;
pub(super) mod cluster;
pub mod health;
pub(super) mod janitor;
pub(super) mod recovery;
pub(super) mod shutdown;

use tokio::sync::watch;

use super::{Runtime, lock};
use recovery::Recovery;

/// The runtime's lifecycle ([`Runtime::lifecycle`]): health, start-up recovery, the
/// janitor and the graceful shutdown.
#[derive(Clone, Copy)]
pub struct Lifecycle<'a>(pub(super) &'a Runtime);

impl Runtime {
    /// Health, recovery, the janitor and the graceful shutdown.
    pub fn lifecycle(&self) -> Lifecycle<'_> {
        Lifecycle(self)
    }
}

impl Lifecycle<'_> {
    /// Turns true when the runtime stops (background work ends).
    pub fn stopped(self) -> watch::Receiver<bool> {
        self.0.stop.subscribe()
    }

    /// Ready for traffic: start-up recovery has finished and no shutdown has begun (nor
    /// its notice). (`/health/ready` adds a store round trip.)
    pub fn is_ready(self) -> bool {
        matches!(self.recovery(), Recovery::Done { .. })
            && !self.is_leaving()
            && self.holds_lease()
            && !self.store_silent()
    }

    /// Not in cluster mode, or this node holds its lease.
    pub fn holds_lease(self) -> bool {
        self.0.cluster.as_ref().is_none_or(|c| c.holds_lease())
    }

    /// A graceful shutdown has begun: new work is refused.
    pub fn is_draining(self) -> bool {
        self.0.shared.is_draining()
    }

    /// A graceful shutdown or its notice has begun: `/health/ready` fails and no new
    /// subscription is taken.
    pub fn is_leaving(self) -> bool {
        self.0.shared.is_leaving()
    }

    /// Stops at once: background work, the actor arbiters, then the persistence
    /// arbiter (writes still queued are not committed; none of them was acknowledged).
    /// A graceful shutdown uses [`Lifecycle::begin_drain`](crate::runtime::Lifecycle::begin_drain) and [`Lifecycle::close`](crate::runtime::Lifecycle::close) instead.
    pub fn shutdown(self) {
        self.0
            .shared
            .closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.0.stop.send_replace(true);
        for arbiter in lock(&self.0.arbiters).drain(..) {
            arbiter.stop();
        }
        if let Some(arbiter) = lock(&self.0.persistence_arbiter).take() {
            arbiter.stop();
        }
    }
}
