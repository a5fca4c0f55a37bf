//! Who may serve a database. One process per SQLite file: a second server, or
//! `agent-a2a migrate`, on the data directory a running server holds is refused at
//! start-up, naming the lock and suggesting Postgres, while the first keeps serving; once
//! the first is killed with SIGKILL the lock is gone with it, and a new server starts on
//! the directory. On Postgres, one server without cluster mode, or a cluster: a second
//! server without cluster mode, or a cluster node beside it, or it beside a cluster, is
//! refused naming `cluster.enabled`.

use std::io::Read;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::durability::start_server_with;
use crate::support::{fresh_postgres, http_client, user_message};

/// How long a refused process may take to exit, and a server to become ready.
const DEADLINE: Duration = Duration::from_secs(30);

#[actix_web::test]
async fn a_second_process_on_the_sqlite_file_is_refused_until_the_first_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let (mut first, url) = start_server_with(dir.path(), &[]);
    wait_until_ready(&url).await;

    let serve = [
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--grpc-bind",
        "127.0.0.1:0",
    ];
    let (status, stderr) = run_to_exit(&serve, dir.path());
    assert_eq!(
        status.code(),
        Some(1),
        "a second server must not start: {stderr}"
    );
    assert_names_the_lock_and_postgres(&stderr, dir.path());
    assert!(!stderr.contains("listening"), "{stderr}");

    let (status, stderr) = run_to_exit(&["migrate"], dir.path());
    assert_eq!(
        status.code(),
        Some(1),
        "nor migrate the file under it: {stderr}"
    );
    assert_names_the_lock_and_postgres(&stderr, dir.path());

    let client = http_client();
    let ready = client
        .get(format!("{url}/health/ready"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200, "the first server keeps serving");
    still_serves(&client, &url).await;

    first.kill().expect("SIGKILL");
    first.wait().unwrap();
    let (mut next, url) = start_server_with(dir.path(), &[]);
    wait_until_ready(&url).await;
    next.kill().ok();
    next.wait().ok();
}

/// The server at `url` still takes and completes a send.
async fn still_serves(client: &reqwest::Client, url: &str) {
    let sent: Value = client
        .post(format!("{url}/"))
        .json(&json!({"jsonrpc":"2.0","id":1,"method":"SendMessage",
            "params":{"message": user_message("still mine")}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(sent["result"]["task"]["id"].is_string(), "{sent}");
}

/// The refusal says which file, which lock, and what to do instead.
fn assert_names_the_lock_and_postgres(stderr: &str, data_dir: &Path) {
    let lock_file = std::fs::canonicalize(data_dir)
        .unwrap()
        .join("agent-a2a.db.lock");
    for part in [
        "is in use by another agent-a2a process",
        &lock_file.display().to_string(),
        "use Postgres (DATABASE_URL) to run several nodes",
    ] {
        assert!(stderr.contains(part), "{part:?} missing from: {stderr}");
    }
}

/// Runs the binary with `args` on `data_dir` (settings as [`start_server_with`] gives
/// them) until it exits: its status and what it wrote to stderr. One still running at
/// the deadline is killed, and the test fails.
fn run_to_exit(args: &[&str], data_dir: &Path) -> (ExitStatus, String) {
    run_to_exit_with(args, data_dir, &[])
}

/// [`run_to_exit`] with `env` added.
fn run_to_exit_with(args: &[&str], data_dir: &Path, env: &[(&str, &str)]) -> (ExitStatus, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-a2a"))
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .env("RUST_LOG", "warn")
        .env_remove("DATABASE_URL")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start agent-a2a");
    // stderr reaches its end when the process exits.
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        let _ = tx.send(text);
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(text) => (child.wait().unwrap(), text),
        Err(_) => {
            child.kill().ok();
            child.wait().ok();
            panic!("agent-a2a {args:?} still running after {DEADLINE:?}");
        }
    }
}

/// Polls `/health/ready` until it answers 200 (recovery done, store up).
async fn wait_until_ready(url: &str) {
    let client = http_client();
    let deadline = Instant::now() + DEADLINE;
    loop {
        let ready = client.get(format!("{url}/health/ready")).send().await;
        if ready.is_ok_and(|r| r.status() == 200) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{url} not ready after {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const SERVE: [&str; 5] = [
    "serve",
    "--bind",
    "127.0.0.1:0",
    "--grpc-bind",
    "127.0.0.1:0",
];

/// The settings of a cluster node `id` on `database`.
fn cluster_node<'a>(database: &'a str, id: &'a str) -> [(&'a str, &'a str); 4] {
    [
        ("DATABASE_URL", database),
        ("AGENT_A2A__CLUSTER__ENABLED", "true"),
        ("AGENT_A2A__CLUSTER__NODE_ID", id),
        (
            "AGENT_A2A__CLUSTER__SECRET",
            "a-cluster-secret-for-lock-tests",
        ),
    ]
}

fn assert_refused(status: ExitStatus, stderr: &str, says: &[&str]) {
    assert_eq!(
        status.code(),
        Some(1),
        "the server must not start: {stderr}"
    );
    assert!(!stderr.contains("listening"), "{stderr}");
    for part in says {
        assert!(stderr.contains(part), "{part:?} missing from: {stderr}");
    }
}

#[actix_web::test]
async fn a_postgres_database_is_served_by_one_server_without_cluster_mode_or_by_a_cluster() {
    let Some(db) = fresh_postgres().await else {
        return;
    };
    let database = db.url.clone();
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let quick = ("AGENT_A2A__STORE__LOCK_WAIT_MS", "300");

    // A server without cluster mode holds the database alone.
    let (mut alone, url) = start_server_with(dirs[0].path(), &[("DATABASE_URL", &database)]);
    wait_until_ready(&url).await;
    let (status, stderr) = run_to_exit_with(
        &SERVE,
        dirs[1].path(),
        &[("DATABASE_URL", &database), quick],
    );
    assert_refused(
        status,
        &stderr,
        &[
            "another agent-a2a server without cluster mode",
            "cluster.enabled",
        ],
    );
    let mut node = cluster_node(&database, "node-b").to_vec();
    node.push(quick);
    let (status, stderr) = run_to_exit_with(&SERVE, dirs[2].path(), &node);
    assert_refused(
        status,
        &stderr,
        &[
            "held by an agent-a2a server without cluster mode",
            "cluster.enabled = true",
        ],
    );
    let client = http_client();
    still_serves(&client, &url).await;

    // Gone with its process: cluster nodes may now share the database, and a server
    // without cluster mode is refused beside them.
    alone.kill().expect("SIGKILL");
    alone.wait().unwrap();
    let (mut first, first_url) =
        start_server_with(dirs[1].path(), &cluster_node(&database, "node-a"));
    wait_until_ready(&first_url).await;
    let (mut second, second_url) =
        start_server_with(dirs[2].path(), &cluster_node(&database, "node-b"));
    wait_until_ready(&second_url).await;
    let (status, stderr) = run_to_exit_with(
        &SERVE,
        dirs[0].path(),
        &[("DATABASE_URL", &database), quick],
    );
    assert_refused(
        status,
        &stderr,
        &["served by a cluster", "cluster.enabled = true"],
    );
    for node in [&mut first, &mut second] {
        node.kill().ok();
        node.wait().ok();
    }
}
