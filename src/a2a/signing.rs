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
//!
//! **What is verified is what is used.** [`verify`] returns the signed form itself — the
//! card's 1.0 fields as the signature covers them, under their JSON names — and a caller
//! reads the card from that, never from the text it received: fields outside the 1.0
//! schema (a 0.3 `url`) are not in it. Before the signature is checked, a card is refused
//! when its 1.0 parse would read a key that is not the field's JSON name (ProtoJSON
//! parsers accept the protobuf name too: `supported_interfaces`), and, read from text
//! ([`verify_json`]), when an object names a key twice: either would let the text a
//! reader of the raw JSON sees differ from the form that was signed.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{Jwk, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, EncodingKey};
use serde_json::{Map, Value, json};
use std::collections::HashSet;

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
    /// A key its 1.0 parse reads by another name than its JSON name, or a key named
    /// twice in one object.
    #[error("the agent card is not written in canonical form: {0}")]
    NotCanonical(String),
    #[error(transparent)]
    Card(#[from] SigningError),
}

impl VerifyError {
    /// A short name of the reason, for a metric's label.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unsigned => "unsigned",
            Self::Invalid => "signature",
            Self::NotCanonical(_) => "not_canonical",
            Self::Card(_) => "unreadable",
        }
    }
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
    jcs(&signed_form(written(&read(card)?)?))
}

/// Accepts the card in `text` — JSON in which no object names a key twice — as
/// [`verify`] does, and returns its signed form.
pub fn verify_json(
    text: &[u8],
    keys: &JwkSet,
    algorithms: &[Algorithm],
) -> Result<Value, VerifyError> {
    let card = serde_json::from_slice::<Unique>(text)
        .map_err(|e| match e.classify() {
            serde_json::error::Category::Data => VerifyError::NotCanonical(e.to_string()),
            _ => VerifyError::Card(SigningError::Card(format!("not JSON: {e}"))),
        })?
        .0;
    verify(&card, keys, algorithms)
}

/// Accepts `card` if one of its signatures is valid under a key of `keys` (chosen by the
/// signature's `kid`; every key when it names none) with one of `algorithms`, and every
/// key its 1.0 parse reads is the field's JSON name. Returns the signed form: what the
/// signature covers, the only part of the card to use.
pub fn verify(card: &Value, keys: &JwkSet, algorithms: &[Algorithm]) -> Result<Value, VerifyError> {
    let signatures = card
        .get("signatures")
        .and_then(Value::as_array)
        .filter(|s| !s.is_empty())
        .ok_or(VerifyError::Unsigned)?;
    let mut ignored = HashSet::new();
    let parsed: a2a_pb::protojson::AgentCard = serde_ignored::deserialize(card, |path| {
        ignored.insert(steps(&path));
    })
    .map_err(|e| {
        // Two spellings of one field (`supportedInterfaces` and `supported_interfaces`).
        if e.to_string().starts_with("duplicate field") {
            VerifyError::NotCanonical(format!("it names a field twice ({e})"))
        } else {
            SigningError::Card(format!("not a 1.0 agent card: {e}")).into()
        }
    })?;
    let written = written(&parsed)?;
    json_names(card, &written, &ignored, &mut Vec::new()).map_err(VerifyError::NotCanonical)?;
    let signed = signed_form(written);
    let payload = URL_SAFE_NO_PAD.encode(jcs(&signed)?);
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
        Ok(signed)
    } else {
        Err(VerifyError::Invalid)
    }
}

/// `card` read as `lf.a2a.v1.AgentCard`.
fn read(card: &Value) -> Result<a2a_pb::protojson::AgentCard, SigningError> {
    serde_json::from_value(card.clone())
        .map_err(|e| SigningError::Card(format!("not a 1.0 agent card: {e}")))
}

/// `card` written as ProtoJSON.
fn written(card: &a2a_pb::protojson::AgentCard) -> Result<Value, SigningError> {
    serde_json::to_value(card)
        .map_err(|e| SigningError::Card(format!("cannot be written as ProtoJSON: {e}")))
}

