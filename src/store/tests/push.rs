//! Push configs and the outbox: registration per task and tenant, due deliveries in
//! order per config, rescheduling, and what a config's removal takes with it.

use std::sync::Arc;

use super::*;
use crate::domain::{PushAuth, PushConfig, PushDialect, PushPayload};
use crate::store::{OutboxKey, Store, WriteOp};

on_both_backends!(
    configs_are_kept_per_task_and_tenant_and_replaced_by_id,
    only_the_earliest_owed_delivery_of_a_config_is_due,
    every_owed_delivery_is_read_due_or_not_with_its_config_and_time,
    removing_a_config_removes_what_is_owed_to_it,
    a_commits_configs_and_owed_rows_end_as_written_in_order,
);

pub(super) fn config(tenant: &TenantId, task: &TaskId, id: &str, at: i64) -> PushConfig {
    PushConfig {
        tenant: tenant.clone(),
        task_id: task.clone(),
        id: id.into(),
        url: format!("https://hooks.example.org/{id}"),
        token: Some("tok".into()),
        auth: Some(PushAuth {
            scheme: "Bearer".into(),
            credentials: Some("secret".into()),
        }),
        dialect: PushDialect::V1,
        created_at: Timestamp(at),
    }
}

fn enqueue(task: &Task, config_id: &str, seq: i64, at: i64) -> WriteOp {
    WriteOp::EnqueuePush {
        config: Arc::new(config(&task.tenant, &task.id, config_id, at)),
        seq,
        payload: PushPayload::Event {
            event: Box::new(status_event(task, TaskState::Working, at)),
        },
        created_at: Timestamp(at),
    }
}

fn key(task: &Task, config_id: &str, seq: i64) -> OutboxKey {
    OutboxKey {
        tenant: task.tenant.clone(),
        task_id: task.id.clone(),
        config_id: config_id.into(),
        seq,
    }
}

async fn configs_are_kept_per_task_and_tenant_and_replaced_by_id(store: Arc<dyn Store>) {
    let (acme, other) = (tenant("acme"), tenant("other"));
    let (t1, t2) = (task_id("task-1"), task_id("task-2"));
    store
        .commit(&[
            WriteOp::PutPushConfig(config(&acme, &t1, "b", 200)),
            WriteOp::PutPushConfig(config(&acme, &t1, "a", 100)),
            WriteOp::PutPushConfig(config(&acme, &t2, "a", 100)),
            WriteOp::PutPushConfig(config(&other, &t1, "a", 100)),
        ])
        .await
        .unwrap();
    let found = store
        .push_configs(&acme, std::slice::from_ref(&t1))
        .await
        .unwrap();
    let ids: Vec<&str> = found.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"], "in the order they were registered");
    assert_eq!(
        found[0],
        config(&acme, &t1, "a", 100),
        "every field comes back"
    );
    let both = store
        .push_configs(&acme, &[t1.clone(), t2.clone()])
        .await
        .unwrap();
    assert_eq!(both.len(), 3);
    // Another tenant's config of a task with the same id is not acme's.
    assert_eq!(
        store
            .push_configs(&other, std::slice::from_ref(&t1))
            .await
            .unwrap()
            .len(),
        1
    );
    let mut replaced = config(&acme, &t1, "a", 300);
    replaced.url = "https://hooks.example.org/new".into();
    replaced.auth = None;
    replaced.dialect = PushDialect::V03;
    store
        .commit(&[WriteOp::PutPushConfig(replaced.clone())])
        .await
        .unwrap();
    let found = store
        .push_configs(&acme, std::slice::from_ref(&t1))
        .await
        .unwrap();
    assert_eq!(found.len(), 2);
    assert!(found.contains(&replaced));
}

