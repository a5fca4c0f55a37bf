//! Embeddings against a real HTTP server: vectors stored on writes and blended into
//! search scores, and every way the endpoint can fail.

use std::sync::Arc;
use std::time::Duration;

use super::embeddings_server::{EmbeddingsServer, closed_port_url, vector_for};
use super::*;
use crate::skills::SkillError;
use crate::skills::memory::{
    AddMemory, EmbeddingsClient, EmbeddingsError, MemoryRef, SearchMemories, UpdateMemory,
};
use crate::store::memories::testing::on_both_memory_backends;
use crate::store::memories::{MemoryLayer, MemoryRepository};

on_both_memory_backends!(
    vectors_are_stored_and_blended_into_scores,
    an_unreachable_endpoint_fails_searches_but_not_writes,
);

fn engine_at(repo: Arc<dyn MemoryRepository>, url: &str, model: &str) -> MemoryEngine {
    let settings = MemorySettings {
        embeddings_url: url.into(),
        embeddings_model: model.into(),
        embeddings_timeout_ms: 5_000,
        ..settings()
    };
    MemoryEngine::new(repo, settings, None).unwrap()
}

fn user_memory(content: &str) -> AddMemory {
    AddMemory {
        content: content.into(),
        layer: MemoryLayer::User,
        tags: None,
        metadata: None,
        ids: ids(&[(ScopeField::UserId, "u1")]),
    }
}

fn user_search(query: &str) -> SearchMemories {
    SearchMemories {
        query: query.into(),
        layers: None,
        tags: None,
        limit: None,
        threshold: None,
        ids: ids(&[(ScopeField::UserId, "u1")]),
    }
}

fn user_ref(id: &str) -> MemoryRef {
    MemoryRef {
        memory_id: id.into(),
        ids: ids(&[(ScopeField::UserId, "u1")]),
    }
}

async fn vectors_are_stored_and_blended_into_scores(repo: Arc<dyn MemoryRepository>) {
    let server = EmbeddingsServer::start(None);
    let engine = engine_at(repo, &server.url, "test-model");
    let t = tenant("t1");
    let coffee = engine
        .add(&t, user_memory("I drink coffee every morning"), None)
        .await
        .unwrap();
    engine
        .add(&t, user_memory("my cat sleeps all day"), None)
        .await
        .unwrap();
    let stored = engine.get(&t, user_ref(&coffee.id)).await.unwrap();
    assert_eq!(
        stored.embedding,
        Some(vector_for("I drink coffee every morning"))
    );

    // No word in common: found by similarity alone (cosine 1 → 0.5); the cat memory
    // points elsewhere (cosine 0) and is no hit.
    let found = engine
        .search(&t, user_search("espresso please"))
        .await
        .unwrap();
    assert_eq!(found.hits.len(), 1);
    assert_eq!(found.hits[0].memory.id, coffee.id);
    assert!(
        (found.hits[0].score - 0.5).abs() < 1e-9,
        "{}",
        found.hits[0].score
    );

    // Words and direction agree: above either half alone.
    let found = engine.search(&t, user_search("coffee")).await.unwrap();
    assert_eq!(found.hits[0].memory.id, coffee.id);
    assert!(found.hits[0].score > 0.5 && found.hits[0].score < 1.0);

    let mut strict = user_search("espresso");
    strict.threshold = Some(0.6);
    assert!(engine.search(&t, strict).await.unwrap().hits.is_empty());

    // New content gets a new vector.
    let update = UpdateMemory {
        memory_id: coffee.id.clone(),
        content: Some("I drink matcha tea".into()),
        tags: None,
        metadata: None,
        ids: ids(&[(ScopeField::UserId, "u1")]),
    };
    let updated = engine.update(&t, update, None).await.unwrap();
    assert_eq!(updated.embedding, Some(vector_for("matcha tea")));
}

async fn an_unreachable_endpoint_fails_searches_but_not_writes(repo: Arc<dyn MemoryRepository>) {
    let engine = engine_at(repo, &closed_port_url(), "test-model");
    let t = tenant("t1");
    let added = engine
        .add(&t, user_memory("stored without a vector"), None)
        .await
        .unwrap();
    assert!(!added.duplicate);
    let stored = engine.get(&t, user_ref(&added.id)).await.unwrap();
    assert_eq!(stored.embedding, None);
    assert!(matches!(
        engine.search(&t, user_search("vector")).await,
        Err(SkillError::Unavailable(_))
    ));
}

#[tokio::test]
async fn failing_endpoints_make_searches_unavailable() {
    let server = EmbeddingsServer::start(None);
    let db = crate::store::memories::testing::SqliteMemories::open().await;
    for model in ["broken", "empty"] {
        let engine = engine_at(db.repo.clone(), &server.url, model);
        let result = engine.search(&tenant("t1"), user_search("coffee")).await;
        assert!(
            matches!(result, Err(SkillError::Unavailable(_))),
            "{model}: {result:?}"
        );
    }
}

#[tokio::test]
async fn the_client_reports_each_failure() {
    let server = EmbeddingsServer::start(Some("sekret"));
    let client = |model: &str, key: Option<&str>, timeout_ms: u64| {
        let timeout = Duration::from_millis(timeout_ms);
        EmbeddingsClient::new(&server.url, model, key.map(str::to_owned), timeout).unwrap()
    };
    let ok = client("m", Some("sekret"), 5_000).embed("a puppy").await;
    assert_eq!(ok, Ok(vector_for("puppy")));
    let unauthorised = client("m", None, 5_000).embed("a puppy").await;
    assert_eq!(unauthorised, Err(EmbeddingsError::Status(401)));
    let wrong_key = client("m", Some("guess"), 5_000).embed("a puppy").await;
    assert_eq!(wrong_key, Err(EmbeddingsError::Status(401)));
    let broken = client("broken", Some("sekret"), 5_000).embed("x").await;
    assert_eq!(broken, Err(EmbeddingsError::Status(500)));
    let empty = client("empty", Some("sekret"), 5_000).embed("x").await;
    assert!(
        matches!(empty, Err(EmbeddingsError::Response(_))),
        "{empty:?}"
    );
    let slow = client("slow", Some("sekret"), 200).embed("x").await;
    assert!(matches!(slow, Err(EmbeddingsError::Request(_))), "{slow:?}");
    let down = EmbeddingsClient::new(&closed_port_url(), "m", None, Duration::from_secs(5))
        .unwrap()
        .embed("x")
        .await;
    assert!(matches!(down, Err(EmbeddingsError::Request(_))), "{down:?}");
}

#[test]
fn settings_select_and_check_the_client() {
    let with = |url: &str, model: &str, key_env: &str| {
        EmbeddingsClient::from_settings(&MemorySettings {
            embeddings_url: url.into(),
            embeddings_model: model.into(),
            embeddings_api_key_env: key_env.into(),
            ..MemorySettings::default()
        })
    };
    assert!(
        matches!(with("", "", ""), Ok(None)),
        "no URL: full-text only"
    );
    assert!(matches!(
        with("http://127.0.0.1:9/v1", "m", ""),
        Ok(Some(_))
    ));
    for (url, model, key_env) in [
        ("http://127.0.0.1:9/v1", "", ""),
        ("ftp://127.0.0.1/v1", "m", ""),
        (
            "http://127.0.0.1:9/v1",
            "m",
            "AGENT_A2A_TEST_SURELY_UNSET_EMBEDDINGS_KEY",
        ),
    ] {
        assert!(
            matches!(with(url, model, key_env), Err(EmbeddingsError::Config(_))),
            "{url} {model} {key_env}"
        );
    }
}
