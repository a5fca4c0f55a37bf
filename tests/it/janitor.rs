//! Thread expiry and the janitor (contract B.5, B.6): a thread past its TTL refuses
//! messages whether or not its actor is in memory; the janitor marks expired threads in
//! the store — through the actor when there is one — and removes expired state entries,
//! which a thread loaded after they expired also drops at once.
//!
//! Passes are run with a clock moved forward (`run_janitor(later)`) rather than waiting.

use std::time::Duration;

use agent_a2a::domain::{ContextId, TenantId, Timestamp};
use agent_a2a::runtime::JanitorReport;
use agent_a2a::store::{ThreadRecord, ThreadStatus, WriteOp};
use serde_json::{Value, json};

use crate::support::{
    Backend, TestApp, fresh_postgres, spawn_app, spawn_app_in, spawn_app_with, user_message,
};

const HOUR_MS: i64 = 3_600_000;

fn context(id: &str) -> ContextId {
    ContextId::parse(id).unwrap()
}

async fn send_in(app: &TestApp, context_id: &str, text: &str) -> Value {
    let mut m = user_message(text);
    m["contextId"] = json!(context_id);
    app.rpc("SendMessage", json!({"message": m})).await
}

fn assert_expired_error(r: &Value, context_id: &str) {
    assert_eq!(r["error"]["code"], -32004, "{r}");
    let text = r["error"]["message"].as_str().unwrap();
    assert!(
        text.contains(context_id) && text.contains("expired"),
        "the error names the thread and says it expired: {text}"
    );
}

async fn stored(app: &TestApp, context_id: &str) -> ThreadRecord {
    app.runtime
        .store()
        .load_thread(&TenantId::default_tenant(), &context(context_id), 0)
        .await
        .unwrap()
        .expect("the thread is stored")
        .thread
}

/// Stores a thread that no actor has loaded.
async fn put_thread(app: &TestApp, id: &str, expires_at: i64, state: Value) {
    let now = Timestamp::now().0;
    let thread = ThreadRecord {
        tenant: TenantId::default_tenant(),
        thread_id: context(id),
        created_at: Timestamp(now - HOUR_MS),
        updated_at: Timestamp(now - HOUR_MS),
        expires_at: Timestamp(expires_at),
        status: ThreadStatus::Active,
        conversation_context: state,
    };
    app.runtime
        .store()
        .commit(&[WriteOp::UpsertThread(thread)])
        .await
        .unwrap();
}

fn entry(value: &str, expires_at: i64) -> Value {
    json!({"value": value, "expiresAt": expires_at})
}

