//! Micro-benchmarks of the write path: `Store::commit` of one group of write batches, as
//! the `PersistenceActor` commits whatever queued while its previous transaction ran
//! (group commit), on embedded SQLite and on Postgres, at 1, 16 and 256 batches a group.
//!
//! One batch is what a thread actor commits when its executor completes a task with an
//! answer: the agent message, its link into the task's history, the task row and the
//! status-update event (four ops over four tables). Every batch belongs to a thread and a
//! task of its own, with fresh ids each iteration, as a crowd of concurrent threads would
//! produce; the task rows are therefore inserts, not updates. Throughput is in batches.
//!
//! SQLite lives in a temporary directory on disk. Postgres gets a database of its own
//! (`bench_<uuid>`, dropped at the end) on the server of `TEST_DATABASE_URL`, else
//! `DATABASE_URL`, else `postgres://postgres@127.0.0.1:5432/test`. An unreachable server
//! skips the Postgres benchmarks with a printed reason, except with `CI=true`, where it
//! fails the run.
//!
//! Run with `cargo bench --bench store`; `cargo test --all-targets` runs each benchmark
//! once as a smoke test.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_a2a::domain::{
    Artifact, ContextId, Message, MessageId, Part, Role, StreamEvent, Task, TaskId, TaskState,
    TaskStatus, TenantId, Timestamp,
};
use agent_a2a::store::{self, MessageRecord, Store, StoreConfig, WriteOp};
use anyhow::Context;
use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use tokio::runtime::Runtime;

/// Batches per group commit.
const GROUP_SIZES: [usize; 3] = [1, 16, 256];

/// The batch a thread actor commits when a task completes with an answer, for a thread
/// and task of its own.
fn completion_batch(now: Timestamp) -> Vec<WriteOp> {
    let tenant = TenantId::default_tenant();
    let context = ContextId::generate();
    let task_id = TaskId::generate();
    let question = Message {
        message_id: MessageId::generate(),
        context_id: Some(context.clone()),
        task_id: Some(task_id.clone()),
        role: Role::User,
        parts: vec![Part::text(
            "Summarise the design decisions recorded for the persistence layer.",
        )],
        metadata: None,
        extensions: vec![],
        reference_task_ids: vec![],
    };
    let mut task = Task::submitted(
        task_id.clone(),
        context.clone(),
        tenant.clone(),
        question,
        now,
    );
    task.set_status(TaskStatus {
        state: TaskState::Working,
        message: None,
        timestamp: now,
    });
    task.apply_artifact(
        &Artifact::new(vec![Part::text(
            "Writes go through one actor that commits groups; reads go to the pool.",
        )]),
        false,
        now,
    );
    let answer = Message::agent(
        context.clone(),
        Some(task_id.clone()),
        vec![Part::text("Done: the summary is in the artifact.")],
    );
    let status = TaskStatus {
        state: TaskState::Completed,
        message: Some(answer.clone()),
        timestamp: now,
    };
    task.set_status(status.clone());
    let record = MessageRecord {
        tenant: tenant.clone(),
        thread_id: context.clone(),
        seq: 2,
        message_id: Some(answer.message_id.clone()),
        task_id: Some(task_id.clone()),
        role: "agent".into(),
        author: None,
        content: answer.text(),
        parts: answer.parts.clone(),
        tool_calls: serde_json::Value::Array(Vec::new()),
        metadata: None,
        created_at: now,
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    };
    vec![
        WriteOp::AppendMessage(record),
        WriteOp::LinkTaskMessage {
            tenant: tenant.clone(),
            task_id: task_id.clone(),
            position: 1,
            message_seq: 2,
        },
        WriteOp::UpsertTask(task.into()),
        WriteOp::AppendTaskEvent {
            tenant,
            task_id: task_id.clone(),
            seq: 3,
            event: StreamEvent::StatusUpdate {
                task_id,
                context_id: context,
                status,
                metadata: None,
            },
            created_at: now,
        },
    ]
}

