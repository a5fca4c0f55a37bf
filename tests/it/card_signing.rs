//! Signed agent cards (A2A §8.4) on the real server: the public card and every
//! binding's extended card carry a signature that verifies with the key set served at
//! `/.well-known/jwks.json`; without a key nothing is signed and no key set is served.

use a2a_pb::proto;
use agent_a2a::a2a::signing::{VerifyError, verify};
use jsonwebtoken::Algorithm;
use jsonwebtoken::jwk::JwkSet;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::grpc::{ACME, call, client, keys};
use crate::support::{Backend, TestApp, spawn_app, spawn_app_with};

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

async fn key_set(app: &TestApp) -> JwkSet {
    let response = app.get("/.well-known/jwks.json").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "application/jwk-set+json"
    );
    response.json().await.expect("a JWK Set")
}

#[actix_web::test]
async fn the_public_and_every_extended_card_verify_with_the_served_keys() {
    let app = spawn_app_with(Backend::Sqlite, |s| {
        keys(s, 10_000);
        s.agent.card_signing.key_file = fixture("test-only-es256-a.pem");
        s.agent.card_signing.kid = "card-2026".into();
        s.agent.card_signing.jku = "https://agent.example.org/.well-known/jwks.json".into();
    })
    .await;
    let keys = key_set(&app).await;
    assert_eq!(keys.keys.len(), 1);
    assert_eq!(keys.keys[0].common.key_id.as_deref(), Some("card-2026"));

    let public: Value = app
        .get("/.well-known/agent-card.json")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(public["signatures"].as_array().map(Vec::len), Some(1));
    verify(&public, &keys, &[Algorithm::ES256]).expect("the public card verifies");
    // Only the algorithms a verifier allows count.
    assert_eq!(
        verify(&public, &keys, &[Algorithm::RS256]),
        Err(VerifyError::Invalid)
    );

    // The extended card is another card: signed anew for each caller.
    let answer = app
        .client
        .post(format!("{}/", app.url))
        .header("x-api-key", ACME)
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}}))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let extended = &answer["result"];
    assert_ne!(extended["signatures"], public["signatures"], "{answer}");
    verify(extended, &keys, &[Algorithm::ES256]).expect("the extended card verifies");

    let rest: Value = app
        .client
        .get(format!("{}/extendedAgentCard", app.url))
        .header("x-api-key", ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    verify(&rest, &keys, &[Algorithm::ES256]).expect("over HTTP+JSON");

    // Over gRPC the card arrives as protobuf: as ProtoJSON, it verifies the same.
    let card = client(&app)
        .await
        .get_extended_agent_card(call(
            proto::GetExtendedAgentCardRequest::default(),
            &[("x-api-key", ACME)],
        ))
        .await
        .expect("the extended card over gRPC")
        .into_inner();
    assert_eq!(card.signatures.len(), 1);
    let card: a2a_pb::protojson::AgentCard =
        prost::Message::decode(prost::Message::encode_to_vec(&card).as_slice()).unwrap();
    let card = serde_json::to_value(card).expect("ProtoJSON");
    verify(&card, &keys, &[Algorithm::ES256]).expect("over gRPC");

    // A card whose content changed on the way does not.
    let mut changed = public.clone();
    changed["description"] = json!("something else");
    assert_eq!(
        verify(&changed, &keys, &[Algorithm::ES256]),
        Err(VerifyError::Invalid)
    );
    app.stop().await;
}

#[actix_web::test]
async fn without_a_key_the_card_is_not_signed_and_no_key_set_is_served() {
    let app = spawn_app().await;
    let public: Value = app
        .get("/.well-known/agent-card.json")
        .await
        .json()
        .await
        .unwrap();
    assert!(public.get("signatures").is_none(), "{public}");
    assert_eq!(
        app.get("/.well-known/jwks.json").await.status(),
        StatusCode::NOT_FOUND
    );
    app.stop().await;
}

#[actix_web::test]
async fn a_key_given_by_value_signs_too() {
    let pem = std::fs::read_to_string(fixture("test-only-ed25519.pem")).unwrap();
    let app = spawn_app_with(Backend::Sqlite, |s| {
        s.agent.card_signing.key_pem = pem;
        s.agent.card_signing.algorithm = "EdDSA".into();
        s.agent.card_signing.kid = "ed".into();
    })
    .await;
    let keys = key_set(&app).await;
    let public: Value = app
        .get("/.well-known/agent-card.json")
        .await
        .json()
        .await
        .unwrap();
    verify(&public, &keys, &[Algorithm::EdDSA]).expect("an EdDSA signature");
    app.stop().await;
}
