//! A task's final status update is its row: the event that ends a task, saying nothing
//! the row does not, is not logged, and every read returns it as if it were.

use std::sync::Arc;

use super::*;
use crate::domain::Metadata;
use crate::store::{Store, TaskRecord};

on_both_backends!(
    the_final_event_reads_back_after_the_logged_ones,
    events_the_row_cannot_stand_for_are_logged,
    a_final_event_committed_on_its_own_reads_back_too,
);

/// A task's turn: the user's message, then `events` (seqs from 1) with the task taking
/// each status in turn; the last status's message, if any, is the answer, appended and
/// linked like a turn's. Returns the task as its last status leaves it, and the ops.
fn turn(t: &TenantId, ctx: &ContextId, events: &[StreamEvent]) -> (Task, Vec<WriteOp>) {
    let id = task_id("task-1");
    let asked = message(ctx, Some(&id), Role::User, "hello");
    let mut task = Task::submitted(id, ctx.clone(), t.clone(), asked.clone(), Timestamp(10));
    let mut ops = vec![WriteOp::UpsertThread(thread(t, ctx, 10))];
    ops.extend(history_ops(t, &task, 1, &[asked]));
    for (seq, event) in (1..).zip(events) {
        let StreamEvent::StatusUpdate { status, .. } = event else {
            unreachable!("status updates only");
        };
        if let Some(answer) = &status.message {
            let position = task.history.len() as i64;
            ops.push(WriteOp::AppendMessage(record(t, position + 1, answer)));
            ops.push(WriteOp::LinkTaskMessage {
                tenant: t.clone(),
                task_id: task.id.clone(),
                position,
                message_seq: position + 1,
            });
        }
        task.set_status(status.clone());
        ops.push(event_op(&task, seq, event.clone()));
    }
    ops.push(WriteOp::UpsertTask(TaskRecord::of(&task)));
    (task, ops)
}

fn update(ctx: &ContextId, state: TaskState, ts: i64, answer: Option<Message>) -> StreamEvent {
    StreamEvent::StatusUpdate {
        task_id: task_id("task-1"),
        context_id: ctx.clone(),
        status: TaskStatus {
            state,
            message: answer,
            timestamp: Timestamp(ts),
        },
        metadata: None,
    }
}

/// Commits a turn of task-1 in thread-1 of `t` that works, then completes with an
/// answer; returns the task and its two events.
async fn working_then_done(store: &dyn Store, t: &TenantId) -> (Task, [StreamEvent; 2]) {
    let ctx = context("thread-1");
    let answer = message(&ctx, Some(&task_id("task-1")), Role::Agent, "done: hello");
    let events = [
        update(&ctx, TaskState::Working, 20, None),
        update(&ctx, TaskState::Completed, 30, Some(answer)),
    ];
    let (task, ops) = turn(t, &ctx, &events);
    store.commit(&ops).await.unwrap();
    (task, events)
}

