//! The operators' census: active threads and tasks by state, across tenants.

use std::sync::Arc;

use super::*;
use crate::store::{Census, Store, ThreadStatus, WriteOp};

on_both_backends!(
    an_empty_store_counts_nothing,
    census_counts_across_tenants,
    the_census_follows_every_change_of_the_rows,
    every_state_is_counted
);

/// A task in each state counts once in it (SQLite keeps a row for every state).
async fn every_state_is_counted(store: Arc<dyn Store>) {
    let a = tenant("acme");
    let ctx = context("all");
    let mut ops = vec![WriteOp::UpsertThread(thread(&a, &ctx, 100))];
    for (i, state) in TaskState::ALL.into_iter().enumerate() {
        ops.push(WriteOp::UpsertTask(
            task(&a, &ctx, &format!("t{i}"), state, 10).into(),
        ));
    }
    store.commit(&ops).await.unwrap();
    let mut want: Vec<(String, u64)> = TaskState::ALL
        .iter()
        .map(|s| (s.as_str().to_owned(), 1))
        .collect();
    want.sort();
    assert_eq!(
        store.census(Timestamp(1_000)).await.unwrap().tasks_by_state,
        want
    );
}

async fn an_empty_store_counts_nothing(store: Arc<dyn Store>) {
    assert_eq!(store.census(Timestamp(1)).await, Ok(Census::default()));
}

/// The census follows every change of the rows: tasks changing state, threads expired,
/// a retired thread's tasks deleted (on SQLite from the counts its triggers keep).
async fn the_census_follows_every_change_of_the_rows(store: Arc<dyn Store>) {
    let a = tenant("acme");
    let (one, two, old) = (context("one"), context("two"), context("old"));
    let mut overdue = thread(&a, &old, 100);
    overdue.expires_at = Timestamp(500);
    let at = |ctx: &ContextId, id: &str, state| task(&a, ctx, id, state, 10);
    store
        .commit(&[
            WriteOp::UpsertThread(thread(&a, &one, 100)),
            WriteOp::UpsertThread(thread(&a, &two, 100)),
            WriteOp::UpsertThread(overdue),
            WriteOp::UpsertTask(at(&one, "a", TaskState::Working).into()),
            WriteOp::UpsertTask(at(&one, "b", TaskState::Working).into()),
            WriteOp::UpsertTask(at(&two, "c", TaskState::Completed).into()),
            WriteOp::UpsertTask(at(&old, "d", TaskState::Working).into()),
        ])
        .await
        .unwrap();
    let counted = |active, states: &[(&str, u64)]| Census {
        active_threads: active,
        tasks_by_state: states.iter().map(|(s, n)| (s.to_string(), *n)).collect(),
    };
    let now = Timestamp(1_000);
    assert_eq!(
        store.census(now).await.unwrap(),
        counted(2, &[("completed", 1), ("working", 3)])
    );
    store
        .commit(&[
            WriteOp::UpsertTask(at(&one, "a", TaskState::Completed).into()),
            WriteOp::UpsertTask(at(&one, "b", TaskState::Failed).into()),
            // The same state again changes no count.
            WriteOp::UpsertTask(at(&two, "c", TaskState::Completed).into()),
        ])
        .await
        .unwrap();
    assert_eq!(
        store.census(now).await.unwrap(),
        counted(2, &[("completed", 2), ("failed", 1), ("working", 1)])
    );
    store
        .commit(&[WriteOp::ExpireThreads {
            tenant: a.clone(),
            thread_ids: vec![old.clone()],
            at: now,
        }])
        .await
        .unwrap();
    store
        .commit(&[WriteOp::RetireThreads {
            tenant: a.clone(),
            thread_ids: vec![old.clone()],
            before: Timestamp(2_000),
        }])
        .await
        .unwrap();
    assert_eq!(
        store.census(now).await.unwrap(),
        counted(2, &[("completed", 2), ("failed", 1)])
    );
    // Past the live threads' expiry, none is active (still marked so, not yet expired).
    assert_eq!(
        store
            .census(Timestamp(i64::MAX))
            .await
            .unwrap()
            .active_threads,
        0
    );
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
