//! MCP servers' tools: a server on the official Python SDK (FastMCP,
//! `tests/fixtures/mcp_server.py`) over stdio and over Streamable HTTP, called directly
//! and by a model; its failures, a slow call canceled on the server, a result over the
//! bound, the server killed mid-call and started again, and the start refusing a server
//! it cannot use.
//!
//! The fixture needs Python with the `mcp` package (`tests/interop/venv.sh` makes the
//! virtualenv `.ci/run` uses): `A2A_TEST_PYTHON`, else that virtualenv's Python. Two
//! tests run the MCP project's reference server, `@modelcontextprotocol/server-everything`
//! from npm, under `node` (`tests/fixtures/mcp_everything.sh`), over stdio and over
//! Streamable HTTP (on loopback only: `tests/fixtures/loopback.mjs`). Without them the
//! tests are skipped with a printed reason, except in CI (`CI=true`), where they fail.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent_a2a::config::{ApiKeySettings, McpServerSettings, Settings};
use agent_a2a::skills::SkillRegistry;
use agent_a2a::startup::Agent;
use serde_json::{Value, json};

use crate::agent::{FakeModel, delta, finish, history_reloaded, with_model};
use crate::support::{TestApp, call_tool, spawn_agent_in, user_message};

/// The parts of a completed direct call's artifact (panics with the task otherwise).
fn parts(task: &Value) -> Vec<Value> {
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    task["artifacts"][0]["parts"].as_array().unwrap().clone()
}

/// The first text part of a completed direct call's artifact.
fn first_text(task: &Value) -> String {
    let parts = parts(task);
    let text = parts.iter().find_map(|p| p["text"].as_str());
    text.unwrap_or_else(|| panic!("a text part: {parts:?}"))
        .to_owned()
}

/// The structured content of a completed direct call: its artifact's JSON data part.
fn structured(task: &Value) -> Value {
    let parts = parts(task);
    let data = parts
        .iter()
        .find(|p| p["mediaType"] == "application/json")
        .map(|p| p["data"].clone());
    data.unwrap_or_else(|| panic!("a JSON data part: {parts:?}"))
}

/// Scripts `model` to call `tool` (as call `id`, with the JSON `arguments`), then to
/// answer `answer` once it has the result.
fn calls_then_answers(model: &FakeModel, id: &str, tool: &str, arguments: &str, answer: &str) {
    model.script(&[
        delta(
            json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
            "function": {"name": tool, "arguments": arguments}}]}),
        ),
        finish("tool_calls"),
    ]);
    model.script(&[delta(json!({"content": answer})), finish("stop")]);
}

/// The events of a direct call of `tool` sent with `SendStreamingMessage`.
async fn stream_call(app: &TestApp, tool: &str, arguments: Value) -> Vec<crate::support::SseEvent> {
    let mut message = user_message("");
    message["parts"] = json!([{"data": {"tool": tool, "arguments": arguments}}]);
    app.rpc_stream("SendStreamingMessage", json!({"message": message}))
        .await
}

/// The `working` status updates of a stream that say how far a tool call has come.
fn progress_updates(events: &[crate::support::SseEvent]) -> Vec<Value> {
    events
        .iter()
        .map(|e| &e.data["result"]["statusUpdate"])
        .filter(|u| u["status"]["state"] == "TASK_STATE_WORKING")
        .filter_map(|u| u["metadata"].get("progress").cloned())
        .collect()
}

/// The Python that has the `mcp` package, or `None` (outside CI) when there is none.
fn python() -> Option<String> {
    crate::support::interop_python("import mcp.server.fastmcp", "the `mcp` package")
}

/// The entry point of `@modelcontextprotocol/server-everything`
/// (`tests/fixtures/mcp_everything.sh` installs it): `A2A_TEST_MCP_EVERYTHING`, else
/// where that script puts it; `None` (outside CI) when it or `node` is missing.
fn everything() -> Option<String> {
    let entry = std::env::var("A2A_TEST_MCP_EVERYTHING").unwrap_or_else(|_| {
        "/var/tmp/a2a-npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
            .to_owned()
    });
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if node && std::path::Path::new(&entry).exists() {
        return Some(entry);
    }
    let why = "no @modelcontextprotocol/server-everything (or no node): run `bash \
               tests/fixtures/mcp_everything.sh` or set A2A_TEST_MCP_EVERYTHING";
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("{why}");
    }
    eprintln!("skipped: {why}");
    None
}

fn fixture() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mcp_server.py")
        .display()
        .to_string()
}

/// The fixture as the stdio server `name` (each test its own: the metrics are the
/// process's).
fn stdio(name: &str, python: &str) -> McpServerSettings {
    McpServerSettings::stdio(name, python, &[&fixture(), "stdio"])
}

/// A server with the configured agent and `servers`, and `tweak` applied.
async fn serving(servers: Vec<McpServerSettings>, tweak: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_agent_in(None, Agent::configured(), |s: &mut Settings| {
        // The HTTP fixture listens on loopback, which the URL policy refuses by default.
        s.push.allow_loopback = true;
        s.agent.mcp_servers = servers;
        tweak(s);
    })
    .await
}

