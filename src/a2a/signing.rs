//! Signed agent cards (A2A 1.0 §8.4): a JWS (RFC 7515) over the RFC 8785 (JCS)
//! canonical form of the card without its `signatures`.
//!
//! **What is signed.** The card's 1.0 form as a verifier rebuilds it from the card it
//! received: the card read as `lf.a2a.v1.AgentCard` (fields the 1.0 schema does not have,
//! such as the 0.3 ones `agent.card_v03_fields` adds, are not part of it), written as
//! ProtoJSON (unset optional and default-valued fields left out), with empty strings,
//! lists and objects and `null`s removed at every depth, then canonicalized. That is the
//! form the official SDKs' verifiers compute, so a card with or without the 0.3 fields
//! verifies the same. The protected header is `{"alg", "kid", "typ": "JOSE"}` and `jku`
//! when configured; the signature is the compact serialization's third part, and the
//! payload is detached (the card itself).
//!
//! **Verifying** takes keys from the verifier's own set, chosen by `kid`: a `jku` in the
//! signed header never decides which keys are trusted (the 1.1 direction, #2099), and only
//! the algorithms the verifier allows are accepted. One valid signature suffices.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{Jwk, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, EncodingKey};
use serde_json::{Map, Value, json};

/// A card could not be signed or read for signing, or a key is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigningError {
    #[error("card signing key: {0}")]
    Key(String),
    #[error("agent card: {0}")]
    Card(String),
}

/// Why a card's signatures were not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the agent card carries no signature")]
    Unsigned,
    #[error("no signature of the agent card is valid under the keys and algorithms allowed")]
    Invalid,
    #[error(transparent)]
    Card(#[from] SigningError),
}

/// Signs cards with one private key, and publishes its public half as a JWK Set.
pub struct CardSigner {
    key: EncodingKey,
    algorithm: Algorithm,
    /// The protected header, base64url-encoded: the same for every card.
    protected: String,
    jwks: Value,
}

impl std::fmt::Debug for CardSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The private key is never printed.
        f.debug_struct("CardSigner")
            .field("algorithm", &self.algorithm)
            .field("protected", &self.protected)
            .finish_non_exhaustive()
    }
}

impl CardSigner {
    /// A signer with the PEM private key `pem` (EC and Ed25519: PKCS#8, EC also SEC1;
    /// RSA: PKCS#1 or PKCS#8) for `algorithm`, named `kid`, with `jku` (the URL of the
    /// JWK Set) in the protected header when given. Fails for a key that is not one for
    /// `algorithm` (an RSA key for ES256, a P-384 key for ES256) and for shared-secret
    /// algorithms, which cannot sign a public card.
    pub fn new(
        algorithm: Algorithm,
        pem: &[u8],
        kid: &str,
        jku: Option<&str>,
    ) -> Result<Self, SigningError> {
        let read = match algorithm.family() {
            AlgorithmFamily::Ec => EncodingKey::from_ec_pem(pem),
            AlgorithmFamily::Rsa => EncodingKey::from_rsa_pem(pem),
            AlgorithmFamily::Ed => EncodingKey::from_ed_pem(pem),
            AlgorithmFamily::Hmac => {
                return Err(SigningError::Key(format!(
                    "{algorithm:?} is a shared-secret algorithm: a public card is signed with \
                     a private key (ES256, ES384, RS256, RS384, RS512, PS256, PS384, PS512 or \
                     EdDSA)"
                )));
            }
        };
        let key = read.map_err(|e| {
            SigningError::Key(format!("not a PEM private key for {algorithm:?}: {e}"))
        })?;
        let mut jwk = Jwk::from_encoding_key(&key, algorithm)
            .map_err(|e| SigningError::Key(format!("not a private key for {algorithm:?}: {e}")))?;
        jwk.common.key_id = Some(kid.to_owned());
        jwk.common.public_key_use = Some(PublicKeyUse::Signature);
        let mut header = Map::new();
        header.insert("alg".into(), json!(algorithm));
        header.insert("kid".into(), json!(kid));
        header.insert("typ".into(), json!("JOSE"));
        if let Some(jku) = jku {
            header.insert("jku".into(), json!(jku));
        }
        let protected = URL_SAFE_NO_PAD.encode(Value::Object(header).to_string());
        let signer = Self {
            key,
            algorithm,
            protected,
            jwks: json!({ "keys": [jwk] }),
        };
        // A key of the right family but the wrong size or curve fails here, not on the
        // first card.
        signer.signature(b"{}")?;
        Ok(signer)
    }

