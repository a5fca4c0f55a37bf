//! Ids of every shape read back exactly as they were written. Postgres stores UUIDs and
//! hex digests as their bytes and any other id as its text (`packed.rs`); migration
//! `…_binary_ids` carries a database whose ids are text over, and back.

use std::sync::Arc;

use super::*;
use crate::domain::ListTasksQuery;
use crate::store::testing::{PgTestDb, query_text};
use crate::store::{Claim, Store, TaskRecord};

on_both_backends!(ids_of_every_shape_read_back_as_written);

/// A SHA-256 digest as the claims hold one.
const DIGEST: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

/// Ids a client may send, beside the UUIDs the server mints, with the bytes Postgres
/// stores each in.
fn shapes() -> Vec<(String, i64)> {
    vec![
        ("019aa5c2-7e3f-7c41-9a2b-3f5d8e1c0b47".into(), 16),
        ("c17e8a38-7153-494c-a7cf-faf94d0cb450".into(), 16),
        // Not as `uuid` writes one: kept as text.
        ("C17E8A38-7153-494C-A7CF-FAF94D0CB450".into(), 36),
        ("c17e8a387153494ca7cffaf94d0cb450".into(), 33),
        // As long as a packed UUID, and as a packed digest: a byte longer.
        ("0123456789abcdef".into(), 17),
        (DIGEST[..32].into(), 33),
        (DIGEST.into(), 32),
        ("ctx-1".into(), 5),
        ("ünïcödé id".into(), "ünïcödé id".len() as i64),
    ]
}

/// Commits, for each shape, a thread, task, message, event and claim all of that id
/// (the claim's digest the id too); returns the tasks.
async fn write_every_shape(store: &dyn Store, t: &TenantId) -> Vec<Task> {
    let mut tasks = Vec::new();
    for (i, (id, _)) in shapes().into_iter().enumerate() {
        let ctx = context(&id);
        let tid = task_id(&id);
        let mut asked = message(&ctx, Some(&tid), Role::User, "hello");
        asked.message_id = MessageId::parse(id.clone()).unwrap();
        let at = Timestamp(10 + i as i64);
        let task = Task::submitted(tid.clone(), ctx.clone(), t.clone(), asked.clone(), at);
        let mut ops = vec![WriteOp::UpsertThread(thread(t, &ctx, 10))];
        ops.extend(history_ops(t, &task, 1, &[asked]));
        ops.push(event_op(
            &task,
            1,
            status_event(&task, TaskState::Submitted, at.0),
        ));
        ops.push(WriteOp::UpsertTask(TaskRecord::of(&task)));
        ops.push(WriteOp::ClaimKey(Claim {
            tenant: t.clone(),
            key: id.clone(),
            context_id: ctx,
            task_id: tid,
            digest: id,
            reply: None,
            created_at: at,
            taken_over_before: Timestamp(0),
            known_unclaimed: false,
        }));
        store.commit(&ops).await.unwrap();
        tasks.push(task);
    }
    tasks
}

