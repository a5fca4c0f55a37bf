//! Each fact stored once: a message is its row in `messages`, whole; the task's status
//! and the logged status update refer to that row instead of copying it; and what is
//! read back is the same as what was written.

use std::sync::Arc;

use super::*;
use crate::domain::ListTasksQuery;
use crate::store::testing::{PgTestDb, query_text, test_config};
use crate::store::{Store, StoreConfig, TaskRecord, open};

/// The writes of an echo turn as the runtime plans them: the thread, the user's message
/// and the answer as messages 1 and 2 of the thread and the task's history, the task
/// completed with the answer as its status message, and that status update logged.
fn echo_turn(t: &TenantId, ctx: &ContextId) -> (Task, StreamEvent, Vec<WriteOp>) {
    let id = task_id("task-1");
    let asked = message(ctx, Some(&id), Role::User, "hello");
    let answer = message(ctx, Some(&id), Role::Agent, "echo: hello");
    let mut task = Task::submitted(id, ctx.clone(), t.clone(), asked.clone(), Timestamp(10));
    let status = TaskStatus {
        state: TaskState::Completed,
        message: Some(answer.clone()),
        timestamp: Timestamp(20),
    };
    task.set_status(status.clone());
    let event = StreamEvent::StatusUpdate {
        task_id: task.id.clone(),
        context_id: ctx.clone(),
        status,
        metadata: None,
    };
    let mut ops = vec![WriteOp::UpsertThread(thread(t, ctx, 10))];
    ops.extend(history_ops(t, &task, 1, &[asked, answer]));
    ops.push(WriteOp::UpsertTask(TaskRecord::of(&task)));
    ops.push(event_op(&task, 1, event.clone()));
    (task, event, ops)
}

