//! The settings of OIDC / JWT bearer tokens (`[[auth.jwt]]`): which issuers' tokens are
//! accepted, where their signing keys are published (JWKS), how often those may be
//! fetched, and which claims name the caller's tenant, tier and user.
//!
//! This file knows nothing of the rest of the crate (serde and std only): `mod.rs`
//! re-exports the types and turns a [`JwtSettingsError`] into its own error, and
//! `service::auth::jwt` builds the verifier from them.

use serde::{Deserialize, Serialize};

/// Signature algorithms accepted when an issuer names none: RSA PKCS#1 and ECDSA P-256,
/// what OIDC providers sign with.
pub const DEFAULT_ALGORITHMS: [&str; 2] = ["RS256", "ES256"];

/// The algorithms an issuer may allow: asymmetric ones only. `none` and the HMAC family
/// (`HS256`, …) are refused: a verifier that accepts HMAC would check a token against
/// the issuer's *public* key used as a shared secret, which anyone can sign with.
pub const ASYMMETRIC_ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// Largest `clock_skew_secs`: more would keep expired tokens alive for long.
pub const MAX_CLOCK_SKEW_SECS: u64 = 300;
/// Largest `jwks_cache_secs` (a day): keys an issuer withdrew stop being trusted by then.
pub const MAX_JWKS_CACHE_SECS: u64 = 86_400;
/// Largest `jwks_timeout_ms`: a request waiting for a key fetch waits at most this long.
pub const MAX_JWKS_TIMEOUT_MS: u64 = 30_000;
/// Largest `jwks_max_keys`.
pub const MAX_JWKS_KEYS: usize = 1_000;
/// Largest `jwks_max_bytes` (1 MiB).
pub const MAX_JWKS_BYTES: usize = 1024 * 1024;
/// Bounds of `auth.jwt_max_token_bytes`: a signed JWT with its claims is rarely under
/// 512 bytes, and HTTP servers commonly cap a header at 8 to 16 KiB.
pub const TOKEN_BYTES_RANGE: std::ops::RangeInclusive<usize> = 512..=16 * 1024;

/// One trusted token issuer (`[[auth.jwt]]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtIssuerSettings {
    /// The `iss` a token must carry, compared exactly (e.g. `https://login.example.com/`).
    /// The agent card points clients at `<issuer>/.well-known/openid-configuration`.
    pub issuer: String,
    /// The `aud` a token must carry (a token's `aud` may be a string or a list that
    /// contains it).
    pub audience: String,
    /// Where the issuer publishes its signing keys (a JWK Set).
    pub jwks_url: String,
    /// Signature algorithms accepted (the token's header must name one of them).
    #[serde(default = "JwtIssuerSettings::default_algorithms")]
    pub algorithms: Vec<String>,
    /// Leeway in seconds for `exp` and `nbf` between this server's clock and the issuer's.
    #[serde(default = "JwtIssuerSettings::default_clock_skew_secs")]
    pub clock_skew_secs: u64,
    /// Claim naming the tenant (a string). Ignored when `tenant` is set.
    #[serde(default = "JwtIssuerSettings::default_tenant_claim")]
    pub tenant_claim: String,
    /// A fixed tenant for every token of this issuer, instead of `tenant_claim`.
    #[serde(default)]
    pub tenant: String,
    /// Claim naming the rate-limit tier; empty (or the claim absent): tier `default`.
    #[serde(default)]
    pub tier_claim: String,
    /// Claim naming the user, given to the agent as `userId`; empty: none.
    #[serde(default = "JwtIssuerSettings::default_user_claim")]
    pub user_claim: String,
    /// How long fetched keys are used before they are fetched again, in seconds.
    #[serde(default = "JwtIssuerSettings::default_jwks_cache_secs")]
    pub jwks_cache_secs: u64,
    /// A token naming a key the cache lacks makes the server refetch the keys at most
    /// once per this many seconds (a failed fetch is retried no sooner either).
    #[serde(default = "JwtIssuerSettings::default_jwks_min_refresh_secs")]
    pub jwks_min_refresh_secs: u64,
    /// How long one key fetch may take, in milliseconds.
    #[serde(default = "JwtIssuerSettings::default_jwks_timeout_ms")]
    pub jwks_timeout_ms: u64,
    /// Most keys kept from one JWK Set (later ones are ignored).
    #[serde(default = "JwtIssuerSettings::default_jwks_max_keys")]
    pub jwks_max_keys: usize,
    /// Largest JWK Set body read, in bytes (a larger one fails the fetch).
    #[serde(default = "JwtIssuerSettings::default_jwks_max_bytes")]
    pub jwks_max_bytes: usize,
}

