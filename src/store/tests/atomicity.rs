//! `commit` is all or nothing: a batch that fails part-way leaves no trace.

use std::sync::Arc;

use super::*;
use crate::store::{Store, StoreError, WriteOp};

on_both_backends!(
    repeated_upserts_in_one_batch_leave_the_last_state,
    a_failing_batch_leaves_nothing_behind,
    a_failing_batch_keeps_earlier_commits,
    an_empty_batch_is_a_no_op,
);

async fn a_failing_batch_leaves_nothing_behind(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let task = task(&t, &ctx, "task-1", TaskState::Working, 200);
    let first = message(&ctx, Some(&task.id), Role::User, "one");
    let duplicate = message(&ctx, Some(&task.id), Role::Agent, "same seq");
    let mut ops = vec![
        WriteOp::UpsertThread(thread(&t, &ctx, 100)),
        WriteOp::UpsertTask(task.clone().into()),
    ];
    ops.extend(history_ops(&t, &task, 1, std::slice::from_ref(&first)));
    ops.push(event_op(
        &task,
        1,
        status_event(&task, TaskState::Working, 200),
    ));
    // The last op violates the messages primary key (seq 1 again).
    ops.push(WriteOp::AppendMessage(record(&t, 1, &duplicate)));

    let result = store.commit(&ops).await;
    assert!(matches!(result, Err(StoreError::Conflict(_))), "{result:?}");
    assert_eq!(store.load_thread(&t, &ctx, 10).await, Ok(None));
    assert_eq!(store.load_task(&t, &task.id).await, Ok(None));
    assert!(
        store
            .task_events(&t, &task.id, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn a_failing_batch_keeps_earlier_commits(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let one = message(&ctx, None, Role::User, "one");
    store
        .commit(&[
            WriteOp::UpsertThread(thread(&t, &ctx, 100)),
            WriteOp::AppendMessage(record(&t, 1, &one)),
        ])
        .await
        .unwrap();

    let two = message(&ctx, None, Role::Agent, "two");
    let mut updated = thread(&t, &ctx, 200);
    updated.conversation_context = serde_json::json!({"changed": true});
    let result = store
        .commit(&[
            WriteOp::UpsertThread(updated),
            WriteOp::AppendMessage(record(&t, 2, &two)),
            WriteOp::AppendMessage(record(&t, 1, &two)),
        ])
        .await;
    assert!(matches!(result, Err(StoreError::Conflict(_))), "{result:?}");

    let snapshot = store.load_thread(&t, &ctx, 10).await.unwrap().unwrap();
    assert_eq!(
        snapshot.thread,
        thread(&t, &ctx, 100),
        "the upsert was rolled back"
    );
    assert_eq!(snapshot.recent, [record(&t, 1, &one)]);
    assert_eq!(snapshot.next_seq, 2);
}

async fn an_empty_batch_is_a_no_op(store: Arc<dyn Store>) {
    store.commit(&[]).await.unwrap();
}

/// Group commit puts several writes of one thread or task into one batch; the store
/// writes each table with one statement, so repeated upserts of a key must collapse to
/// the last (Postgres refuses `ON CONFLICT DO UPDATE` touching a row twice).
async fn repeated_upserts_in_one_batch_leave_the_last_state(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let working = task(&t, &ctx, "task-1", TaskState::Working, 200);
    let done = task(&t, &ctx, "task-1", TaskState::Completed, 300);
    let mut later_thread = thread(&t, &ctx, 300);
    later_thread.conversation_context = serde_json::json!({"step": 2});
    store
        .commit(&[
            WriteOp::UpsertThread(thread(&t, &ctx, 100)),
            WriteOp::UpsertTask(working.clone().into()),
            WriteOp::UpsertThread(later_thread.clone()),
            WriteOp::UpsertTask(done.clone().into()),
            event_op(&working, 1, status_event(&working, TaskState::Working, 200)),
            event_op(&done, 2, status_event(&done, TaskState::Completed, 300)),
        ])
        .await
        .unwrap();
    let stored = store.load_task(&t, &done.id).await.unwrap().unwrap();
    assert_eq!(stored.task.status.state, TaskState::Completed);
    assert_eq!(stored.last_event_seq, 2);
    let snapshot = store.load_thread(&t, &ctx, 10).await.unwrap().unwrap();
    assert_eq!(
        snapshot.thread.conversation_context,
        serde_json::json!({"step": 2})
    );
    assert_eq!(snapshot.thread.updated_at, later_thread.updated_at);
}
