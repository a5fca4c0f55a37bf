//! The task-generations extension on both HTTP bindings: invisible unless activated;
//! with it, generations on tasks and events that agree with the SSE ids, the GetTask
//! long-poll, and optimistic concurrency with `ifGenerationMatch`.

use serde_json::{Value, json};

use crate::support::{Backend, TestApp, read_sse, spawn_app, spawn_app_with, user_message};

const EXT: &str = agent_a2a::a2a::generations::GENERATIONS_EXTENSION;

async fn rpc_with(
    app: &TestApp,
    method: &str,
    params: Value,
) -> (reqwest::header::HeaderMap, Value) {
    let r = app
        .client
        .post(format!("{}/", app.url))
        .header("A2A-Version", "1.0")
        .header("A2A-Extensions", EXT)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap();
    let headers = r.headers().clone();
    (headers, r.json().await.unwrap())
}

fn generation(v: &Value) -> i64 {
    v["generation"]
        .as_str()
        .unwrap_or_else(|| panic!("no generation in {v}"))
        .parse()
        .unwrap()
}

#[actix_web::test]
async fn without_the_extension_the_wire_is_plain_1_0() {
    let app = spawn_app().await;
    let sent = app.send_text("complete").await;
    let task = &sent["result"]["task"];
    assert!(task.get("generation").is_none(), "{task}");
    let id = task["id"].as_str().unwrap();
    let r = app
        .client
        .post(format!("{}/", app.url))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}}))
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("a2a-extensions").is_none());
    let got: Value = r.json().await.unwrap();
    assert!(got["result"].get("generation").is_none());
    // Its parameters are refused, not ignored.
    let poll = app
        .rpc("GetTask", json!({"id": id, "currentGeneration": "1"}))
        .await;
    assert_eq!(poll["error"]["code"], -32602, "{poll}");
    assert!(poll["error"]["message"].as_str().unwrap().contains(EXT));
    let send = app
        .rpc(
            "SendMessage",
            json!({"message": user_message("x"), "configuration": {"ifGenerationMatch": "1"}}),
        )
        .await;
    assert_eq!(send["error"]["code"], -32602, "{send}");
    // The card lists the extension.
    let card: Value = app
        .get("/.well-known/agent-card.json")
        .await
        .json()
        .await
        .unwrap();
    let uris: Vec<&Value> = card["capabilities"]["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["uri"])
        .collect();
    assert!(uris.contains(&&json!(EXT)));
}

#[actix_web::test]
async fn generations_count_events_and_agree_with_the_stream_ids() {
    let app = spawn_app().await;
    // A stream with the extension: every update carries generation = its id + 1.
    let r = app
        .client
        .post(format!("{}/", app.url))
        .header("A2A-Version", "1.0")
        .header("A2A-Extensions", EXT)
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                       "params": {"message": user_message("complete")}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["a2a-extensions"],
        EXT,
        "the activation is echoed"
    );
    let events = read_sse(r, 20).await;
    let mut task_id = String::new();
    let mut last = 0;
    for e in &events {
        let result = &e.data["result"];
        if let Some(task) = result.get("task") {
            task_id = task["id"].as_str().unwrap().to_owned();
            assert_eq!(generation(task), 1, "a new task is at generation 1");
            continue;
        }
        let update = result
            .get("statusUpdate")
            .or_else(|| result.get("artifactUpdate"))
            .expect("an update");
        let seq: i64 = e.id.parse().unwrap();
        assert_eq!(generation(update), seq + 1, "{e:?}");
        last = generation(update);
    }
    assert!(last >= 3, "working, the artifact, completed: {events:?}");
    // GetTask over HTTP+JSON agrees with the last event; so does ListTasks.
    let r = app
        .client
        .get(format!("{}/tasks/{task_id}", app.url))
        .header("A2A-Extensions", EXT)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["a2a-extensions"], EXT);
    let task: Value = r.json().await.unwrap();
    assert_eq!(generation(&task), last);
    let (_, page) = rpc_with(&app, "ListTasks", json!({})).await;
    assert_eq!(generation(&page["result"]["tasks"][0]), last);
}

