//! Opening stores: URL selection, migrations and failing fast when Postgres is down.

use std::time::Duration;

use crate::store::postgres::PgStore;
use crate::store::testing::{PgTestDb, test_config};
use crate::store::{
    Location, SQLITE_FILE, SqliteSynchronous, StoreConfig, StoreError, WriteOp, migrate, open,
};

/// Every migration, in the order they apply.
const ALL_MIGRATIONS: [&str; 9] = [
    "2026-11-22-000000_init",
    "2026-11-22-000100_memories",
    "2026-11-23-000000_thread_recovery",
    "2026-11-24-000000_push",
    "2026-11-24-000100_idempotency",
    "2026-11-25-000000_cluster",
    "2026-11-25-000100_write_checks",
    "2026-11-25-000200_one_thread_time_index",
    "2026-11-25-000300_history_in_task_row",
];

fn postgres_migrations() -> Vec<String> {
    ALL_MIGRATIONS.map(str::to_owned).to_vec()
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
    // SQLite has no `a2a_require`: its commits read their answers before they commit.
    let sqlite: Vec<String> = ALL_MIGRATIONS
        .iter()
        .filter(|m| !m.ends_with("_write_checks"))
        .map(|m| m.to_string())
        .collect();
    assert_eq!(first, Ok(sqlite));
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
        move || crate::store::revert_last_migration_then(&cfg, &old_rows)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(reverted, "20261125000300", "the version reverted");
    assert_eq!(
        migrate_all(cfg.clone()).await.unwrap().unwrap(),
        vec!["2026-11-25-000300_history_in_task_row"]
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
            WriteOp::UpsertTask(loaded.task.row()),
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
    let writer = sqlite::SqliteWriter::open(&path, SqliteSynchronous::Full, 16).unwrap();
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
