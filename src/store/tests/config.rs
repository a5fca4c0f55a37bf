//! Opening stores: URL selection, migrations and failing fast when Postgres is down.

use std::time::Duration;

use crate::store::postgres::PgStore;
use crate::store::testing::{PgTestDb, test_config};
use crate::store::{
    Location, SQLITE_FILE, SqliteSynchronous, StoreConfig, StoreError, WriteOp, migrate, open,
};

/// Every migration, in the order they apply.
const ALL_MIGRATIONS: [&str; 21] = [
    "2026-11-22-000000_init",
    "2026-11-22-000100_memories",
    "2026-11-23-000000_thread_recovery",
    "2026-11-24-000000_push",
    "2026-11-24-000100_idempotency",
    "2026-11-25-000000_cluster",
    "2026-11-25-000100_write_checks",
    "2026-11-25-000200_one_thread_time_index",
    "2026-11-25-000300_history_in_task_row",
    "2026-11-25-000400_each_fact_once",
    "2026-11-25-000500_rows_in_their_keys",
    "2026-11-26-000000_claims_in_order",
    "2026-11-27-000000_final_event_in_task_row",
    "2026-11-27-000100_open_tasks_index",
    "2026-11-27-000200_binary_ids",
    "2026-11-28-000000_outbox_owner",
    "2026-11-28-000100_due_plan",
    "2026-11-28-000200_census_counts",
    "2026-11-28-000300_status_time_ascending",
    "2026-11-28-000400_census_by_the_writer",
    "2026-11-28-000500_open_tasks_term_by_term",
];

fn postgres_migrations() -> Vec<String> {
    migrations_of(&test_config(Some("postgres://a@b/c".into()), "/".into()))
}

/// The migrations of `cfg`'s backend, in the order they apply: SQLite has no
/// `a2a_require` (its commits read their answers before they commit) and keeps its ids as
/// text, Postgres no rowid tables to rebuild, no claims log (its claims stay under
/// their key's unique index, which is what several nodes agree through) and no census
/// counts (its census reads are not held against its WAL), its list index is
/// ascending since `_binary_ids`, and its open-tasks index keeps its `NOT IN` (a
/// constant array there, not a temporary b-tree per statement).
fn migrations_of(cfg: &StoreConfig) -> Vec<String> {
    let skipped: &[&str] = match cfg.database_url {
        None => &["_write_checks", "_binary_ids", "_outbox_owner", "_due_plan"],
        Some(_) => &[
            "_rows_in_their_keys",
            "_claims_in_order",
            "_census_counts",
            "_status_time_ascending",
            "_census_by_the_writer",
            "_open_tasks_term_by_term",
        ],
    };
    ALL_MIGRATIONS
        .iter()
        .filter(|m| !skipped.iter().any(|s| m.ends_with(s)))
        .map(|m| m.to_string())
        .collect()
}

/// The migrations of `cfg`'s backend from `first` on.
fn migrations_from(cfg: &StoreConfig, first: &str) -> Vec<String> {
    let all = migrations_of(cfg);
    let at = all.iter().position(|m| m == first).unwrap();
    all[at..].to_vec()
}

/// What reverting the migrations from `first` on reverts: their versions, newest first.
fn reverted_from(cfg: &StoreConfig, first: &str) -> Vec<String> {
    migrations_from(cfg, first)
        .iter()
        .rev()
        .map(|m| m[..17].replace('-', ""))
        .collect()
}

fn location(url: Option<&str>) -> Result<Location, StoreError> {
    test_config(url.map(str::to_owned), "/srv/data".into()).location()
}

