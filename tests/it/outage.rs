//! A database outage: requests fail fast with a retryable error (503 + Retry-After,
//! nothing acknowledged), `/health` says so, and the server recovers by itself.
//! Postgres sits behind a TCP proxy the test can cut.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::support::{Backend, TestDatabase, fresh_postgres, spawn_app_with, user_message};

/// Forwards connections to `target` while up; when cut, drops every connection. While
/// stalled (a partition), it keeps every connection open and forwards nothing, in
/// either direction, until it is healed.
struct Proxy {
    port: u16,
    up: Arc<AtomicBool>,
    cut: Arc<Notify>,
    stalled: tokio::sync::watch::Sender<bool>,
}

/// Copies `from` to `to`, holding every read until `stalled` says otherwise.
async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut stalled: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if stalled.wait_for(|s| !*s).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Proxy {
    async fn start(target: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let cut = Arc::new(Notify::new());
        let (stalled, _) = tokio::sync::watch::channel(false);
        let (up2, cut2, stalled2) = (up.clone(), cut.clone(), stalled.clone());
        actix_web::rt::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    continue;
                }
                let target = target.clone();
                let cut = cut2.clone();
                let stalled = stalled2.subscribe();
                actix_web::rt::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (from_client, to_client) = inbound.into_split();
                    let (from_server, to_server) = outbound.into_split();
                    tokio::select! {
                        _ = forward(from_client, to_server, stalled.clone()) => {}
                        _ = forward(from_server, to_client, stalled) => {}
                        _ = cut.notified() => {}
                    }
                });
            }
        });
        Proxy {
            port,
            up,
            cut,
            stalled,
        }
    }

    fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
        if !up {
            self.cut.notify_waiters();
        }
    }

    /// A partition (`true`) or its heal.
    fn stall(&self, stalled: bool) {
        self.stalled.send_replace(stalled);
    }
}

/// The real server on a fresh Postgres database reached through a [`Proxy`] (with
/// `tweak` applied to its settings); the database (its own URL for direct reads). `None`
/// when there is no Postgres to test against (outside CI).
async fn behind_proxy(
    tweak: impl FnOnce(&mut agent_a2a::config::Settings),
) -> Option<(TestDatabase, Proxy, crate::support::TestApp)> {
    let db = fresh_postgres().await?;
    // postgres://user@host:port/db → the same through the proxy.
    let (prefix, rest) = db.url.split_once('@').unwrap();
    let (host_port, name) = rest.split_once('/').unwrap();
    let proxy = Proxy::start(host_port.to_owned()).await;
    let proxied = format!("{prefix}@127.0.0.1:{}/{name}", proxy.port);
    let app = spawn_app_with(Backend::Postgres(proxied), tweak).await;
    Some((db, proxy, app))
}

#[actix_web::test]
async fn a_database_outage_fails_fast_and_the_server_recovers() {
    let Some((_db, proxy, app)) = behind_proxy(|s| {
        s.store.acquire_timeout_ms = 500;
        s.server.retry_after_secs = 2;
    })
    .await
    else {
        return;
    };
    let (id, _) = app.task_with("complete").await;

    proxy.set_up(false);
    let r = app
        .client
        .post(format!("{}/", app.url))
        .json(&json!({"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message": user_message("complete")}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "2");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32000, "{body}");
    assert!(body["result"].is_null());

    let r = app
        .post_json(
            "/message:send",
            json!({"message": user_message("complete")}),
        )
        .await;
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    let health = app.get("/health").await;
    assert_eq!(health.status(), 503);

    proxy.set_up(true);
    // Connections broken by the outage are replaced on use; give the pool a few tries.
    let mut recovered = None;
    for _ in 0..50 {
        let r = app.rpc("GetTask", json!({"id": id})).await;
        if r["result"]["id"] == id.as_str() {
            recovered = Some(r);
            break;
        }
    }
    assert!(
        recovered.is_some(),
        "the server did not recover after the database returned"
    );
    let (_, task) = app.task_with("complete").await;
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(app.get("/health").await.status(), 200);
}

