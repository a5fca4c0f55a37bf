//! The hold a server keeps on its Postgres database (`node_lock.rs`): refused to a
//! server of the other kind, shared within the process, and taken again when its
//! session is lost while the server runs.

use std::time::Duration;

use crate::store::StoreError;
use crate::store::node_lock::{self, Hold};
use crate::store::testing::PgTestDb;

/// The sessions holding the node lock on the test database: (pid, mode).
async fn holders(client: &tokio_postgres::Client) -> Vec<(i32, String)> {
    client
        .query(
            "SELECT l.pid, l.mode FROM pg_locks l \
             WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
               AND l.classid = (x'6132615f'::bigint)::oid AND l.objid = (x'6e6f6465'::bigint)::oid \
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             ORDER BY l.pid",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[tokio::test]
async fn a_lost_hold_is_taken_again_and_the_other_kind_is_refused_meanwhile() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let url = db.config.database_url.clone().unwrap();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);

    let held = node_lock::take(&url, Hold::Alone, Duration::ZERO)
        .await
        .unwrap();
    // The same process opening the database again shares the hold.
    let again = node_lock::take(&url, Hold::Alone, Duration::ZERO)
        .await
        .unwrap();
    let first = holders(&client).await;
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0].1, "ExclusiveLock");
    // A cluster node in this process cannot join it.
    assert!(matches!(
        node_lock::take(&url, Hold::Shared, Duration::ZERO).await,
        Err(StoreError::Config(_))
    ));

    // The database ends the hold's session (a restart, a failover): the server takes
    // the lock again on a new session.
    client
        .execute("SELECT pg_terminate_backend($1)", &[&first[0].0])
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let retaken = loop {
        let now = holders(&client).await;
        if now.len() == 1 && now[0].0 != first[0].0 {
            break now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the hold was not taken again: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(retaken[0].1, "ExclusiveLock");

    // Released with the last opening in the process.
    drop(held);
    assert_eq!(
        holders(&client).await.len(),
        1,
        "another opening still holds it"
    );
    drop(again);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !holders(&client).await.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the hold outlived the process's openings"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