#[test]
fn urls_select_the_backend() {
    let sqlite = |url| match location(url) {
        Ok(Location::Sqlite(path)) => path,
        _ => panic!("{url:?} should select SQLite"),
    };
    assert_eq!(
        sqlite(None),
        std::path::Path::new("/srv/data").join(SQLITE_FILE)
    );
    assert_eq!(
        sqlite(Some("  ")),
        std::path::Path::new("/srv/data").join(SQLITE_FILE)
    );
    assert_eq!(
        sqlite(Some("sqlite:///var/lib/a2a.db")),
        std::path::Path::new("/var/lib/a2a.db")
    );
    assert_eq!(
        sqlite(Some("sqlite://rel/a2a.db")),
        std::path::Path::new("rel/a2a.db")
    );
    assert_eq!(
        sqlite(Some("sqlite:a2a.db")),
        std::path::Path::new("a2a.db")
    );
    for url in ["postgres://u@h/db", "postgresql://u@h/db"] {
        assert!(matches!(location(Some(url)), Ok(Location::Postgres(u)) if u == url));
    }
}

#[test]
fn unusable_urls_are_configuration_errors_that_hide_credentials() {
    for url in ["sqlite::memory:", "sqlite://:memory:", "sqlite://"] {
        assert!(
            matches!(location(Some(url)), Err(StoreError::Config(_))),
            "{url}"
        );
    }
    match location(Some("mysql://root:hunter2@db/app")) {
        Err(StoreError::Config(msg)) => {
            assert!(msg.contains("mysql"), "{msg}");
            assert!(!msg.contains("hunter2"), "{msg}");
        }
        _ => panic!("mysql:// must be refused"),
    }
}

#[tokio::test]
async fn sqlite_migrations_apply_once_and_create_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = test_config(None, dir.path().join("nested").join("data"));
    let first = tokio::task::spawn_blocking({
        let cfg = cfg.clone();
        move || migrate(&cfg)
    })
    .await
    .unwrap();
    assert_eq!(first, Ok(migrations_of(&cfg)));
    assert!(cfg.data_dir.join(SQLITE_FILE).is_file());
    let again = tokio::task::spawn_blocking({
        let cfg = cfg.clone();
        move || migrate(&cfg)
    })
    .await
    .unwrap();
    assert_eq!(again, Ok(vec![]), "nothing is pending the second time");
    // Opening migrates again (a no-op) and works on the existing file.
    open(&cfg).await.unwrap().ping().await.unwrap();
}

#[tokio::test]
async fn postgres_migrations_apply_once() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let cfg = db.config.clone();
    let run = |cfg: StoreConfig| tokio::task::spawn_blocking(move || migrate(&cfg));
    assert_eq!(run(cfg.clone()).await.unwrap(), Ok(postgres_migrations()));
    assert_eq!(
        run(cfg.clone()).await.unwrap(),
        Ok(vec![]),
        "nothing is pending the second time"
    );
    db.open().await.ping().await.unwrap();
}

#[tokio::test]
async fn concurrent_postgres_migrations_apply_once() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let runs: Vec<_> = (0..3)
        .map(|_| {
            let cfg = db.config.clone();
            tokio::task::spawn_blocking(move || migrate(&cfg))
        })
        .collect();
    let mut applied = Vec::new();
    for run in runs {
        applied.extend(run.await.unwrap().unwrap());
    }
    assert_eq!(
        applied,
        postgres_migrations(),
        "exactly one migrator applied them"
    );
}

/// Nothing listens on port 1: connecting is refused at once.
fn unreachable_postgres() -> StoreConfig {
    StoreConfig {
        acquire_timeout_ms: 1000,
        ..test_config(
            Some("postgres://postgres@127.0.0.1:1/test".into()),
            std::env::temp_dir(),
        )
    }
}

#[tokio::test]
async fn opening_an_unreachable_postgres_is_unavailable() {
    let result = open(&unreachable_postgres()).await;
    assert!(
        matches!(result, Err(StoreError::Unavailable(_))),
        "{:?}",
        result.err()
    );
}

