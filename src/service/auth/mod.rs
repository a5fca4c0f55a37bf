//! Who is calling, and whether they may call now: the [`Gate`] every A2A request passes
//! before anything is looked up, on every binding. A binding shows the gate what the
//! caller presented through [`Credentials`] (HTTP headers, gRPC metadata: the same names).
//!
//! **Authentication.** An API key (`Authorization: Bearer <key>` or `X-API-Key: <key>`)
//! names a tenant and a rate-limit tier. Keys are kept only as SHA-256 digests and a
//! presented key's digest is compared with every configured one in constant time, so
//! neither the comparison nor the configuration reveals keys. A bearer token shaped like
//! a JWT, when OIDC issuers are configured, is verified against its issuer's published
//! keys instead (`jwt`, `jwks`), and its claims name the tenant, tier and user. Behind a
//! trusted reverse proxy, the tenant (and optionally tier and user) come from configured
//! headers — but only from the configured peer addresses. Missing or wrong credentials
//! answer 401 with `WWW-Authenticate` (a refused token says why, per RFC 6750). With auth
//! off, every request acts for the tenant `default`.
//!
//! Admission is `async` only for a token whose issuer's keys must be fetched first; an
//! API key, a proxy's headers or a token with cached keys complete without suspending.
//!
//! **Rate limits.** A tenant gets its tier's requests per minute (`governor`'s GCRA: the
//! whole minute's worth at once, then an even refill); a direct tool call also spends from
//! the tenant's budget for that skill when one is configured. Over a limit: 429 with
//! `Retry-After` (seconds until a request would pass) and a count in
//! `agent_a2a_rate_limited_total{tenant_id, skill_name}`. Limits need identities, so with
//! auth off there are none.
//!
//! **Failed authentications** spend from a budget per client address (`failures`), in a
//! table of bounded size.

mod failures;
mod jwks;
mod jwt;
mod limits;

use std::net::IpAddr;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use self::failures::Failures;
use self::jwt::Issuers;
use self::limits::{Limits, retry_after_secs};
use crate::config::Settings;
use crate::domain::TenantId;
use crate::error::Error;
use crate::service::client_addr::TrustedProxies;
use crate::telemetry;

/// The tier of callers that name none.
const DEFAULT_TIER: &str = "default";
/// The `skill_name` label of a limit that is not a skill's.
const NO_SKILL: &str = "";

/// What a caller presented: its headers (HTTP) or metadata (gRPC), by lowercase name,
/// and the address it connects from.
pub trait Credentials {
    /// The value of `name` (lowercase), if present and readable as text.
    fn header(&self, name: &str) -> Option<&str>;
    /// Every value of `name` (lowercase) that is readable as text, in order.
    fn header_values(&self, name: &str) -> Vec<&str> {
        self.header(name).into_iter().collect()
    }
    /// The address of the connection's other end (a proxy, when there is one).
    fn peer(&self) -> Option<IpAddr>;
    /// The client a trusted proxy named in the connection's PROXY protocol header.
    fn proxied(&self) -> Option<IpAddr> {
        None
    }
}

/// The caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant: TenantId,
    pub tier: String,
    /// Set by a trusted proxy's user header or a token's user claim; the agent gets it as
    /// `userId`.
    pub user: Option<String>,
}

impl Principal {
    fn anonymous() -> Self {
        Self {
            tenant: TenantId::default_tenant(),
            tier: DEFAULT_TIER.into(),
            user: None,
        }
    }
}

struct Key {
    digest: [u8; 32],
    tenant: TenantId,
    tier: String,
}

/// Header names are kept lowercase: HTTP/2 (and so gRPC) metadata is lowercase only.
struct Proxy {
    tenant: String,
    tier: Option<String>,
    user: Option<String>,
    peers: Vec<IpAddr>,
}

/// The ways in, when auth is on.
struct Ways {
    keys: Vec<Key>,
    proxy: Option<Proxy>,
    /// `None`: no OIDC issuers are configured.
    jwt: Option<Issuers>,
}

/// Authentication and rate limits of the A2A endpoints.
pub struct Gate {
    /// `None`: auth is off.
    auth: Option<Ways>,
    limits: Limits,
    /// Failed authentications per client address (`auth.failures_per_minute`).
    failures: Failures,
    /// `server.trusted_proxies`: who may name the client.
    proxies: TrustedProxies,
}

