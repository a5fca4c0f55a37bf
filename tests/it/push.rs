//! Push notifications end to end: configs on every binding and dialect, deliveries to a
//! real receiver on loopback (in order, with their credentials and event ids), a
//! receiver that fails and one that is down across a server restart, the URL policy,
//! tenant isolation and the bounds.

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use agent_a2a::config::Settings;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::support::{
    Backend, TestApp, fresh_postgres, spawn_app_in, spawn_app_with, user_message,
};

/// One request the receiver got.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    headers: HashMap<String, String>,
    pub(crate) body: Value,
    /// What the receiver answered.
    pub(crate) status: u16,
}

impl Received {
    pub(crate) fn event_id(&self) -> &str {
        &self.headers["x-a2a-event-id"]
    }
}

#[derive(Default)]
struct Log {
    requests: Mutex<Vec<Received>>,
    arrived: Notify,
    /// Requests still to refuse with 503.
    fail: AtomicUsize,
}

/// A webhook receiver on loopback.
pub(crate) struct Receiver {
    pub(crate) url: String,
    log: Arc<Log>,
    server: actix_web::dev::ServerHandle,
}

impl Receiver {
    /// Listens on `listener`; the first `fail` requests get a 503.
    pub(crate) fn start(listener: TcpListener, fail: usize) -> Self {
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let log = Arc::new(Log::default());
        log.fail.store(fail, Ordering::SeqCst);
        let state = web::Data::from(log.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .route("/hook", web::post().to(receive))
        })
        .workers(1)
        .listen(listener)
        .unwrap()
        .run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        Receiver {
            url,
            log,
            server: handle,
        }
    }

    /// The requests answered 2xx, once there are `n` (at most 10 s).
    pub(crate) async fn delivered(&self, n: usize) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let arrived = self.log.arrived.notified();
            let ok: Vec<Received> = self.all().into_iter().filter(|r| r.status == 200).collect();
            if ok.len() >= n {
                return ok;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                panic!("{} of {n} deliveries arrived: {:?}", ok.len(), self.all());
            }
        }
    }

    pub(crate) fn all(&self) -> Vec<Received> {
        self.log.requests.lock().unwrap().clone()
    }

    /// Answers every request from now on with 200.
    pub(crate) fn heal(&self) {
        self.log.fail.store(0, Ordering::SeqCst);
    }
}

async fn receive(req: HttpRequest, body: web::Bytes, log: web::Data<Log>) -> HttpResponse {
    let failing = log
        .fail
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    let status = if failing { 503 } else { 200 };
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    log.requests.lock().unwrap().push(Received {
        headers,
        body,
        status,
    });
    log.arrived.notify_waiters();
    HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap()).body("noted")
}

/// Loopback receivers allowed, retries quick.
fn quick(s: &mut Settings) {
    s.push.allow_loopback = true;
    s.push.backoff_initial_ms = 20;
    s.push.backoff_max_ms = 200;
    s.push.poll_interval_ms = 100;
}

fn loopback() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").unwrap()
}

/// A blocking 1.0 send of `text` registering `config`; returns the task id.
async fn send_with(app: &TestApp, text: &str, config: Value) -> String {
    let r = app
        .rpc(
            "SendMessage",
            json!({"message": user_message(text), "configuration": {"taskPushNotificationConfig": config}}),
        )
        .await;
    r["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {r}"))
        .to_owned()
}