#[tokio::test]
async fn queries_against_an_unreachable_postgres_are_unavailable() {
    let cfg = unreachable_postgres();
    let url = cfg.database_url.as_deref().unwrap();
    let store = PgStore::new(
        url,
        2,
        1,
        Duration::from_millis(cfg.acquire_timeout_ms),
        None,
        None,
    )
    .unwrap();
    let store: &dyn crate::store::Store = &store;
    let ping = store.ping().await;
    assert!(matches!(ping, Err(StoreError::Unavailable(_))), "{ping:?}");
    let ops = [WriteOp::UpsertThread(super::thread(
        &super::tenant("acme"),
        &super::context("thread-1"),
        1,
    ))];
    let commit = store.commit(&ops).await;
    assert!(
        matches!(commit, Err(StoreError::Unavailable(_))),
        "{commit:?}"
    );
}

#[test]
fn store_errors_map_to_service_errors() {
    use crate::error::Error;
    let unavailable: Error = StoreError::Unavailable("down".into()).into();
    assert!(matches!(unavailable, Error::Unavailable { .. }));
    let config: Error = StoreError::Config("bad url".into()).into();
    assert!(matches!(config, Error::Internal(_)));
}

#[test]
fn the_settings_in_the_stores_terms() {
    let mut settings = crate::config::Settings::default();
    let cfg = StoreConfig::from_settings(&settings);
    assert_eq!(cfg.database_url, None, "an empty URL selects SQLite");
    assert_eq!(cfg.data_dir, settings.store.data_dir);
    assert_eq!(cfg.sqlite_synchronous, SqliteSynchronous::Full);
    assert_eq!(
        cfg.commits_in_flight,
        crate::config::DEFAULT_COMMITS_IN_FLIGHT
    );
    assert!(cfg.fence.is_none());
    settings.store.database_url = "postgres://a@127.0.0.1/x".into();
    settings.store.pool_size = 3;
    settings.store.acquire_timeout_ms = 70;
    settings.store.sqlite_synchronous = crate::config::SqliteSynchronous::Normal;
    settings.persistence.commits_in_flight = 9;
    let cfg = StoreConfig::from_settings(&settings);
    assert_eq!(
        cfg.database_url.as_deref(),
        Some("postgres://a@127.0.0.1/x")
    );
    assert_eq!((cfg.pool_size, cfg.acquire_timeout_ms), (3, 70));
    assert_eq!(cfg.sqlite_synchronous, SqliteSynchronous::Normal);
    assert_eq!(cfg.commits_in_flight, 9);
}

