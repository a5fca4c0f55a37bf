//! Full-text search and the embedding scan: ranking, normalised scores, tags, inert
//! query syntax, and an index that follows updates and deletes.

use std::sync::Arc;

use super::*;
use crate::store::memories::testing::on_both_memory_backends;
use crate::store::memories::{MemoryChange, MemoryRepository, ScoredMemory, TextQuery};

on_both_memory_backends!(
    more_matching_words_rank_higher,
    scores_are_normalised_below_one,
    tags_filter_requires_every_tag,
    query_syntax_in_user_text_is_inert,
    the_index_follows_updates_and_deletes,
    the_scan_returns_embedded_memories_newest_first,
);

fn q(text: &str) -> TextQuery {
    TextQuery::parse(text).unwrap()
}

fn contents(hits: &[ScoredMemory]) -> Vec<&str> {
    hits.iter().map(|h| h.memory.content.as_str()).collect()
}

/// Memories that match none of the test queries, so that every query word is rare in
/// the corpus (as it would be in real use) and BM25 weighs it fully.
async fn add_filler(repo: &dyn MemoryRepository, t: &TenantId, s: &MemoryScope) {
    for text in [
        "walks the dog at noon",
        "owns a red bicycle",
        "reads poetry",
        "plays chess",
    ] {
        repo.add(&memory(t, s, text), None).await.unwrap();
    }
}

async fn more_matching_words_rank_higher(repo: Arc<dyn MemoryRepository>) {
    let t = tenant("t1");
    let u = user("u1");
    add_filler(&*repo, &t, &u).await;
    for text in [
        "writes python scripts",
        "writes rust services with tokio",
        "writes rust services with tokio on actix",
    ] {
        repo.add(&memory(&t, &u, text), None).await.unwrap();
    }
    let hits = repo
        .search_text(&t, &u, &q("Rust tokio ACTIX"), &[], 10)
        .await
        .unwrap();
    assert_eq!(
        contents(&hits),
        [
            "writes rust services with tokio on actix",
            "writes rust services with tokio"
        ]
    );
    assert!(hits[0].score > hits[1].score, "{hits:?}");

    let limited = repo
        .search_text(&t, &u, &q("writes"), &[], 2)
        .await
        .unwrap();
    assert_eq!(limited.len(), 2, "at most `max` candidates");
}

async fn scores_are_normalised_below_one(repo: Arc<dyn MemoryRepository>) {
    let t = tenant("t1");
    let u = user("u1");
    add_filler(&*repo, &t, &u).await;
    let dense = "alpha beta gamma ".repeat(50);
    repo.add(&memory(&t, &u, &dense), None).await.unwrap();
    repo.add(&memory(&t, &u, "alpha and nothing else"), None)
        .await
        .unwrap();
    let hits = repo
        .search_text(&t, &u, &q("alpha beta gamma"), &[], 10)
        .await
        .unwrap();
    assert_eq!(hits.len(), 2);
    for hit in &hits {
        assert!(hit.score > 0.0 && hit.score < 1.0, "{}", hit.score);
    }
    assert_eq!(hits[0].memory.content, dense);
}

async fn tags_filter_requires_every_tag(repo: Arc<dyn MemoryRepository>) {
    let t = tenant("t1");
    let u = user("u1");
    for (text, tags) in [
        ("travel plan for japan", vec!["travel", "asia"]),
        ("travel plan for peru", vec!["travel"]),
        (
            "travel insurance number",
            vec!["documents", "travel", "asia"],
        ),
    ] {
        let mut new = memory(&t, &u, text);
        new.tags = tags.into_iter().map(String::from).collect();
        repo.add(&new, None).await.unwrap();
    }
    let search = |tags: &[&str]| {
        let tags: Vec<String> = tags.iter().map(|s| s.to_string()).collect();
        let (repo, t, u) = (repo.clone(), t.clone(), u.clone());
        async move {
            let hits = repo
                .search_text(&t, &u, &q("travel"), &tags, 10)
                .await
                .unwrap();
            let mut found: Vec<String> = hits.into_iter().map(|h| h.memory.content).collect();
            found.sort();
            found
        }
    };
    assert_eq!(search(&[]).await.len(), 3);
    assert_eq!(search(&["travel"]).await.len(), 3);
    assert_eq!(
        search(&["asia", "travel"]).await,
        ["travel insurance number", "travel plan for japan"]
    );
    assert_eq!(
        search(&["documents", "asia"]).await,
        ["travel insurance number"]
    );
    assert!(search(&["Travel"]).await.is_empty(), "tags match exactly");
    assert!(search(&["europe"]).await.is_empty());
}

