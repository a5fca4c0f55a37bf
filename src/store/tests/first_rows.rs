//! A thread's or task's first row is inserted without looking for one (`InsertThread`,
//! `InsertTask`): later writes upsert it, a batch that writes it twice leaves the last
//! write, and a first row whose key is taken refuses the whole batch.

use std::sync::Arc;

use super::*;
use crate::store::{Store, StoreError, TaskRecord, ThreadSnapshot};

on_both_backends!(
    first_rows_are_inserted_and_later_writes_update_them,
    a_batch_that_writes_a_first_row_twice_leaves_the_last_write,
    a_first_row_whose_key_is_taken_refuses_the_batch,
);

/// Commits `ops`, then reads the thread `ctx` of `t` back as a reload does.
async fn commit_then_reload(
    store: &dyn Store,
    t: &TenantId,
    ctx: &ContextId,
    ops: &[WriteOp],
) -> ThreadSnapshot {
    store.commit(ops).await.unwrap();
    store.load_thread(t, ctx, 10).await.unwrap().unwrap()
}

async fn first_rows_are_inserted_and_later_writes_update_them(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let mut th = thread(&t, &ctx, 10);
    let mut task = task(&t, &ctx, "task-1", TaskState::Working, 20);
    let stored = commit_then_reload(
        &*store,
        &t,
        &ctx,
        &[
            WriteOp::InsertThread(th.clone()),
            WriteOp::InsertTask(TaskRecord::of(&task)),
        ],
    )
    .await;
    assert_eq!(stored.thread, th);
    assert_eq!(stored.open_tasks[0].task.status, task.status);

    th.updated_at = Timestamp(30);
    task.set_status(TaskStatus {
        state: TaskState::InputRequired,
        message: None,
        timestamp: Timestamp(30),
    });
    let stored = commit_then_reload(
        &*store,
        &t,
        &ctx,
        &[
            WriteOp::UpsertThread(th.clone()),
            WriteOp::UpsertTask(TaskRecord::of(&task)),
        ],
    )
    .await;
    assert_eq!(stored.thread, th);
    assert_eq!(stored.open_tasks[0].task.status, task.status);
}

async fn a_batch_that_writes_a_first_row_twice_leaves_the_last_write(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let first = thread(&t, &ctx, 10);
    let mut last = first.clone();
    last.updated_at = Timestamp(40);
    let mut task = task(&t, &ctx, "task-1", TaskState::Working, 20);
    let created = TaskRecord::of(&task);
    task.set_status(TaskStatus {
        state: TaskState::InputRequired,
        message: None,
        timestamp: Timestamp(40),
    });
    // Two turns of a new thread in one group commit: the first row, then the next write.
    let stored = commit_then_reload(
        &*store,
        &t,
        &ctx,
        &[
            WriteOp::InsertThread(first),
            WriteOp::InsertTask(created),
            WriteOp::UpsertThread(last.clone()),
            WriteOp::UpsertTask(TaskRecord::of(&task)),
        ],
    )
    .await;
    assert_eq!(stored.thread, last);
    assert_eq!(stored.open_tasks.len(), 1);
    assert_eq!(stored.open_tasks[0].task.status, task.status);
}

async fn a_first_row_whose_key_is_taken_refuses_the_batch(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let th = thread(&t, &ctx, 10);
    let task = task(&t, &ctx, "task-1", TaskState::Working, 20);
    store
        .commit(&[
            WriteOp::InsertThread(th.clone()),
            WriteOp::InsertTask(TaskRecord::of(&task)),
        ])
        .await
        .unwrap();
    let hello = record(&t, 1, &message(&ctx, None, Role::User, "hello"));
    for first in [
        WriteOp::InsertThread(thread(&t, &ctx, 50)),
        WriteOp::InsertTask(TaskRecord::of(&task)),
    ] {
        let refused = store
            .commit(&[WriteOp::AppendMessage(hello.clone()), first])
            .await;
        assert!(
            matches!(refused, Err(StoreError::Conflict(_))),
            "{refused:?}"
        );
        // Nothing of the refused batch is stored.
        let stored = store.load_thread(&t, &ctx, 10).await.unwrap().unwrap();
        assert!(stored.recent.is_empty());
        assert_eq!(stored.thread, th);
    }
}
