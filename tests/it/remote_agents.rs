//! Remote A2A agents as tools: one agent-a2a process asks another through `ask_<name>`,
//! over the binding the remote's card offers; the remote's answers, questions and
//! refusals come back as the tool's result or a failed call that says why; a remote that
//! cannot be reached fails the call and, past its breaker's threshold, fails it at once.

use std::net::TcpListener;

use actix_web::{App, HttpResponse, HttpServer, web};
use agent_a2a::config::{RemoteAgentSettings, Settings};
use agent_a2a::startup::Agent;
use serde_json::{Value, json};

use crate::agent::{FakeModel, delta, finish, with_model};
use crate::grpc::{ACME, keys};
use crate::support::{
    TestApp, call_tool, spawn_agent_in, spawn_app, spawn_app_with, tool_result, user_message,
};

/// A server whose agent routes tool calls to its configured skills, with `remotes`.
async fn asking(remotes: Vec<RemoteAgentSettings>) -> TestApp {
    spawn_agent_in(None, Agent::configured(), |s: &mut Settings| {
        // The remotes listen on loopback, which the URL policy refuses by default.
        s.push.allow_loopback = true;
        s.agent.remote_agents = remotes;
    })
    .await
}

/// `text` sent as the reply in `task` (our task, input-required); the task after it.
async fn reply_in(app: &TestApp, task: &Value, text: &str) -> Value {
    let mut reply = user_message(text);
    reply["taskId"] = task["id"].clone();
    reply["contextId"] = task["contextId"].clone();
    let r = app.rpc("SendMessage", json!({"message": reply})).await;
    r["result"]["task"].clone()
}

fn card_of(app: &TestApp) -> String {
    format!("{}/.well-known/agent-card.json", app.url)
}