/// A database an older release wrote — task histories as `task_history` rows — is
/// carried over by `…_history_in_task_row`: each task's history is the same messages in
/// the same order, and the next turn appends to it.
async fn histories_move_into_the_task_rows(cfg: StoreConfig) {
    use crate::domain::{MessageId, Part, TaskId, TenantId};
    let migrate_all = |cfg: StoreConfig| tokio::task::spawn_blocking(move || migrate(&cfg));
    migrate_all(cfg.clone()).await.unwrap().unwrap();
    // The schema of the release before, holding a thread of four messages and two tasks:
    // one whose history is three of them (linked out of order), one with none.
    let parts = serde_json::to_string(&vec![Part::text("hi")]).unwrap();
    let message = |seq: i64, task: &str| {
        format!(
            "INSERT INTO messages (tenant_id, thread_id, seq, message_id, task_id, role, \
             author, content, parts, tool_calls, metadata, created_at) VALUES ('acme', 'ctx', \
             {seq}, 'm{seq}', '{task}', 'user', NULL, 'hi', '{parts}', '[]', NULL, {seq});"
        )
    };
    let task = |id: &str| {
        format!(
            "INSERT INTO tasks (tenant_id, task_id, context_id, state, status_message, \
             status_timestamp, artifacts, transitions, metadata, created_at, updated_at) \
             VALUES ('acme', '{id}', 'ctx', 'working', NULL, 5, '[]', '[]', NULL, 1, 5);"
        )
    };
    let link = |position: i64, seq: i64| {
        format!(
            "INSERT INTO task_history (tenant_id, task_id, position, thread_id, message_seq) \
             VALUES ('acme', 't1', {position}, 'ctx', {seq});"
        )
    };
    let old_rows = [
        "INSERT INTO threads (tenant_id, thread_id, created_at, updated_at, expires_at, \
         status, conversation_context) VALUES ('acme', 'ctx', 1, 5, 99999999999999, 'active', \
         '{}');"
            .to_owned(),
        message(1, "t1"),
        message(2, "t1"),
        message(3, "t1"),
        message(4, "t2"),
        task("t1"),
        task("t2"),
        link(2, 2),
        link(0, 1),
        link(1, 3),
    ]
    .concat();
    let reverted = tokio::task::spawn_blocking({
        let cfg = cfg.clone();
        move || crate::store::revert_through_then(&cfg, "20261125000300", &old_rows)
    })
    .await
    .unwrap()
    .unwrap();
    let first = "2026-11-25-000300_history_in_task_row";
    assert_eq!(reverted, reverted_from(&cfg, first));
    assert_eq!(
        migrate_all(cfg.clone()).await.unwrap().unwrap(),
        migrations_from(&cfg, first)
    );

    let store = open(&cfg).await.unwrap();
    let acme = TenantId::parse("acme").unwrap();
    let ids = |task: &crate::domain::Task| -> Vec<String> {
        task.history
            .iter()
            .map(|m| m.message_id.as_str().to_owned())
            .collect()
    };
    let t1 = TaskId::parse("t1").unwrap();
    let loaded = store.load_task(&acme, &t1).await.unwrap().unwrap();
    assert_eq!(ids(&loaded.task), ["m1", "m3", "m2"], "in position order");
    let t2 = TaskId::parse("t2").unwrap();
    let empty = store.load_task(&acme, &t2).await.unwrap().unwrap();
    assert!(empty.task.history.is_empty());

    // The next turn appends to the carried-over list.
    let mut next = crate::store::MessageRecord {
        tenant: acme.clone(),
        thread_id: loaded.task.context_id.clone(),
        seq: 5,
        message_id: Some(MessageId::parse("m5").unwrap()),
        task_id: Some(t1.clone()),
        role: "agent".into(),
        author: None,
        content: "bye".into(),
        parts: vec![Part::text("bye")],
        tool_calls: serde_json::json!([]),
        metadata: None,
        created_at: crate::domain::Timestamp(6),
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    };
    store
        .commit(&[
            WriteOp::AppendMessage(next.clone()),
            WriteOp::LinkTaskMessage {
                tenant: acme.clone(),
                task_id: t1.clone(),
                position: 3,
                message_seq: 5,
            },
            WriteOp::UpsertTask(crate::store::TaskRecord::of(&loaded.task)),
        ])
        .await
        .unwrap();
    // And a link without the task's row in its batch is appended on its own.
    next.seq = 6;
    next.message_id = Some(MessageId::parse("m6").unwrap());
    store
        .commit(&[
            WriteOp::AppendMessage(next.clone()),
            WriteOp::LinkTaskMessage {
                tenant: acme.clone(),
                task_id: t1.clone(),
                position: 4,
                message_seq: 6,
            },
        ])
        .await
        .unwrap();
    let after = store.load_task(&acme, &t1).await.unwrap().unwrap();
    assert_eq!(ids(&after.task), ["m1", "m3", "m2", "m5", "m6"]);
}

#[tokio::test]
async fn sqlite_histories_move_into_the_task_rows() {
    let dir = tempfile::tempdir().unwrap();
    histories_move_into_the_task_rows(test_config(None, dir.path().to_path_buf())).await;
}

#[tokio::test]
async fn postgres_histories_move_into_the_task_rows() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    histories_move_into_the_task_rows(db.config.clone()).await;
}

