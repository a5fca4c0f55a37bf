//! The signing keys of one token issuer: its JWK Set, fetched on first use, cached for
//! `jwks_cache_secs`, and refetched early when a token names a key the cache lacks
//! (the issuer rotated its keys) — but such refetches at most once per
//! `jwks_min_refresh_secs`, so tokens with made-up key ids cannot make this server hammer
//! the issuer. A failed fetch is not retried sooner either; meanwhile the keys of the
//! last good fetch still serve, and a token they cannot verify gets 503 (the server
//! cannot tell), not 401.
//!
//! One fetch at a time per issuer: requests that need keys while a fetch runs wait for it
//! (a `tokio` mutex serialises the fetches; the cache itself sits behind a `std` lock
//! that is never held across an `.await`). Bodies are read up to `jwks_max_bytes`, and
//! at most `jwks_max_keys` keys are kept. Symmetric (`oct`) keys and encryption keys are
//! ignored: a verifier must never treat published key material as a shared secret.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};

use crate::config::JwtIssuerSettings;
use crate::telemetry;

/// One verification key of a JWK Set.
pub(super) struct VerifyKey {
    pub(super) key: DecodingKey,
    /// The algorithm the JWK is restricted to (`alg`), when it names one.
    pub(super) alg: Option<Algorithm>,
}

impl VerifyKey {
    /// Whether this key may verify a signature made with `alg`.
    pub(super) fn fits(&self, alg: Algorithm) -> bool {
        self.key.family() == alg.family() && self.alg.is_none_or(|own| own == alg)
    }
}

/// Why no key could be had.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum KeyError {
    /// The issuer's keys are known and none fits the token.
    Unknown,
    /// The keys could not be fetched and the cache cannot tell.
    Unavailable,
}

/// The keys of one fetch: by `kid`, and those published without one.
#[derive(Default)]
struct Keys {
    by_id: HashMap<String, Arc<VerifyKey>>,
    unnamed: Vec<Arc<VerifyKey>>,
}

impl Keys {
    /// The key named `kid`; a token without a `kid` gets the one key of its algorithm's
    /// family, if there is exactly one.
    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Option<Arc<VerifyKey>> {
        match kid {
            Some(kid) => self.by_id.get(kid).cloned(),
            None => {
                let mut fitting = self
                    .by_id
                    .values()
                    .chain(&self.unnamed)
                    .filter(|k| k.fits(alg));
                match (fitting.next(), fitting.next()) {
                    (Some(only), None) => Some(only.clone()),
                    _ => None,
                }
            }
        }
    }

    fn len(&self) -> usize {
        self.by_id.len() + self.unnamed.len()
    }
}

#[derive(Default)]
struct Cache {
    keys: Arc<Keys>,
    /// The last successful fetch.
    fetched_at: Option<Instant>,
    /// The last fetch made for a key the cache lacked.
    refreshed_at: Option<Instant>,
    /// The last failed fetch, until one succeeds.
    failed_at: Option<Instant>,
}

/// What to do for a token, given the cache.
enum Decision {
    Use(Arc<VerifyKey>),
    /// Fetch, then look again; `refresh` when it is for a key a fresh cache lacks.
    Fetch {
        refresh: bool,
    },
    Fail(KeyError),
}

/// The key cache and fetcher of one issuer.
pub(super) struct KeySet {
    issuer: String,
    url: String,
    ttl: Duration,
    min_refresh: Duration,
    timeout: Duration,
    max_keys: usize,
    max_bytes: usize,
    cache: RwLock<Cache>,
    fetching: tokio::sync::Mutex<()>,
}

