//! agent-a2a: a durable A2A (Agent2Agent) server whose threads are supervised actors.
//!
//! Layers, highest first (a module imports only those below it): `http` → `a2a` →
//! `runtime` → `session` → `skills` → `store` → `domain`; `config`, `telemetry` and `error` serve all.

pub mod a2a;
pub mod agent;
pub mod cli;
pub mod config;
pub mod domain;
pub mod error;
pub mod http;
pub mod providers;
pub mod runtime;
pub mod session;
pub mod skills;
pub mod store;
pub mod telemetry;
