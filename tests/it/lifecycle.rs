//! Supervision, restarts and thread expiry.

use serde_json::json;

use crate::support::{Backend, spawn_app, spawn_app_in, user_message};

#[actix_web::test]
async fn a_panicking_turn_fails_only_its_task_and_the_thread_recovers() {
    let app = spawn_app().await;
    // Another thread with a turn in flight must not notice.
    let bystander_id = app.start_waiting_task().await;

    let mut m = user_message("panic");
    m["contextId"] = json!("panicky-thread");
    let r = app.rpc("SendMessage", json!({"message": m})).await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{r}");
    assert_eq!(
        task["status"]["message"]["metadata"]["errorCode"],
        "INTERNAL_ERROR"
    );
    assert!(
        !r.to_string().contains("secret detail"),
        "panic text leaked: {r}"
    );

    // The same thread serves the next message (its actor was restarted and reloaded).
    let mut again = user_message("complete");
    again["contextId"] = json!("panicky-thread");
    let r = app.rpc("SendMessage", json!({"message": again})).await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    let failed = app.rpc("GetTask", json!({"id": task["id"]})).await;
    assert_eq!(failed["result"]["status"]["state"], "TASK_STATE_FAILED");

    app.release.notify_one();
    let response = app.subscribe(&bystander_id, Some("0")).await;
    let events = crate::support::read_sse(response, usize::MAX).await;
    assert_eq!(
        events.last().unwrap().data["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}

#[actix_web::test]
async fn tasks_and_threads_survive_a_restart() {
    let app = spawn_app().await;
    let (done_id, done) = app.task_with("complete").await;
    let (open_id, open) = app.task_with("input").await;
    let dir = app.stop().await;

    let app = spawn_app_in(dir, Backend::Sqlite, |_| {}).await;
    let got = app.rpc("GetTask", json!({"id": done_id})).await;
    assert_eq!(got["result"], done, "the same task after a restart");
    let mut follow = user_message("after restart");
    follow["taskId"] = json!(open_id);
    let r = app.rpc("SendMessage", json!({"message": follow})).await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    assert_eq!(task["contextId"], open["contextId"]);
    assert_eq!(
        task["history"].as_array().unwrap().len(),
        4,
        "user, agent, user, agent: {task}"
    );
}

#[actix_web::test]
async fn an_expired_thread_refuses_new_messages() {
    use agent_a2a::domain::{ContextId, TenantId, Timestamp};
    use agent_a2a::store::{ThreadRecord, ThreadStatus, WriteOp};
    let app = spawn_app().await;
    let thread = ThreadRecord {
        tenant: TenantId::default_tenant(),
        thread_id: ContextId::parse("old-thread").unwrap(),
        created_at: Timestamp(1_000),
        updated_at: Timestamp(1_000),
        expires_at: Timestamp(2_000),
        status: ThreadStatus::Active,
        conversation_context: json!({}),
    };
    app.runtime
        .store()
        .commit(&[WriteOp::UpsertThread(thread)])
        .await
        .unwrap();
    let mut m = user_message("complete");
    m["contextId"] = json!("old-thread");
    let r = app.rpc("SendMessage", json!({"message": m})).await;
    assert_eq!(r["error"]["code"], -32004, "{r}");
    let text = r["error"]["message"].as_str().unwrap();
    assert!(
        text.contains("old-thread") && text.contains("expired"),
        "{text}"
    );
}

#[actix_web::test]
async fn above_the_resident_limit_idle_actors_leave_memory_and_reload_on_demand() {
    let app = crate::support::spawn_app_with(Backend::Sqlite, |s| {
        s.threads.max_resident_actors = 2;
        s.threads.task_retention_ms = 0;
    })
    .await;
    let mut open = Vec::new();
    for _ in 0..6 {
        open.push(app.task_with("input").await.0);
    }
    // Eviction is driven by the actors' own housekeeping ticks (50 ms here): wait for
    // it, bounded.
    let mut resident = app.runtime.resident_threads();
    for _ in 0..400 {
        if resident <= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        resident = app.runtime.resident_threads();
    }
    assert!(resident <= 2, "{resident} thread actors still resident");
    for id in open {
        let mut follow = user_message("more");
        follow["taskId"] = json!(id);
        let r = app.rpc("SendMessage", json!({"message": follow})).await;
        assert_eq!(
            r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{r}"
        );
        assert_eq!(r["result"]["task"]["history"].as_array().unwrap().len(), 4);
    }
}

/// One-message conversations above the resident limit leave memory as their turn ends,
/// not after the retention period: the limit holds under a stream of new threads.
#[actix_web::test]
async fn above_the_resident_limit_finished_threads_leave_memory_at_once() {
    let app = crate::support::spawn_app_with(Backend::Sqlite, |s| {
        s.threads.max_resident_actors = 2;
        s.threads.task_retention_ms = 600_000;
    })
    .await;
    let mut done = Vec::new();
    for _ in 0..8 {
        done.push(app.task_with("complete").await.0);
    }
    // The turn ends (and the actor leaves) just after its answer: poll briefly, bounded.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while app.runtime.resident_threads() > 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} thread actors resident with a retention of 10 minutes",
            app.runtime.resident_threads()
        );
        tokio::task::yield_now().await;
    }
    // Every task is still there, from the store.
    for id in done {
        let r = app.rpc("GetTask", json!({"id": id})).await;
        assert_eq!(
            r["result"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{r}"
        );
    }
}

#[actix_web::test]
async fn messages_beyond_the_pending_limit_of_a_thread_are_refused() {
    let app = crate::support::spawn_app_with(Backend::Sqlite, |s| {
        s.threads.max_pending_turns = 1;
    })
    .await;
    let mut waiting = user_message("wait");
    waiting["contextId"] = json!("busy-thread");
    app.rpc(
        "SendMessage",
        json!({"message": waiting, "configuration": {"returnImmediately": true}}),
    )
    .await;
    // The thread's turn now waits; five more messages arrive at once. Only one fits in
    // the queue behind it, so at least four are refused — whatever order they arrive in.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..5 {
        let (client, url, tx) = (app.client.clone(), app.url.clone(), tx.clone());
        actix_web::rt::spawn(async move {
            let mut m = user_message("complete");
            m["contextId"] = json!("busy-thread");
            let r = client
                .post(format!("{url}/"))
                .json(
                    &json!({"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message": m}}),
                )
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let body: serde_json::Value = r.json().await.unwrap();
            let _ = tx.send((status, body));
        });
    }
    for _ in 0..4 {
        let (status, body) = rx.recv().await.unwrap();
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"]["code"], -32000);
    }
    app.release.notify_one();
    let (status, body) = rx.recv().await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        body["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}
