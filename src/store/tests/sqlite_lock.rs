//! One process per SQLite file: opens within the process share the file's lock, and a
//! lock held by another process refuses the store, the memory repository and the
//! migrations alike.

use std::fs::{File, TryLockError};
use std::path::Path;

use crate::store::testing::test_config;
use crate::store::{SQLITE_FILE, StoreError, migrate, open, open_memories};

/// Whether another open description of the lock file — what another process would have
/// — finds it locked. (`flock` locks conflict between descriptions even in one process.)
fn locked_elsewhere(lock_file: &Path) -> bool {
    let file = File::open(lock_file).expect("the lock file exists");
    match file.try_lock() {
        Ok(()) => false,
        Err(TryLockError::WouldBlock) => true,
        Err(TryLockError::Error(e)) => panic!("cannot try the lock: {e}"),
    }
}

#[tokio::test]
async fn opens_in_one_process_share_the_lock_until_the_last_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = test_config(None, dir.path().to_path_buf());
    let lock_file = dir.path().join(format!("{SQLITE_FILE}.lock"));

    let first = open(&cfg).await.expect("the first open");
    let second = open(&cfg)
        .await
        .expect("a second open in the same process shares the lock");
    let memories = open_memories(&cfg).expect("so does the memory repository");
    second.ping().await.unwrap();
    memories.ping().await.unwrap();
    assert!(locked_elsewhere(&lock_file), "another process is kept out");

    drop(first);
    drop(memories);
    assert!(
        locked_elsewhere(&lock_file),
        "held while one holder is left"
    );
    second.ping().await.unwrap();

    drop(second);
    assert!(
        !locked_elsewhere(&lock_file),
        "released with the last holder"
    );
    let again = open(&cfg)
        .await
        .expect("a fresh open after both are dropped");
    again.ping().await.unwrap();
    assert!(locked_elsewhere(&lock_file), "and taken again");
}

#[tokio::test]
async fn a_file_another_process_holds_is_refused_naming_the_lock_and_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = test_config(None, dir.path().to_path_buf());
    let lock_file = dir.path().join(format!("{SQLITE_FILE}.lock"));
    // The lock as another process would hold it: a description outside this process's
    // registry.
    let other = File::create(&lock_file).unwrap();
    other.try_lock().unwrap();

    let in_use = |result: Result<(), StoreError>, what: &str| match result {
        Err(e @ StoreError::InUse { .. }) => e.to_string(),
        other => panic!("{what}: expected InUse, got {other:?}"),
    };
    let message = in_use(open(&cfg).await.map(drop), "open");
    let canonical_lock = std::fs::canonicalize(&lock_file).unwrap();
    for part in [
        "is in use by another agent-a2a process",
        &canonical_lock.display().to_string(),
        "store.data_dir",
        "Postgres (DATABASE_URL)",
    ] {
        assert!(message.contains(part), "{part:?} missing from: {message}");
    }
    let migrated = tokio::task::spawn_blocking({
        let cfg = cfg.clone();
        move || migrate(&cfg)
    })
    .await
    .unwrap();
    in_use(migrated.map(drop), "migrate");
    in_use(open_memories(&cfg).map(drop), "the memory repository");
    assert!(
        !dir.path().join(SQLITE_FILE).exists(),
        "nothing touched the database"
    );

    drop(other);
    open(&cfg)
        .await
        .expect("opens once the other process let go")
        .ping()
        .await
        .unwrap();
}
