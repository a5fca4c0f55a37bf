//! Graceful shutdown: SIGTERM stops the real binary with exit status 0 and loses nothing
//! acknowledged; open SSE streams end at once rather than at the deadline; and, in
//! process, a drain refuses new work, waits for the turns already accepted and ends
//! their streams when they finish.

use std::collections::HashSet;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::durability::{send_from_eight_clients, start_server_with};
use crate::support::{Backend, http_client, read_sse, spawn_app, spawn_app_in, user_message};

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM failed");
}

/// Waits (bounded) for the process to exit.
async fn exit_status(child: &mut Child) -> ExitStatus {
    for _ in 0..1_200 {
        if let Some(status) = child.try_wait().expect("wait for agent-a2a") {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill().ok();
    panic!("agent-a2a did not exit within a minute of SIGTERM");
}

async fn rpc(client: &reqwest::Client, url: &str, method: &str, params: Value) -> Value {
    client
        .post(format!("{url}/"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("JSON body")
}

#[actix_web::test]
async fn sigterm_mid_load_exits_cleanly_and_loses_nothing_acknowledged() {
    sigterm_mid_load(&[]).await;
}

#[actix_web::test]
async fn sigterm_mid_load_on_postgres_exits_cleanly_and_loses_nothing_acknowledged() {
    let Some(database) = crate::support::fresh_postgres().await else {
        return;
    };
    sigterm_mid_load(&[("DATABASE_URL", database.url.as_str())]).await;
}

/// Sends from eight clients, SIGTERM once 300 were acknowledged, restart on the same
/// data (`env` chooses the store), and look for every acknowledged task.
async fn sigterm_mid_load(env: &[(&str, &str)]) {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url) = start_server_with(dir.path(), env);
    // Refused sends (503 once the drain began) end a client like a failed one.
    let (acked, workers) = send_from_eight_clients(&url);
    let client = http_client();
    while acked.lock().unwrap().len() < 300 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sigterm(&child);
    let status = exit_status(&mut child).await;
    for w in workers {
        let _ = w.await;
    }
    assert!(status.success(), "exit status after SIGTERM: {status:?}");
    let acked = acked.lock().unwrap().clone();

    let (mut child, url) = start_server_with(dir.path(), env);
    let mut listed = HashSet::new();
    let mut token = String::new();
    loop {
        let page = rpc(
            &client,
            &url,
            "ListTasks",
            json!({"pageSize": 100, "pageToken": token, "historyLength": 0}),
        )
        .await;
        let result = &page["result"];
        for task in result["tasks"].as_array().expect("a page of tasks") {
            listed.insert(task["id"].as_str().unwrap().to_owned());
        }
        token = result["nextPageToken"].as_str().unwrap_or("").to_owned();
        if token.is_empty() {
            break;
        }
    }
    let mut missing = Vec::new();
    for id in &acked {
        let got = rpc(&client, &url, "GetTask", json!({"id": id})).await;
        if got["result"]["id"] != id.as_str() || !listed.contains(id) {
            missing.push(id.clone());
        }
    }
    sigterm(&child);
    let second = exit_status(&mut child).await;
    // The figure a run reports (`cargo test --test it -- --nocapture`).
    eprintln!(
        "SIGTERM mid-load: {} sends acknowledged, {} of them not in the store after the restart",
        acked.len(),
        missing.len()
    );
    assert!(acked.len() >= 300);
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged tasks lost: {missing:?}",
        missing.len(),
        acked.len()
    );
    assert!(second.success(), "an idle server also exits 0: {second:?}");
}

#[actix_web::test]
async fn an_open_sse_stream_ends_on_sigterm_long_before_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    // A deadline no test would wait for: the stream must end because of the drain.
    let (mut child, url) = start_server_with(
        dir.path(),
        &[("AGENT_A2A__SERVER__SHUTDOWN_TIMEOUT_SECS", "3600")],
    );
    let client = http_client();
    // Free text: the binary's agent asks for input, so the task stays open and a
    // subscription to it would follow it indefinitely.
    let r = rpc(
        &client,
        &url,
        "SendMessage",
        json!({"message": user_message("hello")}),
    )
    .await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{r}"
    );
    let id = r["result"]["task"]["id"].as_str().unwrap();
    let response = client
        .post(format!("{url}/tasks/{id}:subscribe"))
        .send()
        .await
        .expect("subscribe");
    assert_eq!(response.status(), 200);
    let mut events = response.bytes_stream().eventsource();
    let first = tokio::time::timeout(Duration::from_secs(20), events.next())
        .await
        .expect("the snapshot arrives")
        .expect("a first event")
        .expect("a well-formed event");
    let snapshot: Value = serde_json::from_str(&first.data).unwrap();
    assert_eq!(snapshot["task"]["id"], id, "{snapshot}");

    sigterm(&child);
    // A minute is the bound of this test, not a measurement: the deadline is an hour.
    let end = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(event) = events.next().await {
            if let Err(e) = event {
                return Err(e.to_string());
            }
        }
        Ok(())
    })
    .await
    .expect("the stream ended after SIGTERM");
    assert_eq!(end, Ok(()), "the stream closed cleanly");
    let status = exit_status(&mut child).await;
    assert!(status.success(), "exit status after SIGTERM: {status:?}");
}

