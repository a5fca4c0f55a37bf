//! OIDC / JWT bearer tokens: which bearer tokens are JWTs, whose they are, and the
//! [`Principal`] a verified one names.
//!
//! A bearer token is read as a JWT when issuers are configured and it has the shape of
//! one: three base64url parts whose first decodes to a JSON header. Anything else is
//! left to the API-key path. The token's `iss` is read unverified only to pick the
//! issuer; then the signature (with the issuer's key named by `kid`, see `jwks`),
//! `iss`, `aud`, `exp` (required) and `nbf` are verified with the issuer's own allowed
//! algorithms. The header's `alg` is checked against that list before anything else, and
//! the verification accepts exactly that one algorithm, so a token cannot choose `none`,
//! HMAC with a public key as the secret, or another family than its key's. A header
//! with `crit` is refused: the server understands no extension (RFC 7515 §4.1.11).
//!
//! Every refusal is an [`Error::InvalidToken`] with a fixed reason; keys that cannot be
//! fetched give [`Error::Unavailable`] (503), since the server cannot tell.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::jwks::{KeyError, KeySet};
use super::{DEFAULT_TIER, GateError, Principal};
use crate::config::JwtIssuerSettings;
use crate::domain::TenantId;
use crate::error::{Error, TokenError};

/// One trusted issuer.
struct Issuer {
    issuer: String,
    audience: String,
    algorithms: Vec<Algorithm>,
    clock_skew_secs: u64,
    tenant: Option<TenantId>,
    tenant_claim: String,
    tier_claim: String,
    user_claim: String,
    keys: KeySet,
}

/// The configured issuers and the client their keys are fetched with.
pub(super) struct Issuers {
    issuers: Vec<Issuer>,
    max_token_bytes: usize,
    client: reqwest::Client,
}

/// A bearer token that has the shape of a JWT, read but not verified.
pub(super) struct Unverified<'a> {
    token: &'a str,
    /// The header's `alg`, as written.
    alg: String,
    kid: Option<String>,
}

