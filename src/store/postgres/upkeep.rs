//! What keeps Postgres' plans and storage sound as the tables grow: the server's own
//! analyses of tables that grew ([`analyze_grown`], every `store.postgres_analyze_interval_secs`), the check that
//! autovacuum will run ([`vacuum_gaps`]), and the operators' census.

use diesel_async::AsyncPgConnection;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;

use crate::store::StoreError;

/// The tables whose statements' plans depend on their size: every one a request reads
/// or writes by key.
const ANALYZED_TABLES: [&str; 7] = [
    "threads",
    "messages",
    "tasks",
    "task_events",
    "idempotency_keys",
    "push_configs",
    "push_outbox",
];

/// Tables smaller than this many pages (of 8 KiB) are not analyzed by the server: what
/// a plan costs there does not matter.
const ANALYZE_FLOOR_PAGES: i64 = 16;

/// Tables that were this many pages (8 MiB) or more at their last analysis are left to
/// autovacuum: a plan made from statistics of that size already takes a key's index
/// over a tenant's whole range, and growing does not change that.
const ANALYZE_CEILING_PAGES: i64 = 1024;

/// The statistics target of the server's own analyses (Postgres' default is 100): a
/// sample of 3 000 rows instead of 30 000 is enough to choose between a key and a
/// tenant's range, at a tenth of the cost, and autovacuum's later analyses refine it.
const ANALYZE_STATISTICS_TARGET: u32 = 10;

#[derive(diesel::QueryableByName)]
struct Grown {
    #[diesel(sql_type = diesel::sql_types::Text)]
    name: String,
}

/// See `PgStore::analyze_grown_tables`.
pub(super) async fn analyze_grown(
    conn: &mut &AsyncPgConnection,
) -> Result<Vec<&'static str>, StoreError> {
    use diesel::sql_types::{Array, BigInt, Text};
    use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
    // `relpages` is what the last ANALYZE or VACUUM found (0 before either).
    let grown: Vec<Grown> = diesel::sql_query(
        "SELECT c.relname::text AS name FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname = ANY($1) \
         AND c.relpages < $3 \
         AND pg_relation_size(c.oid) / current_setting('block_size')::bigint \
             >= greatest(2 * c.relpages::bigint, $2) \
         ORDER BY c.relname",
    )
    .bind::<Array<Text>, _>(&ANALYZED_TABLES[..])
    .bind::<BigInt, _>(ANALYZE_FLOOR_PAGES)
    .bind::<BigInt, _>(ANALYZE_CEILING_PAGES)
    .load(conn)
    .await?;
    let mut analyzed = Vec::with_capacity(grown.len());
    for Grown { name } in grown {
        // Only names of the list are run (they are its own `'static` strings).
        if let Some(table) = ANALYZED_TABLES.iter().find(|t| **t == name) {
            conn.batch_execute(&format!(
                "SET default_statistics_target = {ANALYZE_STATISTICS_TARGET}; \
                 ANALYZE \"{table}\"; RESET default_statistics_target"
            ))
            .await?;
            analyzed.push(*table);
        }
    }
    Ok(analyzed)
}

/// Why autovacuum would leave the server's tables alone: the server's settings that
/// turn it off, and the tables that opt out of it.
#[derive(Debug, PartialEq, Eq, diesel::QueryableByName)]
pub(in crate::store) struct VacuumGaps {
    /// `autovacuum` or `track_counts` (which autovacuum needs) is off, by name.
    #[diesel(sql_type = diesel::sql_types::Array<diesel::sql_types::Text>)]
    pub settings_off: Vec<String>,
    /// Tables of the current schema with `autovacuum_enabled` set false.
    #[diesel(sql_type = diesel::sql_types::Array<diesel::sql_types::Text>)]
    pub tables_off: Vec<String>,
}

impl VacuumGaps {
    fn any(&self) -> bool {
        !self.settings_off.is_empty() || !self.tables_off.is_empty()
    }
}

/// Reads [`VacuumGaps`] on `conn`.
pub(in crate::store) fn vacuum_gaps(
    conn: &mut AsyncConnectionWrapper<AsyncPgConnection>,
) -> Result<VacuumGaps, StoreError> {
    use diesel::RunQueryDsl;
    // A table's option reads `autovacuum_enabled=<value>` in `reloptions`, the value as
    // written: any spelling of false Postgres accepts (`false`, `off`, `no`, `0`, their
    // prefixes, any case).
    Ok(diesel::sql_query(
        "SELECT ARRAY(SELECT name::text FROM pg_settings \
             WHERE name IN ('autovacuum', 'track_counts') AND setting = 'off' ORDER BY name) \
             AS settings_off, \
         ARRAY(SELECT c.relname::text FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = current_schema() AND c.relkind = 'r' \
             AND EXISTS (SELECT 1 FROM unnest(c.reloptions) o \
                 WHERE o ~* '^autovacuum_enabled=(f|fa|fal|fals|false|n|no|of|off|0)$') \
             ORDER BY c.relname) AS tables_off",
    )
    .get_result(conn)?)
}

/// Every send updates a task's row and the janitor deletes rows, and Postgres reuses
/// their space only once they are vacuumed: when autovacuum leaves the tables out, the
/// store grows without end unless the operator vacuums. Says so once at start-up (and in
/// [`POSTGRES_AUTOVACUUM_OFF`](crate::telemetry::POSTGRES_AUTOVACUUM_OFF)); a failed
/// check is logged and changes nothing.
pub(super) fn warn_if_not_vacuumed(conn: &mut AsyncConnectionWrapper<AsyncPgConnection>) {
    match vacuum_gaps(conn) {
        Ok(gaps) => {
            metrics::gauge!(crate::telemetry::POSTGRES_AUTOVACUUM_OFF).set(if gaps.any() {
                1.0
            } else {
                0.0
            });
            if gaps.any() {
                tracing::warn!(
                    settings_off = ?gaps.settings_off,
                    tables_off = ?gaps.tables_off,
                    "Postgres' autovacuum leaves this server's tables out: the space of \
                     updated and deleted rows (every send updates its task; the janitor \
                     deletes) is not reused, so the database grows until VACUUM is run"
                );
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not read Postgres' autovacuum settings"),
    }
}

/// Active threads and tasks by state: two statements of one read connection.
pub(super) async fn census(
    conn: &mut &AsyncPgConnection,
    now: crate::domain::Timestamp,
) -> Result<crate::store::Census, StoreError> {
    use crate::store::schema::{tasks, threads};
    use diesel::{ExpressionMethods, QueryDsl};
    use diesel_async::RunQueryDsl;
    let active_threads: i64 = threads::table
        .filter(threads::status.eq(crate::store::ThreadStatus::Active.as_str()))
        .filter(threads::expires_at.gt(now.millis()))
        .count()
        .get_result(conn)
        .await?;
    let by_state: Vec<(String, i64)> = tasks::table
        .group_by(tasks::state)
        .select((tasks::state, diesel::dsl::count_star()))
        .order(tasks::state.asc())
        .load(conn)
        .await?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(crate::store::Census {
        active_threads: count(active_threads),
        tasks_by_state: by_state
            .into_iter()
            .map(|(state, n)| (state, count(n)))
            .collect(),
    })
}
