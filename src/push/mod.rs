//! Push notifications: the delivery of the durable outbox (`delivery/`), what it keeps
//! per receiver (`receivers.rs`), and the owed deliveries it holds in memory while they
//! fit (`mirror.rs`). A receiver's URL passes the outbound side's policy
//! (`crate::outbound`), as every connection of this server does.
//!
//! A config's deliveries are owed from the moment the event they carry is committed:
//! thread actors write one outbox row per (config, event) in the event's own
//! transaction. The delivery takes the rows that are due — handed over by each commit
//! while every owed row fits in memory (`push.memory_rows`), else read from the
//! outbox — POSTs each to its receiver —
//! one at a time per config, in event order, up to `push.max_concurrent` at once and
//! `push.max_concurrent_per_receiver` to one receiver, none to a receiver whose breaker
//! is open — and acknowledges it (row deleted) or reschedules it with exponential backoff and
//! jitter, through the persistence actor like every other write. A restart finds the
//! rows still owed and goes on: at-least-once, in order per task and config.

mod delivery;
mod mirror;
mod receivers;

pub use delivery::{DELIVERY_ID_HEADER, start};
