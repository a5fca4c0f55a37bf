//! The operators' census: active threads and tasks by state, across tenants.

use std::sync::Arc;

use super::*;
use crate::store::{Census, Store, ThreadStatus, WriteOp};

on_both_backends!(an_empty_store_counts_nothing, census_counts_across_tenants);

async fn an_empty_store_counts_nothing(store: Arc<dyn Store>) {
    assert_eq!(store.census(Timestamp(1)).await, Ok(Census::default()));
}

/// SQLite counts in steps, each its own read; any step size gives the one count.
#[tokio::test]
async fn sqlite_counts_alike_in_steps_of_any_size() {
    let db = crate::store::testing::SqliteTestStore::open().await;
    let a = tenant("acme");
    let mut ops = Vec::new();
    for i in 0..7 {
        let ctx = context(&format!("c{i}"));
        let mut thread = thread(&a, &ctx, 100);
        if i == 3 {
            thread.status = ThreadStatus::Expired;
        }
        ops.push(WriteOp::UpsertThread(thread));
        let state = [TaskState::Working, TaskState::Completed, TaskState::Failed][i % 3];
        ops.push(WriteOp::UpsertTask(
            task(&a, &ctx, &format!("t{i}"), state, 10).into(),
        ));
    }
    db.store.commit(&ops).await.unwrap();
    let whole = db.store.census(Timestamp(1_000)).await.unwrap();
    assert_eq!(whole.active_threads, 6, "{whole:?}");
    assert_eq!(
        whole.tasks_by_state,
        vec![
            ("completed".to_owned(), 2),
            ("failed".to_owned(), 2),
            ("working".to_owned(), 3)
        ]
    );
    for step in [1, 2, 3, 6, 7, 100] {
        let counted =
            crate::store::sqlite::census_in_steps(&db.path(), Timestamp(1_000), step).unwrap();
        assert_eq!(counted, whole, "steps of {step}");
    }
}

async fn census_counts_across_tenants(store: Arc<dyn Store>) {
    let (a, b) = (tenant("acme"), tenant("globex"));
    let live = thread(&a, &context("a-live"), 100);
    let mut expired = thread(&a, &context("a-expired"), 100);
    expired.status = ThreadStatus::Expired;
    // Still marked active, but its expiry is behind `now`: it cannot be continued.
    let mut overdue = thread(&b, &context("b-overdue"), 100);
    overdue.expires_at = Timestamp(500);
    let other_live = thread(&b, &context("b-live"), 100);
    let ctx = context("a-live");
    let ops = vec![
        WriteOp::UpsertThread(live),
        WriteOp::UpsertThread(expired),
        WriteOp::UpsertThread(overdue),
        WriteOp::UpsertThread(other_live),
        WriteOp::UpsertTask(task(&a, &ctx, "t1", TaskState::Working, 10).into()),
        WriteOp::UpsertTask(task(&a, &ctx, "t2", TaskState::Completed, 11).into()),
        WriteOp::UpsertTask(task(&a, &ctx, "t3", TaskState::Completed, 12).into()),
        WriteOp::UpsertTask(task(&b, &context("b-live"), "t1", TaskState::Working, 13).into()),
    ];
    store.commit(&ops).await.unwrap();

    let census = store.census(Timestamp(1_000)).await.unwrap();
    assert_eq!(census.active_threads, 2, "{census:?}");
    assert_eq!(
        census.tasks_by_state,
        vec![("completed".to_owned(), 2), ("working".to_owned(), 2)]
    );
}