impl Issuers {
    /// The issuers of `settings`; `None` when there are none.
    pub(super) fn new(
        settings: &[JwtIssuerSettings],
        max_token_bytes: usize,
    ) -> Result<Option<Issuers>, GateError> {
        if settings.is_empty() {
            return Ok(None);
        }
        let issuers = settings
            .iter()
            .map(|s| {
                let algorithms = s
                    .algorithms
                    .iter()
                    .map(|a| allowed_algorithm(a))
                    .collect::<Result<Vec<_>, _>>()?;
                let tenant =
                    match s.tenant.as_str() {
                        "" => None,
                        t => Some(TenantId::parse(t).map_err(|e| {
                            GateError(format!("auth.jwt tenant of {}: {e}", s.issuer))
                        })?),
                    };
                Ok(Issuer {
                    issuer: s.issuer.clone(),
                    audience: s.audience.clone(),
                    algorithms,
                    clock_skew_secs: s.clock_skew_secs,
                    tenant,
                    tenant_claim: s.tenant_claim.clone(),
                    tier_claim: s.tier_claim.clone(),
                    user_claim: s.user_claim.clone(),
                    keys: KeySet::new(s),
                })
            })
            .collect::<Result<Vec<_>, GateError>>()?;
        // Key fetches follow no redirects: the configured URL is the one trusted.
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("agent-a2a/", env!("CARGO_PKG_VERSION"), " jwks"))
            .build()
            .map_err(|e| GateError(format!("JWKS client: {e}")))?;
        Ok(Some(Issuers {
            issuers,
            max_token_bytes,
            client,
        }))
    }

    /// The issuer URLs, in configuration order (the card declares one scheme each).
    pub(super) fn issuer_urls(&self) -> impl Iterator<Item = &str> {
        self.issuers.iter().map(|i| i.issuer.as_str())
    }

    /// `None` when `token` is not shaped like a JWT (then it may be an API key);
    /// otherwise the token read for verification, or why it is refused already.
    pub(super) fn recognise<'a>(
        &self,
        token: &'a str,
    ) -> Option<Result<Unverified<'a>, TokenError>> {
        // Cheap first: two dots and base64url characters only, before decoding anything.
        let shaped = token.bytes().filter(|b| *b == b'.').count() == 2
            && token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !shaped {
            return None;
        }
        if token.len() > self.max_token_bytes {
            return Some(Err(TokenError::TooLarge));
        }
        #[derive(serde::Deserialize)]
        struct Header {
            alg: String,
            kid: Option<String>,
            /// Whether the header has `crit` at all, whatever its value.
            #[serde(default, deserialize_with = "present")]
            crit: bool,
        }
        let header = token.split('.').next()?;
        let header: Header = URL_SAFE_NO_PAD
            .decode(header)
            .ok()
            .and_then(|json| serde_json::from_slice(&json).ok())?;
        // RFC 7515 §4.1.11: a recipient that does not understand an extension listed in
        // `crit` must refuse the token. This server understands none (and an empty list
        // must not be sent), so any `crit` refuses it; the library does not check it.
        if header.crit {
            return Some(Err(TokenError::Critical));
        }
        Some(Ok(Unverified {
            token,
            alg: header.alg,
            kid: header.kid,
        }))
    }

    /// Verifies a token and names its principal.
    pub(super) async fn verify(&self, token: Unverified<'_>) -> Result<Principal, Error> {
        let refused = Error::InvalidToken;
        let issuer = self.issuer_of(token.token).map_err(refused)?;
        let alg = token
            .alg
            .parse::<Algorithm>()
            .ok()
            .filter(|alg| issuer.algorithms.contains(alg))
            .ok_or_else(|| refused(TokenError::Algorithm))?;
        let key = match issuer
            .keys
            .key(&self.client, token.kid.as_deref(), alg)
            .await
        {
            Ok(key) => key,
            Err(KeyError::Unknown) => return Err(refused(TokenError::UnknownKey)),
            Err(KeyError::Unavailable) => {
                return Err(Error::Unavailable {
                    detail: format!("the signing keys of {} cannot be fetched", issuer.issuer),
                    retry_after_secs: 1,
                });
            }
        };
        if !key.fits(alg) {
            return Err(refused(TokenError::Algorithm));
        }
        let mut validation = Validation::new(alg);
        validation.leeway = issuer.clock_skew_secs;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.set_issuer(&[&issuer.issuer]);
        validation.set_audience(&[&issuer.audience]);
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token.token, &key.key, &validation)
            .map_err(|e| refused(refusal(e.kind())))?
            .claims;
        issuer.principal(&claims).map_err(refused)
    }

    /// The configured issuer the token claims to come from (read unverified; the
    /// verification checks `iss` again).
    fn issuer_of(&self, token: &str) -> Result<&Issuer, TokenError> {
        #[derive(serde::Deserialize)]
        struct Claims {
            iss: Option<String>,
        }
        let payload = token.split('.').nth(1).ok_or(TokenError::Malformed)?;
        let claims: Claims = URL_SAFE_NO_PAD
            .decode(payload)
            .ok()
            .and_then(|json| serde_json::from_slice(&json).ok())
            .ok_or(TokenError::Malformed)?;
        let iss = claims.iss.ok_or(TokenError::Issuer)?;
        self.issuers
            .iter()
            .find(|i| i.issuer == iss)
            .ok_or(TokenError::Issuer)
    }
}