/// A database the release before wrote — every status message copied into its task's
/// row and into its logged status update, every message's text into `content` — is
/// carried over by `…_each_fact_once`: the copies become references to the messages'
/// rows wherever those say the same, and every task and event reads back as before.
async fn copies_of_messages_become_references(cfg: StoreConfig) {
    use crate::domain::{
        ContextId, Message, MessageId, Part, Role, StreamEvent, TaskId, TaskState, TaskStatus,
        TenantId, Timestamp,
    };
    use crate::store::testing::query_text;
    let migrate_all = |cfg: StoreConfig| tokio::task::spawn_blocking(move || migrate(&cfg));
    migrate_all(cfg.clone()).await.unwrap().unwrap();
    let ctx = ContextId::parse("ctx").unwrap();
    let msg = |id: &str, task: &str, role: Role, text: &str| Message {
        message_id: MessageId::parse(id).unwrap(),
        context_id: Some(ctx.clone()),
        task_id: Some(TaskId::parse(task).unwrap()),
        role,
        parts: vec![Part::text(text)],
        metadata: None,
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    };
    let asked = msg("m1", "t1", Role::User, "hello");
    let answer = msg("m2", "t1", Role::Agent, "echo: hello");
    let asked_again = msg("m3", "t2", Role::User, "more");
    // A status message with an extension: the release before stored none in the
    // message's row, so only the copy has it.
    let mut waiting = msg("m4", "t2", Role::Agent, "which one?");
    waiting.extensions = vec!["https://example.com/ext".into()];
    let status = |state, message: &Message, at| TaskStatus {
        state,
        message: Some(message.clone()),
        timestamp: Timestamp(at),
    };
    let event = |task: &str, status: TaskStatus| StreamEvent::StatusUpdate {
        task_id: TaskId::parse(task).unwrap(),
        context_id: ctx.clone(),
        status,
        metadata: None,
    };
    let done = status(TaskState::Completed, &answer, 20);
    let asking = status(TaskState::InputRequired, &waiting, 40);
    // A turn answered without a task: its reply, and the claim of its message.
    let mut replied = msg("m5", "t3", Role::Agent, "just a reply");
    replied.task_id = None;
    let done_event = event("t1", done.clone());
    let asking_event = event("t2", asking.clone());

    fn json<T: serde::Serialize>(value: &T) -> String {
        serde_json::to_string(value).unwrap()
    }
    let message_row = |seq: i64, m: &Message| {
        format!(
            "INSERT INTO messages (tenant_id, thread_id, seq, message_id, task_id, role, \
             author, content, parts, tool_calls, metadata, created_at) VALUES ('acme', 'ctx', \
             {seq}, '{}', {}, '{}', NULL, '{}', '{}', '[]', NULL, {seq});",
            m.message_id,
            m.task_id
                .as_ref()
                .map_or("NULL".to_owned(), |t| format!("'{t}'")),
            m.role.as_str(),
            m.text(),
            json(&m.parts),
        )
    };
    let task_row = |id: &str, status: &TaskStatus, history: &str| {
        format!(
            "INSERT INTO tasks (tenant_id, task_id, context_id, state, status_message, \
             status_timestamp, artifacts, transitions, metadata, created_at, updated_at, \
             history) VALUES ('acme', '{id}', 'ctx', '{}', '{}', {}, '[]', '[]', NULL, 1, 5, \
             '{history}');",
            status.state.as_str(),
            json(status.message.as_ref().unwrap()),
            status.timestamp.millis(),
        )
    };
    let event_row = |task: &str, event: &StreamEvent| {
        format!(
            "INSERT INTO task_events (tenant_id, task_id, seq, kind, payload, created_at) \
             VALUES ('acme', '{task}', 1, 'status_update', '{}', 7);",
            json(event)
        )
    };
    let old_rows = [
        "INSERT INTO threads (tenant_id, thread_id, created_at, updated_at, expires_at, \
         status, conversation_context) VALUES ('acme', 'ctx', 1, 5, 99999999999999, 'active', \
         '{}');"
            .to_owned(),
        message_row(1, &asked),
        message_row(2, &answer),
        message_row(3, &asked_again),
        message_row(4, &waiting),
        task_row("t1", &done, "1,2"),
        task_row("t2", &asking, "3,4"),
        event_row("t1", &done_event),
        event_row("t2", &asking_event),
        message_row(5, &replied),
        format!(
            "INSERT INTO idempotency_keys (tenant_id, idem_key, context_id, task_id, digest, \
             reply, created_at) VALUES ('acme', 'k5', 'ctx', 't3', 'd', '{}', 9);",
            json(&replied)
        ),
    ]
    .concat();
    let reverted = tokio::task::spawn_blocking({
        let cfg = cfg.clone();
        move || crate::store::revert_through_then(&cfg, "20261125000400", &old_rows)
    })
    .await
    .unwrap()
    .unwrap();
    let first = "2026-11-25-000400_each_fact_once";
    assert_eq!(reverted, reverted_from(&cfg, first));
    assert_eq!(
        migrate_all(cfg.clone()).await.unwrap().unwrap(),
        migrations_from(&cfg, first)
    );

    // The answer is a reference now; the message with an extension stays a copy.
    let text = |v: &str| Some(v.to_owned());
    assert_eq!(
        query_text(
            &cfg,
            "SELECT task_id, CASE WHEN status_message IS NULL THEN 'none' ELSE 'copy' END, \
             status_entry FROM tasks ORDER BY task_id"
        )
        .await,
        [
            vec![text("t1"), text("none"), text("1")],
            vec![text("t2"), text("copy"), None],
        ]
    );
    let events = query_text(
        &cfg,
        "SELECT task_id, payload, message_seq FROM task_events ORDER BY task_id",
    )
    .await;
    assert_eq!(events[0][2].as_deref(), Some("2"));
    assert!(!events[0][1].as_deref().unwrap().contains("echo: hello"));
    assert_eq!(events[1][2], None);

    assert_eq!(
        query_text(&cfg, "SELECT reply, reply_seq FROM idempotency_keys").await,
        [vec![None, text("5")]]
    );

    // Read back as the release before wrote them.
    let store = open(&cfg).await.unwrap();
    let acme = TenantId::parse("acme").unwrap();
    let claim = store.claim(&acme, "k5").await.unwrap().unwrap();
    assert_eq!(claim.reply, Some(replied));
    for (task, status, history, event) in [
        ("t1", &done, vec![asked, answer], done_event),
        ("t2", &asking, vec![asked_again, waiting], asking_event),
    ] {
        let id = TaskId::parse(task).unwrap();
        let loaded = store.load_task(&acme, &id).await.unwrap().unwrap().task;
        assert_eq!(&loaded.status, status, "{task}");
        if task == "t1" {
            assert_eq!(loaded.history, history, "{task}");
        }
        let logged = store.task_events(&acme, &id, 0, 10).await.unwrap();
        assert_eq!(logged, vec![(1, event)], "{task}");
    }
}

