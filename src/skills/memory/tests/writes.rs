//! Writing through the engine: governance before anything is stored, feedback
//! arithmetic, isolation between users and tenants, updates and deletes.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::skills::memory::{FeedbackKind, MemoryFeedback, UpdateMemory};
use crate::store::memories::testing::on_both_memory_backends;
use crate::store::memories::{MemoryLayer, MemoryRepository};

use ScopeField::*;

on_both_memory_backends!(
    governance_blocks_writes_before_they_are_stored,
    feedback_moves_importance_by_a_quarter_of_the_reward,
    users_and_tenants_never_see_each_other,
    updates_and_deletes_reach_only_existing_memories,
);

async fn governance_blocks_writes_before_they_are_stored(repo: Arc<dyn MemoryRepository>) {
    let validator = Arc::new(KeywordValidator::default());
    let engine = MemoryEngine::new(repo, settings(), Some(validator.clone())).unwrap();
    let t = tenant("t1");
    let p1 = ids(&[(ProjectId, "p1"), (TeamId, "tm1"), (UserId, "u1")]);

    let blocked = engine
        .add(
            &t,
            add(MemoryLayer::Project, "the db password is hunter2", &p1),
            None,
        )
        .await;
    let Err(SkillError::Blocked { message, report }) = blocked else {
        panic!("expected Blocked, got {blocked:?}");
    };
    assert!(
        message.contains("memories must not contain passwords"),
        "{message}"
    );
    assert_eq!(report["passed"], json!(false));
    assert_eq!(report["counts"]["block"], json!(1));
    assert_eq!(report["violations"][0]["ruleId"], json!("no-secrets"));
    assert!(
        engine
            .search(&t, search("password hunter2", &p1))
            .await
            .unwrap()
            .hits
            .is_empty()
    );

    let (tenant_seen, scope_seen, content_seen) = validator.calls.lock().unwrap()[0].clone();
    assert_eq!(tenant_seen, "t1");
    assert_eq!(scope_seen.project_id.as_deref(), Some("p1"));
    assert_eq!(scope_seen.team_id.as_deref(), Some("tm1"));
    assert_eq!(scope_seen.company_id, None);
    assert_eq!(content_seen.as_deref(), Some("the db password is hunter2"));

    // Warnings do not block.
    let kept = engine
        .add(&t, add(MemoryLayer::Project, "maybe use tabs", &p1), None)
        .await
        .unwrap();
    let update = UpdateMemory {
        memory_id: kept.id.clone(),
        content: Some("tabs, and the password is hunter2".into()),
        tags: None,
        metadata: None,
        ids: p1.clone(),
    };
    assert!(matches!(
        engine.update(&t, update, None).await,
        Err(SkillError::Blocked { .. })
    ));
    let stored = engine.get(&t, reference(&kept.id, &p1)).await.unwrap();
    assert_eq!(stored.content, "maybe use tabs");
}

async fn feedback_moves_importance_by_a_quarter_of_the_reward(repo: Arc<dyn MemoryRepository>) {
    let engine = engine(repo);
    let t = tenant("t1");
    let u1 = ids(&[(UserId, "u1")]);
    let id = engine
        .add(&t, add(MemoryLayer::User, "likes jazz", &u1), None)
        .await
        .unwrap()
        .id;
    let feedback = |reward: f64, who: &ScopeIds| MemoryFeedback {
        memory_id: id.clone(),
        reward,
        kind: FeedbackKind::Helpful,
        reasoning: Some("it was used".into()),
        ids: who.clone(),
    };
    for (reward, expected) in [(1.0, 0.75), (1.0, 1.0), (-0.5, 0.875), (-1.0, 0.625)] {
        assert_eq!(
            engine
                .feedback(&t, feedback(reward, &u1), None)
                .await
                .unwrap(),
            expected
        );
    }
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.5, -1.01] {
        invalid_naming(
            engine.feedback(&t, feedback(bad, &u1), None).await,
            "reward",
        );
    }
    let stored = engine.get(&t, reference(&id, &u1)).await.unwrap();
    assert_eq!(stored.importance, 0.625, "refused feedback changed nothing");
    let stranger = ids(&[(UserId, "u2")]);
    assert!(matches!(
        engine.feedback(&t, feedback(1.0, &stranger), None).await,
        Err(SkillError::NotFound(_))
    ));
}

async fn users_and_tenants_never_see_each_other(repo: Arc<dyn MemoryRepository>) {
    let engine = engine(repo);
    let (t1, t2) = (tenant("t1"), tenant("t2"));
    let u1 = ids(&[(UserId, "u1"), (SessionId, "s1")]);
    let u2 = ids(&[(UserId, "u2"), (SessionId, "s1")]);
    let mut own = Vec::new();
    for (t, who) in [(&t1, &u1), (&t1, &u2), (&t2, &u1)] {
        let user = engine
            .add(t, add(MemoryLayer::User, "my secret plan", who), None)
            .await
            .unwrap();
        let session = engine
            .add(t, add(MemoryLayer::Session, "secret plan today", who), None)
            .await;
        own.push((t, who, [user.id, session.unwrap().id]));
    }
    for (t, who, mine) in &own {
        let found = engine.search(t, search("secret plan", who)).await.unwrap();
        let found: Vec<&str> = found.hits.iter().map(|h| h.memory.id.as_str()).collect();
        assert_eq!(found, [mine[0].as_str(), mine[1].as_str()]);
        for (_, _, theirs) in own.iter().filter(|o| o.2 != *mine) {
            for id in theirs {
                assert!(matches!(
                    engine.get(t, reference(id, who)).await,
                    Err(SkillError::NotFound(_))
                ));
            }
        }
    }
}

async fn updates_and_deletes_reach_only_existing_memories(repo: Arc<dyn MemoryRepository>) {
    let engine = engine(repo);
    let t = tenant("t1");
    let u1 = ids(&[(UserId, "u1")]);
    let first = engine
        .add(&t, add(MemoryLayer::User, "first", &u1), None)
        .await
        .unwrap();
    let second = engine
        .add(&t, add(MemoryLayer::User, "second", &u1), None)
        .await
        .unwrap();
    let update = |content: Option<&str>, tags: Option<Vec<String>>| UpdateMemory {
        memory_id: second.id.clone(),
        content: content.map(str::to_owned),
        tags,
        metadata: None,
        ids: u1.clone(),
    };
    invalid_naming(engine.update(&t, update(None, None), None).await, "content");
    invalid_naming(
        engine.update(&t, update(Some("first"), None), None).await,
        "content",
    );
    let tagged = engine
        .update(&t, update(None, Some(vec![" b ".into(), "a".into()])), None)
        .await;
    assert_eq!(tagged.unwrap().tags, ["b", "a"]);

    engine
        .delete(&t, reference(&first.id, &u1), None)
        .await
        .unwrap();
    assert!(matches!(
        engine.delete(&t, reference(&first.id, &u1), None).await,
        Err(SkillError::NotFound(_))
    ));
    assert!(matches!(
        engine.get(&t, reference(&first.id, &u1)).await,
        Err(SkillError::NotFound(_))
    ));
    let renamed = engine
        .update(&t, update(Some("first"), None), None)
        .await
        .unwrap();
    assert_eq!(
        renamed.content, "first",
        "the old owner of that content is gone"
    );
    invalid_naming(engine.get(&t, reference("", &u1)).await, "memoryId");
}
