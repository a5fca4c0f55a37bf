//! The harness's own promise: a test's Postgres database is gone once the test is over —
//! passed or panicked, with the server under test still connected to it — so a run of
//! the suite leaves nothing on the Postgres server.

use crate::support::{Backend, fresh_postgres, postgres_has_database, spawn_app_with};

#[actix_web::test]
async fn a_tests_database_is_dropped_when_the_test_ends_though_its_server_is_connected() {
    let (app, name) = {
        let Some(db) = fresh_postgres().await else {
            return;
        };
        let app = spawn_app_with(Backend::Postgres(db.url.clone()), |_| {}).await;
        // The server's pool holds connections to the database from here on.
        let (_, task) = app.task_with("complete").await;
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
        assert!(postgres_has_database(db.name()).await);
        (app, db.name().to_owned())
    };
    assert!(
        !postgres_has_database(&name).await,
        "{name} outlived its test"
    );
    drop(app);
}

#[actix_web::test]
async fn a_tests_database_is_dropped_when_the_test_panics() {
    let (named, name) = tokio::sync::oneshot::channel();
    let test = actix_web::rt::spawn(async move {
        let Some(db) = fresh_postgres().await else {
            let _ = named.send(None);
            return;
        };
        let _ = named.send(Some(db.name().to_owned()));
        let app = spawn_app_with(Backend::Postgres(db.url.clone()), |_| {}).await;
        app.task_with("complete").await;
        panic!("a failing test (on purpose: its database must be dropped all the same)");
    });
    let Some(name) = name.await.expect("the test names its database") else {
        return;
    };
    let failed = test.await.expect_err("the test panics");
    assert!(failed.is_panic());
    assert!(
        !postgres_has_database(&name).await,
        "{name} outlived its failed test"
    );
}
