//! Cluster mode: two nodes on one Postgres database, in this process. Forwarding to a
//! thread's owner, a subscriber on one node following a turn on the other, a dead node's
//! threads taken over (its working task failed as interrupted), and fencing: a node whose
//! lease was taken writes nothing more.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use agent_a2a::config::Settings;

use crate::support::{
    Backend, TestApp, TestDatabase, fresh_postgres, post_rpc, read_sse, spawn_app_in,
    spawn_app_with_skills_in, user_message,
};

const SECRET: &str = "a-cluster-secret-for-tests";
const LEASE_MS: u64 = 1500;

fn cluster_settings(id: &str) -> impl FnOnce(&mut Settings) {
    let id = id.to_owned();
    move |s| {
        s.cluster.enabled = true;
        s.cluster.node_id = id;
        s.cluster.secret = SECRET.into();
        s.cluster.lease_ttl_ms = LEASE_MS;
        s.cluster.heartbeat_ms = 300;
        // Streams across nodes must be woken by notifications, not by the poll.
        s.cluster.stream_poll_ms = 600_000;
        s.idempotency.enabled = true;
    }
}

async fn node(url: &str, id: &str) -> TestApp {
    spawn_app_in(
        None,
        Backend::Postgres(url.to_owned()),
        cluster_settings(id),
    )
    .await
}

async fn two_nodes() -> Option<(TestDatabase, TestApp, TestApp)> {
    let db = fresh_postgres().await?;
    let a = node(&db.url, "node-a").await;
    let b = node(&db.url, "node-b").await;
    Some((db, a, b))
}

/// One row of a query against the test database.
pub(crate) async fn query_one(url: &str, sql: &str) -> Option<Vec<String>> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    actix_web::rt::spawn(connection);
    let rows = client.simple_query(sql).await.expect("query");
    rows.into_iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(row) => Some(
            (0..row.len())
                .map(|i| row.get(i).unwrap_or("").to_owned())
                .collect(),
        ),
        _ => None,
    })
}

pub(crate) async fn owner_of(url: &str, context_id: &str) -> Option<String> {
    query_one(
        url,
        &format!("SELECT owner_node FROM threads WHERE thread_id = a2a_id('{context_id}')"),
    )
    .await
    .map(|row| row[0].clone())
}

fn follow_up(task: &Value, text: &str) -> Value {
    let mut message = user_message(text);
    message["taskId"] = task["id"].clone();
    message["contextId"] = task["contextId"].clone();
    json!({"message": message})
}

/// A task of `app`'s waiting for input (the scripted agent's "input please"), and its
/// thread's id.
async fn waiting_for_input(app: &TestApp) -> (Value, String) {
    let r = app.send_text("input please").await;
    let task = r["result"]["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{r}");
    let context = task["contextId"].as_str().unwrap().to_owned();
    (task, context)
}

