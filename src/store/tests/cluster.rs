//! Cluster mode in the Postgres store: every commit of a node checks its fencing token,
//! and a thread another node owns is not written over.

use std::sync::Arc;
use std::time::Duration;

use super::{context, message, record, tenant, thread};
use crate::domain::Role;
use crate::store::cluster::{self, Joined, Ownership};
use crate::store::fence::Fence;
use crate::store::testing::PgTestDb;
use crate::store::{Store, StoreError, WriteOp, open};

/// A store of node `id` on `db`, joined (its token set).
pub(super) async fn node(
    db: &PgTestDb,
    id: &str,
) -> (Arc<dyn Store>, Arc<Fence>, tokio_postgres::Client) {
    let fence = Fence::new(id);
    let mut config = db.config.clone();
    config.fence = Some((fence.clone(), Duration::from_secs(10)));
    let store = open(&config).await.unwrap();
    let url = config.database_url.clone().unwrap();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let Joined::Token(token) = cluster::join(&client, id, "http://127.0.0.1:1", 10_000)
        .await
        .unwrap()
    else {
        panic!("{id} joins");
    };
    fence.set_token(token);
    (store, fence, client)
}

#[tokio::test]
async fn a_commit_under_a_moved_token_writes_nothing() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (store, fence, client) = node(&db, "a").await;
    let acme = tenant("acme");
    let batch = |id: &str, token: i64| {
        vec![
            WriteOp::Fence(token),
            WriteOp::UpsertThread(thread(&acme, &context(id), 1)),
        ]
    };
    // Message 1 of t-1, as a stale writer would write it again after the new owner did.
    let first = record(&acme, 1, &message(&context("t-1"), None, Role::User, "hi"));
    let mut written = batch("t-1", fence.token());
    written.push(WriteOp::AppendMessage(first.clone()));
    store.commit(&written).await.unwrap();
    // Another node fences this one, as a takeover does.
    client
        .execute(
            "UPDATE cluster_nodes SET token = token + 1 WHERE node_id = 'a'",
            &[],
        )
        .await
        .unwrap();
    let refused = store.commit(&batch("t-2", fence.token())).await;
    assert_eq!(refused, Err(StoreError::Fenced));
    assert!(fence.is_lost(), "the node learns that its lease moved");
    // Its rows colliding with what is stored does not hide that it was fenced.
    let mut colliding = batch("t-1", fence.token());
    colliding.push(WriteOp::AppendMessage(first));
    assert_eq!(store.commit(&colliding).await, Err(StoreError::Fenced));
    let stored = store.load_thread(&acme, &context("t-2"), 10).await.unwrap();
    assert!(stored.is_none(), "nothing of the refused batch is stored");
    // A batch under an older token is refused too, and says nothing of the current one.
    let current: i64 = client
        .query_one("SELECT token FROM cluster_nodes WHERE node_id = 'a'", &[])
        .await
        .unwrap()
        .get(0);
    fence.set_token(current);
    assert_eq!(
        store.commit(&batch("t-3", current - 1)).await,
        Err(StoreError::Fenced)
    );
    assert!(!fence.is_lost());
    store.commit(&batch("t-3", current)).await.unwrap();
}

#[tokio::test]
async fn a_thread_another_node_owns_is_not_written_over() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (a, fence_a, client) = node(&db, "a").await;
    let (b, fence_b, _) = node(&db, "b").await;
    let acme = tenant("acme");
    let id = context("shared");
    let mut first = thread(&acme, &id, 1);
    first.conversation_context = serde_json::json!({"by": "a"});
    a.commit(&[
        WriteOp::Fence(fence_a.token()),
        WriteOp::UpsertThread(first),
    ])
    .await
    .unwrap();
    let owner = cluster::ownership(&client, "acme", "shared").await.unwrap();
    assert!(
        matches!(&owner, Ownership::Owned(o) if o.node_id == "a"),
        "{owner:?}"
    );
    // B created the same thread at the same time (a client's own contextId on two nodes).
    let mut second = thread(&acme, &id, 2);
    second.conversation_context = serde_json::json!({"by": "b"});
    let refused = b
        .commit(&[
            WriteOp::Fence(fence_b.token()),
            WriteOp::UpsertThread(second),
        ])
        .await;
    assert_eq!(refused, Err(StoreError::Fenced));
    assert!(!fence_b.is_lost(), "one thread, not B's lease");
    // So did B when its load found no thread, and it wrote the thread's first row.
    let mut third = thread(&acme, &id, 3);
    third.conversation_context = serde_json::json!({"by": "b"});
    let refused = b
        .commit(&[
            WriteOp::Fence(fence_b.token()),
            WriteOp::InsertThread(third),
        ])
        .await;
    assert_eq!(refused, Err(StoreError::Fenced));
    assert!(!fence_b.is_lost(), "one thread, not B's lease");
    let stored = a.load_thread(&acme, &id, 10).await.unwrap().unwrap();
    assert_eq!(stored.thread.conversation_context["by"], "a");
    // A thread not in the store has no owner yet: whoever writes it first owns it.
    assert_eq!(
        cluster::ownership(&client, "acme", "nobody").await.unwrap(),
        Ownership::NoThread
    );
}
