//! Adding, reading, updating and deleting one memory; duplicates; importance.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::store::StoreError;
use crate::store::memories::testing::on_both_memory_backends;
use crate::store::memories::{MemoryChange, MemoryRepository, content_hash};

on_both_memory_backends!(
    a_memory_is_added_read_updated_and_deleted,
    duplicates_are_detected_per_tenant_and_scope,
    updating_onto_existing_content_conflicts,
    new_content_replaces_the_embedding,
    importance_moves_within_bounds,
);

async fn a_memory_is_added_read_updated_and_deleted(repo: Arc<dyn MemoryRepository>) {
    let t = tenant("t1");
    let u = user("u1");
    let mut new = memory(&t, &u, "Prefers dark roast coffee ☕");
    new.tags = vec!["taste".into(), "coffee".into()];
    new.metadata = metadata(json!({"source": "chat", "n": 1}));
    let added = repo.add(&new, None).await.unwrap();
    assert!(!added.duplicate);
    assert!(uuid::Uuid::parse_str(&added.id).is_ok_and(|id| id.get_version_num() == 7));

    let stored = repo
        .get(&t, std::slice::from_ref(&u), &added.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.id, added.id);
    assert_eq!(stored.tenant, t);
    assert_eq!(stored.scope, u);
    assert_eq!(stored.content, new.content);
    assert_eq!(stored.content_hash, content_hash(&new.content));
    assert_eq!(stored.tags, new.tags);
    assert_eq!(stored.metadata, new.metadata);
    assert_eq!(stored.importance, 0.5);
    assert_eq!(stored.embedding, None);
    assert_eq!(
        (stored.created_at, stored.updated_at),
        (Timestamp(1_000), Timestamp(1_000))
    );

    let change = MemoryChange {
        content: Some("Prefers green tea".into()),
        tags: Some(vec!["tea".into()]),
        ..MemoryChange::at(Timestamp(2_000))
    };
    let updated = repo
        .update(&t, std::slice::from_ref(&u), &added.id, &change, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(updated.content, "Prefers green tea");
    assert_eq!(updated.content_hash, content_hash("Prefers green tea"));
    assert_eq!(updated.tags, ["tea"]);
    assert_eq!(
        updated.metadata, new.metadata,
        "metadata was not part of the change"
    );
    assert_eq!(
        (updated.created_at, updated.updated_at),
        (Timestamp(1_000), Timestamp(2_000))
    );
    assert_eq!(
        repo.get(&t, std::slice::from_ref(&u), &added.id)
            .await
            .unwrap(),
        Some(updated)
    );

    let only_metadata = MemoryChange {
        metadata: Some(metadata(json!({"source": "review"}))),
        ..MemoryChange::at(Timestamp(3_000))
    };
    let updated = repo
        .update(
            &t,
            std::slice::from_ref(&u),
            &added.id,
            &only_metadata,
            None,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(updated.content, "Prefers green tea");
    assert_eq!(updated.metadata, metadata(json!({"source": "review"})));

    assert!(
        repo.delete(&t, std::slice::from_ref(&u), &added.id, None)
            .await
            .unwrap()
    );
    assert_eq!(
        repo.get(&t, std::slice::from_ref(&u), &added.id)
            .await
            .unwrap(),
        None
    );
    assert!(
        !repo
            .delete(&t, std::slice::from_ref(&u), &added.id, None)
            .await
            .unwrap()
    );
    assert_eq!(
        repo.update(&t, std::slice::from_ref(&u), &added.id, &change, None)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        repo.adjust_importance(&t, &[u], &added.id, 0.1, None)
            .await
            .unwrap(),
        None
    );
}

async fn duplicates_are_detected_per_tenant_and_scope(repo: Arc<dyn MemoryRepository>) {
    let t1 = tenant("t1");
    let first = repo
        .add(&memory(&t1, &user("u1"), "likes jazz"), None)
        .await
        .unwrap();
    let again = repo
        .add(&memory(&t1, &user("u1"), "likes jazz"), None)
        .await
        .unwrap();
    assert_eq!(
        (again.id.as_str(), again.duplicate),
        (first.id.as_str(), true)
    );

    // The same text elsewhere is another memory: another user, another layer with the
    // same user id, another tenant; and different text in the same scope.
    let session = scope(
        MemoryLayer::Session,
        &[(ScopeField::UserId, "u1"), (ScopeField::SessionId, "s1")],
    );
    for other in [
        memory(&t1, &user("u2"), "likes jazz"),
        memory(&t1, &session, "likes jazz"),
        memory(&tenant("t2"), &user("u1"), "likes jazz"),
        memory(&t1, &user("u1"), "likes jazz "),
    ] {
        let added = repo.add(&other, None).await.unwrap();
        assert!(!added.duplicate, "{other:?}");
        assert_ne!(added.id, first.id);
    }
}

async fn updating_onto_existing_content_conflicts(repo: Arc<dyn MemoryRepository>) {
    let t = tenant("t1");
    let u = user("u1");
    repo.add(&memory(&t, &u, "first"), None).await.unwrap();
    let second = repo.add(&memory(&t, &u, "second"), None).await.unwrap();
    let change = MemoryChange {
        content: Some("first".into()),
        ..MemoryChange::at(Timestamp(5_000))
    };
    let clash = repo
        .update(&t, std::slice::from_ref(&u), &second.id, &change, None)
        .await;
    assert!(matches!(clash, Err(StoreError::Conflict(_))), "{clash:?}");
    let unchanged = repo.get(&t, &[u], &second.id).await.unwrap().unwrap();
    assert_eq!(
        (unchanged.content.as_str(), unchanged.updated_at),
        ("second", Timestamp(1_000))
    );
}

async fn new_content_replaces_the_embedding(repo: Arc<dyn MemoryRepository>) {
    let t = tenant("t1");
    let u = user("u1");
    let mut new = memory(&t, &u, "sails on weekends");
    new.embedding = Some(vec![0.25, -1.5, 3.0]);
    let id = repo.add(&new, None).await.unwrap().id;
    let stored = repo
        .get(&t, std::slice::from_ref(&u), &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.embedding, Some(vec![0.25, -1.5, 3.0]));

    let tags_only = MemoryChange {
        tags: Some(vec!["hobby".into()]),
        embedding: Some(vec![9.0]),
        ..MemoryChange::at(Timestamp(2_000))
    };
    let kept = repo
        .update(&t, std::slice::from_ref(&u), &id, &tags_only, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        kept.embedding,
        Some(vec![0.25, -1.5, 3.0]),
        "content unchanged: kept"
    );

    let new_content = MemoryChange {
        content: Some("sails every day".into()),
        ..MemoryChange::at(Timestamp(3_000))
    };
    let cleared = repo
        .update(&t, std::slice::from_ref(&u), &id, &new_content, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        cleared.embedding, None,
        "the old vector described the old text"
    );

    let mut bad = memory(&t, &u, "nan vector");
    bad.embedding = Some(vec![1.0, f32::NAN]);
    assert!(matches!(
        repo.add(&bad, None).await,
        Err(StoreError::Query(_))
    ));
}

async fn importance_moves_within_bounds(repo: Arc<dyn MemoryRepository>) {
    let t = tenant("t1");
    let u = user("u1");
    let id = repo
        .add(&memory(&t, &u, "importance"), None)
        .await
        .unwrap()
        .id;
    let adjust = |delta| {
        let (repo, t, u, id) = (repo.clone(), t.clone(), u.clone(), id.clone());
        async move { repo.adjust_importance(&t, &[u], &id, delta, None).await }
    };
    assert_eq!(adjust(0.25).await.unwrap(), Some(0.75));
    assert_eq!(adjust(1.0).await.unwrap(), Some(1.0));
    assert_eq!(adjust(-0.125).await.unwrap(), Some(0.875));
    assert_eq!(adjust(-5.0).await.unwrap(), Some(0.0));
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        assert!(matches!(adjust(bad).await, Err(StoreError::Query(_))));
    }
    let stored = repo
        .get(&t, std::slice::from_ref(&u), &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.importance, 0.0);
    assert_eq!(
        stored.updated_at,
        Timestamp(1_000),
        "feedback is not an edit"
    );

    let mut out_of_range = memory(&t, &u, "too important");
    out_of_range.importance = 1.5;
    assert!(matches!(
        repo.add(&out_of_range, None).await,
        Err(StoreError::Query(_))
    ));
}
