//! Traces end to end: the real binary exports OTLP/HTTP protobuf to a receiver in this
//! test, which decodes it with the `opentelemetry-proto` types. One `SendMessage` whose
//! turn calls the model, a tool, and the model again yields one trace, continuing the
//! caller's `traceparent`: request → turn → (generations, tool calls, commits).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode as Code;
use prost::Message;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::agent::{FakeModel, delta, finish};
use crate::durability::start_server_logged;
use crate::support::{http_client, user_message};

/// What the receiver got: every span with its resource's attributes.
#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    resource: HashMap<String, String>,
}

struct Receiver {
    url: String,
    received: Arc<Mutex<Received>>,
    arrived: Arc<Notify>,
}

impl Receiver {
    async fn start() -> Receiver {
        let received: Arc<Mutex<Received>> = Arc::default();
        let arrived = Arc::new(Notify::new());
        let (r, a) = (received.clone(), arrived.clone());
        let server = HttpServer::new(move || {
            let (r, a) = (r.clone(), a.clone());
            App::new().route(
                "/v1/traces",
                web::post().to(move |req: actix_web::HttpRequest, body: web::Bytes| {
                    let (r, a) = (r.clone(), a.clone());
                    async move {
                        assert_eq!(
                            req.headers().get("content-type").unwrap(),
                            "application/x-protobuf",
                            "OTLP/HTTP protobuf"
                        );
                        let export =
                            ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                        let mut received = r.lock().unwrap();
                        for resource_spans in export.resource_spans {
                            for kv in resource_spans
                                .resource
                                .into_iter()
                                .flat_map(|r| r.attributes)
                            {
                                received.resource.insert(kv.key.clone(), text(&kv.value));
                            }
                            for scope in resource_spans.scope_spans {
                                received.spans.extend(scope.spans);
                            }
                        }
                        a.notify_one();
                        HttpResponse::Ok()
                            .content_type("application/x-protobuf")
                            .finish()
                    }
                }),
            )
        })
        .workers(1)
        .bind("127.0.0.1:0")
        .unwrap();
        let addr = server.addrs()[0];
        actix_web::rt::spawn(server.run());
        Receiver {
            url: format!("http://{addr}"),
            received,
            arrived,
        }
    }

    /// Waits (up to 30 s, woken by each export) until `done` holds for the spans so far.
    async fn until(&self, done: impl Fn(&[Span]) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let notified = self.arrived.notified();
            if done(&self.received.lock().unwrap().spans) {
                return;
            }
            let names: Vec<String> = {
                let received = self.received.lock().unwrap();
                received.spans.iter().map(|s| s.name.clone()).collect()
            };
            tokio::time::timeout_at(deadline, notified)
                .await
                .unwrap_or_else(|_| panic!("spans never complete; received {names:?}"));
        }
    }
}

fn text(value: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(span: &Span) -> HashMap<String, String> {
    span.attributes
        .iter()
        .map(|kv| (kv.key.clone(), text(&kv.value)))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn named<'a>(spans: &'a [Span], prefix: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.name.starts_with(prefix))
        .collect()
}

