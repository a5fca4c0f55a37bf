//! `/metrics`: after ordinary traffic every metric family the server emits is exported,
//! with help text, millisecond buckets, and labels that never carry an id.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use agent_a2a::config::ModelSettings;
use agent_a2a::providers::{GenerateParams, ProviderError, ProviderEvent, ScriptedProvider, Usage};
use agent_a2a::runtime::model_actor::{Generate, Models};
use agent_a2a::telemetry as t;
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::push::Receiver;
use crate::support::{Backend, TestApp, call_tool, spawn_configured, tool_result, user_message};

/// Every family `telemetry` declares.
const CATALOGUE: &[&str] = &[
    t::HTTP_REQUESTS,
    t::HTTP_LATENCY_MS,
    t::ERRORS,
    t::SSE_SUBSCRIBERS,
    t::GRPC_STREAMS,
    t::STREAMS_REFUSED,
    t::RATE_LIMITED,
    t::AUTH_FAILURES,
    t::AUTH_FAILURE_OVERFLOW,
    // exported once OIDC tokens are used (tests/it/jwt.rs scrapes them)
    t::JWT_REFUSALS,
    t::JWKS_FETCHES,
    t::THREADS_ACTIVE,
    t::TASKS,
    t::THREAD_ACTORS,
    t::THREAD_RESTARTS,
    t::TASK_TRANSITIONS,
    t::PERSIST_BATCH,
    t::PERSIST_COMMIT_MS,
    t::PERSIST_QUEUE,
    t::PERSIST_FAILURES,
    t::SQLITE_WAL_PAGES,
    // exported once the WAL grew by store.sqlite_checkpoint_pages
    t::SQLITE_CHECKPOINT_MS,
    t::SKILL_CALLS,
    t::SKILL_ERRORS,
    t::SKILL_LATENCY_MS,
    t::PUSH_DELIVERIES,
    t::PUSH_ATTEMPTS,
    t::PUSH_OUTBOX_DEPTH,
    t::PUSH_DELIVERY_MS,
    t::IDEMPOTENT_REPLAYS,
    t::IDEMPOTENCY_KEY_READS,
    t::MODEL_REQUESTS,
    t::MODEL_TTFT_MS,
    t::MODEL_TOKENS,
    t::MODEL_STREAM_DELTAS,
    t::MODEL_ERRORS,
    t::JANITOR_RUNS,
    t::JANITOR_RUN_MS,
    t::JANITOR_THREADS_EXPIRED,
    t::JANITOR_STATE_REMOVED,
    t::JANITOR_ACTORS_EVICTED,
    t::BUILD_INFO,
    t::START_TIME,
    // exported by a node in a cluster only (tests/it/cluster.rs scrapes them)
    t::CLUSTER_NODES,
    t::CLUSTER_TAKEOVERS,
    t::CLUSTER_PUSH_ADOPTED,
    t::CLUSTER_LEASE_LOSSES,
    t::CLUSTER_FORWARDED,
    t::CLUSTER_FORWARD_MS,
    // exported once a remote agent is called (tests/it/remote_agents.rs scrapes them)
    t::REMOTE_AGENT_CALLS,
    t::REMOTE_AGENT_CALL_MS,
    t::REMOTE_AGENT_CARDS_REFUSED,
    // exported once a turn is resumed after a restart (tests/it/delegation.rs)
    t::TURNS_RESUMED,
    // exported once an MCP server is configured (tests/it/mcp.rs scrapes them)
    t::MCP_CALLS,
    t::MCP_CALL_MS,
    t::MCP_BREAKER_OPEN,
    t::MCP_RESTARTS,
    t::MCP_SERVER_UP,
    t::MCP_TOOL_LIST_CHANGES,
];

/// `name → type` from the `# TYPE` lines of an exposition.
fn families(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.to_owned()))
        .collect()
}

async fn scrape(app: &TestApp) -> String {
    let response = app.get("/metrics").await;
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    response.text().await.unwrap()
}

/// One successful and one failed generation through a model actor. No executor in this
/// release routes turns to a model yet, so the test drives the actor the agent loop will
/// use, on the same process-wide recorder the server exports.
async fn drive_a_model() {
    let provider = Arc::new(ScriptedProvider::new(
        "scripted",
        "test-model",
        [
            Ok(vec![
                ProviderEvent::TextDelta("hello".into()),
                ProviderEvent::Usage(Usage {
                    input_tokens: 12,
                    output_tokens: 3,
                }),
                ProviderEvent::Done,
            ]),
            Err(ProviderError::Timeout),
        ],
    ));
    let model = Models::spawn(
        provider,
        &ModelSettings::default(),
        &actix::Arbiter::current(),
    );
    let stream = model
        .send(Generate(GenerateParams::default(), tracing::Span::none()))
        .await
        .expect("model actor answers")
        .expect("a stream");
    let events: Vec<ProviderEvent> = stream.collect().await;
    assert_eq!(events.last(), Some(&ProviderEvent::Done));
    let failed = model
        .send(Generate(GenerateParams::default(), tracing::Span::none()))
        .await
        .expect("model actor answers");
    assert!(failed.is_err());
}