#[actix_web::test]
async fn a_resident_thread_refuses_messages_once_its_ttl_has_passed() {
    let app = spawn_app_with(Backend::Sqlite, |s| s.threads.thread_ttl_secs = 1).await;
    let r = send_in(&app, "short-lived", "complete").await;
    assert_eq!(
        r["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let tenant = TenantId::default_tenant();
    assert!(app.runtime.is_resident(&tenant, &context("short-lived")));
    // Wait (bounded) for the clock to pass the stored expiry; nothing else touches it.
    let expires_at = stored(&app, "short-lived").await.expires_at;
    for _ in 0..400 {
        if Timestamp::now() > expires_at {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(Timestamp::now() > expires_at);
    let r = send_in(&app, "short-lived", "complete").await;
    assert_expired_error(&r, "short-lived");
    assert!(
        app.runtime.is_resident(&tenant, &context("short-lived")),
        "refused by the actor in memory, not by a reload"
    );
}

#[actix_web::test]
async fn the_janitor_expires_a_resident_thread_through_its_actor() {
    let app = spawn_app().await;
    send_in(&app, "resident", "complete").await;
    let later = Timestamp(Timestamp::now().0 + 25 * HOUR_MS);
    let report = app.runtime.lifecycle().run_janitor(later).await.unwrap();
    assert_eq!(report.threads_expired, 1, "{report:?}");
    assert!(report.threads_swept >= 1, "{report:?}");
    assert_eq!(stored(&app, "resident").await.status, ThreadStatus::Expired);
    // By the real clock the thread has a day left: only an actor that applied the
    // expiry to its own memory refuses now (a write to the store alone would not be seen).
    let r = send_in(&app, "resident", "complete").await;
    assert_expired_error(&r, "resident");
    // A second pass finds nothing left to do.
    let again = app.runtime.lifecycle().run_janitor(later).await.unwrap();
    assert_eq!(again.threads_expired, 0, "{again:?}");
}

#[actix_web::test]
async fn the_janitor_expires_threads_that_are_not_in_memory_in_the_store() {
    let app = spawn_app_with(Backend::Sqlite, |s| s.threads.janitor_batch = 2).await;
    let now = Timestamp::now().0;
    for i in 0..5 {
        put_thread(&app, &format!("overdue-{i}"), now - 1_000 - i, json!({})).await;
    }
    put_thread(&app, "live", now + HOUR_MS, json!({})).await;
    let report = app
        .runtime
        .lifecycle()
        .run_janitor(Timestamp::now())
        .await
        .unwrap();
    assert_eq!(
        report,
        JanitorReport {
            threads_expired: 5,
            state_entries_removed: 0,
            threads_swept: 0,
            threads_deleted: 0,
        },
        "five threads over three pages of two"
    );
    for i in 0..5 {
        let id = format!("overdue-{i}");
        assert_eq!(stored(&app, &id).await.status, ThreadStatus::Expired);
    }
    assert_eq!(stored(&app, "live").await.status, ThreadStatus::Active);
    let r = send_in(&app, "overdue-3", "complete").await;
    assert_expired_error(&r, "overdue-3");
    let r = send_in(&app, "live", "complete").await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
}

#[actix_web::test]
async fn the_janitor_removes_expired_state_entries_of_resident_threads() {
    let app = spawn_app().await;
    let now = Timestamp::now().0;
    put_thread(
        &app,
        "stateful",
        now + 48 * HOUR_MS,
        json!({"soon": entry("a", now + HOUR_MS), "later": entry("b", now + 30 * HOUR_MS)}),
    )
    .await;
    // A message loads the thread; both entries are still live.
    send_in(&app, "stateful", "complete").await;
    let state = stored(&app, "stateful").await.conversation_context;
    assert_eq!(state.as_object().unwrap().len(), 2, "{state}");

    let report = app
        .runtime
        .lifecycle()
        .run_janitor(Timestamp(now + 2 * HOUR_MS))
        .await
        .unwrap();
    assert_eq!(report.state_entries_removed, 1, "{report:?}");
    assert_eq!(report.threads_expired, 0, "{report:?}");
    let thread = stored(&app, "stateful").await;
    assert_eq!(thread.status, ThreadStatus::Active);
    assert_eq!(
        thread.conversation_context,
        json!({"later": entry("b", now + 30 * HOUR_MS)}),
        "written through to the store"
    );
}

#[actix_web::test]
async fn a_thread_loaded_after_its_state_expired_drops_the_dead_entries_at_once() {
    let app = spawn_app().await;
    let now = Timestamp::now().0;
    put_thread(
        &app,
        "back-from-disk",
        now + 48 * HOUR_MS,
        json!({"gone": entry("x", now - 1_000), "kept": entry("y", now + HOUR_MS)}),
    )
    .await;
    // Not in memory: the janitor leaves its state to the actor that loads it.
    let report = app
        .runtime
        .lifecycle()
        .run_janitor(Timestamp::now())
        .await
        .unwrap();
    assert_eq!(report.state_entries_removed, 0, "{report:?}");
    let r = send_in(&app, "back-from-disk", "complete").await;
    assert_eq!(
        r["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(
        stored(&app, "back-from-disk").await.conversation_context,
        json!({"kept": entry("y", now + HOUR_MS)})
    );
}

/// `store.retention_secs` in these tests: an hour.
const RETENTION_MS: i64 = HOUR_MS;

/// The janitor's grace after a thread's retention (`RETIREMENT_GRACE_MS`), and more.
const GRACE_MS: i64 = 120_000;

async fn get_task(app: &TestApp, id: &str) -> Value {
    app.rpc("GetTask", json!({"id": id})).await
}

/// Retention (`store.retention_secs`): one janitor pass, its clock past the threads'
/// expiry and the retention, expires them and deletes those no actor holds, with their
/// tasks; a thread expired within the retention and a resident one stay.
async fn retention_deletes_threads_expired_longer_ago_and_nothing_else(backend: Backend) {
    let settings = |s: &mut agent_a2a::config::Settings| {
        s.store.retention_secs = (RETENTION_MS / 1000) as u64;
        s.threads.recover_eagerly = 0;
    };
    // Three finished tasks, each in a thread of its own, out of memory after a restart.
    let app = spawn_app_in(
        Some(tempfile::tempdir().unwrap()),
        backend.clone(),
        settings,
    )
    .await;
    let mut old = Vec::new();
    for _ in 0..3 {
        old.push(app.task_with("complete").await.0);
    }
    let dir = app.stop().await;
    let app = spawn_app_in(dir, backend, settings).await;
    assert_eq!(app.runtime.resident_threads(), 0);
    // One thread in memory, one that expires two hours after the others: by the
    // janitor's clock below both are expired, the second within the retention.
    let (resident, _) = app.task_with("complete").await;
    let ttl_ms = 86_400_000;
    put_thread(
        &app,
        "kept",
        Timestamp::now().0 + ttl_ms + 2 * HOUR_MS,
        json!({}),
    )
    .await;
    let later = Timestamp(Timestamp::now().0 + ttl_ms + RETENTION_MS + GRACE_MS + HOUR_MS);

    let report = app.runtime.lifecycle().run_janitor(later).await.unwrap();
    // The resident thread is past its retention by this clock, so its actor writes
    // nothing, not even its expiry: it goes in a pass after the actor left memory.
    assert_eq!(report.threads_expired, 4, "{report:?}");
    assert_eq!(report.threads_deleted, 3, "{report:?}");
    for id in &old {
        let r = get_task(&app, id).await;
        assert_eq!(r["error"]["code"], -32001, "deleted with its thread: {r}");
    }
    let r = get_task(&app, &resident).await;
    assert_eq!(
        r["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    assert_eq!(stored(&app, "kept").await.status, ThreadStatus::Expired);
    // Nothing is left to delete, and a pass by today's clock deletes nothing.
    let again = app.runtime.lifecycle().run_janitor(later).await.unwrap();
    assert_eq!(again.threads_deleted, 0, "{again:?}");
    let today = app
        .runtime
        .lifecycle()
        .run_janitor(Timestamp::now())
        .await
        .unwrap();
    assert_eq!(today.threads_deleted, 0, "{today:?}");
}

#[actix_web::test]
async fn retention_deletes_threads_expired_longer_ago_and_nothing_else_on_sqlite() {
    retention_deletes_threads_expired_longer_ago_and_nothing_else(Backend::Sqlite).await;
}

#[actix_web::test]
async fn retention_deletes_threads_expired_longer_ago_and_nothing_else_on_postgres() {
    let Some(db) = fresh_postgres().await else {
        return;
    };
    retention_deletes_threads_expired_longer_ago_and_nothing_else(Backend::Postgres(
        db.url.clone(),
    ))
    .await;
}

#[actix_web::test]
async fn without_retention_the_janitor_deletes_nothing() {
    let app = spawn_app_with(Backend::Sqlite, |s| s.threads.recover_eagerly = 0).await;
    let (id, _) = app.task_with("complete").await;
    let dir = app.stop().await;
    let app = spawn_app_in(dir, Backend::Sqlite, |s| s.threads.recover_eagerly = 0).await;
    let much_later = Timestamp(Timestamp::now().0 + 1_000 * 24 * HOUR_MS);
    let report = app
        .runtime
        .lifecycle()
        .run_janitor(much_later)
        .await
        .unwrap();
    assert_eq!(report.threads_deleted, 0, "{report:?}");
    let r = get_task(&app, &id).await;
    assert_eq!(
        r["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
}

/// A thread past its retention is never written again, even by an actor still holding
/// it: the janitor's deletion cannot race a write.
#[actix_web::test]
async fn an_actor_writes_nothing_to_a_thread_past_its_retention() {
    let app = spawn_app_with(Backend::Sqlite, |s| {
        s.threads.thread_ttl_secs = 1;
        s.store.retention_secs = 1;
        s.idempotency.window_secs = 2;
    })
    .await;
    let mut m = user_message("input");
    m["contextId"] = json!("retired");
    let r = app.rpc("SendMessage", json!({"message": m})).await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{r}"
    );
    let id = r["result"]["task"]["id"].as_str().unwrap().to_owned();
    assert!(
        app.runtime
            .is_resident(&TenantId::default_tenant(), &context("retired"))
    );
    // Wait (bounded) for the real clock to pass the expiry and the retention.
    let past = stored(&app, "retired").await.expires_at.0 + 1_000;
    for _ in 0..400 {
        if Timestamp::now().0 > past {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(Timestamp::now().0 > past);
    let r = app.rpc("CancelTask", json!({"id": id})).await;
    assert_expired_error(&r, "retired");
    let r = get_task(&app, &id).await;
    assert_eq!(
        r["result"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "nothing was written: {r}"
    );
}
