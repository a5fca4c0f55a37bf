//! Idempotent sends: a send repeating an accepted message id (or `Idempotency-Key`)
//! gets the first send's outcome — the same task, the same reply, the same events — and
//! the agent does not run again; the same id with other content is refused.

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::support::{Backend, TestApp, read_sse, spawn_app, spawn_app_in, spawn_app_with};

fn message(id: &str, text: &str) -> Value {
    json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]})
}

async fn send(app: &TestApp, id: &str, text: &str) -> Value {
    app.rpc("SendMessage", json!({"message": message(id, text)}))
        .await
}

/// Tasks the tenant has: every run of the agent on a new message makes one.
async fn task_count(app: &TestApp) -> u64 {
    let r = app.rpc("ListTasks", json!({})).await;
    r["result"]["totalSize"]
        .as_u64()
        .unwrap_or_else(|| panic!("{r}"))
}

#[actix_web::test]
async fn a_retried_send_gets_the_first_task_and_runs_nothing() {
    let app = spawn_app().await;
    let first = send(&app, "retry-1", "complete").await;
    let again = send(&app, "retry-1", "complete").await;
    assert_eq!(
        first["result"], again["result"],
        "the same task, as it is now"
    );
    assert_eq!(task_count(&app).await, 1);
    let history = again["result"]["task"]["history"].as_array().unwrap();
    assert_eq!(
        history
            .iter()
            .filter(|m| m["messageId"] == "retry-1")
            .count(),
        1,
        "the message is stored once"
    );
    // The same id with something else in it is a different message: refused.
    let other = send(&app, "retry-1", "something else").await;
    assert_eq!(other["error"]["code"], -32602, "{other}");
    assert!(
        other["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already used for a different message")
    );
    assert_eq!(task_count(&app).await, 1);
}

#[actix_web::test]
async fn concurrent_retries_share_one_turn() {
    let app = spawn_app().await;
    let sends = (0..8).map(|_| send(&app, "burst-1", "complete"));
    let results = join_all(sends).await;
    let ids: Vec<&str> = results
        .iter()
        .map(|r| {
            r["result"]["task"]["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{r}"))
        })
        .collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    assert_eq!(task_count(&app).await, 1);
}

#[actix_web::test]
async fn a_retry_while_the_first_runs_waits_for_the_same_outcome() {
    let app = spawn_app().await;
    let first = send(&app, "slow-1", "wait");
    let retry = async {
        // The retry arrives while the first send's turn waits for its release.
        let task = loop {
            let page = app.rpc("ListTasks", json!({})).await;
            if let Some(t) = page["result"]["tasks"][0]["id"].as_str() {
                break t.to_owned();
            }
            tokio::task::yield_now().await;
        };
        let retried = send(&app, "slow-1", "wait");
        let release = async {
            // The retry is queued behind (or joined to) the running turn; let it go.
            tokio::task::yield_now().await;
            app.release.notify_one();
        };
        let (retried, ()) = tokio::join!(retried, release);
        (task, retried)
    };
    let (first, (task, retried)) = tokio::join!(first, retry);
    assert_eq!(first["result"]["task"]["id"], task.as_str());
    assert_eq!(retried["result"]["task"]["id"], task.as_str(), "{retried}");
    assert_eq!(
        retried["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(task_count(&app).await, 1);
}

#[actix_web::test]
async fn a_retried_reply_is_the_same_message() {
    let app = spawn_app().await;
    let first = send(&app, "hello-1", "reply").await;
    let again = send(&app, "hello-1", "reply").await;
    assert_eq!(
        first["result"]["message"]["parts"],
        again["result"]["message"]["parts"]
    );
    assert_eq!(
        first["result"]["message"]["messageId"],
        again["result"]["message"]["messageId"]
    );
    assert_eq!(task_count(&app).await, 0);
}

#[actix_web::test]
async fn a_retried_stream_gets_the_same_events() {
    let app = spawn_app().await;
    let stream = |id: &'static str| {
        let app = &app;
        async move {
            let r = app
                .client
                .post(format!("{}/", app.url))
                .header("A2A-Version", "1.0")
                .json(
                    &json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                               "params": {"message": message(id, "complete")}}),
                )
                .send()
                .await
                .unwrap();
            read_sse(r, 20).await
        }
    };
    let first = stream("stream-1").await;
    let again = stream("stream-1").await;
    let updates = |events: &[crate::support::SseEvent]| -> Vec<(String, Value)> {
        events
            .iter()
            .filter(|e| e.data["result"].get("task").is_none())
            .map(|e| (e.id.clone(), e.data["result"].clone()))
            .collect()
    };
    assert!(!updates(&first).is_empty());
    assert_eq!(
        updates(&first),
        updates(&again),
        "the same events, with the same ids"
    );
    assert_eq!(task_count(&app).await, 1);
}