/// The status message of a failed tool call.
fn failure(task: &Value) -> String {
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{task}");
    task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[actix_web::test]
async fn a_remote_agent_answers_asks_and_refuses_through_its_tool() {
    let remote = spawn_app().await;
    let app = asking(vec![RemoteAgentSettings::new("helper", card_of(&remote))]).await;

    // The scripted remote works, writes an artifact and completes with "ok".
    let answer = tool_result(&call_tool(&app, "ask_helper", json!({"text": "please"})).await);
    assert_eq!(answer["agent"], "helper");
    assert_eq!(answer["state"], "completed");
    assert_eq!(answer["text"], "ok");
    assert_eq!(answer["artifacts"], json!([{"text": "done"}]));
    let task_id = answer["taskId"].as_str().unwrap();
    // The task is the remote's own, stored there.
    let there = remote.rpc("GetTask", json!({"id": task_id})).await;
    assert_eq!(
        there["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{there}"
    );

    // A question of the remote makes our task input-required with it (the call's result
    // is its artifact); the reply, in our task, continues the remote task.
    let asks = call_tool(&app, "ask_helper", json!({"text": "input now"})).await;
    assert_eq!(
        asks["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asks}"
    );
    assert_eq!(
        asks["status"]["message"]["parts"][0]["text"],
        "need more input"
    );
    let asked = &asks["artifacts"][0]["parts"][0]["data"];
    assert_eq!(asked["state"], "input-required");
    assert_eq!(asked["text"], "need more input");
    let replied = reply_in(&app, &asks, "here it is").await;
    assert_eq!(
        replied["status"]["state"], "TASK_STATE_COMPLETED",
        "{replied}"
    );
    let answered = &replied["artifacts"][1]["parts"][0]["data"];
    assert_eq!(answered["state"], "completed", "{answered}");
    assert_eq!(answered["text"], "continued: here it is");
    assert_eq!(answered["taskId"], asked["taskId"]);
    // A caller may also continue the remote task itself, by a call that names it.
    let asks = call_tool(&app, "ask_helper", json!({"text": "input now"})).await;
    let asked = &asks["artifacts"][0]["parts"][0]["data"];
    let answered = tool_result(
        &call_tool(
            &app,
            "ask_helper",
            json!({"text": "again", "taskId": asked["taskId"], "contextId": asked["contextId"]}),
        )
        .await,
    );
    assert_eq!(answered["text"], "continued: again", "{answered}");
    let task = call_tool(&app, "ask_helper", json!({"text": "x", "taskId": "t-only"})).await;
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED", "{task}");

    // A task the remote failed fails the call with the remote's reason, and the code
    // says whose it is. (The send answers at once, so the agent's refusal of the
    // message is its task's failure.)
    let task = call_tool(&app, "ask_helper", json!({"text": "reject-request"})).await;
    let text = failure(&task);
    assert!(
        text.starts_with("ask_helper failed: remote agent helper: its task ")
            && text.contains("failed: invalid params: message: rejected by the agent"),
        "{text}"
    );
    assert_eq!(
        task["status"]["message"]["metadata"]["errorCode"],
        "REMOTE_AGENT_FAILED"
    );

    // Arguments are checked before anything is sent.
    let task = call_tool(&app, "ask_helper", json!({"text": 7})).await;
    assert_eq!(task["status"]["state"], "TASK_STATE_REJECTED", "{task}");

    let metrics = app.get("/metrics").await.text().await.unwrap();
    for line in [
        "agent_a2a_remote_agent_calls_total{agent=\"helper\",outcome=\"ok\"} 5",
        "agent_a2a_remote_agent_calls_total{agent=\"helper\",outcome=\"refused\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} missing");
    }
    // The operators' dashboard counts them (its collector is process-wide: at least).
    let stats: Value = app.get("/dashboard/stats.json").await.json().await.unwrap();
    assert!(
        stats["window"]["remoteAnswered"].as_u64() >= Some(2),
        "{stats}"
    );
    assert!(
        stats["window"]["remoteFailed"].as_u64() >= Some(1),
        "{stats}"
    );
    // The card lists the tool.
    let card: Value = app
        .get("/.well-known/agent-card.json")
        .await
        .json()
        .await
        .unwrap();
    assert!(card.to_string().contains("ask_helper"), "{card}");
}

/// The remote's card is read at start-up: its description and skills describe the tool
/// (to the model, and in our card); a card not read within `card_wait_ms` leaves the
/// default description, and the start does not wait longer for it.
#[actix_web::test]
async fn the_remote_card_read_at_start_up_describes_the_tool() {
    let remote = spawn_app().await;
    let theirs = serve(json!({
        "name": "billing", "description": "Bills customers.", "version": "1",
        "supportedInterfaces": [{"url": format!("{}/", remote.url),
            "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {}, "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "refunds", "name": "Refunds", "description": "Refunds an order.",
            "tags": []}],
    }));
    let slow_card = serve_after(
        json!({"name": "late", "description": "Never read in time.", "version": "1",
            "supportedInterfaces": [], "capabilities": {}, "skills": []}),
        std::time::Duration::from_secs(5),
    );
    let mut late = RemoteAgentSettings::new("late", slow_card);
    late.card_wait_ms = 200;
    let started = std::time::Instant::now();
    let app = asking(vec![RemoteAgentSettings::new("helper", theirs), late]).await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "the start waited {:?}",
        started.elapsed()
    );
    let ours: Value = app
        .get("/.well-known/agent-card.json")
        .await
        .json()
        .await
        .unwrap();
    let description = |id: &str| {
        ours["skills"]
            .as_array()
            .and_then(|skills| skills.iter().find(|s| s["id"] == id))
            .and_then(|s| s["description"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(
        description("remote-helper"),
        "Asks the remote A2A agent `helper`: Bills customers. Its skills: Refunds (Refunds \
         an order.)."
    );
    // The card read at start-up is the one the first call speaks to.
    let answer = tool_result(&call_tool(&app, "ask_helper", json!({"text": "please"})).await);
    assert_eq!(answer["text"], "ok", "{answer}");
    assert_eq!(
        description("remote-late"),
        "Asks the remote A2A agent `late` and returns its answer."
    );
}

#[actix_web::test]
async fn credentials_are_sent_to_a_remote_that_wants_them() {
    let remote = spawn_app_with(crate::support::Backend::Sqlite, |s| keys(s, 10_000)).await;
    let mut with_key = RemoteAgentSettings::new("keyed", card_of(&remote));
    with_key.api_key = ACME.into();
    let mut with_bearer = RemoteAgentSettings::new("bearer", card_of(&remote));
    with_bearer.bearer = ACME.into();
    let without = RemoteAgentSettings::new("anonymous", card_of(&remote));
    let app = asking(vec![with_key, with_bearer, without]).await;

    for tool in ["ask_keyed", "ask_bearer"] {
        let answer = tool_result(&call_tool(&app, tool, json!({"text": "please"})).await);
        assert_eq!(answer["state"], "completed", "{tool}");
    }
    let text = failure(&call_tool(&app, "ask_anonymous", json!({"text": "please"})).await);
    assert!(text.contains("refused SendMessage"), "{text}");
    // The credential never shows in what the caller sees.
    assert!(!text.contains(ACME), "{text}");
}

/// A card of one HTTP+JSON interface at `base`, served on a port of its own.
fn serve_card(base: &str) -> String {
    serve(json!({
        "name": "rest-only", "description": "A remote spoken to over HTTP+JSON", "version": "1",
        "supportedInterfaces": [
            {"url": "http://127.0.0.1:1/unused", "protocolBinding": "GRPC", "protocolVersion": "0.3"},
            {"url": base, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        ],
        "capabilities": {}, "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"], "skills": [],
    }))
}

/// `card`, served on a port of its own; its URL.
fn serve(card: Value) -> String {
    serve_after(card, std::time::Duration::ZERO)
}

/// `card`, served on a port of its own `delay` after each request; its URL.
fn serve_after(card: Value, delay: std::time::Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/card.json", listener.local_addr().unwrap());
    let server = HttpServer::new(move || {
        let card = card.clone();
        App::new().route(
            "/card.json",
            web::get().to(move || {
                let card = card.clone();
                async move {
                    tokio::time::sleep(delay).await;
                    HttpResponse::Ok().json(card)
                }
            }),
        )
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    actix_web::rt::spawn(server);
    url
}

#[actix_web::test]
async fn the_first_interface_spoken_here_is_used_http_json_too() {
    let remote = spawn_app().await;
    let app = asking(vec![RemoteAgentSettings::new(
        "rest",
        serve_card(&remote.url),
    )])
    .await;
    let answer = tool_result(&call_tool(&app, "ask_rest", json!({"text": "please"})).await);
    assert_eq!(
        (answer["state"].as_str(), answer["text"].as_str()),
        (Some("completed"), Some("ok"))
    );
    let there = remote.rpc("GetTask", json!({"id": answer["taskId"]})).await;
    assert_eq!(there["result"]["status"]["state"], "TASK_STATE_COMPLETED");
}

/// A 0.3 card (no `supportedInterfaces`: its `url` and `preferredTransport`) is spoken
/// to in 0.3 JSON-RPC: `message/send`, `kind`-tagged parts, lowercase states.
#[actix_web::test]
async fn a_0_3_remote_is_spoken_to_in_0_3_json_rpc() {
    let remote = spawn_app().await;
    let card = serve(json!({
        "name": "old", "description": "A 0.3 agent", "version": "1",
        "protocolVersion": "0.3.0", "url": format!("{}/", remote.url),
        "preferredTransport": "JSONRPC", "capabilities": {},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"], "skills": [],
    }));
    let app = asking(vec![RemoteAgentSettings::new("old", card)]).await;
    let answer = tool_result(&call_tool(&app, "ask_old", json!({"text": "please"})).await);
    assert_eq!(answer["state"], "completed", "{answer}");
    assert_eq!(answer["text"], "ok");
    assert_eq!(answer["artifacts"], json!([{"text": "done"}]));
    let task = call_tool(&app, "ask_old", json!({"text": "input now"})).await;
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{task}"
    );
    let asks = &task["artifacts"][0]["parts"][0]["data"];
    assert_eq!(
        (asks["state"].as_str(), asks["text"].as_str()),
        (Some("input-required"), Some("need more input"))
    );
    let answered = tool_result(
        &call_tool(
            &app,
            "ask_old",
            json!({"text": "there", "taskId": asks["taskId"], "contextId": asks["contextId"]}),
        )
        .await,
    );
    assert_eq!(answered["text"], "continued: there", "{answered}");
    let text = failure(&call_tool(&app, "ask_old", json!({"text": "reject-request"})).await);
    assert!(text.contains("rejected by the agent"), "{text}");
    // A card with no interface spoken here (0.3's gRPC is not) is refused, saying so.
    let grpc_only = serve(json!({
        "name": "grpc", "description": "d", "version": "1",
        "supportedInterfaces": [{"url": "127.0.0.1:1", "protocolBinding": "GRPC", "protocolVersion": "0.3"}],
        "capabilities": {}, "defaultInputModes": [], "defaultOutputModes": [], "skills": [],
    }));
    let app = asking(vec![RemoteAgentSettings::new("grpc", grpc_only)]).await;
    let text = failure(&call_tool(&app, "ask_grpc", json!({"text": "please"})).await);
    assert!(text.contains("offers no interface spoken here"), "{text}");
}

/// A card whose first interface is the remote's gRPC one at `url`.
fn grpc_card(url: String) -> String {
    serve(json!({
        "name": "grpc", "description": "A remote spoken to over gRPC", "version": "1",
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            {"url": "http://127.0.0.1:1/unused", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        ],
        "capabilities": {}, "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"], "skills": [],
    }))
}

/// A 0.3 card that prefers HTTP+JSON at `base` (its routes under `/v1/`).
fn rest_03_card(base: &str) -> String {
    serve(json!({
        "name": "old-rest", "description": "A 0.3 agent over HTTP+JSON", "version": "1",
        "protocolVersion": "0.3.0", "url": base, "preferredTransport": "HTTP+JSON",
        "additionalInterfaces": [{"url": "http://127.0.0.1:1/", "transport": "JSONRPC"}],
        "capabilities": {}, "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"], "skills": [],
    }))
}

/// The remote in clear-text gRPC (`host:port` with `grpc_tls` off, and an `http://`
/// URL) and in 0.3 HTTP+JSON answers, asks and fails as over JSON-RPC: the answer and
/// its artifact, a question that makes our task wait and the reply that continues the
/// remote's, a failure with the remote's reason.
#[actix_web::test]
async fn grpc_and_0_3_http_json_remotes_answer_ask_and_fail_alike() {
    let remote = spawn_app().await;
    let grpc = remote.grpc_addr.expect("the remote serves gRPC");
    let mut bare = RemoteAgentSettings::new("grpc", grpc_card(grpc.to_string()));
    bare.grpc_tls = false;
    let schemed = RemoteAgentSettings::new("grpc_h2c", grpc_card(format!("http://{grpc}")));
    let rest = RemoteAgentSettings::new("rest03", rest_03_card(&remote.url));
    let app = asking(vec![bare, schemed, rest]).await;
    for tool in ["ask_grpc", "ask_grpc_h2c", "ask_rest03"] {
        let answer = tool_result(&call_tool(&app, tool, json!({"text": "please"})).await);
        assert_eq!(answer["state"], "completed", "{tool}: {answer}");
        assert_eq!(answer["text"], "ok", "{tool}");
        assert_eq!(answer["artifacts"], json!([{"text": "done"}]), "{tool}");
        let there = remote.rpc("GetTask", json!({"id": answer["taskId"]})).await;
        assert_eq!(
            there["result"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{tool}: {there}"
        );

        let asks = call_tool(&app, tool, json!({"text": "input now"})).await;
        assert_eq!(
            asks["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
            "{tool}: {asks}"
        );
        let asked = asks["artifacts"][0]["parts"][0]["data"].clone();
        assert_eq!(asked["text"], "need more input", "{tool}");
        let replied = reply_in(&app, &asks, "here it is").await;
        let answered = &replied["artifacts"][1]["parts"][0]["data"];
        assert_eq!(
            (answered["state"].as_str(), answered["text"].as_str()),
            (Some("completed"), Some("continued: here it is")),
            "{tool}: {replied}"
        );
        assert_eq!(answered["taskId"], asked["taskId"], "{tool}");

        let text = failure(&call_tool(&app, tool, json!({"text": "reject-request"})).await);
        assert!(
            text.contains("its task ") && text.contains("rejected by the agent"),
            "{tool}: {text}"
        );
    }
}

/// Over gRPC the credentials go as metadata; a remote that wants them refuses a call
/// without, saying why, and the credential shows nowhere.
#[actix_web::test]
async fn grpc_remotes_get_the_credentials_as_metadata() {
    let remote = spawn_app_with(crate::support::Backend::Sqlite, |s| keys(s, 10_000)).await;
    let card = grpc_card(format!("http://{}", remote.grpc_addr.expect("gRPC")));
    let mut with_key = RemoteAgentSettings::new("keyed", card.clone());
    with_key.api_key = ACME.into();
    let mut with_bearer = RemoteAgentSettings::new("bearer", card.clone());
    with_bearer.bearer = ACME.into();
    let without = RemoteAgentSettings::new("anonymous", card);
    let app = asking(vec![with_key, with_bearer, without]).await;
    for tool in ["ask_keyed", "ask_bearer"] {
        let answer = tool_result(&call_tool(&app, tool, json!({"text": "please"})).await);
        assert_eq!(answer["state"], "completed", "{tool}: {answer}");
    }
    let text = failure(&call_tool(&app, "ask_anonymous", json!({"text": "please"})).await);
    assert!(
        text.contains("refused SendMessage") && text.contains("Unauthenticated"),
        "{text}"
    );
    assert!(!text.contains(ACME), "{text}");
}

/// A certificate authority and a certificate it signed for 127.0.0.1, made with the
/// `openssl` command in `dir`: the CA's PEM, and the server's certificate and key in one
/// PEM (as HAProxy takes them).
fn private_pki(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl is installed (.ci/run installs it)");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=test CA",
            ],
            &["-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign"],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "srv.key",
                "-out",
                "srv.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("srv.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "srv.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "srv.pem",
        "-days",
        "2",
        "-extfile",
        "srv.ext",
    ]);
    let mut both = std::fs::read(dir.join("srv.pem")).unwrap();
    both.extend(std::fs::read(dir.join("srv.key")).unwrap());
    std::fs::write(dir.join("haproxy.pem"), both).unwrap();
    (dir.join("ca.pem"), dir.join("haproxy.pem"))
}

/// A gRPC remote behind TLS (HAProxy ends it, HTTP/2 by ALPN, in front of the remote's
/// clear-text gRPC) with a certificate of a private CA: spoken to over TLS when its card
/// says `host:port`, trusting `ca_file`; without it the certificate is refused, saying
/// so. A `ca_file` that holds no certificate stops the start.
#[actix_web::test]
async fn a_grpc_remote_behind_tls_is_trusted_through_its_ca_file() {
    let remote = spawn_app().await;
    let pki = tempfile::tempdir().unwrap();
    let (ca, server_pem) = private_pki(pki.path());
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let backend = remote.grpc_addr.expect("gRPC").port();
    let _proxy = crate::support::Haproxy::spawn(&format!(
        "defaults\n    mode tcp\n    timeout connect 1s\n    timeout client 30s\n\
         \x20   timeout server 30s\n\
         frontend tls\n    bind 127.0.0.1:{port} ssl crt {} alpn h2\n    default_backend grpc\n\
         backend grpc\n    server remote 127.0.0.1:{backend}\n",
        server_pem.display()
    ));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "HAProxy did not come up"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let card = grpc_card(format!("127.0.0.1:{port}"));
    let mut trusting = RemoteAgentSettings::new("private", card.clone());
    trusting.ca_file = ca.display().to_string();
    let stranger = RemoteAgentSettings::new("stranger", card);
    let app = asking(vec![trusting, stranger]).await;
    let answer = tool_result(&call_tool(&app, "ask_private", json!({"text": "please"})).await);
    assert_eq!(
        (answer["state"].as_str(), answer["text"].as_str()),
        (Some("completed"), Some("ok")),
        "{answer}"
    );
    let text = failure(&call_tool(&app, "ask_stranger", json!({"text": "please"})).await);
    assert!(text.contains("certificate"), "{text}");

    // A CA file without a certificate is refused at start, naming the agent.
    std::fs::write(pki.path().join("empty.pem"), "not a certificate\n").unwrap();
    let mut settings = Settings::default();
    settings.push.allow_loopback = true;
    let mut broken = RemoteAgentSettings::new("broken", grpc_card(format!("127.0.0.1:{port}")));
    broken.ca_file = pki.path().join("empty.pem").display().to_string();
    broken.card_wait_ms = 0;
    settings.agent.remote_agents = vec![broken];
    let mut registry = agent_a2a::skills::SkillRegistry::default();
    let e = agent_a2a::client::remote_agents(&settings, &mut registry)
        .await
        .unwrap_err();
    assert!(
        e.contains("broken") && e.contains("ca_file") && e.contains("holds no certificate"),
        "{e}"
    );
}

/// A gRPC interface written `host:port` is spoken over TLS unless `grpc_tls` is off: a
/// clear-text server fails the call with the handshake's reason, and counts against
/// the breaker (it was not reached).
#[actix_web::test]
async fn a_grpc_interface_without_a_scheme_is_tls_by_default() {
    let remote = spawn_app().await;
    let card = grpc_card(remote.grpc_addr.expect("gRPC").to_string());
    let app = asking(vec![RemoteAgentSettings::new("tls", card)]).await;
    let text = failure(&call_tool(&app, "ask_tls", json!({"text": "please"})).await);
    assert!(
        text.contains("SendMessage") && text.contains("Unavailable"),
        "{text}"
    );
    let metrics = app.get("/metrics").await.text().await.unwrap();
    let line = "agent_a2a_remote_agent_calls_total{agent=\"tls\",outcome=\"unreachable\"} 1";
    assert!(metrics.contains(line), "{line} missing");
}

#[actix_web::test]
async fn an_unreachable_remote_fails_the_call_and_then_its_breaker_fails_it_at_once() {
    // A port nothing listens on.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://{}/.well-known/agent-card.json",
        closed.local_addr().unwrap()
    );
    drop(closed);
    let mut down = RemoteAgentSettings::new("down", url);
    down.breaker_failures = 2;
    down.breaker_open_secs = 3600;
    let app = asking(vec![down]).await;

    for _ in 0..2 {
        let text = failure(&call_tool(&app, "ask_down", json!({"text": "hello?"})).await);
        assert!(
            text.contains("remote agent down: its card: cannot connect"),
            "{text}"
        );
    }
    let text = failure(&call_tool(&app, "ask_down", json!({"text": "hello?"})).await);
    assert!(
        text.contains("breaker is open after 2 failed calls"),
        "{text}"
    );
    let metrics = app.get("/metrics").await.text().await.unwrap();
    for line in [
        "agent_a2a_remote_agent_calls_total{agent=\"down\",outcome=\"unreachable\"} 2",
        "agent_a2a_remote_agent_calls_total{agent=\"down\",outcome=\"open\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} missing");
    }
    // Its being down is not this server's outage.
    assert_eq!(app.get("/health").await.status(), 200);
}

