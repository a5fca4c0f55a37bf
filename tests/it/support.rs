//! Test harness: `spawn_app` starts the real server (real store, real actors, real HTTP)
//! on a random port with its own data directory or Postgres database, driven by a
//! scripted executor whose behaviour is chosen by the message text.

use std::sync::Arc;
use std::time::Duration;

use agent_a2a::cli::Agent;
use agent_a2a::config::Settings;
use agent_a2a::domain::{Artifact, Part};
use agent_a2a::error::Error;
use agent_a2a::runtime::{AgentExecutor, Runtime, Turn, TurnSink};
use async_trait::async_trait;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// Behaviour by the first word of the message text:
/// `complete` (default) working → artifact "done" → completed with message "ok";
/// `reply` a message without a task; `input` input-required, then a follow-up completes;
/// `panic` working → panic; `wait` working → waits for `release` → artifact → completed;
/// `reject-request` fails the request with InvalidParams; `internal` an internal error;
/// `chunks` two appended chunks → completed; `silent` returns without output;
/// `remember <text>` working → waits in "hold" for `release` → `knowledge_propose` of
/// `project/adr/<text>` and `memory_add` of the text (user `u1`) through the turn's tools
/// → completed, or failed with the tools' errors.
pub struct ScriptedExecutor {
    pub release: Arc<Notify>,
    /// Turns now waiting in "hold".
    pub holding: Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait]
impl AgentExecutor for ScriptedExecutor {
    async fn execute(&self, turn: Turn, sink: TurnSink) -> Result<(), Error> {
        let text = turn.message.text();
        if turn.continuation {
            return sink
                .complete(Some(sink.text(format!("continued: {text}"))))
                .await;
        }
        match text.split_whitespace().next().unwrap_or("") {
            "reply" => sink.reply(sink.text("hello back")).await,
            "input" => sink.input_required(sink.text("need more input")).await,
            "panic" => {
                sink.working().await?;
                panic!("scripted panic with secret detail");
            }
            "wait" => {
                sink.working().await?;
                self.release.notified().await;
                sink.artifact(Artifact::new(vec![Part::text("after wait")]), false, true)
                    .await?;
                sink.complete(None).await
            }
            "reject-request" => Err(Error::invalid_params("message: rejected by the agent")),
            "internal" => Err(Error::internal("secret detail: db password is hunter2")),
            "chunks" => {
                sink.working().await?;
                let mut a = Artifact::new(vec![Part::text("chunk-1 ")]);
                sink.artifact(a.clone(), true, false).await?;
                a.parts = vec![Part::text("chunk-2")];
                sink.artifact(a, true, true).await?;
                sink.complete(None).await
            }
            "silent" => Ok(()),
            "remember" => {
                use std::sync::atomic::Ordering;
                sink.working().await?;
                self.holding.fetch_add(1, Ordering::SeqCst);
                self.release.notified().await;
                self.holding.fetch_sub(1, Ordering::SeqCst);
                let content = text.trim_start_matches("remember").trim();
                let calls = [
                    (
                        "knowledge_propose",
                        json!({"layer": "project", "path": format!("adr/{content}"),
                               "type": "adr", "title": content, "body": content}),
                    ),
                    (
                        "memory_add",
                        json!({"content": content, "layer": "user", "userId": "u1"}),
                    ),
                ];
                let mut failed = Vec::new();
                for (tool, arguments) in calls {
                    match turn.tools.call(tool, None, arguments, turn.caller()).await {
                        Some(Ok(_)) => {}
                        Some(Err(e)) => failed.push(format!("{tool}: {e}")),
                        None => return Err(Error::internal(format!("no {tool} tool"))),
                    }
                }
                match failed.is_empty() {
                    true => sink.complete(Some(sink.text("remembered"))).await,
                    false => sink.fail(sink.text(failed.join("; "))).await,
                }
            }
            // Nothing at all until released: the turn's first writes wait with it (as on
            // a node frozen mid-turn, with `persistence.start_grace_ms` long enough).
            "hold" => {
                use std::sync::atomic::Ordering;
                self.holding.fetch_add(1, Ordering::SeqCst);
                self.release.notified().await;
                self.holding.fetch_sub(1, Ordering::SeqCst);
                sink.complete(Some(sink.text("released"))).await
            }
            _ => {
                sink.working().await?;
                sink.artifact(Artifact::new(vec![Part::text("done")]), false, true)
                    .await?;
                sink.complete(Some(sink.text("ok"))).await
            }
        }
    }
}