#[actix_web::test]
async fn the_idempotency_key_header_names_the_retry_whatever_its_message_id() {
    let app = spawn_app().await;
    let post = |id: &'static str| {
        let app = &app;
        async move {
            app.client
                .post(format!("{}/message:send", app.url))
                .header("Idempotency-Key", "order-42")
                .json(&json!({"message": message(id, "complete")}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let first = post("attempt-1").await;
    let second = post("attempt-2").await;
    assert_eq!(first["task"]["id"], second["task"]["id"], "{second}");
    assert_eq!(task_count(&app).await, 1);
}

#[actix_web::test]
async fn a_retry_after_a_restart_gets_the_first_task() {
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_app_in(Some(dir), Backend::Sqlite, |_| {}).await;
    let first = send(&app, "durable-1", "complete").await;
    let dir = app.stop().await;
    let app = spawn_app_in(dir, Backend::Sqlite, |_| {}).await;
    let again = send(&app, "durable-1", "complete").await;
    assert_eq!(first["result"]["task"]["id"], again["result"]["task"]["id"]);
    assert_eq!(task_count(&app).await, 1);
}

#[actix_web::test]
async fn keys_are_claimed_in_postgres_too() {
    let Some(db) = crate::support::fresh_postgres().await else {
        return;
    };
    let app = spawn_app_with(Backend::Postgres(db.url.clone()), |_| {}).await;
    let results = join_all((0..4).map(|_| send(&app, "pg-1", "complete"))).await;
    let first = &results[0]["result"]["task"]["id"];
    assert!(results.iter().all(|r| &r["result"]["task"]["id"] == first));
    assert_eq!(task_count(&app).await, 1);
}

#[actix_web::test]
async fn past_the_window_the_janitor_forgets_a_key_and_it_may_be_used_again() {
    let app = spawn_app_with(Backend::Sqlite, |s| s.idempotency.window_secs = 60).await;
    send(&app, "reused-1", "complete").await;
    let refused = send(&app, "reused-1", "another message").await;
    assert_eq!(refused["error"]["code"], -32602);
    // A janitor pass two minutes from now: the key is past its window.
    let later =
        agent_a2a::domain::Timestamp(agent_a2a::domain::Timestamp::now().millis() + 120_000);
    app.runtime.lifecycle().run_janitor(later).await.unwrap();
    assert!(
        app.runtime
            .store()
            .claim(&agent_a2a::domain::TenantId::default_tenant(), "reused-1")
            .await
            .unwrap()
            .is_none()
    );
    let again = send(&app, "reused-1", "another message").await;
    assert!(again["result"]["task"]["id"].is_string(), "{again}");
    assert_eq!(task_count(&app).await, 2);
}

#[actix_web::test]
async fn switched_off_every_send_runs_its_turn() {
    let app = spawn_app_with(Backend::Sqlite, |s| s.idempotency.enabled = false).await;
    let first = send(&app, "again-1", "complete").await;
    let second = send(&app, "again-1", "something else").await;
    assert_ne!(
        first["result"]["task"]["id"], second["result"]["task"]["id"],
        "{second}"
    );
    assert_eq!(task_count(&app).await, 2);
}

#[actix_web::test]
async fn an_idempotency_key_past_its_limit_is_refused() {
    let app = spawn_app().await;
    let r = app
        .client
        .post(format!("{}/message:send", app.url))
        .header("Idempotency-Key", "k".repeat(257))
        .json(&json!({"message": message("long-key", "complete")}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["error"]["details"][0]["reason"], "INVALID_PARAMS",
        "{body}"
    );
    assert_eq!(task_count(&app).await, 0);
}
