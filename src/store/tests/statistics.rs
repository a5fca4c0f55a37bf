//! Postgres: the server analyzes its tables as they double, so that statements kept
//! prepared are planned again from the tables' present size.

use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::{context, task, tenant};
use crate::domain::TaskState;
use crate::store::postgres::PgStore;
use crate::store::testing::PgTestDb;
use crate::store::{Store, WriteOp};

#[derive(diesel::QueryableByName)]
struct Analyzed {
    #[diesel(sql_type = diesel::sql_types::Double)]
    tuples: f64,
}

/// What the last analysis of `table` counted (-1: never analyzed nor vacuumed).
async fn tuples(url: &str, table: &str) -> f64 {
    let mut conn = AsyncPgConnection::establish(url).await.unwrap();
    diesel::sql_query(format!(
        "SELECT reltuples::float8 AS tuples FROM pg_class WHERE relname = '{table}'"
    ))
    .get_result::<Analyzed>(&mut conn)
    .await
    .unwrap()
    .tuples
}

/// Writes `n` tasks numbered from `first`.
async fn write_tasks(store: &PgStore, first: usize, n: usize) {
    let t = tenant("acme");
    let ctx = context("many");
    for chunk in (first..first + n).collect::<Vec<_>>().chunks(500) {
        let ops: Vec<WriteOp> = chunk
            .iter()
            .map(|i| {
                let task = task(&t, &ctx, &format!("task-{i:06}"), TaskState::Working, 1);
                WriteOp::UpsertTask(task.into())
            })
            .collect();
        store.commit(&ops).await.unwrap();
    }
}

#[tokio::test]
async fn a_table_is_analyzed_each_time_it_has_doubled() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let url = db.migrated_url().await;
    let store = PgStore::new(&url, 2, 1, Duration::from_secs(5), None, None).unwrap();

    // Fresh tables are below the floor: nothing to do.
    assert_eq!(
        store.refresh_statistics().await.unwrap(),
        Vec::<&str>::new()
    );
    assert_eq!(tuples(&url, "tasks").await, -1.0, "never analyzed");

    write_tasks(&store, 0, 2000).await;
    assert_eq!(store.refresh_statistics().await.unwrap(), ["tasks"]);
    assert_eq!(tuples(&url, "tasks").await, 2000.0);
    // Not grown since: left alone.
    assert_eq!(
        store.refresh_statistics().await.unwrap(),
        Vec::<&str>::new()
    );

    // Half as much again is not twice the size.
    write_tasks(&store, 2000, 1000).await;
    assert_eq!(
        store.refresh_statistics().await.unwrap(),
        Vec::<&str>::new()
    );
    // Twice as much is.
    write_tasks(&store, 3000, 1500).await;
    assert_eq!(store.refresh_statistics().await.unwrap(), ["tasks"]);
    // (An estimate from a sample of the table now.)
    let estimate = tuples(&url, "tasks").await;
    assert!((4000.0..=5000.0).contains(&estimate), "{estimate}");
}

/// A thread's reload reads its open tasks through `tasks_open`, under the generic plan
/// a statement kept prepared comes to (its parameters unknown): never among every task
/// the thread has had.
#[tokio::test]
async fn a_reload_reads_open_tasks_through_their_own_index() {
    use crate::store::testing::query_text;
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let cfg = db.config.clone();
    drop(crate::store::open(&cfg).await.unwrap());
    query_text(
        &cfg,
        "INSERT INTO tasks (tenant_id, task_id, context_id, state, status_timestamp, \
         artifacts, transitions, created_at, updated_at, history) SELECT 'acme', a2a_id('k-' || i), \
         a2a_id('c'), CASE WHEN i % 1000 = 0 THEN 'working' ELSE 'completed' END, 0, '[]', '[]', \
         i, i, '' FROM generate_series(1, 20000) i; ANALYZE tasks",
    )
    .await;
    let sql = super::open_tasks_sql(crate::store::statement::Dialect::Postgres);
    let plan: Vec<String> = query_text(
        &cfg,
        &format!(
            "SET plan_cache_mode = force_generic_plan; PREPARE open_tasks(text, bytea) AS {sql}; \
             EXPLAIN (COSTS OFF) EXECUTE open_tasks('acme', a2a_id('c'))"
        ),
    )
    .await
    .into_iter()
    .filter_map(|r| r.into_iter().next().flatten())
    .collect();
    let plan = plan.join("\n");
    assert!(plan.contains("tasks_open"), "{sql}\n{plan}");
    assert!(!plan.contains("Sort"), "{sql}\n{plan}");
}