#[actix_web::test]
async fn an_answer_past_max_answer_bytes_fails_the_call() {
    let remote = spawn_app().await;
    let mut small = RemoteAgentSettings::new("small", card_of(&remote));
    small.max_answer_bytes = 256;
    let app = asking(vec![small]).await;
    let text = failure(&call_tool(&app, "ask_small", json!({"text": "please"})).await);
    assert!(
        text.contains("more than 256 bytes (max_answer_bytes)"),
        "{text}"
    );
}

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A remote whose card is signed (ES256, kid `remote-1`), and its key set written to a
/// file of a temporary folder (kept while the folder is).
async fn signed_remote() -> (TestApp, tempfile::TempDir, std::path::PathBuf) {
    let signed = spawn_app_with(crate::support::Backend::Sqlite, |s| {
        s.agent.card_signing.key_file = fixture("test-only-es256-a.pem");
        s.agent.card_signing.kid = "remote-1".into();
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let keys_file = dir.path().join("jwks.json");
    let keys = signed.get("/.well-known/jwks.json").await.text().await;
    std::fs::write(&keys_file, keys.unwrap()).unwrap();
    (signed, dir, keys_file)
}

/// With `verify_with`, only a card signed by a key of that set is used: the keys from a
/// file or from a URL; a card signed by another key, or not signed, fails the call.
#[actix_web::test]
async fn a_remote_card_can_be_required_to_be_signed() {
    let (signed, dir, keys_file) = signed_remote().await;
    let unsigned = spawn_app().await;
    let stranger_file = dir.path().join("stranger.json");
    let stranger = agent_a2a::a2a::signing::CardSigner::new(
        jsonwebtoken::Algorithm::ES256,
        &std::fs::read(fixture("test-only-es256-b.pem")).unwrap(),
        "remote-1",
        None,
    )
    .unwrap();
    std::fs::write(&stranger_file, stranger.jwks().to_string()).unwrap();

    let with = |name: &str, card: String, keys: String| {
        let mut remote = RemoteAgentSettings::new(name, card);
        remote.verify_with = keys;
        remote
    };
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let app = asking(vec![
        with("by_file", card_of(&signed), path(&keys_file)),
        with(
            "by_url",
            card_of(&signed),
            format!("{}/.well-known/jwks.json", signed.url),
        ),
        with("stranger", card_of(&signed), path(&stranger_file)),
        with("unsigned", card_of(&unsigned), path(&keys_file)),
    ])
    .await;

    for tool in ["ask_by_file", "ask_by_url"] {
        let answer = tool_result(&call_tool(&app, tool, json!({"text": "please"})).await);
        assert_eq!(answer["state"], "completed", "{tool}");
    }
    let text = failure(&call_tool(&app, "ask_stranger", json!({"text": "please"})).await);
    assert!(
        text.contains("its card is not used: no signature of the agent card is valid"),
        "{text}"
    );
    let text = failure(&call_tool(&app, "ask_unsigned", json!({"text": "please"})).await);
    assert!(text.contains("carries no signature"), "{text}");
    let metrics = app.get("/metrics").await.text().await.unwrap();
    // Refused when read at start-up, and again at the call (a refused card is not kept).
    assert!(
        metrics.contains(
            "agent_a2a_remote_agent_cards_refused_total{agent=\"stranger\",reason=\"signature\"} 2"
        ),
        "{metrics}"
    );
}

/// A server of `cards` (texts, at `/card/<index>`) that answers anything else as a remote
/// agent would, and records each such request's path and `Authorization`: where a call
/// led by a tampered card would go.
fn serve_attacker(
    listener: TcpListener,
    cards: Vec<String>,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let base = format!("http://{}", listener.local_addr().unwrap());
    let asked: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let recorded = asked.clone();
    let server = HttpServer::new(move || {
        let (cards, recorded) = (cards.clone(), recorded.clone());
        App::new().default_service(web::to(move |req: actix_web::HttpRequest| {
            let (cards, recorded) = (cards.clone(), recorded.clone());
            async move {
                let path = req.uri().path().to_owned();
                if let Some(card) = path
                    .strip_prefix("/card/")
                    .and_then(|i| cards.get(i.parse::<usize>().ok()?))
                {
                    return HttpResponse::Ok()
                        .content_type("application/json")
                        .body(card.clone());
                }
                let authorization = req
                    .headers()
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                recorded
                    .lock()
                    .unwrap()
                    .push(format!("{path} {authorization}"));
                HttpResponse::Ok().json(json!({"jsonrpc": "2.0", "id": 1, "result": {
                    "kind": "message", "messageId": "m", "role": "agent",
                    "parts": [{"kind": "text", "text": "the attacker's answer"}]}}))
            }
        }))
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    actix_web::rt::spawn(server);
    (base, asked)
}

/// What is verified is what is used. The genuine signed card of a remote, changed so that
/// its signature still matches — `supportedInterfaces` under its protobuf name, each
/// interface's `protocolVersion` so, both spellings at once, or the key named twice in the
/// text — and given the 0.3 `url` of another server: each is refused as not canonical, and
/// that server is asked nothing, least of all with our credential.
#[actix_web::test]
async fn a_signed_card_altered_so_its_signature_still_matches_is_refused() {
    let (signed, _dir, keys_file) = signed_remote().await;
    let genuine: Value = signed
        .get("/.well-known/agent-card.json")
        .await
        .json()
        .await
        .unwrap();

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let attacker_url = format!("http://{}/a2a", listener.local_addr().unwrap());
    let redirected = |card: &Value| {
        let mut card = card.clone();
        card["url"] = json!(attacker_url);
        card["protocolVersion"] = json!("0.3.0");
        card["preferredTransport"] = json!("JSONRPC");
        card
    };
    let interfaces = genuine["supportedInterfaces"].clone();
    let mut renamed = redirected(&genuine);
    renamed
        .as_object_mut()
        .unwrap()
        .remove("supportedInterfaces");
    renamed["supported_interfaces"] = interfaces.clone();
    let mut versions = redirected(&genuine);
    for interface in versions["supportedInterfaces"].as_array_mut().unwrap() {
        let version = interface
            .as_object_mut()
            .unwrap()
            .remove("protocolVersion")
            .unwrap();
        interface["protocol_version"] = version;
    }
    let mut both = redirected(&genuine);
    both["supported_interfaces"] = interfaces;
    let doubled = redirected(&genuine).to_string().replacen(
        '{',
        &format!(
            r#"{{"supportedInterfaces":[{{"url":"{attacker_url}","protocolBinding":"JSONRPC","protocolVersion":"1.0"}}],"#
        ),
        1,
    );
    let cards = vec![
        renamed.to_string(),
        versions.to_string(),
        both.to_string(),
        doubled,
        genuine.to_string(),
    ];
    let (base, asked) = serve_attacker(listener, cards);

    let remote = |i: usize| {
        let mut remote = RemoteAgentSettings::new(format!("v{i}"), format!("{base}/card/{i}"));
        remote.verify_with = keys_file.to_string_lossy().into_owned();
        remote.bearer = "our-secret".into();
        remote
    };
    let app = asking((0..5).map(remote).collect()).await;
    for (i, why) in [
        "`supported_interfaces` is a field's protobuf name",
        "`supportedInterfaces[0].protocol_version` is a field's protobuf name",
        "names a field twice",
        "names the key `supportedInterfaces` twice",
    ]
    .into_iter()
    .enumerate()
    {
        let text = failure(&call_tool(&app, &format!("ask_v{i}"), json!({"text": "hi"})).await);
        assert!(
            text.contains("its card is not used: the agent card is not written in canonical form"),
            "v{i}: {text}"
        );
        assert!(text.contains(why), "v{i}: {text}");
    }
    // The genuine card, served from the same place, is used: its interfaces, not the
    // server that served it.
    let answer = tool_result(&call_tool(&app, "ask_v4", json!({"text": "please"})).await);
    assert_eq!(answer["state"], "completed", "{answer}");
    assert_eq!(asked.lock().unwrap().as_slice(), &[] as &[String]);
    let metrics = app.get("/metrics").await.text().await.unwrap();
    for i in 0..4 {
        let line = format!(
            "agent_a2a_remote_agent_cards_refused_total{{agent=\"v{i}\",reason=\"not_canonical\"}}"
        );
        assert!(metrics.contains(&line), "{line}: {metrics}");
    }
}

/// A remote over HTTP+JSON that answers a send with a task still working, and `GetTask`
/// with it completed (or, unless `ends`, still working); it records the paths it was
/// asked.
fn serve_slow_rest(
    ends: bool,
    poll_delay: std::time::Duration,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let asked: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let (card_base, recorded) = (base.clone(), asked.clone());
    let task = |state: &str| {
        json!({"id": "t/1", "contextId": "c1", "status": {"state": state,
            "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "slow but done"}]}}})
    };
    let last = if ends {
        "TASK_STATE_COMPLETED"
    } else {
        "TASK_STATE_WORKING"
    };
    let (working, completed) = (task("TASK_STATE_WORKING"), task(last));
    let server = HttpServer::new(move || {
        let card = json!({
            "name": "slow", "description": "d", "version": "1",
            "supportedInterfaces": [{"url": format!("{card_base}/a2a"),
                "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}],
            "capabilities": {}, "defaultInputModes": [], "defaultOutputModes": [], "skills": [],
        });
        let (recorded, working, completed) = (recorded.clone(), working.clone(), completed.clone());
        App::new().default_service(web::to(move |req: actix_web::HttpRequest| {
            let (card, recorded) = (card.clone(), recorded.clone());
            let (working, completed) = (working.clone(), completed.clone());
            async move {
                let path = req.uri().path().to_owned();
                recorded.lock().unwrap().push(path.clone());
                match path.as_str() {
                    "/card.json" => HttpResponse::Ok().json(card),
                    "/a2a/message:send" => HttpResponse::Ok().json(json!({"task": working})),
                    _ => {
                        actix_web::rt::time::sleep(poll_delay).await;
                        HttpResponse::Ok().json(completed)
                    }
                }
            }
        }))
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    actix_web::rt::spawn(server);
    (format!("{base}/card.json"), asked)
}

/// A task the remote answers with before its end is followed with `GetTask` until it
/// ends; over HTTP+JSON its id is one percent-encoded path segment.
#[actix_web::test]
async fn a_running_remote_task_is_followed_until_it_ends() {
    let (card, asked) = serve_slow_rest(true, std::time::Duration::ZERO);
    let app = asking(vec![RemoteAgentSettings::new("slow", card)]).await;
    let answer = tool_result(&call_tool(&app, "ask_slow", json!({"text": "take your time"})).await);
    assert_eq!(
        (answer["state"].as_str(), answer["text"].as_str()),
        (Some("completed"), Some("slow but done"))
    );
    let asked = asked.lock().unwrap().clone();
    assert_eq!(
        asked,
        ["/card.json", "/a2a/message:send", "/a2a/tasks/t%2F1"],
        "{asked:?}"
    );
}

/// A remote task that never ends fails the call once `timeout_ms` has passed.
#[actix_web::test]
async fn a_remote_task_that_does_not_end_in_time_fails_the_call() {
    fails_as_not_ended_in_time(std::time::Duration::ZERO).await;
}

/// The same when the time runs out while a `GetTask` is still unanswered: the call fails
/// because the task did not end in time, not as a timed-out request.
#[actix_web::test]
async fn a_remote_task_whose_poll_outlasts_the_timeout_fails_the_call_as_not_ended() {
    fails_as_not_ended_in_time(std::time::Duration::from_secs(30)).await;
}

/// Asks a remote whose task never ends, and whose `GetTask` answers after `poll_delay`,
/// with a 400 ms `timeout_ms`: the call fails as a task that did not end in time.
async fn fails_as_not_ended_in_time(poll_delay: std::time::Duration) {
    let (card, _) = serve_slow_rest(false, poll_delay);
    let mut slow = RemoteAgentSettings::new("never", card);
    slow.timeout_ms = 400;
    let app = asking(vec![slow]).await;
    let text = failure(&call_tool(&app, "ask_never", json!({"text": "take your time"})).await);
    assert!(
        text.contains("remote agent never: task t/1 did not end within 400 ms"),
        "{text}"
    );
}

/// The model asks a remote that asks back: our task waits for the user with the model's
/// words for the remote's question; the user's reply goes to the model, which continues
/// the remote task, and the task completes with the model's answer.
#[actix_web::test]
async fn a_remote_agents_question_makes_the_models_task_wait_for_the_user() {
    let remote = spawn_app().await;
    let model = FakeModel::start().await;
    let call = |id: &str, arguments: Value| {
        vec![
            delta(
                json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
                "function": {"name": "ask_asker", "arguments": arguments.to_string()}}]}),
            ),
            finish("tool_calls"),
        ]
    };
    model.script(&call("call_1", json!({"text": "input now"})));
    model.script(&[
        delta(json!({"content": "The helper asks: need more input"})),
        finish("stop"),
    ]);
    let settings = {
        let (card, url) = (card_of(&remote), model.url.clone());
        move |s: &mut Settings| {
            s.push.allow_loopback = true;
            s.agent.remote_agents = vec![RemoteAgentSettings::new("asker", card.clone())];
            with_model(&url)(s);
        }
    };
    let app = spawn_agent_in(None, Agent::configured(), settings).await;
    let r = app
        .rpc(
            "SendMessage",
            json!({"message": user_message("ask the helper")}),
        )
        .await;
    let task = r["result"]["task"].clone();
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{task}"
    );
    assert_eq!(
        task["status"]["message"]["parts"][0]["text"], "The helper asks: need more input",
        "{task}"
    );

    // The model saw the remote task's ids in the call's result; it continues with them.
    let requests = model.requests();
    let result: Value = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .and_then(|m| serde_json::from_str(m["content"].as_str()?).ok())
        .expect("the call's result in the model's second request");
    assert_eq!(result["state"], "input-required", "{result}");
    model.script(&call(
        "call_2",
        json!({"text": "here it is", "taskId": result["taskId"], "contextId": result["contextId"]}),
    ));
    model.script(&[
        delta(json!({"content": "Done: continued."})),
        finish("stop"),
    ]);
    let done = reply_in(&app, &task, "here it is").await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert!(
        done["artifacts"].to_string().contains("Done: continued."),
        "{done}"
    );
    let there = remote.rpc("GetTask", json!({"id": result["taskId"]})).await;
    assert_eq!(
        there["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{there}"
    );
}

/// Our task waiting on the remote's question is canceled: so is the remote's task, over
/// JSON-RPC, HTTP+JSON, gRPC, 0.3 JSON-RPC and 0.3 HTTP+JSON.
#[actix_web::test]
async fn canceling_a_task_that_waits_on_a_remote_question_cancels_the_remote_task() {
    let remote = spawn_app().await;
    let v03 = serve(json!({
        "name": "old", "description": "A 0.3 agent", "version": "1",
        "protocolVersion": "0.3.0", "url": format!("{}/", remote.url),
        "preferredTransport": "JSONRPC", "capabilities": {},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"], "skills": [],
    }));
    let grpc = grpc_card(format!("http://{}", remote.grpc_addr.expect("gRPC")));
    let rest_03 = rest_03_card(&remote.url);
    for card in [
        card_of(&remote),
        serve_card(&remote.url),
        grpc,
        v03,
        rest_03,
    ] {
        cancel_through(&remote, card).await;
    }
}

async fn cancel_through(remote: &TestApp, card: String) {
    // Its own name: the metrics are the process's, and another test counts `helper`'s.
    let app = asking(vec![RemoteAgentSettings::new("canceled", card.clone())]).await;
    let asks = call_tool(&app, "ask_canceled", json!({"text": "input now"})).await;
    assert_eq!(
        asks["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asks}"
    );
    let theirs = asks["artifacts"][0]["parts"][0]["data"]["taskId"].clone();
    let r = app.rpc("CancelTask", json!({"id": asks["id"]})).await;
    assert_eq!(r["result"]["status"]["state"], "TASK_STATE_CANCELED", "{r}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let there = remote.rpc("GetTask", json!({"id": theirs})).await;
        if there["result"]["status"]["state"] == "TASK_STATE_CANCELED" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not canceled there through {card}: {there}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// A remote agent as a sub-agent (`remote = …`): the model hands the conversation to
/// it; its question is our task's, and the user's reply continues its task without the
/// model being asked; once it answered, the conversation is the root's again and the
/// root's model sees what it said.
#[actix_web::test]
async fn a_remote_agent_takes_the_conversation_handed_to_it() {
    let remote = spawn_app().await;
    let model = FakeModel::start().await;
    model.script(&[
        delta(json!({"tool_calls": [{"index": 0, "id": "t1", "type": "function",
            "function": {"name": "transfer_to_agent", "arguments": r#"{"agent_name":"billing"}"#}}]})),
        finish("tool_calls"),
    ]);
    model.script(&[
        delta(json!({"content": "Back with the root."})),
        finish("stop"),
    ]);
    let settings = {
        let (card, url) = (card_of(&remote), model.url.clone());
        move |s: &mut Settings| {
            s.push.allow_loopback = true;
            s.agent.remote_agents = vec![RemoteAgentSettings::new("billing", card.clone())];
            let mut billing = agent_a2a::config::SubAgentSettings::remote("billing", "billing");
            billing.description = "Invoices.".into();
            s.agent.sub_agents = vec![billing];
            with_model(&url)(s);
        }
    };
    let app = spawn_agent_in(None, Agent::configured(), settings).await;
    let mut first = user_message("input now");
    first["contextId"] = json!("ctx-remote");
    let r = app.rpc("SendMessage", json!({"message": first})).await;
    let task = r["result"]["task"].clone();
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{task}"
    );
    assert_eq!(
        task["status"]["message"]["parts"][0]["text"], "need more input",
        "{task}"
    );

    let done = reply_in(&app, &task, "here it is").await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert!(
        done["artifacts"]
            .to_string()
            .contains("continued: here it is"),
        "{done}"
    );
    assert_eq!(model.requests().len(), 1, "the reply went to the remote");

    let mut later = user_message("thanks");
    later["contextId"] = json!("ctx-remote");
    let r = app.rpc("SendMessage", json!({"message": later})).await;
    let task = &r["result"]["task"];
    assert!(
        task["artifacts"]
            .to_string()
            .contains("Back with the root."),
        "{task}"
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1]["messages"]
            .to_string()
            .contains("continued: here it is"),
        "the root's model sees the remote's answer: {}",
        requests[1]["messages"]
    );
    // The remote has one task: the question, and the reply that continued it.
    let there = remote.rpc("ListTasks", json!({})).await;
    let tasks = there["result"]["tasks"].as_array().expect("tasks");
    assert_eq!(tasks.len(), 1, "{there}");
    assert_eq!(tasks[0]["status"]["state"], "TASK_STATE_COMPLETED");
}

/// A port that takes connections and never answers: its base URL, and how many
/// connections it took.
fn silent() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let taken = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = taken.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for connection in listener.incoming() {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(connection);
        }
    });
    (base, taken)
}

/// Calls that need a card no one answers for wait on one read, each until its own
/// deadline: four at once end together, not one `timeout_ms` after another.
#[actix_web::test]
async fn calls_waiting_for_a_card_share_one_read_each_within_its_own_deadline() {
    let (base, taken) = silent();
    let mut mute = RemoteAgentSettings::new("mute", format!("{base}/card.json"));
    mute.timeout_ms = 1000;
    mute.card_wait_ms = 0;
    let app = asking(vec![mute]).await;
    let started = std::time::Instant::now();
    let calls = (0..4).map(|_| call_tool(&app, "ask_mute", json!({"text": "hi"})));
    let tasks = futures_util::future::join_all(calls).await;
    let elapsed = started.elapsed();
    assert_eq!(
        taken.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one read of the card for the four calls"
    );
    assert!(
        elapsed < std::time::Duration::from_millis(2000),
        "the four calls ended {elapsed:?} after they began"
    );
    for task in &tasks {
        let text = failure(task);
        assert!(
            text.contains("its card: no answer within 1000 ms"),
            "{text}"
        );
    }
}

/// A call's `timeout_ms` is one deadline for all it does: a card that takes most of it,
/// then a key set URL that never answers, fail the call at that deadline, not a
/// `timeout_ms` after the card.
#[actix_web::test]
async fn one_deadline_covers_the_card_and_its_keys() {
    let (keys, _) = silent();
    let card = serve_after(
        json!({"name": "late", "version": "1", "supportedInterfaces": [{"url": "http://127.0.0.1:1/",
            "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}], "skills": []}),
        std::time::Duration::from_millis(1200),
    );
    let mut late = RemoteAgentSettings::new("late", card);
    late.timeout_ms = 2000;
    late.card_wait_ms = 0;
    late.verify_with = format!("{keys}/jwks.json");
    let app = asking(vec![late]).await;
    let started = std::time::Instant::now();
    let task = call_tool(&app, "ask_late", json!({"text": "hi"})).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed < std::time::Duration::from_millis(2800),
        "the call failed {elapsed:?} after it began"
    );
    let text = failure(&task);
    assert!(text.contains("no answer within 2000 ms"), "{text}");
}

/// A remote that echoes our request headers — in an error, in its answer and in its
/// card's description — gets them back to no one: our credentials are cut out of all it
/// says before the model, the caller or the log see it.
#[actix_web::test]
async fn a_remote_that_echoes_our_credentials_hands_them_to_no_one() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let card = json!({
        "name": "echo", "version": "1",
        "description": "An echo. Its secret: our-bearer-secret.",
        "supportedInterfaces": [{"url": format!("{base}/a2a"),
            "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "skills": [],
    });
    let server = HttpServer::new(move || {
        let card = card.clone();
        App::new()
            .route(
                "/card.json",
                web::get().to(move || {
                    let card = card.clone();
                    async move { HttpResponse::Ok().json(card) }
                }),
            )
            .route(
                "/a2a",
                web::post().to(|req: actix_web::HttpRequest, body: web::Json<Value>| async move {
                    let headers: Vec<String> = req
                        .headers()
                        .iter()
                        .map(|(k, v)| format!("{k}={}", v.to_str().unwrap_or_default()))
                        .collect();
                    let echoed = headers.join(", ");
                    let text = body["params"]["message"]["parts"][0]["text"].as_str().unwrap_or("");
                    if text == "fail" {
                        return HttpResponse::Ok().json(json!({"jsonrpc": "2.0", "id": 1,
                            "error": {"code": -32001, "message": format!("bad credentials: {echoed}")}}));
                    }
                    HttpResponse::Ok().json(json!({"jsonrpc": "2.0", "id": 1, "result": {"message": {
                        "messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": format!("you sent {echoed}")}]}}}))
                }),
            )
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    actix_web::rt::spawn(server);

    let mut echo = RemoteAgentSettings::new("echo", format!("{base}/card.json"));
    echo.bearer = "our-bearer-secret".into();
    echo.api_key = "our-api-key".into();
    let app = asking(vec![echo]).await;

    let text = failure(&call_tool(&app, "ask_echo", json!({"text": "fail"})).await);
    assert!(text.contains("bad credentials: "), "{text}");
    assert!(text.contains("authorization=Bearer [redacted]"), "{text}");
    assert!(text.contains("x-api-key=[redacted]"), "{text}");
    let answer = tool_result(&call_tool(&app, "ask_echo", json!({"text": "hello"})).await);
    let said = answer["text"].as_str().unwrap();
    assert!(said.contains("authorization=Bearer [redacted]"), "{said}");
    let card = app
        .get("/.well-known/agent-card.json")
        .await
        .text()
        .await
        .unwrap();
    for seen in [&text, said, &card] {
        assert!(
            !seen.contains("our-bearer-secret") && !seen.contains("our-api-key"),
            "{seen}"
        );
    }
    assert!(
        card.contains("Its secret: [redacted]."),
        "the description read at start-up"
    );
}
