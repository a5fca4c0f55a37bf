//! Settings: `config.toml`, then `AGENT_A2A__SECTION__KEY` environment variables, then
//! `DATABASE_URL`, then command-line flags (each layer beats the one before).
//!
//! Every bound the server enforces has a key here with its default; `config.toml` at the
//! repository root lists them all with a comment each (tests hold the file to the
//! defaults, key for key and value for value, so the three copies of a setting — field,
//! `Default`, file — cannot drift apart). Unknown keys are errors, so a typo stops
//! start-up instead of being silently ignored.
//!
//! This file holds [`Settings`], the loading and the top-level [`Settings::validate`];
//! each group of sections lives in a file of its own under `config/` with its defaults
//! and its checks, and is re-exported here.
//!
//! **Architecture invariant:** `config` is a leaf: it imports nothing of the crate
//! (`tests/it/layering.rs` names any line that does). Modules that own a type read
//! their settings into it (`StoreConfig::from_settings`,
//! `skills::governance::configured_policies`), and checks that need another module's
//! rules run there, at start-up (`startup::check`, the gate's tenants).

mod agent;
mod auth;
mod cluster;
mod jwt;
mod mcp;
mod models;
mod ops;
mod push;
mod server;
mod skills;
mod store;
mod telemetry;
mod threads;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

pub use agent::{
    AgentSettings, CardSigningSettings, HistorySettings, RemoteAgentSettings, SubAgentSettings,
};
pub use auth::{
    ApiKeySettings, AuthSettings, LimitSettings, RateLimitSettings, TrustedProxySettings,
};
pub use cluster::ClusterSettings;
pub use jwt::{ASYMMETRIC_ALGORITHMS, JwtIssuerSettings, JwtSettingsError, validate_jwt};
pub use mcp::McpServerSettings;
pub use models::{ModelSettings, ProviderKind, ProviderSettings};
pub use ops::{HealthSettings, LogFormat, LogSettings, MetricsSettings};
pub use push::PushSettings;
pub use server::{ServerSettings, StreamingSettings};
pub use skills::{
    GovernanceSettings, KnowledgeSettings, MemorySettings, PolicyLayer, PolicyMode, PolicySettings,
    RuleOperator, RuleSettings, RuleSeverity, RuleTarget, SkillSettings,
};
pub use store::{
    DEFAULT_COMMITS_IN_FLIGHT, MAX_COMMITS_IN_FLIGHT, MAX_START_GRACE_MS, PersistenceSettings,
    SqliteSynchronous, StoreSettings,
};
pub use telemetry::TelemetrySettings;
pub use threads::{IdempotencySettings, StateSettings, ThreadSettings};

/// All settings of a running server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub server: ServerSettings,
    pub auth: AuthSettings,
    pub rate_limit: RateLimitSettings,
    pub agent: AgentSettings,
    pub store: StoreSettings,
    pub persistence: PersistenceSettings,
    pub threads: ThreadSettings,
    pub streaming: StreamingSettings,
    pub push: PushSettings,
    pub idempotency: IdempotencySettings,
    pub skills: SkillSettings,
    pub memory: MemorySettings,
    pub knowledge: KnowledgeSettings,
    pub governance: GovernanceSettings,
    pub history: HistorySettings,
    pub state: StateSettings,
    pub providers: BTreeMap<String, ProviderSettings>,
    pub models: ModelSettings,
    pub log: LogSettings,
    pub metrics: MetricsSettings,
    pub health: HealthSettings,
    pub cluster: ClusterSettings,
    pub telemetry: TelemetrySettings,
}

/// Values given on the command line; `None` leaves the lower layers in force.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub config_file: Option<PathBuf>,
    pub bind: Option<String>,
    /// `server.grpc_bind` (empty: no gRPC).
    pub grpc_bind: Option<String>,
    pub database_url: Option<String>,
    pub data_dir: Option<PathBuf>,
}

