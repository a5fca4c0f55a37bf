//! Push configs and the outbox: registration per task and tenant, due deliveries in
//! order per config, rescheduling, and what a config's removal takes with it.

use std::sync::Arc;

use super::*;
use crate::domain::{PushAuth, PushConfig, PushDialect, PushPayload};
use crate::store::{OutboxKey, Store, WriteOp};

on_both_backends!(
    configs_are_kept_per_task_and_tenant_and_replaced_by_id,
    only_the_earliest_owed_delivery_of_a_config_is_due,
    removing_a_config_removes_what_is_owed_to_it,
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
        tenant: task.tenant.clone(),
        task_id: task.id.clone(),
        config_id: config_id.into(),
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
/// the owed rows were joined with their configs before being chosen).
#[tokio::test]
async fn the_outbox_poll_reads_only_the_deliveries_it_returns_on_postgres() {
    let Some(db) = crate::store::testing::PgTestDb::create().await else {
        return;
    };
    let url = db.migrated_url().await;
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    // 5 000 configs, each owed two events, all due, in tables never analyzed (as a young
    // server's are, between the analyses).
    client
        .batch_execute(
            "INSERT INTO push_configs (tenant_id, task_id, config_id, dialect, url, created_at) \
               SELECT 'acme', a2a_id('task-' || i), 'c', 'v1', 'https://hooks.example.org/', i \
               FROM generate_series(1, 5000) i; \
             INSERT INTO push_outbox (tenant_id, task_id, config_id, seq, payload, created_at, \
               attempts, next_attempt_at) \
               SELECT 'acme', a2a_id('task-' || i), 'c', s, '{}', i, 0, i \
               FROM generate_series(1, 5000) i, generate_series(1, 2) s",
        )
        .await
        .unwrap();
    let sql = crate::store::reads::due_deliveries_sql(
        Timestamp(10_000),
        32,
        crate::store::reads::ConfigsOfDue::EachByKey,
    );
    let plan: Vec<String> = client
        .query(&format!("EXPLAIN {sql}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(!plan.contains("Seq Scan"), "{plan}");
    assert!(plan.contains("push_outbox_due"), "{plan}");
}