/// What the store holds of a thread: its messages (role, text), read straight from the
/// database (not through the proxy).
async fn stored_messages(url: &str, context_id: &str) -> Vec<(String, String)> {
    use agent_a2a::domain::{ContextId, TenantId};
    let store = agent_a2a::store::open(&agent_a2a::store::StoreConfig {
        database_url: Some(url.to_owned()),
        ..Default::default()
    })
    .await
    .expect("store");
    let thread = store
        .load_thread(
            &TenantId::default_tenant(),
            &ContextId::parse(context_id).unwrap(),
            100,
        )
        .await
        .expect("load_thread");
    thread
        .map(|t| t.recent.into_iter().map(|m| (m.role, m.content)).collect())
        .unwrap_or_default()
}

/// Sends `params` until the database is back (the pool replaces broken connections on
/// use); returns the first answer that is not a 503.
async fn send_until_up(app: &crate::support::TestApp, params: &Value) -> Value {
    for _ in 0..50 {
        let r = app
            .client
            .post(format!("{}/", app.url))
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc":"2.0","id":1,"method":"SendMessage","params": params}))
            .send()
            .await
            .unwrap();
        if r.status() != 503 {
            return r.json().await.unwrap();
        }
    }
    panic!("the server did not recover after the database returned");
}

#[actix_web::test]
async fn a_send_refused_by_a_database_cut_leaves_nothing_behind_and_works_when_sent_again() {
    let Some((db, proxy, app)) = behind_proxy(|s| s.store.acquire_timeout_ms = 500).await else {
        return;
    };
    let url = db.url.clone();

    // A new task in a thread the client names.
    let context = uuid::Uuid::new_v4().to_string();
    let mut message = user_message("complete");
    message["contextId"] = json!(context);
    let params = json!({ "message": message });
    proxy.set_up(false);
    let r = app
        .client
        .post(format!("{}/", app.url))
        .json(&json!({"jsonrpc":"2.0","id":1,"method":"SendMessage","params": params}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    proxy.set_up(true);
    let done = send_until_up(&app, &params).await;
    assert_eq!(
        done["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{done}"
    );
    let messages = stored_messages(&url, &context).await;
    let users: Vec<_> = messages.iter().filter(|(role, _)| role == "user").collect();
    assert_eq!(
        users.len(),
        1,
        "the refused send left a message: {messages:?}"
    );

    // A follow-up to a task that asks for input, refused the same way.
    let asked = app
        .rpc(
            "SendMessage",
            json!({"message": {
            "messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
            "contextId": context, "parts": [{"text": "input"}]}}),
        )
        .await;
    let task_id = asked["result"]["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        asked["result"]["task"]["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );
    let before = stored_messages(&url, &context).await;
    let follow_up = json!({"message": {
        "messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
        "contextId": context, "taskId": task_id, "parts": [{"text": "more"}]}});
    proxy.set_up(false);
    let r = app
        .client
        .post(format!("{}/", app.url))
        .json(&json!({"jsonrpc":"2.0","id":1,"method":"SendMessage","params": follow_up}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    proxy.set_up(true);
    let task = loop {
        let r = app.rpc("GetTask", json!({"id": task_id})).await;
        if r["result"]["id"] == task_id.as_str() {
            break r["result"].clone();
        }
    };
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{task}"
    );
    assert_eq!(stored_messages(&url, &context).await, before);
    let continued = send_until_up(&app, &follow_up).await;
    assert_eq!(
        continued["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{continued}"
    );
    let after = stored_messages(&url, &context).await;
    assert_eq!(after.len(), before.len() + 2, "{after:?}");
}

fn no_eager_recovery(s: &mut agent_a2a::config::Settings) {
    // Nothing is resident after a restart until a request needs it: the reads below go to
    // the database.
    s.threads.recover_eagerly = 0;
    s.store.acquire_timeout_ms = 5_000;
}

/// A database that ends connections under running statements — what `pg_ctl stop -m
/// fast`, a crash restart or a failover does (SQLSTATE 57P01) — is unavailable, not an
/// internal error: every read (`GetTask`, `ListTasks`, a subscription's replay, a thread's
/// reload) and every write is answered 503 with `Retry-After`, none 500, and each works
/// when sent again once the database is back, stored once.
#[actix_web::test]
async fn connections_ended_by_the_database_mid_statement_are_retryable_not_internal() {
    let Some(db) = fresh_postgres().await else {
        return;
    };
    let url = db.url.clone();
    // A task waiting for input, in a thread whose actor is gone after a restart.
    let first = spawn_app_with(Backend::Postgres(url.clone()), no_eager_recovery).await;
    let asked = first
        .rpc("SendMessage", json!({"message": user_message("input")}))
        .await;
    let task_id = asked["result"]["task"]["id"].as_str().unwrap().to_owned();
    let context = asked["result"]["task"]["contextId"]
        .as_str()
        .unwrap()
        .to_owned();
    first.stop().await;
    let app = spawn_app_with(Backend::Postgres(url.clone()), no_eager_recovery).await;
    // A resident thread, so that a send there gets as far as its commit.
    let resident = uuid::Uuid::new_v4().to_string();
    let mut message = user_message("complete");
    message["contextId"] = json!(resident);
    let done = app.rpc("SendMessage", json!({"message": message})).await;
    assert_eq!(
        done["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    // Every table a request needs is held, so each statement waits in the database until
    // its connection is ended under it.
    let (locker, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    actix_web::rt::spawn(connection);
    locker
        .batch_execute(
            "BEGIN; LOCK TABLE threads, messages, tasks, task_events \
             IN ACCESS EXCLUSIVE MODE",
        )
        .await
        .unwrap();
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    actix_web::rt::spawn(connection);

    let rpc = |method: &'static str, params: Value| {
        let request = app
            .client
            .post(format!("{}/", app.url))
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
        async move { (method, request.send().await.unwrap()) }
    };
    let follow_up = json!({"message": {
        "messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
        "contextId": context, "taskId": task_id, "parts": [{"text": "more"}]}});
    let mut new_turn = user_message("complete");
    new_turn["contextId"] = json!(resident);
    let new_turn = json!({ "message": new_turn });
    let subscription = app
        .client
        .post(format!("{}/tasks/{task_id}:subscribe", app.url))
        .header("A2A-Version", "1.0")
        .header("Last-Event-ID", "0")
        .send();
    let requests = futures_util::future::join5(
        rpc("GetTask", json!({"id": task_id})),
        rpc("ListTasks", json!({})),
        rpc("SendMessage", follow_up.clone()),
        rpc("SendMessage", new_turn.clone()),
        async move { ("SubscribeToTask", subscription.await.unwrap()) },
    );
    tokio::pin!(requests);
    let answers = loop {
        tokio::select! {
            answers = &mut requests => break answers,
            // Whatever waits on the lock is cut mid-statement.
            _ = tokio::time::sleep(std::time::Duration::from_millis(20)) => {
                admin
                    .batch_execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE datname = current_database() AND pid <> pg_backend_pid() \
                         AND wait_event_type = 'Lock'",
                    )
                    .await
                    .unwrap();
            }
        }
    };
    locker.batch_execute("ROLLBACK").await.unwrap();
    let (a, b, c, d, e) = answers;
    let mut refusals = Vec::new();
    for (method, response) in [a, b, c, d, e] {
        let status = response.status().as_u16();
        let retry_after = response.headers().get("retry-after").is_some();
        let body = response.text().await.unwrap_or_default();
        refusals.push((method, status, retry_after, body));
    }
    for (method, status, retry_after, body) in &refusals {
        assert!(
            *status == 503 && *retry_after,
            "{method} answered {status} (Retry-After: {retry_after}) while the database \
             ended its connections: {body}\nall answers: {refusals:#?}"
        );
    }

    // Back: each works when sent again, and the refused sends left nothing behind.
    let continued = send_until_up(&app, &follow_up).await;
    assert_eq!(
        continued["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{continued}"
    );
    let again = send_until_up(&app, &new_turn).await;
    assert_eq!(
        again["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{again}"
    );
    let users = |messages: Vec<(String, String)>| {
        messages
            .into_iter()
            .filter(|(role, _)| role == "user")
            .count()
    };
    assert_eq!(users(stored_messages(&url, &context).await), 2);
    assert_eq!(users(stored_messages(&url, &resident).await), 2);
    let task = app.rpc("GetTask", json!({"id": task_id})).await;
    assert_eq!(
        task["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{task}"
    );
}

/// A database that stops answering — a partition: its connections stay open and nothing
/// comes back — fails a send within `store.answer_timeout_ms` with a retryable 503 (its
/// commit, then the read of its claim), not when the partition heals; the same send
/// after the heal is stored once.
#[actix_web::test]
async fn a_send_to_a_database_that_stops_answering_fails_within_the_answer_timeout() {
    let Some((db, proxy, app)) = behind_proxy(|s| {
        s.store.acquire_timeout_ms = 500;
        s.store.answer_timeout_ms = 1000;
    })
    .await
    else {
        return;
    };
    // One send first: the writer's connection is open when the partition begins.
    let warm = send_until_up(&app, &json!({ "message": user_message("complete") })).await;
    assert_eq!(
        warm["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    // A new thread: nothing is read before its commit, which is what waits.
    let params = json!({ "message": user_message("complete") });
    proxy.stall(true);
    let started = std::time::Instant::now();
    let send = app
        .client
        .post(format!("{}/", app.url))
        .json(&json!({"jsonrpc":"2.0","id":1,"method":"SendMessage","params": params}))
        .send();
    // Healed only after a while, or when the send is answered.
    let answered = tokio::time::timeout(std::time::Duration::from_secs(6), send).await;
    let waited = started.elapsed();
    proxy.stall(false);
    let r = answered
        .expect("answered while the database did not answer")
        .unwrap();
    assert_eq!(r.status(), 503, "{waited:?}");
    assert!(r.headers().contains_key("retry-after"));
    assert!(
        waited < std::time::Duration::from_secs(4),
        "answered after {waited:?}"
    );
    // Whether the commit took effect was not known: the bytes held in the partition
    // reach the database at the heal, as TCP's retransmissions would. Either way the
    // message is stored once — by the retry's own turn, or by that commit, whose turn
    // was cut short (the task failed as interrupted, as after a crash).
    let done = send_until_up(&app, &params).await;
    let task = &done["result"]["task"];
    let state = task["status"]["state"].as_str().unwrap_or_default();
    let interrupted = task["status"]["message"]["metadata"]["errorCode"] == "INTERRUPTED";
    assert!(
        state == "TASK_STATE_COMPLETED" || (state == "TASK_STATE_FAILED" && interrupted),
        "{done}"
    );
    let context = task["contextId"].as_str().unwrap();
    let messages = stored_messages(&db.url, context).await;
    let users = messages.iter().filter(|(role, _)| role == "user").count();
    assert_eq!(users, 1, "{messages:?}");
}

/// Once a call went unanswered, the database counts as silent: `/health/ready` fails and
/// a new send is refused (503, retryable) at once, without waiting for the answer
/// timeout again; after the heal the readiness probes find it answering, and sends are
/// served again.
#[actix_web::test]
async fn after_a_call_went_unanswered_readiness_and_new_sends_fail_at_once_until_it_answers() {
    let Some((_db, proxy, app)) = behind_proxy(|s| {
        s.store.acquire_timeout_ms = 500;
        s.store.answer_timeout_ms = 1000;
    })
    .await
    else {
        return;
    };
    send_until_up(&app, &json!({ "message": user_message("complete") })).await;
    let ready = app.get("/health/ready").await;
    assert_eq!(ready.status(), 200);
    proxy.stall(true);
    let first = app
        .post_rpc(
            "SendMessage",
            json!({ "message": user_message("complete") }),
        )
        .await;
    assert_eq!(first.status(), 503);
    // Silent now: no call waits for the database's answer.
    let started = std::time::Instant::now();
    let ready = app.get("/health/ready").await;
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(body["store"]["error"], "not answering", "{body}");
    let refused = app
        .post_rpc(
            "SendMessage",
            json!({ "message": user_message("complete") }),
        )
        .await;
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    let waited = started.elapsed();
    assert!(
        waited < std::time::Duration::from_millis(500),
        "readiness and a new send took {waited:?}"
    );
    proxy.stall(false);
    let healed = std::time::Instant::now();
    while app.get("/health/ready").await.status() != 200 {
        assert!(
            healed.elapsed() < std::time::Duration::from_secs(10),
            "not ready again after the heal"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let served = send_until_up(&app, &json!({ "message": user_message("complete") })).await;
    assert_eq!(
        served["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}