/// The card as ProtoJSON wrote it (`written`), without its signatures and empty values.
fn signed_form(mut written: Value) -> Value {
    if let Some(fields) = written.as_object_mut() {
        fields.remove("signatures");
    }
    without_empty(written).unwrap_or_else(|| Value::Object(Map::new()))
}

fn jcs(form: &Value) -> Result<String, SigningError> {
    serde_jcs::to_string(form)
        .map_err(|e| SigningError::Card(format!("has no canonical form: {e}")))
}

/// One step of the path to a value in a JSON document.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Step {
    Key(String),
    Index(usize),
}

/// The steps of a path the 1.0 parse reported ignoring.
fn steps(path: &serde_ignored::Path<'_>) -> Vec<Step> {
    use serde_ignored::Path;
    match path {
        Path::Root => Vec::new(),
        Path::Seq { parent, index } => {
            let mut steps = steps(parent);
            steps.push(Step::Index(*index));
            steps
        }
        Path::Map { parent, key } => {
            let mut steps = steps(parent);
            steps.push(Step::Key(key.clone()));
            steps
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => steps(parent),
    }
}

/// Refuses a key of `raw` that its parse read (it is not among the `ignored` paths) but
/// that the parse's own writing, `written`, does not hold at the same place: a field
/// named otherwise than by its JSON name. (A key the writing leaves out because its value
/// is the default one is a JSON name, which has no `_`; a protobuf name of more than one
/// word has one.)
fn json_names(
    raw: &Value,
    written: &Value,
    ignored: &HashSet<Vec<Step>>,
    at: &mut Vec<Step>,
) -> Result<(), String> {
    match (raw, written) {
        (Value::Object(raw), _) => {
            for (key, value) in raw {
                at.push(Step::Key(key.clone()));
                if !ignored.contains(at) {
                    match written.get(key) {
                        Some(written) => json_names(value, written, ignored, at)?,
                        None if key.contains('_') => {
                            return Err(format!(
                                "`{}` is a field's protobuf name; a card names it by its JSON \
                                 name `{}`",
                                path_text(at),
                                json_name(key)
                            ));
                        }
                        None => {}
                    }
                }
                at.pop();
            }
        }
        (Value::Array(raw), Value::Array(written)) => {
            for (index, (value, written)) in raw.iter().zip(written).enumerate() {
                at.push(Step::Index(index));
                json_names(value, written, ignored, at)?;
                at.pop();
            }
        }
        _ => {}
    }
    Ok(())
}

fn path_text(steps: &[Step]) -> String {
    let mut text = String::new();
    for step in steps {
        match step {
            Step::Key(key) if text.is_empty() => text.push_str(key),
            Step::Key(key) => {
                text.push('.');
                text.push_str(key);
            }
            Step::Index(index) => text.push_str(&format!("[{index}]")),
        }
    }
    text
}

/// The JSON name of the protobuf field `name` (lowerCamelCase).
fn json_name(name: &str) -> String {
    let mut upper = false;
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    out
}

/// A JSON value in which no object names a key twice (serde_json keeps the last of two).
struct Unique(Value);

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Unique;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Unique, E> {
                Ok(Unique(Value::Bool(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Unique, E> {
                Ok(Unique(Value::from(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Unique, E> {
                Ok(Unique(Value::from(v)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Unique, E> {
                Ok(Unique(Value::from(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Unique, E> {
                Ok(Unique(Value::String(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Unique, E> {
                Ok(Unique(Value::String(v)))
            }
            fn visit_unit<E>(self) -> Result<Unique, E> {
                Ok(Unique(Value::Null))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Unique, A::Error> {
                let mut items = Vec::new();
                while let Some(Unique(item)) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Unique(Value::Array(items)))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Unique, A::Error> {
                let mut fields = Map::new();
                while let Some((key, Unique(value))) = map.next_entry::<String, Unique>()? {
                    if fields.contains_key(&key) {
                        return Err(serde::de::Error::custom(format!(
                            "an object names the key `{key}` twice"
                        )));
                    }
                    fields.insert(key, value);
                }
                Ok(Unique(Value::Object(fields)))
            }
        }
        deserializer.deserialize_any(Visitor)
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
mod tests {
    use jsonwebtoken::Algorithm;
    use jsonwebtoken::jwk::JwkSet;
    use serde_json::{Value, json};

    use super::*;
    use crate::a2a::card::{
        CardConfig, SkillCard, TenantTerms, build_agent_card, extended_agent_card,
    };

    const ES256: &str = include_str!("../../tests/fixtures/test-only-es256-a.pem");
    const ES256_B: &str = include_str!("../../tests/fixtures/test-only-es256-b.pem");
    const ES384: &str = include_str!("../../tests/fixtures/test-only-es384.pem");
    const RSA: &str = include_str!("../../tests/fixtures/test-only-rs256.pem");
    const ED25519: &str = include_str!("../../tests/fixtures/test-only-ed25519.pem");

    fn config(v03_fields: bool) -> CardConfig {
        CardConfig {
            name: "agent-a2a".into(),
            description: "A durable A2A agent".into(),
            version: "0.1.0".into(),
            base_url: "http://127.0.0.1:8080".into(),
            provider: Some(("Example Org".into(), "https://example.org".into())),
            documentation_url: None,
            input_modes: vec!["text/plain".into()],
            output_modes: vec!["text/plain".into()],
            v03_fields,
            api_keys: true,
            oidc_issuers: vec!["https://issuer.example.org".into()],
            grpc_url: Some("127.0.0.1:8081".into()),
            extended_card: true,
            push_notifications: true,
        }
    }

    fn skills() -> Vec<SkillCard> {
        vec![SkillCard {
            id: "memory".into(),
            name: "Memory".into(),
            description: "Remembers".into(),
            tags: vec!["memory".into()],
            examples: Vec::new(),
            tools: Vec::new(),
        }]
    }

    fn card(v03_fields: bool) -> Value {
        build_agent_card(&config(v03_fields), &skills())
    }

    fn signer(algorithm: Algorithm, pem: &str, kid: &str) -> CardSigner {
        CardSigner::new(algorithm, pem.as_bytes(), kid, None).expect("test key")
    }

    fn keys(signer: &CardSigner) -> JwkSet {
        serde_json::from_value(signer.jwks().clone()).expect("a JWK Set")
    }

    #[test]
    fn the_canonical_form_is_the_1_0_card_without_signatures_empties_or_0_3_fields() {
        let text = canonical_form(&json!({
            "signatures": [{"protected": "x", "signature": "y"}],
            "version": "1",
            "name": "n",
            "description": "",
            "url": "http://0.3.example.org",
            "protocolVersion": "0.3.0",
            "capabilities": {"streaming": false, "extensions": [], "stateTransitionHistory": true},
            "defaultInputModes": [],
            "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"], "examples": []}],
            "provider": {"organization": "", "url": ""},
            "documentationUrl": null,
        }))
        .unwrap();
        // Keys sorted; the 0.3 fields, the empty string, lists and object and the null gone;
        // an optional `false` kept, as ProtoJSON writes a field that is set.
        assert_eq!(
            text,
            r#"{"capabilities":{"streaming":false},"name":"n","skills":[{"description":"d","id":"s","name":"S","tags":["t"]}],"version":"1"}"#
        );
    }

    #[test]
    fn numbers_and_text_are_written_as_rfc_8785_writes_them() {
        let text = canonical_form(&json!({
            "name": "é \u{1F600} \"q\" \n",
            "capabilities": {"extensions": [{"uri": "urn:x", "params": {"n": 60, "f": 1.5e-7, "big": 1e21}}]},
        }))
        .unwrap();
        assert_eq!(
            text,
            "{\"capabilities\":{\"extensions\":[{\"params\":{\"big\":1e+21,\"f\":1.5e-7,\"n\":60},\
         \"uri\":\"urn:x\"}]},\"name\":\"é \u{1F600} \\\"q\\\" \\n\"}"
        );
    }

    #[test]
    fn the_card_with_and_without_0_3_fields_signs_the_same_text() {
        assert_ne!(card(true), card(false));
        assert_eq!(
            canonical_form(&card(true)).unwrap(),
            canonical_form(&card(false)).unwrap()
        );
    }

    #[test]
    fn a_card_signed_with_each_algorithm_verifies_with_the_published_key() {
        for (algorithm, pem) in [
            (Algorithm::ES256, ES256),
            (Algorithm::ES384, ES384),
            (Algorithm::RS256, RSA),
            (Algorithm::PS256, RSA),
            (Algorithm::EdDSA, ED25519),
        ] {
            let signer = signer(algorithm, pem, "k1");
            let mut signed = card(true);
            signer.sign(&mut signed).unwrap();
            verify(&signed, &keys(&signer), &[algorithm])
                .unwrap_or_else(|e| panic!("{algorithm:?}: {e}"));
            // The same signature holds for the card without its 0.3 fields.
            let mut plain = card(false);
            plain["signatures"] = signed["signatures"].clone();
            verify(&plain, &keys(&signer), &[algorithm]).unwrap();
        }
    }

    #[test]
    fn the_protected_header_names_the_algorithm_the_key_and_the_set() {
        let signer = CardSigner::new(
            Algorithm::ES256,
            ES256.as_bytes(),
            "k1",
            Some("https://a.example.org/jwks"),
        )
        .unwrap();
        let mut signed = card(false);
        signer.sign(&mut signed).unwrap();
        let signatures = signed["signatures"].as_array().unwrap();
        assert_eq!(signatures.len(), 1);
        let header: Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(signatures[0]["protected"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            header,
            json!({"alg": "ES256", "kid": "k1", "typ": "JOSE", "jku": "https://a.example.org/jwks"})
        );
        // Signing again replaces the signature rather than adding one.
        signer.sign(&mut signed).unwrap();
        assert_eq!(signed["signatures"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn the_published_set_holds_the_public_half_only() {
        for (algorithm, pem, kty) in [
            (Algorithm::ES256, ES256, "EC"),
            (Algorithm::RS256, RSA, "RSA"),
            (Algorithm::EdDSA, ED25519, "OKP"),
        ] {
            let jwks = signer(algorithm, pem, "k1").jwks().clone();
            let key = &jwks["keys"][0];
            assert_eq!(key["kty"], kty);
            assert_eq!(key["kid"], "k1");
            assert_eq!(key["use"], "sig");
            assert_eq!(key["alg"], json!(algorithm));
            assert!(
                key.get("d").is_none(),
                "{algorithm:?} published a private part"
            );
        }
    }

    #[test]
    fn a_changed_card_or_a_stranger_key_does_not_verify() {
        let signer = signer(Algorithm::ES256, ES256, "k1");
        let mut signed = card(true);
        signer.sign(&mut signed).unwrap();
        let keys = keys(&signer);

        let mut changed = signed.clone();
        changed["description"] = json!("Something else");
        assert_eq!(
            verify(&changed, &keys, &[Algorithm::ES256]),
            Err(VerifyError::Invalid)
        );
        // An empty field added is no change (it is not part of the 1.0 form).
        let mut padded = signed.clone();
        padded["documentationUrl"] = json!("");
        assert!(verify(&padded, &keys, &[Algorithm::ES256]).is_ok());

        // The algorithm must be one the verifier allows.
        assert_eq!(
            verify(&signed, &keys, &[Algorithm::RS256]),
            Err(VerifyError::Invalid)
        );
        // Another key under the same kid, or the right key under another kid.
        let stranger = self::keys(&self::signer(Algorithm::ES256, ES256_B, "k1"));
        assert_eq!(
            verify(&signed, &stranger, &[Algorithm::ES256]),
            Err(VerifyError::Invalid)
        );
        let renamed = self::keys(&self::signer(Algorithm::ES256, ES256, "k2"));
        assert_eq!(
            verify(&signed, &renamed, &[Algorithm::ES256]),
            Err(VerifyError::Invalid)
        );

        // One valid signature among broken ones suffices.
        let mut several = signed.clone();
        let good = signed["signatures"][0].clone();
        several["signatures"] =
            json!([{"protected": "!!", "signature": "x"}, {"signature": "x"}, good]);
        assert!(verify(&several, &keys, &[Algorithm::ES256]).is_ok());

        assert_eq!(
            verify(&card(true), &keys, &[Algorithm::ES256]),
            Err(VerifyError::Unsigned)
        );
    }

    /// The signed form is all a verifier uses: the card's 1.0 fields under their JSON names,
    /// without the 0.3 ones (unsigned) and without the signatures.
    #[test]
    fn verifying_returns_the_signed_form_only() {
        let signer = signer(Algorithm::ES256, ES256, "k1");
        let mut signed = card(true);
        signer.sign(&mut signed).unwrap();
        assert!(
            signed.get("url").is_some(),
            "the card carries its 0.3 fields"
        );
        let form = verify(&signed, &keys(&signer), &[Algorithm::ES256]).unwrap();
        for unsigned in [
            "url",
            "protocolVersion",
            "preferredTransport",
            "additionalInterfaces",
            "signatures",
        ] {
            assert!(form.get(unsigned).is_none(), "{unsigned}: {form}");
        }
        assert_eq!(form["supportedInterfaces"], signed["supportedInterfaces"]);
        assert_eq!(
            canonical_form(&signed).unwrap(),
            serde_jcs::to_string(&form).unwrap()
        );
    }

    /// A signed card changed so that its 1.0 parse reads the same fields — one under its
    /// protobuf name, a field under two spellings, a key named twice — is refused before its
    /// signature is checked: a reader of its raw JSON would see another card than the one
    /// signed (the 0.3 `url` where `supportedInterfaces` is missing by its JSON name).
    #[test]
    fn a_card_not_in_canonical_form_is_refused_though_its_signature_matches() {
        let signer = signer(Algorithm::ES256, ES256, "k1");
        let keys = keys(&signer);
        let mut signed = card(false);
        signer.sign(&mut signed).unwrap();
        let redirected = |mut card: Value| {
            card["url"] = json!("http://attacker.example.org/a2a");
            card["protocolVersion"] = json!("0.3.0");
            card["preferredTransport"] = json!("JSONRPC");
            card
        };
        let not_canonical = |card: &Value| match verify(card, &keys, &[Algorithm::ES256]) {
            Err(VerifyError::NotCanonical(why)) => why,
            other => panic!("{other:?}: {card}"),
        };

        let mut renamed = redirected(signed.clone());
        let interfaces = renamed
            .as_object_mut()
            .unwrap()
            .remove("supportedInterfaces")
            .unwrap();
        renamed["supported_interfaces"] = interfaces.clone();
        assert_eq!(
            canonical_form(&renamed).unwrap(),
            canonical_form(&signed).unwrap(),
            "the signature covers both"
        );
        assert!(
            not_canonical(&renamed).contains(
                "`supported_interfaces` is a field's protobuf name; a card names it by its JSON \
             name `supportedInterfaces`"
            ),
            "{}",
            not_canonical(&renamed)
        );

        let mut versions = redirected(signed.clone());
        for interface in versions["supportedInterfaces"].as_array_mut().unwrap() {
            let version = interface
                .as_object_mut()
                .unwrap()
                .remove("protocolVersion")
                .unwrap();
            interface["protocol_version"] = version;
        }
        assert!(
            not_canonical(&versions).contains("`supportedInterfaces[0].protocol_version`"),
            "{}",
            not_canonical(&versions)
        );

        let mut twice = signed.clone();
        twice["supported_interfaces"] = interfaces;
        assert!(
            not_canonical(&twice).contains("names a field twice"),
            "{}",
            not_canonical(&twice)
        );

        // Named twice in the text: serde_json keeps the last of the two, another reader the
        // first.
        let text = signed.to_string();
        let doubled = text.replacen(
            '{',
            r#"{"supportedInterfaces":[{"url":"http://attacker.example.org/a2a","protocolBinding":"JSONRPC","protocolVersion":"1.0"}],"#,
            1,
        );
        assert!(
            verify(
                &serde_json::from_str(&doubled).unwrap(),
                &keys,
                &[Algorithm::ES256]
            )
            .is_ok()
        );
        match verify_json(doubled.as_bytes(), &keys, &[Algorithm::ES256]) {
            Err(VerifyError::NotCanonical(why)) => {
                assert!(
                    why.contains("names the key `supportedInterfaces` twice"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(verify_json(text.as_bytes(), &keys, &[Algorithm::ES256]).is_ok());

        // Free-form values keep their keys as written: an extension's parameters may hold a
        // `_`; so may a field the 1.0 schema does not have.
        let mut free = card(false);
        free["capabilities"]["extensions"] =
            json!([{"uri": "urn:x", "params": {"snake_case": {"deep_key": 1}}}]);
        free["x_vendor_note"] = json!("ignored");
        signer.sign(&mut free).unwrap();
        let form = verify(&free, &keys, &[Algorithm::ES256]).unwrap();
        assert_eq!(
            form["capabilities"]["extensions"][0]["params"]["snake_case"]["deep_key"],
            1.0
        );
        assert!(form.get("x_vendor_note").is_none());
    }

    #[test]
    fn a_key_that_does_not_fit_the_algorithm_is_refused_at_once() {
        for (algorithm, pem) in [
            (Algorithm::ES256, RSA),
            (Algorithm::ES256, ES384),
            (Algorithm::RS256, ES256),
            (Algorithm::EdDSA, ES256),
            (Algorithm::ES256, "not a key"),
        ] {
            let err = CardSigner::new(algorithm, pem.as_bytes(), "k1", None).unwrap_err();
            assert!(matches!(err, SigningError::Key(_)), "{algorithm:?}: {err}");
        }
        let err = CardSigner::new(Algorithm::HS256, b"secret", "k1", None).unwrap_err();
        assert!(err.to_string().contains("shared-secret"), "{err}");
    }

    #[test]
    fn the_extended_card_signed_anew_verifies_and_the_public_signature_does_not_cover_it() {
        let signer = signer(Algorithm::ES256, ES256, "k1");
        let mut public = card(true);
        signer.sign(&mut public).unwrap();
        let terms = TenantTerms {
            tenant: "acme".into(),
            tier: "gold".into(),
            requests_per_minute: 600,
            skill_calls_per_minute: Vec::new(),
        };
        let mut extended = extended_agent_card(&public, &terms);
        assert_eq!(
            verify(&extended, &keys(&signer), &[Algorithm::ES256]),
            Err(VerifyError::Invalid)
        );
        signer.sign(&mut extended).unwrap();
        assert!(verify(&extended, &keys(&signer), &[Algorithm::ES256]).is_ok());
    }

    /// A client that maps a card's 0.3 fields onto the 1.0 ones before it verifies (the
    /// official Python SDK's card parser: each security scheme's flat 0.3 `type` becomes the
    /// 1.0 wrapper around the scheme's other flat fields, `in` becomes `location`) reads the
    /// same schemes as the 1.0 wrappers say, so the signature covers what it reads.
    #[test]
    fn the_0_3_scheme_fields_say_what_the_1_0_ones_say() {
        let hybrid = card(true);
        let mut mapped = hybrid.clone();
        let schemes = mapped["securitySchemes"].as_object_mut().unwrap();
        assert_eq!(schemes.len(), 3, "bearer, API key and one OIDC issuer");
        for scheme in schemes.values_mut() {
            let flat = scheme.as_object_mut().unwrap();
            let wrapper = match flat
                .remove("type")
                .and_then(|t| t.as_str().map(str::to_owned))
            {
                Some(t) if t == "http" => "httpAuthSecurityScheme",
                Some(t) if t == "apiKey" => "apiKeySecurityScheme",
                Some(t) if t == "openIdConnect" => "openIdConnectSecurityScheme",
                other => panic!("a 0.3 scheme type: {other:?}"),
            };
            if let Some(location) = flat.remove("in") {
                flat.insert("location".into(), location);
            }
            let inner = Value::Object(flat.clone());
            *scheme = json!({ wrapper: inner });
        }
        assert_eq!(
            canonical_form(&mapped).unwrap(),
            canonical_form(&hybrid).unwrap()
        );
    }
}