impl Issuer {
    /// The caller a verified token names.
    fn principal(&self, claims: &Map<String, Value>) -> Result<Principal, TokenError> {
        let tenant = match &self.tenant {
            Some(fixed) => fixed.clone(),
            None => text_claim(claims, &self.tenant_claim)
                .and_then(|t| TenantId::parse(t).ok())
                .ok_or(TokenError::Tenant)?,
        };
        Ok(Principal {
            tenant,
            tier: text_claim(claims, &self.tier_claim)
                .unwrap_or(DEFAULT_TIER)
                .to_owned(),
            user: text_claim(claims, &self.user_claim).map(str::to_owned),
        })
    }
}

/// `true` for a field that is present, whatever it holds (even `null`).
fn present<'de, D: serde::Deserializer<'de>>(value: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(value).map(|_| true)
}

/// A claim's text, trimmed; `None` when the claim is not configured (empty name), absent,
/// not a string, or blank.
fn text_claim<'c>(claims: &'c Map<String, Value>, claim: &str) -> Option<&'c str> {
    if claim.is_empty() {
        return None;
    }
    claims
        .get(claim)?
        .as_str()
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// The reason a verification failure is reported with. The library's other errors
/// (bad key material, provider failures) are reported as a bad signature; the log of
/// the fetch names a key set that cannot be used.
fn refusal(kind: &ErrorKind) -> TokenError {
    match kind {
        ErrorKind::ExpiredSignature => TokenError::Expired,
        ErrorKind::ImmatureSignature => TokenError::NotYetValid,
        ErrorKind::InvalidAudience => TokenError::Audience,
        ErrorKind::InvalidIssuer => TokenError::Issuer,
        ErrorKind::MissingRequiredClaim(claim) if claim == "aud" => TokenError::Audience,
        ErrorKind::MissingRequiredClaim(claim) if claim == "iss" => TokenError::Issuer,
        ErrorKind::InvalidAlgorithm | ErrorKind::UnsupportedAlgorithm => TokenError::Algorithm,
        ErrorKind::InvalidSignature
        | ErrorKind::InvalidEcdsaKey
        | ErrorKind::InvalidEddsaKey
        | ErrorKind::InvalidRsaKey(_)
        | ErrorKind::InvalidKeyFormat => TokenError::Signature,
        _ => TokenError::Malformed,
    }
}

