//! Cluster mode (Postgres): the memory skill's writes under a turn's hold on its thread
//! commit only while this node holds the token the turn was placed under and no other
//! node owns the thread; otherwise they are refused (`Fenced`) and write nothing. The
//! check the knowledge skill makes before its git commits asks the same.

use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::*;
use crate::domain::ContextId;
use crate::store::StoreError;
use crate::store::fence::{Fence, ThreadHold};
use crate::store::memories::HoldCheck;
use crate::store::memories::MemoryChange;
use crate::store::testing::PgTestDb;

#[derive(diesel::QueryableByName)]
struct Content {
    #[diesel(sql_type = diesel::sql_types::Text)]
    content: String,
}

/// Every stored memory's content, in order.
async fn contents(conn: &mut AsyncPgConnection) -> Vec<String> {
    diesel::sql_query("SELECT content FROM memories ORDER BY content")
        .load::<Content>(conn)
        .await
        .unwrap()
        .into_iter()
        .map(|row| row.content)
        .collect()
}

fn fenced<T: std::fmt::Debug>(result: Result<T, StoreError>, what: &str) {
    assert!(
        matches!(result, Err(StoreError::Fenced)),
        "{what}: {result:?}"
    );
}

#[tokio::test]
async fn writes_under_a_hold_commit_only_while_the_node_holds_the_thread() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let mut config = db.config.clone();
    let to_migrate = config.clone();
    tokio::task::spawn_blocking(move || crate::store::migrate(&to_migrate))
        .await
        .unwrap()
        .unwrap();
    config.fence = Some((Fence::new("node-a"), Duration::from_secs(10)));
    let repo = crate::store::memories::open(&config).unwrap();
    let url = config.database_url.clone().unwrap();
    let mut admin = AsyncPgConnection::establish(&url).await.unwrap();
    diesel::sql_query(
        "INSERT INTO cluster_nodes (node_id, token, url, started_at, expires_at) VALUES \
         ('node-a', 7, 'http://a', 0, 0), ('node-b', 3, 'http://b', 0, 0)",
    )
    .execute(&mut admin)
    .await
    .unwrap();
    diesel::sql_query(
        "INSERT INTO threads (tenant_id, thread_id, created_at, updated_at, expires_at, \
         status, conversation_context, owner_node) VALUES \
         ('t1', 'ours', 0, 0, 0, 'active', '{}', 'node-a'), \
         ('t1', 'theirs', 0, 0, 0, 'active', '{}', 'node-b')",
    )
    .execute(&mut admin)
    .await
    .unwrap();
    let (t, u) = (tenant("t1"), user("u1"));
    let ours = ContextId::parse("ours").unwrap();
    let theirs = ContextId::parse("theirs").unwrap();
    let unstored = ContextId::parse("not-stored-yet").unwrap();
    let hold = |thread, token| Some(ThreadHold { thread, token });

    // The node's token, on its own thread or on one no node has stored yet.
    let kept = repo
        .add(&memory(&t, &u, "kept"), hold(&ours, 7))
        .await
        .unwrap();
    assert!(!kept.duplicate);
    repo.add(&memory(&t, &u, "on a new thread"), hold(&unstored, 7))
        .await
        .unwrap();
    // An operator's write (no turn, no hold) is not checked.
    repo.add(&memory(&t, &u, "by hand"), None).await.unwrap();

    // The token moved (a takeover raised it): nothing is written.
    fenced(
        repo.add(&memory(&t, &u, "stale"), hold(&ours, 6)).await,
        "add, moved token",
    );
    // Another node's thread: nothing is written.
    fenced(
        repo.add(&memory(&t, &u, "theirs"), hold(&theirs, 7)).await,
        "add, another node's thread",
    );
    let scopes = std::slice::from_ref(&u);
    let change = MemoryChange {
        content: Some("changed".into()),
        ..MemoryChange::at(Timestamp(2_000))
    };
    fenced(
        repo.update(&t, scopes, &kept.id, &change, hold(&ours, 6))
            .await,
        "update, moved token",
    );
    fenced(
        repo.adjust_importance(&t, scopes, &kept.id, 0.3, hold(&ours, 6))
            .await,
        "feedback, moved token",
    );
    fenced(
        repo.delete(&t, scopes, &kept.id, hold(&theirs, 7)).await,
        "delete, another node's thread",
    );
    let stored = repo.get(&t, scopes, &kept.id).await.unwrap().unwrap();
    assert_eq!((stored.content.as_str(), stored.importance), ("kept", 0.5));
    assert_eq!(
        contents(&mut admin).await,
        ["by hand", "kept", "on a new thread"]
    );

    // Under the current token the same writes go through.
    let updated = repo
        .update(&t, scopes, &kept.id, &change, hold(&ours, 7))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(updated.content, "changed");
    let importance = repo
        .adjust_importance(&t, scopes, &kept.id, 0.3, hold(&ours, 7))
        .await
        .unwrap();
    assert_eq!(importance, Some(0.8));
    assert!(
        repo.delete(&t, scopes, &kept.id, hold(&ours, 7))
            .await
            .unwrap()
    );
    assert_eq!(contents(&mut admin).await, ["by hand", "on a new thread"]);

    // What the knowledge skill asks before its git commits: the same two conditions.
    let check = HoldCheck::open(&config).unwrap().unwrap();
    check
        .check(
            &t,
            ThreadHold {
                thread: &ours,
                token: 7,
            },
        )
        .await
        .unwrap();
    check
        .check(
            &t,
            ThreadHold {
                thread: &unstored,
                token: 7,
            },
        )
        .await
        .unwrap();
    fenced(
        check
            .check(
                &t,
                ThreadHold {
                    thread: &ours,
                    token: 6,
                },
            )
            .await,
        "check, moved token",
    );
    fenced(
        check
            .check(
                &t,
                ThreadHold {
                    thread: &theirs,
                    token: 7,
                },
            )
            .await,
        "check, another node's thread",
    );
    // Without cluster mode there is nothing to check.
    assert!(HoldCheck::open(&db.config).unwrap().is_none());
}
