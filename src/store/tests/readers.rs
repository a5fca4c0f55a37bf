//! Postgres reads run on connections of the reading thread's own (`postgres/readers.rs`), and
//! `pool_size` bounds the read connections of every thread together.

use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use diesel::sql_types::Integer;
use diesel_async::RunQueryDsl;

use super::{context, tenant};
use crate::store::postgres::PgStore;
use crate::store::postgres::readers::PgRead;
use crate::store::testing::PgTestDb;
use crate::store::{Store, StoreError};

/// Runs `f` on a thread of its own with a runtime of its own (as an HTTP worker or an
/// actor arbiter is), and hands back what it returned.
fn on_thread<T: Send + 'static>(
    f: impl FnOnce(tokio::runtime::Runtime) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        f(rt)
    })
}

/// The server process behind one of `store`'s read connections taken on this thread.
async fn backend_pid(store: &PgStore) -> i32 {
    let mut conn = store.readers().pool().unwrap().get().await.unwrap();
    diesel::select(diesel::dsl::sql::<Integer>("pg_backend_pid()"))
        .get_result::<i32>(&mut **conn)
        .await
        .unwrap()
}

/// Reads an unknown thread on a new thread (of its own runtime): whether it read as none.
fn read_elsewhere(store: &Arc<PgStore>) -> Result<bool, StoreError> {
    let store = store.clone();
    on_thread(move |rt| {
        rt.block_on(store.load_thread(&tenant("acme"), &context("nobody"), 4))
            .map(|s| s.is_none())
    })
    .join()
    .unwrap()
}

async fn store(db: &PgTestDb, pool_size: usize, acquire: Duration) -> (Arc<PgStore>, String) {
    let url = db.migrated_url().await;
    let store = PgStore::new(&url, pool_size, 1, acquire, None, None).unwrap();
    (Arc::new(store), url)
}

#[tokio::test]
async fn each_thread_reads_on_connections_it_opened() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (store, _) = store(&db, 4, Duration::from_secs(5)).await;
    // The first thread's connection stays open and idle (its runtime running) while the
    // second reads: one pool for both would hand the second that same connection.
    let done = Arc::new(Barrier::new(2));
    let (first_pid, first) = {
        let (store, done) = (store.clone(), done.clone());
        let (tx, rx) = mpsc::channel();
        let handle = on_thread(move |rt| {
            rt.block_on(async {
                tx.send(backend_pid(&store).await).unwrap();
                tokio::task::spawn_blocking(move || done.wait())
                    .await
                    .unwrap();
            })
        });
        (rx.recv().unwrap(), handle)
    };
    let second_pid = {
        let store = store.clone();
        on_thread(move |rt| rt.block_on(backend_pid(&store)))
            .join()
            .unwrap()
    };
    done.wait();
    first.join().unwrap();
    assert_ne!(first_pid, second_pid, "both threads read on one connection");
    assert_eq!(store.readers().threads(), 2);
    assert_eq!(store.readers().open_connections(), 2);
}

#[tokio::test]
async fn read_connections_of_all_threads_stay_within_the_pool_size() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (store, url) = store(&db, 2, Duration::from_secs(5)).await;
    let (acme, nobody) = (tenant("acme"), context("nobody"));
    // Three threads read one after the other, each keeping its runtime running (and so
    // its idle connection's I/O) until all have read.
    let all_read = Arc::new(Barrier::new(4));
    let mut handles = Vec::new();
    for _ in 0..3 {
        let (store, all_read) = (store.clone(), all_read.clone());
        let (acme, nobody) = (acme.clone(), nobody.clone());
        let (tx, rx) = mpsc::channel();
        handles.push(on_thread(move |rt| {
            rt.block_on(async {
                let read = store.load_thread(&acme, &nobody, 4).await;
                tx.send((
                    read.map(|s| s.is_none()),
                    store.readers().open_connections(),
                ))
                .unwrap();
                tokio::task::spawn_blocking(move || all_read.wait())
                    .await
                    .unwrap();
            })
        }));
        let (read, open) = rx.recv().unwrap();
        assert!(read.unwrap(), "an unknown thread reads as none");
        assert!(open <= 2, "{open} read connections open, at most 2 allowed");
    }
    assert_eq!(store.readers().threads(), 3);
    // The third thread found both permits held by idle connections of the others, and
    // closed one of them to open its own: the server sees two sessions (the closed one's
    // ends as soon as its thread's runtime has sent the goodbye).
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let sessions = || async {
        let row = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut open = sessions().await;
    while open > 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        open = sessions().await;
    }
    all_read.wait();
    for handle in handles {
        handle.join().unwrap();
    }
    assert_eq!(open, 2, "sessions of the store on the database");
}

