//! The per-task event log: replay after a sequence number, limits, and what may be logged.

use std::sync::Arc;

use super::*;
use crate::domain::Artifact;
use crate::store::{Store, StoreError, WriteOp};

on_both_backends!(
    events_replay_after_a_seq_up_to_a_limit,
    task_snapshots_are_refused_and_roll_back_the_batch,
    ping_reaches_the_database,
);

async fn events_replay_after_a_seq_up_to_a_limit(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let task = task(&t, &ctx, "task-1", TaskState::Working, 200);
    let events = [
        status_event(&task, TaskState::Working, 200),
        StreamEvent::ArtifactUpdate {
            task_id: task.id.clone(),
            context_id: ctx.clone(),
            artifact: Artifact::new(vec![Part::text("chunk")]),
            append: true,
            last_chunk: false,
            metadata: None,
        },
        StreamEvent::Message {
            message: message(&ctx, Some(&task.id), Role::Agent, "note"),
        },
        status_event(&task, TaskState::InputRequired, 300),
        status_event(&task, TaskState::Working, 400),
    ];
    let mut ops = vec![
        WriteOp::UpsertThread(thread(&t, &ctx, 100)),
        WriteOp::UpsertTask(task.clone().into()),
    ];
    // Logged in two commits, as the persistence actor would.
    ops.extend(
        events[..2]
            .iter()
            .enumerate()
            .map(|(i, e)| event_op(&task, i as i64 + 1, e.clone())),
    );
    store.commit(&ops).await.unwrap();
    let rest: Vec<_> = events[2..]
        .iter()
        .enumerate()
        .map(|(i, e)| event_op(&task, i as i64 + 3, e.clone()))
        .collect();
    store.commit(&rest).await.unwrap();

    let all = store.task_events(&t, &task.id, 0, 100).await.unwrap();
    let expected: Vec<_> = (1..).zip(events.iter().cloned()).collect();
    assert_eq!(all, expected);

    let middle = store.task_events(&t, &task.id, 2, 2).await.unwrap();
    assert_eq!(middle, expected[2..4]);
    assert!(
        store
            .task_events(&t, &task.id, 5, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .task_events(&t, &task.id, 0, 0)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .task_events(&t, &task_id("other"), 0, 10)
            .await
            .unwrap()
            .is_empty()
    );

    let stored = store.load_task(&t, &task.id).await.unwrap().unwrap();
    assert_eq!(stored.last_event_seq, 5);
}

async fn task_snapshots_are_refused_and_roll_back_the_batch(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let task = task(&t, &ctx, "task-1", TaskState::Working, 200);
    let result = store
        .commit(&[
            WriteOp::UpsertThread(thread(&t, &ctx, 100)),
            WriteOp::UpsertTask(task.clone().into()),
            event_op(&task, 1, StreamEvent::Task { task: task.clone() }),
        ])
        .await;
    assert!(matches!(result, Err(StoreError::Query(_))), "{result:?}");
    assert_eq!(store.load_thread(&t, &ctx, 10).await, Ok(None));
    assert_eq!(store.load_task(&t, &task.id).await, Ok(None));
}

async fn ping_reaches_the_database(store: Arc<dyn Store>) {
    store.ping().await.unwrap();
    assert!(["postgres", "sqlite"].contains(&store.backend()));
}