pub struct TestApp {
    pub url: String,
    pub client: reqwest::Client,
    pub runtime: Arc<Runtime>,
    pub release: Arc<Notify>,
    /// Turns of the scripted agent now waiting in "hold".
    pub holding: Arc<std::sync::atomic::AtomicUsize>,
    /// The gRPC binding's address (on unless a test turned it off).
    pub grpc_addr: Option<std::net::SocketAddr>,
    handle: agent_a2a::startup::Handles,
    _dir: Option<tempfile::TempDir>,
}

impl TestApp {
    /// Stops the server (and its actors), keeping the data directory.
    pub async fn stop(mut self) -> Option<tempfile::TempDir> {
        self.handle.stop(true).await;
        self.runtime.lifecycle().shutdown();
        self._dir.take()
    }

    pub async fn rpc(&self, method: &str, params: Value) -> Value {
        self.rpc_raw(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .await
    }

    pub async fn rpc_raw(&self, body: Value) -> Value {
        let response = post_json_rpc(&self.client, &self.url, &body).await;
        assert_eq!(response.status(), 200, "JSON-RPC answers with HTTP 200");
        response.json().await.expect("JSON body")
    }

    /// A JSON-RPC call (1.0) whose HTTP answer the caller looks at itself.
    pub async fn post_rpc(&self, method: &str, params: Value) -> reqwest::Response {
        post_rpc(&self.client, &self.url, method, params).await
    }

    /// SendMessage (1.0) with the given text; returns the JSON-RPC response.
    pub async fn send_text(&self, text: &str) -> Value {
        self.rpc("SendMessage", json!({"message": user_message(text)}))
            .await
    }

    /// A completed task's id after a blocking SendMessage.
    pub async fn task_with(&self, text: &str) -> (String, Value) {
        let r = self.send_text(text).await;
        let task = r["result"]["task"].clone();
        let id = task["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no task in {r}"))
            .to_owned();
        (id, task)
    }

    /// A task whose turn waits (working) until `release` is notified; returns its id.
    pub async fn start_waiting_task(&self) -> String {
        let r = self
            .rpc(
                "SendMessage",
                json!({"message": user_message("wait"), "configuration": {"returnImmediately": true}}),
            )
            .await;
        r["result"]["task"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no task in {r}"))
            .to_owned()
    }

    /// `POST /tasks/{id}:subscribe`, optionally resuming after `last_event_id`. The
    /// response headers arrive once the subscription is attached.
    pub async fn subscribe(&self, id: &str, last_event_id: Option<&str>) -> reqwest::Response {
        let mut request = self
            .client
            .post(format!("{}/tasks/{id}:subscribe", self.url));
        if let Some(last) = last_event_id {
            request = request.header("Last-Event-ID", last);
        }
        request.send().await.expect("request")
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .expect("request")
    }

    /// The public agent card.
    pub async fn card(&self) -> Value {
        let card = self.get("/.well-known/agent-card.json").await;
        card.json().await.expect("the card is JSON")
    }

    pub async fn post_json(&self, path: &str, body: Value) -> reqwest::Response {
        self.client
            .post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .await
            .expect("request")
    }

    /// Opens an SSE stream with a JSON-RPC request and collects all events.
    pub async fn rpc_stream(&self, method: &str, params: Value) -> Vec<SseEvent> {
        let response = self
            .client
            .post(format!("{}/", self.url))
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
            .send()
            .await
            .expect("request");
        read_sse(response, usize::MAX).await
    }
}

/// One parsed SSE event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub id: String,
    pub data: Value,
}

