//! The same behaviours on Postgres (a fresh database per test).

use serde_json::json;

use crate::support::{
    Backend, fresh_postgres, read_sse, spawn_app_in, spawn_app_with, user_message,
};

#[actix_web::test]
async fn postgres_send_get_follow_up_cancel_and_list() {
    let Some(url) = fresh_postgres().await else {
        return;
    };
    let app = spawn_app_with(Backend::Postgres(url), |_| {}).await;
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
    let Some(url) = fresh_postgres().await else {
        return;
    };
    let app = spawn_app_with(Backend::Postgres(url), |_| {}).await;
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
    let Some(url) = fresh_postgres().await else {
        return;
    };
    let app = spawn_app_with(Backend::Postgres(url.clone()), |_| {}).await;
    let (id, task) = app.task_with("complete").await;
    app.stop().await;
    let app = spawn_app_in(None, Backend::Postgres(url), |_| {}).await;
    let got = app.rpc("GetTask", json!({"id": id})).await;
    assert_eq!(got["result"], task);
}
