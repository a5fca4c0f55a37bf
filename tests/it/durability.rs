//! Nothing acknowledged is lost: kill the server with SIGKILL in the middle of a stream
//! of sends, restart it, and find every acknowledged task in the store (SQLite and
//! Postgres).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::support::{http_client, user_message};

/// Starts the real binary with extra environment variables (`AGENT_A2A__…` settings,
/// `DATABASE_URL`) and waits for its "listening" log line.
pub(crate) fn start_server_with(
    data_dir: &std::path::Path,
    env: &[(&str, &str)],
) -> (Child, String) {
    let (child, url, _) = start_server_logged(data_dir, env);
    (child, url)
}

/// [`start_server_with`], keeping every line the server writes to stderr.
pub(crate) fn start_server_logged(
    data_dir: &std::path::Path,
    env: &[(&str, &str)],
) -> (Child, String, Arc<Mutex<Vec<String>>>) {
    start_server_limited(data_dir, env, None)
}

/// [`start_server_with`], reading the configuration file `config`.
pub(crate) fn start_server_configured(
    data_dir: &std::path::Path,
    env: &[(&str, &str)],
    config: &std::path::Path,
) -> (Child, String) {
    let (child, url, _) = launch(data_dir, env, None, Some(config));
    (child, url)
}

/// [`start_server_logged`] under an open-files limit (soft and hard) of `open_files`.
pub(crate) fn start_server_limited(
    data_dir: &std::path::Path,
    env: &[(&str, &str)],
    open_files: Option<u64>,
) -> (Child, String, Arc<Mutex<Vec<String>>>) {
    launch(data_dir, env, open_files, None)
}

fn launch(
    data_dir: &std::path::Path,
    env: &[(&str, &str)],
    open_files: Option<u64>,
    config: Option<&std::path::Path>,
) -> (Child, String, Arc<Mutex<Vec<String>>>) {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-a2a"));
    if let Some(limit) = open_files {
        use std::os::unix::process::CommandExt;
        // SAFETY: only setrlimit runs between fork and exec, on values on this stack.
        unsafe {
            command.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    let mut child = command
        .args([
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
            // Any free port (the card names it): tests run side by side.
            "--grpc-bind",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(data_dir)
        .env("RUST_LOG", "info")
        .env_remove("DATABASE_URL")
        .env("AGENT_A2A__LOG__FORMAT", "text")
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start agent-a2a");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let kept = lines.clone();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("listening")
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(());
            }
            kept.lock().unwrap().push(line);
        }
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("server reports listening");
    (child, format!("http://127.0.0.1:{port}"), lines)
}

/// Eight clients sending `SendMessage` to `url` as fast as they are answered; the ids of
/// the acknowledged tasks are collected. A client stops at its first failed or refused
/// request (the server went away or began to drain).
pub fn send_from_eight_clients(
    url: &str,
) -> (
    Arc<Mutex<Vec<String>>>,
    Vec<actix_web::rt::task::JoinHandle<()>>,
) {
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let client = http_client();
    let workers = (0..8)
        .map(|w| {
            let (client, url, acked) = (client.clone(), url.to_owned(), acked.clone());
            actix_web::rt::spawn(async move {
                for i in 0..10_000 {
                    let body = json!({"jsonrpc":"2.0","id":i,"method":"SendMessage",
                        "params":{"message": user_message(&format!("worker {w} message {i}"))}});
                    let Ok(r) = client.post(format!("{url}/")).json(&body).send().await else {
                        return;
                    };
                    let Ok(v) = r.json::<Value>().await else {
                        return;
                    };
                    match v["result"]["task"]["id"].as_str() {
                        Some(id) => acked.lock().unwrap().push(id.to_owned()),
                        None => return,
                    }
                }
            })
        })
        .collect();
    (acked, workers)
}

#[actix_web::test]
async fn every_acknowledged_send_survives_sigkill() {
    sigkill_mid_load(&[]).await;
}

#[actix_web::test]
async fn every_acknowledged_send_survives_sigkill_on_postgres() {
    let Some(database) = crate::support::fresh_postgres().await else {
        return;
    };
    sigkill_mid_load(&[("DATABASE_URL", database.url.as_str())]).await;
}

/// Sends from eight clients, SIGKILL once 300 were acknowledged, restart on the same
/// data (`env` chooses the store), and look for every acknowledged task.
async fn sigkill_mid_load(env: &[(&str, &str)]) {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url) = start_server_with(dir.path(), env);
    let (acked, workers) = send_from_eight_clients(&url);
    let client = http_client();
    // Kill once a good number of sends were acknowledged, while the others are in flight.
    loop {
        if acked.lock().unwrap().len() >= 300 {
            break;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    for w in workers {
        let _ = w.await;
    }
    let acked = acked.lock().unwrap().clone();

    let (mut child, url) = start_server_with(dir.path(), env);
    let mut missing = Vec::new();
    for id in &acked {
        let r: Value = client
            .post(format!("{url}/"))
            .json(&json!({"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id": id}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if r["result"]["id"] != id.as_str() {
            missing.push(id.clone());
        }
    }
    child.kill().ok();
    child.wait().ok();
    // The figure a run reports (`cargo test --test it -- --nocapture`).
    eprintln!(
        "SIGKILL mid-load: {} sends acknowledged, {} of them not in the store after the restart",
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
}
