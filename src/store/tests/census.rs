//! The operators' census: active threads and tasks by state, across tenants.

use std::sync::Arc;

use super::*;
use crate::store::{Census, Store, ThreadStatus, WriteOp};

on_both_backends!(an_empty_store_counts_nothing, census_counts_across_tenants);

async fn an_empty_store_counts_nothing(store: Arc<dyn Store>) {
    assert_eq!(store.census(Timestamp(1)).await, Ok(Census::default()));
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