#[tokio::test]
async fn sqlite_copies_of_messages_become_references() {
    let dir = tempfile::tempdir().unwrap();
    copies_of_messages_become_references(test_config(None, dir.path().to_path_buf())).await;
}

#[tokio::test]
async fn postgres_copies_of_messages_become_references() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    copies_of_messages_become_references(db.config.clone()).await;
}

/// The SQLite tables a send writes keep their rows in their primary keys' b-trees: no
/// rowid b-tree beside the key's (`…_rows_in_their_keys`) — but `tasks`, whose open tasks
/// of a thread the planner would otherwise find by scanning the tenant's key range, and
/// `idempotency_keys`, a log in the order of its rowid (`…_claims_in_order`).
#[tokio::test]
async fn sqlite_send_tables_keep_their_rows_in_their_keys() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = test_config(None, dir.path().to_path_buf());
    open(&cfg).await.unwrap();
    let tables = crate::store::testing::query_text(
        &cfg,
        "SELECT name, wr FROM pragma_table_list WHERE name IN ('threads', 'messages', \
         'tasks', 'task_events', 'idempotency_keys') ORDER BY name",
    )
    .await;
    let text = |v: &str| Some(v.to_owned());
    assert_eq!(
        tables,
        [
            ("idempotency_keys", "0"),
            ("messages", "1"),
            ("task_events", "1"),
            ("tasks", "0"),
            ("threads", "1")
        ]
        .map(|(t, wr)| vec![text(t), text(wr)])
    );
    // A thread's reload finds its open tasks through tasks_open (`tables/tasks.rs` `open_of_thread`),
    // never among all the thread's tasks nor by a scan of all the tenant's.
    let sql = super::open_tasks_sql(crate::store::statement::Dialect::Sqlite)
        .replacen('?', "'a'", 1)
        .replacen('?', "'c'", 1);
    let plan = crate::store::testing::query_text(&cfg, &format!("EXPLAIN QUERY PLAN {sql}")).await;
    let plan: Vec<String> = plan.into_iter().filter_map(|r| r[3].clone()).collect();
    assert!(
        plan.iter().any(|step| step.contains("INDEX tasks_open")),
        "{sql}: {plan:?}"
    );
    assert!(
        !plan.iter().any(|step| step.contains("TEMP B-TREE")),
        "{plan:?}"
    );
}