async fn a_turn_stores_its_answer_once(cfg: StoreConfig) {
    let store = open(&cfg).await.unwrap();
    let t = tenant("acme");
    let ctx = context("thread-1");
    let (task, event, ops) = echo_turn(&t, &ctx);
    let answer = task.status.message.clone().unwrap();
    store.commit(&ops).await.unwrap();

    // Read back as written: the task, its status message among its history, the event.
    let loaded = store.load_task(&t, &task.id).await.unwrap().unwrap().task;
    assert_eq!(loaded.status, task.status);
    assert_eq!(loaded.history, task.history);
    let events = store.task_events(&t, &task.id, 0, 10).await.unwrap();
    assert_eq!(events, vec![(1, event)]);
    // A page without the history still has the status message.
    let page = store
        .list_tasks(
            &t,
            &ListTasksQuery {
                context_id: None,
                status: None,
                page_size: 10,
                page_token: None,
                history_length: Some(0),
                status_timestamp_after: None,
                include_artifacts: true,
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(page.tasks.len(), 1);
    assert!(page.tasks[0].history.is_empty());
    assert_eq!(page.tasks[0].status, task.status);

    // Stored once: the task row names the answer's row, and the final status update is
    // the task's row itself (nothing in the log).
    let text = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
    assert_eq!(
        query_text(
            &cfg,
            "SELECT status_message, status_entry, final_event_seq, transitions FROM tasks"
        )
        .await,
        vec![vec![
            None,
            Some("1".into()),
            Some("1".into()),
            Some("[]".into())
        ]]
    );
    assert_eq!(loaded.transitions, task.transitions);
    assert!(
        query_text(&cfg, "SELECT seq FROM task_events")
            .await
            .is_empty()
    );
    let stored = store.load_task(&t, &task.id).await.unwrap().unwrap();
    assert_eq!(stored.last_event_seq, 1);
    assert_eq!(stored.task.generation, 2);
    assert!(!answer.message_id.as_str().is_empty());
    // The text of an A2A message is in its parts only.
    assert_eq!(
        query_text(&cfg, "SELECT content FROM messages ORDER BY seq").await,
        vec![text(&[""]), text(&[""])]
    );
}

#[tokio::test]
async fn sqlite_a_turn_stores_its_answer_once() {
    let dir = tempfile::tempdir().unwrap();
    a_turn_stores_its_answer_once(test_config(None, dir.path().to_path_buf())).await;
}

#[tokio::test]
async fn postgres_a_turn_stores_its_answer_once() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    a_turn_stores_its_answer_once(db.config.clone()).await;
}

on_both_backends!(
    a_history_keeps_every_field_of_its_messages,
    a_status_message_outside_the_history_is_kept_as_written,
);

/// Extensions and referenced tasks are part of a message in its task's history, and a
/// record of the session layer keeps its own text.
async fn a_history_keeps_every_field_of_its_messages(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let id = task_id("task-1");
    let mut asked = message(&ctx, Some(&id), Role::User, "first line");
    asked.parts.push(Part::data(json!({"n": 1})));
    asked.parts.push(Part::text("second line"));
    asked.extensions = vec!["https://example.com/ext/v1".into()];
    asked.reference_task_ids = vec![task_id("task-0")];
    asked.metadata = Some(serde_json::from_value(json!({"k": "v"})).unwrap());
    let task = Task::submitted(id, ctx.clone(), t.clone(), asked.clone(), Timestamp(10));
    let mut ops = vec![WriteOp::UpsertThread(thread(&t, &ctx, 10))];
    ops.extend(history_ops(&t, &task, 1, std::slice::from_ref(&asked)));
    ops.push(WriteOp::UpsertTask(TaskRecord::of(&task)));
    let session = MessageRecord {
        tenant: t.clone(),
        thread_id: ctx.clone(),
        seq: 2,
        message_id: None,
        task_id: Some(task.id.clone()),
        role: "tool".into(),
        author: Some("search".into()),
        content: "three results".into(),
        parts: Vec::new(),
        tool_calls: json!([]),
        metadata: None,
        created_at: Timestamp(11),
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    };
    ops.push(WriteOp::AppendMessage(session.clone()));
    store.commit(&ops).await.unwrap();

    let loaded = store.load_task(&t, &task.id).await.unwrap().unwrap().task;
    assert_eq!(loaded.history, vec![asked.clone()]);
    let snapshot = store.load_thread(&t, &ctx, 10).await.unwrap().unwrap();
    assert_eq!(snapshot.recent.len(), 2);
    assert_eq!(snapshot.recent[0].content, "first line\nsecond line");
    assert_eq!(snapshot.recent[0].extensions, asked.extensions);
    assert_eq!(
        snapshot.recent[0].reference_task_ids,
        asked.reference_task_ids
    );
    assert_eq!(snapshot.recent[1], session);
}

/// A status message that is no entry of the task's history (none is, when the runtime
/// writes) is stored as it is.
async fn a_status_message_outside_the_history_is_kept_as_written(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let mut task = task(&t, &ctx, "task-1", TaskState::Working, 20);
    task.status.message = Some(message(&ctx, Some(&task.id), Role::Agent, "thinking"));
    let record = TaskRecord::of(&task);
    assert_eq!(record.status_entry, None);
    assert_eq!(record.task.status, task.status);
    let event = StreamEvent::StatusUpdate {
        task_id: task.id.clone(),
        context_id: ctx.clone(),
        status: task.status.clone(),
        metadata: None,
    };
    store
        .commit(&[
            WriteOp::UpsertThread(thread(&t, &ctx, 10)),
            WriteOp::UpsertTask(record),
            event_op(&task, 1, event.clone()),
        ])
        .await
        .unwrap();
    let loaded = store.load_task(&t, &task.id).await.unwrap().unwrap().task;
    assert_eq!(loaded.status, task.status);
    let events = store.task_events(&t, &task.id, 0, 10).await.unwrap();
    assert_eq!(events, vec![(1, event)]);
}

#[test]
fn a_task_record_names_its_status_message_by_its_newest_equal_entry() {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let (task, _, _) = echo_turn(&t, &ctx);
    let record = TaskRecord::of(&task);
    assert_eq!(record.status_entry, Some(1));
    assert_eq!(record.task.status.message, None);
    assert!(record.task.history.is_empty());
    assert_eq!(record.task.transitions, task.transitions);

    // The same id with other content is not the status message.
    let mut other = task.clone();
    other.history[1].parts = vec![Part::text("something else")];
    let record = TaskRecord::of(&other);
    assert_eq!(record.status_entry, None);
    assert_eq!(record.task.status.message, task.status.message);
}

/// A turn that answers without a task: its reply is a row of the thread, which the
/// idempotency claim names; a retry reads the reply back from there, and a claim that
/// takes the key over later carries no reply of the one before.
async fn a_reply_is_stored_once(cfg: StoreConfig) {
    use crate::store::Claim;
    let store = open(&cfg).await.unwrap();
    let t = tenant("acme");
    let ctx = context("thread-1");
    let asked = message(&ctx, None, Role::User, "hello");
    let reply = message(&ctx, None, Role::Agent, "echo: hello");
    let claim = |at: i64| Claim {
        known_unclaimed: false,
        tenant: t.clone(),
        key: asked.message_id.as_str().to_owned(),
        context_id: ctx.clone(),
        task_id: task_id("task-1"),
        digest: "d".into(),
        reply: None,
        created_at: Timestamp(at),
        taken_over_before: Timestamp(at - 100),
    };
    let key = asked.message_id.as_str().to_owned();
    store
        .commit(&[
            WriteOp::ClaimKey(claim(1_000)),
            WriteOp::UpsertThread(thread(&t, &ctx, 1_000)),
            WriteOp::AppendMessage(record(&t, 1, &asked)),
        ])
        .await
        .unwrap();
    store
        .commit(&[
            WriteOp::AppendMessage(record(&t, 2, &reply)),
            WriteOp::SettleClaim {
                tenant: t.clone(),
                key: key.clone(),
                reply: reply.clone(),
            },
        ])
        .await
        .unwrap();

    let read = store.claim(&t, &key).await.unwrap().unwrap();
    assert_eq!(read.reply.as_ref(), Some(&reply));
    if let Some(inline) = store.claim_inline(&t, &key) {
        assert_eq!(inline.unwrap().unwrap().reply.as_ref(), Some(&reply));
    }
    assert_eq!(
        query_text(&cfg, "SELECT reply, reply_seq FROM idempotency_keys").await,
        vec![vec![None, Some("2".into())]]
    );

    // Taken over past its window: the new claim has no reply yet.
    store
        .commit(&[WriteOp::ClaimKey(claim(5_000))])
        .await
        .unwrap();
    let read = store.claim(&t, &key).await.unwrap().unwrap();
    assert_eq!(read.reply, None);
    assert_eq!(read.created_at, Timestamp(5_000));
    if let Some(inline) = store.claim_inline(&t, &key) {
        assert_eq!(inline.unwrap().unwrap().reply, None);
    }
}

#[tokio::test]
async fn sqlite_a_reply_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    a_reply_is_stored_once(test_config(None, dir.path().to_path_buf())).await;
}

#[tokio::test]
async fn postgres_a_reply_is_stored_once() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    a_reply_is_stored_once(db.config.clone()).await;
}
