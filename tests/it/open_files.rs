//! A node under a small open-files limit never wedges: a crowd of event streams past
//! `streaming.max_streams` is refused at once with 503 and `Retry-After`, while health
//! checks and sends keep answering and every open stream gets the task's next update; the
//! server never fails an `accept` for want of a descriptor.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::durability::start_server_limited;
use crate::support::{http_client, user_message};

/// Streams the crowd opens: far more than fit in 256 descriptors.
const CROWD: usize = 300;

/// A client that keeps no connection idle, waiting at most `timeout` for a head.
fn lone_client(timeout: Duration) -> reqwest::Client {
    // reqwest needs a rustls provider even for plain HTTP (see `http_client`).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(timeout)
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

async fn rpc(url: &str, method: &str, params: Value) -> Value {
    lone_client(Duration::from_secs(5))
        .post(format!("{url}/"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} got no answer: {e}"))
        .json()
        .await
        .unwrap()
}

#[actix_web::test]
async fn under_256_open_files_streams_past_the_cap_get_503_and_the_node_keeps_answering() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, url, log) = start_server_limited(dir.path(), &[], Some(256));
    let budget = log
        .lock()
        .unwrap()
        .iter()
        .find(|line| line.contains("connection budget"))
        .cloned()
        .expect("the budget is logged");
    assert!(budget.contains("open_files_soft=256"), "{budget}");
    assert!(budget.contains("streams=72"), "{budget}");

    // A task waiting for input (the tool-routing agent asks for a tool).
    let asked = rpc(
        &url,
        "SendMessage",
        json!({"message": user_message("hello")}),
    )
    .await;
    let task = asked["result"]["task"].clone();
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );
    let task_id = task["id"].as_str().unwrap().to_owned();

    // The crowd, each on a connection of its own: one client, which opens a connection
    // per request in flight (HTTP/1.1) and keeps none idle. (A client per request cost
    // 8.5 s to build 300 of in a debug build, on the clock of the first requests' timeouts:
    // past 20 s on a busy machine.)
    let crowd = lone_client(Duration::from_secs(20));
    let opened = futures_util::future::join_all((0..CROWD).map(|_| {
        crowd
            .post(format!("{url}/tasks/{task_id}:subscribe"))
            .header("A2A-Version", "1.0")
            .send()
    }))
    .await;
    let mut streams = Vec::new();
    let mut refused = 0;
    for response in opened {
        let response = response.expect("every subscriber gets an answer");
        match response.status().as_u16() {
            200 => streams.push(response),
            503 => {
                assert!(response.headers().contains_key("retry-after"));
                refused += 1;
            }
            other => panic!("a subscriber got {other}"),
        }
    }
    assert_eq!(streams.len(), 72, "streaming.max_streams from the budget");
    assert_eq!(refused, CROWD - 72);

    // With every stream open, the node answers health checks and sends.
    let ready = lone_client(Duration::from_secs(5))
        .get(format!("{url}/health/ready"))
        .send()
        .await
        .expect("/health/ready answers");
    assert_eq!(ready.status(), 200);
    let got = rpc(&url, "GetTask", json!({"id": task_id})).await;
    assert_eq!(got["result"]["id"], task_id.as_str(), "{got}");
    let follow_up = json!({"message": {
        "messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
        "taskId": task_id, "contextId": task["contextId"],
        "parts": [{"text": "still there?"}]}});
    let answered = rpc(&url, "SendMessage", follow_up).await;
    assert!(answered["result"]["task"]["id"].is_string(), "{answered}");

    // Every open stream hears of it.
    let heard = futures_util::future::join_all(streams.into_iter().map(|response| async move {
        let mut body = response.bytes_stream();
        let mut seen = String::new();
        while let Ok(Some(Ok(chunk))) =
            tokio::time::timeout(Duration::from_secs(10), body.next()).await
        {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("data:") {
                return true;
            }
        }
        false
    }))
    .await;
    assert!(
        heard.iter().all(|h| *h),
        "{} of 72 streams heard the update",
        heard.iter().filter(|h| **h).count()
    );

    let metrics = http_client()
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let refusals: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("agent_a2a_streams_refused_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(refusals, (CROWD - 72) as f64, "{metrics}");
    server.kill().ok();
    server.wait().ok();
    let log = log.lock().unwrap();
    assert!(
        !log.iter().any(|l| l.contains("Too many open files")),
        "{}",
        log.join("\n")
    );
}

/// The cap counts SSE and gRPC streams together, and a stream refused by it has done
/// nothing: a streaming send past it starts no task.
#[actix_web::test]
async fn the_stream_cap_spans_both_bindings_and_a_refused_stream_does_nothing() {
    use crate::support::{Backend, spawn_app_with};
    use a2a_pb::proto;
    let app = spawn_app_with(Backend::Sqlite, |s| s.streaming.max_streams = 2).await;
    let task_id = app.start_waiting_task().await;
    let sse = app.subscribe(&task_id, None).await;
    assert_eq!(sse.status(), 200);
    let addr = app.grpc_addr.unwrap();
    let mut grpc = proto::a2a_service_client::A2aServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let stream = grpc
        .subscribe_to_task(proto::SubscribeToTaskRequest {
            id: task_id.clone(),
            ..Default::default()
        })
        .await
        .expect("the second stream fits");

    // Both places taken: refused on either binding.
    let third = app.subscribe(&task_id, None).await;
    assert_eq!(third.status(), 503);
    assert!(third.headers().contains_key("retry-after"));
    assert_eq!(
        third
            .headers()
            .get("connection")
            .map(|v| v.to_str().unwrap()),
        Some("close")
    );
    let refused = grpc
        .subscribe_to_task(proto::SubscribeToTaskRequest {
            id: task_id.clone(),
            ..Default::default()
        })
        .await
        .expect_err("no third stream");
    assert_eq!(refused.code(), tonic::Code::Unavailable);
    let before = app.rpc("ListTasks", json!({})).await["result"]["tasks"]
        .as_array()
        .map_or(0, Vec::len);
    let streamed = app
        .client
        .post(format!("{}/message:stream", app.url))
        .header("A2A-Version", "1.0")
        .json(&json!({"message": user_message("complete")}))
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status(), 503);
    let after = app.rpc("ListTasks", json!({})).await["result"]["tasks"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(after, before, "a refused streaming send started a task");

    // A place freed is a place again.
    drop(stream);
    drop(sse);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let again = app.subscribe(&task_id, None).await;
        if again.status() == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the places were never freed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
