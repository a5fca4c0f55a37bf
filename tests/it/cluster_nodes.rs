//! Cluster mode with real processes: three agent-a2a nodes on one Postgres database
//! behind a real HAProxy on loopback. Sends, streams and subscriptions spread over the
//! nodes; SIGKILL of a node in a send storm (nothing acknowledged lost, nothing stored
//! twice, its threads continue elsewhere); SIGSTOP of a node past its lease (it writes
//! nothing after it wakes); a rolling restart under conversations (each node gives the
//! balancer notice, so no send sees an error, and drains in its notice; subscribers
//! resume on another node and miss and repeat nothing).

use std::collections::{BTreeMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cluster::{eventually, owner_of, query_one};
use crate::support::{Haproxy, TestDatabase, fresh_postgres, http_client, read_sse, user_message};

const SECRET: &str = "a-cluster-secret-for-process-tests";
const LEASE_MS: u64 = 2000;

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// One agent-a2a process of the cluster.
struct Node {
    id: String,
    port: u16,
    database: String,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Node {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn start(database: &str, id: &str) -> Node {
        let mut node = Node {
            id: id.to_owned(),
            port: free_port(),
            database: database.to_owned(),
            dir: tempfile::tempdir().unwrap(),
            child: None,
        };
        node.spawn();
        node
    }

    /// Starts the process (again) on the node's port, and waits for it to listen.
    fn spawn(&mut self) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agent-a2a"))
            .args(["serve", "--bind", &format!("127.0.0.1:{}", self.port)])
            .args(["--grpc-bind", "", "--data-dir"])
            .arg(self.dir.path())
            .env("RUST_LOG", "info")
            .env("AGENT_A2A__LOG__FORMAT", "text")
            .env("DATABASE_URL", &self.database)
            .env("AGENT_A2A__CLUSTER__ENABLED", "true")
            .env("AGENT_A2A__CLUSTER__NODE_ID", &self.id)
            .env("AGENT_A2A__CLUSTER__SECRET", SECRET)
            .env("AGENT_A2A__CLUSTER__LEASE_TTL_MS", LEASE_MS.to_string())
            .env("AGENT_A2A__CLUSTER__HEARTBEAT_MS", "400")
            .env("AGENT_A2A__SERVER__SHUTDOWN_TIMEOUT_SECS", "10")
            // Push receivers on loopback, retried quickly.
            .env("AGENT_A2A__PUSH__ALLOW_LOOPBACK", "true")
            .env("AGENT_A2A__PUSH__BACKOFF_INITIAL_MS", "20")
            .env("AGENT_A2A__PUSH__BACKOFF_MAX_MS", "200")
            .env("AGENT_A2A__PUSH__BREAKER_OPEN_MS", "100")
            .env("AGENT_A2A__PUSH__POLL_INTERVAL_MS", "100")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start agent-a2a");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let id = self.id.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut tx = Some(tx);
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains("listening")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(());
                }
                if line.contains("ERROR") || line.contains("lease") || line.contains("took") {
                    eprintln!("[{id}] {line}");
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("node reports listening");
        self.child = Some(child);
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = self.child.as_ref().expect("running").id();
        // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
        let sent = unsafe { libc::kill(pid as libc::pid_t, signal) };
        assert_eq!(sent, 0, "signal {signal} to {}", self.id);
    }

    /// Waits for the process to exit; its status.
    fn wait(&mut self) -> std::process::ExitStatus {
        self.child.take().expect("running").wait().unwrap()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// HAProxy in front of the nodes: round robin, health checks on `/health/ready`, and the
/// retries the deployment's configuration makes (a refused connection, an empty answer,
/// a 503 from a draining node are tried on another node).
struct Balancer {
    url: String,
    _process: Haproxy,
}

impl Balancer {
    async fn start(nodes: &[&Node]) -> Balancer {
        let port = free_port();
        let servers: String = nodes
            .iter()
            .map(|n| format!("    server {} 127.0.0.1:{} check\n", n.id, n.port))
            .collect();
        let config = format!(
            "global\n    maxconn 2000\n\
             defaults\n    mode http\n    timeout connect 1s\n    timeout client 60s\n\
             \x20   timeout server 60s\n    retries 3\n    option redispatch 1\n\
             \x20   retry-on conn-failure empty-response 503\n\
             frontend a2a\n    bind 127.0.0.1:{port}\n    default_backend nodes\n\
             backend nodes\n    balance roundrobin\n    option httpchk GET /health/ready\n\
             \x20   default-server inter 300ms fall 2 rise 1\n{servers}"
        );
        let balancer = Balancer {
            url: format!("http://127.0.0.1:{port}"),
            _process: Haproxy::spawn(&config),
        };
        ready(&balancer.url).await;
        balancer
    }
}

/// Waits until `url` answers `/health/ready` with 200.
async fn ready(url: &str) {
    let client = http_client();
    eventually(Duration::from_secs(20), "ready", || {
        let (client, url) = (client.clone(), url.to_owned());
        async move {
            client
                .get(format!("{url}/health/ready"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        }
    })
    .await;
}

async fn three_nodes() -> Option<(TestDatabase, Vec<Node>)> {
    let database = fresh_postgres().await?;
    let nodes = ["n1", "n2", "n3"]
        .iter()
        .map(|id| Node::start(&database.url, id))
        .collect();
    Some((database, nodes))
}

async fn rpc(client: &reqwest::Client, url: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let response = client
        .post(format!("{url}/"))
        .header("A2A-Version", "1.0")
        .json(&body)
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200, "{method}");
    response.json().await.expect("JSON")
}

/// A send, retried (the same message, so the same idempotency key) while the answer is
/// a failed connection or a 503, at most `attempts` times.
async fn send_retrying(
    client: &reqwest::Client,
    url: &str,
    params: &Value,
    attempts: usize,
) -> Option<Value> {
    send_counting(client, url, params, attempts, &mut Vec::new()).await
}

/// [`send_retrying`], noting in `seen` what each failed attempt got: the HTTP status, or
/// 0 for no answer.
async fn send_counting(
    client: &reqwest::Client,
    url: &str,
    params: &Value,
    attempts: usize,
    seen: &mut Vec<u16>,
) -> Option<Value> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params});
    for _ in 0..attempts {
        let sent = client
            .post(format!("{url}/"))
            .header("A2A-Version", "1.0")
            .json(&body)
            .send()
            .await;
        let status = sent.as_ref().map_or(0, |r| r.status().as_u16());
        if let Ok(response) = sent
            && response.status() == 200
            && let Ok(v) = response.json::<Value>().await
            && v["result"]["task"]["id"].is_string()
        {
            return Some(v);
        }
        seen.push(status);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Clients holding conversations through `url` until `stop` (a new one every four
/// messages), each send retried as [`send_retrying`] does; the acknowledged task ids, and
/// how many sends failed for good.
struct Storm {
    acked: Arc<Mutex<Vec<String>>>,
    failed: Arc<AtomicUsize>,
    /// Of every failed attempt, retried or not: the HTTP status, 0 for no answer.
    errors: Arc<Mutex<Vec<u16>>>,
    /// Sends that saw at least one failed attempt.
    troubled: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    workers: Vec<actix_web::rt::task::JoinHandle<()>>,
}

impl Storm {
    fn start(url: &str, clients: usize) -> Storm {
        let acked: Arc<Mutex<Vec<String>>> = Arc::default();
        let failed = Arc::new(AtomicUsize::new(0));
        let errors: Arc<Mutex<Vec<u16>>> = Arc::default();
        let troubled = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let client = http_client();
        let workers = (0..clients)
            .map(|w| {
                let (client, url) = (client.clone(), url.to_owned());
                let (acked, failed, stop) = (acked.clone(), failed.clone(), stop.clone());
                let (errors, troubled) = (errors.clone(), troubled.clone());
                actix_web::rt::spawn(async move {
                    let mut i = 0;
                    // Conversations of four messages: a follow-up goes to its thread's
                    // owner, forwarded by whichever node the balancer chose.
                    let mut last: Option<Value> = None;
                    while !stop.load(Ordering::SeqCst) {
                        i += 1;
                        let text = format!("client {w} send {i}");
                        let params = match last.take() {
                            Some(task) if i % 4 != 1 => follow_up(&task, &text),
                            _ => json!({"message": user_message(&text)}),
                        };
                        let mut seen = Vec::new();
                        let sent = send_counting(&client, &url, &params, 50, &mut seen).await;
                        last = sent.as_ref().map(|v| v["result"]["task"].clone());
                        if !seen.is_empty() {
                            troubled.fetch_add(1, Ordering::SeqCst);
                            errors.lock().unwrap().extend(seen);
                        }
                        match sent {
                            Some(v) => acked
                                .lock()
                                .unwrap()
                                .push(v["result"]["task"]["id"].as_str().unwrap().to_owned()),
                            None => {
                                failed.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                })
            })
            .collect();
        Storm {
            acked,
            failed,
            errors,
            troubled,
            stop,
            workers,
        }
    }

    fn acked(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    async fn until_acked(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.acked() < n {
            assert!(
                Instant::now() < deadline,
                "only {} sends acknowledged",
                self.acked()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stop(self) -> (Vec<String>, usize) {
        self.stop.store(true, Ordering::SeqCst);
        for w in self.workers {
            let _ = w.await;
        }
        let acked = self.acked.lock().unwrap().clone();
        (acked, self.failed.load(Ordering::SeqCst))
    }
}

/// Every acknowledged task is readable through `url`; returns the ids that are not.
async fn missing(url: &str, acked: &[String]) -> Vec<String> {
    let client = http_client();
    let mut missing = Vec::new();
    for id in acked {
        let r = rpc(&client, url, "GetTask", json!({"id": id})).await;
        if r["result"]["id"] != id.as_str() {
            missing.push(id.clone());
        }
    }
    missing
}

/// User messages stored more than once (the same message id twice in the store).
async fn stored_twice(database: &str) -> usize {
    query_one(
        database,
        "SELECT count(*) FROM (SELECT message_id FROM messages WHERE role = 'user' \
         GROUP BY tenant_id, message_id HAVING count(*) > 1) twice",
    )
    .await
    .unwrap()[0]
        .parse()
        .unwrap()
}

fn follow_up(task: &Value, text: &str) -> Value {
    let mut message = user_message(text);
    message["taskId"] = task["id"].clone();
    message["contextId"] = task["contextId"].clone();
    json!({"message": message})
}

/// Subscribers, each on a task of its own that is fed follow-ups, through `url`. Each
/// reads its task's events from `SubscribeToTask` and, when its stream ends before the
/// task has, subscribes again with `Last-Event-ID` (wherever the balancer sends it) —
/// what docs/cluster.md asks of clients when a node leaves.
struct Watchers {
    feeders: Vec<actix_web::rt::task::JoinHandle<usize>>,
    readers: Vec<actix_web::rt::task::JoinHandle<Watched>>,
    tasks: Vec<Value>,
    stop: Arc<AtomicBool>,
}

/// What one subscriber saw: the events' ids in order, and how often it subscribed again.
#[derive(Debug)]
struct Watched {
    ids: Vec<i64>,
    resubscribed: usize,
}

impl Watchers {
    async fn start(url: &str, n: usize) -> Watchers {
        let client = http_client();
        let stop = Arc::new(AtomicBool::new(false));
        let (mut tasks, mut feeders, mut readers) = (Vec::new(), Vec::new(), Vec::new());
        for w in 0..n {
            let params = json!({"message": user_message(&format!("watched {w}"))});
            let first = send_retrying(&client, url, &params, 50).await.unwrap();
            let task = first["result"]["task"].clone();
            assert_eq!(
                task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
                "{task}"
            );
            let (feeding, to, stop, fed) =
                (client.clone(), url.to_owned(), stop.clone(), task.clone());
            feeders.push(actix_web::rt::spawn(async move {
                let mut sent = 0;
                while !stop.load(Ordering::SeqCst) {
                    let params = follow_up(&fed, &format!("watched {w} follow-up {sent}"));
                    send_retrying(&feeding, &to, &params, 100)
                        .await
                        .expect("follow-up answered");
                    sent += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                sent
            }));
            let id = task["id"].as_str().unwrap().to_owned();
            readers.push(actix_web::rt::spawn(watch(
                client.clone(),
                url.to_owned(),
                id,
            )));
            tasks.push(task);
        }
        Watchers {
            feeders,
            readers,
            tasks,
            stop,
        }
    }

    /// Stops the follow-ups, ends each task with a tool call, and waits for every
    /// subscriber to have seen its task's end.
    async fn finish(self, url: &str) -> Vec<Watched> {
        self.stop.store(true, Ordering::SeqCst);
        for feeder in self.feeders {
            assert!(feeder.await.unwrap() > 0, "follow-ups were sent");
        }
        let client = http_client();
        for task in &self.tasks {
            let mut params = follow_up(task, "");
            params["message"]["parts"] =
                json!([{"data": {"tool": "knowledge_query", "arguments": {"query": "x"}}}]);
            let done = send_retrying(&client, url, &params, 50).await.unwrap();
            assert_eq!(
                done["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
                "{done}"
            );
        }
        let mut seen = Vec::new();
        for reader in self.readers {
            seen.push(
                tokio::time::timeout(Duration::from_secs(30), reader)
                    .await
                    .expect("every subscriber sees its task end")
                    .unwrap(),
            );
        }
        seen
    }
}

/// One subscriber of task `id` through `url`, until it sees the task complete.
async fn watch(client: reqwest::Client, url: String, id: String) -> Watched {
    use eventsource_stream::Eventsource;
    use futures_util::StreamExt;
    let mut watched = Watched {
        ids: Vec::new(),
        resubscribed: 0,
    };
    loop {
        let mut request = client.post(format!("{url}/tasks/{id}:subscribe"));
        if let Some(last) = watched.ids.last() {
            request = request.header("Last-Event-ID", last.to_string());
        }
        let stream = match request.send().await {
            Ok(response) if response.status() == 200 => response.bytes_stream(),
            // A leaving node refuses new subscriptions (503), retryably.
            _ => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let mut events = stream.eventsource();
        while let Ok(Some(Ok(event))) =
            tokio::time::timeout(Duration::from_secs(30), events.next()).await
        {
            watched
                .ids
                .push(event.id.parse().expect("numeric event ids"));
            let data: Value = serde_json::from_str(&event.data).expect("JSON");
            if data["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED" {
                return watched;
            }
        }
        watched.resubscribed += 1;
    }
}

#[actix_web::test]
async fn three_nodes_behind_haproxy_serve_sends_follow_ups_streams_and_subscriptions() {
    let Some((db, nodes)) = three_nodes().await else {
        return;
    };
    let database = db.url.clone();
    let balancer = Balancer::start(&nodes.iter().collect::<Vec<_>>()).await;
    let client = http_client();
    let url = &balancer.url;

    // New threads spread over the nodes (round robin).
    let mut tasks = Vec::new();
    for i in 0..9 {
        let r = rpc(
            &client,
            url,
            "SendMessage",
            json!({"message": user_message(&format!("hello {i}"))}),
        )
        .await;
        let task = r["result"]["task"].clone();
        assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{r}");
        tasks.push(task);
    }
    let mut owners = std::collections::BTreeSet::new();
    for task in &tasks {
        owners.insert(
            owner_of(&database, task["contextId"].as_str().unwrap())
                .await
                .unwrap(),
        );
    }
    assert_eq!(owners.len(), 3, "every node owns threads: {owners:?}");

    // Follow-ups land on any node: two in three reach a node that forwards them.
    for task in &tasks {
        let r = rpc(&client, url, "SendMessage", follow_up(task, "more")).await;
        assert_eq!(r["result"]["task"]["id"], task["id"], "{r}");
        let history = r["result"]["task"]["history"].to_string();
        assert_eq!(
            history.matches("\"more\"").count(),
            1,
            "the follow-up once: {r}"
        );
    }

    // A stream of a follow-up, through whichever node.
    let response = client
        .post(format!("{url}/message:stream"))
        .header("A2A-Version", "1.0")
        .json(&follow_up(&tasks[0], "streamed"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let events = read_sse(response, 10).await;
    let last = &events.last().expect("events").data;
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{events:?}"
    );

    // A subscriber on each node follows a task owned by one of them; a cancel through the
    // balancer ends every stream with the same events.
    let task = &tasks[1];
    let id = task["id"].as_str().unwrap();
    let mut readers = Vec::new();
    for node in &nodes {
        let response = client
            .post(format!("{}/tasks/{id}:subscribe", node.url()))
            .header("A2A-Version", "1.0")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "subscribe on {}", node.id);
        readers.push(actix_web::rt::spawn(read_sse(response, 10)));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = rpc(&client, url, "CancelTask", json!({"id": id})).await;
    assert_eq!(r["result"]["status"]["state"], "TASK_STATE_CANCELED", "{r}");
    let mut seen = Vec::new();
    for reader in readers {
        let events = tokio::time::timeout(Duration::from_secs(10), reader)
            .await
            .expect("the stream ends at the cancel")
            .unwrap();
        let ids: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
        let last = &events.last().unwrap().data;
        assert_eq!(
            last["statusUpdate"]["status"]["state"],
            "TASK_STATE_CANCELED"
        );
        seen.push(ids);
    }
    assert!(
        seen.windows(2).all(|w| w[0] == w[1]),
        "the same events on every node: {seen:?}"
    );
}

#[actix_web::test]
async fn sigkill_of_a_node_in_a_send_storm_loses_nothing_and_its_threads_move() {
    let Some((db, mut nodes)) = three_nodes().await else {
        return;
    };
    let database = db.url.clone();
    let balancer = Balancer::start(&nodes.iter().collect::<Vec<_>>()).await;
    let client = http_client();
    // A thread of n2, to continue after its death.
    let r = rpc(
        &client,
        &nodes[1].url(),
        "SendMessage",
        json!({"message": user_message("kept")}),
    )
    .await;
    let task = r["result"]["task"].clone();

    let storm = Storm::start(&balancer.url, 8);
    storm.until_acked(300).await;
    nodes[1].signal(libc::SIGKILL);
    let killed = Instant::now();
    nodes[1].wait();
    let before = storm.acked();
    storm.until_acked(before + 200).await;
    let (acked, failed) = storm.stop().await;

    // Its thread continues on a survivor once its lease expired.
    let moved = send_retrying(
        &client,
        &balancer.url,
        &follow_up(&task, "after the kill"),
        200,
    )
    .await
    .expect("the dead node's thread continues");
    let took_over = killed.elapsed();
    assert_eq!(moved["result"]["task"]["id"], task["id"]);
    let owner = owner_of(&database, task["contextId"].as_str().unwrap())
        .await
        .unwrap();
    assert_ne!(owner, "n2");

    let missing = missing(&balancer.url, &acked).await;
    let twice = stored_twice(&database).await;
    eprintln!(
        "SIGKILL of one of three nodes: {} sends acknowledged, {} missing, {} stored twice, \
         {failed} failed after retries; the dead node's thread served again {took_over:?} \
         after the kill (lease {LEASE_MS} ms)",
        acked.len(),
        missing.len(),
        twice
    );
    assert!(missing.is_empty(), "{missing:?}");
    assert_eq!(twice, 0, "no message stored twice");
    assert_eq!(failed, 0, "every send succeeded within its retries");
}

#[actix_web::test]
async fn a_node_frozen_past_its_lease_writes_nothing_after_it_wakes() {
    let Some((db, nodes)) = three_nodes().await else {
        return;
    };
    let database = db.url.clone();
    let client = http_client();
    let (a, b) = (&nodes[0], &nodes[1]);
    let r = rpc(
        &client,
        &a.url(),
        "SendMessage",
        json!({"message": user_message("first")}),
    )
    .await;
    let task = r["result"]["task"].clone();
    let context = task["contextId"].as_str().unwrap().to_owned();
    let user_messages = |database: String, context: String| async move {
        query_one(
            &database,
            &format!(
                "SELECT count(*) FROM messages WHERE thread_id = a2a_id('{context}') AND role = 'user'"
            ),
        )
        .await
        .unwrap()[0]
            .parse::<usize>()
            .unwrap()
    };

    a.signal(libc::SIGSTOP);
    let frozen = Instant::now();
    eventually(Duration::from_secs(20), "n1's lease expires", || {
        let database = database.clone();
        async move {
            query_one(
                &database,
                "SELECT expires_at < CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT) \
                 FROM cluster_nodes WHERE node_id = 'n1'",
            )
            .await
            .is_some_and(|row| row[0] == "t")
        }
    })
    .await;
    // B takes the thread over (fencing n1) and serves the follow-up.
    let r = send_retrying(&client, &b.url(), &follow_up(&task, "on b"), 50)
        .await
        .expect("b serves the thread");
    assert_eq!(r["result"]["task"]["id"], task["id"]);
    assert_eq!(owner_of(&database, &context).await.as_deref(), Some("n2"));
    let acknowledged = user_messages(database.clone(), context.clone()).await;
    assert_eq!(acknowledged, 2);

    // n1 wakes with the thread still in its memory and is asked to continue it at once.
    a.signal(libc::SIGCONT);
    eprintln!("n1 was frozen for {:?}", frozen.elapsed());
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": follow_up(&task, "on a")});
    let answer = client
        .post(format!("{}/", a.url()))
        .header("A2A-Version", "1.0")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = answer.status();
    let reply: Value = answer.json().await.unwrap();
    let served = reply["result"]["task"]["id"] == task["id"];
    // Refused, it is a retryable refusal (503, -32000), never an internal error.
    assert!(
        served || (status == 503 && reply["error"]["code"] == -32000),
        "{status} {reply}"
    );
    // Whatever it answered, only what was acknowledged is stored: a refused write left
    // nothing, and a served one went through n2.
    let expected = acknowledged + usize::from(served);
    assert_eq!(
        user_messages(database.clone(), context.clone()).await,
        expected
    );
    assert_eq!(owner_of(&database, &context).await.as_deref(), Some("n2"));
    // n1 rejoins with a new token and serves again (forwarding to n2).
    let r = send_retrying(&client, &a.url(), &follow_up(&task, "on a, again"), 100)
        .await
        .expect("n1 serves after rejoining");
    assert_eq!(r["result"]["task"]["id"], task["id"]);
    assert_eq!(
        user_messages(database.clone(), context.clone()).await,
        expected + 1
    );
    assert_eq!(stored_twice(&database).await, 0);
}

#[actix_web::test]
async fn a_rolling_restart_under_conversations_fails_no_request_and_drains_each_node_quickly() {
    let Some((db, mut nodes)) = three_nodes().await else {
        return;
    };
    let database = db.url.clone();
    let balancer = Balancer::start(&nodes.iter().collect::<Vec<_>>()).await;
    let storm = Storm::start(&balancer.url, 8);
    let watchers = Watchers::start(&balancer.url, 3).await;
    storm.until_acked(100).await;
    let mut drains = Vec::new();
    for node in &mut nodes {
        let signalled = Instant::now();
        node.signal(libc::SIGTERM);
        let status = node.wait();
        drains.push(signalled.elapsed());
        assert!(
            status.success(),
            "{} exits 0 after SIGTERM: {status}",
            node.id
        );
        node.spawn();
        ready(&node.url()).await;
        let before = storm.acked();
        storm.until_acked(before + 50).await;
    }
    let troubled = storm.troubled.load(Ordering::SeqCst);
    let errors = storm.errors.lock().unwrap().clone();
    let (acked, failed) = storm.stop().await;
    // Every subscriber's stream was on a node that restarted, so each subscribed again
    // at least once, and resumed after the last event it had: none lost, none repeated.
    let watched = watchers.finish(&balancer.url).await;
    eprintln!("rolling restart: subscribers saw {watched:?}");
    for seen in &watched {
        assert!(seen.resubscribed >= 1, "{seen:?}");
        let first = seen.ids[0];
        let expected: Vec<i64> = (first..).take(seen.ids.len()).collect();
        assert_eq!(seen.ids, expected, "every event once, in order");
    }
    let mut kinds = std::collections::BTreeMap::<u16, usize>::new();
    for status in &errors {
        *kinds.entry(*status).or_default() += 1;
    }
    eprintln!(
        "rolling restart: {troubled} of {} sends saw an error before their answer \
         (attempts failed by status, 0 = no answer: {kinds:?}); drain per node {drains:?}",
        acked.len() + failed
    );
    let missing = missing(&balancer.url, &acked).await;
    let twice = stored_twice(&database).await;
    eprintln!(
        "rolling restart of three nodes: {} sends acknowledged, {failed} failed after \
         retries, {} missing, {twice} stored twice",
        acked.len(),
        missing.len()
    );
    assert_eq!(failed, 0);
    assert!(missing.is_empty(), "{missing:?}");
    assert_eq!(twice, 0);
    // The balancer took each node out during its notice: no request reached a node that
    // refused or cut it (at most one in 200 sends saw any error, none an empty answer).
    assert!(
        troubled * 200 <= acked.len(),
        "{troubled} sends saw an error: {kinds:?}"
    );
    assert!(
        !kinds.contains_key(&0) && !kinds.contains_key(&502),
        "{kinds:?}"
    );
    // Each node exits once its notice is over and its (instant) turns are done.
    for drain in &drains {
        assert!(*drain < Duration::from_secs(5), "drained in {drains:?}");
    }
}

/// A send straight to `node` registering a push config for `receiver`; the task id.
async fn send_pushing(client: &reqwest::Client, node: &Node, text: &str, receiver: &str) -> String {
    let r = rpc(
        client,
        &node.url(),
        "SendMessage",
        json!({"message": user_message(text),
               "configuration": {"taskPushNotificationConfig": {"url": receiver}}}),
    )
    .await;
    r["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {r}"))
        .to_owned()
}

/// The events of each of `tasks` the receiver acknowledged (2xx), in the order they
/// arrived, once there are `at_least` and a status each task's turn ended in is among
/// them (at most 30 s).
async fn delivered_to_the_end(
    receiver: &crate::push::Receiver,
    tasks: &[String],
    at_least: usize,
) -> BTreeMap<String, Vec<i64>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut got: BTreeMap<String, Vec<i64>> =
            tasks.iter().map(|t| (t.clone(), Vec::new())).collect();
        let mut finished = HashSet::new();
        for r in receiver.all().iter().filter(|r| r.status == 200) {
            let (task, seq) = r.event_id().rsplit_once(':').expect("task:seq");
            if let Some(seqs) = got.get_mut(task) {
                seqs.push(seq.parse().expect("a sequence number"));
                // The turn's last event: the agent answers by asking for input.
                let state = &r.body["statusUpdate"]["status"]["state"];
                if [
                    "TASK_STATE_INPUT_REQUIRED",
                    "TASK_STATE_COMPLETED",
                    "TASK_STATE_FAILED",
                ]
                .iter()
                .any(|s| state == s)
                {
                    finished.insert(task.to_owned());
                }
            }
        }
        if finished.len() == tasks.len() && got.values().map(Vec::len).sum::<usize>() >= at_least {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} tasks delivered to their end: {got:?}",
            finished.len(),
            tasks.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A counter of `node`'s `/metrics` (0 before its first sample).
async fn node_counter(client: &reqwest::Client, node: &Node, series: &str) -> f64 {
    let text = client
        .get(format!("{}/metrics", node.url()))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

const DELIVERED: &str = "agent_a2a_push_deliveries_total{outcome=\"delivered\"}";

/// Push deliveries in a cluster: each node delivers the events of the tasks it ran — no
/// event twice, each task's in order; and the events a node still owed when it was
/// SIGKILLed (its receiver failing until then) are delivered by the survivors once its
/// lease expired, each once, in order.
#[actix_web::test]
async fn each_node_delivers_its_own_events_and_a_killed_nodes_owed_events_go_to_another() {
    let Some((db, mut nodes)) = three_nodes().await else {
        return;
    };
    let database = db.url.clone();
    let client = http_client();
    let receiver =
        crate::push::Receiver::start(std::net::TcpListener::bind("127.0.0.1:0").unwrap(), 0);
    let mut tasks: Vec<(usize, String)> = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        for i in 0..3 {
            let task = send_pushing(&client, node, &format!("to {n}, {i}"), &receiver.url).await;
            tasks.push((n, task));
        }
    }
    let ids: Vec<String> = tasks.iter().map(|(_, t)| t.clone()).collect();
    let got = delivered_to_the_end(&receiver, &ids, ids.len()).await;
    for (task, seqs) in &got {
        let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
        assert_eq!(seqs, &expected, "{task}: each event once, in order");
    }
    // Each node delivered its own tasks' events: no node's count is another's. A node
    // counts a delivery once its outcome is committed, after the receiver had it: wait
    // for the counts to add up before telling them apart.
    let events: usize = got.values().map(Vec::len).sum();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut counted = 0.0;
        for node in &nodes {
            counted += node_counter(&client, node, DELIVERED).await;
        }
        if counted >= events as f64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{counted} deliveries counted of {events}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (n, node) in nodes.iter().enumerate() {
        let own: usize = (tasks.iter().filter(|(m, _)| *m == n))
            .map(|(_, t)| got[t].len())
            .sum();
        let delivered = node_counter(&client, node, DELIVERED).await;
        assert_eq!(
            delivered, own as f64,
            "node {} delivered its {own} events",
            node.id
        );
    }

    // n2's receiver fails while n2 lives: n2 owes every event of its new tasks, several
    // per task (each follow-up's turn adds its own).
    let failing = crate::push::Receiver::start(
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
        usize::MAX / 2,
    );
    let mut owed = Vec::new();
    for i in 0..3 {
        let task = send_pushing(&client, &nodes[1], &format!("owed {i}"), &failing.url).await;
        let task = json!({"id": task, "contextId": context_of(&database, &task).await});
        for j in 0..2 {
            rpc(
                &client,
                &nodes[1].url(),
                "SendMessage",
                follow_up(&task, &format!("more {i}.{j}")),
            )
            .await;
        }
        owed.push(task["id"].as_str().unwrap().to_owned());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while failing.all().len() < 3 {
        assert!(Instant::now() < deadline, "n2 attempts its deliveries");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    nodes[1].signal(libc::SIGKILL);
    nodes[1].wait();
    let killed = Instant::now();
    let rows: usize = query_one(&database, "SELECT count(*) FROM push_outbox")
        .await
        .unwrap()[0]
        .parse()
        .unwrap();
    assert!(
        rows >= 3 * 3,
        "{rows} owed rows, three turns of three tasks"
    );
    failing.heal();
    let got = delivered_to_the_end(&failing, &owed, rows).await;
    let took = killed.elapsed();
    for (task, seqs) in &got {
        let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
        assert_eq!(seqs, &expected, "{task}: each owed event once, in order");
    }
    let mut adopted = 0.0;
    for node in [&nodes[0], &nodes[2]] {
        adopted += node_counter(&client, node, "agent_a2a_cluster_push_adopted_total").await;
    }
    let owed_events: usize = got.values().map(Vec::len).sum();
    assert_eq!(owed_events, rows, "every owed event delivered once");
    eprintln!(
        "{owed_events} events owed by the killed node delivered by the survivors {took:?} \
         after the kill (lease {LEASE_MS} ms); {adopted} rows taken over"
    );
    assert!(adopted >= owed_events as f64, "{adopted} rows taken over");
}

/// The `contextId` of a task, from the store.
async fn context_of(database: &str, task: &str) -> String {
    query_one(
        database,
        &format!("SELECT a2a_id_text(context_id) FROM tasks WHERE task_id = a2a_id('{task}')"),
    )
    .await
    .unwrap()[0]
        .clone()
}