/// Every read gives each task, thread, message, event and claim back as written.
async fn read_every_shape(store: &dyn Store, t: &TenantId, tasks: &[Task]) {
    for task in tasks {
        let id = task.id.as_str();
        let stored = store.load_task(t, &task.id).await.unwrap().unwrap();
        let generation = stored.task.generation;
        assert_eq!(
            stored.task,
            Task {
                generation,
                ..task.clone()
            },
            "{id}"
        );
        let events = store.task_events(t, &task.id, 0, 10).await.unwrap();
        assert_eq!(events.len(), 1, "{id}");
        let snapshot = store.load_thread(t, &task.context_id, 10).await.unwrap();
        let snapshot = snapshot.unwrap_or_else(|| panic!("thread {id}"));
        assert_eq!(snapshot.thread.thread_id, task.context_id);
        assert_eq!(snapshot.recent.len(), 1, "{id}");
        assert_eq!(snapshot.recent[0].message_id.as_ref().unwrap().as_str(), id);
        assert_eq!(snapshot.recent[0].task_id.as_ref(), Some(&task.id));
        assert_eq!(snapshot.open_tasks.len(), 1, "{id}");
        assert_eq!(
            snapshot.open_tasks[0].task,
            Task {
                generation,
                ..task.clone()
            }
        );
        let claim = store.claim(t, id).await.unwrap().unwrap();
        assert_eq!(
            (claim.key.as_str(), claim.digest.as_str()),
            (id, id),
            "{id}"
        );
        assert_eq!(
            (&claim.context_id, &claim.task_id),
            (&task.context_id, &task.id)
        );
        let by_context = ListTasksQuery {
            context_id: Some(task.context_id.clone()),
            page_size: 10,
            ..Default::default()
        };
        let page = store.list_tasks(t, &by_context).await.unwrap().unwrap();
        assert_eq!(page.tasks.len(), 1, "{id}");
        assert_eq!(page.tasks[0].id, task.id);
    }
    // Paged through one at a time: each exactly once.
    let mut seen = Vec::new();
    let mut query = ListTasksQuery {
        page_size: 1,
        ..Default::default()
    };
    loop {
        let page = store.list_tasks(t, &query).await.unwrap().unwrap();
        seen.extend(page.tasks.into_iter().map(|task| task.id));
        if page.next_page_token.is_empty() {
            break;
        }
        query.page_token = Some(page.next_page_token);
    }
    seen.sort();
    let mut written: Vec<TaskId> = tasks.iter().map(|task| task.id.clone()).collect();
    written.sort();
    assert_eq!(seen, written);
}

async fn ids_of_every_shape_read_back_as_written(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let tasks = write_every_shape(&*store, &t).await;
    read_every_shape(&*store, &t, &tasks).await;
}

/// The bytes each shape's id takes in every column that holds it (Postgres).
async fn stored_lengths(cfg: &crate::store::StoreConfig) -> Vec<Vec<Option<String>>> {
    query_text(
        cfg,
        "SELECT octet_length(t.task_id), octet_length(t.context_id), \
         octet_length(h.thread_id), octet_length(m.thread_id), octet_length(m.message_id), \
         octet_length(m.task_id), octet_length(e.task_id), octet_length(k.idem_key), \
         octet_length(k.context_id), octet_length(k.task_id), octet_length(k.digest) \
         FROM tasks t JOIN threads h ON h.thread_id = t.context_id \
         JOIN messages m ON m.thread_id = t.context_id \
         JOIN task_events e ON e.task_id = t.task_id \
         JOIN idempotency_keys k ON k.task_id = t.task_id \
         ORDER BY t.created_at",
    )
    .await
}

fn lengths_of_every_shape() -> Vec<Vec<Option<String>>> {
    shapes()
        .into_iter()
        .map(|(_, len)| vec![Some(len.to_string()); 11])
        .collect()
}

#[tokio::test]
async fn postgres_packs_uuids_and_digests_and_carries_text_ids_over() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let cfg = db.config.clone();
    let t = tenant("acme");
    let store = db.open().await;
    let tasks = write_every_shape(&*store, &t).await;
    drop(store);
    assert_eq!(stored_lengths(&cfg).await, lengths_of_every_shape());

    // Back to text ids, as the release before stored them.
    let reverted = tokio::task::spawn_blocking({
        let cfg = cfg.clone();
        move || crate::store::revert_through_then(&cfg, "20261127000200", "")
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        reverted,
        ["20261128000100", "20261128000000", "20261127000200"]
    );
    let as_text = query_text(
        &cfg,
        "SELECT task_id, pg_typeof(task_id)::text, t.context_id, digest FROM tasks t \
         JOIN idempotency_keys k USING (tenant_id, task_id) ORDER BY t.created_at",
    )
    .await;
    let expected: Vec<Vec<Option<String>>> = shapes()
        .into_iter()
        .map(|(id, _)| {
            vec![
                Some(id.clone()),
                Some("text".into()),
                Some(id.clone()),
                Some(id),
            ]
        })
        .collect();
    assert_eq!(as_text, expected);

    // And over again: the same bytes, and every read as before.
    let store = crate::store::open(&cfg).await.unwrap();
    assert_eq!(stored_lengths(&cfg).await, lengths_of_every_shape());
    read_every_shape(&*store, &t, &tasks).await;
}