async fn every_owed_delivery_is_read_due_or_not_with_its_config_and_time(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let task = task(&t, &ctx, "task-1", TaskState::Working, 100);
    assert!(store.owed_deliveries(10).await.unwrap().is_empty());
    store
        .commit(&[
            WriteOp::PutPushConfig(config(&t, &task.id, "a", 100)),
            WriteOp::PutPushConfig(config(&t, &task.id, "b", 100)),
            enqueue(&task, "a", 1, 100),
            enqueue(&task, "a", 2, 110),
            enqueue(&task, "b", 1, 120),
            WriteOp::PushRetry {
                key: key(&task, "a", 1),
                attempts: 3,
                next_attempt_at: Timestamp(5000),
            },
        ])
        .await
        .unwrap();
    let mut owed = store.owed_deliveries(10).await.unwrap();
    owed.sort_by_key(|(d, _)| (d.key.config_id.clone(), d.key.seq));
    let rows: Vec<(&str, i64, i64, i64, i64)> = (owed.iter())
        .map(|(d, due)| {
            (
                d.key.config_id.as_str(),
                d.key.seq,
                d.attempts,
                d.created_at.millis(),
                due.millis(),
            )
        })
        .collect();
    // Every row, the one in backoff and the one behind it included.
    assert_eq!(
        rows,
        [
            ("a", 1, 3, 100, 5000),
            ("a", 2, 0, 110, 110),
            ("b", 1, 0, 120, 120)
        ]
    );
    assert_eq!(*owed[0].0.config, config(&t, &task.id, "a", 100));
    assert!(matches!(owed[2].0.payload, PushPayload::Event { .. }));
    // At most the limit.
    assert_eq!(store.owed_deliveries(2).await.unwrap().len(), 2);
    assert!(store.owed_deliveries(0).await.unwrap().is_empty());
}

async fn only_the_earliest_owed_delivery_of_a_config_is_due(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let task = task(&t, &ctx, "task-1", TaskState::Working, 100);
    store
        .commit(&[
            WriteOp::PutPushConfig(config(&t, &task.id, "a", 100)),
            WriteOp::PutPushConfig(config(&t, &task.id, "b", 100)),
            enqueue(&task, "a", 1, 100),
            enqueue(&task, "a", 2, 110),
            enqueue(&task, "b", 1, 100),
        ])
        .await
        .unwrap();
    assert_eq!(store.outbox_depth().await.unwrap(), 3);
    let due = store.due_deliveries(Timestamp(1000), 10).await.unwrap();
    let keys: Vec<(&str, i64)> = due
        .iter()
        .map(|d| (d.key.config_id.as_str(), d.key.seq))
        .collect();
    assert_eq!(keys.len(), 2);
    assert!(
        keys.contains(&("a", 1)) && keys.contains(&("b", 1)),
        "{keys:?}"
    );
    assert_eq!(
        due[0].config.url,
        format!("https://hooks.example.org/{}", due[0].key.config_id)
    );
    assert!(matches!(due[0].payload, PushPayload::Event { .. }));
    // Nothing is due before its time.
    assert!(
        store
            .due_deliveries(Timestamp(99), 10)
            .await
            .unwrap()
            .is_empty()
    );
    // `a` seq 1 failed and waits: its seq 2 must not overtake it, though it is due.
    store
        .commit(&[WriteOp::PushRetry {
            key: key(&task, "a", 1),
            attempts: 1,
            next_attempt_at: Timestamp(5000),
        }])
        .await
        .unwrap();
    let due = store.due_deliveries(Timestamp(1000), 10).await.unwrap();
    let keys: Vec<(&str, i64)> = due
        .iter()
        .map(|d| (d.key.config_id.as_str(), d.key.seq))
        .collect();
    assert_eq!(keys, [("b", 1)]);
    let later = store.due_deliveries(Timestamp(6000), 10).await.unwrap();
    let a = later
        .iter()
        .find(|d| d.key.config_id == "a")
        .expect("a is due again");
    assert_eq!((a.key.seq, a.attempts), (1, 1));
    // Delivered: the next one of `a` is due.
    store
        .commit(&[WriteOp::PushDone(key(&task, "a", 1))])
        .await
        .unwrap();
    let due = store.due_deliveries(Timestamp(1000), 10).await.unwrap();
    assert!(due.iter().any(|d| d.key.config_id == "a" && d.key.seq == 2));
    assert_eq!(store.outbox_depth().await.unwrap(), 2);
}

