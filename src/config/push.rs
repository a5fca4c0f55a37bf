//! `[push]`: push notifications — configs per task, the durable outbox, its delivery,
//! and the receivers' URL policy.

use serde::{Deserialize, Serialize};

use super::{ConfigError, positive};

/// Push notifications: configs per task, the durable outbox and its delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PushSettings {
    /// Serve the push-config methods and deliver (the card's
    /// `capabilities.pushNotifications`).
    pub enabled: bool,
    /// Configs one task may have; one more is refused.
    pub max_configs_per_task: usize,
    /// Deliveries the outbox may owe across all tasks; an event past it is not queued
    /// for its configs (counted as `outcome="dropped"`).
    pub max_outbox: u64,
    /// Attempts per delivery before it is given up (`outcome="abandoned"`).
    pub max_attempts: u32,
    /// A delivery older than this (since its event) is given up, in seconds.
    pub max_age_secs: u64,
    /// Deliveries in flight at once (each config still gets one at a time, in order).
    pub max_concurrent: usize,
    /// Deliveries in flight at once to one receiver (a URL's scheme, host and port), so
    /// that a slow one leaves the other slots to the others (`max_concurrent` if that is
    /// lower).
    pub max_concurrent_per_receiver: usize,
    /// Failed attempts in a row (no answer, or not a 2xx) that open a receiver's breaker:
    /// nothing is sent to it for `breaker_open_ms`, then one delivery probes it.
    pub breaker_failures: u32,
    /// How long an opened breaker stays open, in ms; doubled after each failed probe, up
    /// to `backoff_max_ms`.
    pub breaker_open_ms: u64,
    /// One delivery's time limit (connect, send, response head), in ms.
    pub timeout_ms: u64,
    /// First retry delay, in ms; doubled per attempt (with jitter) up to `backoff_max_ms`.
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
    /// Bytes of a receiver's response body read (for the log); the rest is dropped.
    pub max_response_bytes: usize,
    /// Receivers on loopback addresses (127.0.0.0/8, ::1) are allowed. Off by default.
    pub allow_loopback: bool,
    /// Receivers on private networks (10/8, 172.16/12, 192.168/16, fc00::/7, 100.64/10)
    /// are allowed.
    pub allow_private: bool,
    /// If not empty, only these hosts (names, IP addresses or CIDR ranges) may receive.
    pub allow_hosts: Vec<String>,
    /// Hosts (names, IP addresses or CIDR ranges) that may never receive; link-local
    /// and cloud-metadata addresses are always refused.
    pub deny_hosts: Vec<String>,
    /// How often the delivery looks at the outbox when nothing woke it, in ms.
    pub poll_interval_ms: u64,
    /// Owed deliveries the delivery may hold in memory. While every owed delivery fits,
    /// each event is handed to the delivery as it is committed and the outbox is only
    /// written (never read); past it, the delivery reads the outbox until it fits again.
    /// 0: always read the outbox.
    pub memory_rows: usize,
}

impl Default for PushSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            max_configs_per_task: 10,
            max_outbox: 100_000,
            max_attempts: 12,
            max_age_secs: 86_400,
            max_concurrent: 64,
            max_concurrent_per_receiver: 64,
            breaker_failures: 5,
            breaker_open_ms: 5_000,
            timeout_ms: 10_000,
            backoff_initial_ms: 500,
            backoff_max_ms: 300_000,
            max_response_bytes: 4096,
            allow_loopback: false,
            allow_private: true,
            allow_hosts: Vec::new(),
            deny_hosts: Vec::new(),
            poll_interval_ms: 1000,
            memory_rows: 10_000,
        }
    }
}

impl PushSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        positive(
            "push.max_configs_per_task",
            self.max_configs_per_task as u64,
        )?;
        positive("push.max_outbox", self.max_outbox)?;
        positive("push.max_attempts", self.max_attempts.into())?;
        positive("push.max_age_secs", self.max_age_secs)?;
        positive("push.max_concurrent", self.max_concurrent as u64)?;
        positive(
            "push.max_concurrent_per_receiver",
            self.max_concurrent_per_receiver as u64,
        )?;
        positive("push.breaker_failures", self.breaker_failures.into())?;
        positive("push.breaker_open_ms", self.breaker_open_ms)?;
        positive("push.timeout_ms", self.timeout_ms)?;
        positive("push.backoff_initial_ms", self.backoff_initial_ms)?;
        positive("push.poll_interval_ms", self.poll_interval_ms)?;
        if self.backoff_max_ms < self.backoff_initial_ms {
            return Err(ConfigError::Key {
                key: "push.backoff_max_ms",
                problem: "must be at least push.backoff_initial_ms".into(),
            });
        }
        if self.breaker_open_ms > self.backoff_max_ms {
            return Err(ConfigError::Key {
                key: "push.breaker_open_ms",
                problem: "must be at most push.backoff_max_ms".into(),
            });
        }
        Ok(())
    }
}
