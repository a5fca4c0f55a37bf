//! Retention: `WriteOp::RetireThreads` deletes a thread past its retention with every row
//! it holds — messages, tasks, their event logs, push configs and owed deliveries — and
//! nothing else: not a thread still within it, not one still active, not another
//! tenant's thread of the same id, not another thread's task.

use super::*;
use crate::domain::{PushConfig, PushDialect, PushPayload};
use crate::store::testing::{PgTestDb, query_text, test_config};
use crate::store::{StoreConfig, TaskRecord, ThreadStatus, open};

/// Every row of a thread: two messages linked as a task's history, the task, an event
/// it logged, a push config of it and a delivery owed to that config. The thread
/// expires at `expires` with `status`.
fn filled_thread(
    t: &TenantId,
    ctx: &str,
    task: &str,
    expires: i64,
    status: ThreadStatus,
) -> Vec<WriteOp> {
    let ctx = context(ctx);
    let mut th = thread(t, &ctx, 10);
    th.expires_at = Timestamp(expires);
    th.status = status;
    let mut task = super::task(t, &ctx, task, TaskState::Completed, 20);
    let asked = message(&ctx, Some(&task.id), Role::User, "hello");
    let answer = message(&ctx, Some(&task.id), Role::Agent, "echo: hello");
    task.history = vec![asked.clone(), answer.clone()];
    let mut ops = vec![WriteOp::UpsertThread(th)];
    ops.extend(history_ops(t, &task, 1, &[asked, answer]));
    ops.push(WriteOp::UpsertTask(TaskRecord::of(&task)));
    // One event in the log, and the final one, which the task's row stands for.
    let event = status_event(&task, TaskState::Working, 15);
    ops.push(event_op(&task, 1, event.clone()));
    ops.push(event_op(
        &task,
        2,
        status_event(&task, TaskState::Completed, 20),
    ));
    let config = PushConfig {
        tenant: t.clone(),
        task_id: task.id.clone(),
        id: "hook".into(),
        url: "https://hooks.example.org/a".into(),
        token: None,
        auth: None,
        dialect: PushDialect::V1,
        created_at: Timestamp(20),
    };
    ops.push(WriteOp::PutPushConfig(config.clone()));
    ops.push(WriteOp::EnqueuePush {
        config: std::sync::Arc::new(config),
        seq: 1,
        payload: PushPayload::Event {
            event: Box::new(event),
        },
        created_at: Timestamp(20),
    });
    ops
}

/// Rows per table of `tenant`'s thread `ctx` (tasks found by their thread).
async fn rows_of(cfg: &StoreConfig, tenant: &str, ctx: &str) -> Vec<(String, usize)> {
    let tasks =
        format!("SELECT task_id FROM tasks WHERE tenant_id = '{tenant}' AND context_id = '{ctx}'");
    let queries = [
        (
            "threads",
            format!("SELECT 1 FROM threads WHERE tenant_id = '{tenant}' AND thread_id = '{ctx}'"),
        ),
        (
            "messages",
            format!("SELECT 1 FROM messages WHERE tenant_id = '{tenant}' AND thread_id = '{ctx}'"),
        ),
        ("tasks", tasks.clone()),
        (
            "task_events",
            format!(
                "SELECT 1 FROM task_events WHERE tenant_id = '{tenant}' AND task_id LIKE '{ctx}-%'"
            ),
        ),
        (
            "push_configs",
            format!(
                "SELECT 1 FROM push_configs WHERE tenant_id = '{tenant}' AND task_id LIKE '{ctx}-%'"
            ),
        ),
        (
            "push_outbox",
            format!(
                "SELECT 1 FROM push_outbox WHERE tenant_id = '{tenant}' AND task_id LIKE '{ctx}-%'"
            ),
        ),
    ];
    let mut counts = Vec::new();
    for (table, sql) in queries {
        counts.push((table.to_owned(), query_text(cfg, &sql).await.len()));
    }
    counts
}