async fn the_final_event_reads_back_after_the_logged_ones(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let (task, events) = working_then_done(&*store, &t).await;

    let expected: Vec<(i64, StreamEvent)> = (1..).zip(events.iter().cloned()).collect();
    let id = &task.id;
    assert_eq!(store.task_events(&t, id, 0, 10).await.unwrap(), expected);
    assert_eq!(
        store.task_events(&t, id, 1, 10).await.unwrap(),
        expected[1..]
    );
    assert!(store.task_events(&t, id, 2, 10).await.unwrap().is_empty());
    // A page the logged events fill stops before the final one; the next page has it.
    assert_eq!(
        store.task_events(&t, id, 0, 1).await.unwrap(),
        expected[..1]
    );
    // Another tenant's task of the same id is not this one.
    assert!(
        store
            .task_events(&tenant("globex"), id, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );

    let stored = store.load_task(&t, id).await.unwrap().unwrap();
    assert_eq!(stored.last_event_seq, 2);
    assert_eq!(stored.task.generation, 3);
    assert_eq!(stored.task.status, task.status);
    let page = store
        .list_tasks(
            &t,
            &crate::domain::ListTasksQuery {
                context_id: None,
                status: None,
                page_size: 10,
                page_token: None,
                history_length: None,
                status_timestamp_after: None,
                include_artifacts: true,
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(page.tasks[0].generation, 3);
}

/// Metadata of the event's own, a status that is not terminal, a status message the
/// batch does not append: each needs the log.
async fn events_the_row_cannot_stand_for_are_logged(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let mut with_metadata = update(&context("c1"), TaskState::Failed, 30, None);
    if let StreamEvent::StatusUpdate { metadata, .. } = &mut with_metadata {
        *metadata = Some(Metadata::from_iter([("why".to_owned(), json!("timeout"))]));
    }
    let answer = |ctx: &ContextId| message(ctx, Some(&task_id("task-1")), Role::Agent, "which?");
    let cases = [
        ("c1", with_metadata),
        (
            "c2",
            update(
                &context("c2"),
                TaskState::InputRequired,
                30,
                Some(answer(&context("c2"))),
            ),
        ),
        ("c3", update(&context("c3"), TaskState::Canceled, 30, None)),
    ];
    for (ctx, event) in cases {
        let ctx = context(ctx);
        let (task, mut ops) = turn(&t, &ctx, std::slice::from_ref(&event));
        if ctx.as_str() == "c3" {
            // The task's row says another time than the event: the event is its own.
            let Some(WriteOp::UpsertTask(row)) = ops.last_mut() else {
                unreachable!("the task's row is the last op");
            };
            row.task.status.timestamp = Timestamp(31);
        }
        // One tenant, one task id: each case on a tenant of its own.
        let t = tenant(&format!("acme-{ctx}"));
        for op in &mut ops {
            retenant(op, &t);
        }
        store.commit(&ops).await.unwrap();
        assert_eq!(
            store.task_events(&t, &task.id, 0, 10).await.unwrap(),
            vec![(1, event)],
            "{ctx}"
        );
        let stored = store.load_task(&t, &task.id).await.unwrap().unwrap();
        assert_eq!(stored.last_event_seq, 1, "{ctx}");
    }
}

/// The final event committed in a batch of its own, after the task's earlier ones.
async fn a_final_event_committed_on_its_own_reads_back_too(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let answer = message(&ctx, Some(&task_id("task-1")), Role::Agent, "done");
    let events = [
        update(&ctx, TaskState::Working, 20, None),
        update(&ctx, TaskState::Completed, 30, Some(answer)),
    ];
    let (_, first) = turn(&t, &ctx, &events[..1]);
    store.commit(&first).await.unwrap();
    let (task, all) = turn(&t, &ctx, &events);
    // The second commit: what the first did not write (the answer, its link, the final
    // event, the task's row).
    let rest: Vec<WriteOp> = all[first.len() - 1..]
        .iter()
        .filter(|op| !matches!(op, WriteOp::AppendTaskEvent { seq: 1, .. }))
        .cloned()
        .collect();
    store.commit(&rest).await.unwrap();
    let expected: Vec<(i64, StreamEvent)> = (1..).zip(events.iter().cloned()).collect();
    assert_eq!(
        store.task_events(&t, &task.id, 0, 10).await.unwrap(),
        expected
    );
    let stored = store.load_task(&t, &task.id).await.unwrap().unwrap();
    assert_eq!(stored.task.status, task.status);
    assert_eq!(stored.last_event_seq, 2);
}

/// `op` as `tenant`'s.
fn retenant(op: &mut WriteOp, tenant: &TenantId) {
    match op {
        WriteOp::UpsertThread(th) => th.tenant = tenant.clone(),
        WriteOp::AppendMessage(m) => m.tenant = tenant.clone(),
        WriteOp::UpsertTask(r) => r.task.tenant = tenant.clone(),
        WriteOp::LinkTaskMessage { tenant: t, .. } | WriteOp::AppendTaskEvent { tenant: t, .. } => {
            *t = tenant.clone()
        }
        _ => unreachable!("not written by a turn"),
    }
}

/// Reverting `…_final_event_in_task_row` writes the final events the rows stood for into
/// the log, as the release before logged them; migrating again reads them back the same
/// from there — a database that release wrote, carried over.
async fn final_events_go_back_to_the_log_and_come_back(cfg: crate::store::StoreConfig) {
    use crate::store::testing::query_text;
    let store = crate::store::open(&cfg).await.unwrap();
    let t = tenant("acme");
    let (task, events) = working_then_done(&*store, &t).await;
    drop(store);
    let expected: Vec<(i64, StreamEvent)> = (1..).zip(events.iter().cloned()).collect();

    let reverted = tokio::task::spawn_blocking({
        let cfg = cfg.clone();
        move || crate::store::revert_through_then(&cfg, "20261127000000", "")
    })
    .await
    .unwrap()
    .unwrap();
    // Postgres reverts its outbox's poll and owners, then its ids to text, first;
    // SQLite its open-tasks index's condition, its census kept by the writer, its list
    // index's order and its census counts.
    let newer: &[&str] = match cfg.database_url {
        Some(_) => &["20261128000100", "20261128000000", "20261127000200"],
        None => &[
            "20261128000500",
            "20261128000400",
            "20261128000300",
            "20261128000200",
        ],
    };
    assert_eq!(
        reverted,
        [newer, &["20261127000100", "20261127000000"]].concat()
    );
    let text = |v: &str| Some(v.to_owned());
    assert_eq!(
        query_text(
            &cfg,
            "SELECT seq, message_seq FROM task_events ORDER BY seq"
        )
        .await,
        [vec![text("1"), None], vec![text("2"), text("2")]]
    );

    let store = crate::store::open(&cfg).await.unwrap();
    assert_eq!(
        store.task_events(&t, &task.id, 0, 10).await.unwrap(),
        expected
    );
    let stored = store.load_task(&t, &task.id).await.unwrap().unwrap();
    assert_eq!(stored.last_event_seq, 2);
    assert_eq!(stored.task.status, task.status);
    assert_eq!(
        query_text(&cfg, "SELECT final_event_seq FROM tasks").await,
        [vec![None]]
    );
}

#[tokio::test]
async fn sqlite_final_events_go_back_to_the_log_and_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = crate::store::testing::test_config(None, dir.path().to_path_buf());
    final_events_go_back_to_the_log_and_come_back(cfg).await;
}

#[tokio::test]
async fn postgres_final_events_go_back_to_the_log_and_come_back() {
    let Some(db) = crate::store::testing::PgTestDb::create().await else {
        return;
    };
    final_events_go_back_to_the_log_and_come_back(db.config.clone()).await;
}
