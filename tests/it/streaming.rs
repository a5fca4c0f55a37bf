//! SSE: event order, JSON-RPC envelopes, ids, resumption with Last-Event-ID, several
//! subscribers, and early errors as plain JSON.

use serde_json::json;

use crate::support::{read_sse, spawn_app, user_message};

#[actix_web::test]
async fn streams_the_task_then_updates_in_order_and_closes_at_the_end() {
    let app = spawn_app().await;
    let events = app
        .rpc_stream(
            "SendStreamingMessage",
            json!({"message": user_message("complete")}),
        )
        .await;
    let kinds: Vec<String> = events
        .iter()
        .map(|e| {
            assert_eq!(e.data["jsonrpc"], "2.0");
            assert_eq!(e.data["id"], 7, "every event carries the request id");
            e.data["result"]
                .as_object()
                .unwrap()
                .keys()
                .next()
                .unwrap()
                .clone()
        })
        .collect();
    assert_eq!(
        kinds,
        ["task", "statusUpdate", "artifactUpdate", "statusUpdate"]
    );
    assert_eq!(
        events[0].data["result"]["task"]["status"]["state"],
        "TASK_STATE_SUBMITTED"
    );
    assert_eq!(
        events[3].data["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let ids: Vec<i64> = events.iter().map(|e| e.id.parse().unwrap()).collect();
    assert_eq!(ids, [0, 1, 2, 3], "ids are the task's event sequence");
}

#[actix_web::test]
async fn a_message_reply_streams_one_message_event() {
    let app = spawn_app().await;
    let events = app
        .rpc_stream(
            "SendStreamingMessage",
            json!({"message": user_message("reply")}),
        )
        .await;
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].data["result"]["message"]["parts"][0]["text"],
        "hello back"
    );
}

#[actix_web::test]
async fn chunked_artifacts_stream_with_append_flags() {
    let app = spawn_app().await;
    let events = app
        .rpc_stream(
            "SendStreamingMessage",
            json!({"message": user_message("chunks")}),
        )
        .await;
    let chunks: Vec<_> = events
        .iter()
        .filter_map(|e| e.data["result"].get("artifactUpdate"))
        .collect();
    assert_eq!(chunks.len(), 2);
    assert_eq!(chunks[0]["append"], true);
    assert_eq!(chunks[1]["lastChunk"], true);
    let id = events[0].data["result"]["task"]["id"].clone();
    let task = app.rpc("GetTask", json!({"id": id})).await;
    let parts = task["result"]["artifacts"][0]["parts"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(parts, 2, "chunks are merged into one artifact");
}

#[actix_web::test]
async fn early_errors_are_plain_json_not_sse() {
    let app = spawn_app().await;
    let r = app
        .client
        .post(format!("{}/", app.url))
        .json(&json!({"jsonrpc":"2.0","id":9,"method":"SubscribeToTask","params":{"id":"missing"}}))
        .send()
        .await
        .unwrap();
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32001);

    let (done, _) = app.task_with("complete").await;
    let r = app.rpc("SubscribeToTask", json!({"id": done})).await;
    assert_eq!(
        r["error"]["code"], -32004,
        "subscribing to a terminal task: {r}"
    );
}

#[actix_web::test]
async fn several_subscribers_see_the_same_events_in_the_same_order() {
    let app = spawn_app().await;
    let id = app.start_waiting_task().await;
    let mut responses = Vec::new();
    for _ in 0..3 {
        responses.push(app.subscribe(&id, None).await);
    }
    app.release.notify_one();
    // A subscriber may attach before or after the agent's first update, so snapshots may
    // differ; what must hold is that after its snapshot (id N) each one receives events
    // N+1, N+2, … to the end, identical for everyone.
    let mut by_id: std::collections::BTreeMap<i64, String> = Default::default();
    let mut last_ids = Vec::new();
    for response in responses {
        let events = read_sse(response, usize::MAX).await;
        assert!(
            events[0].data.get("task").is_some(),
            "a snapshot first: {:?}",
            events[0]
        );
        let ids: Vec<i64> = events.iter().map(|e| e.id.parse().unwrap()).collect();
        let expected: Vec<i64> = (ids[0]..ids[0] + ids.len() as i64).collect();
        assert_eq!(ids, expected, "consecutive after the snapshot");
        for event in &events[1..] {
            let data = event.data.to_string();
            let seen = by_id
                .entry(event.id.parse().unwrap())
                .or_insert_with(|| data.clone());
            assert_eq!(
                *seen, data,
                "event {} differs between subscribers",
                event.id
            );
        }
        last_ids.push(*ids.last().unwrap());
        let last = &events.last().unwrap().data;
        assert_eq!(
            last["statusUpdate"]["status"]["state"],
            "TASK_STATE_COMPLETED"
        );
    }
    assert!(last_ids.iter().all(|id| *id == last_ids[0]), "{last_ids:?}");
}

#[actix_web::test]
async fn resuming_with_last_event_id_replays_what_was_missed_without_duplicates() {
    let app = spawn_app().await;
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
    assert!(events.len() >= 5);
    // Pretend the connection broke after event 1; the task has finished meanwhile.
    let resumed = app
        .client
        .get(format!("{}/tasks/{id}:subscribe", app.url))
        .header("Last-Event-ID", "1")
        .send()
        .await
        .unwrap();
    let replay = read_sse(resumed, usize::MAX).await;
    let replay_ids: Vec<&str> = replay.iter().map(|e| e.id.as_str()).collect();
    let expected: Vec<&str> = events[2..].iter().map(|e| e.id.as_str()).collect();
    assert_eq!(replay_ids, expected);
    for (a, b) in replay.iter().zip(&events[2..]) {
        assert_eq!(
            a.data, b.data["result"],
            "REST events are bare StreamResponses"
        );
    }
}

#[actix_web::test]
async fn a_live_resume_gets_the_gap_then_live_events() {
    let app = spawn_app().await;
    let id = app.start_waiting_task().await;
    let response = app.subscribe(&id, Some("0")).await;
    app.release.notify_one();
    let events = read_sse(response, usize::MAX).await;
    let ids: Vec<i64> = events.iter().map(|e| e.id.parse().unwrap()).collect();
    assert_eq!(
        ids,
        [1, 2, 3],
        "working (from the log), artifact and completed (live)"
    );
}