/// The value of a counter series on `/metrics` (0 before its first sample). The
/// recorder is the process's: tests running beside this one add to it too, so callers
/// compare a difference with a lower bound.
async fn counter(app: &TestApp, series: &str) -> f64 {
    let text = app.get("/metrics").await.text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

const DELIVERED: &str = "agent_a2a_push_deliveries_total{outcome=\"delivered\"}";
const ABANDONED: &str = "agent_a2a_push_deliveries_total{outcome=\"abandoned\"}";
const DROPPED: &str = "agent_a2a_push_deliveries_total{outcome=\"dropped\"}";

/// Waits until the outbox owes nothing (the acknowledgement is committed after the
/// receiver answered).
async fn drained(app: &TestApp) {
    let store = app.runtime.store().clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while store.outbox_depth().await.unwrap() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the outbox never drained"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[actix_web::test]
async fn a_receiver_gets_every_event_of_a_task_in_order_with_its_credentials() {
    let receiver = Receiver::start(loopback(), 0);
    let app = spawn_app_with(Backend::Sqlite, quick).await;
    let delivered = counter(&app, DELIVERED).await;
    let task = send_with(
        &app,
        "complete",
        json!({"id": "hook", "url": receiver.url, "token": "tok-1",
               "authentication": {"scheme": "Bearer", "credentials": "secret"}}),
    )
    .await;
    let got = receiver.delivered(3).await;
    let ids: Vec<&str> = got.iter().map(Received::event_id).collect();
    assert_eq!(
        ids,
        [
            format!("{task}:1"),
            format!("{task}:2"),
            format!("{task}:3")
        ]
    );
    for r in &got {
        assert_eq!(r.headers["content-type"], "application/a2a+json");
        assert_eq!(r.headers["x-a2a-notification-token"], "tok-1");
        assert_eq!(r.headers["authorization"], "Bearer secret");
    }
    // 1.0 receivers get StreamResponses: working, the artifact, completed.
    assert_eq!(
        got[0].body["statusUpdate"]["status"]["state"],
        "TASK_STATE_WORKING"
    );
    assert_eq!(got[0].body["statusUpdate"]["taskId"], task.as_str());
    assert!(got[1].body["artifactUpdate"]["artifact"].is_object());
    assert_eq!(
        got[2].body["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    drained(&app).await;
    assert!(counter(&app, DELIVERED).await - delivered >= 3.0);
}

#[actix_web::test]
async fn a_receiver_that_fails_gets_each_event_again_and_never_out_of_order() {
    let receiver = Receiver::start(loopback(), 2);
    let app = spawn_app_with(Backend::Sqlite, quick).await;
    let task = send_with(&app, "complete", json!({"url": receiver.url})).await;
    let ok = receiver.delivered(3).await;
    let ids: Vec<String> = ok.iter().map(|r| r.event_id().to_owned()).collect();
    assert_eq!(
        ids,
        (1..=3).map(|n| format!("{task}:{n}")).collect::<Vec<_>>()
    );
    // Every request, refused or not: event 1 three times (two 503s, then 200), and a
    // later event only after the earlier one was acknowledged.
    let all: Vec<(String, u16)> = receiver
        .all()
        .iter()
        .map(|r| (r.event_id().to_owned(), r.status))
        .collect();
    assert_eq!(
        all,
        [
            (format!("{task}:1"), 503),
            (format!("{task}:1"), 503),
            (format!("{task}:1"), 200),
            (format!("{task}:2"), 200),
            (format!("{task}:3"), 200),
        ]
    );
    // The same event carries the same body on every attempt.
    let first_three = &receiver.all()[..3];
    assert!(first_three.windows(2).all(|w| w[0].body == w[1].body));
}

const LEFT_MEMORY_FULL: &str = "agent_a2a_push_from_memory_left_total{reason=\"full\"}";

/// The `200`s of each task, by event id, in the order they arrived.
fn delivered_per_task(receiver: &Receiver) -> HashMap<String, Vec<String>> {
    let mut per_task: HashMap<String, Vec<String>> = HashMap::new();
    for r in receiver.all().iter().filter(|r| r.status == 200) {
        let id = r.event_id();
        let (task, _) = id.rsplit_once(':').unwrap();
        per_task
            .entry(task.to_owned())
            .or_default()
            .push(id.to_owned());
    }
    per_task
}

#[actix_web::test]
async fn more_owed_than_memory_holds_is_read_from_the_outbox_in_order_and_memory_comes_back() {
    // Every event owed while the receiver fails: more than the delivery may hold.
    let receiver = Receiver::start(loopback(), usize::MAX);
    let app = spawn_app_with(Backend::Sqlite, |s| {
        quick(s);
        s.push.memory_rows = 4;
        s.push.breaker_failures = 1_000;
    })
    .await;
    let full = counter(&app, LEFT_MEMORY_FULL).await;
    let mut tasks = Vec::new();
    for _ in 0..3 {
        tasks.push(send_with(&app, "complete", json!({"url": receiver.url})).await);
    }
    until("more is owed than memory holds", || async {
        counter(&app, LEFT_MEMORY_FULL).await - full >= 1.0
    })
    .await;
    assert!(!app.runtime.outbox().hub().handing_over());
    receiver.heal();
    drained(&app).await;
    // Every event of every task once, in order.
    let per_task = delivered_per_task(&receiver);
    for task in &tasks {
        assert_eq!(
            per_task[task],
            (1..=3).map(|n| format!("{task}:{n}")).collect::<Vec<_>>()
        );
    }
    // Held in memory again once the outbox fits, and overflowing the same way.
    until("memory holds every owed delivery again", || async {
        app.runtime.outbox().hub().handing_over()
    })
    .await;
    receiver.log.fail.store(usize::MAX, Ordering::SeqCst);
    for _ in 0..3 {
        tasks.push(send_with(&app, "complete", json!({"url": receiver.url})).await);
    }
    until("memory held them again, and overflowed again", || async {
        counter(&app, LEFT_MEMORY_FULL).await - full >= 2.0
    })
    .await;
    receiver.heal();
    drained(&app).await;
    let per_task = delivered_per_task(&receiver);
    assert_eq!(per_task.len(), 6);
    for task in &tasks {
        assert_eq!(
            per_task[task],
            (1..=3).map(|n| format!("{task}:{n}")).collect::<Vec<_>>()
        );
    }
}

#[actix_web::test]
async fn deliveries_held_in_memory_follow_their_config_when_it_is_replaced_or_deleted() {
    let old = Receiver::start(loopback(), usize::MAX);
    let new = Receiver::start(loopback(), 0);
    let app = spawn_app_with(Backend::Sqlite, |s| {
        quick(s);
        s.push.breaker_failures = 1_000;
    })
    .await;
    until("the delivery holds every owed delivery", || async {
        app.runtime.outbox().hub().handing_over()
    })
    .await;
    // Owed to a receiver that fails, then the config is pointed elsewhere: what is owed
    // goes to the new address, in order.
    let moved = send_with(&app, "complete", json!({"id": "hook", "url": old.url})).await;
    old.log.arrived.notified().await;
    let replaced = app
        .rpc(
            "CreateTaskPushNotificationConfig",
            json!({"taskId": moved, "id": "hook", "url": new.url}),
        )
        .await;
    assert_eq!(replaced["result"]["url"], new.url, "{replaced}");
    let got = new.delivered(3).await;
    let ids: Vec<&str> = got.iter().map(Received::event_id).collect();
    assert_eq!(
        ids,
        (1..=3).map(|n| format!("{moved}:{n}")).collect::<Vec<_>>()
    );
    assert!(old.all().iter().all(|r| r.status == 503));

    // Owed to a receiver that fails, then the config is deleted: nothing more is owed
    // or sent.
    let dropped = send_with(&app, "complete", json!({"id": "gone", "url": old.url})).await;
    let tried = |receiver: &Receiver| {
        (receiver.all().iter())
            .filter(|r| r.event_id().starts_with(dropped.as_str()))
            .count()
    };
    while tried(&old) == 0 {
        old.log.arrived.notified().await;
    }
    let deleted = app
        .rpc(
            "DeleteTaskPushNotificationConfig",
            json!({"taskId": dropped, "id": "gone"}),
        )
        .await;
    assert_eq!(deleted["result"], Value::Null, "{deleted}");
    drained(&app).await;
    // An attempt under way when the config went may still end; none starts after it
    // (retries come every 200 ms at most).
    let after = tried(&old);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(tried(&old) <= after + 1, "{:?}", requests(&old));
    assert_eq!(tried(&new), 0);
}

const BREAKER_OPENED: &str = "agent_a2a_push_breaker_opened_total";

/// `(task id:seq, status)` of every request `receiver` got, in order.
fn requests(receiver: &Receiver) -> Vec<(String, u16)> {
    (receiver.all().iter())
        .map(|r| (r.event_id().to_owned(), r.status))
        .collect()
}

/// Waits (at most 10 s) until `check` holds.
async fn until<F: std::future::Future<Output = bool>>(what: &str, check: impl Fn() -> F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[actix_web::test]
async fn a_receiver_that_never_answers_leaves_the_others_their_deliveries() {
    // It takes connections (the kernel's backlog) and never answers a request.
    let hanging = loopback();
    let hanging_url = format!("http://{}/hook", hanging.local_addr().unwrap());
    let live = Receiver::start(loopback(), 0);
    let app = spawn_app_with(Backend::Sqlite, |s| {
        quick(s);
        // As many slots as it has configs, and no cap of its own: all are taken until
        // it counts as stalled and they are given back.
        s.push.max_concurrent = 4;
        // Longer than the test: its attempts hang throughout, its breaker never opens.
        s.push.timeout_ms = 120_000;
    })
    .await;
    // Its deliveries first, so they are the oldest owed: more of them than all the slots.
    for _ in 0..6 {
        send_with(&app, "complete", json!({"url": hanging_url})).await;
    }
    let mut tasks = Vec::new();
    for _ in 0..3 {
        tasks.push(send_with(&app, "complete", json!({"url": live.url})).await);
    }
    // Its attempts hang on; the slots carry every delivery to the live receiver, each
    // task's in order.
    let got = live.delivered(9).await;
    for task in &tasks {
        let mine: Vec<&str> = (got.iter())
            .map(Received::event_id)
            .filter(|id| id.starts_with(task.as_str()))
            .collect();
        assert_eq!(
            mine,
            (1..=3).map(|n| format!("{task}:{n}")).collect::<Vec<_>>()
        );
    }
    drop(hanging);
}

#[actix_web::test]
async fn a_failing_receiver_gets_nothing_while_its_breaker_is_open() {
    failing_receiver_gets_nothing_while_its_breaker_is_open(10_000).await;
}

#[actix_web::test]
async fn a_failing_receiver_gets_nothing_while_its_breaker_is_open_reading_the_outbox() {
    failing_receiver_gets_nothing_while_its_breaker_is_open(0).await;
}

/// With `memory_rows` 0 the delivery reads the outbox, and puts the failing receiver's
/// rows off in the store; otherwise it holds them in memory, put off there.
async fn failing_receiver_gets_nothing_while_its_breaker_is_open(memory_rows: usize) {
    let failing = Receiver::start(loopback(), usize::MAX);
    let live = Receiver::start(loopback(), 0);
    let app = spawn_app_with(Backend::Sqlite, |s| {
        quick(s);
        s.push.breaker_failures = 3;
        // Open for longer than the test.
        s.push.backoff_max_ms = 600_000;
        s.push.breaker_open_ms = 600_000;
        s.push.memory_rows = memory_rows;
    })
    .await;
    let deferred = counter(&app, "agent_a2a_push_deferred_total").await;
    let opened = counter(&app, BREAKER_OPENED).await;
    let failing_tasks = [
        send_with(&app, "complete", json!({"url": failing.url})).await,
        send_with(&app, "complete", json!({"url": failing.url})).await,
    ];
    until("the breaker opens", || async {
        counter(&app, BREAKER_OPENED).await - opened >= 1.0
    })
    .await;
    // Its rows are put off until the breaker would let a probe through (read from the
    // outbox: none is due within the next minute), and both tasks still owe every event.
    let store = app.runtime.store().clone();
    until("its rows are put off", || async {
        if memory_rows > 0 {
            return counter(&app, "agent_a2a_push_deferred_total").await - deferred >= 2.0;
        }
        let soon = agent_a2a::domain::Timestamp(agent_a2a::domain::Timestamp::now().0 + 60_000);
        let due = store.due_deliveries(soon, 100).await.unwrap();
        !due.iter()
            .any(|d| failing_tasks.iter().any(|t| d.key.task_id.as_str() == t))
    })
    .await;
    assert_eq!(
        store.outbox_depth().await.unwrap(),
        6,
        "nothing of theirs is lost"
    );
    let seen = requests(&failing);
    assert!(
        seen.len() >= 3 && seen.iter().all(|(_, status)| *status == 503),
        "{seen:?}"
    );

    // The loop goes on for the others, and sends the failing receiver nothing more.
    let task = send_with(&app, "complete", json!({"url": live.url})).await;
    let got = live.delivered(3).await;
    assert!(got.iter().all(|r| r.event_id().starts_with(task.as_str())));
    assert_eq!(requests(&failing), seen);
}

#[actix_web::test]
async fn a_receiver_back_after_its_breaker_opened_gets_every_event_in_order() {
    // Three failures open its breaker; the probe after it is answered.
    let receiver = Receiver::start(loopback(), 3);
    let app = spawn_app_with(Backend::Sqlite, |s| {
        quick(s);
        s.push.breaker_failures = 3;
        s.push.breaker_open_ms = 100;
    })
    .await;
    let opened = counter(&app, BREAKER_OPENED).await;
    let task = send_with(&app, "complete", json!({"url": receiver.url})).await;
    receiver.delivered(3).await;
    let event = |n: u32, status: u16| (format!("{task}:{n}"), status);
    assert_eq!(
        requests(&receiver),
        [
            event(1, 503),
            event(1, 503),
            event(1, 503),
            event(1, 200),
            event(2, 200),
            event(3, 200),
        ]
    );
    assert!(counter(&app, BREAKER_OPENED).await - opened >= 1.0);
    drained(&app).await;
}

#[actix_web::test]
async fn deliveries_owed_when_the_server_stops_are_made_after_it_restarts() {
    // The receiver's port, with nobody listening until the server has restarted.
    let port = loopback().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/hook");
    let dir = tempfile::tempdir().unwrap();
    let app = spawn_app_in(Some(dir), Backend::Sqlite, quick).await;
    let first = send_with(&app, "complete", json!({"url": url})).await;
    let second = send_with(&app, "complete", json!({"url": url})).await;
    assert_eq!(app.runtime.store().outbox_depth().await.unwrap(), 6);
    let dir = app.stop().await;

    let app = spawn_app_in(dir, Backend::Sqlite, quick).await;
    let receiver = Receiver::start(TcpListener::bind(("127.0.0.1", port)).unwrap(), 0);
    let got = receiver.delivered(6).await;
    for task in [&first, &second] {
        let mine: Vec<&str> = got
            .iter()
            .map(Received::event_id)
            .filter(|id| id.starts_with(task.as_str()))
            .collect();
        assert_eq!(
            mine,
            (1..=3).map(|n| format!("{task}:{n}")).collect::<Vec<_>>(),
            "nothing lost, nothing out of order"
        );
    }
    drained(&app).await;
    receiver.server.stop(false).await;
}

#[actix_web::test]
async fn deliveries_survive_a_restart_on_postgres() {
    let Some(db) = fresh_postgres().await else {
        return;
    };
    let port = loopback().local_addr().unwrap().port();
    let hook = format!("http://127.0.0.1:{port}/hook");
    let app = spawn_app_with(Backend::Postgres(db.url.clone()), quick).await;
    let task = send_with(&app, "complete", json!({"url": hook})).await;
    app.stop().await;
    let app = spawn_app_with(Backend::Postgres(db.url.clone()), quick).await;
    let receiver = Receiver::start(TcpListener::bind(("127.0.0.1", port)).unwrap(), 0);
    let got = receiver.delivered(3).await;
    let ids: Vec<&str> = got.iter().map(Received::event_id).collect();
    assert_eq!(
        ids,
        (1..=3).map(|n| format!("{task}:{n}")).collect::<Vec<_>>()
    );
    drained(&app).await;
}

#[actix_web::test]
async fn a_03_config_receives_the_task_with_kinds() {
    let receiver = Receiver::start(loopback(), 0);
    let app = spawn_app_with(Backend::Sqlite, quick).await;
    let (task, _) = app.task_with("input").await;
    let set = app
        .rpc(
            "tasks/pushNotificationConfig/set",
            json!({"taskId": task, "pushNotificationConfig": {"id": "old", "url": receiver.url}}),
        )
        .await;
    assert_eq!(
        set["result"]["pushNotificationConfig"]["id"], "old",
        "{set}"
    );
    assert_eq!(set["result"]["taskId"], task.as_str());
    // The follow-up resumes the task (working) and completes it.
    app.rpc(
        "SendMessage",
        json!({"message": {"messageId": "m-follow", "role": "ROLE_USER", "taskId": task,
                           "parts": [{"text": "complete"}]}}),
    )
    .await;
    let got = receiver.delivered(2).await;
    let last = &got.last().unwrap().body;
    assert_eq!(last["kind"], "task");
    assert_eq!(last["id"], task.as_str());
    assert_eq!(last["status"]["state"], "completed");
    assert!(
        last.get("history")
            .is_none_or(|h| h.as_array().is_some_and(Vec::is_empty))
    );
}

#[actix_web::test]
async fn configs_are_managed_on_every_dialect_and_binding() {
    let app = spawn_app_with(Backend::Sqlite, quick).await;
    let (task, _) = app.task_with("complete").await;
    let url = "https://hooks.example.org/a2a";

    // 1.0 JSON-RPC.
    let created = app
        .rpc(
            "CreateTaskPushNotificationConfig",
            json!({"taskId": task, "id": "rpc", "url": url, "token": "t"}),
        )
        .await;
    // The answer shows the config without its token.
    assert_eq!(
        created["result"],
        json!({"taskId": task, "id": "rpc", "url": url})
    );
    let got = app
        .rpc(
            "GetTaskPushNotificationConfig",
            json!({"taskId": task, "id": "rpc"}),
        )
        .await;
    assert_eq!(got["result"]["url"], url);

    // 1.0 HTTP+JSON.
    let r = app
        .post_json(
            &format!("/tasks/{task}/pushNotificationConfigs"),
            json!({"id": "rest", "url": url}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = app
        .get(&format!("/tasks/{task}/pushNotificationConfigs/rest"))
        .await;
    assert_eq!(r.json::<Value>().await.unwrap()["id"], "rest");
    let list: Value = app
        .get(&format!("/tasks/{task}/pushNotificationConfigs"))
        .await
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = list["configs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["rpc", "rest"]);
    assert_eq!(list["nextPageToken"], "");
    let r = app
        .client
        .delete(format!(
            "{}/tasks/{task}/pushNotificationConfigs/rest",
            app.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({}));
    // Deleting again is not an error; reading it is.
    let again = app
        .rpc(
            "DeleteTaskPushNotificationConfig",
            json!({"taskId": task, "id": "rest"}),
        )
        .await;
    assert_eq!(again["result"], Value::Null, "{again}");
    let gone = app
        .rpc(
            "GetTaskPushNotificationConfig",
            json!({"taskId": task, "id": "rest"}),
        )
        .await;
    assert_eq!(gone["error"]["code"], -32602);

    // 0.3 JSON-RPC: nested config, a bare list.
    let set = app
        .rpc(
            "tasks/pushNotificationConfig/set",
            json!({"taskId": task, "pushNotificationConfig": {"id": "v03", "url": url,
                    "authentication": {"schemes": ["Bearer"], "credentials": "c"}}}),
        )
        .await;
    assert_eq!(
        set["result"]["pushNotificationConfig"]["authentication"]["schemes"],
        json!(["Bearer"])
    );
    let list = app
        .rpc("tasks/pushNotificationConfig/list", json!({"id": task}))
        .await;
    assert_eq!(list["result"].as_array().unwrap().len(), 2, "{list}");
    let get = app
        .rpc(
            "tasks/pushNotificationConfig/get",
            json!({"id": task, "pushNotificationConfigId": "v03"}),
        )
        .await;
    assert_eq!(get["result"]["pushNotificationConfig"]["url"], url);
    let del = app
        .rpc(
            "tasks/pushNotificationConfig/delete",
            json!({"id": task, "pushNotificationConfigId": "v03"}),
        )
        .await;
    assert!(del.get("error").is_none(), "{del}");

    // 0.3 REST: resource names.
    let r = app
        .post_json(
            &format!("/v1/tasks/{task}/pushNotificationConfigs"),
            json!({"parent": format!("tasks/{task}"), "configId": "v03rest",
                   "config": {"pushNotificationConfig": {"url": url}}}),
        )
        .await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["name"],
        format!("tasks/{task}/pushNotificationConfigs/v03rest")
    );

    // Unknown tasks are not found, before any config is looked at.
    let missing = app
        .rpc(
            "CreateTaskPushNotificationConfig",
            json!({"taskId": "no-such-task", "url": url}),
        )
        .await;
    assert_eq!(missing["error"]["code"], -32001);
}

#[actix_web::test]
async fn receivers_the_policy_refuses_and_header_injection_are_invalid_params() {
    let app = spawn_app_with(Backend::Sqlite, |_| {}).await;
    let (task, _) = app.task_with("complete").await;
    for (config, why) in [
        (json!({"url": "http://127.0.0.1:9/hook"}), "loopback"),
        // IPv6 forms that reach an IPv4 host are judged by the host they embed.
        (json!({"url": "http://[64:ff9b::7f00:1]/"}), "loopback"),
        (json!({"url": "http://[::127.0.0.1]/hook"}), "loopback"),
        (json!({"url": "http://[2002:7f00:1::]/hook"}), "loopback"),
        (json!({"url": "http://[2002:a9fe:a9fe::]/x"}), "link-local"),
        (
            json!({"url": "http://169.254.169.254/latest/meta-data"}),
            "link-local",
        ),
        (
            json!({"url": "http://metadata.google.internal/x"}),
            "metadata",
        ),
        (
            json!({"url": "https://user:pw@hooks.example.org/x"}),
            "credentials",
        ),
        (json!({"url": "file:///etc/passwd"}), "http or https"),
        (
            json!({"url": "https://hooks.example.org/x", "token": "a\r\nX-Injected: 1"}),
            "control characters",
        ),
    ] {
        let mut params = config.clone();
        params["taskId"] = json!(task);
        let r = app.rpc("CreateTaskPushNotificationConfig", params).await;
        assert_eq!(r["error"]["code"], -32602, "{config}: {r}");
        let text = r["error"]["message"].as_str().unwrap();
        assert!(text.contains(why), "{config}: {text}");
        // The same config riding on a send refuses the send: no task is created.
        let send = app
            .rpc(
                "SendMessage",
                json!({"message": user_message("complete"),
                       "configuration": {"taskPushNotificationConfig": config}}),
            )
            .await;
        assert_eq!(send["error"]["code"], -32602, "{send}");
    }
}

#[actix_web::test]
async fn a_task_takes_at_most_its_configs_and_a_full_outbox_drops_and_counts() {
    let app = spawn_app_with(Backend::Sqlite, |s| {
        quick(s);
        s.push.max_configs_per_task = 2;
        s.push.max_outbox = 2;
    })
    .await;
    let (task, _) = app.task_with("complete").await;
    for id in ["a", "b"] {
        let r = app
            .rpc(
                "CreateTaskPushNotificationConfig",
                json!({"taskId": task, "id": id, "url": "https://hooks.example.org/x"}),
            )
            .await;
        assert!(r.get("error").is_none(), "{r}");
    }
    let third = app
        .rpc(
            "CreateTaskPushNotificationConfig",
            json!({"taskId": task, "id": "c", "url": "https://hooks.example.org/x"}),
        )
        .await;
    assert_eq!(third["error"]["code"], -32602);
    assert!(
        third["error"]["message"]
            .as_str()
            .unwrap()
            .contains("push.max_configs_per_task")
    );
    // Replacing a config by its id takes no room.
    let replaced = app
        .rpc(
            "CreateTaskPushNotificationConfig",
            json!({"taskId": task, "id": "b", "url": "https://hooks.example.org/y"}),
        )
        .await;
    assert!(replaced.get("error").is_none(), "{replaced}");

    // Three events owed to a receiver that never answers: the outbox holds two.
    let dropped = counter(&app, DROPPED).await;
    let port = loopback().local_addr().unwrap().port();
    send_with(
        &app,
        "complete",
        json!({"url": format!("http://127.0.0.1:{port}/hook")}),
    )
    .await;
    assert!(app.runtime.store().outbox_depth().await.unwrap() <= 2);
    assert!(counter(&app, DROPPED).await - dropped >= 1.0);
}

#[actix_web::test]
async fn a_delivery_past_its_attempts_is_given_up_and_counted() {
    let receiver = Receiver::start(loopback(), usize::MAX);
    let app = spawn_app_with(Backend::Sqlite, |s| {
        quick(s);
        s.push.max_attempts = 2;
    })
    .await;
    let abandoned = counter(&app, ABANDONED).await;
    let task = send_with(&app, "complete", json!({"url": receiver.url})).await;
    drained(&app).await;
    // Two attempts per event, then the next event: order holds while giving up too.
    let all: Vec<(String, u16)> = receiver
        .all()
        .iter()
        .map(|r| (r.event_id().to_owned(), r.status))
        .collect();
    let expected: Vec<(String, u16)> = (1..=3)
        .flat_map(|n| [(format!("{task}:{n}"), 503), (format!("{task}:{n}"), 503)])
        .collect();
    assert_eq!(all, expected);
    assert!(counter(&app, ABANDONED).await - abandoned >= 3.0);
}

use crate::grpc::{ACME, GLOBEX};

#[actix_web::test]
async fn another_tenants_task_has_no_configs_to_show_or_change() {
    let app = spawn_app_with(Backend::Sqlite, |s| {
        crate::grpc::keys(s, 10_000);
    })
    .await;
    let call = |key: &'static str, method: &'static str, params: Value| {
        let app = &app;
        async move {
            app.client
                .post(format!("{}/", app.url))
                .header("x-api-key", key)
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let sent = call(
        ACME,
        "SendMessage",
        json!({"message": user_message("complete"),
               "configuration": {"taskPushNotificationConfig": {"id": "secret-hook",
                 "url": "https://hooks.example.org/acme", "token": "acme-token"}}}),
    )
    .await;
    let task = sent["result"]["task"]["id"].as_str().unwrap().to_owned();
    for (method, params) in [
        ("ListTaskPushNotificationConfigs", json!({"taskId": task})),
        (
            "GetTaskPushNotificationConfig",
            json!({"taskId": task, "id": "secret-hook"}),
        ),
        (
            "DeleteTaskPushNotificationConfig",
            json!({"taskId": task, "id": "secret-hook"}),
        ),
        (
            "CreateTaskPushNotificationConfig",
            json!({"taskId": task, "url": "https://hooks.example.org/globex"}),
        ),
    ] {
        let r = call(GLOBEX, method, params).await;
        assert_eq!(r["error"]["code"], -32001, "{method}: {r}");
    }
    let mine = call(
        ACME,
        "ListTaskPushNotificationConfigs",
        json!({"taskId": task}),
    )
    .await;
    assert_eq!(mine["result"]["configs"][0]["id"], "secret-hook");
    assert_eq!(mine["result"]["configs"].as_array().unwrap().len(), 1);
}

/// The token and credentials of the config registered in `dialect`.
fn secrets_of(dialect: &str) -> (String, String) {
    (format!("tok-{dialect}"), format!("cred-{dialect}"))
}

#[actix_web::test]
async fn secrets_reach_the_receiver_and_no_answer_in_any_dialect_hands_them_back() {
    use a2a_pb::proto;

    let receiver = Receiver::start(loopback(), 0);
    let app = spawn_app_with(Backend::Sqlite, quick).await;
    let (task, _) = app.task_with("input").await;
    let url = receiver.url.as_str();
    let dialects = ["v1rpc", "v1rest", "grpc", "v03rpc", "v03rest", "v01"];
    let auth_v1 = |d: &str| json!({"scheme": "Bearer", "credentials": secrets_of(d).1});
    let auth_v03 = |d: &str| json!({"schemes": ["Bearer"], "credentials": secrets_of(d).1});
    // Every answer a client gets about the configs: creates, gets and lists.
    let mut answers: Vec<(String, Value)> = Vec::new();

    // Create in every dialect, each config with a token and credentials of its own.
    let r = app
        .rpc(
            "CreateTaskPushNotificationConfig",
            json!({"taskId": task, "id": "v1rpc", "url": url, "token": secrets_of("v1rpc").0,
                   "authentication": auth_v1("v1rpc")}),
        )
        .await;
    answers.push(("1.0 JSON-RPC create".into(), r["result"].clone()));
    let r = app
        .post_json(
            &format!("/tasks/{task}/pushNotificationConfigs"),
            json!({"id": "v1rest", "url": url, "token": secrets_of("v1rest").0,
                   "authentication": auth_v1("v1rest")}),
        )
        .await;
    answers.push(("1.0 HTTP+JSON create".into(), r.json().await.unwrap()));
    let mut grpc = crate::grpc::client(&app).await;
    let created = grpc
        .create_task_push_notification_config(proto::TaskPushNotificationConfig {
            task_id: task.clone(),
            id: "grpc".into(),
            url: url.into(),
            token: secrets_of("grpc").0,
            authentication: Some(proto::AuthenticationInfo {
                scheme: "Bearer".into(),
                credentials: secrets_of("grpc").1,
            }),
            ..Default::default()
        })
        .await
        .expect("created over gRPC")
        .into_inner();
    let r = app
        .rpc(
            "tasks/pushNotificationConfig/set",
            json!({"taskId": task, "pushNotificationConfig": {"id": "v03rpc", "url": url,
                   "token": secrets_of("v03rpc").0, "authentication": auth_v03("v03rpc")}}),
        )
        .await;
    answers.push(("0.3 JSON-RPC set".into(), r["result"].clone()));
    let r = app
        .post_json(
            &format!("/v1/tasks/{task}/pushNotificationConfigs"),
            json!({"parent": format!("tasks/{task}"), "configId": "v03rest",
                   "config": {"pushNotificationConfig": {"url": url,
                     "token": secrets_of("v03rest").0, "authentication": auth_v03("v03rest")}}}),
        )
        .await;
    answers.push(("0.3 REST create".into(), r.json().await.unwrap()));
    let r = app
        .rpc(
            "tasks/pushNotification/set",
            json!({"id": task, "pushNotificationConfig": {"url": url,
                   "token": secrets_of("v01").0, "authentication": auth_v03("v01")}}),
        )
        .await;
    answers.push(("0.1 set".into(), r["result"].clone()));

    // Read them back in every dialect.
    for (what, method, params) in [
        (
            "1.0 JSON-RPC get",
            "GetTaskPushNotificationConfig",
            json!({"taskId": task, "id": "v1rpc"}),
        ),
        (
            "1.0 JSON-RPC list",
            "ListTaskPushNotificationConfigs",
            json!({"taskId": task}),
        ),
        (
            "0.3 JSON-RPC get",
            "tasks/pushNotificationConfig/get",
            json!({"id": task, "pushNotificationConfigId": "v03rpc"}),
        ),
        (
            "0.3 JSON-RPC list",
            "tasks/pushNotificationConfig/list",
            json!({"id": task}),
        ),
        ("0.1 get", "tasks/pushNotification/get", json!({"id": task})),
    ] {
        answers.push((what.into(), app.rpc(method, params).await["result"].clone()));
    }
    for (what, path) in [
        (
            "1.0 HTTP+JSON get",
            format!("/tasks/{task}/pushNotificationConfigs/v1rest"),
        ),
        (
            "1.0 HTTP+JSON list",
            format!("/tasks/{task}/pushNotificationConfigs"),
        ),
        (
            "0.3 REST get",
            format!("/v1/tasks/{task}/pushNotificationConfigs/v03rest"),
        ),
        (
            "0.3 REST list",
            format!("/v1/tasks/{task}/pushNotificationConfigs"),
        ),
    ] {
        answers.push((what.into(), app.get(&path).await.json().await.unwrap()));
    }
    let got = grpc
        .get_task_push_notification_config(proto::GetTaskPushNotificationConfigRequest {
            task_id: task.clone(),
            id: "grpc".into(),
            ..Default::default()
        })
        .await
        .expect("read over gRPC")
        .into_inner();
    let listed = grpc
        .list_task_push_notification_configs(proto::ListTaskPushNotificationConfigsRequest {
            task_id: task.clone(),
            ..Default::default()
        })
        .await
        .expect("listed over gRPC")
        .into_inner();

    // The answers name the configs, their receiver and scheme, and none of their secrets.
    for (what, answer) in &answers {
        let text = answer.to_string();
        assert!(text.contains(url), "{what} answered: {text}");
        assert!(text.contains("Bearer"), "{what} shows the scheme: {text}");
        assert!(!text.contains("\"token\""), "{what} shows a token: {text}");
        assert!(
            !text.contains("\"credentials\""),
            "{what} shows credentials: {text}"
        );
        for d in dialects {
            let (token, credentials) = secrets_of(d);
            assert!(
                !text.contains(&token) && !text.contains(&credentials),
                "{what} hands back {d}'s secrets: {text}"
            );
        }
    }
    let listed_all = answers
        .iter()
        .find(|(w, _)| w == "1.0 JSON-RPC list")
        .unwrap();
    assert_eq!(
        listed_all.1["configs"].as_array().unwrap().len(),
        6,
        "{listed_all:?}"
    );
    assert_eq!(listed.configs.len(), 6);
    for (what, config) in [("create", &created), ("get", &got)]
        .into_iter()
        .chain(listed.configs.iter().map(|c| ("list", c)))
    {
        assert_eq!(config.url, url, "gRPC {what}");
        assert!(
            config.token.is_empty(),
            "gRPC {what} shows a token: {config:?}"
        );
        let auth = config.authentication.as_ref().expect("the scheme is shown");
        assert_eq!(auth.scheme, "Bearer");
        assert!(
            auth.credentials.is_empty(),
            "gRPC {what} shows credentials: {config:?}"
        );
    }

    // The receiver still gets every config's token and credentials: the follow-up resumes
    // the task (working) and completes it, two events for each of the six configs.
    app.rpc(
        "SendMessage",
        json!({"message": {"messageId": "m-follow", "role": "ROLE_USER", "taskId": task,
                           "parts": [{"text": "complete"}]}}),
    )
    .await;
    let delivered = receiver.delivered(12).await;
    for d in dialects {
        let (token, credentials) = secrets_of(d);
        let mine: Vec<&Received> = delivered
            .iter()
            .filter(|r| r.headers.get("x-a2a-notification-token") == Some(&token))
            .collect();
        assert_eq!(mine.len(), 2, "{d}: {delivered:?}");
        for r in mine {
            assert_eq!(r.headers["authorization"], format!("Bearer {credentials}"));
        }
    }
    drained(&app).await;
}
