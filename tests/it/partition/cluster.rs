//! The cluster through network faults: three nodes, Postgres and HAProxy each in a
//! namespace of their own ([`super::lab`]), conversations through the balancer (retrying
//! by `messageId`) and two clients per node talking to it directly (a 4 s timeout, then
//! the same `messageId` again), while one fault after another is held and healed: a node
//! cut from Postgres, a node cut from its peers, a node isolated, latency and loss between
//! the nodes and Postgres; then a rolling restart by SIGTERM. Then, from the database and
//! from every node: no acknowledged message missing, none stored twice, every task's
//! history one user message and its answer after another (a node writing for a thread it
//! no longer owns would break it), nothing left working, every node answering `GetTask`
//! alike, every 5xx a 503, each node back in the cluster, the rolling restart unseen
//! through the balancer — and what the clients saw, phase by phase.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::lab::{BALANCER, DB, FIRST_NODE, Lab, Postgres, collect_into};
use crate::cluster::query_one;
use crate::support::http_client;

const SECRET: &str = "a-cluster-secret-for-partition-tests";
const LEASE_MS: u64 = 2500;
/// Conversations through the balancer.
const BALANCED_CLIENTS: usize = 16;
/// How long each fault is held.
const HELD: Duration = Duration::from_secs(8);

struct LabNode {
    id: String,
    host: u8,
    url: String,
    addr: String,
    dir: std::path::PathBuf,
    database: String,
    child: Option<std::process::Child>,
    /// Every line it wrote, over its restarts.
    log: Arc<Mutex<Vec<String>>>,
}

impl LabNode {
    /// Starts node `n` (1-based) in a namespace of its own; the receiver hears when it
    /// listens.
    fn start(lab: &mut Lab, database: &str, n: u8) -> (LabNode, std::sync::mpsc::Receiver<()>) {
        let id = format!("n{n}");
        let host = FIRST_NODE + n - 1;
        lab.host(&id, host).unwrap();
        let addr = lab.addr(host);
        let dir = lab.dir.path().join(&id);
        std::fs::create_dir(&dir).unwrap();
        let mut node = LabNode {
            id,
            host,
            url: format!("http://{addr}:8080"),
            addr,
            dir,
            database: database.to_owned(),
            child: None,
            log: Arc::default(),
        };
        let listening = node.spawn(lab);
        (node, listening)
    }

    /// Starts its process (again).
    fn spawn(&mut self, lab: &Lab) -> std::sync::mpsc::Receiver<()> {
        let mut command = lab.command(&self.id, env!("CARGO_BIN_EXE_agent-a2a"));
        command
            .args(["serve", "--bind", &format!("{}:8080", self.addr)])
            .args(["--grpc-bind", "", "--data-dir"])
            .arg(&self.dir)
            .env("RUST_LOG", "info")
            .env("AGENT_A2A__LOG__FORMAT", "text")
            .env("DATABASE_URL", &self.database)
            .env("AGENT_A2A__CLUSTER__ENABLED", "true")
            .env("AGENT_A2A__CLUSTER__NODE_ID", &self.id)
            .env("AGENT_A2A__CLUSTER__SECRET", SECRET)
            .env("AGENT_A2A__CLUSTER__LEASE_TTL_MS", LEASE_MS.to_string())
            .env("AGENT_A2A__CLUSTER__HEARTBEAT_MS", "500")
            .env("AGENT_A2A__SERVER__SHUTDOWN_TIMEOUT_SECS", "10")
            .env(
                "AGENT_A2A__SERVER__TRUSTED_PROXIES",
                format!("[\"{}\"]", lab.addr(BALANCER)),
            )
            .stderr(Stdio::piped());
        // `ip netns exec` execs the server: signals to this child reach it.
        let mut child = command.spawn().expect("agent-a2a");
        let listening = collect_into(child.stderr.take().unwrap(), "listening", self.log.clone());
        self.child = Some(child);
        listening
    }

