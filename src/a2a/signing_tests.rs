use jsonwebtoken::Algorithm;
use jsonwebtoken::jwk::JwkSet;
use serde_json::{Value, json};

use super::*;
use crate::a2a::card::{CardConfig, SkillCard, TenantTerms, build_agent_card, extended_agent_card};

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