/// The status message of a failed task.
fn failure(task: &Value) -> String {
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{task}");
    task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The value of the metric `name` whose labels include every one of `labels`
/// (`key="value"`), if there is one.
async fn metric(app: &TestApp, name: &str, labels: &[&str]) -> Option<f64> {
    let text = app.get("/metrics").await.text().await.unwrap();
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{'))
        })
        .find(|l| labels.iter().all(|label| l.contains(label)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Asserts that the metric `name` with `labels` (see [`metric`]) has the value `want`.
async fn assert_metric(app: &TestApp, name: &str, labels: &[&str], want: f64) {
    assert_eq!(
        metric(app, name, labels).await,
        Some(want),
        "{name} {labels:?}"
    );
}

/// The body of the next `/health/ready` that answers 200 (a loaded machine can make the
/// store's check late, which answers 503 for a moment).
async fn ready_body(app: &TestApp) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ready = app.get("/health/ready").await;
        if ready.status() == 200 {
            return ready.json().await.unwrap();
        }
        assert!(Instant::now() < deadline, "never ready: {}", ready.status());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the file `path` exists (the fixture writes it).
async fn written(path: &std::path::Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The fixture over Streamable HTTP on a free loopback port; killed when dropped.
struct HttpFixture {
    child: Child,
    url: String,
}

impl HttpFixture {
    fn start(python: &str) -> HttpFixture {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        HttpFixture::start_on(python, port)
    }

    fn start_on(python: &str, port: u16) -> HttpFixture {
        let child = Command::new(python)
            .args([fixture(), "streamable-http".into(), port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the HTTP fixture starts");
        // Ready when it accepts connections (it has no other way to say so).
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the HTTP fixture did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        HttpFixture {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for HttpFixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[actix_web::test]
async fn a_stdio_servers_tools_answer_direct_calls_and_say_why_they_fail() {
    let Some(python) = python() else { return };
    let app = serving(vec![stdio("fixture", &python)], |_| {}).await;

    // The card lists the server's tools under its name, with their schemas.
    let card = app.card().await;
    let skill = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "mcp-fixture")
        .unwrap_or_else(|| panic!("the MCP skill in the card: {card}"));
    assert_eq!(skill["tags"], json!(["mcp"]));

    // Its text, then its structured content, each a part of its kind.
    let task = call_tool(&app, "fixture__add", json!({"a": 2, "b": 3})).await;
    assert_eq!(
        parts(&task),
        [
            json!({"text": "5"}),
            json!({"data": {"result": 5}, "mediaType": "application/json"})
        ],
        "{task}"
    );

    // The server's own schema refuses wrong arguments before anything is sent.
    let task = call_tool(&app, "fixture__add", json!({"a": "two", "b": 3})).await;
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED", "{task}");

    // A tool error is the call's failure, in the server's words.
    let text = failure(&call_tool(&app, "fixture__fail", json!({"why": "no"})).await);
    assert_eq!(
        text, "fixture__fail failed: Error executing tool fail: refused: no",
        "{text}"
    );

    assert_metric(
        &app,
        "agent_a2a_mcp_calls_total",
        &["outcome=\"ok\"", "server=\"fixture\"", "tool=\"add\""],
        1.0,
    )
    .await;
    assert_metric(
        &app,
        "agent_a2a_mcp_calls_total",
        &[
            "outcome=\"tool_error\"",
            "server=\"fixture\"",
            "tool=\"fail\"",
        ],
        1.0,
    )
    .await;
    assert_metric(
        &app,
        "agent_a2a_mcp_server_up",
        &["server=\"fixture\""],
        1.0,
    )
    .await;
    // The operators' dashboard counts them (its collector is process-wide: at least).
    let stats: Value = app.get("/dashboard/stats.json").await.json().await.unwrap();
    assert!(
        stats["window"]["mcpAnswered"].as_u64() >= Some(1),
        "{stats}"
    );
    assert!(stats["window"]["mcpFailed"].as_u64() >= Some(1), "{stats}");
}

#[actix_web::test]
async fn a_tools_progress_goes_to_the_stream_as_working_updates_not_into_the_history() {
    let Some(python) = python() else { return };
    let model = FakeModel::start().await;
    let url = model.url.clone();
    let app = serving(vec![stdio("stepper", &python)], move |s| {
        with_model(&url)(s);
        s.streaming.progress_interval_ms = 1;
    })
    .await;

    // A direct call, streamed: each step the server reports is a working update.
    let events = stream_call(&app, "stepper__steps", json!({"count": 3, "pause": 0.1})).await;
    // Each as the server said it (reports closer than the interval are merged, the
    // latest kept; the last may come with the result, after which nothing is sent).
    let progress = progress_updates(&events);
    assert!(!progress.is_empty(), "{events:?}");
    let mut before = 0.0;
    for update in &progress {
        let step = update["progress"].as_f64().unwrap();
        assert!(step > before, "{progress:?}");
        before = step;
        assert_eq!(
            update,
            &json!({"tool": "stepper__steps", "progress": step, "total": 3.0,
                "message": format!("step {step} of 3")}),
        );
    }
    let last = &events.last().unwrap().data["result"]["statusUpdate"];
    assert_eq!(
        last["status"]["state"], "TASK_STATE_COMPLETED",
        "{events:?}"
    );
    let task_id = last["taskId"].as_str().unwrap();
    // Nothing of it joined the task's history: no status message was written.
    let task = app.rpc("GetTask", json!({"id": task_id})).await;
    let history = task["result"]["history"].as_array().unwrap();
    assert_eq!(history.len(), 1, "{task}");

    // A model's call, streamed, reports the same way.
    calls_then_answers(
        &model,
        "call_steps",
        "stepper__steps",
        "{\"count\": 2, \"pause\": 0.1}",
        "Done in two.",
    );
    let events = app
        .rpc_stream(
            "SendStreamingMessage",
            json!({"message": user_message("take two steps")}),
        )
        .await;
    let progress = progress_updates(&events);
    assert_eq!(
        progress.first().map(|p| (&p["tool"], &p["message"])),
        Some((&json!("stepper__steps"), &json!("step 1 of 2"))),
        "{events:?}"
    );
    let last = &events.last().unwrap().data["result"]["statusUpdate"];
    assert_eq!(
        last["status"]["state"], "TASK_STATE_COMPLETED",
        "{events:?}"
    );
}

#[actix_web::test]
async fn progress_is_not_sent_when_its_interval_is_zero() {
    let Some(python) = python() else { return };
    let app = serving(vec![stdio("quiet", &python)], |s| {
        s.streaming.progress_interval_ms = 0;
    })
    .await;
    let events = stream_call(&app, "quiet__steps", json!({"count": 2, "pause": 0.05})).await;
    assert_eq!(progress_updates(&events), Vec::<Value>::new(), "{events:?}");
    let last = &events.last().unwrap().data["result"]["statusUpdate"];
    assert_eq!(
        last["status"]["state"], "TASK_STATE_COMPLETED",
        "{events:?}"
    );
}

/// Calls `tool` directly until it is known (its server's changed list taken), and
/// gives its result.
async fn once_listed(app: &TestApp, tool: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let task = call_tool(app, tool, json!({})).await;
        if task["status"]["state"] == "TASK_STATE_COMPLETED" {
            return task;
        }
        assert!(Instant::now() < deadline, "{tool} never listed: {task}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether the direct call of `tool` is refused as unknown (a JSON-RPC error naming it).
async fn unknown(app: &TestApp, tool: &str) -> bool {
    let mut message = user_message("");
    message["parts"] = json!([{"data": {"tool": tool, "arguments": {}}}]);
    let r = app.rpc("SendMessage", json!({"message": message})).await;
    r["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("unknown tool"))
}

#[actix_web::test]
async fn a_changed_tool_list_reaches_direct_calls_the_model_and_the_card() {
    let Some(python) = python() else { return };
    let model = FakeModel::start().await;
    let url = model.url.clone();
    let app = serving(vec![stdio("grower", &python)], move |s| with_model(&url)(s)).await;
    assert!(unknown(&app, "grower__later").await);

    // The model grows the server a tool; the server says its list changed.
    calls_then_answers(
        &model,
        "call_grow",
        "grower__grow",
        "{\"name\": \"later\"}",
        "Grown.",
    );
    let r = app
        .rpc("SendMessage", json!({"message": user_message("grow")}))
        .await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    let offered = |request: &Value| -> Vec<String> {
        request["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
            .collect()
    };
    assert!(!offered(&model.requests()[0]).contains(&"grower__later".to_owned()));

    // Direct calls reach the new tool, the next turn's model is offered it, the card
    // lists it.
    let later = once_listed(&app, "grower__later").await;
    assert_eq!(first_text(&later), "I am later", "{later}");
    model.script(&[delta(json!({"content": "Fine."})), finish("stop")]);
    let r = app
        .rpc("SendMessage", json!({"message": user_message("again")}))
        .await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    let requests = model.requests();
    let tools = offered(&requests[2]);
    assert!(tools.contains(&"grower__later".to_owned()), "{tools:?}");
    let later = requests[2]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "grower__later")
        .unwrap();
    assert_eq!(later["function"]["description"], "added at run time");
    let card = app.card().await;
    assert!(card.to_string().contains("grower__later"), "{card}");
    assert_metric(
        &app,
        "agent_a2a_mcp_tool_list_changes_total",
        &["server=\"grower\""],
        1.0,
    )
    .await;

    // Removed, it is refused as unknown and no longer offered.
    let shrunk = call_tool(&app, "grower__shrink", json!({"name": "later"})).await;
    assert_eq!(first_text(&shrunk), "shrunk");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !unknown(&app, "grower__later").await {
        assert!(Instant::now() < deadline, "grower__later still listed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    model.script(&[delta(json!({"content": "Fine."})), finish("stop")]);
    app.rpc("SendMessage", json!({"message": user_message("once more")}))
        .await;
    let tools = offered(&model.requests()[3]);
    assert!(!tools.contains(&"grower__later".to_owned()), "{tools:?}");
    assert!(tools.contains(&"grower__add".to_owned()), "{tools:?}");
}

/// `@modelcontextprotocol/server-everything` over Streamable HTTP on `port` (loopback
/// only: `tests/fixtures/loopback.mjs`); killed when dropped.
struct EverythingHttp {
    child: Child,
}

impl EverythingHttp {
    fn start_on(entry: &str, port: u16) -> EverythingHttp {
        let loopback =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/loopback.mjs");
        let child = Command::new("node")
            .arg("--import")
            .arg(loopback)
            .args([entry, "streamableHttp"])
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("server-everything starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "server-everything did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        EverythingHttp { child }
    }
}

impl Drop for EverythingHttp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[actix_web::test]
async fn the_reference_server_everything_answers_over_streamable_http_and_a_lost_session_is_made_anew()
 {
    let Some(entry) = everything() else { return };
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = EverythingHttp::start_on(&entry, port);
    let mut settings = McpServerSettings::http("everyhttp", format!("http://127.0.0.1:{port}/mcp"));
    settings.restart_backoff_ms = 20;
    settings.timeout_ms = 1_000;
    settings.start_timeout_ms = 1_000;
    let app = serving(vec![settings], |_| {}).await;
    let echo = |text: &'static str| {
        let app = &app;
        async move { call_tool(app, "everyhttp__echo", json!({"message": text})).await }
    };
    assert_eq!(parts(&echo("one").await), [json!({"text": "Echo: one"})]);

    // Started again on the same port, the server knows nothing of the session, and says
    // so in an error that names no request: the call goes unanswered, fails at its
    // timeout, a ping goes unanswered too, and the client connects anew (a new
    // handshake, a new session); calls go through again.
    drop(server);
    let _server = EverythingHttp::start_on(&entry, port);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let task = echo("two").await;
        if task["status"]["state"] == "TASK_STATE_COMPLETED" {
            assert_eq!(parts(&task), [json!({"text": "Echo: two"})]);
            break;
        }
        let why = failure(&task);
        assert!(
            why.contains("did not answer echo within 1000 ms") || why.contains("unreachable"),
            "a failure says why: {task}"
        );
        assert!(Instant::now() < deadline, "never reached anew: {task}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        metric(
            &app,
            "agent_a2a_mcp_restarts_total",
            &["server=\"everyhttp\""]
        )
        .await
            >= Some(1.0)
    );
}

#[actix_web::test]
async fn the_reference_server_everything_answers_over_stdio() {
    let Some(entry) = everything() else { return };
    let server = McpServerSettings::stdio("everything", "node", &[&entry, "stdio"]);
    let model = FakeModel::start().await;
    let url = model.url.clone();
    let app = serving(vec![server], move |s| with_model(&url)(s)).await;
    let echo = call_tool(&app, "everything__echo", json!({"message": "hello"})).await;
    assert_eq!(parts(&echo), [json!({"text": "Echo: hello"})]);
    let sum = call_tool(&app, "everything__get-sum", json!({"a": 2, "b": 3})).await;
    assert_eq!(first_text(&sum), "The sum of 2 and 3 is 5.");
    // An image block is a part of its bytes and media type, between its texts.
    let image = parts(&call_tool(&app, "everything__get-tiny-image", json!({})).await);
    let kinds: Vec<bool> = image.iter().map(|p| p["text"].is_string()).collect();
    assert_eq!(kinds, [true, false, true], "{image:?}");
    assert_eq!(image[1]["mediaType"], "image/png");
    assert!(image[1]["raw"].as_str().unwrap().starts_with("iVBOR"));
    // A resource link is a URL part.
    let links =
        parts(&call_tool(&app, "everything__get-resource-links", json!({"count": 1})).await);
    assert!(
        links
            .iter()
            .any(|p| p["url"].is_string() && p["filename"].is_string()),
        "{links:?}"
    );
    // An embedded blob resource is a part of its bytes, its URI in the metadata.
    let blob = parts(
        &call_tool(
            &app,
            "everything__get-resource-reference",
            json!({"resourceType": "Blob", "resourceId": 2}),
        )
        .await,
    );
    let resource = blob
        .iter()
        .find(|p| p["raw"].is_string())
        .unwrap_or_else(|| panic!("a bytes part: {blob:?}"));
    assert!(
        resource["metadata"]["uri"].as_str().unwrap().contains("2"),
        "{resource}"
    );
    // Its long-running operation's progress reaches a stream.
    let events = stream_call(
        &app,
        "everything__trigger-long-running-operation",
        json!({"duration": 0.6, "steps": 3}),
    )
    .await;
    let progress = progress_updates(&events);
    assert!(progress.iter().any(|p| p["total"] == 3.0), "{events:?}");
    // Its arguments are checked against the server's schema.
    let task = call_tool(&app, "everything__get-sum", json!({"a": "2"})).await;
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED", "{task}");

    // A model calling it is told what the image is, not shown its bytes.
    calls_then_answers(
        &model,
        "call_img",
        "everything__get-tiny-image",
        "{}",
        "A logo.",
    );
    let r = app
        .rpc(
            "SendMessage",
            json!({"message": user_message("show me the logo")}),
        )
        .await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    let requests = model.requests();
    let told = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .expect("the call's result in the model's second request")
        .to_owned();
    assert!(told.contains("(image image/png, ~"), "{told}");
    assert!(told.contains("not shown to the model"), "{told}");
    assert!(!told.contains("iVBOR"), "{told}");
    assert!(told.contains("The image above is the MCP logo."), "{told}");
}

#[actix_web::test]
async fn a_model_calls_an_mcp_tool_and_its_call_survives_a_restart_in_the_history() {
    let Some(python) = python() else { return };
    let model = FakeModel::start().await;
    calls_then_answers(
        &model,
        "call_1",
        "adder__add",
        "{\"a\": 20, \"b\": 22}",
        "It is 42.",
    );
    let configure = |python: String, url: String| {
        move |s: &mut Settings| {
            s.agent.mcp_servers = vec![stdio("adder", &python)];
            with_model(&url)(s);
        }
    };
    let app = spawn_agent_in(
        None,
        Agent::configured(),
        configure(python.clone(), model.url.clone()),
    )
    .await;
    let mut first = user_message("what is 20 + 22?");
    first["contextId"] = json!("ctx-adder");
    let r = app.rpc("SendMessage", json!({"message": first})).await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert!(
        task["artifacts"].to_string().contains("It is 42."),
        "{task}"
    );

    let requests = model.requests();
    // The model was offered the tool with the server's schema.
    let offered = requests[0]["tools"].as_array().unwrap();
    let add = offered
        .iter()
        .find(|t| t["function"]["name"] == "adder__add")
        .unwrap_or_else(|| panic!("adder__add offered: {offered:?}"));
    assert_eq!(add["function"]["parameters"]["required"], json!(["a", "b"]));
    // And it saw the call's result.
    let result: Value = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .and_then(|m| serde_json::from_str(m["content"].as_str()?).ok())
        .expect("the call's result in the model's second request");
    assert_eq!(
        result["structuredContent"],
        json!({"result": 42}),
        "{result}"
    );

    // Restarted (the MCP server with it), the next turn's model sees the call and its
    // result as before: ids, name and output from the stored history.
    let dir = app.stop().await;
    model.script(&[delta(json!({"content": "Still 42."})), finish("stop")]);
    let app = spawn_agent_in(
        dir,
        Agent::configured(),
        configure(python, model.url.clone()),
    )
    .await;
    let mut second = user_message("and again?");
    second["contextId"] = json!("ctx-adder");
    let r = app.rpc("SendMessage", json!({"message": second})).await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    let (before, after) = history_reloaded(&model);
    let call = before.iter().find(|m| m["tool_calls"].is_array()).unwrap();
    assert_eq!(call["tool_calls"][0]["id"], "call_1");
    assert_eq!(call["tool_calls"][0]["function"]["name"], "adder__add");
    assert_eq!(after[before.len()]["content"], "It is 42.");
    assert_eq!(after[before.len() + 1]["content"], "and again?");
    app.stop().await;
}

#[actix_web::test]
async fn a_streamable_http_server_answers_within_its_allowlist() {
    let Some(python) = python() else { return };
    let server = HttpFixture::start(&python);
    let mut settings = McpServerSettings::http("remote", server.url.clone());
    settings.tools = vec!["add".into(), "pid".into()];
    let app = serving(vec![settings], |_| {}).await;
    let answer = call_tool(&app, "remote__add", json!({"a": 1, "b": 1})).await;
    assert_eq!(structured(&answer), json!({"result": 2}), "{answer}");
    // Tools the allowlist leaves out are not the agent's.
    let message = json!({"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
        "parts": [{"data": {"tool": "remote__big", "arguments": {"size": 1}}}]});
    let r = app.rpc("SendMessage", json!({"message": message})).await;
    assert!(r["error"].to_string().contains("remote__big"), "{r}");
    assert_metric(&app, "agent_a2a_mcp_server_up", &["server=\"remote\""], 1.0).await;
}

#[actix_web::test]
async fn an_http_server_that_went_away_is_reached_anew_and_its_breaker_opens() {
    let Some(python) = python() else { return };
    let server = HttpFixture::start(&python);
    let port: u16 = server
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    let mut settings = McpServerSettings::http("flaky", server.url.clone());
    settings.restart_backoff_ms = 20;
    settings.breaker_failures = 3;
    settings.breaker_open_secs = 3600;
    settings.timeout_ms = 5_000;
    let app = serving(vec![settings], |_| {}).await;
    let sum = |task: Value| structured(&task)["result"].clone();
    assert_eq!(
        sum(call_tool(&app, "flaky__add", json!({"a": 1, "b": 2})).await),
        3
    );

    // Gone: the call fails saying so; started again on the same address, a later call
    // reaches it on a new session.
    drop(server);
    let text = failure(&call_tool(&app, "flaky__add", json!({"a": 1, "b": 2})).await);
    assert!(text.contains("MCP server `flaky` is unreachable"), "{text}");
    let _server = HttpFixture::start_on(&python, port);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let task = call_tool(&app, "flaky__add", json!({"a": 2, "b": 2})).await;
        if task["status"]["state"] == "TASK_STATE_COMPLETED" {
            assert_eq!(sum(task), 4);
            break;
        }
        assert!(Instant::now() < deadline, "not reached again: {task}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(metric(&app, "agent_a2a_mcp_restarts_total", &["server=\"flaky\""]).await >= Some(1.0));
    drop(_server);

    // Failing in a row, its breaker opens: calls fail at once without trying.
    for _ in 0..3 {
        failure(&call_tool(&app, "flaky__add", json!({"a": 1, "b": 1})).await);
    }
    let text = failure(&call_tool(&app, "flaky__add", json!({"a": 1, "b": 1})).await);
    assert!(text.contains("its breaker is open"), "{text}");
    assert_metric(
        &app,
        "agent_a2a_mcp_calls_total",
        &[
            "outcome=\"breaker_open\"",
            "server=\"flaky\"",
            "tool=\"add\"",
        ],
        1.0,
    )
    .await;
    assert_metric(
        &app,
        "agent_a2a_mcp_breaker_open",
        &["server=\"flaky\""],
        1.0,
    )
    .await;
}

#[actix_web::test]
async fn a_slow_call_is_canceled_on_the_server_and_a_large_result_refused() {
    let Some(python) = python() else { return };
    let mut settings = stdio("sleepy", &python);
    settings.timeout_ms = 700;
    settings.max_result_bytes = 64 * 1024;
    let app = serving(vec![settings], |_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("canceled");
    let text = failure(
        &call_tool(
            &app,
            "sleepy__slow",
            json!({"seconds": 30, "marker": marker.display().to_string()}),
        )
        .await,
    );
    assert!(text.contains("within 700 ms"), "{text}");
    // The server heard the cancel: its call ended before its sleep did.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !marker.exists() {
        assert!(
            Instant::now() < deadline,
            "the server's call was not canceled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let text = failure(&call_tool(&app, "sleepy__big", json!({"size": 100_000})).await);
    assert!(text.contains("max_result_bytes (65536)"), "{text}");
    // The server is still there for the next call.
    let answer = call_tool(&app, "sleepy__big", json!({"size": 10})).await;
    assert_eq!(first_text(&answer), "xxxxxxxxxx");
}

#[actix_web::test]
async fn canceling_the_task_cancels_its_call_on_the_server() {
    let Some(python) = python() else { return };
    let app = serving(vec![stdio("stoppable", &python)], |_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let (started, canceled) = (dir.path().join("started"), dir.path().join("canceled"));
    let message = json!({
        "messageId": uuid::Uuid::new_v4().to_string(),
        "role": "ROLE_USER",
        "parts": [{"data": {"tool": "stoppable__slow", "arguments": {"seconds": 30,
            "started": started.display().to_string(),
            "marker": canceled.display().to_string()}}}],
    });
    let r = app
        .rpc(
            "SendMessage",
            json!({"message": message, "configuration": {"returnImmediately": true}}),
        )
        .await;
    let id = r["result"]["task"]["id"].clone();
    assert!(id.is_string(), "{r}");
    written(&started, "the slow call did not start").await;
    let r = app.rpc("CancelTask", json!({"id": id})).await;
    assert_eq!(r["result"]["status"]["state"], "TASK_STATE_CANCELED", "{r}");
    written(&canceled, "the server's call was not canceled").await;
}

#[actix_web::test]
async fn a_server_killed_mid_call_fails_the_call_and_is_started_again() {
    let Some(python) = python() else { return };
    let mut settings = stdio("phoenix", &python);
    settings.restart_backoff_ms = 50;
    let app = std::sync::Arc::new(serving(vec![settings], |_| {}).await);
    let pid_of = |task: Value| structured(&task)["result"].as_i64().unwrap();
    let first = pid_of(call_tool(&app, "phoenix__pid", json!({})).await);

    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let calling = {
        let app = app.clone();
        let started = started.display().to_string();
        actix_web::rt::spawn(async move {
            call_tool(
                &app,
                "phoenix__slow",
                json!({"seconds": 30, "started": started}),
            )
            .await
        })
    };
    // Killed while the call waits.
    written(&started, "the slow call did not start").await;
    let killed = Command::new("kill")
        .args(["-9", &first.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let text = failure(&calling.await.unwrap());
    assert!(text.contains("unreachable"), "{text}");

    // Started again: the next call reaches a new process.
    let second = pid_of(call_tool(&app, "phoenix__pid", json!({})).await);
    assert_ne!(first, second);
    assert!(
        metric(
            &app,
            "agent_a2a_mcp_restarts_total",
            &["server=\"phoenix\""]
        )
        .await
            >= Some(1.0)
    );
}

#[actix_web::test]
async fn a_server_that_is_down_is_named_by_readiness_without_failing_it() {
    let Some(python) = python() else { return };
    let mut settings = stdio("fragile", &python);
    settings.restart_backoff_ms = 600_000;
    settings.timeout_ms = 300;
    let app = serving(vec![settings], |_| {}).await;
    assert_eq!(ready_body(&app).await, json!({"status": "ready"}));
    let pid = structured(&call_tool(&app, "fragile__pid", json!({})).await)["result"]
        .as_i64()
        .unwrap()
        .to_string();
    assert!(
        Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body = ready_body(&app).await;
        if body["disconnected"] == json!(["mcp:fragile"]) {
            assert_eq!(body["status"], "ready", "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "the server not named: {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Its calls fail within their timeout, saying so.
    let text = failure(&call_tool(&app, "fragile__pid", json!({})).await);
    assert!(text.contains("not connected"), "{text}");
    assert_metric(
        &app,
        "agent_a2a_mcp_server_up",
        &["server=\"fragile\""],
        0.0,
    )
    .await;
}

#[actix_web::test]
async fn a_tenant_is_held_to_the_servers_its_keys_name() {
    let Some(python) = python() else { return };
    let model = FakeModel::start().await;
    let url = model.url.clone();
    let app = serving(vec![stdio("gated", &python)], move |s| {
        with_model(&url)(s);
        s.auth.enabled = true;
        let key = |key: &str, tenant: &str, servers: Option<Vec<String>>| ApiKeySettings {
            key: key.into(),
            key_sha256: String::new(),
            tenant: tenant.into(),
            tier: "default".into(),
            mcp_servers: servers,
        };
        s.auth.api_keys = vec![
            key("key-acme", "acme", Some(Vec::new())),
            key("key-globex", "globex", None),
        ];
    })
    .await;
    let call = |key: &'static str| {
        let message = json!({
            "messageId": uuid::Uuid::new_v4().to_string(),
            "role": "ROLE_USER",
            "parts": [{"data": {"tool": "gated__add", "arguments": {"a": 1, "b": 2}}}],
        });
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": message}});
        let request = app
            .client
            .post(&app.url)
            .header("X-API-Key", key)
            .header("A2A-Version", "1.0")
            .json(&body);
        async move {
            let r: Value = request.send().await.unwrap().json().await.unwrap();
            r["result"]["task"].clone()
        }
    };
    let refused = call("key-acme").await;
    assert_ne!(
        refused["status"]["state"], "TASK_STATE_COMPLETED",
        "{refused}"
    );
    assert!(
        refused
            .to_string()
            .contains("this tenant may not use the MCP server `gated`"),
        "{refused}"
    );
    assert_eq!(structured(&call("key-globex").await), json!({"result": 3}));

    // A model running for a tenant is offered only the tools it may call.
    let offered = |key: &'static str| {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": user_message("add one and two")}});
        let request = app
            .client
            .post(&app.url)
            .header("X-API-Key", key)
            .header("A2A-Version", "1.0")
            .json(&body);
        let model = &model;
        async move {
            model.script(&[delta(json!({"content": "Three."})), finish("stop")]);
            let r: Value = request.send().await.unwrap().json().await.unwrap();
            assert_eq!(
                r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
                "{r}"
            );
            let requests = model.requests();
            let tools = requests.last().unwrap()["tools"]
                .as_array()
                .unwrap()
                .clone();
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect::<Vec<String>>()
        }
    };
    let acme = offered("key-acme").await;
    assert!(!acme.iter().any(|t| t.starts_with("gated__")), "{acme:?}");
    assert!(acme.contains(&"memory_search".to_owned()), "{acme:?}");
    let globex = offered("key-globex").await;
    assert!(globex.contains(&"gated__add".to_owned()), "{globex:?}");
}

#[actix_web::test]
async fn a_stdio_server_gets_the_env_it_is_given_and_nothing_else() {
    let Some(python) = python() else { return };
    // cargo gives the test process CARGO_MANIFEST_DIR: the child gets it only by name.
    let mut settings = stdio("envy", &python);
    settings
        .env
        .insert("TOKEN".into(), "${CARGO_MANIFEST_DIR}".into());
    settings.env.insert("PLAIN".into(), "as written".into());
    let app = serving(vec![settings], |_| {}).await;
    let env = |name: &'static str| {
        let app = &app;
        async move { first_text(&call_tool(app, "envy__env", json!({"name": name})).await) }
    };
    assert_eq!(env("TOKEN").await, env!("CARGO_MANIFEST_DIR"));
    assert_eq!(env("PLAIN").await, "as written");
    assert_ne!(env("PATH").await, "(unset)", "PATH is passed on");
    // This process's other variables are not.
    assert_eq!(env("CARGO_MANIFEST_DIR").await, "(unset)");
    assert_eq!(env("CARGO_PKG_NAME").await, "(unset)");
}

/// An HTTP server's token goes in the `Authorization` header and nowhere else: a server
/// refusing it stops the start with an error that does not repeat it.
#[actix_web::test]
async fn an_http_servers_token_is_sent_as_a_bearer_and_never_told() {
    use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
    let seen: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let recorded = seen.clone();
    let server = HttpServer::new(move || {
        let recorded = recorded.clone();
        App::new().route(
            "/mcp",
            web::post().to(move |req: HttpRequest| {
                let recorded = recorded.clone();
                async move {
                    let auth = req.headers().get("authorization");
                    let auth = auth.and_then(|v| v.to_str().ok()).unwrap_or("(none)");
                    recorded.lock().unwrap().push(auth.to_owned());
                    HttpResponse::Unauthorized()
                        .insert_header(("WWW-Authenticate", "Bearer"))
                        .finish()
                }
            }),
        )
    })
    .workers(1)
    .bind("127.0.0.1:0")
    .unwrap();
    let addr = server.addrs()[0];
    let running = server.run();
    let handle = running.handle();
    actix_web::rt::spawn(running);

    // The token: a variable cargo sets for the test process.
    let token = env!("CARGO_MANIFEST_DIR");
    let mut s = Settings::default();
    s.push.allow_loopback = true;
    let mut sealed = McpServerSettings::http("sealed", format!("http://{addr}/mcp"));
    sealed.bearer_env = "CARGO_MANIFEST_DIR".into();
    sealed.start_timeout_ms = 3_000;
    s.agent.mcp_servers = vec![sealed];
    let mut registry = SkillRegistry::default();
    let e = agent_a2a::client::mcp_servers(&s, &mut registry)
        .await
        .expect_err("the start is refused");
    assert!(
        e.contains("sealed") && e.contains("handshake failed"),
        "{e}"
    );
    assert!(!e.contains(token), "the token is not told: {e}");
    assert!(
        !format!("{s:?}").contains(token),
        "nor printed with the settings"
    );
    assert_eq!(
        seen.lock().unwrap().first().map(String::as_str),
        Some(format!("Bearer {token}").as_str())
    );
    handle.stop(false).await;
}

#[actix_web::test]
async fn the_start_refuses_a_server_it_cannot_use() {
    let Some(python) = python() else { return };
    let refused = |settings: McpServerSettings| async move {
        let mut s = Settings::default();
        s.agent.mcp_servers = vec![settings];
        let mut registry = SkillRegistry::default();
        agent_a2a::client::mcp_servers(&s, &mut registry)
            .await
            .expect_err("the start is refused")
    };
    let e = refused(McpServerSettings::stdio(
        "gone",
        "/nonexistent/mcp-server",
        &[],
    ))
    .await;
    assert!(
        e.contains("gone") && e.contains("could not be started"),
        "{e}"
    );

    let mut few = stdio("fixture", &python);
    few.max_tools = 2;
    let e = refused(few).await;
    assert!(e.contains("more than its max_tools (2)"), "{e}");

    let mut missing = stdio("fixture", &python);
    missing.tools = vec!["add".into(), "nope".into()];
    let e = refused(missing).await;
    assert!(
        e.contains("\"nope\", which the server does not offer"),
        "{e}"
    );

    // Loopback HTTP is refused unless the URL policy allows it.
    let e = refused(McpServerSettings::http("local", "http://127.0.0.1:9/mcp")).await;
    assert!(e.contains("local") && e.contains("loopback"), "{e}");
    // A name the policy's resolver refuses: the start says why.
    let mut s = Settings::default();
    s.push.allow_loopback = true;
    s.push.deny_hosts = vec!["127.0.0.0/8".into(), "::1/128".into()];
    s.agent.mcp_servers = vec![McpServerSettings::http("named", "http://localhost:9/mcp")];
    let e = agent_a2a::client::mcp_servers(&s, &mut SkillRegistry::default())
        .await
        .expect_err("the start is refused");
    assert!(
        e.contains("refused by the push policy") && e.contains("push.deny_hosts"),
        "{e}"
    );

    let mut unset = stdio("fixture", &python);
    unset
        .env
        .insert("TOKEN".into(), "${A2A_TEST_UNSET_VARIABLE}".into());
    let e = refused(unset).await;
    assert!(
        e.contains("A2A_TEST_UNSET_VARIABLE, which is not set"),
        "{e}"
    );
}

/// Whether the process `pid` runs (a zombie does not).
fn runs(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            Some(state != 'Z' && state != 'X')
        })
        .unwrap_or(false)
}

/// An answer past `max_result_bytes` (and its envelope) is dropped before it is decoded
/// and fails its call at once, however it is made: one text past rmcp's own 16 MiB line
/// cap, or many small pieces that would take hundreds of MB decoded.
#[actix_web::test]
async fn an_answer_past_the_bound_fails_at_once_without_being_decoded() {
    let Some(python) = python() else { return };
    let mut settings = stdio("flood", &python);
    settings.timeout_ms = 30_000;
    let app = serving(vec![settings], |_| {}).await;
    let started = Instant::now();
    let text = failure(&call_tool(&app, "flood__big", json!({"size": 17_000_000})).await);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "failed after {:?}: {text}",
        started.elapsed()
    );
    let bound =
        "with a message of more than 1114112 bytes, more than its max_result_bytes (1048576)";
    assert!(text.contains(bound), "{text}");
    let text = failure(&call_tool(&app, "flood__pieces", json!({"count": 200_000})).await);
    assert!(text.contains(bound), "{text}");
    for tool in ["tool=\"big\"", "tool=\"pieces\""] {
        let labels = ["server=\"flood\"", tool, "outcome=\"too_large\""];
        assert_metric(&app, "agent_a2a_mcp_calls_total", &labels, 1.0).await;
    }
    // The server is still there for the next call.
    let answer = call_tool(&app, "flood__add", json!({"a": 2, "b": 3})).await;
    assert_eq!(structured(&answer)["result"], 5);
}

/// A stdio server that stops answering — a call and then a ping go unanswered — is
/// started again, as an HTTP one is connected anew.
#[actix_web::test]
async fn a_stdio_server_that_stops_answering_is_started_again() {
    let Some(python) = python() else { return };
    let mut settings = stdio("frozen", &python);
    settings.timeout_ms = 500;
    settings.start_timeout_ms = 3_000;
    settings.restart_backoff_ms = 50;
    let app = serving(vec![settings], |_| {}).await;
    let pid_of = |task: &Value| structured(task)["result"].as_i64();
    let first = pid_of(&call_tool(&app, "frozen__pid", json!({})).await).unwrap();
    let text = failure(&call_tool(&app, "frozen__freeze", json!({"seconds": 600})).await);
    assert!(text.contains("did not answer"), "{text}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let second = loop {
        let task = call_tool(&app, "frozen__pid", json!({})).await;
        if task["status"]["state"] == "TASK_STATE_COMPLETED" {
            break pid_of(&task).unwrap();
        }
        assert!(Instant::now() < deadline, "not started again: {task}");
    };
    assert_ne!(first, second);
    while runs(first) {
        assert!(Instant::now() < deadline, "the frozen server still runs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        metric(&app, "agent_a2a_mcp_restarts_total", &["server=\"frozen\""]).await >= Some(1.0)
    );
}

/// A server that crashes leaves nothing of its process group running.
#[actix_web::test]
async fn a_crashed_servers_children_end_with_it() {
    let Some(python) = python() else { return };
    let mut settings = stdio("leaky", &python);
    settings.restart_backoff_ms = 50;
    let app = serving(vec![settings], |_| {}).await;
    let sleeper =
        structured(&call_tool(&app, "leaky__orphan", json!({"seconds": 77})).await)["result"]
            .as_i64()
            .unwrap();
    assert!(runs(sleeper));
    failure(&call_tool(&app, "leaky__crash", json!({})).await);
    let deadline = Instant::now() + Duration::from_secs(10);
    while runs(sleeper) {
        if Instant::now() > deadline {
            let _ = Command::new("kill")
                .args(["-9", &sleeper.to_string()])
                .status();
            panic!("the crashed server's child {sleeper} still runs");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Over Streamable HTTP too, an answer past the bound is refused before it is decoded,
/// at once and as too large.
#[actix_web::test]
async fn an_http_answer_past_the_bound_fails_at_once_as_too_large() {
    let Some(python) = python() else { return };
    let server = HttpFixture::start(&python);
    let mut settings = McpServerSettings::http("wide", server.url.clone());
    settings.timeout_ms = 30_000;
    settings.max_result_bytes = 100_000;
    let app = serving(vec![settings], |_| {}).await;
    let started = Instant::now();
    let text = failure(&call_tool(&app, "wide__pieces", json!({"count": 50_000})).await);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "failed after {:?}: {text}",
        started.elapsed()
    );
    // Refused before it was decoded: what it was is not known, only that it was more.
    let bound = "with a message of more than 165536 bytes, more than its max_result_bytes (100000)";
    assert!(text.contains(bound), "{text}");
    let answer = call_tool(&app, "wide__add", json!({"a": 2, "b": 3})).await;
    assert_eq!(structured(&answer)["result"], 5);
}

/// A flood of notifications is counted, every one, and costs the log a few lines (a few
/// per 10 s of each kind; rmcp's own line per notification is held back too).
#[actix_web::test]
async fn a_flood_of_notifications_is_counted_not_logged_line_by_line() {
    let Some(python) = python() else { return };
    let app = serving(vec![stdio("chatty", &python)], |_| {}).await;
    let answer = call_tool(&app, "chatty__chatter", json!({"count": 2000})).await;
    assert_eq!(first_text(&answer), "said");
    // The server sends them before its answer, in order, on one pipe.
    assert_metric(
        &app,
        "agent_a2a_mcp_log_messages_total",
        &["server=\"chatty\""],
        2000.0,
    )
    .await;
    assert_metric(
        &app,
        "agent_a2a_mcp_tool_list_changes_total",
        &["server=\"chatty\""],
        2000.0,
    )
    .await;
}

/// A tool whose description is past `max_description_bytes` is left out — from the
/// model, direct calls and the public card — and the server's other tools are taken.
#[actix_web::test]
async fn a_tool_past_its_description_bound_is_left_out() {
    let Some(python) = python() else { return };
    let mut settings = stdio("verbose", &python);
    settings.max_description_bytes = 1000;
    let app = serving(vec![settings], |_| {}).await;
    let answer = call_tool(
        &app,
        "verbose__grow_big",
        json!({"name": "wordy", "size": 5000}),
    )
    .await;
    assert_eq!(first_text(&answer), "grown");
    let answer = call_tool(
        &app,
        "verbose__grow_big",
        json!({"name": "terse", "size": 900}),
    )
    .await;
    assert_eq!(first_text(&answer), "grown");
    // The list read again takes `terse` (each change is read anew).
    assert_eq!(
        first_text(&once_listed(&app, "verbose__terse").await),
        "I am terse"
    );
    assert!(
        unknown(&app, "verbose__wordy").await,
        "the tool past the bound is left out"
    );
    let card = app
        .get("/.well-known/agent-card.json")
        .await
        .text()
        .await
        .unwrap();
    assert!(card.contains("verbose__terse") && !card.contains("verbose__wordy"));
}