#[actix_web::test]
async fn every_metric_family_is_exported_after_traffic() {
    let app = spawn_configured(Backend::Sqlite, |s| {
        s.metrics.census_interval_secs = 1;
        s.push.allow_loopback = true;
    })
    .await;
    let mut ids = Vec::new();
    let receiver = Receiver::start(std::net::TcpListener::bind("127.0.0.1:0").unwrap(), 0);

    // A2A traffic on both bindings: a tool call that completes, one the skill refuses,
    // an unknown task, a stream, and a REST read by id.
    let added = call_tool(
        &app,
        "memory_add",
        json!({"content": "metrics are bounded", "layer": "user", "userId": "alice"}),
    )
    .await;
    tool_result(&added);
    ids.push(added["id"].as_str().unwrap().to_owned());
    ids.push(added["contextId"].as_str().unwrap().to_owned());
    let refused = call_tool(&app, "memory_add", json!({"content": 42})).await;
    assert_eq!(
        refused["status"]["state"], "TASK_STATE_REJECTED",
        "{refused}"
    );
    ids.push(refused["id"].as_str().unwrap().to_owned());
    let missing = app
        .rpc(
            "GetTask",
            json!({"id": "00000000-0000-4000-8000-000000000000"}),
        )
        .await;
    assert_eq!(missing["error"]["code"], -32001, "{missing}");
    let events = app
        .rpc_stream(
            "SendStreamingMessage",
            json!({"message": {
                "messageId": uuid::Uuid::new_v4().to_string(),
                "role": "ROLE_USER",
                "parts": [{"data": {"tool": "governance_validate", "arguments": {"content": "hi"}}}],
            }}),
        )
        .await;
    assert!(!events.is_empty());
    let read = app.get(&format!("/tasks/{}", ids[0])).await;
    assert_eq!(read.status(), 200);
    let free_text = app
        .rpc("SendMessage", json!({"message": user_message("hello")}))
        .await;
    ids.push(
        free_text["result"]["task"]["id"]
            .as_str()
            .unwrap()
            .to_owned(),
    );
    // A task with a push config: its events are delivered to a receiver.
    let pushed = app
        .rpc(
            "SendMessage",
            json!({"message": user_message("hello"),
                   "configuration": {"taskPushNotificationConfig": {"url": receiver.url}}}),
        )
        .await;
    ids.push(pushed["result"]["task"]["id"].as_str().unwrap().to_owned());
    receiver.delivered(1).await;
    assert_eq!(app.get("/health").await.status(), 200);
    assert_eq!(app.get(&format!("/no/such/{}", ids[0])).await.status(), 404);
    drive_a_model().await;
    app.runtime
        .lifecycle()
        .run_janitor(agent_a2a::domain::Timestamp::now())
        .await
        .expect("a janitor pass");
    // Let the census (every second here) count the tasks just made.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;

    let text = scrape(&app).await;
    let found = families(&text);
    let expected = [
        (t::HTTP_REQUESTS, "counter"),
        (t::HTTP_LATENCY_MS, "histogram"),
        (t::ERRORS, "counter"),
        (t::SSE_SUBSCRIBERS, "gauge"),
        (t::THREADS_ACTIVE, "gauge"),
        (t::TASKS, "gauge"),
        (t::THREAD_ACTORS, "gauge"),
        (t::THREAD_RESTARTS, "counter"),
        (t::TASK_TRANSITIONS, "counter"),
        (t::PERSIST_BATCH, "histogram"),
        (t::PERSIST_COMMIT_MS, "histogram"),
        (t::PERSIST_QUEUE, "gauge"),
        (t::PERSIST_FAILURES, "counter"),
        (t::SQLITE_WAL_PAGES, "gauge"),
        (t::SKILL_CALLS, "counter"),
        (t::SKILL_ERRORS, "counter"),
        (t::SKILL_LATENCY_MS, "histogram"),
        (t::PUSH_DELIVERIES, "counter"),
        (t::PUSH_ATTEMPTS, "counter"),
        (t::PUSH_OUTBOX_DEPTH, "gauge"),
        (t::PUSH_DELIVERY_MS, "histogram"),
        (t::IDEMPOTENT_REPLAYS, "counter"),
        (t::IDEMPOTENCY_KEY_READS, "counter"),
        (t::AUTH_FAILURE_OVERFLOW, "counter"),
        (t::STREAMS_REFUSED, "counter"),
        (t::MODEL_REQUESTS, "counter"),
        (t::MODEL_TTFT_MS, "histogram"),
        (t::MODEL_TOKENS, "counter"),
        (t::MODEL_STREAM_DELTAS, "counter"),
        (t::MODEL_ERRORS, "counter"),
        (t::JANITOR_RUNS, "counter"),
        (t::JANITOR_RUN_MS, "histogram"),
        (t::JANITOR_THREADS_EXPIRED, "counter"),
        (t::JANITOR_STATE_REMOVED, "counter"),
        (t::JANITOR_ACTORS_EVICTED, "counter"),
        (t::BUILD_INFO, "gauge"),
        (t::START_TIME, "gauge"),
    ];
    for (name, kind) in expected {
        assert_eq!(
            found.get(name).map(String::as_str),
            Some(kind),
            "{name} missing or of the wrong type in:\n{text}"
        );
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} has no help text"
        );
    }

    // Prometheus naming: counters end in `_total`, and only they do.
    for (name, kind) in found.iter().filter(|(n, _)| n.starts_with("agent_a2a_")) {
        assert_eq!(
            kind == "counter",
            name.ends_with("_total"),
            "{name} ({kind})"
        );
    }

    // The label sets operators query by.
    for series in [
        r#"agent_a2a_http_requests_total{binding="jsonrpc",method="SendMessage",status="200"}"#,
        r#"agent_a2a_http_requests_total{binding="http_json",method="GetTask",status="200"}"#,
        r#"agent_a2a_http_requests_total{binding="other",method="/health",status="200"}"#,
        r#"agent_a2a_http_requests_total{binding="http_json",method="unknown",status="404"}"#,
        r#"agent_a2a_errors_total{code="-32001",reason="TASK_NOT_FOUND",method="GetTask"}"#,
        r#"agent_a2a_skill_calls_total{skill="memory",tool="memory_add",outcome="ok"}"#,
        r#"agent_a2a_skill_errors_total{skill="memory",tool="memory_add",outcome="invalid_arguments"}"#,
        r#"agent_a2a_skill_call_duration_ms_count{skill="memory",tool="memory_add"}"#,
        r#"agent_a2a_tasks{state="completed"}"#,
        r#"agent_a2a_model_tokens_total{provider="scripted",direction="output"}"#,
        r#"agent_a2a_model_stream_deltas_total{provider="scripted"}"#,
        r#"agent_a2a_model_errors_total{provider="scripted",kind="timeout"}"#,
        r#"agent_a2a_push_attempts_total{result="ok"}"#,
        r#"agent_a2a_push_deliveries_total{outcome="dropped"}"#,
        r#"agent_a2a_build_info{version=""#,
    ] {
        assert!(text.contains(series), "no {series} in:\n{text}");
    }

    // Millisecond buckets, from a tenth of a millisecond to a minute.
    let latency_buckets: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("agent_a2a_http_request_duration_ms_bucket{")
                && l.contains(r#"method="SendMessage""#)
        })
        .collect();
    for le in ["0.1", "1", "10", "100", "1000", "60000", "+Inf"] {
        assert!(
            latency_buckets
                .iter()
                .any(|l| l.contains(&format!("le=\"{le}\""))),
            "no le={le} bucket in {latency_buckets:#?}"
        );
    }
    assert!(text.contains(r#"agent_a2a_persistence_batch_size_bucket{le="256"}"#));

    // Bounded cardinality: no task, context or path id in any label.
    for id in &ids {
        assert!(!text.contains(id.as_str()), "{id} leaked into a label");
    }
    assert!(!text.contains("00000000-0000-4000-8000-000000000000"));
    assert!(!text.contains("/no/such"));
}

/// The Grafana dashboard and the Prometheus example in `deploy/` query the names the
/// server exports, and every family of the catalogue has a panel.
#[test]
fn the_deploy_examples_use_the_real_metric_names() {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let grafana = std::fs::read_to_string(deploy.join("grafana-dashboard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&grafana).expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let queries: Vec<&str> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .map(|target| target["expr"].as_str().expect("a PromQL expression"))
        .collect();
    assert!(queries.len() > 20, "{} queries", queries.len());
    let names = regex::Regex::new(r"agent_a2a_[a-z0-9_]+").unwrap();
    let used: BTreeSet<&str> = names
        .find_iter(&grafana)
        .map(|m| m.as_str())
        .map(|n| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| n.strip_suffix(suffix))
                .unwrap_or(n)
        })
        .collect();
    for name in &used {
        assert!(
            CATALOGUE.contains(name),
            "the dashboard queries unknown {name}"
        );
    }
    for name in CATALOGUE {
        assert!(used.contains(name), "no panel shows {name}");
    }
    let prometheus = std::fs::read_to_string(deploy.join("prometheus.yml")).unwrap();
    assert!(prometheus.contains("metrics_path: /metrics"));
    assert!(prometheus.contains("job_name: agent-a2a"));
}

/// With `metrics.bearer_token` set, `/metrics` (whose labels name tenants) answers only
/// that token.
#[actix_web::test]
async fn metrics_can_require_a_bearer_token() {
    let app = crate::support::spawn_app_with(crate::support::Backend::Sqlite, |s| {
        s.metrics.bearer_token = "scrape-secret".into()
    })
    .await;
    let scrape = |token: Option<&'static str>| {
        let mut request = app.client.get(format!("{}/metrics", app.url));
        if let Some(token) = token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        request.send()
    };
    for token in [None, Some("wrong"), Some("")] {
        let r = scrape(token).await.unwrap();
        assert_eq!(r.status(), 401, "{token:?}");
        assert!(r.headers().contains_key("www-authenticate"));
        assert!(!r.text().await.unwrap().contains("agent_a2a_"), "{token:?}");
    }
    let r = scrape(Some("scrape-secret")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("agent_a2a_build_info"));
}
