//! Tenants: every read is scoped, and tenants may reuse each other's ids.

use std::sync::Arc;

use super::*;
use crate::domain::ListTasksQuery;
use crate::store::{Store, WriteOp};

on_both_backends!(tenants_see_nothing_of_each_other);

async fn tenants_see_nothing_of_each_other(store: Arc<dyn Store>) {
    let a = tenant("tenant-a");
    let b = tenant("tenant-b");
    let ctx = context("shared-thread-id");
    let task_a = task(&a, &ctx, "shared-task-id", TaskState::Working, 200);
    let history = [message(&ctx, Some(&task_a.id), Role::User, "secret of A")];
    let mut ops = vec![
        WriteOp::UpsertThread(thread(&a, &ctx, 100)),
        WriteOp::UpsertTask(task_a.clone().into()),
    ];
    ops.extend(history_ops(&a, &task_a, 1, &history));
    ops.push(event_op(
        &task_a,
        1,
        status_event(&task_a, TaskState::Working, 200),
    ));
    store.commit(&ops).await.unwrap();

    let everything = ListTasksQuery {
        page_size: 100,
        ..Default::default()
    };
    assert_eq!(store.load_thread(&b, &ctx, 10).await, Ok(None));
    assert_eq!(store.load_task(&b, &task_a.id).await, Ok(None));
    let page = store.list_tasks(&b, &everything).await.unwrap().unwrap();
    assert!(page.tasks.is_empty());
    assert_eq!(page.total_size, 0);
    assert!(
        store
            .task_events(&b, &task_a.id, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // B may use the very same ids; A's data stays A's.
    let task_b = task(&b, &ctx, "shared-task-id", TaskState::Completed, 900);
    let mut ops = vec![
        WriteOp::UpsertThread(thread(&b, &ctx, 500)),
        WriteOp::UpsertTask(task_b.clone().into()),
    ];
    ops.extend(history_ops(
        &b,
        &task_b,
        1,
        &[message(&ctx, Some(&task_b.id), Role::User, "B")],
    ));
    ops.push(event_op(
        &task_b,
        1,
        status_event(&task_b, TaskState::Completed, 900),
    ));
    store.commit(&ops).await.unwrap();

    let snapshot = store.load_thread(&a, &ctx, 10).await.unwrap().unwrap();
    assert_eq!(snapshot.thread, thread(&a, &ctx, 100));
    assert_eq!(snapshot.recent.len(), 1);
    assert_eq!(
        snapshot.open_tasks.len(),
        1,
        "B's completed task is not A's"
    );
    let stored = store.load_task(&a, &task_a.id).await.unwrap().unwrap();
    assert_eq!(stored.task.history, history);
    assert_eq!(stored.task.status.state, TaskState::Working);
    let page = store.list_tasks(&a, &everything).await.unwrap().unwrap();
    assert_eq!(page.total_size, 1);
    assert_eq!(page.tasks[0].tenant, a);
    let events = store.task_events(&a, &task_a.id, 0, 10).await.unwrap();
    assert_eq!(
        events,
        [(1, status_event(&task_a, TaskState::Working, 200))]
    );
}