async fn query_syntax_in_user_text_is_inert(repo: Arc<dyn MemoryRepository>) {
    let t = tenant("t1");
    let u = user("u1");
    add_filler(&*repo, &t, &u).await;
    repo.add(
        &memory(&t, &u, "the NEAR term and OR operator are words here"),
        None,
    )
    .await
    .unwrap();
    for text in [
        r#"near( "OR" * -operator : {col} ^term AND NOT"#,
        "'; DROP TABLE memories; --",
        "operator:* & | ! <-> (",
    ] {
        let hits = repo.search_text(&t, &u, &q(text), &[], 10).await;
        assert!(hits.is_ok(), "{text}: {hits:?}");
    }
    let hits = repo
        .search_text(&t, &u, &q("\"operator\"*"), &[], 10)
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
}

async fn the_index_follows_updates_and_deletes(repo: Arc<dyn MemoryRepository>) {
    let t = tenant("t1");
    let u = user("u1");
    add_filler(&*repo, &t, &u).await;
    let id = repo
        .add(&memory(&t, &u, "favourite colour is teal"), None)
        .await
        .unwrap()
        .id;
    let change = MemoryChange {
        content: Some("favourite colour is orange".into()),
        ..MemoryChange::at(Timestamp(2_000))
    };
    repo.update(&t, std::slice::from_ref(&u), &id, &change, None)
        .await
        .unwrap()
        .unwrap();
    assert!(
        repo.search_text(&t, &u, &q("teal"), &[], 10)
            .await
            .unwrap()
            .is_empty()
    );
    let hits = repo
        .search_text(&t, &u, &q("orange"), &[], 10)
        .await
        .unwrap();
    assert_eq!(contents(&hits), ["favourite colour is orange"]);
    repo.delete(&t, std::slice::from_ref(&u), &id, None)
        .await
        .unwrap();
    assert!(
        repo.search_text(&t, &u, &q("orange"), &[], 10)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn the_scan_returns_embedded_memories_newest_first(repo: Arc<dyn MemoryRepository>) {
    let t = tenant("t1");
    let u = user("u1");
    for (i, text) in ["one", "two", "three", "four"].into_iter().enumerate() {
        let mut new = memory(&t, &u, text);
        new.at = Timestamp(1_000 + i as i64);
        new.embedding = (text != "three").then(|| vec![i as f32, 1.0]);
        new.tags = if i % 2 == 0 {
            vec!["even".into()]
        } else {
            Vec::new()
        };
        repo.add(&new, None).await.unwrap();
    }
    let mut other = memory(&t, &user("u2"), "someone else's");
    other.embedding = Some(vec![1.0, 1.0]);
    repo.add(&other, None).await.unwrap();

    let names = |records: Vec<crate::store::memories::MemoryRecord>| -> Vec<String> {
        records.into_iter().map(|r| r.content).collect()
    };
    let all = repo.scan_with_embeddings(&t, &u, &[], 10).await.unwrap();
    assert_eq!(names(all), ["four", "two", "one"]);
    let capped = repo.scan_with_embeddings(&t, &u, &[], 2).await.unwrap();
    assert_eq!(names(capped), ["four", "two"]);
    let even = repo
        .scan_with_embeddings(&t, &u, &["even".into()], 10)
        .await
        .unwrap();
    assert_eq!(names(even), ["one"]);
}
