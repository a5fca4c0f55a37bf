//! Real stores on throwaway databases, for tests anywhere in the crate.
//!
//! SQLite stores live in a `TempDir`. Postgres stores get a database of their own
//! (`agent_a2a_t_<uuid>`) created through the admin URL (`TEST_DATABASE_URL`, else
//! `DATABASE_URL`, else the local default) and dropped when the handle goes, even when the
//! test panicked. When Postgres cannot be reached, a test is skipped with a note on
//! stderr, except in CI (`CI=true`), where a silently skipped suite would hide a broken
//! backend: there it fails.

use std::sync::Arc;
use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use tempfile::TempDir;

use super::{Store, StoreConfig};

/// Used when neither `TEST_DATABASE_URL` nor `DATABASE_URL` is set.
pub(crate) const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// How long the admin connection may take before Postgres counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A store configuration with small test-sized limits.
pub(crate) fn test_config(
    database_url: Option<String>,
    data_dir: std::path::PathBuf,
) -> StoreConfig {
    StoreConfig {
        database_url,
        data_dir,
        pool_size: 4,
        acquire_timeout_ms: 2000,
        answer_timeout_ms: 5000,
        sqlite_synchronous: Default::default(),
        sqlite_wal_one_write: true,
        sqlite_checkpoint_pages: 1000,
        sqlite_max_wal_pages: 64_000,
        sqlite_claim_buffer: 262_144,
        commits_in_flight: 2,
        fence: None,
        hold: None,
        lock_wait_ms: 0,
    }
}

/// An SQLite store in a temporary directory removed on drop.
pub(crate) struct SqliteTestStore {
    pub(crate) store: Arc<dyn Store>,
    _dir: TempDir,
}

impl SqliteTestStore {
    pub(crate) async fn open() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let config = test_config(None, dir.path().to_path_buf());
        let store = super::open(&config).await.expect("open the SQLite store");
        Self { store, _dir: dir }
    }

    /// The same database opened anew, as a restarted process opens it.
    pub(crate) async fn reopen(self) -> Self {
        drop(self.store);
        let config = test_config(None, self._dir.path().to_path_buf());
        let store = super::open(&config).await.expect("reopen the SQLite store");
        Self {
            store,
            _dir: self._dir,
        }
    }
}

/// The Postgres server tests use, from the environment.
pub(crate) fn pg_admin_url() -> String {
    ["TEST_DATABASE_URL", "DATABASE_URL"]
        .into_iter()
        .filter_map(|name| std::env::var(name).ok())
        .find(|url| !url.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_PG_URL.to_owned())
}

/// `url` with its database name replaced by `database` (query parameters kept).
fn with_database(url: &str, database: &str) -> String {
    let (base, params) = match url.split_once('?') {
        Some((base, params)) => (base, Some(params)),
        None => (url, None),
    };
    let host_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[host_start..].find('/') {
        Some(slash) => &base[..host_start + slash],
        None => base,
    };
    match params {
        Some(params) => format!("{base}/{database}?{params}"),
        None => format!("{base}/{database}"),
    }
}

/// A fresh, empty Postgres database that is dropped with this handle.
pub(crate) struct PgTestDb {
    pub(crate) config: StoreConfig,
    admin_url: String,
    name: String,
}

