//! JSON-RPC 1.0 methods: send, get, list, cancel, multi-turn, and the task rules.

use serde_json::json;

use crate::support::{spawn_app, user_message};

#[actix_web::test]
async fn send_message_runs_the_turn_to_completion() {
    let app = spawn_app().await;
    let r = app.send_text("complete please").await;
    let task = &r["result"]["task"];
    assert_eq!(r["id"], 1);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "done");
    assert_eq!(task["status"]["message"]["parts"][0]["text"], "ok");
    assert!(task["contextId"].as_str().is_some_and(|c| !c.is_empty()));
    let history = task["history"].as_array().unwrap();
    assert_eq!(history[0]["role"], "ROLE_USER");
    assert_eq!(history[0]["parts"][0]["text"], "complete please");
    let states: Vec<_> = task["metadata"]["agent-a2a.transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["state"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        states,
        [
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED"
        ]
    );
}

#[actix_web::test]
async fn get_task_returns_the_stored_task_and_trims_history_on_request() {
    let app = spawn_app().await;
    let (id, task) = app.task_with("complete").await;
    let got = app.rpc("GetTask", json!({"id": id})).await;
    assert_eq!(got["result"]["id"], task["id"]);
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(got["result"]["artifacts"], task["artifacts"]);
    let none = app
        .rpc("GetTask", json!({"id": id, "historyLength": 0}))
        .await;
    assert!(none["result"].get("history").is_none(), "{none}");
    let one = app
        .rpc("GetTask", json!({"id": id, "historyLength": 1}))
        .await;
    assert_eq!(one["result"]["history"].as_array().unwrap().len(), 1);
    let negative = app
        .rpc("GetTask", json!({"id": id, "historyLength": -1}))
        .await;
    assert_eq!(negative["error"]["code"], -32602);
}

#[actix_web::test]
async fn an_agent_may_answer_with_a_message_and_no_task() {
    let app = spawn_app().await;
    let r = app.send_text("reply").await;
    assert!(r["result"].get("task").is_none(), "{r}");
    assert_eq!(r["result"]["message"]["role"], "ROLE_AGENT");
    assert_eq!(r["result"]["message"]["parts"][0]["text"], "hello back");
}