#[actix_web::test]
async fn a_long_poll_answers_when_the_generation_moves_or_at_its_limit() {
    let app = spawn_app_with(Backend::Sqlite, |s| s.streaming.long_poll_secs = 1).await;
    let (_, sent) = rpc_with(
        &app,
        "SendMessage",
        json!({"message": user_message("wait"), "configuration": {"returnImmediately": true}}),
    )
    .await;
    let task = sent["result"]["task"].clone();
    let id = task["id"].as_str().unwrap().to_owned();
    let current = generation(&task);
    // Behind the task: answered at once with the newer generation.
    let (_, behind) = rpc_with(&app, "GetTask", json!({"id": id, "currentGeneration": "1"})).await;
    assert!(generation(&behind["result"]) >= 1);
    // At the task's generation: held until the turn moves on.
    let poll = rpc_with(
        &app,
        "GetTask",
        json!({"id": id, "currentGeneration": current.to_string()}),
    );
    let release = async {
        tokio::task::yield_now().await;
        app.release.notify_one();
    };
    let ((_, moved), ()) = tokio::join!(poll, release);
    assert!(generation(&moved["result"]) > current, "{moved}");
    // Terminal: nothing will change, answered at once.
    let done = loop {
        let (_, t) = rpc_with(&app, "GetTask", json!({"id": id})).await;
        if t["result"]["status"]["state"] == "TASK_STATE_COMPLETED" {
            break t;
        }
    };
    let g = generation(&done["result"]);
    let started = std::time::Instant::now();
    let (_, same) = rpc_with(
        &app,
        "GetTask",
        json!({"id": id, "currentGeneration": g.to_string()}),
    )
    .await;
    assert_eq!(generation(&same["result"]), g);
    assert!(started.elapsed() < std::time::Duration::from_millis(900));
    // An open task that does not move: answered with itself at the limit.
    let (_, open) = rpc_with(
        &app,
        "SendMessage",
        json!({"message": user_message("input")}),
    )
    .await;
    let open = &open["result"]["task"];
    let g = generation(open);
    let (_, held) = rpc_with(
        &app,
        "GetTask",
        json!({"id": open["id"], "currentGeneration": g.to_string()}),
    )
    .await;
    assert_eq!(generation(&held["result"]), g);
}

#[actix_web::test]
async fn if_generation_match_continues_only_the_expected_generation() {
    let app = spawn_app().await;
    let (_, sent) = rpc_with(
        &app,
        "SendMessage",
        json!({"message": user_message("input")}),
    )
    .await;
    let task = &sent["result"]["task"];
    let (id, g) = (task["id"].as_str().unwrap().to_owned(), generation(task));
    let follow = |text: &str, expected: i64| {
        json!({"message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
                           "taskId": id, "parts": [{"text": text}]},
               "configuration": {"ifGenerationMatch": expected.to_string()}})
    };
    // A stale generation: refused, nothing changes.
    let (_, stale) = rpc_with(&app, "SendMessage", follow("go", g - 1)).await;
    assert_eq!(stale["error"]["code"], -32010, "{stale}");
    assert_eq!(
        stale["error"]["data"][0]["reason"], "TASK_GENERATION_MISMATCH",
        "{stale}"
    );
    // Over HTTP+JSON: 409.
    let r = app
        .client
        .post(format!("{}/message:send", app.url))
        .header("A2A-Extensions", EXT)
        .json(&follow("go", g + 5))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    // The current one: the task continues.
    let (_, ok) = rpc_with(&app, "SendMessage", follow("go", g)).await;
    assert_eq!(
        ok["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{ok}"
    );
    assert!(generation(&ok["result"]["task"]) > g);
    // Without a task there is no generation to match.
    let (_, no_task) = rpc_with(
        &app,
        "SendMessage",
        json!({"message": user_message("x"), "configuration": {"ifGenerationMatch": "1"}}),
    )
    .await;
    assert_eq!(no_task["error"]["code"], -32602);
}

#[actix_web::test]
async fn grpc_answers_plain_1_0_even_when_asked_for_the_extension() {
    use a2a_pb::proto::{self, a2a_service_client::A2aServiceClient};
    let app = spawn_app().await;
    let (_, sent) = rpc_with(
        &app,
        "SendMessage",
        json!({"message": user_message("complete")}),
    )
    .await;
    let id = sent["result"]["task"]["id"].as_str().unwrap().to_owned();
    let addr = app.grpc_addr.unwrap();
    let mut c = A2aServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut request = tonic::Request::new(proto::GetTaskRequest {
        id,
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert("a2a-extensions", EXT.parse().unwrap());
    let response = c.get_task(request).await.expect("GetTask answers");
    assert!(response.metadata().get("a2a-extensions").is_none());
    assert_eq!(
        response.into_inner().status.unwrap().state,
        proto::TaskState::Completed as i32
    );
}