impl JwtIssuerSettings {
    /// An issuer with every optional key at its default.
    pub fn new(issuer: &str, audience: &str, jwks_url: &str) -> Self {
        Self {
            issuer: issuer.into(),
            audience: audience.into(),
            jwks_url: jwks_url.into(),
            algorithms: Self::default_algorithms(),
            clock_skew_secs: Self::default_clock_skew_secs(),
            tenant_claim: Self::default_tenant_claim(),
            tenant: String::new(),
            tier_claim: String::new(),
            user_claim: Self::default_user_claim(),
            jwks_cache_secs: Self::default_jwks_cache_secs(),
            jwks_min_refresh_secs: Self::default_jwks_min_refresh_secs(),
            jwks_timeout_ms: Self::default_jwks_timeout_ms(),
            jwks_max_keys: Self::default_jwks_max_keys(),
            jwks_max_bytes: Self::default_jwks_max_bytes(),
        }
    }

    /// The OpenID Connect discovery document of this issuer.
    pub fn discovery_url(&self) -> String {
        format!(
            "{}/.well-known/openid-configuration",
            self.issuer.trim_end_matches('/')
        )
    }

    fn default_algorithms() -> Vec<String> {
        DEFAULT_ALGORITHMS.iter().map(|a| (*a).to_owned()).collect()
    }
    fn default_clock_skew_secs() -> u64 {
        60
    }
    fn default_tenant_claim() -> String {
        "tenant".into()
    }
    fn default_user_claim() -> String {
        "sub".into()
    }
    fn default_jwks_cache_secs() -> u64 {
        600
    }
    fn default_jwks_min_refresh_secs() -> u64 {
        30
    }
    fn default_jwks_timeout_ms() -> u64 {
        3000
    }
    fn default_jwks_max_keys() -> usize {
        32
    }
    fn default_jwks_max_bytes() -> usize {
        64 * 1024
    }
}

/// A `[[auth.jwt]]` setting out of its bounds: the key and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtSettingsError {
    pub key: &'static str,
    pub problem: String,
}

/// Checks every issuer and the token size bound. A fixed tenant's syntax is the gate's
/// to check (`service::auth` parses it when the server starts), as API keys' tenants are:
/// tenant ids are `domain`'s, and settings import nothing of the crate.
pub fn validate_jwt(
    issuers: &[JwtIssuerSettings],
    max_token_bytes: usize,
) -> Result<(), JwtSettingsError> {
    if !TOKEN_BYTES_RANGE.contains(&max_token_bytes) {
        return Err(JwtSettingsError {
            key: "auth.jwt_max_token_bytes",
            problem: format!(
                "must be from {} to {}",
                TOKEN_BYTES_RANGE.start(),
                TOKEN_BYTES_RANGE.end()
            ),
        });
    }
    for (i, issuer) in issuers.iter().enumerate() {
        let entry = |key: &'static str, problem: String| JwtSettingsError {
            key,
            problem: format!("entry {} ({:?}): {problem}", i + 1, issuer.issuer),
        };
        if issuers[..i]
            .iter()
            .any(|other| other.issuer == issuer.issuer)
        {
            return Err(entry(
                "auth.jwt.issuer",
                "is listed twice; one entry per issuer".into(),
            ));
        }
        check_issuer(issuer).map_err(|(key, problem)| entry(key, problem))?;
    }
    Ok(())
}