impl PgTestDb {
    /// Creates the database, or returns `None` (after saying why on stderr) when Postgres
    /// is unreachable outside CI. Panics in CI, and on any other failure.
    pub(crate) async fn create() -> Option<Self> {
        let admin_url = pg_admin_url();
        let mut admin =
            match tokio::time::timeout(CONNECT_TIMEOUT, AsyncPgConnection::establish(&admin_url))
                .await
            {
                Ok(Ok(conn)) => conn,
                Ok(Err(e)) => return unreachable(&admin_url, &e.to_string()),
                Err(_) => return unreachable(&admin_url, "connection timed out"),
            };
        let name = format!("agent_a2a_t_{}", uuid::Uuid::new_v4().simple());
        diesel::sql_query(format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .expect("create the test database");
        let url = with_database(&admin_url, &name);
        Some(Self {
            config: test_config(Some(url), std::env::temp_dir()),
            admin_url,
            name,
        })
    }

    /// Migrates the database (no store opened) and returns its URL.
    pub(crate) async fn migrated_url(&self) -> String {
        let url = self.config.database_url.clone().expect("a Postgres URL");
        let to_migrate = url.clone();
        tokio::task::spawn_blocking(move || super::postgres::migrate(&to_migrate, false))
            .await
            .expect("the migration thread")
            .expect("migrate the test database");
        url
    }

    /// Migrates the database and opens a store on it.
    pub(crate) async fn open(&self) -> Arc<dyn Store> {
        super::open(&self.config)
            .await
            .expect("open the Postgres store")
    }
}

fn unreachable(url: &str, error: &str) -> Option<PgTestDb> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("Postgres not reachable at {url} (required in CI): {error}");
    }
    eprintln!("skipping: Postgres not reachable at {url}: {error}");
    None
}

impl Drop for PgTestDb {
    /// Best effort: drops the database on a thread with its own runtime, because `drop`
    /// cannot await and may run while the test's runtime is unwinding. `WITH (FORCE)`
    /// ends the store's pooled connections, which may still be open.
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let dropper = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                if let Ok(mut admin) = AsyncPgConnection::establish(&admin_url).await {
                    let _ = diesel::sql_query(sql).execute(&mut admin).await;
                }
            });
        });
        let _ = dropper.join();
    }
}

/// A value as `simple_query` renders it, a `bytea` (`\\x…`) unpacked (`packed.rs`).
fn unpacked(value: &str) -> String {
    let Some(hex) = value.strip_prefix("\\x") else {
        return value.to_owned();
    };
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex from Postgres"))
        .collect();
    super::packed::unpack(&bytes).expect("a packed value")
}

/// Runs `sql` on the store's database and returns every row, each column as text (NULL:
/// `None`; a Postgres `bytea`, a packed id, as the text it stands for): a look at how the
/// store lays its rows out, beside what it reads back.
pub(crate) async fn query_text(config: &StoreConfig, sql: &str) -> Vec<Vec<Option<String>>> {
    match config.location().expect("a store location") {
        super::Location::Postgres(url) => {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .expect("connect to the test database");
            let driver = tokio::spawn(connection);
            let rows = client
                .simple_query(sql)
                .await
                .expect("query the test database")
                .into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(row) => {
                        Some((0..row.len()).map(|i| row.get(i).map(unpacked)).collect())
                    }
                    _ => None,
                })
                .collect();
            drop(client);
            let _ = driver.await;
            rows
        }
        super::Location::Sqlite(path) => {
            let sql = sql.to_owned();
            tokio::task::spawn_blocking(move || {
                use rusqlite::types::ValueRef;
                let conn = rusqlite::Connection::open(path).expect("open the test database");
                let mut stmt = conn.prepare(&sql).expect("prepare");
                let n = stmt.column_count();
                stmt.query_map([], |row| {
                    (0..n)
                        .map(|i| {
                            Ok(match row.get_ref(i)? {
                                ValueRef::Null => None,
                                ValueRef::Integer(v) => Some(v.to_string()),
                                ValueRef::Real(v) => Some(v.to_string()),
                                ValueRef::Text(t) | ValueRef::Blob(t) => {
                                    Some(String::from_utf8_lossy(t).into_owned())
                                }
                            })
                        })
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .expect("query the test database")
                .collect::<rusqlite::Result<Vec<_>>>()
                .expect("read the rows")
            })
            .await
            .expect("the query thread")
        }
    }
}

mod tests {
    use super::with_database;

    #[test]
    fn database_names_are_replaced_in_urls() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/test", "x"),
            "postgres://u:p@h:5432/x"
        );
        assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
        assert_eq!(
            with_database("postgres://h/db?sslmode=disable", "x"),
            "postgres://h/x?sslmode=disable"
        );
    }
}
