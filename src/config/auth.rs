//! `[auth]` and `[rate_limit]`: who may call the A2A endpoints, and how often.
//!
//! The API keys' tenants are not checked here (tenant ids are `domain`'s): the gate
//! (`service::auth`) parses them when the server starts, before anything is opened.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::jwt::{JwtIssuerSettings, validate_jwt};
use super::{ConfigError, positive};

/// Who may call the A2A endpoints (`[auth]`). The agent card, health, metrics and the
/// dashboard stay public.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSettings {
    /// Require credentials on every A2A request. On unless turned off explicitly; off,
    /// every request acts for the tenant `default` and rate limits do not apply.
    pub enabled: bool,
    /// API keys, each acting for one tenant at one rate-limit tier.
    pub api_keys: Vec<ApiKeySettings>,
    pub trusted_proxy: TrustedProxySettings,
    /// OIDC / JWT issuers whose bearer tokens are accepted (`[[auth.jwt]]`).
    pub jwt: Vec<JwtIssuerSettings>,
    /// Largest bearer token read as a JWT, in bytes.
    pub jwt_max_token_bytes: usize,
    /// Failed authentications one client address may make per minute (a minute's worth
    /// at once, then an even refill); past it, every request from that address gets 429
    /// with `Retry-After` until the budget refills, whatever credentials it carries.
    pub failures_per_minute: u32,
    /// Client addresses (IPv6: /64 networks) whose failures are tracked at once; past it,
    /// failures from addresses not yet tracked share one budget.
    pub failure_tracking_max_addresses: usize,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            api_keys: Vec::new(),
            trusted_proxy: TrustedProxySettings::default(),
            jwt: Vec::new(),
            jwt_max_token_bytes: 8192,
            failures_per_minute: 30,
            failure_tracking_max_addresses: 100_000,
        }
    }
}

/// One API key (`[[auth.api_keys]]`): `key` in clear or `key_sha256` (its SHA-256, hex).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeySettings {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub key_sha256: String,
    pub tenant: String,
    /// The `[rate_limit.tiers.<tier>]` that applies; unknown tiers get the default limit.
    #[serde(default = "ApiKeySettings::default_tier")]
    pub tier: String,
    /// The `[[agent.mcp_servers]]` whose tools the key's tenant may call, by name; unset:
    /// all of them, `[]`: none. Every key of one tenant names the same (a call knows its
    /// tenant, not its key).
    #[serde(default)]
    pub mcp_servers: Option<Vec<String>>,
}

impl ApiKeySettings {
    fn default_tier() -> String {
        "default".into()
    }

    /// The SHA-256 of a presented key, lowercase hex: how keys are compared.
    pub fn digest_of(key: &str) -> String {
        use sha2::{Digest, Sha256};
        format!("{:x}", Sha256::digest(key.as_bytes()))
    }

    /// This entry's digest: of `key`, or `key_sha256` as given (lowercased); `None` unless
    /// exactly one of them is set.
    pub fn digest(&self) -> Option<String> {
        match (self.key.is_empty(), self.key_sha256.is_empty()) {
            (false, true) => Some(Self::digest_of(&self.key)),
            (true, false) => Some(self.key_sha256.to_ascii_lowercase()),
            _ => None,
        }
    }
}

/// A reverse proxy that authenticates callers itself and names the tenant in a header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrustedProxySettings {
    /// Header carrying the tenant; empty: proxy mode is off.
    pub tenant_header: String,
    /// Header carrying the rate-limit tier (optional; empty or absent: `default`).
    pub tier_header: String,
    /// Header carrying the user id (optional), passed to the agent as `userId`.
    pub user_header: String,
    /// Peer addresses the headers are believed from; requests from elsewhere need a key.
    pub addresses: Vec<String>,
}

impl Default for TrustedProxySettings {
    fn default() -> Self {
        Self {
            tenant_header: String::new(),
            tier_header: String::new(),
            user_header: String::new(),
            addresses: vec!["127.0.0.1".into(), "::1".into()],
        }
    }
}

/// Requests per minute per tenant (`[rate_limit]`), by tier, and per skill for direct
/// tool calls. Each limit lets its whole minute's worth through at once, then refills
/// evenly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimitSettings {
    /// Requests per minute of a tenant whose tier has no `[rate_limit.tiers.<tier>]`.
    pub default_per_minute: u32,
    pub tiers: BTreeMap<String, LimitSettings>,
    /// Direct tool calls per minute of one tenant to one skill (by skill id).
    pub skills: BTreeMap<String, LimitSettings>,
}

impl Default for RateLimitSettings {
    fn default() -> Self {
        Self {
            default_per_minute: 100,
            tiers: BTreeMap::new(),
            skills: BTreeMap::new(),
        }
    }
}

/// One limit, in requests per minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSettings {
    pub per_minute: u32,
}

impl AuthSettings {
    /// Keys are well formed and unique, proxy addresses parse, and an enabled auth has
    /// some way in.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let problem = |key: &'static str, problem: String| ConfigError::Key { key, problem };
        if self.failures_per_minute == 0 {
            return Err(problem(
                "auth.failures_per_minute",
                "must be greater than 0".into(),
            ));
        }
        if self.failure_tracking_max_addresses == 0 {
            return Err(problem(
                "auth.failure_tracking_max_addresses",
                "must be greater than 0".into(),
            ));
        }
        validate_jwt(&self.jwt, self.jwt_max_token_bytes).map_err(|e| problem(e.key, e.problem))?;
        let mut digests = Vec::new();
        for (i, entry) in self.api_keys.iter().enumerate() {
            let n = i + 1;
            let Some(digest) = entry.digest() else {
                return Err(problem(
                    "auth.api_keys",
                    format!("entry {n}: set exactly one of key and key_sha256"),
                ));
            };
            if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(problem(
                    "auth.api_keys",
                    format!("entry {n}: key_sha256 must be 64 hex digits"),
                ));
            }
            if digests.contains(&digest) {
                return Err(problem(
                    "auth.api_keys",
                    format!("entry {n}: the key is listed twice"),
                ));
            }
            digests.push(digest);
        }
        for address in &self.trusted_proxy.addresses {
            address.parse::<std::net::IpAddr>().map_err(|e| {
                problem(
                    "auth.trusted_proxy.addresses",
                    format!("{address:?} is not an IP address ({e})"),
                )
            })?;
        }
        let no_way_in = self.api_keys.is_empty()
            && self.jwt.is_empty()
            && self.trusted_proxy.tenant_header.is_empty();
        if self.enabled && no_way_in {
            return Err(problem(
                "auth.enabled",
                "is true but no [[auth.api_keys]], no [[auth.jwt]] and no \
                 auth.trusted_proxy.tenant_header are configured, so every request would be \
                 refused (set auth.enabled = false for a local server without authentication)"
                    .into(),
            ));
        }
        Ok(())
    }
}

impl RateLimitSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        positive(
            "rate_limit.default_per_minute",
            u64::from(self.default_per_minute),
        )?;
        for limit in self.tiers.values() {
            positive("rate_limit.tiers", u64::from(limit.per_minute))?;
        }
        for limit in self.skills.values() {
            positive("rate_limit.skills", u64::from(limit.per_minute))?;
        }
        Ok(())
    }
}
