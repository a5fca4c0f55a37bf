//! The Postgres write path prepares its statements once per writer connection and then
//! only executes them: a thousand commits of every group size leave the writer's session
//! with the same prepared statements, each run again and again.

use std::time::Duration;

use super::{context, event_op, message, record, status_event, task, task_id, tenant, thread};
use crate::domain::{Role, TaskState};
use crate::store::postgres::PgStore;
use crate::store::postgres::writer::PREPARED_STATEMENTS;
use crate::store::testing::PgTestDb;
use crate::store::{Store, WriteOp};

#[tokio::test]
async fn a_thousand_commits_of_any_size_reuse_the_writers_prepared_statements() {
    let Some(db) = PgTestDb::create().await else {
        return;
    };
    let url = db.migrated_url().await;
    // One writer connection, so every commit runs on the session inspected below.
    let store = PgStore::new(&url, 2, 1, Duration::from_secs(5), None, None).unwrap();
    let acme = tenant("acme");
    let mut commits = 0;
    let mut sizes = std::collections::BTreeSet::new();
    for i in 0..1000usize {
        // Groups of 1 to 7 turns, each a new thread with its message, task and event.
        let batches: Vec<Vec<WriteOp>> = (0..i % 7 + 1)
            .map(|j| {
                let ctx = context(&format!("t-{i}-{j}"));
                let id = format!("task-{i}-{j}");
                let done = task(&acme, &ctx, &id, TaskState::Completed, 1);
                vec![
                    WriteOp::UpsertThread(thread(&acme, &ctx, 1)),
                    WriteOp::AppendMessage(record(
                        &acme,
                        1,
                        &message(&ctx, Some(&task_id(&id)), Role::User, "hi"),
                    )),
                    WriteOp::UpsertTask(done.clone().into()),
                    event_op(&done, 1, status_event(&done, TaskState::Completed, 1)),
                ]
            })
            .collect();
        sizes.insert(batches.len());
        let group: Vec<&[WriteOp]> = batches.iter().map(Vec::as_slice).collect();
        store.commit_group(&group).await.unwrap();
        commits += 1;
    }
    assert_eq!(sizes.len(), 7);

    let statements = store.writer_statements().await;
    assert_eq!(
        statements.len(),
        PREPARED_STATEMENTS,
        "the writer prepared exactly its set: {statements:#?}"
    );
    for table in [
        "INSERT INTO threads",
        "INSERT INTO messages",
        "INSERT INTO tasks",
        "INSERT INTO task_events",
    ] {
        let runs = statements
            .iter()
            .find(|(text, _)| text.contains(table))
            .map(|(_, runs)| *runs)
            .unwrap_or_else(|| panic!("no prepared statement for {table}: {statements:#?}"));
        assert!(
            runs >= commits,
            "{table} was planned {runs} times over {commits} commits: not the one statement"
        );
    }
    let pg: &dyn Store = &store;
    assert_eq!(
        pg.load_thread(&acme, &context("t-999-5"), 10)
            .await
            .unwrap()
            .map(|t| t.recent.len()),
        Some(1)
    );
}