fn check_issuer(s: &JwtIssuerSettings) -> Result<(), (&'static str, String)> {
    let http_url = |url: &str| {
        (url.starts_with("https://") || url.starts_with("http://"))
            && !url.contains(char::is_whitespace)
    };
    if !http_url(&s.issuer) {
        return Err((
            "auth.jwt.issuer",
            "must be an https:// (or http://) URL, the exact `iss` of the tokens".into(),
        ));
    }
    if s.audience.trim().is_empty() {
        return Err(("auth.jwt.audience", "must not be empty".into()));
    }
    if !http_url(&s.jwks_url) {
        return Err((
            "auth.jwt.jwks_url",
            "must be an https:// (or http://) URL".into(),
        ));
    }
    if s.algorithms.is_empty() {
        return Err((
            "auth.jwt.algorithms",
            format!("must name at least one of {ASYMMETRIC_ALGORITHMS:?}"),
        ));
    }
    for alg in &s.algorithms {
        if alg.eq_ignore_ascii_case("none") {
            return Err((
                "auth.jwt.algorithms",
                "\"none\" is refused: unsigned tokens prove nothing".into(),
            ));
        }
        if alg.to_ascii_uppercase().starts_with("HS") {
            return Err((
                "auth.jwt.algorithms",
                format!(
                    "{alg:?} is refused: HMAC algorithms would verify with the issuer's public \
                     key as a shared secret"
                ),
            ));
        }
        if !ASYMMETRIC_ALGORITHMS.contains(&alg.as_str()) {
            return Err((
                "auth.jwt.algorithms",
                format!("{alg:?} is not one of {ASYMMETRIC_ALGORITHMS:?}"),
            ));
        }
    }
    if s.clock_skew_secs > MAX_CLOCK_SKEW_SECS {
        return Err((
            "auth.jwt.clock_skew_secs",
            format!("must be at most {MAX_CLOCK_SKEW_SECS}"),
        ));
    }
    if s.tenant.is_empty() && s.tenant_claim.trim().is_empty() {
        return Err((
            "auth.jwt.tenant_claim",
            "must name a claim when no fixed tenant is set".into(),
        ));
    }
    if !(1..=MAX_JWKS_CACHE_SECS).contains(&s.jwks_cache_secs) {
        return Err((
            "auth.jwt.jwks_cache_secs",
            format!("must be from 1 to {MAX_JWKS_CACHE_SECS}"),
        ));
    }
    if s.jwks_min_refresh_secs == 0 || s.jwks_min_refresh_secs > s.jwks_cache_secs {
        return Err((
            "auth.jwt.jwks_min_refresh_secs",
            "must be greater than 0 and at most jwks_cache_secs".into(),
        ));
    }
    if !(1..=MAX_JWKS_TIMEOUT_MS).contains(&s.jwks_timeout_ms) {
        return Err((
            "auth.jwt.jwks_timeout_ms",
            format!("must be from 1 to {MAX_JWKS_TIMEOUT_MS}"),
        ));
    }
    if !(1..=MAX_JWKS_KEYS).contains(&s.jwks_max_keys) {
        return Err((
            "auth.jwt.jwks_max_keys",
            format!("must be from 1 to {MAX_JWKS_KEYS}"),
        ));
    }
    if !(1..=MAX_JWKS_BYTES).contains(&s.jwks_max_bytes) {
        return Err((
            "auth.jwt.jwks_max_bytes",
            format!("must be from 1 to {MAX_JWKS_BYTES}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX_TOKEN: usize = 8192;

    fn issuer() -> JwtIssuerSettings {
        JwtIssuerSettings::new(
            "https://login.example.com/",
            "agent-a2a",
            "https://login.example.com/jwks",
        )
    }

    fn problem(issuers: &[JwtIssuerSettings]) -> String {
        let e = validate_jwt(issuers, MAX_TOKEN).unwrap_err();
        format!("{}: {}", e.key, e.problem)
    }

    #[test]
    fn a_minimal_entry_loads_with_safe_defaults() {
        let text = "issuer = \"https://login.example.com/\"\naudience = \"agent-a2a\"\n\
                    jwks_url = \"https://login.example.com/jwks\"\n";
        let s: JwtIssuerSettings = toml::from_str(text).unwrap();
        assert_eq!(s, issuer());
        assert_eq!(s.algorithms, ["RS256", "ES256"]);
        assert_eq!(
            (s.tenant_claim.as_str(), s.user_claim.as_str()),
            ("tenant", "sub")
        );
        assert_eq!(s.clock_skew_secs, 60);
        validate_jwt(&[s], MAX_TOKEN).unwrap();
        let unknown = format!("{text}tenant_header = \"x\"\n");
        assert!(toml::from_str::<JwtIssuerSettings>(&unknown).is_err());
    }

    #[test]
    fn the_discovery_url_is_under_the_issuer() {
        assert_eq!(
            issuer().discovery_url(),
            "https://login.example.com/.well-known/openid-configuration"
        );
    }

    #[test]
    fn none_and_hmac_algorithms_are_refused() {
        for alg in ["none", "None", "HS256", "HS384", "HS512", "hs256"] {
            let mut s = issuer();
            s.algorithms = vec!["ES256".into(), alg.into()];
            let e = problem(&[s]);
            assert!(e.starts_with("auth.jwt.algorithms"), "{alg}: {e}");
            assert!(e.contains("refused"), "{alg}: {e}");
        }
        let mut s = issuer();
        s.algorithms = vec!["XS999".into()];
        assert!(problem(&[s]).contains("is not one of"));
        let mut s = issuer();
        s.algorithms.clear();
        assert!(problem(&[s]).contains("at least one"));
        let mut s = issuer();
        s.algorithms = ASYMMETRIC_ALGORITHMS.map(String::from).to_vec();
        validate_jwt(&[s], MAX_TOKEN).unwrap();
    }

    #[test]
    fn every_bound_is_checked() {
        type Tweak = fn(&mut JwtIssuerSettings);
        let cases: [(Tweak, &str); 14] = [
            (|s| s.issuer = "login.example.com".into(), "auth.jwt.issuer"),
            (|s| s.issuer = "https://a b".into(), "auth.jwt.issuer"),
            (|s| s.audience = " ".into(), "auth.jwt.audience"),
            (
                |s| s.jwks_url = "file:///etc/keys".into(),
                "auth.jwt.jwks_url",
            ),
            (|s| s.clock_skew_secs = 301, "auth.jwt.clock_skew_secs"),
            (|s| s.tenant_claim.clear(), "auth.jwt.tenant_claim"),
            (|s| s.jwks_cache_secs = 0, "auth.jwt.jwks_cache_secs"),
            (|s| s.jwks_cache_secs = 86_401, "auth.jwt.jwks_cache_secs"),
            (
                |s| s.jwks_min_refresh_secs = 0,
                "auth.jwt.jwks_min_refresh_secs",
            ),
            (
                |s| s.jwks_min_refresh_secs = 601,
                "auth.jwt.jwks_min_refresh_secs",
            ),
            (|s| s.jwks_timeout_ms = 0, "auth.jwt.jwks_timeout_ms"),
            (|s| s.jwks_timeout_ms = 30_001, "auth.jwt.jwks_timeout_ms"),
            (|s| s.jwks_max_keys = 0, "auth.jwt.jwks_max_keys"),
            (|s| s.jwks_max_bytes = 0, "auth.jwt.jwks_max_bytes"),
        ];
        for (tweak, key) in cases {
            let mut s = issuer();
            tweak(&mut s);
            let e = problem(&[s]);
            assert!(e.starts_with(&format!("{key}: entry 1")), "{key}: {e}");
        }
        let mut s = issuer();
        s.jwks_max_keys = MAX_JWKS_KEYS + 1;
        assert!(problem(&[s]).starts_with("auth.jwt.jwks_max_keys"));
        let mut s = issuer();
        s.jwks_max_bytes = MAX_JWKS_BYTES + 1;
        assert!(problem(&[s]).starts_with("auth.jwt.jwks_max_bytes"));
        // A fixed tenant replaces the claim, which may then be empty.
        let mut s = issuer();
        s.tenant = "acme".into();
        s.tenant_claim.clear();
        validate_jwt(&[s], MAX_TOKEN).unwrap();
    }

    #[test]
    fn an_issuer_is_listed_once() {
        let e = problem(&[issuer(), issuer()]);
        assert!(e.starts_with("auth.jwt.issuer: entry 2"), "{e}");
        assert!(e.contains("listed twice"), "{e}");
    }

    #[test]
    fn the_token_size_bound_is_checked() {
        for bad in [0, 511, 16 * 1024 + 1] {
            let e = validate_jwt(&[], bad).unwrap_err();
            assert_eq!(e.key, "auth.jwt_max_token_bytes", "{bad}");
        }
        validate_jwt(&[], 512).unwrap();
    }
}