    /// SIGTERM, and the wait for its exit: how long it took.
    async fn stop(&mut self) -> Duration {
        let mut child = self.child.take().expect("running");
        let signalled = Instant::now();
        // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
        let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(sent, 0);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "{} exits 0 after SIGTERM: {status}",
                    self.id
                );
                return signalled.elapsed();
            }
            assert!(
                signalled.elapsed() < Duration::from_secs(30),
                "{} did not exit",
                self.id
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Its log lines that say what the cluster did (leases, refusals, takeovers).
    fn telling_lines(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| {
                ["ERROR", "lease", "refused", "discarded", "took", "cannot"]
                    .iter()
                    .any(|w| l.contains(w))
            })
            .cloned()
            .collect()
    }
}

impl Drop for LabNode {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// HAProxy in namespace `lb`, configured as the HTTP part of `deploy/haproxy.cfg`
/// (without its DNS resolvers; the PROXY protocol header included, which the nodes believe
/// from it): its URL.
/// Its log (one line per request, `option httplog`) is kept in `log`.
fn balancer(lab: &mut Lab, nodes: &[LabNode], log: Arc<Mutex<Vec<String>>>) -> String {
    lab.host("lb", BALANCER).unwrap();
    let servers: String = nodes
        .iter()
        .map(|n| {
            format!(
                "    server {} {}:8080 send-proxy-v2\n",
                n.id,
                lab.addr(n.host)
            )
        })
        .collect();
    let addr = lab.addr(BALANCER);
    let config = format!(
        "global\n    maxconn 4096\n    log stdout format raw local0 info\n\
         defaults\n    mode http\n    log global\n    option httplog\n    timeout connect 2s\n    timeout check 2s\n\
         \x20   timeout queue 10s\n    timeout http-request 10s\n\
         \x20   timeout http-keep-alive 10s\n    timeout client 1h\n    timeout server 1h\n\
         \x20   retries 2\n    option redispatch\n\
         \x20   retry-on conn-failure empty-response 503\n    option httpchk\n\
         \x20   http-check send meth GET uri /health/ready ver HTTP/1.1 hdr Host localhost\n\
         \x20   http-check expect status 200\n\
         \x20   default-server check inter 500ms fall 2 rise 1\n\
         frontend a2a_http\n    bind {addr}:8080\n    default_backend nodes\n\
         backend nodes\n    balance roundrobin\n{servers}"
    );
    let path = lab.dir.path().join("haproxy.cfg");
    std::fs::write(&path, config).unwrap();
    let mut command = lab.command("lb", "haproxy");
    command
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .stdout(Stdio::piped());
    let haproxy = lab.keep(
        command
            .spawn()
            .expect("haproxy is installed (.ci/run installs it)"),
    );
    collect_into(haproxy.stdout.take().unwrap(), "\n", log);
    format!("http://{addr}:8080")
}

/// What one attempt of a send got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Ok,
    /// An HTTP status other than 200.
    Status(u16),
    /// A JSON-RPC error in a 200.
    Rpc(i64),
    /// No answer within the client's timeout.
    Timeout,
    /// No connection, or it broke.
    Broken,
}

struct Attempt {
    /// Since the suite began.
    at: Duration,
    took: Duration,
    outcome: Outcome,
}

/// Who a client talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Balancer,
    Node(u8),
}

/// One client's conversations.
struct Conversations {
    via: Via,
    attempts: Vec<Attempt>,
    /// Acknowledged: (message id, task id).
    acked: Vec<(String, String)>,
    /// Sends given up after a minute of retries.
    gave_up: usize,
}