/// Writing a task row builds no temporary b-tree: SQLite evaluates a partial index's
/// `WHERE` on each write of a row, and an `IN` list of more than two constants there
/// would be built into one for every run of the statement.
#[tokio::test]
async fn sqlite_task_writes_build_no_temporary_btree() {
    use crate::store::writes::sqlite as sql;
    let dir = tempfile::tempdir().unwrap();
    let cfg = test_config(None, dir.path().to_path_buf());
    open(&cfg).await.unwrap();
    let conn = rusqlite::Connection::open(dir.path().join(SQLITE_FILE)).unwrap();
    for statement in [sql::INSERT_TASK, sql::UPSERT_TASK, sql::APPEND_HISTORY] {
        let mut explain = conn.prepare(&format!("EXPLAIN {statement}")).unwrap();
        // Unbound parameters: the program is listed, not run.
        let mut rows = explain.raw_query();
        let mut opcodes: Vec<String> = Vec::new();
        while let Some(row) = rows.next().unwrap() {
            opcodes.push(row.get(1).unwrap());
        }
        assert!(opcodes.iter().any(|op| op == "Insert"), "{opcodes:?}");
        assert!(
            !opcodes.iter().any(|op| op == "OpenEphemeral"),
            "{statement}: {opcodes:?}"
        );
    }
}

/// SQLite's checkpoints run on a thread of their own once the WAL holds
/// `store.sqlite_checkpoint_pages`, never inside the writer's commits.
#[test]
fn sqlite_checkpoints_run_beside_the_writer_once_the_wal_is_due() {
    use super::{context, tenant, thread};
    use crate::store::BlockingCommit;
    use crate::store::sqlite;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent-a2a.db");
    sqlite::migrate(&path).unwrap();
    // No free pages (the migrations' rebuilt tables left some) for new ones to reuse.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("VACUUM")
        .unwrap();
    let cfg = StoreConfig {
        sqlite_synchronous: SqliteSynchronous::Full,
        sqlite_checkpoint_pages: 16,
        sqlite_claim_buffer: 1024,
        ..test_config(None, dir.path().to_path_buf())
    };
    let writer = sqlite::SqliteWriter::open(&path, &cfg).unwrap();
    let db_size = || std::fs::metadata(&path).unwrap().len();
    let before = db_size();
    let t = tenant("acme");
    // One commit per new thread.
    let commit_threads = |ids: std::ops::Range<i64>| {
        for i in ids {
            let ctx = context(&format!("c-{i:04}"));
            let op = WriteOp::UpsertThread(thread(&t, &ctx, 100 + i));
            writer
                .commit_blocking(&[std::slice::from_ref(&op)])
                .unwrap();
        }
    };
    commit_threads(0..200);
    assert!(
        writer.checkpoints().wait_past(0, Duration::from_secs(10)) >= 1,
        "no checkpoint ran"
    );
    assert!(
        db_size() > before,
        "the checkpoint copied the WAL's new pages into the database file"
    );

    // The WAL starts over once checkpointed to its end: it stays a few thresholds long
    // however much is written (1 000 commits of two pages or more would be 8 MB).
    commit_threads(200..1200);
    let wal = std::fs::metadata(dir.path().join("agent-a2a.db-wal"))
        .unwrap()
        .len();
    assert!(wal < 2 << 20, "the WAL grew to {wal} bytes");
}