/// A configuration problem, naming the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration file {0} does not exist")]
    MissingFile(PathBuf),
    #[error("invalid configuration: {0}")]
    Invalid(String),
    #[error("invalid configuration: `{key}` {problem}")]
    Key { key: &'static str, problem: String },
}

impl Settings {
    /// Loads the layers. Without `--config`, `./config.toml` is read when it exists.
    pub fn load(overrides: &Overrides) -> Result<Settings, ConfigError> {
        Self::load_from(overrides, std::env::vars())
    }

    /// Like [`Settings::load`] with an explicit environment (tests pass their own).
    pub fn load_from(
        overrides: &Overrides,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        match &overrides.config_file {
            Some(path) if !path.exists() => return Err(ConfigError::MissingFile(path.clone())),
            Some(path) => figment = figment.merge(Toml::file_exact(path)),
            None if Path::new("config.toml").exists() => {
                figment = figment.merge(Toml::file_exact("config.toml"))
            }
            None => {}
        }
        let env: Vec<(String, String)> = env.into_iter().collect();
        let prefixed: Vec<(String, String)> = env
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix("AGENT_A2A__")
                    .map(|rest| (rest.to_owned(), v.clone()))
            })
            .collect();
        if !prefixed.is_empty() {
            let mut section = figment::value::Dict::new();
            for (key, value) in prefixed {
                let path: Vec<String> = key.split("__").map(str::to_lowercase).collect();
                insert_path(&mut section, &path, &value);
            }
            figment = figment.merge(Serialized::defaults(section));
        }
        let mut settings: Settings = figment
            .extract()
            .map_err(|e| ConfigError::Invalid(describe(&e)))?;
        if let Some((_, url)) = env.iter().find(|(k, _)| k == "DATABASE_URL")
            && !url.is_empty()
        {
            settings.store.database_url = url.clone();
        }
        if let Some(bind) = &overrides.bind {
            settings.server.bind = bind.clone();
        }
        if let Some(bind) = &overrides.grpc_bind {
            settings.server.grpc_bind = bind.clone();
        }
        if let Some(url) = &overrides.database_url {
            settings.store.database_url = url.clone();
        }
        if let Some(dir) = &overrides.data_dir {
            settings.store.data_dir = dir.clone();
        }
        settings.validate()?;
        Ok(settings)
    }

    /// Checks what types alone cannot: addresses parse, bounds are positive, names
    /// point at something defined. Each section checks itself; the few checks across
    /// sections get the sections they read.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.server.validate()?;
        self.streaming.validate()?;
        self.store.validate()?;
        self.persistence.validate()?;
        self.threads.validate()?;
        self.idempotency.validate()?;
        self.health.validate()?;
        self.metrics.validate()?;
        self.push.validate()?;
        self.skills.validate()?;
        self.memory.validate()?;
        self.knowledge.validate()?;
        self.auth.validate()?;
        self.rate_limit.validate()?;
        self.agent.validate(&self.providers)?;
        self.cluster.validate(&self.server, &self.store)?;
        self.telemetry.validate()?;
        self.validate_remote_timeouts()?;
        self.validate_mcp_tenants()?;
        self.validate_retention()
    }

    /// A remote agent's or MCP server's call is a tool call: `skills.timeout_ms` cuts it,
    /// so its own `timeout_ms` (which ends it with the remote's reason) must come first.
    fn validate_remote_timeouts(&self) -> Result<(), ConfigError> {
        let cut = self.skills.timeout_ms;
        let remotes = self.agent.remote_agents.iter();
        let remotes = remotes.map(|r| ("agent.remote_agents", &r.name, r.timeout_ms));
        let servers = self.agent.mcp_servers.iter();
        let servers = servers.map(|m| ("agent.mcp_servers", &m.name, m.timeout_ms));
        match remotes.chain(servers).find(|(.., timeout)| *timeout > cut) {
            Some((key, name, timeout)) => Err(ConfigError::Key {
                key,
                problem: format!(
                    "{name}: `timeout_ms` ({timeout}) is longer than skills.timeout_ms ({cut}), \
                     which ends every tool call"
                ),
            }),
            None => Ok(()),
        }
    }

    /// The MCP servers an API key's tenant may use are configured ones, and every key of
    /// a tenant names the same (a call knows its tenant, not its key).
    fn validate_mcp_tenants(&self) -> Result<(), ConfigError> {
        let refuse = |problem: String| {
            Err(ConfigError::Key {
                key: "auth.api_keys",
                problem,
            })
        };
        let mut by_tenant: BTreeMap<&str, Option<&Vec<String>>> = BTreeMap::new();
        for entry in &self.auth.api_keys {
            if let Some(servers) = &entry.mcp_servers
                && let Some(unknown) = servers
                    .iter()
                    .find(|s| !self.agent.mcp_servers.iter().any(|m| &m.name == *s))
            {
                return refuse(format!(
                    "tenant {:?}: `mcp_servers` names {unknown:?}, which no \
                     [[agent.mcp_servers]] names",
                    entry.tenant
                ));
            }
            let servers = entry.mcp_servers.as_ref();
            match by_tenant.get(entry.tenant.as_str()) {
                Some(seen) if *seen != servers => {
                    return refuse(format!(
                        "the keys of tenant {:?} name different `mcp_servers`; a tenant's \
                         keys must agree",
                        entry.tenant
                    ));
                }
                _ => {
                    by_tenant.insert(&entry.tenant, servers);
                }
            }
        }
        Ok(())
    }

    /// A retained thread outlives the idempotency claims of its messages: a retry within
    /// the window must find the task its claim names.
    fn validate_retention(&self) -> Result<(), ConfigError> {
        let retention = self.store.retention_secs;
        let kept = retention.saturating_add(self.threads.thread_ttl_secs);
        if retention > 0 && self.idempotency.enabled && kept < self.idempotency.window_secs {
            return Err(ConfigError::Key {
                key: "store.retention_secs",
                problem: format!(
                    "with threads.thread_ttl_secs ({}) must cover idempotency.window_secs ({}): \
                     at least {}, or 0 to keep every thread",
                    self.threads.thread_ttl_secs,
                    self.idempotency.window_secs,
                    self.idempotency.window_secs - self.threads.thread_ttl_secs
                ),
            });
        }
        Ok(())
    }

    /// The knowledge repository's directory.
    pub fn knowledge_repo(&self) -> PathBuf {
        if self.knowledge.repo_path.as_os_str().is_empty() {
            self.store.data_dir.join("knowledge")
        } else {
            self.knowledge.repo_path.clone()
        }
    }
}

/// `Err` naming `key` unless `value` is greater than 0.
fn positive(key: &'static str, value: u64) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(ConfigError::Key {
            key,
            problem: "must be greater than 0".into(),
        });
    }
    Ok(())
}

/// Puts an environment value at `path` in a nested dictionary. Values are parsed as
/// TOML scalars or arrays when they can be (`8080`, `true`, `["a"]`), else kept as strings.
fn insert_path(dict: &mut figment::value::Dict, path: &[String], raw: &str) {
    use figment::value::Value;
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if rest.is_empty() {
        let value = raw
            .parse::<figment::value::Value>()
            .unwrap_or_else(|_| Value::from(raw.to_owned()));
        dict.insert(first.clone(), value);
        return;
    }
    let entry = dict
        .entry(first.clone())
        .or_insert_with(|| Value::from(figment::value::Dict::new()));
    if let Value::Dict(_, inner) = entry {
        insert_path(inner, rest, raw);
    }
}

fn describe(e: &figment::Error) -> String {
    e.clone()
        .into_iter()
        .map(|e| {
            let key = e.path.join(".");
            if key.is_empty() {
                e.kind.to_string()
            } else {
                format!("`{key}`: {}", e.kind)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}