#[tokio::test]
async fn a_read_waits_for_a_busy_connection_then_fails_unavailable() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (store, _) = store(&db, 1, Duration::from_millis(300)).await;
    // One thread holds the only read connection checked out...
    let (held_tx, held_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let holder = {
        let store = store.clone();
        on_thread(move |rt| {
            rt.block_on(async {
                let conn = store.readers().pool().unwrap().get().await.unwrap();
                held_tx.send(()).unwrap();
                let release_rx = tokio::task::spawn_blocking(move || {
                    release_rx.recv().unwrap();
                    release_rx
                })
                .await
                .unwrap();
                drop(conn);
                // ...and keeps its runtime running while the other thread reads again.
                tokio::task::spawn_blocking(move || release_rx.recv().unwrap())
                    .await
                    .unwrap();
            });
        })
    };
    held_rx.recv().unwrap();
    let read = read_elsewhere(&store);
    assert!(
        matches!(&read, Err(StoreError::Unavailable(detail)) if detail.contains("no connection within")),
        "{read:?}"
    );
    // Once it is idle, another thread's read closes it and opens its own.
    release_tx.send(()).unwrap();
    let read = read_elsewhere(&store);
    assert!(read.unwrap());
    assert_eq!(store.readers().open_connections(), 1);
    release_tx.send(()).unwrap();
    holder.join().unwrap();
}

#[tokio::test]
async fn busy_workers_leave_connections_to_the_other_threads() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    let (store, _) = store(&db, 2 * (cores + 1), Duration::from_millis(500)).await;
    let per_thread = store.readers().per_thread();
    // One thread per core (as the HTTP workers are) checks out all its pool gives it and
    // keeps them busy...
    let (held_tx, held_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Arc::new(std::sync::Mutex::new(release_rx));
    let mut holders = Vec::new();
    for _ in 0..cores {
        let (store, held_tx, release_rx) = (store.clone(), held_tx.clone(), release_rx.clone());
        holders.push(on_thread(move |rt| {
            rt.block_on(async {
                let pool = store.readers().pool().unwrap();
                let mut held = Vec::new();
                for _ in 0..per_thread {
                    held.push(pool.get().await.unwrap());
                }
                held_tx.send(held.len()).unwrap();
                tokio::task::spawn_blocking(move || release_rx.lock().unwrap().recv().unwrap())
                    .await
                    .unwrap();
                drop(held);
            })
        }));
    }
    let held: usize = (0..cores).map(|_| held_rx.recv().unwrap()).sum();
    assert_eq!(held, cores * per_thread);
    // ...and another thread still reads.
    let read = read_elsewhere(&store);
    for _ in 0..cores {
        release_tx.send(()).unwrap();
    }
    for holder in holders {
        holder.join().unwrap();
    }
    assert!(read.unwrap(), "{held} connections busy on {cores} threads");
}

/// A store whose pool gives each thread `per_thread` connections or more.
async fn store_with_share(db: &PgTestDb, per_thread: usize) -> (Arc<PgStore>, String) {
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    let (store, url) = store(db, per_thread * (cores + 1), Duration::from_secs(5)).await;
    assert!(store.readers().per_thread() >= per_thread);
    (store, url)
}

/// The server process behind the connection this thread's point reads share, and that
/// connection, kept in use for as long as it is held.
async fn shared_connection(store: &PgStore) -> (i32, PgRead) {
    let thread = store.readers().thread().unwrap();
    let conn = thread.shared(Duration::from_secs(5)).await.unwrap();
    let pid = diesel::select(diesel::dsl::sql::<Integer>("pg_backend_pid()"))
        .get_result(&mut &*conn)
        .await
        .unwrap();
    (pid, conn)
}

