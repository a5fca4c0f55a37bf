//! Searching through the engine: ranking by layer precedence, then score, then
//! recency; threshold and limits; scope ids required and named when missing.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::store::memories::testing::on_both_memory_backends;
use crate::store::memories::{MemoryLayer, MemoryRepository};

use ScopeField::*;

on_both_memory_backends!(
    search_ranks_by_layer_then_score_then_recency,
    threshold_and_limits_are_honoured,
    missing_scope_ids_are_named,
);

/// Memories of other scopes, so that query words are rare in the whole corpus.
async fn add_filler(engine: &MemoryEngine, t: &TenantId) {
    let other = ids(&[(UserId, "filler")]);
    for text in [
        "walks the dog",
        "owns a bicycle",
        "reads poetry",
        "plays chess",
        "bakes bread",
    ] {
        engine
            .add(t, add(MemoryLayer::User, text, &other), None)
            .await
            .unwrap();
    }
}

async fn search_ranks_by_layer_then_score_then_recency(repo: Arc<dyn MemoryRepository>) {
    let engine = engine(repo);
    let t = tenant("t1");
    add_filler(&engine, &t).await;
    let all = ids(&[
        (AgentId, "a1"),
        (UserId, "u1"),
        (SessionId, "s1"),
        (ProjectId, "p1"),
    ]);
    let company = ids(&[(CompanyId, "c1")]);
    // Added broadest first, so recency alone would give the opposite order.
    for (layer, text, scope) in [
        (
            MemoryLayer::Company,
            "rust deploy service standards",
            &company,
        ),
        (
            MemoryLayer::Project,
            "rust deploy service checklist for releases",
            &all,
        ),
        (MemoryLayer::Session, "deploy service today", &all),
        (MemoryLayer::User, "rust habits", &all),
        (MemoryLayer::User, "rust deploy service habits", &all),
        (MemoryLayer::User, "rust hobby", &all),
        (MemoryLayer::Agent, "notes about rust", &all),
    ] {
        engine.add(&t, add(layer, text, scope), None).await.unwrap();
        // Distinct update times, so that recency is observable.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }

    let found = engine
        .search(&t, search("rust deploy service", &all))
        .await
        .unwrap();
    let order: Vec<&str> = found
        .hits
        .iter()
        .map(|h| h.memory.content.as_str())
        .collect();
    assert_eq!(
        order,
        [
            "notes about rust",
            "rust deploy service habits",
            "rust hobby",
            "rust habits",
            "deploy service today",
            "rust deploy service checklist for releases",
        ],
        "the company memory is out of reach: no companyId was given"
    );
    assert_eq!(
        found.searched_layers,
        [
            MemoryLayer::Agent,
            MemoryLayer::User,
            MemoryLayer::Session,
            MemoryLayer::Project
        ]
    );
    assert!(found.hits[1].score > found.hits[2].score);
    assert_eq!(
        found.hits[2].score, found.hits[3].score,
        "same words, same length"
    );

    let mut first_two = search("rust deploy service", &all);
    first_two.limit = Some(2);
    let found = engine.search(&t, first_two).await.unwrap();
    let order: Vec<&str> = found
        .hits
        .iter()
        .map(|h| h.memory.content.as_str())
        .collect();
    assert_eq!(order, ["notes about rust", "rust deploy service habits"]);

    let mut chosen = search("rust deploy service", &all);
    chosen.layers = Some(vec![
        MemoryLayer::Project,
        MemoryLayer::Session,
        MemoryLayer::Project,
    ]);
    let found = engine.search(&t, chosen).await.unwrap();
    assert_eq!(
        found.searched_layers,
        [MemoryLayer::Session, MemoryLayer::Project]
    );
    assert_eq!(found.hits.len(), 2);
    assert_eq!(found.hits[0].memory.content, "deploy service today");
}

async fn threshold_and_limits_are_honoured(repo: Arc<dyn MemoryRepository>) {
    let engine = engine(repo.clone());
    let t = tenant("t1");
    add_filler(&engine, &t).await;
    let u1 = ids(&[(UserId, "u1")]);
    for text in ["rust deploy service habits", "rust habits", "rust hobby"] {
        engine
            .add(&t, add(MemoryLayer::User, text, &u1), None)
            .await
            .unwrap();
    }
    let with_threshold = |threshold: Option<f64>| {
        let mut request = search("rust deploy service", &u1);
        request.threshold = threshold;
        request
    };
    let all = engine.search(&t, with_threshold(None)).await.unwrap();
    assert_eq!(all.hits.len(), 3);
    let (best, next) = (all.hits[0].score, all.hits[1].score);
    assert!(best > next && next > 0.0 && best < 1.0);

    let found = engine
        .search(&t, with_threshold(Some((best + next) / 2.0)))
        .await
        .unwrap();
    assert_eq!(found.hits.len(), 1);
    assert_eq!(found.hits[0].memory.content, "rust deploy service habits");
    let found = engine.search(&t, with_threshold(Some(best))).await.unwrap();
    assert_eq!(found.hits.len(), 1, "the threshold is inclusive");
    assert!(
        engine
            .search(&t, with_threshold(Some(1.0)))
            .await
            .unwrap()
            .hits
            .is_empty()
    );
    for bad in [1.5, -0.1, f64::NAN, f64::INFINITY] {
        invalid_naming(
            engine.search(&t, with_threshold(Some(bad))).await,
            "threshold",
        );
    }

    for bad in [0, 51] {
        let mut request = search("rust", &u1);
        request.limit = Some(bad);
        invalid_naming(engine.search(&t, request).await, "limit");
    }
    let small = MemoryEngine::new(
        repo,
        MemorySettings {
            default_limit: 2,
            ..settings()
        },
        None,
    )
    .unwrap();
    assert_eq!(
        small
            .search(&t, search("rust", &u1))
            .await
            .unwrap()
            .hits
            .len(),
        2
    );

    invalid_naming(engine.search(&t, search("?! -- **", &u1)).await, "query");
    invalid_naming(
        engine.search(&t, search(&"rust ".repeat(300), &u1)).await,
        "query",
    );
    let long = add(MemoryLayer::User, &"x".repeat(1025), &u1);
    invalid_naming(engine.add(&t, long, None).await, "content");
    let mut heavy = add(MemoryLayer::User, "fine", &u1);
    heavy.metadata = Some(
        json!({"blob": "y".repeat(1100)})
            .as_object()
            .unwrap()
            .clone(),
    );
    invalid_naming(engine.add(&t, heavy, None).await, "metadata");
}

async fn missing_scope_ids_are_named(repo: Arc<dyn MemoryRepository>) {
    let engine = engine(repo);
    let t = tenant("t1");
    let user_only = ids(&[(UserId, "u1")]);
    invalid_naming(
        engine
            .add(&t, add(MemoryLayer::Session, "x", &user_only), None)
            .await,
        "sessionId",
    );
    let agent_only = ids(&[(AgentId, "a1")]);
    invalid_naming(
        engine
            .add(&t, add(MemoryLayer::Agent, "x", &agent_only), None)
            .await,
        "userId",
    );
    invalid_naming(
        engine
            .add(&t, add(MemoryLayer::Org, "x", &user_only), None)
            .await,
        "orgId",
    );

    let mut team = search("x", &user_only);
    team.layers = Some(vec![MemoryLayer::User, MemoryLayer::Team]);
    invalid_naming(engine.search(&t, team).await, "teamId");
    let mut empty = search("x", &user_only);
    empty.layers = Some(Vec::new());
    invalid_naming(engine.search(&t, empty).await, "layers");
    invalid_naming(
        engine.search(&t, search("x", &ScopeIds::new())).await,
        "userId",
    );
    invalid_naming(
        engine.get(&t, reference("m", &ScopeIds::new())).await,
        "userId",
    );
    invalid_naming(
        engine.search(&t, search("x", &ids(&[(UserId, "")]))).await,
        "userId",
    );
    let bad_unused = ids(&[(UserId, "u1"), (TeamId, "a\u{0}b")]);
    invalid_naming(
        engine
            .add(&t, add(MemoryLayer::User, "x", &bad_unused), None)
            .await,
        "teamId",
    );
}