async fn a_commits_configs_and_owed_rows_end_as_written_in_order(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let task = task(&t, &ctx, "task-1", TaskState::Working, 100);
    let mut moved = config(&t, &task.id, "a", 150);
    moved.url = "https://elsewhere.example.org/a".into();
    // A config registered twice in one commit (Postgres writes the commit's configs in
    // one statement): the last registration holds.
    store
        .commit(&[
            WriteOp::PutPushConfig(config(&t, &task.id, "a", 100)),
            WriteOp::PutPushConfig(config(&t, &task.id, "b", 100)),
            enqueue(&task, "a", 1, 100),
            WriteOp::PutPushConfig(moved.clone()),
            enqueue(&task, "b", 1, 100),
            enqueue(&task, "a", 2, 110),
        ])
        .await
        .unwrap();
    let configs = store
        .push_configs(&t, std::slice::from_ref(&task.id))
        .await
        .unwrap();
    assert_eq!(configs.len(), 2);
    assert!(configs.contains(&moved), "{configs:?}");
    assert_eq!(store.outbox_depth().await.unwrap(), 3);
    // Owed, then deleted, in one commit: nothing stays owed to it.
    store
        .commit(&[
            enqueue(&task, "a", 3, 120),
            WriteOp::DeletePushConfig {
                tenant: t.clone(),
                task_id: task.id.clone(),
                config_id: "a".into(),
            },
            WriteOp::PushDone(key(&task, "b", 1)),
        ])
        .await
        .unwrap();
    assert_eq!(store.outbox_depth().await.unwrap(), 0);
}