/// Why the gate could not be built (settings that `Settings::validate` would refuse).
#[derive(Debug, thiserror::Error)]
#[error("invalid auth settings: {0}")]
pub struct GateError(String);

impl Gate {
    pub fn new(settings: &Settings) -> Result<Gate, GateError> {
        let auth = &settings.auth;
        let limits = Limits::new(&settings.rate_limit)?;
        let failures = Failures::new(
            auth.failures_per_minute,
            auth.failure_tracking_max_addresses,
        )?;
        let proxies = TrustedProxies::new(&settings.server.trusted_proxies)
            .map_err(|e| GateError(format!("server.trusted_proxies: {e}")))?;
        if !auth.enabled {
            tracing::warn!(
                "AUTHENTICATION IS OFF (auth.enabled = false): every request acts for the \
                 tenant \"default\" and no rate limits apply; do not expose this server"
            );
            return Ok(Gate {
                auth: None,
                limits,
                failures,
                proxies,
            });
        }
        let keys = auth
            .api_keys
            .iter()
            .map(|entry| {
                let digest = entry
                    .digest()
                    .and_then(|hex| decode_digest(&hex))
                    .ok_or_else(|| GateError(format!("api key of {}: bad key", entry.tenant)))?;
                let tenant = TenantId::parse(entry.tenant.clone())
                    .map_err(|e| GateError(format!("api key tenant: {e}")))?;
                Ok(Key {
                    digest,
                    tenant,
                    tier: entry.tier.clone(),
                })
            })
            .collect::<Result<Vec<_>, GateError>>()?;
        let proxy_settings = &auth.trusted_proxy;
        let header = |name: &str| -> Result<Option<String>, GateError> {
            if name.is_empty() {
                return Ok(None);
            }
            // RFC 9110 `token` characters.
            let valid = name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !valid {
                return Err(GateError(format!("header {name:?}: not a header name")));
            }
            Ok(Some(name.to_ascii_lowercase()))
        };
        let proxy = match header(&proxy_settings.tenant_header)? {
            Some(tenant) => Some(Proxy {
                tenant,
                tier: header(&proxy_settings.tier_header)?,
                user: header(&proxy_settings.user_header)?,
                peers: proxy_settings
                    .addresses
                    .iter()
                    .map(|a| {
                        a.parse()
                            .map_err(|e| GateError(format!("address {a:?}: {e}")))
                    })
                    .collect::<Result<_, _>>()?,
            }),
            None => None,
        };
        let jwt = Issuers::new(&auth.jwt, auth.jwt_max_token_bytes)?;
        if keys.is_empty() && proxy.is_none() && jwt.is_none() {
            return Err(GateError(
                "auth is enabled but neither api keys, OIDC issuers nor a trusted proxy are \
                 configured"
                    .into(),
            ));
        }
        tracing::info!(
            keys = keys.len(),
            proxy = proxy.is_some(),
            oidc_issuers = auth.jwt.len(),
            "authentication on"
        );
        Ok(Gate {
            auth: Some(Ways { keys, proxy, jwt }),
            limits,
            failures,
            proxies,
        })
    }

    /// Whether callers authenticate (auth is on): they may then get the extended card.
    pub fn authenticates(&self) -> bool {
        self.auth.is_some()
    }

    /// Whether API keys are accepted (the agent card then declares them).
    pub fn accepts_keys(&self) -> bool {
        self.auth.as_ref().is_some_and(|ways| !ways.keys.is_empty())
    }