/// Polls `check` until it holds, for at most `within`.
pub(crate) async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[actix_web::test]
async fn a_follow_up_on_another_node_is_served_by_the_threads_owner() {
    let Some((db, a, b)) = two_nodes().await else {
        return;
    };
    let url = db.url.clone();
    let r = a.send_text("input please").await;
    let task = r["result"]["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{r}");
    let context = task["contextId"].as_str().unwrap().to_owned();
    assert_eq!(owner_of(&url, &context).await.as_deref(), Some("node-a"));

    // The follow-up lands on B, which forwards it to A.
    let r = b.rpc("SendMessage", follow_up(&task, "more")).await;
    let done = &r["result"]["task"];
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    assert_eq!(done["id"], task["id"]);
    assert!(
        !b.runtime.is_resident(
            &tenant(),
            &agent_a2a::domain::ContextId::parse(&context).unwrap()
        ),
        "B never loaded A's thread"
    );
    assert_eq!(owner_of(&url, &context).await.as_deref(), Some("node-a"));
    // Reads on B come from the store: the same task.
    let got = b.rpc("GetTask", json!({"id": task["id"]})).await;
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED");

    // A cancel of a task of A sent to B is A's answer (here: not cancelable).
    let r = b.rpc("CancelTask", json!({"id": task["id"]})).await;
    assert_eq!(r["error"]["code"], -32002, "{r}");

    // A node without the cluster's secret gets nothing from the internal calls.
    let refused = b
        .client
        .post(format!("{}/_cluster/v1/cancel", a.url))
        .bearer_auth("not-the-secret-of-this-cluster")
        .json(&json!({"tenant": "default", "task_id": task["id"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 404);

    // Each node says which it is on its dashboard, and counts what it forwarded (the
    // metrics recorder is one per process: the series exists, its value is shared).
    let stats: Value = b.get("/dashboard/stats.json").await.json().await.unwrap();
    assert_eq!(stats["cluster"]["node"], "node-b", "{stats}");
    assert_eq!(stats["cluster"]["liveNodes"], 2, "{stats}");
    let metrics = b.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("agent_a2a_cluster_forwarded_total{call=\"send\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("agent_a2a_cluster_nodes"), "{metrics}");
}

/// A retry is recognised by what the client sent, whichever node took the first send:
/// a follow-up that names only its task, forwarded by B to the thread's owner A, is
/// answered with the same task when retried on either node — never `INVALID_PARAMS`
/// because routing filled in the message's `contextId` on the way.
#[actix_web::test]
async fn a_retry_of_a_forwarded_send_gets_the_first_answer_on_any_node() {
    let Some((_db, a, b)) = two_nodes().await else {
        return;
    };
    let r = a.send_text("input please").await;
    let task = r["result"]["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{r}");

    let mut message = user_message("more");
    message["taskId"] = task["id"].clone();
    let params = json!({"message": message});
    let first = b.rpc("SendMessage", params.clone()).await;
    assert_eq!(
        first["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{first}"
    );
    for (node, app) in [("B", &b), ("A", &a)] {
        let again = app.rpc("SendMessage", params.clone()).await;
        assert_eq!(
            again["result"]["task"]["id"], task["id"],
            "a retry on {node}: {again}"
        );
        assert_eq!(
            again["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "a retry on {node}: {again}"
        );
    }
    let history = a
        .rpc("GetTask", json!({"id": task["id"], "historyLength": 100}))
        .await;
    let sent = history["result"]["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["messageId"] == message["messageId"])
        .count();
    assert_eq!(sent, 1, "the follow-up is stored once: {history}");
}

/// The first send of a new conversation held up on A (as on a node frozen mid-turn)
/// while the client's retry is served by B: when A goes on, its commit finds the key
/// claimed, and A answers with B's task — never `INVALID_PARAMS` because the context A
/// had minted for it went along to B.
#[actix_web::test]
async fn a_send_held_up_on_one_node_while_its_retry_is_served_by_another_gets_that_answer() {
    let Some(db) = fresh_postgres().await else {
        return;
    };
    let node = |id: &'static str| {
        let url = db.url.clone();
        async move {
            spawn_app_in(None, Backend::Postgres(url), move |s| {
                s.cluster.enabled = true;
                s.cluster.node_id = id.into();
                s.cluster.secret = SECRET.into();
                s.cluster.lease_ttl_ms = LEASE_MS;
                s.cluster.heartbeat_ms = 300;
                s.idempotency.enabled = true;
                // A turn's first writes wait for its first output, which "hold" delays.
                s.persistence.start_grace_ms = 10_000;
            })
            .await
        }
    };
    let (a, b) = (node("node-a").await, node("node-b").await);
    let message = user_message("hold on");
    let params = json!({"message": message});

    let first = {
        let (client, url, params) = (a.client.clone(), a.url.clone(), params.clone());
        actix_web::rt::spawn(async move {
            let answer = post_rpc(&client, &url, "SendMessage", params).await;
            answer.json::<Value>().await.unwrap()
        })
    };
    let holding = a.holding.clone();
    eventually(Duration::from_secs(10), "A holds the turn", move || {
        let holding = holding.clone();
        async move { holding.load(std::sync::atomic::Ordering::SeqCst) == 1 }
    })
    .await;

    // The retry, on B, runs there: nothing of A's turn is in the store yet.
    b.release.notify_one();
    let retried = b.rpc("SendMessage", params.clone()).await;
    let task = retried["result"]["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{retried}");

    a.release.notify_one();
    let first = first.await.unwrap();
    assert_eq!(first["result"]["task"]["id"], task["id"], "{first}");
    assert_eq!(
        first["result"]["task"]["contextId"], task["contextId"],
        "{first}"
    );
    let tasks = b.rpc("ListTasks", json!({})).await;
    assert_eq!(
        tasks["result"]["totalSize"], 1,
        "one task for one message: {tasks}"
    );
}

#[actix_web::test]
async fn a_subscriber_on_one_node_follows_a_turn_running_on_the_other() {
    let Some((_db, a, b)) = two_nodes().await else {
        return;
    };
    let id = a.start_waiting_task().await;
    let subscription = b.subscribe(&id, None).await;
    assert_eq!(subscription.status(), 200);
    let reading = actix_web::rt::spawn(read_sse(subscription, 10));
    // The subscriber is registered before the turn moves on.
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.release.notify_one();
    let events = tokio::time::timeout(Duration::from_secs(10), reading)
        .await
        .expect("the stream ends")
        .unwrap();
    let ids: Vec<i64> = events.iter().map(|e| e.id.parse().unwrap()).collect();
    let mut sorted = ids.clone();
    sorted.dedup();
    assert_eq!(ids, sorted, "no duplicate: {ids:?}");
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1),
        "no gap after the snapshot: {ids:?}"
    );
    let last = &events.last().unwrap().data;
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{events:?}"
    );
    // Woken by notifications: the poll (10 minutes here) never came.
    assert!(events.len() >= 3, "{events:?}");
}

/// A node that begins to leave (a graceful shutdown's notice to its balancer) fails
/// `/health/ready` and ends the streams that follow another node's task — after what
/// the task's log holds, so that the client resumes elsewhere — but still serves
/// messages; new subscriptions are refused, retryably. Then the drain refuses messages.
#[actix_web::test]
async fn a_leaving_node_fails_readiness_and_ends_followed_streams_but_still_serves_messages() {
    let Some((_db, a, b)) = two_nodes().await else {
        return;
    };
    let id = a.start_waiting_task().await;
    let subscription = b.subscribe(&id, None).await;
    assert_eq!(subscription.status(), 200);
    let reading = actix_web::rt::spawn(read_sse(subscription, 10));
    assert_eq!(b.get("/health/ready").await.status(), 200);

    b.runtime.lifecycle().begin_leaving();
    let events = tokio::time::timeout(Duration::from_secs(10), reading)
        .await
        .expect("the followed stream ends although the task still runs on A")
        .unwrap();
    let ids: Vec<i64> = events.iter().map(|e| e.id.parse().unwrap()).collect();
    assert!(!ids.is_empty(), "the stream gave what was logged first");
    let ready = b.get("/health/ready").await;
    assert_eq!(ready.status(), 503);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["status"], "shutting down", "{body}");

    // A resubscription with the last id it saw gets the rest on A, from there on.
    let last = *ids.last().unwrap();
    let last_id = last.to_string();
    let refused = b.subscribe(&id, Some(&last_id)).await;
    assert_eq!(
        refused.status(),
        503,
        "no new subscription on a leaving node"
    );
    let resumed = a.subscribe(&id, Some(&last_id)).await;
    let reading = actix_web::rt::spawn(read_sse(resumed, 10));
    // Messages are still served, those of B's own new threads and those forwarded.
    let r = b.send_text("complete").await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    a.release.notify_one();
    let rest = tokio::time::timeout(Duration::from_secs(10), reading)
        .await
        .expect("the resumed stream ends with the task")
        .unwrap();
    assert!(
        rest.iter().all(|e| e.id.parse::<i64>().unwrap() > last),
        "nothing repeated: {rest:?}"
    );
    assert_eq!(
        rest.last().unwrap().data["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{rest:?}"
    );

    b.runtime.lifecycle().begin_drain();
    let params = json!({"message": user_message("complete")});
    let r = b.post_rpc("SendMessage", params).await;
    assert_eq!(r.status(), 503, "a draining node takes no new message");
}

/// The same over gRPC: a node that begins to leave ends the `SubscribeToTask` streams
/// that follow another node's task, after what the log holds, and refuses new ones with
/// `UNAVAILABLE`; the client resumes on another node with `last-event-id` and gets the
/// rest, nothing repeated.
#[actix_web::test]
async fn a_leaving_node_ends_followed_grpc_streams_for_clients_to_resume_elsewhere() {
    use a2a_pb::proto;
    use futures_util::StreamExt;

    use crate::grpc::{call, client, event_id, kind};

    let Some((_db, a, b)) = two_nodes().await else {
        return;
    };
    let id = a.start_waiting_task().await;
    let subscribe = |last: Option<String>| {
        let id = id.clone();
        let last = last.unwrap_or_default();
        move |mut c: a2a_pb::proto::a2a_service_client::A2aServiceClient<_>| async move {
            let request = proto::SubscribeToTaskRequest {
                id,
                ..Default::default()
            };
            let metadata: &[(&'static str, &str)] = match last.as_str() {
                "" => &[],
                last => &[("last-event-id", last)],
            };
            c.subscribe_to_task(call(request, metadata)).await
        }
    };
    let mut followed = subscribe(None)(client(&b).await)
        .await
        .expect("B follows A's task")
        .into_inner();
    let first = followed.next().await.unwrap().unwrap();
    assert_eq!(kind(&first), "task", "{first:?}");

    b.runtime.lifecycle().begin_leaving();
    let started = Instant::now();
    let mut seen = vec![event_id(&first).unwrap()];
    loop {
        let next = tokio::time::timeout(Duration::from_secs(10), followed.next())
            .await
            .expect("the followed stream ends although the task still runs on A");
        match next {
            Some(Ok(event)) => seen.push(event_id(&event).unwrap()),
            Some(Err(status)) => panic!("ends cleanly, not with {status:?}"),
            None => break,
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "ended within a second of the notice: {:?}",
        started.elapsed()
    );
    let last = *seen.last().unwrap();
    let refused = subscribe(Some(last.to_string()))(client(&b).await)
        .await
        .expect_err("no new subscription on a leaving node");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");

    let mut resumed = subscribe(Some(last.to_string()))(client(&a).await)
        .await
        .expect("resumes on A")
        .into_inner();
    a.release.notify_one();
    let mut rest = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(10), resumed.next())
        .await
        .expect("the resumed stream moves")
    {
        rest.push(event.unwrap());
    }
    let ids: Vec<i64> = rest.iter().map(|e| event_id(e).unwrap()).collect();
    let expected: Vec<i64> = (last + 1..).take(ids.len()).collect();
    assert_eq!(
        ids, expected,
        "from the next event on: none lost, none repeated"
    );
    let Some(proto::stream_response::Payload::StatusUpdate(done)) =
        rest.last().and_then(|e| e.payload.as_ref())
    else {
        panic!("ends with a status update: {rest:?}");
    };
    assert_eq!(
        done.status.as_ref().unwrap().state,
        proto::TaskState::Completed as i32
    );
}

/// A node that left (the end of a graceful shutdown) stays gone: its renewals do not
/// take the lease again, so the other nodes take its threads over on their next request
/// instead of after a lease's time.
#[actix_web::test]
async fn a_node_that_left_does_not_join_again_and_its_threads_move_at_once() {
    let Some((db, a, b)) = two_nodes().await else {
        return;
    };
    let (task, context) = waiting_for_input(&a).await;
    assert_eq!(owner_of(&db.url, &context).await.as_deref(), Some("node-a"));

    a.runtime.lifecycle().begin_drain();
    a.runtime.cluster().unwrap().leave().await;
    let r = b.rpc("SendMessage", follow_up(&task, "more")).await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    assert_eq!(owner_of(&db.url, &context).await.as_deref(), Some("node-b"));
    let lease = query_one(
        &db.url,
        "SELECT expires_at FROM cluster_nodes WHERE node_id = 'node-a'",
    )
    .await;
    assert_eq!(
        lease.as_deref(),
        Some(&["0".to_owned()][..]),
        "A stays gone"
    );
}

/// A draining node asked (through another node) for a thread it runs nothing on gives
/// the thread up: the send is refused retryably once, and its retry is served by the node
/// it reached — without waiting for the draining node to leave.
#[actix_web::test]
async fn a_draining_node_gives_up_an_idle_thread_another_node_asks_for() {
    let Some((db, a, b)) = two_nodes().await else {
        return;
    };
    let (task, context) = waiting_for_input(&a).await;
    a.runtime.lifecycle().begin_drain();

    let params = follow_up(&task, "more");
    let first = b.post_rpc("SendMessage", params.clone()).await;
    assert_eq!(
        first.status(),
        503,
        "refused retryably by the draining owner"
    );
    assert_eq!(
        owner_of(&db.url, &context).await,
        Some(String::new()),
        "given up"
    );
    let again = b.rpc("SendMessage", params).await;
    assert_eq!(
        again["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{again}"
    );
    assert_eq!(again["result"]["task"]["id"], task["id"]);
    assert_eq!(owner_of(&db.url, &context).await.as_deref(), Some("node-b"));
    let metrics = a.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("agent_a2a_cluster_handovers_total 1"),
        "{metrics}"
    );
}

/// A client's send that reaches a draining node for a thread another node serves is
/// forwarded there, not refused; one for a thread of its own, or a new conversation,
/// is refused retryably.
#[actix_web::test]
async fn a_draining_node_forwards_a_send_for_another_nodes_thread() {
    let Some((_db, a, b)) = two_nodes().await else {
        return;
    };
    let (on_b, _) = waiting_for_input(&b).await;
    let (on_a, _) = waiting_for_input(&a).await;
    a.runtime.lifecycle().begin_drain();

    let r = a.rpc("SendMessage", follow_up(&on_b, "more")).await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    assert_eq!(r["result"]["task"]["id"], on_b["id"]);
    for params in [
        follow_up(&on_a, "more"),
        json!({"message": user_message("complete")}),
    ] {
        let refused = a.post_rpc("SendMessage", params).await;
        assert_eq!(refused.status(), 503);
    }
}

#[actix_web::test]
async fn a_dead_nodes_threads_are_taken_over_and_its_working_task_fails_as_interrupted() {
    let Some((db, a, b)) = two_nodes().await else {
        return;
    };
    let url = db.url.clone();
    let id = a.start_waiting_task().await;
    let got = a.rpc("GetTask", json!({"id": id})).await;
    let context = got["result"]["contextId"].as_str().unwrap().to_owned();
    // A dies: no graceful leave, its lease simply stops being renewed.
    let died = Instant::now();
    a.runtime.cluster().unwrap().stop();
    a.stop().await;
    // B's sweep (or the next request) takes the thread over and fails the task.
    eventually(
        Duration::from_secs(15),
        "the task fails as interrupted",
        || {
            let b = &b;
            let id = id.clone();
            async move {
                let got = b.rpc("GetTask", json!({"id": id})).await;
                got["result"]["status"]["state"] == "TASK_STATE_FAILED"
            }
        },
    )
    .await;
    let took = died.elapsed();
    eprintln!(
        "takeover: the dead node's task failed on the survivor {took:?} after the death (lease {LEASE_MS} ms)"
    );
    let got = b.rpc("GetTask", json!({"id": id})).await;
    let status = &got["result"]["status"];
    assert_eq!(
        status["message"]["metadata"]["errorCode"], "INTERRUPTED",
        "{got}"
    );
    assert_eq!(owner_of(&url, &context).await.as_deref(), Some("node-b"));
    // The thread continues on B.
    let mut message = user_message("after the takeover");
    message["contextId"] = json!(context);
    let r = b.rpc("SendMessage", json!({"message": message})).await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
}

#[actix_web::test]
async fn a_node_whose_lease_was_taken_writes_nothing_and_rejoins() {
    let Some((db, a, _b)) = two_nodes().await else {
        return;
    };
    let url = db.url.clone();
    let r = a.send_text("input please").await;
    let task = r["result"]["task"].clone();
    let messages = |url: String, context: String| async move {
        query_one(
            &url,
            &format!("SELECT count(*) FROM messages WHERE thread_id = a2a_id('{context}')"),
        )
        .await
        .unwrap()[0]
            .clone()
    };
    let context = task["contextId"].as_str().unwrap().to_owned();
    let before = messages(url.clone(), context.clone()).await;
    let old_token = a.runtime.cluster().unwrap().token();
    // Another node fences A, as a takeover does (A's lease is still running here, which
    // a real takeover would wait for: the fencing is what is under test).
    query_one(
        &url,
        "UPDATE cluster_nodes SET token = token + 1 WHERE node_id = 'node-a' RETURNING token",
    )
    .await;
    let refused = a.post_rpc("SendMessage", follow_up(&task, "more")).await;
    assert_eq!(refused.status(), 503, "refused, not acknowledged");
    assert!(refused.headers().contains_key("retry-after"));
    let r: Value = refused.json().await.unwrap();
    assert_eq!(r["error"]["code"], -32000, "{r}");
    assert_eq!(
        messages(url.clone(), context.clone()).await,
        before,
        "nothing of the refused send is stored"
    );
    // Refused at the commit by the fence, it is counted: the turn's work for the refused
    // write may be done again elsewhere. On a busy machine A's lease renewal may notice
    // the raised token before the send and refuse it before any turn runs (its lease
    // pending, or already renewed under a new token): nothing was done to count then.
    let cluster = a.runtime.cluster().unwrap().clone();
    let noticed_first = cluster.token() != old_token || !cluster.holds_lease();
    if !noticed_first {
        let metrics = a.get("/metrics").await.text().await.unwrap();
        assert!(
            metrics.contains("agent_a2a_cluster_fenced_writes_total"),
            "{metrics}"
        );
    }
    // A notices, drops its threads and rejoins with a new token; the retry is served.
    eventually(Duration::from_secs(10), "A rejoins", || {
        let cluster = a.runtime.cluster().unwrap().clone();
        async move { cluster.token() > old_token + 1 && cluster.holds_lease() }
    })
    .await;
    let r = a.rpc("SendMessage", follow_up(&task, "more")).await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
}

/// A turn whose node loses the thread while the turn runs (a takeover raises the node's
/// token) writes nothing through its tools either: the memory it adds and the knowledge
/// item it proposes are refused, as its own commits are, and the client is told to
/// retry.
#[actix_web::test]
async fn a_turn_fenced_off_while_it_runs_writes_nothing_through_its_tools() {
    let Some(db) = fresh_postgres().await else {
        return;
    };
    // Each node's knowledge repository in a directory of its own. A renewal would find
    // A's token moved and drop A's actors, cutting the turn short before its tools run:
    // none comes within the test, which is what a node frozen past its lease meets.
    let node = |id: &'static str| {
        let dir = tempfile::tempdir().expect("temp dir");
        let backend = Backend::Postgres(db.url.clone());
        spawn_app_with_skills_in(Some(dir), backend, |s| {
            cluster_settings(id)(s);
            s.cluster.lease_ttl_ms = 60_000;
            s.cluster.heartbeat_ms = 30_000;
        })
    };
    let a = node("node-a").await;
    let _b = node("node-b").await;
    let url = db.url.clone();
    let memories = |url: String| async move {
        query_one(
            &url,
            "SELECT string_agg(content, ',' ORDER BY content) FROM memories",
        )
        .await
        .unwrap()[0]
            .clone()
    };
    let remember = |text: &'static str| {
        let (client, url) = (a.client.clone(), a.url.clone());
        actix_web::rt::spawn(async move {
            let params = json!({"message": user_message(text)});
            post_rpc(&client, &url, "SendMessage", params).await
        })
    };
    let held = |n: usize| {
        let holding = a.holding.clone();
        move || {
            let holding = holding.clone();
            async move { holding.load(std::sync::atomic::Ordering::SeqCst) == n }
        }
    };

    // Held by A throughout: the memory is written and the task completes.
    let kept = remember("remember kept");
    eventually(Duration::from_secs(10), "the turn waits", held(1)).await;
    a.release.notify_one();
    let answer: Value = kept.await.unwrap().json().await.unwrap();
    assert_eq!(
        answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{answer}"
    );
    assert_eq!(memories(url.clone()).await, "kept");

    // Another node fences A while the turn runs (as a takeover does), then the turn's
    // tool writes.
    let refused = remember("remember lost");
    eventually(Duration::from_secs(10), "the turn waits", held(1)).await;
    query_one(
        &url,
        "UPDATE cluster_nodes SET token = token + 1 WHERE node_id = 'node-a' RETURNING token",
    )
    .await;
    a.release.notify_one();
    let refused = refused.await.unwrap();
    assert_eq!(refused.status(), 503, "refused, not acknowledged");
    assert_eq!(
        memories(url.clone()).await,
        "kept",
        "the fenced turn's memory is not stored"
    );
    // Both tools were refused (the knowledge item is checked before its git commit).
    let metrics = a.get("/metrics").await.text().await.unwrap();
    for tool in ["memory_add", "knowledge_propose"] {
        assert!(
            metrics.contains(&format!(r#"tool="{tool}",outcome="fenced""#)),
            "{tool}: {metrics}"
        );
    }
}

#[actix_web::test]
async fn a_key_claimed_on_one_node_is_known_to_the_others_without_a_read() {
    let Some((db, a, b)) = two_nodes().await else {
        return;
    };
    let certain = |app: &TestApp| {
        let runtime = app.runtime.clone();
        move || {
            let runtime = runtime.clone();
            async move { runtime.claim_filter_certain() }
        }
    };
    eventually(Duration::from_secs(10), "A hears the claims", certain(&a)).await;
    eventually(Duration::from_secs(10), "B hears the claims", certain(&b)).await;
    for key in ["never-1", "never-2", "never-3"] {
        assert!(!b.runtime.may_have_claimed(&tenant(), key), "{key}");
    }

    // A claims a key: B hears it once A's commit is done, and a retry on B gets A's task.
    let mut message = user_message("complete");
    message["messageId"] = json!("claimed-on-a");
    let first = a.rpc("SendMessage", json!({"message": message})).await;
    let task_id = first["result"]["task"]["id"].clone();
    assert!(task_id.is_string(), "{first}");
    let heard = |app: &TestApp, key: &'static str| {
        let runtime = app.runtime.clone();
        move || {
            let runtime = runtime.clone();
            async move { runtime.may_have_claimed(&tenant(), key) }
        }
    };
    eventually(
        Duration::from_secs(5),
        "B hears A's claim",
        heard(&b, "claimed-on-a"),
    )
    .await;
    let again = b.rpc("SendMessage", json!({"message": message})).await;
    assert_eq!(again["result"]["task"]["id"], task_id, "{again}");
    let tasks = b.rpc("ListTasks", json!({})).await;
    assert_eq!(
        tasks["result"]["totalSize"], 1,
        "the agent ran once: {tasks}"
    );

    // B's listening connection drops: until it hears claims again and has read what it
    // may have missed, it is not certain; then it knows what A claimed meanwhile.
    let ended = query_one(
        &db.url,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE application_name = 'agent-a2a node-b session' AND datname = current_database()",
    )
    .await;
    assert_eq!(ended.as_deref(), Some(&["1".to_owned()][..]));
    let mut message = user_message("complete");
    message["messageId"] = json!("claimed-while-b-reconnects");
    let r = a.rpc("SendMessage", json!({"message": message})).await;
    assert!(r["result"]["task"].is_object(), "{r}");
    // (Sent while B is deaf — its connection is back at its next renewal — the claim
    // reaches B only by the load that follows.)
    let runtime = b.runtime.clone();
    eventually(
        Duration::from_secs(10),
        "B hears the claims again and knows the one it missed",
        move || {
            let runtime = runtime.clone();
            async move {
                runtime.claim_filter_certain()
                    && runtime.may_have_claimed(&tenant(), "claimed-while-b-reconnects")
            }
        },
    )
    .await;
    assert!(!b.runtime.may_have_claimed(&tenant(), "never-4"));
}

fn tenant() -> agent_a2a::domain::TenantId {
    agent_a2a::domain::TenantId::default_tenant()
}

/// Deliveries a server without cluster mode still owed when it stopped (rows of no
/// node) are made once cluster mode is on: the cluster's leader takes them over.
#[actix_web::test]
async fn deliveries_owed_from_before_cluster_mode_are_made_by_the_cluster() {
    let Some(db) = fresh_postgres().await else {
        return;
    };
    // The receiver's port, with nobody listening while the lone server runs.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let hook = format!("http://127.0.0.1:{port}/hook");
    let quick = |s: &mut Settings| {
        s.push.allow_loopback = true;
        s.push.backoff_initial_ms = 20;
        s.push.backoff_max_ms = 200;
        s.push.breaker_open_ms = 100;
        s.push.poll_interval_ms = 100;
    };
    let alone = spawn_app_in(None, Backend::Postgres(db.url.clone()), quick).await;
    let r = alone
        .rpc(
            "SendMessage",
            json!({"message": user_message("complete"),
                   "configuration": {"taskPushNotificationConfig": {"url": hook}}}),
        )
        .await;
    let task = r["result"]["task"]["id"].as_str().unwrap().to_owned();
    alone.stop().await;
    let owed = query_one(&db.url, "SELECT count(*), min(node_id) FROM push_outbox")
        .await
        .unwrap();
    assert_eq!(owed, ["3", ""], "three events owed, of no node");

    let in_cluster = |id: &str| {
        let id = id.to_owned();
        move |s: &mut Settings| {
            cluster_settings(&id)(s);
            quick(s);
        }
    };
    let _a = spawn_app_in(
        None,
        Backend::Postgres(db.url.clone()),
        in_cluster("node-a"),
    )
    .await;
    let _b = spawn_app_in(
        None,
        Backend::Postgres(db.url.clone()),
        in_cluster("node-b"),
    )
    .await;
    let receiver =
        crate::push::Receiver::start(std::net::TcpListener::bind(("127.0.0.1", port)).unwrap(), 0);
    let got = receiver.delivered(3).await;
    let ids: Vec<&str> = got.iter().map(|r| r.event_id()).collect();
    assert_eq!(
        ids,
        (1..=3).map(|n| format!("{task}:{n}")).collect::<Vec<_>>()
    );
    eventually(Duration::from_secs(10), "the outbox drains", || {
        let url = db.url.clone();
        async move {
            query_one(&url, "SELECT count(*) FROM push_outbox")
                .await
                .unwrap()[0]
                == "0"
        }
    })
    .await;
}

/// A forward to the thread's owner is bounded by the time its caller will wait
/// (`x-a2a-timeout-ms`, as a balancer sets it): B answers 503 when that time is up, not
/// after `cluster.forward_timeout_secs`, and a retry of the message finds what the owner
/// did with it.
#[actix_web::test]
async fn a_forward_gives_up_when_the_caller_would_and_the_retry_finds_the_owners_answer() {
    let Some((db, a, b)) = two_nodes().await else {
        return;
    };
    let r = a.send_text("complete").await;
    let context = r["result"]["task"]["contextId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(owner_of(&db.url, &context).await.as_deref(), Some("node-a"));

    let mut message = user_message("wait for release");
    message["contextId"] = json!(context);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                      "params": {"message": message}});
    let started = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        b.client
            .post(format!("{}/", b.url))
            .header("A2A-Version", "1.0")
            .header("x-a2a-timeout-ms", "500")
            .json(&body)
            .send(),
    )
    .await
    .expect("B answered within the caller's time, not the forward timeout")
    .unwrap();
    let waited = started.elapsed();
    assert_eq!(answer.status(), 503);
    assert!(answer.headers().contains_key("retry-after"));
    let answer: Value = answer.json().await.unwrap();
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(3),
        "answered after {waited:?}: {answer}"
    );

    // The owner goes on with the turn; the retry (on B, no deadline) gets its outcome.
    a.release.notify_one();
    let retried = b.rpc("SendMessage", json!({"message": message})).await;
    let task = &retried["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{retried}");
    assert_eq!(task["contextId"], json!(context));
}
