//! agent-a2a: a durable A2A (Agent2Agent) server whose threads are supervised actors.

pub mod a2a;
pub mod domain;
pub mod error;
pub mod store;