    /// The OIDC issuers whose tokens are accepted, in configuration order (the agent
    /// card declares an OpenID Connect scheme for each).
    pub fn oidc_issuers(&self) -> Vec<String> {
        let issuers = self.auth.as_ref().and_then(|ways| ways.jwt.as_ref());
        issuers
            .map(|jwt| jwt.issuer_urls().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// Authenticates `req` and spends one request of its tenant's budget. An address
    /// that failed authentication too often is refused before its credentials are
    /// looked at, so guessing keys from it learns nothing until its budget refills.
    /// Only a token whose issuer's keys must be fetched makes this wait.
    pub async fn admit(&self, req: &impl Credentials) -> Result<Principal, Error> {
        let Some(ways) = &self.auth else {
            return Ok(Principal::anonymous());
        };
        let client = self.client(req);
        if let Some(client) = client
            && let Err(e) = self.failures.check(client)
        {
            tracing::debug!(client = %client, "refused: too many failed authentications");
            return Err(e);
        }
        let principal = match ways.presented(req) {
            Presented::Decided(principal) => principal,
            Presented::Token(jwt, token) => jwt.verify(token).await,
        };
        let principal = match principal {
            Ok(principal) => principal,
            Err(e) => {
                if let Error::InvalidToken(reason) = &e {
                    metrics::counter!(telemetry::JWT_REFUSALS, "reason" => reason.label())
                        .increment(1);
                }
                // A key fetch that failed is the server's problem, not a failed attempt.
                if matches!(e, Error::Unauthenticated(_) | Error::InvalidToken(_)) {
                    metrics::counter!(telemetry::AUTH_FAILURES, "outcome" => "refused")
                        .increment(1);
                    if let Some(client) = client {
                        tracing::debug!(client = %client, error = %e, "authentication failed");
                        self.failures.spend(client);
                    }
                }
                return Err(e);
            }
        };
        self.limits.tenant(&principal)?;
        Ok(principal)
    }

    /// The client of `req`: its peer, or who the trusted proxies between say it is
    /// (`client_addr.rs`).
    pub fn client(&self, req: &impl Credentials) -> Option<IpAddr> {
        let peer = req.peer()?;
        if self.proxies.is_empty() {
            return Some(peer);
        }
        Some(self.proxies.client(
            peer,
            req.proxied(),
            &req.header_values("forwarded"),
            &req.header_values("x-forwarded-for"),
        ))
    }

    /// The trusted proxies, whose PROXY headers the listeners read.
    pub fn trusted_proxies(&self) -> &TrustedProxies {
        &self.proxies
    }

    /// Spends one direct call of `skill` from the caller's budget for it, when the skill
    /// has a limit.
    pub fn admit_skill(&self, principal: &Principal, skill: &str) -> Result<(), Error> {
        if self.auth.is_none() {
            return Ok(());
        }
        self.limits.skill(principal, skill)
    }

    /// Forgets limiter state of tenants and addresses that have not called for a while.
    pub fn retain_recent(&self) {
        self.limits.retain_recent();
        self.failures.retain_recent();
    }
}

/// What a request's credentials come to before anything is awaited.
enum Presented<'a> {
    /// A proxy's headers or an API key, decided at once.
    Decided(Result<Principal, Error>),
    /// A JWT to verify (its issuer's keys may have to be fetched).
    Token(&'a Issuers, jwt::Unverified<'a>),
}

impl Ways {
    /// A trusted proxy's headers first, then a bearer token shaped like a JWT (when
    /// issuers are configured), then an API key.
    fn presented<'a>(&'a self, req: &'a impl Credentials) -> Presented<'a> {
        if let Some(proxy) = &self.proxy {
            match from_proxy(proxy, req) {
                Ok(None) => {}
                Ok(Some(principal)) => return Presented::Decided(Ok(principal)),
                Err(e) => return Presented::Decided(Err(e)),
            }
        }
        if let Some(jwt) = &self.jwt {
            match bearer(req).and_then(|token| jwt.recognise(token)) {
                Some(Ok(token)) => return Presented::Token(jwt, token),
                Some(Err(reason)) => return Presented::Decided(Err(Error::InvalidToken(reason))),
                // With issuers but no keys, any other bearer token is a malformed JWT.
                None if self.keys.is_empty() && bearer(req).is_some() => {
                    return Presented::Decided(Err(Error::InvalidToken(
                        crate::error::TokenError::Malformed,
                    )));
                }
                None => {}
            }
        }
        Presented::Decided(from_key(&self.keys, req, self.jwt.is_some()))
    }
}

/// The principal a trusted proxy names: `None` when the peer is not trusted or the header
/// is absent (then the request needs a key).
fn from_proxy(proxy: &Proxy, req: &impl Credentials) -> Result<Option<Principal>, Error> {
    let trusted = req.peer().is_some_and(|peer| proxy.peers.contains(&peer));
    if !trusted {
        return Ok(None);
    }
    let Some(tenant) = header_text(req, &proxy.tenant) else {
        return Ok(None);
    };
    let tenant = TenantId::parse(tenant).map_err(|e| {
        Error::Unauthenticated(format!(
            "the tenant header is not a valid tenant id: it {e}"
        ))
    })?;
    let tier = proxy
        .tier
        .as_ref()
        .and_then(|h| header_text(req, h))
        .unwrap_or_else(|| DEFAULT_TIER.into());
    let user = proxy.user.as_ref().and_then(|h| header_text(req, h));
    Ok(Some(Principal { tenant, tier, user }))
}

fn from_key(keys: &[Key], req: &impl Credentials, tokens: bool) -> Result<Principal, Error> {
    let presented = presented_key(req).ok_or_else(|| {
        Error::Unauthenticated(match (keys.is_empty(), tokens) {
            (true, true) => {
                "credentials required: send a token as \"Authorization: Bearer <token>\"".into()
            }
            (false, true) => "credentials required: send a token or an API key as \
                 \"Authorization: Bearer <token or key>\", or an API key as \"X-API-Key: <key>\""
                .into(),
            (_, false) => {
                "credentials required: send an API key as \"Authorization: Bearer <key>\" or \
                 \"X-API-Key: <key>\""
                    .into()
            }
        })
    })?;
    let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
    // Every configured digest is compared, each in constant time.
    let mut found = None;
    for key in keys {
        if bool::from(key.digest.ct_eq(&digest)) {
            found = Some(key);
        }
    }
    let key = found.ok_or_else(|| Error::Unauthenticated("invalid API key".into()))?;
    Ok(Principal {
        tenant: key.tenant.clone(),
        tier: key.tier.clone(),
        user: None,
    })
}

/// The key of `Authorization: Bearer <key>`, else of `X-API-Key`.
fn presented_key(req: &impl Credentials) -> Option<String> {
    bearer(req)
        .map(str::to_owned)
        .or_else(|| header_text(req, "x-api-key"))
        .filter(|key| !key.is_empty())
}

/// The token of `Authorization: Bearer <token>` (any case of `Bearer`), when not empty.
fn bearer(req: &impl Credentials) -> Option<&str> {
    let (scheme, token) = req.header("authorization")?.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn header_text(req: &impl Credentials, name: &str) -> Option<String> {
    req.header(name)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

fn decode_digest(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ApiKeySettings, AuthSettings, LimitSettings, RateLimitSettings};

    /// What a test caller presents.
    #[derive(Default)]
    struct Presented {
        headers: Vec<(String, String)>,
        peer: Option<IpAddr>,
    }

    impl Presented {
        fn insert_header(mut self, (name, value): (&str, impl Into<String>)) -> Self {
            self.headers.push((name.to_ascii_lowercase(), value.into()));
            self
        }
        fn peer_addr(mut self, peer: std::net::SocketAddr) -> Self {
            self.peer = Some(peer.ip());
            self
        }
    }

    impl Credentials for Presented {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        }
        fn peer(&self) -> Option<IpAddr> {
            self.peer
        }
    }

    fn settings(keys: &[(&str, &str, &str)], per_minute: u32) -> Settings {
        Settings {
            auth: AuthSettings {
                enabled: true,
                api_keys: keys
                    .iter()
                    .map(|(key, tenant, tier)| ApiKeySettings {
                        key: (*key).into(),
                        key_sha256: String::new(),
                        tenant: (*tenant).into(),
                        tier: (*tier).into(),
                        mcp_servers: None,
                    })
                    .collect(),
                ..AuthSettings::default()
            },
            rate_limit: RateLimitSettings {
                default_per_minute: per_minute,
                ..RateLimitSettings::default()
            },
            ..Settings::default()
        }
    }

    #[tokio::test]
    async fn keys_name_their_tenant_by_either_header() {
        let gate = Gate::new(&settings(
            &[("k1", "acme", "free"), ("k2", "globex", "pro")],
            100,
        ))
        .unwrap();
        let bearer = Presented::default().insert_header(("Authorization", "Bearer k1"));
        assert_eq!(gate.admit(&bearer).await.unwrap().tenant.as_str(), "acme");
        let api_key = Presented::default().insert_header(("X-API-Key", "k2"));
        let p = gate.admit(&api_key).await.unwrap();
        assert_eq!((p.tenant.as_str(), p.tier.as_str()), ("globex", "pro"));
        let lower = Presented::default().insert_header(("Authorization", "bearer k2"));
        assert_eq!(gate.admit(&lower).await.unwrap().tenant.as_str(), "globex");
    }

    #[tokio::test]
    async fn missing_or_wrong_keys_are_unauthenticated() {
        let gate = Gate::new(&settings(&[("k1", "acme", "free")], 100)).unwrap();
        for req in [
            Presented::default(),
            Presented::default().insert_header(("Authorization", "Bearer nope")),
            Presented::default().insert_header(("Authorization", "Basic k1")),
            Presented::default().insert_header(("X-API-Key", "")),
        ] {
            let e = gate.admit(&req).await.unwrap_err();
            assert!(matches!(e, Error::Unauthenticated(_)), "{e}");
        }
    }

    #[tokio::test]
    async fn hashed_keys_match_the_clear_key() {
        let mut s = settings(&[], 100);
        s.auth.api_keys.push(ApiKeySettings {
            key: String::new(),
            key_sha256: ApiKeySettings::digest_of("secret").to_uppercase(),
            tenant: "acme".into(),
            tier: "default".into(),
            mcp_servers: None,
        });
        let gate = Gate::new(&s).unwrap();
        let req = Presented::default().insert_header(("X-API-Key", "secret"));
        assert_eq!(gate.admit(&req).await.unwrap().tenant.as_str(), "acme");
    }

    #[tokio::test]
    async fn over_the_limit_is_rate_limited_with_the_wait() {
        let mut s = settings(&[("k1", "acme", "free"), ("k2", "globex", "pro")], 2);
        s.rate_limit
            .tiers
            .insert("pro".into(), LimitSettings { per_minute: 3 });
        s.rate_limit
            .skills
            .insert("memory".into(), LimitSettings { per_minute: 1 });
        let gate = Gate::new(&s).unwrap();
        let req = |key: &str| Presented::default().insert_header(("X-API-Key", key.to_owned()));
        gate.admit(&req("k1")).await.unwrap();
        gate.admit(&req("k1")).await.unwrap();
        match gate.admit(&req("k1")).await.unwrap_err() {
            Error::RateLimited {
                retry_after_secs,
                scope,
            } => {
                // 2 per minute refill one every 30 s.
                assert!((1..=30).contains(&retry_after_secs), "{retry_after_secs}");
                assert_eq!(scope, "tenant acme");
            }
            other => panic!("{other}"),
        }
        // Another tenant (another tier) has its own budget.
        for _ in 0..3 {
            gate.admit(&req("k2")).await.unwrap();
        }
        assert!(gate.admit(&req("k2")).await.is_err());
        // Skill budgets are per tenant and skill; skills without a limit are free.
        let acme = Principal {
            tenant: TenantId::parse("acme").unwrap(),
            tier: "free".into(),
            user: None,
        };
        gate.admit_skill(&acme, "memory").unwrap();
        assert!(matches!(
            gate.admit_skill(&acme, "memory"),
            Err(Error::RateLimited { ref scope, .. }) if scope == "tenant acme on skill memory"
        ));
        gate.admit_skill(&acme, "knowledge").unwrap();
    }

    #[tokio::test]
    async fn a_trusted_proxy_names_the_tenant_only_from_its_addresses() {
        let mut s = settings(&[("k1", "acme", "free")], 100);
        s.auth.trusted_proxy.tenant_header = "X-Tenant-Id".into();
        s.auth.trusted_proxy.user_header = "X-User-Id".into();
        let gate = Gate::new(&s).unwrap();
        let from = |peer: &str| {
            Presented::default()
                .peer_addr(peer.parse().unwrap())
                .insert_header(("X-Tenant-Id", "initech"))
                .insert_header(("X-User-Id", "milton"))
        };
        let p = gate.admit(&from("127.0.0.1:5000")).await.unwrap();
        assert_eq!(p.tenant.as_str(), "initech");
        assert_eq!(p.user.as_deref(), Some("milton"));
        let e = gate.admit(&from("10.1.2.3:5000")).await.unwrap_err();
        assert!(
            matches!(e, Error::Unauthenticated(_)),
            "untrusted peers need a key"
        );
        // What the proxy names must be a tenant id, like a configured tenant.
        let too_long = "t".repeat(65);
        for tenant in ["../x", "a b", "a/b", too_long.as_str()] {
            let naming = Presented::default()
                .peer_addr("127.0.0.1:5000".parse().unwrap())
                .insert_header(("X-Tenant-Id", tenant));
            match gate.admit(&naming).await {
                Err(Error::Unauthenticated(why)) => assert!(
                    why.starts_with("the tenant header is not a valid tenant id: it must be"),
                    "{tenant}: {why}"
                ),
                other => panic!("{tenant}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn with_auth_off_everyone_is_the_default_tenant_without_limits() {
        let mut s = settings(&[], 1);
        s.auth.enabled = false;
        let gate = Gate::new(&s).unwrap();
        for _ in 0..5 {
            let p = gate.admit(&Presented::default()).await.unwrap();
            assert_eq!(p.tenant, TenantId::default_tenant());
        }
        assert!(!gate.accepts_keys());
    }

    #[tokio::test]
    async fn an_address_that_keeps_failing_is_throttled_whatever_it_sends() {
        let mut s = settings(&[("k1", "acme", "free")], 100);
        s.auth.failures_per_minute = 3;
        let gate = Gate::new(&s).unwrap();
        let from = |peer: &str, key: &str| {
            Presented::default()
                .peer_addr(peer.parse().unwrap())
                .insert_header(("X-API-Key", key.to_owned()))
        };
        for _ in 0..3 {
            let e = gate.admit(&from("10.0.0.1:1", "wrong")).await.unwrap_err();
            assert!(matches!(e, Error::Unauthenticated(_)), "{e}");
        }
        // The fourth failure spends past the budget: from now on the address is refused
        // before its key is looked at — even the right key.
        assert!(gate.admit(&from("10.0.0.1:1", "wrong")).await.is_err());
        for key in ["wrong", "k1"] {
            match gate.admit(&from("10.0.0.1:2", key)).await.unwrap_err() {
                Error::RateLimited {
                    retry_after_secs,
                    scope,
                } => {
                    assert!((1..=20).contains(&retry_after_secs), "{retry_after_secs}");
                    assert!(scope.contains("failed authentications"), "{scope}");
                }
                other => panic!("{key}: {other}"),
            }
        }
        // Another address is not affected.
        assert_eq!(
            gate.admit(&from("10.0.0.2:1", "k1"))
                .await
                .unwrap()
                .tenant
                .as_str(),
            "acme"
        );
    }

    #[test]
    fn retry_after_rounds_up_and_is_never_zero() {
        use std::time::Duration;
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_nanos(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(999)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(30)), 30);
    }

    #[tokio::test]
    async fn bearer_tokens_go_to_the_jwt_path_only_when_shaped_like_one() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut s = settings(&[("k1", "acme", "free")], 100);
        s.auth.jwt = vec![crate::config::JwtIssuerSettings::new(
            "https://id.example.com",
            "a2a",
            "http://127.0.0.1:9/jwks",
        )];
        let gate = Gate::new(&s).unwrap();
        assert_eq!(gate.oidc_issuers(), ["https://id.example.com"]);
        let bearer = |token: &str| {
            Presented::default().insert_header(("Authorization", format!("Bearer {token}")))
        };
        // A key is still a key; a JWT-shaped token is a token (here: an unknown issuer).
        assert_eq!(
            gate.admit(&bearer("k1")).await.unwrap().tenant.as_str(),
            "acme"
        );
        let e = gate.admit(&bearer("bad")).await.unwrap_err();
        assert!(matches!(e, Error::Unauthenticated(_)), "{e}");
        let token = "eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJodHRwczovL290aGVyIn0.c2ln";
        let e = gate.admit(&bearer(token)).await.unwrap_err();
        assert_eq!(e, Error::InvalidToken(crate::error::TokenError::Issuer));
        // Issuers without keys: any other bearer token is a malformed token.
        s.auth.api_keys.clear();
        let gate = Gate::new(&s).unwrap();
        assert!(!gate.accepts_keys());
        let e = gate.admit(&bearer("k1")).await.unwrap_err();
        assert_eq!(e, Error::InvalidToken(crate::error::TokenError::Malformed));
        let e = gate.admit(&Presented::default()).await.unwrap_err();
        assert!(matches!(e, Error::Unauthenticated(_)), "{e}");
    }

    #[test]
    fn enabled_auth_without_a_way_in_is_refused() {
        assert!(Gate::new(&settings(&[], 100)).is_err());
    }
}
