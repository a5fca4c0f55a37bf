//! The same behaviours on Postgres (a fresh database per test).

use serde_json::json;

use crate::support::{
    Backend, fresh_postgres, read_sse, spawn_app_in, spawn_app_with, user_message,
};

#[actix_web::test]
async fn postgres_send_get_follow_up_cancel_and_list() {
    let Some(db) = fresh_postgres().await else {
        return;
    };
    let app = spawn_app_with(Backend::Postgres(db.url.clone()), |_| {}).await;
    let (id, task) = app.task_with("complete").await;
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    let got = app.rpc("GetTask", json!({"id": id})).await;
    assert_eq!(got["result"], task);
    let (open, _) = app.task_with("input").await;
    let mut follow = user_message("more");
    follow["taskId"] = json!(open);
    let r = app.rpc("SendMessage", json!({"message": follow})).await;
    assert_eq!(
        r["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let (third, _) = app.task_with("input").await;
    let c = app.rpc("CancelTask", json!({"id": third})).await;
    assert_eq!(c["result"]["status"]["state"], "TASK_STATE_CANCELED");
    let list = app.rpc("ListTasks", json!({"pageSize": 2})).await;
    assert_eq!(list["result"]["totalSize"], 3);
    assert!(!list["result"]["nextPageToken"].as_str().unwrap().is_empty());
}

#[actix_web::test]
async fn postgres_streams_and_resumes() {
    let Some(db) = fresh_postgres().await else {
        return;
    };
    let app = spawn_app_with(Backend::Postgres(db.url.clone()), |_| {}).await;
    let events = app
        .rpc_stream(
            "SendStreamingMessage",
            json!({"message": user_message("chunks")}),
        )
        .await;
    let id = events[0].data["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let resumed = app
        .client
        .get(format!("{}/tasks/{id}:subscribe", app.url))
        .header("Last-Event-ID", "2")
        .send()
        .await
        .unwrap();
    let replay = read_sse(resumed, usize::MAX).await;
    let ids: Vec<&str> = replay.iter().map(|e| e.id.as_str()).collect();
    let expected: Vec<&str> = events[3..].iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, expected);
}

#[actix_web::test]
async fn postgres_tasks_survive_a_restart() {
    let Some(db) = fresh_postgres().await else {
        return;
    };
    let app = spawn_app_with(Backend::Postgres(db.url.clone()), |_| {}).await;
    let (id, task) = app.task_with("complete").await;
    app.stop().await;
    let app = spawn_app_in(None, Backend::Postgres(db.url.clone()), |_| {}).await;
    let got = app.rpc("GetTask", json!({"id": id})).await;
    assert_eq!(got["result"], task);
}

#[actix_web::test]
async fn postgres_janitor_recovery_and_drain() {
    use agent_a2a::domain::{ContextId, TenantId, Timestamp};
    use agent_a2a::runtime::Recovery;
    use agent_a2a::store::ThreadStatus;
    let Some(db) = fresh_postgres().await else {
        return;
    };
    let app = spawn_app_with(Backend::Postgres(db.url.clone()), |_| {}).await;
    let (_, resident) = app.task_with("input").await;
    let resident = resident["contextId"].as_str().unwrap().to_owned();
    let (_, idle) = app.task_with("complete").await;
    let idle = idle["contextId"].as_str().unwrap().to_owned();
    // The graceful path: drain, then close (flush) — a restart finds both threads.
    app.runtime.lifecycle().begin_drain();
    assert_eq!(
        app.runtime
            .lifecycle()
            .wait_for_turns(tokio::time::Instant::now() + std::time::Duration::from_secs(30))
            .await,
        0
    );
    app.runtime
        .lifecycle()
        .close(tokio::time::Instant::now() + std::time::Duration::from_secs(30))
        .await
        .unwrap();
    app.stop().await;

    let app = spawn_app_in(None, Backend::Postgres(db.url.clone()), |s| {
        s.threads.recover_eagerly = 1
    })
    .await;
    assert_eq!(
        app.runtime.lifecycle().recovered().await,
        Recovery::Done {
            recovered: 1,
            failed: 0
        }
    );
    let tenant = TenantId::default_tenant();
    let ctx = |id: &str| ContextId::parse(id).unwrap();
    assert!(
        app.runtime.is_resident(&tenant, &ctx(&idle)),
        "the most recently continued thread"
    );
    assert!(!app.runtime.is_resident(&tenant, &ctx(&resident)));
    // A day later: the resident thread through its actor, the other in the store.
    let later = Timestamp(Timestamp::now().0 + 25 * 3_600_000);
    let report = app.runtime.lifecycle().run_janitor(later).await.unwrap();
    assert_eq!(report.threads_expired, 2, "{report:?}");
    for id in [&idle, &resident] {
        let thread = app
            .runtime
            .store()
            .load_thread(&tenant, &ctx(id), 0)
            .await
            .unwrap()
            .unwrap()
            .thread;
        assert_eq!(thread.status, ThreadStatus::Expired, "{id}");
    }
}
