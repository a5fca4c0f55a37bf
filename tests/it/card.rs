//! The agent card: content, aliases and HTTP caching.

use crate::support::{Backend, spawn_app, spawn_app_with};

#[actix_web::test]
async fn card_declares_bindings_capabilities_and_versions() {
    let app = spawn_app().await;
    let r = app.get("/.well-known/agent-card.json").await;
    assert_eq!(r.status(), 200);
    let card: serde_json::Value = r.json().await.unwrap();
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["capabilities"]["pushNotifications"], true);
    assert_eq!(card["capabilities"]["stateTransitionHistory"], true);
    let interfaces = card["supportedInterfaces"].as_array().unwrap();
    let has = |binding: &str, version: &str| {
        interfaces
            .iter()
            .any(|i| i["protocolBinding"] == binding && i["protocolVersion"] == version)
    };
    assert!(has("JSONRPC", "1.0") && has("HTTP+JSON", "1.0"));
    assert!(has("JSONRPC", "0.3") && has("HTTP+JSON", "0.3"));
    assert!(has("GRPC", "1.0"), "gRPC is on by default");
    assert_eq!(card["protocolVersion"], "0.3.0");
    assert_eq!(card["preferredTransport"], "JSONRPC");
    assert!(card["url"].as_str().unwrap().starts_with(&app.url));
}

#[actix_web::test]
async fn card_is_cacheable_and_honours_if_none_match() {
    let app = spawn_app().await;
    let r = app.get("/.well-known/agent-card.json").await;
    let cache = r.headers()["cache-control"].to_str().unwrap().to_owned();
    assert!(cache.contains("max-age="), "{cache}");
    assert!(r.headers().contains_key("last-modified"));
    let etag = r.headers()["etag"].to_str().unwrap().to_owned();
    let again = app
        .client
        .get(format!("{}/.well-known/agent-card.json", app.url))
        .header("If-None-Match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    let other = app
        .client
        .get(format!("{}/.well-known/agent-card.json", app.url))
        .header("If-None-Match", "\"something-else\"")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
}

#[actix_web::test]
async fn legacy_card_path_serves_the_same_card() {
    let app = spawn_app().await;
    let a = app
        .get("/.well-known/agent-card.json")
        .await
        .text()
        .await
        .unwrap();
    let b = app
        .get("/.well-known/agent.json")
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(a, b);
}

#[actix_web::test]
async fn a_1_0_only_card_can_be_configured() {
    let app = spawn_app_with(Backend::Sqlite, |s| s.agent.card_v03_fields = false).await;
    let card: serde_json::Value = app
        .get("/.well-known/agent-card.json")
        .await
        .json()
        .await
        .unwrap();
    assert!(card.get("url").is_none() && card.get("protocolVersion").is_none());
    assert!(card["capabilities"].get("stateTransitionHistory").is_none());
    // JSON-RPC and HTTP+JSON for 1.0 and 0.3, and gRPC (1.0).
    assert_eq!(card["supportedInterfaces"].as_array().unwrap().len(), 5);
}

/// A card past `server.max_card_bytes` is served without its tools' schemas: the rest
/// of the card, its skills included, stays.
#[actix_web::test]
async fn a_card_past_its_bound_is_served_without_its_tools_schemas() {
    let schemas = |card: &serde_json::Value| {
        card["capabilities"]["extensions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["uri"] == "urn:agent-a2a:tool-schemas:v1")
    };
    // The configured agent: its skills have tools.
    let agent = agent_a2a::startup::Agent::configured;
    let app = crate::support::spawn_agent_in(None, agent(), |_| {}).await;
    let whole: serde_json::Value = app
        .get("/.well-known/agent-card.json")
        .await
        .json()
        .await
        .unwrap();
    assert!(schemas(&whole));
    let size = whole.to_string().len();
    let app =
        crate::support::spawn_agent_in(None, agent(), |s| s.server.max_card_bytes = size - 1).await;
    let r = app.get("/.well-known/agent-card.json").await;
    let text = r.text().await.unwrap();
    assert!(text.len() < size, "{} bytes", text.len());
    let bounded: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(!schemas(&bounded), "{bounded}");
    assert_eq!(bounded["skills"], whole["skills"]);
}
