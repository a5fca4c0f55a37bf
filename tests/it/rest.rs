//! HTTP+JSON: 1.0 routes, 0.3 routes under /v1, the seed's aliases, and the JSON-RPC
//! 0.3 and 0.1 dialects.

use serde_json::{Value, json};

use crate::support::{Backend, read_sse, spawn_app, spawn_app_with, user_message};

#[actix_web::test]
async fn rest_send_get_list_and_cancel() {
    let app = spawn_app().await;
    let r = app
        .post_json(
            "/message:send",
            json!({"message": user_message("complete")}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .contains("json")
    );
    let body: Value = r.json().await.unwrap();
    let id = body["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(body["task"]["status"]["state"], "TASK_STATE_COMPLETED");

    let got: Value = app
        .get(&format!("/tasks/{id}?historyLength=1"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["id"], id.as_str());
    assert_eq!(got["history"].as_array().unwrap().len(), 1);

    let list: Value = app.get("/tasks?pageSize=10").await.json().await.unwrap();
    assert_eq!(list["totalSize"], 1);
    assert_eq!(list["nextPageToken"], "");

    let open: Value = app
        .post_json("/message:send", json!({"message": user_message("input")}))
        .await
        .json()
        .await
        .unwrap();
    let open_id = open["task"]["id"].as_str().unwrap();
    // No body at all, as some clients send it.
    let canceled = app
        .client
        .post(format!("{}/tasks/{open_id}:cancel", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(canceled.status(), 200);
    let canceled: Value = canceled.json().await.unwrap();
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED");
}

#[actix_web::test]
async fn rest_errors_use_google_rpc_status_with_error_info() {
    let app = spawn_app().await;
    let r = app.get("/tasks/missing").await;
    assert_eq!(r.status(), 404);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .contains("application/json")
    );
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], 404);
    assert_eq!(body["error"]["status"], "NOT_FOUND");
    assert_eq!(body["error"]["details"][0]["reason"], "TASK_NOT_FOUND");

    let (done, _) = app.task_with("complete").await;
    let r = app
        .client
        .post(format!("{}/tasks/{done}:cancel", app.url))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["details"][0]["reason"], "TASK_NOT_CANCELABLE");

    let r = app
        .client
        .post(format!("{}/message:send", app.url))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    let r = app
        .post_json(
            "/message:send",
            json!({"message": {"role": "ROLE_USER", "parts": []}}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("message"), "names the field: {message}");

    let r = app.get("/no/such/route").await;
    assert_eq!(r.status(), 404);

    let r = app
        .client
        .post(format!("{}/message:send", app.url))
        .header("content-type", "text/plain")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
}

#[actix_web::test]
async fn rest_streaming_and_subscribe_on_both_verbs() {
    let app = spawn_app().await;
    let r = app
        .post_json(
            "/message:stream",
            json!({"message": user_message("complete")}),
        )
        .await;
    let events = read_sse(r, usize::MAX).await;
    assert!(
        events[0].data.get("task").is_some(),
        "bare StreamResponse: {:?}",
        events[0]
    );
    assert_eq!(
        events.last().unwrap().data["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    for verb in ["GET", "POST"] {
        let (open, _) = app.task_with("input").await;
        let r = app
            .client
            .request(
                verb.parse().unwrap(),
                format!("{}/tasks/{open}:subscribe", app.url),
            )
            .send()
            .await
            .unwrap();
        // The subscription follows the task through the follow-up turn to its end.
        let mut follow = user_message("the rest");
        follow["taskId"] = json!(open);
        let done = app.rpc("SendMessage", json!({"message": follow})).await;
        assert_eq!(
            done["result"]["task"]["status"]["state"],
            "TASK_STATE_COMPLETED"
        );
        let events = read_sse(r, usize::MAX).await;
        assert_eq!(
            events[0].data["task"]["status"]["state"],
            "TASK_STATE_INPUT_REQUIRED"
        );
        let states: Vec<&str> = events[1..]
            .iter()
            .filter_map(|e| e.data["statusUpdate"]["status"]["state"].as_str())
            .collect();
        assert_eq!(
            states,
            ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"],
            "{verb}"
        );
    }
}

#[actix_web::test]
async fn rest_answers_in_the_media_type_the_client_speaks() {
    let app = spawn_app().await;
    let r = app
        .post_json(
            "/message:send",
            json!({"message": user_message("complete")}),
        )
        .await;
    assert_eq!(r.headers()["content-type"], "application/json");
    let r = app
        .client
        .post(format!("{}/message:send", app.url))
        .header("content-type", "application/a2a+json")
        .body(json!({"message": user_message("complete")}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/a2a+json");
    let r = app
        .client
        .get(format!("{}/tasks", app.url))
        .header("accept", "application/a2a+json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "application/a2a+json");
}

#[actix_web::test]
async fn with_push_off_its_routes_are_refused_before_any_lookup() {
    let app = spawn_app_with(Backend::Sqlite, |s| s.push.enabled = false).await;
    let r = app
        .post_json(
            "/tasks/t/pushNotificationConfigs",
            json!({"url": "http://example.invalid"}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["error"]["details"][0]["reason"],
        "PUSH_NOTIFICATION_NOT_SUPPORTED"
    );
    let rpc = app
        .rpc(
            "CreateTaskPushNotificationConfig",
            json!({"taskId": "t", "url": "http://x"}),
        )
        .await;
    assert_eq!(rpc["error"]["code"], -32003);
}

#[actix_web::test]
async fn v03_rest_routes_speak_the_03_shapes() {
    let app = spawn_app().await;
    let r = app
        .client
        .post(format!("{}/v1/message:send", app.url))
        .json(&json!({"message": {"messageId": "m-03", "role": "ROLE_USER", "content": [{"text": "complete"}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{body}"
    );
    let id = body["task"]["id"].as_str().unwrap();
    let got: Value = app
        .get(&format!("/v1/tasks/{id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["id"], id);
}

#[actix_web::test]
async fn jsonrpc_03_and_01_dialects() {
    let app = spawn_app().await;
    let r = app
        .client
        .post(format!("{}/", app.url))
        .json(&json!({"jsonrpc":"2.0","id":"a","method":"message/send","params":{
            "message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"complete"}]}}}))
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["result"]["kind"], "task", "{body}");
    assert_eq!(body["result"]["status"]["state"], "completed");
    let id = body["result"]["id"].clone();
    let got: Value = app
        .client
        .post(format!("{}/", app.url))
        .json(&json!({"jsonrpc":"2.0","id":"b","method":"tasks/get","params":{"id": id}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got["result"]["kind"], "task");

    let r = app
        .client
        .post(format!("{}/", app.url))
        .json(
            &json!({"jsonrpc":"2.0","id":2,"method":"tasks/send","params":{
            "id":"client-task-1","sessionId":"s-1",
            "message":{"role":"user","parts":[{"type":"text","text":"complete"}]}}}),
        )
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["result"]["id"], "client-task-1", "{body}");
    assert_eq!(body["result"]["sessionId"], "s-1");
    assert_eq!(body["result"]["status"]["state"], "completed");
}

#[actix_web::test]
async fn seed_aliases_send_and_get() {
    let app = spawn_app().await;
    let r = app
        .post_json("/tasks/send", json!({"message": user_message("complete")}))
        .await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let id = body["task"]["id"].as_str().unwrap();
    let got = app.get(&format!("/tasks/{id}/get")).await;
    assert_eq!(got.status(), 200);
    let got: Value = got.json().await.unwrap();
    assert_eq!(got["status"]["state"], "TASK_STATE_COMPLETED");
}

#[actix_web::test]
async fn advertised_urls_also_answer_with_a_trailing_slash() {
    let app = spawn_app().await;
    let r = app
        .post_json(
            "/message:send/",
            json!({"message": user_message("complete")}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = app.get("/tasks/").await;
    assert_eq!(r.status(), 200);
}

/// A method a path does not serve is 405 with `Allow` (not 404), and `HEAD` works
/// wherever `GET` does: the same headers, no body.
#[actix_web::test]
async fn other_methods_are_405_with_allow_and_head_works_where_get_does() {
    let app = spawn_app().await;
    let cases = [
        (reqwest::Method::GET, "/", "POST"),
        (reqwest::Method::POST, "/health", "GET, HEAD"),
        (reqwest::Method::DELETE, "/tasks", "GET, HEAD"),
        (reqwest::Method::PUT, "/message:send", "POST"),
        (reqwest::Method::GET, "/v1/message:stream", "POST"),
        (reqwest::Method::GET, "/tasks/some-task:cancel", "POST"),
        (reqwest::Method::POST, "/tasks/some-task", "GET, HEAD"),
        (
            reqwest::Method::POST,
            "/.well-known/agent-card.json",
            "GET, HEAD",
        ),
    ];
    for (method, path, allow) in cases {
        let r = app
            .client
            .request(method.clone(), format!("{}{path}", app.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{method} {path}");
        assert_eq!(r.headers()["allow"], allow, "{method} {path}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(
            body["error"]["details"][0]["reason"], "METHOD_NOT_ALLOWED",
            "{body}"
        );
    }
    // Still 404: a path nobody serves, and an unknown verb.
    for path in ["/nope", "/tasks/some-task:bogus"] {
        let r = app.get(path).await;
        assert_eq!(r.status(), 404, "{path}");
    }
    for path in [
        "/health",
        "/health/ready",
        "/.well-known/agent-card.json",
        "/metrics",
    ] {
        let get = app.get(path).await;
        let head = app
            .client
            .head(format!("{}{path}", app.url))
            .send()
            .await
            .unwrap();
        assert_eq!(head.status(), get.status(), "{path}");
        assert_eq!(
            head.headers().get("content-type"),
            get.headers().get("content-type"),
            "{path}"
        );
        assert!(head.bytes().await.unwrap().is_empty(), "{path}: no body");
    }
}

/// 0.3 REST errors keep the `google.rpc.Status` body and add what the SDKs' 0.3 REST
/// clients read: `code` and `message` (JavaScript), `type` (Python); 1.0 stays as it is.
#[actix_web::test]
async fn v03_rest_errors_speak_to_the_sdks_0_3_clients() {
    let app = spawn_app().await;
    let r = app.get("/v1/tasks/no-such-task").await;
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], -32001, "{body}");
    assert_eq!(body["type"], "TaskNotFoundError", "{body}");
    assert!(body["message"].as_str().unwrap().contains("no-such-task"));
    assert_eq!(body["error"]["status"], "NOT_FOUND");
    let r = app.get("/tasks/no-such-task").await;
    let body: Value = r.json().await.unwrap();
    assert!(
        body.get("code").is_none() && body.get("type").is_none(),
        "{body}"
    );
    assert_eq!(body["error"]["status"], "NOT_FOUND");
}