impl KeySet {
    pub(super) fn new(settings: &JwtIssuerSettings) -> KeySet {
        KeySet {
            issuer: settings.issuer.clone(),
            url: settings.jwks_url.clone(),
            ttl: Duration::from_secs(settings.jwks_cache_secs),
            min_refresh: Duration::from_secs(settings.jwks_min_refresh_secs),
            timeout: Duration::from_millis(settings.jwks_timeout_ms),
            max_keys: settings.jwks_max_keys,
            max_bytes: settings.jwks_max_bytes,
            cache: RwLock::new(Cache::default()),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// The key that verifies a token signed with `alg` and naming `kid`, fetching the
    /// issuer's keys first when the cache says so.
    pub(super) async fn key(
        &self,
        client: &reqwest::Client,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Arc<VerifyKey>, KeyError> {
        match self.decide(kid, alg) {
            Decision::Use(key) => return Ok(key),
            Decision::Fail(e) => return Err(e),
            Decision::Fetch { .. } => {}
        }
        // Wait for a fetch already under way, then decide again: it may have brought
        // the key, or spent the refresh this token would have made.
        let _turn = self.fetching.lock().await;
        let refresh = match self.decide(kid, alg) {
            Decision::Use(key) => return Ok(key),
            Decision::Fail(e) => return Err(e),
            Decision::Fetch { refresh } => refresh,
        };
        let fetched = Box::pin(self.fetch(client)).await;
        let now = Instant::now();
        let mut cache = self.write();
        if refresh {
            cache.refreshed_at = Some(now);
        }
        match fetched {
            Ok(keys) => {
                tracing::debug!(issuer = %self.issuer, keys = keys.len(), "fetched signing keys");
                metrics::counter!(telemetry::JWKS_FETCHES, "issuer" => self.issuer.clone(), "outcome" => "ok")
                    .increment(1);
                cache.keys = Arc::new(keys);
                cache.fetched_at = Some(now);
                cache.failed_at = None;
                cache.keys.find(kid, alg).ok_or(KeyError::Unknown)
            }
            Err(e) => {
                tracing::warn!(issuer = %self.issuer, url = %self.url, error = %e, "could not fetch signing keys");
                metrics::counter!(telemetry::JWKS_FETCHES, "issuer" => self.issuer.clone(), "outcome" => "error")
                    .increment(1);
                cache.failed_at = Some(now);
                // The last good keys still serve; a fresh cache that lacks the key means
                // the key is unknown, whatever the issuer would have said.
                let fresh = cache.fetched_at.is_some_and(|at| now - at < self.ttl);
                match cache.keys.find(kid, alg) {
                    Some(key) => Ok(key),
                    None if fresh => Err(KeyError::Unknown),
                    None => Err(KeyError::Unavailable),
                }
            }
        }
    }

    fn decide(&self, kid: Option<&str>, alg: Algorithm) -> Decision {
        let now = Instant::now();
        let cache = self.cache.read().unwrap_or_else(|e| e.into_inner());
        let since = |at: Option<Instant>| at.map(|at| now.saturating_duration_since(at));
        let found = cache.keys.find(kid, alg);
        let may_retry = since(cache.failed_at).is_none_or(|d| d >= self.min_refresh);
        let fresh = since(cache.fetched_at).is_some_and(|d| d < self.ttl);
        if fresh {
            if let Some(key) = found {
                return Decision::Use(key);
            }
            let may_refresh = since(cache.refreshed_at).is_none_or(|d| d >= self.min_refresh);
            return match may_refresh && may_retry {
                true => Decision::Fetch { refresh: true },
                false => Decision::Fail(KeyError::Unknown),
            };
        }
        // Never fetched, or past the cache time.
        match (may_retry, found) {
            (true, _) => Decision::Fetch { refresh: false },
            (false, Some(key)) => Decision::Use(key),
            (false, None) => Decision::Fail(KeyError::Unavailable),
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Cache> {
        self.cache.write().unwrap_or_else(|e| e.into_inner())
    }

    /// One GET of the JWK Set, bounded in time and size.
    async fn fetch(&self, client: &reqwest::Client) -> Result<Keys, String> {
        let mut response = client
            .get(&self.url)
            .timeout(self.timeout)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status()));
        }
        let too_large = || format!("the key set exceeds jwks_max_bytes ({})", self.max_bytes);
        if response
            .content_length()
            .is_some_and(|n| n > self.max_bytes as u64)
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
            if body.len() + chunk.len() > self.max_bytes {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        parse_key_set(&body, self.max_keys)
    }
}

/// The usable keys of a JWK Set document. Keys this server cannot or must not use
/// (unknown types, symmetric keys, encryption keys, bad parameters) are skipped, so one
/// odd key does not hide the others; past `max_keys` the rest are ignored.
fn parse_key_set(body: &[u8], max_keys: usize) -> Result<Keys, String> {
    #[derive(serde::Deserialize)]
    struct KeySetDocument {
        keys: Vec<serde_json::Value>,
    }
    let document: KeySetDocument =
        serde_json::from_slice(body).map_err(|e| format!("not a JWK Set: {e}"))?;
    let mut keys = Keys::default();
    for value in document.keys {
        if keys.len() == max_keys {
            break;
        }
        let Ok(jwk) = serde_json::from_value::<Jwk>(value) else {
            continue;
        };
        let Some(key) = verify_key(&jwk) else {
            continue;
        };
        match jwk.common.key_id {
            Some(kid) => {
                keys.by_id.insert(kid, Arc::new(key));
            }
            None => keys.unnamed.push(Arc::new(key)),
        }
    }
    Ok(keys)
}

fn verify_key(jwk: &Jwk) -> Option<VerifyKey> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return None;
    }
    // Only public-key material: an `oct` key would make HMAC verification possible.
    let asymmetric = matches!(
        jwk.algorithm,
        AlgorithmParameters::RSA(_)
            | AlgorithmParameters::EllipticCurve(_)
            | AlgorithmParameters::OctetKeyPair(_)
    );
    if !asymmetric {
        return None;
    }
    let key = DecodingKey::from_jwk(jwk).ok()?;
    if key.family() == AlgorithmFamily::Hmac {
        return None;
    }
    let alg = match jwk.common.key_algorithm {
        Some(alg) => Some(alg.to_string().parse::<Algorithm>().ok()?),
        None => None,
    };
    Some(VerifyKey { key, alg })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rsa(kid: Option<&str>, extra: serde_json::Value) -> serde_json::Value {
        use base64::Engine;
        // Only decoded here, never used to verify: any 2048-bit value will do.
        let n = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([0xc5u8; 256]);
        let mut key = serde_json::json!({"kty": "RSA", "n": n, "e": "AQAB"});
        if let Some(kid) = kid {
            key["kid"] = kid.into();
        }
        if let serde_json::Value::Object(extra) = extra {
            key.as_object_mut().unwrap().extend(extra);
        }
        key
    }

    fn parse(keys: Vec<serde_json::Value>, max: usize) -> Keys {
        let body = serde_json::json!({ "keys": keys }).to_string();
        parse_key_set(body.as_bytes(), max).unwrap()
    }

    #[test]
    fn symmetric_encryption_and_odd_keys_are_skipped() {
        let keys = parse(
            vec![
                serde_json::json!({"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"}),
                rsa(Some("enc"), serde_json::json!({"use": "enc"})),
                serde_json::json!({"kty": "nope", "kid": "odd"}),
                rsa(
                    Some("sig"),
                    serde_json::json!({"use": "sig", "alg": "RS256"}),
                ),
            ],
            10,
        );
        assert_eq!(keys.len(), 1);
        assert!(keys.find(Some("hmac"), Algorithm::HS256).is_none());
        let key = keys.find(Some("sig"), Algorithm::RS256).unwrap();
        assert!(key.fits(Algorithm::RS256));
        assert!(!key.fits(Algorithm::RS512), "the JWK's alg binds it");
        assert!(!key.fits(Algorithm::ES256));
    }

    #[test]
    fn at_most_max_keys_are_kept() {
        let keys = parse(
            (0..5)
                .map(|i| rsa(Some(&format!("k{i}")), serde_json::json!({})))
                .collect(),
            3,
        );
        assert_eq!(keys.len(), 3);
        assert!(keys.find(Some("k3"), Algorithm::RS256).is_none());
    }

    #[test]
    fn a_token_without_kid_gets_the_only_key_of_its_family() {
        let one = parse(vec![rsa(None, serde_json::json!({}))], 10);
        assert!(one.find(None, Algorithm::RS256).is_some());
        assert!(one.find(None, Algorithm::ES256).is_none());
        let two = parse(
            vec![
                rsa(Some("a"), serde_json::json!({})),
                rsa(None, serde_json::json!({})),
            ],
            10,
        );
        assert!(two.find(None, Algorithm::RS256).is_none(), "ambiguous");
    }

    #[test]
    fn a_document_that_is_not_a_key_set_fails_the_fetch() {
        assert!(parse_key_set(b"<html>", 10).is_err());
        assert!(parse_key_set(b"{\"keys\": 3}", 10).is_err());
    }
}