async fn attempt(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
    timeout: Duration,
) -> (Outcome, Option<Value>) {
    let sent = client
        .post(format!("{url}/"))
        .header("A2A-Version", "1.0")
        .timeout(timeout)
        .json(body)
        .send()
        .await;
    let response = match sent {
        Ok(r) => r,
        Err(e) if e.is_timeout() => return (Outcome::Timeout, None),
        Err(_) => return (Outcome::Broken, None),
    };
    if response.status() != 200 {
        return (Outcome::Status(response.status().as_u16()), None);
    }
    match response.json::<Value>().await {
        Ok(v) if v["result"]["task"]["id"].is_string() => (Outcome::Ok, Some(v)),
        Ok(v) => (Outcome::Rpc(v["error"]["code"].as_i64().unwrap_or(0)), None),
        Err(e) if e.is_timeout() => (Outcome::Timeout, None),
        Err(_) => (Outcome::Broken, None),
    }
}

/// Conversations of four messages through `url` until `stop`, each send retried with
/// the same `messageId` for up to a minute.
async fn converse(
    name: String,
    via: Via,
    url: String,
    timeout: Duration,
    stop: Arc<AtomicBool>,
    began: Instant,
) -> Conversations {
    // A client of its own: its own connections.
    let client = http_client();
    let mut log = Conversations {
        via,
        attempts: Vec::new(),
        acked: Vec::new(),
        gave_up: 0,
    };
    let mut task: Option<Value> = None;
    let mut i = 0;
    while !stop.load(Ordering::SeqCst) {
        i += 1;
        let message_id = format!("{name}-{i}");
        let mut message = json!({
            "role": "ROLE_USER",
            "messageId": message_id,
            "parts": [{"text": format!("{name} says {i}")}],
        });
        if let Some(task) = task.take().filter(|_| i % 4 != 1) {
            message["taskId"] = task["id"].clone();
            message["contextId"] = task["contextId"].clone();
        }
        let body = json!({"jsonrpc": "2.0", "id": i, "method": "SendMessage",
                          "params": {"message": message}});
        let first = Instant::now();
        loop {
            let started = Instant::now();
            let (outcome, answer) = attempt(&client, &url, &body, timeout).await;
            log.attempts.push(Attempt {
                at: started - began,
                took: started.elapsed(),
                outcome,
            });
            if let Some(answer) = answer {
                let answered = answer["result"]["task"].clone();
                log.acked.push((
                    message_id.clone(),
                    answered["id"].as_str().unwrap().to_owned(),
                ));
                task = Some(answered);
                break;
            }
            if first.elapsed() > Duration::from_secs(60) {
                log.gave_up += 1;
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    log
}

async fn get(url: &str, path: &str) -> Option<reqwest::StatusCode> {
    http_client()
        .get(format!("{url}{path}"))
        .timeout(Duration::from_secs(3))
        .send()
        .await
        .ok()
        .map(|r| r.status())
}

/// Waits until every node says it is ready; how long that took.
async fn all_ready(nodes: &[LabNode], within: Duration) -> Duration {
    let since = Instant::now();
    for node in nodes {
        while get(&node.url, "/health/ready").await != Some(reqwest::StatusCode::OK) {
            assert!(
                since.elapsed() < within,
                "{} not ready {within:?} after the heal:\n{}",
                node.id,
                node.telling_lines().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    since.elapsed()
}

/// A fault held from `from` to `healed`, and what it was.
struct Phase {
    name: &'static str,
    /// The node whose direct clients it concerns most.
    node: u8,
    from: Duration,
    healed: Duration,
    /// From the heal until every node was ready again.
    rejoined: Duration,
}

async fn get_task(client: &reqwest::Client, url: &str, id: &str) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}});
    for _ in 0..50 {
        if let Ok(r) = client
            .post(format!("{url}/"))
            .header("A2A-Version", "1.0")
            .timeout(Duration::from_secs(10))
            .json(&body)
            .send()
            .await
            && r.status() == 200
            && let Ok(v) = r.json::<Value>().await
        {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("GetTask {id} on {url} never answered");
}

#[actix_web::test]
async fn the_cluster_keeps_its_promises_through_partitions() {
    let Some(mut lab) = Lab::new() else {
        return;
    };
    let mut pg: Postgres = lab.postgres().await;
    let mut nodes = Vec::new();
    let mut waits = Vec::new();
    for n in 1..=3 {
        let (node, listening) = LabNode::start(&mut lab, &pg.url, n);
        nodes.push(node);
        waits.push(listening);
    }
    for (node, listening) in nodes.iter().zip(waits) {
        listening
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{} listens: {:?}", node.id, node.log.lock().unwrap()));
    }
    let balanced: Arc<Mutex<Vec<String>>> = Arc::default();
    let via_balancer = balancer(&mut lab, &nodes, balanced.clone());
    all_ready(&nodes, Duration::from_secs(30)).await;
    while get(&via_balancer, "/health/ready").await != Some(reqwest::StatusCode::OK) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let began = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..BALANCED_CLIENTS {
        clients.push(actix_web::rt::spawn(converse(
            format!("lb{c}"),
            Via::Balancer,
            via_balancer.clone(),
            Duration::from_secs(10),
            stop.clone(),
            began,
        )));
    }
    for node in &nodes {
        for c in 0..2 {
            clients.push(actix_web::rt::spawn(converse(
                format!("{}d{c}", node.id),
                Via::Node(node.host),
                node.url.clone(),
                Duration::from_secs(4),
                stop.clone(),
                began,
            )));
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    let db = lab.addr(DB);
    let node_addr = |n: u8| lab.addr(FIRST_NODE + n - 1);
    let mut phases = Vec::new();
    for fault in 0..4 {
        let from = began.elapsed();
        eprintln!(
            "fault {fault} at {}",
            chrono::Utc::now().format("%H:%M:%S%.3f")
        );
        let (name, node) = match fault {
            0 => {
                lab.cut(("n1", FIRST_NODE), ("db", DB), true);
                ("n1 cut from Postgres", 1)
            }
            1 => {
                lab.cut(("n2", FIRST_NODE + 1), ("n1", FIRST_NODE), true);
                lab.cut(("n2", FIRST_NODE + 1), ("n3", FIRST_NODE + 2), true);
                ("n2 cut from its peers", 2)
            }
            2 => {
                lab.port("n3", false);
                ("n3 isolated", 3)
            }
            _ => {
                pg.delay(100);
                for n in 1..=3 {
                    lab.lose_from(&format!("n{n}"), &db, 0.05, true);
                    lab.lose_from("db", &node_addr(n), 0.05, true);
                }
                (
                    "100 ms each way and 5 % loss between the nodes and Postgres",
                    0,
                )
            }
        };
        tokio::time::sleep(HELD).await;
        match fault {
            0 => lab.cut(("n1", FIRST_NODE), ("db", DB), false),
            1 => {
                lab.cut(("n2", FIRST_NODE + 1), ("n1", FIRST_NODE), false);
                lab.cut(("n2", FIRST_NODE + 1), ("n3", FIRST_NODE + 2), false);
            }
            2 => lab.port("n3", true),
            _ => {
                pg.delay(0);
                for n in 1..=3 {
                    lab.lose_from(&format!("n{n}"), &db, 0.05, false);
                    lab.lose_from("db", &node_addr(n), 0.05, false);
                }
            }
        }
        let healed = began.elapsed();
        eprintln!(
            "healed {fault} at {}",
            chrono::Utc::now().format("%H:%M:%S%.3f")
        );
        let rejoined = all_ready(&nodes, Duration::from_secs(30)).await;
        phases.push(Phase {
            name,
            node,
            from,
            healed,
            rejoined,
        });
        tokio::time::sleep(Duration::from_secs(3)).await;
    }

    // A rolling restart, as a deploy makes it: SIGTERM, the node's exit, the new process
    // ready before the next node goes.
    let from = began.elapsed();
    eprintln!(
        "rolling restart at {}",
        chrono::Utc::now().format("%H:%M:%S%.3f")
    );
    let mut drains = Vec::new();
    for i in 0..nodes.len() {
        drains.push(nodes[i].stop().await);
        let listening = nodes[i].spawn(&lab);
        let since = Instant::now();
        while listening.try_recv().is_err() {
            assert!(
                since.elapsed() < Duration::from_secs(60),
                "{} listens again",
                nodes[i].id
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        all_ready(&nodes[i..=i], Duration::from_secs(30)).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    phases.push(Phase {
        name: "a rolling restart (SIGTERM; each node ready again before the next)",
        node: 0,
        from,
        healed: began.elapsed(),
        rejoined: Duration::ZERO,
    });
    eprintln!("drains: {drains:?}");

    stop.store(true, Ordering::SeqCst);
    let mut seen = Vec::new();
    for client in clients {
        seen.push(client.await.unwrap());
    }
    let ended = began.elapsed();
    report(&phases, &seen, ended);
    let errors: Vec<String> = balanced
        .lock()
        .unwrap()
        .iter()
        .filter(|l| [" 502 ", " 503 ", " 504 "].iter().any(|s| l.contains(s)))
        .cloned()
        .collect();
    eprintln!(
        "the balancer's 5xx answers ({}):\n{}",
        errors.len(),
        errors.join("\n")
    );
    for node in &nodes {
        eprintln!(
            "[{}] {}",
            node.id,
            node.telling_lines().join(&format!("\n[{}] ", node.id))
        );
    }
    check(&pg.url, &nodes, &seen).await;
    // A rolling restart is not seen through the balancer: at most one attempt in 200
    // fails (and every 5xx is a 503, above).
    let roll = phases.last().unwrap();
    let (mut ok, mut failed) = (0, 0);
    for a in seen
        .iter()
        .filter(|c| c.via == Via::Balancer)
        .flat_map(|c| &c.attempts)
        .filter(|a| a.at >= roll.from && a.at < roll.healed + Duration::from_secs(3))
    {
        match a.outcome {
            Outcome::Ok => ok += 1,
            _ => failed += 1,
        }
    }
    assert!(
        failed * 200 <= ok,
        "{failed} attempts through the balancer failed during the rolling restart, {ok} succeeded"
    );
    // Each node exits once its notice is over and its (instant) turns are done.
    for drain in &drains {
        assert!(*drain < Duration::from_secs(5), "drained in {drains:?}");
    }
}

/// What the clients saw, phase by phase, printed.
fn report(phases: &[Phase], seen: &[Conversations], ended: Duration) {
    let class = |c: &Conversations, phase: &Phase| match c.via {
        Via::Balancer => "through the balancer",
        Via::Node(host) if host == FIRST_NODE + phase.node - 1 => "direct to the faulted node",
        Via::Node(_) => "direct to the other nodes",
    };
    for phase in phases {
        let until = phase.healed + phase.rejoined + Duration::from_secs(3);
        eprintln!(
            "\n== {} (held {:.1} s, every node ready {:.1} s after the heal)",
            phase.name,
            (phase.healed - phase.from).as_secs_f64(),
            phase.rejoined.as_secs_f64()
        );
        let mut by: BTreeMap<&str, BTreeMap<Outcome, usize>> = BTreeMap::new();
        let mut longest: BTreeMap<&str, Duration> = BTreeMap::new();
        let mut first_503: Option<Duration> = None;
        for c in seen {
            let kind = class(c, phase);
            let mut last_ok = phase.from;
            for a in c
                .attempts
                .iter()
                .filter(|a| a.at >= phase.from && a.at < until)
            {
                *by.entry(kind).or_default().entry(a.outcome).or_default() += 1;
                if a.outcome == Outcome::Ok {
                    let done = a.at + a.took;
                    let gap = done.saturating_sub(last_ok);
                    let l = longest.entry(kind).or_default();
                    *l = (*l).max(gap);
                    last_ok = done;
                }
                if a.outcome == Outcome::Status(503) && kind == "direct to the faulted node" {
                    let after = a.at + a.took - phase.from;
                    first_503 = Some(first_503.map_or(after, |f| f.min(after)));
                }
            }
        }
        for (kind, outcomes) in &by {
            eprintln!(
                "   {kind}: {outcomes:?}; longest without a success {:.1} s",
                longest.get(kind).copied().unwrap_or_default().as_secs_f64()
            );
        }
        if let Some(f) = first_503 {
            eprintln!(
                "   first 503 to a direct client of the node {:.1} s after the fault",
                f.as_secs_f64()
            );
        }
    }
    let attempts: usize = seen.iter().map(|c| c.attempts.len()).sum();
    let acked: usize = seen.iter().map(|c| c.acked.len()).sum();
    eprintln!(
        "\n{acked} sends acknowledged of {attempts} attempts in {:.0} s",
        ended.as_secs_f64()
    );
}

/// The invariants, from the database and from every node.
async fn check(database: &str, nodes: &[LabNode], seen: &[Conversations]) {
    let gave_up: usize = seen.iter().map(|c| c.gave_up).sum();
    assert_eq!(gave_up, 0, "sends given up after a minute of retries");
    let fives: BTreeMap<Outcome, usize> = seen
        .iter()
        .flat_map(|c| &c.attempts)
        .filter(|a| matches!(a.outcome, Outcome::Status(s) if s >= 500 && s != 503))
        .fold(BTreeMap::new(), |mut m, a| {
            *m.entry(a.outcome).or_default() += 1;
            m
        });
    assert!(fives.is_empty(), "5xx other than 503: {fives:?}");

    // Nothing left working once the clients are done.
    let working = query_one(
        database,
        "SELECT count(*) FROM tasks WHERE state IN ('working', 'submitted')",
    )
    .await
    .unwrap();
    assert_eq!(working[0], "0", "tasks left working");
    // No user message stored twice.
    let twice = query_one(
        database,
        "SELECT count(*) FROM (SELECT message_id FROM messages WHERE role = 'user' \
         GROUP BY tenant_id, message_id HAVING count(*) > 1) twice",
    )
    .await
    .unwrap();
    assert_eq!(twice[0], "0", "user messages stored twice");
    // Every node back, holding its lease.
    let live = query_one(
        database,
        "SELECT count(*) FROM cluster_nodes \
         WHERE expires_at > (extract(epoch FROM now()) * 1000)::bigint",
    )
    .await
    .unwrap();
    assert_eq!(live[0], "3", "live nodes after the heals");

    // Every acknowledged message in its task on every node, every node alike, and every
    // history a user message and its answer after another.
    let mut tasks: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    for (message, task) in seen.iter().flat_map(|c| &c.acked) {
        tasks.entry(task).or_default().insert(message);
    }
    let client = http_client();
    let mut missing = Vec::new();
    for (task, messages) in &tasks {
        let mut answers = Vec::new();
        for node in nodes {
            answers.push(get_task(&client, &node.url, task).await);
        }
        let first = &answers[0]["result"];
        for (node, answer) in nodes.iter().zip(&answers).skip(1) {
            assert_eq!(
                &answer["result"], first,
                "{} answers GetTask {task} as n1 does not",
                node.id
            );
        }
        let history = first["history"].as_array().cloned().unwrap_or_default();
        let ids: BTreeSet<&str> = history
            .iter()
            .filter_map(|m| m["messageId"].as_str())
            .collect();
        missing.extend(
            messages
                .iter()
                .filter(|m| !ids.contains(**m))
                .map(|m| m.to_string()),
        );
        for (i, m) in history.iter().enumerate() {
            let role = if i % 2 == 0 {
                "ROLE_USER"
            } else {
                "ROLE_AGENT"
            };
            assert_eq!(m["role"], role, "task {task}'s history: {history:?}");
        }
    }
    assert!(missing.is_empty(), "acknowledged and missing: {missing:?}");
    let acked: usize = tasks.values().map(BTreeSet::len).sum();
    eprintln!(
        "{acked} acknowledged messages in {} tasks: each stored once, on every node alike",
        tasks.len()
    );
}