    /// Replaces the card's `signatures` with this key's signature of it.
    pub fn sign(&self, card: &mut Value) -> Result<(), SigningError> {
        let payload = canonical_form(card)?;
        let signature = self.signature(payload.as_bytes())?;
        let Some(fields) = card.as_object_mut() else {
            return Err(SigningError::Card("not a JSON object".into()));
        };
        fields.insert(
            "signatures".into(),
            json!([{ "protected": self.protected, "signature": signature }]),
        );
        Ok(())
    }

    /// The public key as a JWK Set (`/.well-known/jwks.json`).
    pub fn jwks(&self) -> &Value {
        &self.jwks
    }

    fn signature(&self, payload: &[u8]) -> Result<String, SigningError> {
        let input = format!("{}.{}", self.protected, URL_SAFE_NO_PAD.encode(payload));
        jsonwebtoken::crypto::sign(input.as_bytes(), &self.key, self.algorithm)
            .map_err(|e| SigningError::Key(format!("cannot sign with it: {e}")))
    }
}

/// The text a card's signatures sign (see the module documentation).
pub fn canonical_form(card: &Value) -> Result<String, SigningError> {
    let mut parsed: a2a_pb::protojson::AgentCard = serde_json::from_value(card.clone())
        .map_err(|e| SigningError::Card(format!("not a 1.0 agent card: {e}")))?;
    parsed.signatures.clear();
    let written = serde_json::to_value(&parsed)
        .map_err(|e| SigningError::Card(format!("cannot be written as ProtoJSON: {e}")))?;
    let cleaned = without_empty(written).unwrap_or_else(|| Value::Object(Map::new()));
    serde_jcs::to_string(&cleaned)
        .map_err(|e| SigningError::Card(format!("has no canonical form: {e}")))
}

/// Accepts `card` if one of its signatures is valid under a key of `keys` (chosen by the
/// signature's `kid`; every key when it names none) with one of `algorithms`.
pub fn verify(card: &Value, keys: &JwkSet, algorithms: &[Algorithm]) -> Result<(), VerifyError> {
    let signatures = card
        .get("signatures")
        .and_then(Value::as_array)
        .filter(|s| !s.is_empty())
        .ok_or(VerifyError::Unsigned)?;
    let payload = URL_SAFE_NO_PAD.encode(canonical_form(card)?);
    let valid = signatures.iter().any(|entry| {
        let (Some(protected), Some(signature)) = (
            entry.get("protected").and_then(Value::as_str),
            entry.get("signature").and_then(Value::as_str),
        ) else {
            return false;
        };
        let Some(header) = URL_SAFE_NO_PAD
            .decode(protected)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Map<String, Value>>(&bytes).ok())
        else {
            return false;
        };
        let Some(algorithm) = header
            .get("alg")
            .and_then(|alg| serde_json::from_value::<Algorithm>(alg.clone()).ok())
            .filter(|alg| algorithms.contains(alg))
        else {
            return false;
        };
        let kid = header.get("kid").and_then(Value::as_str);
        let input = format!("{protected}.{payload}");
        keys.keys
            .iter()
            .filter(|jwk| kid.is_none() || jwk.common.key_id.as_deref() == kid)
            // A key that names its algorithm is used with that one only.
            .filter(|jwk| {
                jwk.common
                    .key_algorithm
                    .is_none_or(|named| named == KeyAlgorithm::from(algorithm))
            })
            .filter_map(|jwk| DecodingKey::from_jwk(jwk).ok())
            .any(|key| {
                jsonwebtoken::crypto::verify(signature, input.as_bytes(), &key, algorithm)
                    .unwrap_or(false)
            })
    });
    if valid {
        Ok(())
    } else {
        Err(VerifyError::Invalid)
    }
}

/// `value` without empty strings, lists and objects and without `null`s, at every
/// depth; `None` when nothing is left.
fn without_empty(value: Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::String(text) if text.is_empty() => None,
        Value::Array(items) => {
            let kept: Vec<Value> = items.into_iter().filter_map(without_empty).collect();
            (!kept.is_empty()).then_some(Value::Array(kept))
        }
        Value::Object(fields) => {
            let kept: Map<String, Value> = fields
                .into_iter()
                .filter_map(|(name, value)| without_empty(value).map(|v| (name, v)))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        other => Some(other),
    }
}

#[cfg(test)]
#[path = "signing_tests.rs"]
mod tests;