#[actix_web::test]
async fn a_send_with_a_tool_call_is_one_trace_under_the_callers_span() {
    let receiver = Receiver::start().await;
    let model = FakeModel::start().await;
    // Generation 1 fails once (the provider is retried inside the same generation), then
    // calls the tool; generation 2 answers.
    model.unavailable_once();
    model.script(&[
        delta(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "session_context", "arguments": "{}"}}]}),
        ),
        finish("tool_calls"),
    ]);
    model.script(&[
        delta(json!({"content": "Nothing on record."})),
        finish("stop"),
        json!({"object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": 21, "completion_tokens": 4}}),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let base_url = model.url.clone();
    let (mut child, url, logs) = start_server_logged(
        dir.path(),
        &[
            ("AGENT_A2A__AUTH__ENABLED", "false"),
            ("AGENT_A2A__PROVIDERS__MAIN__KIND", "openai"),
            ("AGENT_A2A__PROVIDERS__MAIN__BASE_URL", &base_url),
            ("AGENT_A2A__PROVIDERS__MAIN__MODEL", "test-model"),
            ("AGENT_A2A__PROVIDERS__MAIN__MAX_RETRIES", "1"),
            ("AGENT_A2A__PROVIDERS__MAIN__RETRY_BASE_MS", "10"),
            ("AGENT_A2A__AGENT__PROVIDER", "main"),
            ("AGENT_A2A__TELEMETRY__OTLP_ENDPOINT", &receiver.url),
            ("AGENT_A2A__TELEMETRY__EXPORT_DELAY_MS", "50"),
            ("AGENT_A2A__TELEMETRY__SERVICE_NAME", "agent-a2a-under-test"),
        ],
    );

    let client = http_client();
    let rpc = |traceparent: String, method: &str, params: Value| {
        client
            .post(format!("{url}/"))
            .header("traceparent", traceparent)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .send()
    };
    // A caller that does not record its trace: neither does the server (parent-based
    // sampling), though the request succeeds.
    let unsampled = "0af7651916cd43dd8448eb211c80319c";
    let missing: Value = rpc(
        format!("00-{unsampled}-b7ad6b7169203331-00"),
        "GetTask",
        json!({"id": "no-such-task"}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(missing["error"]["code"], -32001, "{missing}");

    // A failed request is a failed span.
    let failing = "5b8efff798038103d269b633813fc60c";
    rpc(
        format!("00-{failing}-eee19b7ec3c1b174-01"),
        "GetTask",
        json!({"id": "no-such-task"}),
    )
    .await
    .unwrap();

    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let mut message = user_message("What do you know about me?");
    message["contextId"] = json!("ctx-traced");
    let answer: Value = rpc(
        format!("00-{caller_trace}-{caller_span}-01"),
        "SendMessage",
        json!({"message": message}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let task = &answer["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    let task_id = task["id"].as_str().unwrap().to_owned();

    receiver
        .until(|spans| {
            named(spans, "SendMessage").len() == 1
                && named(spans, "invoke_agent").len() == 1
                && named(spans, "chat ").len() == 2
                && named(spans, "execute_tool").len() == 2
                && !named(spans, "persistence.commit").is_empty()
        })
        .await;
    let received = receiver.received.lock().unwrap();
    let (failed, spans): (Vec<Span>, Vec<Span>) = received
        .spans
        .iter()
        .cloned()
        .partition(|s| hex(&s.trace_id) == failing);
    let spans = &spans;

    // The failed GetTask: one span, status error, its A2A reason.
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].name, "GetTask");
    let status = failed[0].status.as_ref().expect("a status");
    assert_eq!(status.code, Code::Error as i32);
    assert_eq!(attributes(&failed[0])["error.type"], "TASK_NOT_FOUND");

    // Nothing of the unsampled trace; the rest is one trace: the caller's.
    for span in spans.iter() {
        assert_eq!(hex(&span.trace_id), caller_trace, "{}", span.name);
    }
    let request = named(spans, "SendMessage")[0];
    assert_eq!(hex(&request.parent_span_id), caller_span);
    assert_eq!(request.kind, SpanKind::Server as i32);
    let attrs = attributes(request);
    assert_eq!(attrs["a2a.method.name"], "SendMessage");
    assert_eq!(attrs["a2a.binding"], "jsonrpc");
    assert_eq!(attrs["a2a.tenant.id"], "default");
    assert_eq!(attrs["a2a.task.id"], task_id);
    assert_eq!(attrs["gen_ai.conversation.id"], "ctx-traced");

    let turn = named(spans, "invoke_agent")[0];
    assert_eq!(
        turn.parent_span_id, request.span_id,
        "the turn is the request's child"
    );
    let attrs = attributes(turn);
    assert_eq!(attrs["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(attrs["gen_ai.conversation.id"], "ctx-traced");
    assert_eq!(attrs["a2a.task.id"], task_id);

    let chats = named(spans, "chat ");
    for chat in &chats {
        assert_eq!(chat.name, "chat test-model");
        assert_eq!(
            chat.parent_span_id, turn.span_id,
            "a generation is the turn's child"
        );
        assert_eq!(chat.kind, SpanKind::Client as i32);
        let attrs = attributes(chat);
        assert_eq!(attrs["gen_ai.operation.name"], "chat");
        assert_eq!(attrs["gen_ai.provider.name"], "openai");
        assert_eq!(attrs["gen_ai.request.model"], "test-model");
        assert!(
            attrs.contains_key("a2a.time_to_first_token_ms"),
            "{attrs:?}"
        );
    }
    let answered = chats
        .iter()
        .map(|c| attributes(c))
        .find(|a| a.contains_key("gen_ai.usage.input_tokens"))
        .expect("the answering generation records its usage");
    assert_eq!(answered["gen_ai.usage.input_tokens"], "21");
    assert_eq!(answered["gen_ai.usage.output_tokens"], "4");

    // The agent loop reads the session's context before the first generation, then the
    // model calls the same tool.
    for tool in named(spans, "execute_tool") {
        assert_eq!(tool.name, "execute_tool session_context");
        assert_eq!(
            tool.parent_span_id, turn.span_id,
            "a tool call is the turn's child"
        );
        let attrs = attributes(tool);
        assert_eq!(attrs["gen_ai.tool.name"], "session_context");
        assert_eq!(attrs["gen_ai.operation.name"], "execute_tool");
        assert_eq!(attrs["a2a.tool.outcome"], "ok");
    }

    for commit in named(spans, "persistence.commit") {
        assert_eq!(
            commit.parent_span_id, turn.span_id,
            "a commit is the turn's child"
        );
        let attrs = attributes(commit);
        assert!(attrs["a2a.persistence.writes"].parse::<u64>().unwrap() >= 1);
        assert!(attrs["db.operation.batch.size"].parse::<u64>().unwrap() >= 1);
    }

    assert_eq!(received.resource["service.name"], "agent-a2a-under-test");
    assert!(received.resource.contains_key("service.instance.id"));

    // The provider saw the caller's trace on each request, the retried one included.
    let traceparents = model.traceparents();
    assert_eq!(traceparents.len(), 3, "{traceparents:?}");
    for traceparent in &traceparents {
        let traceparent = traceparent
            .as_deref()
            .expect("traceparent sent to the provider");
        assert!(
            traceparent.starts_with(&format!("00-{caller_trace}-")),
            "{traceparent}"
        );
    }
    // The retry's warning, logged inside the request, names the trace.
    let logs = logs.lock().unwrap();
    let retry = logs
        .iter()
        .find(|l| l.contains("provider request failed; retrying"))
        .expect("the retry is logged");
    assert!(
        retry.contains(&format!("trace_id={caller_trace}")),
        "{retry}"
    );

    child.kill().unwrap();
    child.wait().unwrap();
}

/// A remote agent that records the `traceparent` of each JSON-RPC call and completes
/// every task at once.
async fn traced_remote() -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let (card_base, recorded) = (base.clone(), seen.clone());
    let server = HttpServer::new(move || {
        let card = json!({
            "name": "traced", "description": "records traceparent", "version": "1",
            "supportedInterfaces": [{"url": format!("{card_base}/rpc"),
                "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {}, "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"], "skills": [],
        });
        let recorded = recorded.clone();
        App::new()
            .route(
                "/card",
                web::get().to(move || {
                    let card = card.clone();
                    async move { HttpResponse::Ok().json(card) }
                }),
            )
            .route(
                "/rpc",
                web::post().to(move |req: actix_web::HttpRequest| {
                    let recorded = recorded.clone();
                    async move {
                        let header = req.headers().get("traceparent");
                        recorded
                            .lock()
                            .unwrap()
                            .push(header.and_then(|v| v.to_str().ok()).map(str::to_owned));
                        HttpResponse::Ok().json(json!({"jsonrpc": "2.0", "id": 1, "result": {
                            "task": {"id": "remote-task", "contextId": "remote-context",
                                "status": {"state": "TASK_STATE_COMPLETED"}}}}))
                    }
                }),
            )
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    actix_web::rt::spawn(server);
    (format!("{base}/card"), seen)
}

/// A remote agent's call continues the caller's trace: the remote gets a `traceparent`
/// of the caller's trace.
#[actix_web::test]
async fn a_remote_agent_call_carries_the_callers_trace() {
    let receiver = Receiver::start().await;
    let (card, seen) = traced_remote().await;
    let dir = tempfile::tempdir().unwrap();
    let remotes = format!("[{{name = \"traced\", card_url = \"{card}\"}}]");
    let (mut child, url, _logs) = start_server_logged(
        dir.path(),
        &[
            ("AGENT_A2A__AUTH__ENABLED", "false"),
            ("AGENT_A2A__PUSH__ALLOW_LOOPBACK", "true"),
            ("AGENT_A2A__AGENT__REMOTE_AGENTS", &remotes),
            ("AGENT_A2A__TELEMETRY__OTLP_ENDPOINT", &receiver.url),
            ("AGENT_A2A__TELEMETRY__EXPORT_DELAY_MS", "50"),
        ],
    );
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let answer: Value = http_client()
        .post(format!("{url}/"))
        .header(
            "traceparent",
            format!("00-{caller_trace}-00f067aa0ba902b7-01"),
        )
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": "traced-1", "role": "ROLE_USER", "parts": [
                {"data": {"tool": "ask_traced", "arguments": {"text": "hello"}}}]}}}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{answer}"
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let traceparent = seen[0]
        .as_deref()
        .expect("a traceparent sent to the remote");
    assert!(
        traceparent.starts_with(&format!("00-{caller_trace}-")),
        "{traceparent}"
    );
    child.kill().ok();
    child.wait().ok();
}