#[tokio::test]
async fn point_reads_of_a_thread_share_one_connection() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (store, _) = store_with_share(&db, 4).await;
    // Many reloads at once on one thread (as an HTTP worker's requests are): each would
    // take a connection of its own, up to the thread's share, if they did not share one.
    let (acme, nobody) = (tenant("acme"), context("nobody"));
    let reads = (0..32).map(|_| store.load_thread(&acme, &nobody, 4));
    for read in futures_util::future::join_all(reads).await {
        assert!(read.unwrap().is_none());
    }
    assert_eq!(store.readers().open_connections(), 1);
    // A read that may scan takes a connection of its own beside it.
    let _shared = shared_connection(&store).await;
    let query = crate::domain::ListTasksQuery {
        page_size: 10,
        ..Default::default()
    };
    assert!(store.list_tasks(&acme, &query).await.unwrap().is_some());
    assert_eq!(store.readers().open_connections(), 2);
}

#[tokio::test]
async fn a_shared_connection_found_gone_is_replaced() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (store, url) = store_with_share(&db, 2).await;
    let (acme, nobody) = (tenant("acme"), context("nobody"));
    // A read keeps the shared connection in use while its server process is ended.
    let (gone, held) = shared_connection(&store).await;
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    tokio_postgres::Client::execute(&client, "SELECT pg_terminate_backend($1)", &[&gone])
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let row = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                &[&gone],
            )
            .await
            .unwrap();
        if row.get::<_, i64>(0) == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{gone} still runs");
        tokio::task::yield_now().await;
    }
    // The next point read shares it and finds it gone...
    let read = store.load_thread(&acme, &nobody, 4).await;
    assert!(matches!(read, Err(StoreError::Unavailable(_))), "{read:?}");
    // ...and the one after is handed another, though the first is still held.
    assert!(
        store
            .load_thread(&acme, &nobody, 4)
            .await
            .unwrap()
            .is_none()
    );
    let (now, _) = shared_connection(&store).await;
    assert_ne!(now, gone);
    drop(held);
}

#[tokio::test]
async fn point_reads_waiting_for_a_connection_fail_together() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let acquire = Duration::from_millis(300);
    let (store, _) = store(&db, 1, acquire).await;
    assert_eq!(store.readers().per_thread(), 1);
    // This thread's only connection is checked out and kept...
    let held = store.readers().pool().unwrap().get().await.unwrap();
    // ...so each of the reads queued behind the first one's checkout fails when the
    // first does, within one acquire timeout, not one timeout after another.
    let (acme, nobody) = (tenant("acme"), context("nobody"));
    let started = tokio::time::Instant::now();
    let reads = (0..8).map(|_| store.load_thread(&acme, &nobody, 4));
    for read in futures_util::future::join_all(reads).await {
        assert!(
            matches!(&read, Err(StoreError::Unavailable(detail)) if detail.contains("no connection within")),
            "{read:?}"
        );
    }
    assert!(started.elapsed() < acquire * 4, "{:?}", started.elapsed());
    drop(held);
    assert!(
        store
            .load_thread(&acme, &nobody, 4)
            .await
            .unwrap()
            .is_none()
    );
}

/// A read's statement is prepared once on its connection and run by name after that,
/// whatever its values (`statement.rs`); the outbox poll's, whose text changes with its
/// values, is not kept.
#[tokio::test]
async fn a_read_statement_is_prepared_once_on_its_connection() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let (store, _) = store(&db, 1, Duration::from_secs(5)).await;
    for task in ["t-1", "t-2", "t-3"] {
        let task = crate::domain::TaskId::parse(task).unwrap();
        assert!(
            store
                .load_task(&tenant("acme"), &task)
                .await
                .unwrap()
                .is_none()
        );
    }
    for now in [1, 2] {
        let due = store
            .due_deliveries(crate::domain::Timestamp(now), 8)
            .await
            .unwrap();
        assert!(due.is_empty());
    }
    let mut conn = store.readers().pool().unwrap().get().await.unwrap();
    #[derive(diesel::QueryableByName)]
    struct Prepared {
        #[diesel(sql_type = diesel::sql_types::Text)]
        statement: String,
    }
    let prepared: Vec<String> = diesel::sql_query("SELECT statement FROM pg_prepared_statements")
        .load::<Prepared>(&mut **conn)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.statement)
        .collect();
    let task_reads = prepared
        .iter()
        .filter(|s| s.contains("AS last_seq FROM tasks t"))
        .count();
    assert_eq!(task_reads, 1, "{prepared:#?}");
    assert!(
        !prepared.iter().any(|s| s.contains("a2a_due_deliveries")),
        "{prepared:#?}"
    );
}