/// The algorithm of a configured name; settings validation refuses the others.
fn allowed_algorithm(name: &str) -> Result<Algorithm, GateError> {
    let alg: Algorithm = name
        .parse()
        .map_err(|_| GateError(format!("auth.jwt algorithm {name:?}: unknown")))?;
    match alg.family() {
        jsonwebtoken::AlgorithmFamily::Hmac => Err(GateError(format!(
            "auth.jwt algorithm {name:?}: HMAC is refused"
        ))),
        _ => Ok(alg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuers() -> Issuers {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut s =
            JwtIssuerSettings::new("https://id.example.com", "a2a", "http://127.0.0.1:9/jwks");
        s.tier_claim = "plan".into();
        Issuers::new(&[s], 1024).unwrap().unwrap()
    }

    fn b64(json: &str) -> String {
        URL_SAFE_NO_PAD.encode(json)
    }

    #[test]
    fn only_jwt_shaped_tokens_are_recognised() {
        let issuers = issuers();
        for key in ["dev-key-1", "a.b", "a.b.c.d", "x.y.z", "a b.c.d"] {
            assert!(issuers.recognise(key).is_none(), "{key}");
        }
        let token = format!("{}.{}.sig", b64(r#"{"alg":"ES256","kid":"k1"}"#), b64("{}"));
        let read = issuers.recognise(&token).unwrap().unwrap();
        assert_eq!(
            (read.alg.as_str(), read.kid.as_deref()),
            ("ES256", Some("k1"))
        );
        for header in [
            r#"{"alg":"ES256","crit":["exp-ext"],"exp-ext":1}"#,
            r#"{"alg":"ES256","crit":[]}"#,
            r#"{"alg":"ES256","crit":null}"#,
        ] {
            let token = format!("{}.{}.sig", b64(header), b64("{}"));
            assert!(
                matches!(issuers.recognise(&token), Some(Err(TokenError::Critical))),
                "{header}"
            );
        }
        let long = format!("{}.{}.sig", b64(r#"{"alg":"ES256"}"#), "a".repeat(1024));
        assert!(matches!(
            issuers.recognise(&long),
            Some(Err(TokenError::TooLarge))
        ));
    }

    #[actix_web::test]
    async fn the_header_cannot_choose_an_algorithm_outside_the_list() {
        let issuers = issuers();
        let claims = b64(r#"{"iss":"https://id.example.com","aud":"a2a","exp":9999999999}"#);
        for alg in ["none", "HS256", "RS512", "es256"] {
            let token = format!("{}.{claims}.c2ln", b64(&format!(r#"{{"alg":"{alg}"}}"#)));
            let read = issuers.recognise(&token).unwrap().unwrap();
            let e = issuers.verify(read).await.unwrap_err();
            assert_eq!(e, Error::InvalidToken(TokenError::Algorithm), "{alg}");
        }
    }

    #[actix_web::test]
    async fn the_issuer_is_picked_by_its_exact_iss() {
        let issuers = issuers();
        for claims in [
            r#"{"iss":"https://id.example.com/","exp":9999999999}"#,
            r#"{"exp":9999999999}"#,
        ] {
            let token = format!("{}.{}.c2ln", b64(r#"{"alg":"ES256"}"#), b64(claims));
            let read = issuers.recognise(&token).unwrap().unwrap();
            let e = issuers.verify(read).await.unwrap_err();
            assert_eq!(e, Error::InvalidToken(TokenError::Issuer), "{claims}");
        }
        let token = format!("{}.bm90IGpzb24.c2ln", b64(r#"{"alg":"ES256"}"#));
        let read = issuers.recognise(&token).unwrap().unwrap();
        let e = issuers.verify(read).await.unwrap_err();
        assert_eq!(e, Error::InvalidToken(TokenError::Malformed));
    }

    #[test]
    fn claims_name_the_tenant_tier_and_user() {
        let issuers = issuers();
        let issuer = &issuers.issuers[0];
        let claims = |v: Value| v.as_object().unwrap().clone();
        let p = issuer
            .principal(&claims(
                serde_json::json!({"tenant": "acme", "plan": "pro", "sub": "u-1"}),
            ))
            .unwrap();
        assert_eq!(
            (p.tenant.as_str(), p.tier.as_str(), p.user.as_deref()),
            ("acme", "pro", Some("u-1"))
        );
        let p = issuer
            .principal(&claims(serde_json::json!({"tenant": "acme"})))
            .unwrap();
        assert_eq!((p.tier.as_str(), p.user), ("default", None));
        for bad in [
            serde_json::json!({}),
            serde_json::json!({"tenant": 7}),
            serde_json::json!({"tenant": ""}),
            serde_json::json!({"tenant": "../x"}),
            serde_json::json!({"tenant": "a b"}),
            serde_json::json!({"tenant": "t".repeat(65)}),
        ] {
            assert_eq!(issuer.principal(&claims(bad)), Err(TokenError::Tenant));
        }
    }

    #[test]
    fn library_errors_map_to_fixed_reasons() {
        assert_eq!(refusal(&ErrorKind::ExpiredSignature), TokenError::Expired);
        assert_eq!(
            refusal(&ErrorKind::MissingRequiredClaim("aud".into())),
            TokenError::Audience
        );
        assert_eq!(
            refusal(&ErrorKind::MissingRequiredClaim("exp".into())),
            TokenError::Malformed
        );
        assert_eq!(refusal(&ErrorKind::InvalidSignature), TokenError::Signature);
        assert!(allowed_algorithm("HS256").is_err());
        assert!(allowed_algorithm("none").is_err());
        for name in crate::config::ASYMMETRIC_ALGORITHMS {
            allowed_algorithm(name).unwrap();
        }
    }
}