/// Reads up to `max` events (or until the server closes the stream).
pub async fn read_sse(response: reqwest::Response, max: usize) -> Vec<SseEvent> {
    use eventsource_stream::Eventsource;
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    assert!(
        content_type.starts_with("text/event-stream"),
        "expected SSE, got {content_type}: {}",
        response.text().await.unwrap_or_default()
    );
    let mut stream = response.bytes_stream().eventsource();
    let mut events = Vec::new();
    while events.len() < max {
        let next = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("SSE event within 20 s");
        match next {
            Some(Ok(e)) => events.push(SseEvent {
                id: e.id,
                data: serde_json::from_str(&e.data).expect("JSON data"),
            }),
            Some(Err(e)) => panic!("SSE error: {e}"),
            None => break,
        }
    }
    events
}

/// An HTTP client for the tests. reqwest is built with `rustls-no-provider` (for the
/// memory skill's embeddings client), so a client can only be built once a rustls crypto
/// provider is installed, even for plain-HTTP use.
pub fn http_client() -> reqwest::Client {
    // Err means one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// A JSON-RPC call (1.0) to the server at `url`, answered as it is.
pub async fn post_rpc(
    client: &reqwest::Client,
    url: &str,
    method: &str,
    params: Value,
) -> reqwest::Response {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    post_json_rpc(client, url, &body).await
}

async fn post_json_rpc(client: &reqwest::Client, url: &str, body: &Value) -> reqwest::Response {
    client
        .post(format!("{url}/"))
        .header("A2A-Version", "1.0")
        .json(body)
        .send()
        .await
        .expect("request")
}

pub fn user_message(text: &str) -> Value {
    json!({
        "messageId": uuid::Uuid::new_v4().to_string(),
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    })
}

/// Where the app keeps its data.
#[derive(Clone)]
pub enum Backend {
    Sqlite,
    /// A fresh Postgres database with this URL.
    Postgres(String),
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(Backend::Sqlite, |_| {}).await
}

pub async fn spawn_app_with(backend: Backend, tweak: impl FnOnce(&mut Settings)) -> TestApp {
    let dir = tempfile::tempdir().expect("temp dir");
    spawn_app_in(Some(dir), backend, tweak).await
}

/// The binary's own agent: the tool-routing executor over the configured skills
/// (governance, knowledge, memory), on `backend`, with `tweak` applied to the settings.
pub async fn spawn_configured(backend: Backend, tweak: impl FnOnce(&mut Settings)) -> TestApp {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut settings = test_settings(Some(&dir));
    if let Backend::Postgres(url) = backend {
        settings.store.database_url = url;
    }
    tweak(&mut settings);
    start(settings, Some(dir), Agent::configured(), Default::default()).await
}

/// A server running `agent` on SQLite in `dir` (a fresh one when `None`), with `tweak`
/// applied to the settings.
pub async fn spawn_agent_in(
    dir: Option<tempfile::TempDir>,
    agent: Agent,
    tweak: impl FnOnce(&mut Settings),
) -> TestApp {
    let dir = dir.unwrap_or_else(|| tempfile::tempdir().expect("temp dir"));
    let mut settings = test_settings(Some(&dir));
    tweak(&mut settings);
    start(settings, Some(dir), agent, Default::default()).await
}

/// Calls a tool directly over JSON-RPC and returns the task.
pub async fn call_tool(app: &TestApp, tool: &str, arguments: Value) -> Value {
    let message = json!({
        "messageId": uuid::Uuid::new_v4().to_string(),
        "role": "ROLE_USER",
        "parts": [{"data": {"tool": tool, "arguments": arguments}}],
    });
    let r = app.rpc("SendMessage", json!({"message": message})).await;
    r["result"]["task"].clone()
}

/// The data of a completed tool call's artifact (panics with the task otherwise).
pub fn tool_result(task: &Value) -> Value {
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    task["artifacts"][0]["parts"][0]["data"].clone()
}

/// A server with its own agent (SQLite in a fresh directory).
pub async fn spawn_app_with_agent(agent: Agent) -> TestApp {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut settings = test_settings(Some(&dir));
    settings.log.level = "warn".into();
    start(settings, Some(dir), agent, Default::default()).await
}

/// The settings every test server starts from: auth off, SQLite in `dir`.
pub fn test_settings(dir: Option<&tempfile::TempDir>) -> Settings {
    let mut settings = Settings::default();
    // Tests act as the default tenant unless they turn auth on (tests/it/auth.rs).
    settings.auth.enabled = false;
    settings.server.bind = "127.0.0.1:0".into();
    settings.server.grpc_bind = "127.0.0.1:0".into();
    settings.server.workers = 2;
    settings.threads.arbiters = 2;
    settings.log.level = "warn".into();
    if let Some(d) = dir {
        settings.store.data_dir = d.path().to_path_buf();
    }
    settings
}

/// Starts a server on `dir` (kept by the returned app).
pub async fn spawn_app_in(
    dir: Option<tempfile::TempDir>,
    backend: Backend,
    tweak: impl FnOnce(&mut Settings),
) -> TestApp {
    spawn_scripted(dir, backend, tweak, false).await
}

/// [`spawn_app_in`] with the configured skills as the scripted agent's tools.
pub async fn spawn_app_with_skills_in(
    dir: Option<tempfile::TempDir>,
    backend: Backend,
    tweak: impl FnOnce(&mut Settings),
) -> TestApp {
    spawn_scripted(dir, backend, tweak, true).await
}

async fn spawn_scripted(
    dir: Option<tempfile::TempDir>,
    backend: Backend,
    tweak: impl FnOnce(&mut Settings),
    skills: bool,
) -> TestApp {
    let mut settings = test_settings(dir.as_ref());
    if let Backend::Postgres(url) = backend {
        settings.store.database_url = url;
    }
    tweak(&mut settings);
    let release = Arc::new(Notify::new());
    let holding = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut agent = Agent::new(Arc::new(ScriptedExecutor {
        release: release.clone(),
        holding: holding.clone(),
    }));
    if skills {
        agent.skills = agent_a2a::startup::SkillSource::Configured;
    }
    start(settings, dir, agent, (release, holding)).await
}

async fn start(
    settings: Settings,
    dir: Option<tempfile::TempDir>,
    agent: Agent,
    (release, holding): (Arc<Notify>, Arc<std::sync::atomic::AtomicUsize>),
) -> TestApp {
    agent_a2a::telemetry::init_logging(&settings.log);
    let running = agent_a2a::startup::start(settings, agent)
        .await
        .expect("server starts");
    let url = format!("http://{}", running.addr);
    let handle = running.handles.clone();
    let runtime = running.runtime.clone();
    let grpc_addr = running.grpc_addr;
    actix_web::rt::spawn(running.run());
    TestApp {
        url,
        client: http_client(),
        runtime,
        release,
        holding,
        grpc_addr,
        handle,
        _dir: dir,
    }
}

/// A Postgres database of one test, dropped with this handle: when the test ends,
/// whether it passed or panicked, so a run leaves no database behind.
pub struct TestDatabase {
    /// The database's URL, for the servers under test.
    pub url: String,
    admin: String,
    name: String,
}

impl TestDatabase {
    /// The database's name (in `pg_database`).
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// How long dropping a test database may take in all before the test goes on without it
/// (then a line on stderr says which one is left).
const DROP_DATABASE_TIMEOUT: Duration = Duration::from_secs(30);

impl Drop for TestDatabase {
    /// Drops the database on a thread with a runtime of its own: `drop` cannot await,
    /// and may run while the test's runtime is unwinding. Servers of the test (in this
    /// process or spawned ones) may still hold connections: `WITH (FORCE)` ends them.
    /// Bounded by [`DROP_DATABASE_TIMEOUT`], so a stuck server cannot hang the test.
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let name = self.name.clone();
        let dropper = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => return Err(format!("no runtime: {e}")),
            };
            runtime.block_on(async {
                let drop_it = async {
                    let (client, connection) =
                        tokio_postgres::connect(&admin, tokio_postgres::NoTls).await?;
                    let connection = tokio::spawn(connection);
                    let dropped = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                    drop(client);
                    let _ = connection.await;
                    dropped
                };
                match tokio::time::timeout(DROP_DATABASE_TIMEOUT, drop_it).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!("timed out after {DROP_DATABASE_TIMEOUT:?}")),
                }
            })
        });
        match dropper.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("test database {} left behind: {e}", self.name),
            Err(_) => eprintln!("test database {} left behind: the drop panicked", self.name),
        }
    }
}