/// One group of `batches` batches, flattened as the persistence actor flattens it.
fn group_ops(batches: usize) -> Vec<WriteOp> {
    let now = Timestamp::now();
    (0..batches).flat_map(|_| completion_batch(now)).collect()
}

/// The runtime the store runs on: current-thread, like the persistence actor's arbiter.
fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn bench_backend(c: &mut Criterion, rt: &Runtime, store: &Arc<dyn Store>) {
    let mut group = c.benchmark_group(format!("group_commit/{}", store.backend()));
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for batches in GROUP_SIZES {
        group.throughput(Throughput::Elements(batches as u64));
        group.bench_function(BenchmarkId::from_parameter(batches), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        // Built outside the timing: only the commit is measured.
                        let ops = group_ops(batches);
                        let started = Instant::now();
                        store.commit(&ops).await.expect("commit");
                        spent += started.elapsed();
                    }
                    spent
                })
            })
        });
    }
    group.finish();
}

fn sqlite(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::Builder::new()
        .prefix("a2a-bench-store-")
        .tempdir()
        .expect("a temporary directory");
    let cfg = StoreConfig {
        database_url: None,
        data_dir: dir.path().to_path_buf(),
        ..StoreConfig::default()
    };
    let store = rt.block_on(store::open(&cfg)).expect("SQLite store opens");
    bench_backend(c, &rt, &store);
}

fn postgres(c: &mut Criterion) {
    let rt = runtime();
    let admin = std::env::var("TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let database = match rt.block_on(BenchDatabase::create(&admin)) {
        Ok(database) => database,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("Postgres is required in CI (CI=true) but unusable at {admin}: {e:#}")
        }
        Err(e) => {
            eprintln!("skipping the Postgres group-commit benchmarks: {e:#}");
            return;
        }
    };
    let cfg = StoreConfig {
        database_url: Some(database.url.clone()),
        ..StoreConfig::default()
    };
    let store = rt
        .block_on(store::open(&cfg))
        .expect("Postgres store opens");
    bench_backend(c, &rt, &store);
    drop(store);
    if let Err(e) = rt.block_on(database.drop_it()) {
        eprintln!("could not drop the benchmark database: {e:#}");
    }
}

/// A database of its own on the server of `admin`, dropped by [`BenchDatabase::drop_it`].
struct BenchDatabase {
    admin: String,
    name: String,
    url: String,
}

impl BenchDatabase {
    async fn create(admin: &str) -> anyhow::Result<Self> {
        let mut conn = admin_connection(admin).await?;
        let name = format!("bench_{}", uuid::Uuid::new_v4().simple());
        sql(&mut conn, &format!("CREATE DATABASE {name}")).await?;
        let base = admin.rsplit_once('/').map_or(admin, |(base, _)| base);
        Ok(Self {
            admin: admin.to_owned(),
            url: format!("{base}/{name}"),
            name,
        })
    }

    async fn drop_it(self) -> anyhow::Result<()> {
        let mut conn = admin_connection(&self.admin).await?;
        sql(
            &mut conn,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        )
        .await
    }
}

async fn admin_connection(admin: &str) -> anyhow::Result<diesel_async::AsyncPgConnection> {
    use diesel_async::AsyncConnection;
    tokio::time::timeout(
        Duration::from_secs(5),
        diesel_async::AsyncPgConnection::establish(admin),
    )
    .await
    .with_context(|| format!("no answer from {admin} within 5 s"))?
    .with_context(|| format!("cannot connect to {admin}"))
}

async fn sql(conn: &mut diesel_async::AsyncPgConnection, statement: &str) -> anyhow::Result<()> {
    use diesel_async::RunQueryDsl;
    diesel::sql_query(statement)
        .execute(conn)
        .await
        .with_context(|| statement.to_owned())?;
    Ok(())
}

criterion_group!(benches, sqlite, postgres);
criterion_main!(benches);
