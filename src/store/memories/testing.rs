//! Real memory repositories on throwaway databases, for tests anywhere in the crate: an
//! SQLite file in a temporary directory, or a fresh Postgres database
//! ([`PgTestDb`](crate::store::testing::PgTestDb), skipped loudly when no server is
//! reachable outside CI), both migrated like production.

use std::sync::Arc;

use tempfile::TempDir;

use super::MemoryRepository;
use crate::store::testing::{PgTestDb, test_config};
use crate::store::{StoreConfig, migrate};

async fn migrated(config: &StoreConfig) -> Arc<dyn MemoryRepository> {
    let to_migrate = config.clone();
    tokio::task::spawn_blocking(move || migrate(&to_migrate))
        .await
        .expect("the migration task")
        .expect("migrate the test database");
    super::open(config).expect("open the memory repository")
}

/// A repository on an SQLite file removed on drop.
pub(crate) struct SqliteMemories {
    pub(crate) repo: Arc<dyn MemoryRepository>,
    _dir: TempDir,
}

impl SqliteMemories {
    pub(crate) async fn open() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let repo = migrated(&test_config(None, dir.path().to_path_buf())).await;
        Self { repo, _dir: dir }
    }
}

/// A repository on a Postgres database dropped on drop.
pub(crate) struct PgMemories {
    pub(crate) repo: Arc<dyn MemoryRepository>,
    _db: PgTestDb,
}

impl PgMemories {
    /// `None` (after saying why) when Postgres is unreachable outside CI.
    pub(crate) async fn create() -> Option<Self> {
        let db = PgTestDb::create().await?;
        let repo = migrated(&db.config).await;
        Some(Self { repo, _db: db })
    }
}

/// Generates, for each named `async fn(Arc<dyn MemoryRepository>)` of the enclosing
/// module, a `sqlite::<name>` and a `postgres::<name>` test.
macro_rules! on_both_memory_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    let db = $crate::store::memories::testing::SqliteMemories::open().await;
                    super::$name(db.repo.clone()).await;
                }
            )*
        }

        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    let Some(db) = $crate::store::memories::testing::PgMemories::create().await
                    else {
                        return;
                    };
                    super::$name(db.repo.clone()).await;
                }
            )*
        }
    };
}

pub(crate) use on_both_memory_backends;