#[actix_web::test]
async fn grpc_streams_and_idle_connections_end_on_sigterm_long_before_the_deadline() {
    use a2a_pb::proto::{self, a2a_service_client::A2aServiceClient};

    let dir = tempfile::tempdir().unwrap();
    let (mut child, url) = start_server_with(
        dir.path(),
        &[("AGENT_A2A__SERVER__SHUTDOWN_TIMEOUT_SECS", "3600")],
    );
    let client = http_client();
    let card: Value = client
        .get(format!("{url}/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let grpc = card["supportedInterfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["protocolBinding"] == "GRPC")
        .and_then(|i| i["url"].as_str())
        .expect("the card lists gRPC")
        .to_owned();
    let mut c = A2aServiceClient::connect(format!("http://{grpc}"))
        .await
        .expect("gRPC connects");
    let sent = c
        .send_message(proto::SendMessageRequest {
            message: Some(proto::Message {
                message_id: "shutdown-grpc-1".into(),
                role: proto::Role::User as i32,
                parts: vec![proto::Part {
                    content: Some(proto::part::Content::Text("hello".into())),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("sent")
        .into_inner();
    let Some(proto::send_message_response::Payload::Task(task)) = sent.payload else {
        panic!("a task");
    };
    // Input required: a subscription would follow the task indefinitely.
    let mut stream = c
        .subscribe_to_task(proto::SubscribeToTaskRequest {
            id: task.id.clone(),
            ..Default::default()
        })
        .await
        .expect("subscribed")
        .into_inner();
    let snapshot = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .expect("the snapshot arrives")
        .expect("a first event")
        .expect("not an error");
    assert!(matches!(
        snapshot.payload,
        Some(proto::stream_response::Payload::Task(_))
    ));

    sigterm(&child);
    let end = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(event) = stream.next().await {
            event?;
        }
        Ok::<(), tonic::Status>(())
    })
    .await
    .expect("the stream ended after SIGTERM");
    assert!(end.is_ok(), "the stream closed cleanly: {end:?}");
    // The client's connection stays open while idle; the server closed it with GOAWAY.
    let status = exit_status(&mut child).await;
    assert!(status.success(), "exit status after SIGTERM: {status:?}");
    drop(c);
}

#[actix_web::test]
async fn a_drain_refuses_new_work_and_waits_for_the_turns_already_accepted() {
    let app = spawn_app().await;
    let running = app.start_waiting_task().await;
    let (idle, _) = app.task_with("input").await;
    let idle_stream = app.subscribe(&idle, None).await;
    let running_stream = app.subscribe(&running, None).await;
    app.runtime.lifecycle().recovered().await;
    assert_eq!(app.get("/health/ready").await.status(), 200);

    app.runtime.lifecycle().begin_drain();
    // The stream of a task no turn is working on ends at once: just its snapshot.
    let idle_events = read_sse(idle_stream, usize::MAX).await;
    assert_eq!(idle_events.len(), 1, "{idle_events:?}");
    // New work is refused, retryably; reads still work.
    let refused = app
        .client
        .post(format!("{}/", app.url))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": user_message("complete")}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    assert_eq!(app.subscribe(&idle, None).await.status(), 503);
    assert_eq!(app.get("/health/ready").await.status(), 503);
    let got = app.rpc("GetTask", json!({"id": idle})).await;
    assert_eq!(got["result"]["id"], idle.as_str());

    // The accepted turn keeps the drain waiting until it ends.
    let far = tokio::time::Instant::now() + Duration::from_secs(3600);
    let runtime = app.runtime.clone();
    let waiting =
        actix_web::rt::spawn(async move { runtime.lifecycle().wait_for_turns(far).await });
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished());
    // Past the deadline the wait gives up and says how many turns are still running.
    let now = tokio::time::Instant::now();
    assert_eq!(app.runtime.lifecycle().wait_for_turns(now).await, 1);
    app.release.notify_one();
    assert_eq!(waiting.await.unwrap(), 0, "no turn left");
    // Its stream carried the turn to its end, then closed.
    let events = read_sse(running_stream, usize::MAX).await;
    let last = &events.last().unwrap().data;
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{events:?}"
    );

    app.runtime
        .lifecycle()
        .close(tokio::time::Instant::now() + Duration::from_secs(30))
        .await
        .expect("the persistence queue is flushed");
    // Read back by a new server on the same data: the closed runtime's pooled SQLite
    // connections ran their statements on its (now stopped) arbiters, so the old store
    // handle is not usable after `close`.
    let dir = app.stop().await;
    let app = spawn_app_in(dir, Backend::Sqlite, |_| {}).await;
    let stored = app.rpc("GetTask", json!({"id": running})).await;
    assert_eq!(
        stored["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{stored}"
    );
    app.stop().await;
}
