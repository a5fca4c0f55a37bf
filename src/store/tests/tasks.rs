//! Tasks: upsert, history links and the `load_task` round trip.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::domain::{Artifact, PartContent, Transition};
use crate::store::{Store, WriteOp};

on_both_backends!(
    unknown_tasks_load_as_none,
    tasks_round_trip_with_history_artifacts_and_status,
    upserting_a_task_updates_it_in_place,
    history_messages_without_an_id_get_one,
    a_tasks_context_is_read_by_its_key_alone,
);

async fn unknown_tasks_load_as_none(store: Arc<dyn Store>) {
    assert_eq!(
        store.load_task(&tenant("acme"), &task_id("nope")).await,
        Ok(None)
    );
}

fn rich_task(t: &TenantId, ctx: &ContextId) -> Task {
    let mut task = task(t, ctx, "task-rich", TaskState::Working, 200);
    let status_message = message(ctx, Some(&task.id), Role::Agent, "halfway there");
    task.set_status(TaskStatus {
        state: TaskState::InputRequired,
        message: Some(status_message),
        timestamp: Timestamp(300),
    });
    task.metadata = Some(
        json!({"origin": "test", "n": 1})
            .as_object()
            .unwrap()
            .clone(),
    );
    let raw = Part {
        content: PartContent::Raw(vec![0, 159, 146, 150, 255, b'\n']),
        filename: Some("blob.bin".into()),
        media_type: Some("application/octet-stream".into()),
        metadata: Some(json!({"size": 6}).as_object().unwrap().clone()),
    };
    let mut artifact = Artifact::new(vec![
        Part::text("report"),
        raw,
        Part::of(PartContent::Url("https://example.com/x.pdf".into())),
        Part::data(json!({"rows": [1, 2, 3], "ok": true})),
    ]);
    artifact.name = Some("result".into());
    artifact.description = Some("the result".into());
    artifact.extensions = vec!["https://example.com/ext".into()];
    task.apply_artifact(&artifact, false, Timestamp(310));
    task.history.clear();
    task
}

async fn tasks_round_trip_with_history_artifacts_and_status(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let mut task = rich_task(&t, &ctx);
    let mut question = message(&ctx, Some(&task.id), Role::User, "please");
    question.parts.push(Part {
        content: PartContent::Raw(b"\x00\x01binary".to_vec()),
        filename: Some("in.bin".into()),
        media_type: None,
        metadata: None,
    });
    question.metadata = Some(json!({"client": "cli"}).as_object().unwrap().clone());
    let answer = message(&ctx, Some(&task.id), Role::Agent, "here");

    let mut ops = vec![
        WriteOp::UpsertThread(thread(&t, &ctx, 100)),
        // A message of the thread that is not in the task's history.
        WriteOp::AppendMessage(record(&t, 1, &message(&ctx, None, Role::User, "chit-chat"))),
        WriteOp::UpsertTask(task.clone().into()),
    ];
    ops.extend(history_ops(
        &t,
        &task,
        2,
        &[question.clone(), answer.clone()],
    ));
    store.commit(&ops).await.unwrap();

    let stored = store.load_task(&t, &task.id).await.unwrap().unwrap();
    task.history = vec![question, answer];
    assert_eq!(stored.task, task);
    assert_eq!(stored.last_event_seq, 0);
    assert_eq!(
        stored.task.transitions,
        [
            Transition {
                state: TaskState::Submitted,
                timestamp: Timestamp(1)
            },
            Transition {
                state: TaskState::Working,
                timestamp: Timestamp(200)
            },
            Transition {
                state: TaskState::InputRequired,
                timestamp: Timestamp(300)
            },
        ]
    );
}

async fn upserting_a_task_updates_it_in_place(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let mut task = task(&t, &ctx, "task-1", TaskState::Working, 200);
    store
        .commit(&[
            WriteOp::UpsertThread(thread(&t, &ctx, 100)),
            WriteOp::UpsertTask(task.clone().into()),
        ])
        .await
        .unwrap();

    let created_at = task.created_at;
    task.created_at = Timestamp(999_999);
    task.set_status(TaskStatus {
        state: TaskState::Completed,
        message: None,
        timestamp: Timestamp(500),
    });
    task.apply_artifact(
        &Artifact::new(vec![Part::text("done")]),
        false,
        Timestamp(500),
    );
    store
        .commit(&[WriteOp::UpsertTask(task.clone().into())])
        .await
        .unwrap();

    let stored = store.load_task(&t, &task.id).await.unwrap().unwrap().task;
    assert_eq!(stored.created_at, created_at, "created_at is never updated");
    task.created_at = created_at;
    assert_eq!(stored, task);
}

async fn history_messages_without_an_id_get_one(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let task = task(&t, &ctx, "task-1", TaskState::Working, 200);
    let mut anonymous = record(
        &t,
        1,
        &message(&ctx, Some(&task.id), Role::Agent, "tool output"),
    );
    anonymous.message_id = None;
    anonymous.role = "tool".into();
    store
        .commit(&[
            WriteOp::UpsertThread(thread(&t, &ctx, 100)),
            WriteOp::UpsertTask(task.clone().into()),
            WriteOp::AppendMessage(anonymous),
            WriteOp::LinkTaskMessage {
                tenant: t.clone(),
                task_id: task.id.clone(),
                position: 0,
                message_seq: 1,
            },
        ])
        .await
        .unwrap();

    let history = store
        .load_task(&t, &task.id)
        .await
        .unwrap()
        .unwrap()
        .task
        .history;
    assert_eq!(history.len(), 1);
    assert!(!history[0].message_id.as_str().is_empty());
    assert_eq!(
        history[0].role,
        Role::Agent,
        "every role but `user` is the agent's"
    );
    assert_eq!(history[0].context_id.as_ref(), Some(&ctx));
    assert_eq!(history[0].task_id.as_ref(), Some(&task.id));
    assert_eq!(history[0].text(), "tool output");
}

async fn a_tasks_context_is_read_by_its_key_alone(store: Arc<dyn Store>) {
    let (acme, other) = (tenant("acme"), tenant("other"));
    let ctx = context("the-thread");
    let t = task(&acme, &ctx, "t-1", TaskState::InputRequired, 1);
    store
        .commit(&[
            WriteOp::UpsertThread(thread(&acme, &ctx, 1)),
            WriteOp::UpsertTask(t.clone().into()),
        ])
        .await
        .unwrap();
    assert_eq!(store.task_context(&acme, &t.id).await, Ok(Some(ctx)));
    assert_eq!(store.task_context(&acme, &task_id("nope")).await, Ok(None));
    assert_eq!(
        store.task_context(&other, &t.id).await,
        Ok(None),
        "another tenant's"
    );
}
