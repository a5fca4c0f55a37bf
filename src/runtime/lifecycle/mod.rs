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
