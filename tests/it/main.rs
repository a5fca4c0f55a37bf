//! Integration tests: the real server on a random port, driven over HTTP.

mod agent;
mod auth;
mod card;
mod cli;
mod cluster;
mod dashboard;
mod durability;
mod errors;
mod generations;
mod grpc;
mod health;
mod idempotency;
mod janitor;
mod jsonrpc;
mod lifecycle;
mod metrics;
mod outage;
mod postgres;
mod push;
mod recovery;
mod rest;
mod shutdown;
mod skills;
mod streaming;
mod support;
mod tools;
