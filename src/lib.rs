//! agent-a2a: a durable A2A (Agent2Agent) server whose threads are supervised actors.
//!
//! Layers, highest first (a module imports only those below it): `startup` (assembly) →
//! the bindings `http` and `grpc`, side by side → `service` (auth, the operations) →
//! `push` (receiver policy, outbox delivery) → `a2a` → `runtime` → `session` → `skills` → `store` → `domain`; `config`, `telemetry`
//! and `error` serve all.

pub mod a2a;
pub mod agent;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod config;
pub mod domain;
pub mod error;
pub mod grpc;
pub mod http;
pub mod outbound;
pub mod providers;
pub mod push;
pub mod runtime;
pub mod service;
pub mod session;
pub mod skills;
pub mod startup;
pub mod store;
pub mod telemetry;
