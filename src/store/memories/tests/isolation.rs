//! The isolation matrix: two tenants, each with memories of two users, three sessions
//! (two of them sharing a session id across users), two projects and an agent working
//! for each user. Every scope sees exactly its own memory — by search, get, update,
//! delete and feedback — and nothing of any other scope or tenant.

use std::sync::Arc;

use super::*;
use crate::store::memories::testing::on_both_memory_backends;
use crate::store::memories::{MemoryChange, MemoryRepository, TextQuery};

on_both_memory_backends!(every_scope_sees_only_its_own_memories);

fn scopes() -> Vec<(&'static str, MemoryScope)> {
    use MemoryLayer::*;
    use ScopeField::*;
    vec![
        ("user u1", scope(User, &[(UserId, "u1")])),
        ("user u2", scope(User, &[(UserId, "u2")])),
        (
            "session u1/s1",
            scope(Session, &[(UserId, "u1"), (SessionId, "s1")]),
        ),
        (
            "session u1/s2",
            scope(Session, &[(UserId, "u1"), (SessionId, "s2")]),
        ),
        (
            "session u2/s1",
            scope(Session, &[(UserId, "u2"), (SessionId, "s1")]),
        ),
        ("project p1", scope(Project, &[(ProjectId, "p1")])),
        ("project p2", scope(Project, &[(ProjectId, "p2")])),
        (
            "agent a1/u1",
            scope(Agent, &[(AgentId, "a1"), (UserId, "u1")]),
        ),
        (
            "agent a1/u2",
            scope(Agent, &[(AgentId, "a1"), (UserId, "u2")]),
        ),
    ]
}

async fn every_scope_sees_only_its_own_memories(repo: Arc<dyn MemoryRepository>) {
    let tenants = [tenant("tenant-a"), tenant("tenant-b")];
    let mut owned = Vec::new();
    for t in &tenants {
        for (label, s) in scopes() {
            let content = format!("secret of {} {label}", t.as_str());
            let id = repo.add(&memory(t, &s, &content), None).await.unwrap().id;
            owned.push((t.clone(), s, content, id));
        }
    }
    let query = TextQuery::parse("secret").unwrap();
    let change = MemoryChange {
        content: Some("overwritten".into()),
        ..MemoryChange::at(Timestamp(9_000))
    };

    for (reader_tenant, reader_scope, own_content, own_id) in &owned {
        let reader = std::slice::from_ref(reader_scope);
        let hits = repo
            .search_text(reader_tenant, reader_scope, &query, &[], 100)
            .await
            .unwrap();
        let found: Vec<&str> = hits.iter().map(|h| h.memory.content.as_str()).collect();
        assert_eq!(
            found,
            [own_content.as_str()],
            "{reader_tenant:?} {reader_scope:?}"
        );
        let scanned = repo
            .scan_with_embeddings(reader_tenant, reader_scope, &[], 100)
            .await;
        assert!(scanned.unwrap().is_empty());
        let mine = repo.get(reader_tenant, reader, own_id).await.unwrap();
        assert_eq!(
            mine.map(|m| m.content).as_deref(),
            Some(own_content.as_str())
        );

        for (_, _, other_content, other_id) in owned.iter().filter(|o| &o.3 != own_id) {
            let why = format!("{reader_tenant:?} {reader_scope:?} must not reach {other_content}");
            assert_eq!(
                repo.get(reader_tenant, reader, other_id).await.unwrap(),
                None,
                "{why}"
            );
            assert_eq!(
                repo.update(reader_tenant, reader, other_id, &change, None)
                    .await
                    .unwrap(),
                None,
                "{why}"
            );
            assert!(
                !repo
                    .delete(reader_tenant, reader, other_id, None)
                    .await
                    .unwrap(),
                "{why}"
            );
            assert_eq!(
                repo.adjust_importance(reader_tenant, reader, other_id, 0.5, None)
                    .await
                    .unwrap(),
                None,
                "{why}"
            );
        }
    }

    // Nothing was changed by any of the refused calls.
    for (t, s, content, id) in &owned {
        let stored = repo
            .get(t, std::slice::from_ref(s), id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((&stored.content, stored.importance), (content, 0.5));
    }
    // No scopes reach nothing.
    let (t, _, _, id) = &owned[0];
    assert_eq!(repo.get(t, &[], id).await.unwrap(), None);
}