/// A statement that binds its `LIMIT` (as diesel's `.limit()` and `.first()` do) runs again
/// with another value without being compiled again: the bundled SQLite keeps plans
/// independent of bound values (`LIBSQLITE3_FLAGS` in `.cargo/config.toml`).
#[test]
fn sqlite_statements_binding_a_limit_are_not_compiled_again() {
    let dir = tempfile::tempdir().unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("plans.db")).unwrap();
    conn.execute_batch(
        "CREATE TABLE t (k TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (k, n)); \
         INSERT INTO t VALUES ('a', 1), ('a', 2), ('a', 3);",
    )
    .unwrap();
    let mut stmt = conn
        .prepare("SELECT n FROM t WHERE k = ?1 ORDER BY n DESC LIMIT ?2")
        .unwrap();
    for limit in [1, 2, 3, 1] {
        let rows: Vec<i64> = stmt
            .query_map(rusqlite::params!["a", limit], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(rows.len(), limit as usize);
    }
    assert_eq!(
        stmt.get_status(rusqlite::StatementStatus::RePrepare),
        0,
        "compiled again for a new LIMIT"
    );
}

/// The WAL stays within `store.sqlite_max_wal_pages` when the checkpoint thread cannot
/// keep it short (here a reader holds on to its older pages): the writer checkpoints it
/// itself, waiting for the reader, and the file is cut back when it starts over.
#[test]
fn the_sqlite_wal_stays_within_its_bound_while_a_reader_holds_it() {
    use super::{context, tenant, thread};
    use crate::store::BlockingCommit;
    use crate::store::sqlite;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent-a2a.db");
    sqlite::migrate(&path).unwrap();
    let cfg = StoreConfig {
        sqlite_synchronous: SqliteSynchronous::Normal,
        sqlite_checkpoint_pages: 16,
        sqlite_max_wal_pages: 64,
        sqlite_claim_buffer: 1024,
        ..test_config(None, dir.path().to_path_buf())
    };
    let writer = sqlite::SqliteWriter::open(&path, &cfg).unwrap();
    let (written, heard) = std::sync::mpsc::channel::<()>();
    let reader_path = path.clone();
    let reader = std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(&reader_path).unwrap();
        conn.execute_batch("BEGIN; SELECT count(*) FROM threads;")
            .unwrap();
        // Holds its snapshot until the writer is done, or, while the writer waits for
        // it, a while.
        let _ = heard.recv_timeout(Duration::from_secs(2));
        conn.execute_batch("COMMIT").unwrap();
    });
    let t = tenant("acme");
    for i in 0..400 {
        let op = WriteOp::UpsertThread(thread(&t, &context(&format!("c-{i:04}")), 100 + i));
        writer
            .commit_blocking(&[std::slice::from_ref(&op)])
            .unwrap();
    }
    let _ = written.send(());
    reader.join().unwrap();
    // One more commit after the reader left: the WAL starts over, cut back.
    let op = WriteOp::UpsertThread(thread(&t, &context("last"), 1));
    writer
        .commit_blocking(&[std::slice::from_ref(&op)])
        .unwrap();
    let wal = std::fs::metadata(dir.path().join("agent-a2a.db-wal"))
        .unwrap()
        .len();
    // 64 pages of 4 KiB, and a commit's frames past them.
    assert!(wal <= (64 + 16) * 4096, "the WAL is {wal} bytes");
}