fn full() -> Vec<(String, usize)> {
    [
        ("threads", 1),
        ("messages", 2),
        ("tasks", 1),
        ("task_events", 1),
        ("push_configs", 1),
        ("push_outbox", 1),
    ]
    .map(|(t, n)| (t.to_owned(), n))
    .to_vec()
}

fn none() -> Vec<(String, usize)> {
    full().into_iter().map(|(t, _)| (t, 0)).collect()
}

async fn a_retired_thread_goes_with_everything_in_it_and_nothing_else(cfg: StoreConfig) {
    let store = open(&cfg).await.unwrap();
    let (acme, globex) = (tenant("acme"), tenant("globex"));
    // Task ids start with their thread's id, so `rows_of` finds a thread's task rows.
    let mut ops = filled_thread(&acme, "old", "old-1", 1_000, ThreadStatus::Expired);
    ops.extend(filled_thread(
        &acme,
        "recent",
        "recent-1",
        5_000,
        ThreadStatus::Expired,
    ));
    ops.extend(filled_thread(
        &acme,
        "active",
        "active-1",
        1_000,
        ThreadStatus::Active,
    ));
    ops.extend(filled_thread(
        &globex,
        "old",
        "old-1",
        1_000,
        ThreadStatus::Expired,
    ));
    store.commit(&ops).await.unwrap();
    assert_eq!(store.outbox_depth().await.unwrap(), 4);

    store
        .commit(&[WriteOp::RetireThreads {
            tenant: acme.clone(),
            thread_ids: ["old", "recent", "active", "unknown"].map(context).to_vec(),
            before: Timestamp(2_000),
        }])
        .await
        .unwrap();

    assert_eq!(
        rows_of(&cfg, "acme", "old").await,
        none(),
        "past retention: all gone"
    );
    assert!(
        store
            .load_thread(&acme, &context("old"), 10)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .load_task(&acme, &task_id("old-1"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .task_events(&acme, &task_id("old-1"), 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        rows_of(&cfg, "acme", "recent").await,
        full(),
        "expired within the retention: kept"
    );
    assert_eq!(
        rows_of(&cfg, "acme", "active").await,
        full(),
        "never expired (not yet marked so): kept"
    );
    assert_eq!(
        rows_of(&cfg, "globex", "old").await,
        full(),
        "another tenant's thread of the same id: kept"
    );
    let kept = store
        .load_task(&globex, &task_id("old-1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.task.history.len(), 2, "a kept task reads as before");
    assert_eq!(store.outbox_depth().await.unwrap(), 3);

    // The janitor pages through what is due with the thread's own query.
    let due = store
        .due_threads(ThreadStatus::Expired, Timestamp(2_000), None, 10)
        .await
        .unwrap();
    let due: Vec<_> = due
        .iter()
        .map(|d| (d.tenant.as_str(), d.thread_id.as_str()))
        .collect();
    assert_eq!(due, vec![("globex", "old")]);
}

#[tokio::test]
async fn sqlite_a_retired_thread_goes_with_everything_in_it_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    a_retired_thread_goes_with_everything_in_it_and_nothing_else(test_config(
        None,
        dir.path().to_path_buf(),
    ))
    .await;
}

#[tokio::test]
async fn postgres_a_retired_thread_goes_with_everything_in_it_and_nothing_else() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    a_retired_thread_goes_with_everything_in_it_and_nothing_else(db.config.clone()).await;
}

/// On SQLite the janitor's statements find their rows through the threads' key (and a
/// retired thread's tasks through `tasks_by_context`), never by a scan nor by the
/// expiry index — which holds every thread due, so a statement per page through it
/// made a pass quadratic in the threads due: a deletion or an expiry costs what the
/// thread holds, not what the store holds.
#[tokio::test]
async fn sqlite_the_janitors_statements_go_through_the_key() {
    use crate::store::writes::sqlite::{RETIRE_THREAD, RETIRED_ROWS, expire_threads};
    let dir = tempfile::tempdir().unwrap();
    let cfg = test_config(None, dir.path().to_path_buf());
    drop(open(&cfg).await.unwrap());
    let expire = expire_threads(3)
        .replace("?2", "1000")
        .replace("?3", "'t-1'")
        .replace("?4", "'t-2'")
        .replace("?5", "'t-3'");
    let retire = [RETIRE_THREAD.replace("?3", "1000")];
    for statement in [expire]
        .into_iter()
        .chain(retire)
        .chain(RETIRED_ROWS.map(String::from))
    {
        let sql = statement
            .replace("?1", "'acme'")
            .replace("?2", "'thread-1'");
        let plan = query_text(&cfg, &format!("EXPLAIN QUERY PLAN {sql}")).await;
        let steps: Vec<String> = plan.into_iter().filter_map(|r| r[3].clone()).collect();
        assert!(
            !steps.is_empty()
                && steps.iter().all(|s| {
                    s.starts_with("LIST SUBQUERY")
                        || (s.starts_with("SEARCH")
                            && [
                                "PRIMARY KEY",
                                "INDEX sqlite_autoindex_",
                                "INDEX tasks_by_context",
                            ]
                            .iter()
                            .any(|key| s.contains(key)))
                }),
            "{sql}: {steps:?}"
        );
    }
}

/// On Postgres likewise, whatever the tables' statistics say: the janitor's statements never
/// read through the expiry index (every thread due), and the rows of a retired thread's
/// tasks are found by their key, never among all of the tenant's.
#[tokio::test]
async fn postgres_the_janitors_statements_go_through_the_key() {
    use crate::store::postgres::statements::{EXPIRE, RETIRE};
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let cfg = db.config.clone();
    drop(open(&cfg).await.unwrap());
    // Tables of some size whose statistics are those of the empty tables (analyzed
    // before the rows came, as a new store's are while it fills): the plans must not
    // depend on them.
    query_text(
        &cfg,
        "ANALYZE; INSERT INTO threads SELECT 'acme', a2a_id('t-' || i), 0, 0, i, 'expired', '{}' \
         FROM generate_series(1, 20000) i; \
         INSERT INTO tasks (tenant_id, task_id, context_id, state, status_timestamp, \
         artifacts, transitions, created_at, updated_at, history) SELECT 'acme', a2a_id('k-' || i), \
         a2a_id('t-' || i), 'completed', 0, '[]', '[]', 0, 0, '' FROM generate_series(1, 20000) i; \
         INSERT INTO task_events (tenant_id, task_id, seq, kind, payload, created_at) \
         SELECT 'acme', a2a_id('k-' || i), s, 'status_update', '{}', 0 \
         FROM generate_series(1, 20000) i, generate_series(1, 2) s; \
         INSERT INTO push_configs (tenant_id, task_id, config_id, dialect, url, created_at) \
         SELECT 'acme', a2a_id('k-' || i), 'c', 'v1', 'https://h', 0 FROM generate_series(1, 20000) i; \
         INSERT INTO push_outbox SELECT 'acme', a2a_id('k-' || i), 'c', 1, '{}', 0, 0, 0 \
         FROM generate_series(1, 20000) i; \
         INSERT INTO messages (tenant_id, thread_id, seq, role, content, parts, tool_calls, \
         created_at) SELECT 'acme', a2a_id('t-' || i), s, 'user', '', '[]', '[]', 0 \
         FROM generate_series(1, 20000) i, generate_series(1, 2) s",
    )
    .await;
    for statement in [EXPIRE, RETIRE] {
        let sql = statement
            .replace("$1", "'acme'")
            .replace("$2::bytea[]", "ARRAY[a2a_id('t-1'), a2a_id('t-2')]")
            .replace("$3", "1000");
        let explain = format!("EXPLAIN (COSTS OFF) {sql}");
        let plan: Vec<String> = query_text(&cfg, &explain)
            .await
            .into_iter()
            .filter_map(|r| r.into_iter().next().flatten())
            .collect();
        let plan = plan.join("\n");
        assert!(!plan.contains("threads_by_expiry"), "{sql}\n{plan}");
        assert!(
            !plan
                .lines()
                .any(|line| line.trim().ends_with("Cond: (tenant_id = 'acme'::text)")),
            "rows found among all of the tenant's:\n{sql}\n{plan}"
        );
    }
}