/// A fresh Postgres database for one test (dropped with the handle), or `None` (with a
/// printed reason) when no server is reachable outside CI. In CI (`CI=true`) an
/// unreachable server fails the test.
pub async fn fresh_postgres() -> Option<TestDatabase> {
    use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
    let admin = admin_url();
    let mut conn = match AsyncPgConnection::establish(&admin).await {
        Ok(c) => c,
        Err(e) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("Postgres is required in CI but not reachable at {admin}: {e}");
            }
            eprintln!("skipping: Postgres not reachable at {admin}: {e}");
            return None;
        }
    };
    let name = format!("agent_a2a_it_{}", uuid::Uuid::new_v4().simple());
    diesel::sql_query(format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .expect("create test database");
    let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
    Some(TestDatabase {
        url: format!("{base}/{name}"),
        admin,
        name,
    })
}

/// The Postgres server the tests create their databases on (its `test` database).
fn admin_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Whether the Postgres server has a database named `name`.
pub async fn postgres_has_database(name: &str) -> bool {
    let (client, connection) = tokio_postgres::connect(&admin_url(), tokio_postgres::NoTls)
        .await
        .expect("connect to Postgres");
    actix_web::rt::spawn(connection);
    let row = client
        .query_one(
            "SELECT count(*) FROM pg_database WHERE datname = $1",
            &[&name],
        )
        .await
        .expect("read pg_database");
    row.get::<_, i64>(0) > 0
}

/// A real HAProxy running `config` (a whole haproxy.cfg), stopped when dropped.
/// `.ci/run` installs it.
pub struct Haproxy {
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    pub fn spawn(config: &str) -> Haproxy {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, config).unwrap();
        let child = std::process::Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("haproxy is installed (.ci/run installs it)");
        Haproxy { child, _dir: dir }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The interop virtualenv's Python (`A2A_TEST_PYTHON`, else where `tests/interop/venv.sh`
/// puts it) if `import` runs in it, or `None` (outside CI, with the reason printed) when
/// none does; in CI a missing one fails the test.
pub fn interop_python(import: &str, packages: &str) -> Option<String> {
    use std::process::{Command, Stdio};
    let candidates = [
        std::env::var("A2A_TEST_PYTHON").ok(),
        Some("/var/tmp/a2a-interop-venv/bin/python".to_owned()),
    ];
    for python in candidates.into_iter().flatten() {
        let ok = Command::new(&python)
            .args(["-c", import])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(python);
        }
    }
    let why = format!(
        "no Python with {packages}: run `bash tests/interop/venv.sh` or set A2A_TEST_PYTHON"
    );
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("{why}");
    }
    eprintln!("skipped: {why}");
    None
}
