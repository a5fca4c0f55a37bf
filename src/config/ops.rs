//! `[log]`, `[metrics]` and `[health]`: what operators see of the server.

use serde::{Deserialize, Serialize};

use super::{ConfigError, positive};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// Logging (`[log]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    /// `text` or `json` (to stderr).
    pub format: LogFormat,
    /// A tracing filter such as `info` or `agent_a2a=debug,info` (`RUST_LOG` wins).
    pub level: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

/// `/metrics`, the dashboard and the store census (`[metrics]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSettings {
    /// Serve the operators' dashboard at `/dashboard` (and its `/dashboard/stats.json`).
    pub dashboard: bool,
    /// How often active threads and tasks by state are counted in the store, in
    /// seconds; 0: never (those gauges are then not exported).
    pub census_interval_secs: u64,
    /// The census counts every row, so its time grows with the store: the next one waits
    /// long enough that censuses take at most this share of the time, in percent (1 to
    /// 100); the interval above is the least wait.
    pub census_max_busy_percent: u64,
    /// When set, `/metrics` answers only `Authorization: Bearer <this token>` (its labels
    /// name tenants); empty: open to whoever reaches the port.
    pub bearer_token: String,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        Self {
            dashboard: true,
            census_interval_secs: 15,
            census_max_busy_percent: 1,
            bearer_token: String::new(),
        }
    }
}

impl MetricsSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=100).contains(&self.census_max_busy_percent) {
            return Err(ConfigError::Key {
                key: "metrics.census_max_busy_percent",
                problem: "must be from 1 to 100".into(),
            });
        }
        Ok(())
    }
}

/// `/health` (`[health]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthSettings {
    /// How long `/health` waits for one dependency's check (the store's round trip, a
    /// skill's engine, a model actor's circuit state) before reporting it down, in ms.
    pub timeout_ms: u64,
}

impl Default for HealthSettings {
    fn default() -> Self {
        Self { timeout_ms: 2_000 }
    }
}

impl HealthSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        positive("health.timeout_ms", self.timeout_ms)
    }
}