#[actix_web::test]
async fn follow_ups_continue_an_input_required_task_and_keep_its_history() {
    let app = spawn_app().await;
    let (id, task) = app.task_with("input").await;
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let context = task["contextId"].clone();
    // Only the taskId: the context is inferred.
    let mut follow = user_message("here is more");
    follow["taskId"] = json!(id);
    let r = app.rpc("SendMessage", json!({"message": follow})).await;
    let done = &r["result"]["task"];
    assert_eq!(done["id"], id.as_str());
    assert_eq!(done["contextId"], context);
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED");
    let user_texts: Vec<_> = done["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "ROLE_USER")
        .map(|m| m["parts"][0]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(user_texts, ["input", "here is more"]);
}

#[actix_web::test]
async fn task_rules_unknown_terminal_and_mismatched_context() {
    let app = spawn_app().await;
    let mut unknown = user_message("x");
    unknown["taskId"] = json!("no-such-task");
    let r = app.rpc("SendMessage", json!({"message": unknown})).await;
    assert_eq!(r["error"]["code"], -32001, "{r}");

    let (done_id, _) = app.task_with("complete").await;
    let mut to_done = user_message("again");
    to_done["taskId"] = json!(done_id);
    let r = app.rpc("SendMessage", json!({"message": to_done})).await;
    assert_eq!(r["error"]["code"], -32004, "{r}");

    let (open_id, _) = app.task_with("input").await;
    let mut mismatched = user_message("more");
    mismatched["taskId"] = json!(open_id);
    mismatched["contextId"] = json!("some-other-context");
    let r = app.rpc("SendMessage", json!({"message": mismatched})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

#[actix_web::test]
async fn a_client_context_id_starts_a_thread_that_later_messages_share() {
    let app = spawn_app().await;
    let mut m = user_message("complete");
    m["contextId"] = json!("my-conversation");
    let a = app.rpc("SendMessage", json!({"message": m})).await;
    let mut m = user_message("complete");
    m["contextId"] = json!("my-conversation");
    let b = app.rpc("SendMessage", json!({"message": m})).await;
    assert_eq!(a["result"]["task"]["contextId"], "my-conversation");
    assert_eq!(b["result"]["task"]["contextId"], "my-conversation");
    assert_ne!(a["result"]["task"]["id"], b["result"]["task"]["id"]);
}

#[actix_web::test]
async fn cancel_moves_an_open_task_to_canceled_once() {
    let app = spawn_app().await;
    let (id, _) = app.task_with("input").await;
    let r = app.rpc("CancelTask", json!({"id": id})).await;
    assert_eq!(r["result"]["status"]["state"], "TASK_STATE_CANCELED", "{r}");
    let again = app.rpc("CancelTask", json!({"id": id})).await;
    assert_eq!(again["error"]["code"], -32002, "{again}");
    let unknown = app.rpc("CancelTask", json!({"id": "nope"})).await;
    assert_eq!(unknown["error"]["code"], -32001);
    let got = app.rpc("GetTask", json!({"id": id})).await;
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_CANCELED");
}

#[actix_web::test]
async fn cancel_stops_a_running_turn() {
    let app = spawn_app().await;
    let id = app.start_waiting_task().await;
    let canceled = app.rpc("CancelTask", json!({"id": id})).await;
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    app.release.notify_one();
    let got = app.rpc("GetTask", json!({"id": id})).await;
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_CANCELED");
    assert!(
        got["result"].get("artifacts").is_none(),
        "the aborted turn wrote nothing more"
    );
}

#[actix_web::test]
async fn return_immediately_answers_before_the_turn_ends() {
    let app = spawn_app().await;
    let r = app
        .rpc(
            "SendMessage",
            json!({"message": user_message("wait"), "configuration": {"returnImmediately": true}}),
        )
        .await;
    let task = &r["result"]["task"];
    let state = task["status"]["state"].as_str().unwrap();
    assert!(
        state == "TASK_STATE_SUBMITTED" || state == "TASK_STATE_WORKING",
        "{state}"
    );
    let id = task["id"].as_str().unwrap().to_owned();
    // The response headers arrive once the subscription is attached; only then release
    // the turn, so the subscriber sees the rest of it.
    let response = app
        .client
        .post(format!("{}/", app.url))
        .json(&json!({"jsonrpc":"2.0","id":3,"method":"SubscribeToTask","params":{"id": id}}))
        .send()
        .await
        .unwrap();
    app.release.notify_one();
    let events = crate::support::read_sse(response, usize::MAX).await;
    assert_eq!(events[0].data["result"]["task"]["id"], id.as_str());
    let last = events.last().unwrap();
    assert_eq!(
        last.data["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}

#[actix_web::test]
async fn list_tasks_pages_newest_first_with_a_cursor() {
    let app = spawn_app().await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(app.task_with("complete").await.0);
    }
    let first = app.rpc("ListTasks", json!({"pageSize": 2})).await;
    let page = &first["result"];
    assert_eq!(page["totalSize"], 5);
    assert_eq!(page["pageSize"], 2);
    assert!(
        page["tasks"][0].get("artifacts").is_none(),
        "artifacts omitted by default"
    );
    let mut seen: Vec<String> = page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
    let mut token = page["nextPageToken"].as_str().unwrap().to_owned();
    while !token.is_empty() {
        let next = app
            .rpc("ListTasks", json!({"pageSize": 2, "pageToken": token}))
            .await;
        for t in next["result"]["tasks"].as_array().unwrap() {
            seen.push(t["id"].as_str().unwrap().to_owned());
        }
        token = next["result"]["nextPageToken"].as_str().unwrap().to_owned();
    }
    ids.reverse();
    assert_eq!(seen, ids, "every task once, newest first");
    let with = app
        .rpc(
            "ListTasks",
            json!({"includeArtifacts": true, "pageSize": 1}),
        )
        .await;
    assert!(with["result"]["tasks"][0]["artifacts"].is_array());
    let bad = app.rpc("ListTasks", json!({"pageToken": "garbage!"})).await;
    assert_eq!(bad["error"]["code"], -32602);
    let zero = app.rpc("ListTasks", json!({"pageSize": 0})).await;
    assert_eq!(zero["error"]["code"], -32602);
}

#[actix_web::test]
async fn list_tasks_filters_by_context_and_state() {
    let app = spawn_app().await;
    let (_, a) = app.task_with("input").await;
    app.task_with("complete").await;
    let by_context = app
        .rpc("ListTasks", json!({"contextId": a["contextId"]}))
        .await;
    assert_eq!(by_context["result"]["totalSize"], 1);
    let by_state = app
        .rpc("ListTasks", json!({"status": "TASK_STATE_INPUT_REQUIRED"}))
        .await;
    assert_eq!(by_state["result"]["totalSize"], 1);
    assert_eq!(by_state["result"]["tasks"][0]["id"], a["id"]);
}

#[actix_web::test]
async fn agent_errors_fail_the_request_or_the_task_without_leaking_details() {
    let app = spawn_app().await;
    let r = app.send_text("reject-request").await;
    assert_eq!(r["error"]["code"], -32602, "{r}");

    let r = app.send_text("internal").await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{r}");
    let text = r.to_string();
    assert!(!text.contains("hunter2"), "internal detail leaked: {text}");
    assert_eq!(
        task["status"]["message"]["metadata"]["errorCode"],
        "INTERNAL_ERROR"
    );

    let r = app.send_text("silent").await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_FAILED",
        "{r}"
    );
}
