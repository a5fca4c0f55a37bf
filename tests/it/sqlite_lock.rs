//! One process per SQLite file: a second server, or `agent-a2a migrate`, on the data
//! directory a running server holds is refused at start-up, naming the lock and
//! suggesting Postgres, while the first keeps serving; once the first is killed with
//! SIGKILL the lock is gone with it, and a new server starts on the directory.

use std::io::Read;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::durability::start_server_with;
use crate::support::{http_client, user_message};

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

    first.kill().expect("SIGKILL");
    first.wait().unwrap();
    let (mut next, url) = start_server_with(dir.path(), &[]);
    wait_until_ready(&url).await;
    next.kill().ok();
    next.wait().ok();
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-a2a"))
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .env("RUST_LOG", "warn")
        .env_remove("DATABASE_URL")
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