async fn removing_a_config_removes_what_is_owed_to_it(store: Arc<dyn Store>) {
    let t = tenant("acme");
    let ctx = context("thread-1");
    let task = task(&t, &ctx, "task-1", TaskState::Working, 100);
    store
        .commit(&[
            WriteOp::PutPushConfig(config(&t, &task.id, "a", 100)),
            WriteOp::PutPushConfig(config(&t, &task.id, "b", 100)),
            enqueue(&task, "a", 1, 100),
            enqueue(&task, "b", 1, 100),
        ])
        .await
        .unwrap();
    // Removed and registered again in one batch: it ends registered, owing nothing.
    store
        .commit(&[
            WriteOp::DeletePushConfig {
                tenant: t.clone(),
                task_id: task.id.clone(),
                config_id: "a".into(),
            },
            WriteOp::PutPushConfig(config(&t, &task.id, "a", 200)),
            WriteOp::DeletePushConfig {
                tenant: t.clone(),
                task_id: task.id.clone(),
                config_id: "b".into(),
            },
        ])
        .await
        .unwrap();
    let ids: Vec<String> = store
        .push_configs(&t, std::slice::from_ref(&task.id))
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(ids, ["a"]);
    assert_eq!(store.outbox_depth().await.unwrap(), 0);
    assert!(
        store
            .due_deliveries(Timestamp(1000), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Postgres: the outbox's poll walks its due index in order and stops after its limit,
/// rather than reading the whole outbox and every config to sort them (which it did when
/// the owed rows were joined with their configs before being chosen) — also when the
/// statistics are those of a much smaller outbox, which made the planner read and sort
/// every due row per poll. Each poll's plan is read from inside the function that holds
/// it (`auto_explain`), for a server alone and for a cluster node.
#[tokio::test]
async fn the_outbox_poll_reads_only_the_deliveries_it_returns_on_postgres() {
    use futures_util::StreamExt;
    let Some(db) = crate::store::testing::PgTestDb::create().await else {
        return;
    };
    let url = db.migrated_url().await;
    let (client, mut connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let notices = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = notices.clone();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notice(notice) = message {
                sink.lock().unwrap().push(notice.message().to_owned());
            }
        }
    });
    // Configs each owed two events, all due, half of no node and half a cluster node's;
    // the statistics those of an outbox of dead rows (analyzed after its rows were
    // delivered, as a churning outbox often is, vacuum behind), then 5 000 more.
    let fill = |from: i32, to: i32| {
        format!(
            "INSERT INTO push_configs (tenant_id, task_id, config_id, dialect, url, created_at) \
               SELECT 'acme', a2a_id('task-' || i), 'c', 'v1', 'https://hooks.example.org/', i \
               FROM generate_series({from}, {to}) i; \
             INSERT INTO push_outbox (tenant_id, task_id, config_id, seq, payload, created_at, \
               attempts, next_attempt_at, node_id) \
               SELECT 'acme', a2a_id('task-' || i), 'c', s, '{{}}', i, 0, i, \
               CASE WHEN i % 2 = 0 THEN 'node-1' ELSE '' END \
               FROM generate_series({from}, {to}) i, generate_series(1, 2) s;"
        )
    };
    client
        .batch_execute(&format!(
            "{} DELETE FROM push_outbox; ANALYZE push_outbox; ANALYZE push_configs; {}",
            fill(1, 5000),
            fill(5001, 10000)
        ))
        .await
        .unwrap();
    client
        .batch_execute(
            "LOAD 'auto_explain'; SET auto_explain.log_nested_statements = on; \
             SET auto_explain.log_min_duration = 0; SET auto_explain.log_analyze = on; \
             SET client_min_messages = log",
        )
        .await
        .unwrap();
    use crate::store::statement::Dialect;
    use crate::store::tables::push_outbox::{OutboxShare, due};
    let shares = [
        (OutboxShare::All, "push_outbox_due"),
        (OutboxShare::Node("node-1"), "push_outbox_owned"),
    ];
    for (share, index) in shares {
        notices.lock().unwrap().clear();
        let sql = due(Dialect::Postgres, Timestamp(20_000), 32, share).sql;
        let rows = match share {
            OutboxShare::Node(node) => client.query(&sql, &[&node]).await,
            OutboxShare::All => client.query(&sql, &[]).await,
        }
        .unwrap();
        assert_eq!(rows.len(), 32, "{share:?}");
        // The function's statement, as auto_explain logged it.
        let logged = notices.lock().unwrap().clone();
        let plan = (logged.iter())
            .find(|n| n.contains("FROM push_outbox d"))
            .unwrap_or_else(|| panic!("{share:?}: no plan among {logged:?}"));
        assert!(!plan.contains("Bitmap"), "{share:?}: {plan}");
        assert!(!plan.contains("Seq Scan"), "{share:?}: {plan}");
        let scan = (plan.lines())
            .find(|l| l.contains(&format!("Index Scan using {index} on push_outbox d")))
            .unwrap_or_else(|| panic!("{share:?}: {plan}"));
        // Each config's first event, then its second (left out), in order: twice the
        // limit at most, not the 10 000 due.
        let read: usize = scan
            .rsplit("rows=")
            .next()
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{share:?}: {scan}"));
        assert!(read <= 2 * 32 + 2, "{share:?}: {read} rows read: {plan}");
    }
}

/// Postgres in cluster mode: a node's poll reads the owed rows it committed; rows of no
/// node, and a dead node's, are taken over by one live node (the dead node's token
/// raised, as a thread's takeover raises it); a dead node's outcome for a row taken
/// from it changes nothing; a config whose rows are split between two nodes is still
/// delivered in order.
#[tokio::test]
async fn owed_deliveries_are_their_nodes_and_a_dead_nodes_are_taken_over_on_postgres() {
    let Some(db) = crate::store::testing::PgTestDb::create().await else {
        return;
    };
    let (a, _, client) = super::cluster::node(&db, "a").await;
    let (b, _, _) = super::cluster::node(&db, "b").await;
    let acme = tenant("acme");
    let on = |id: &str| {
        task(
            &acme,
            &context(&format!("ctx-{id}")),
            id,
            TaskState::Working,
            100,
        )
    };
    let (t1, t2, t3, t4) = (on("task-1"), on("task-2"), on("task-3"), on("task-4"));
    let configs =
        [&t1, &t2, &t3, &t4].map(|t| WriteOp::PutPushConfig(config(&acme, &t.id, "c", 100)));
    a.commit(&configs).await.unwrap();
    a.commit(&[
        enqueue(&t1, "c", 1, 100),
        enqueue(&t1, "c", 2, 110),
        enqueue(&t4, "c", 1, 100),
    ])
    .await
    .unwrap();
    b.commit(&[
        enqueue(&t2, "c", 1, 100),
        enqueue(&t3, "c", 1, 100),
        enqueue(&t4, "c", 2, 120),
    ])
    .await
    .unwrap();
    // t-3's row as a server without cluster mode left it.
    client
        .execute(
            "UPDATE push_outbox SET node_id = '' WHERE task_id = a2a_id('task-3')",
            &[],
        )
        .await
        .unwrap();
    let due = |store: Arc<dyn Store>| async move {
        let mut keys: Vec<(String, i64)> = (store.due_deliveries(Timestamp(1000), 10).await)
            .unwrap()
            .into_iter()
            .map(|d| (d.key.task_id.as_str().to_owned(), d.key.seq))
            .collect();
        keys.sort();
        keys
    };
    let keys = |k: &[(&str, i64)]| -> Vec<(String, i64)> {
        k.iter().map(|(t, s)| ((*t).to_owned(), *s)).collect()
    };
    assert_eq!(due(a.clone()).await, keys(&[("task-1", 1), ("task-4", 1)]));
    // t-4's second event is b's, but waits for a to deliver its first.
    assert_eq!(due(b.clone()).await, keys(&[("task-2", 1)]));
    a.commit(&[WriteOp::PushDone(key(&t4, "c", 1))])
        .await
        .unwrap();
    assert_eq!(due(b.clone()).await, keys(&[("task-2", 1), ("task-4", 2)]));

    // With a alive, b takes over only the row of no node.
    assert_eq!(adopt_for_b(&client).await, 1);
    assert_eq!(
        due(b.clone()).await,
        keys(&[("task-2", 1), ("task-3", 1), ("task-4", 2)])
    );
    // a's lease runs out: b takes its rows over, and raises its token.
    let before = a_token(&client).await;
    client
        .execute(
            "UPDATE cluster_nodes SET expires_at = 0 WHERE node_id = 'a'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(adopt_for_b(&client).await, 2);
    assert_eq!(a_token(&client).await, before + 1);
    assert_eq!(adopt_for_b(&client).await, 0);
    assert!(due(a.clone()).await.is_empty());
    assert_eq!(
        due(b.clone()).await,
        keys(&[("task-1", 1), ("task-2", 1), ("task-3", 1), ("task-4", 2)])
    );
    // a wakes up and writes the outcome of an attempt it made before: nothing changes.
    a.commit(&[WriteOp::PushDone(key(&t1, "c", 1))])
        .await
        .unwrap();
    a.commit(&[WriteOp::PushRetry {
        key: key(&t2, "c", 1),
        attempts: 3,
        next_attempt_at: Timestamp(9_000),
    }])
    .await
    .unwrap();
    assert_eq!(b.outbox_depth().await.unwrap(), 5);
    assert_eq!(
        due(b.clone()).await,
        keys(&[("task-1", 1), ("task-2", 1), ("task-3", 1), ("task-4", 2)])
    );
    // b delivers t-1's first event: its second is due, in order.
    b.commit(&[WriteOp::PushDone(key(&t1, "c", 1))])
        .await
        .unwrap();
    assert_eq!(
        due(b.clone()).await,
        keys(&[("task-1", 2), ("task-2", 1), ("task-3", 1), ("task-4", 2)])
    );
}

/// What node `b` takes over, rows of no node included.
async fn adopt_for_b(client: &tokio_postgres::Client) -> u64 {
    crate::store::cluster::adopt_owed(client, "b", true)
        .await
        .unwrap()
}

/// Node `a`'s fencing token.
async fn a_token(client: &tokio_postgres::Client) -> i64 {
    let row = client
        .query_one("SELECT token FROM cluster_nodes WHERE node_id = 'a'", &[])
        .await
        .unwrap();
    row.get(0)
}

/// Postgres: a server without cluster mode, opening a database cluster nodes used,
/// makes every owed delivery one of no node (which cluster nodes take over, should
/// cluster mode come back), and delivers it.
#[tokio::test]
async fn a_server_alone_delivers_what_cluster_nodes_owed_on_postgres() {
    let Some(db) = crate::store::testing::PgTestDb::create().await else {
        return;
    };
    let (a, _, client) = super::cluster::node(&db, "a").await;
    let acme = tenant("acme");
    let t = task(&acme, &context("ctx-1"), "task-1", TaskState::Working, 100);
    a.commit(&[
        WriteOp::PutPushConfig(config(&acme, &t.id, "c", 100)),
        enqueue(&t, "c", 1, 100),
    ])
    .await
    .unwrap();
    drop(a);
    let mut alone = db.config.clone();
    alone.hold = Some(crate::store::node_lock::Hold::Alone);
    let store = crate::store::open(&alone).await.unwrap();
    let owners: Vec<String> = (client.query("SELECT node_id FROM push_outbox", &[]).await)
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(owners, [""]);
    let due = store.due_deliveries(Timestamp(1000), 10).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].key.task_id, t.id);
    store
        .commit(&[WriteOp::PushDone(key(&t, "c", 1))])
        .await
        .unwrap();
    assert_eq!(store.outbox_depth().await.unwrap(), 0);
}
