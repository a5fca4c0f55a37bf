//! Authentication, tenant isolation and rate limits over every binding and dialect.

use agent_a2a::config::{ApiKeySettings, LimitSettings, Settings};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Backend, TestApp, spawn_app_with, spawn_configured, user_message};

const ACME: &str = "key-acme";
const GLOBEX: &str = "key-globex";

fn keys(s: &mut Settings) {
    s.auth.enabled = true;
    s.auth.api_keys = vec![
        ApiKeySettings {
            key: ACME.into(),
            key_sha256: String::new(),
            tenant: "acme".into(),
            tier: "free".into(),
            mcp_servers: None,
        },
        ApiKeySettings {
            key: String::new(),
            key_sha256: ApiKeySettings::digest_of(GLOBEX),
            tenant: "globex".into(),
            tier: "pro".into(),
            mcp_servers: None,
        },
    ];
    s.rate_limit.default_per_minute = 10_000;
    // These tests send wrong keys on purpose, many from one address.
    s.auth.failures_per_minute = 10_000;
}

/// One request as a client of `binding` would send it.
struct Call {
    method: Method,
    path: String,
    body: Option<Value>,
    version: &'static str,
}

impl Call {
    fn rpc(method: &str, params: Value, version: &'static str) -> Call {
        Call {
            method: Method::POST,
            path: "/".into(),
            body: Some(json!({"jsonrpc": "2.0", "id": 3, "method": method, "params": params})),
            version,
        }
    }

    fn rest(method: Method, path: String, body: Option<Value>, version: &'static str) -> Call {
        Call {
            method,
            path,
            body,
            version,
        }
    }

    async fn send(&self, app: &TestApp, key: Option<&str>) -> (StatusCode, Option<String>, Value) {
        let mut request = app
            .client
            .request(self.method.clone(), format!("{}{}", app.url, self.path))
            .header("A2A-Version", self.version);
        if let Some(key) = key {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
        if let Some(body) = &self.body {
            request = request.json(body);
        }
        let response = request.send().await.expect("request");
        let status = response.status();
        let challenge = response
            .headers()
            .get("WWW-Authenticate")
            .map(|v| v.to_str().unwrap().to_owned());
        let text = response.text().await.unwrap_or_default();
        (
            status,
            challenge,
            serde_json::from_str(&text).unwrap_or(Value::Null),
        )
    }
}

fn v03_message(text: &str, task_id: Option<&str>) -> Value {
    let mut m = json!({"kind": "message", "role": "user",
        "messageId": uuid::Uuid::new_v4().to_string(),
        "parts": [{"kind": "text", "text": text}]});
    if let Some(id) = task_id {
        m["taskId"] = json!(id);
    }
    m
}

/// Every operation on `task` (a task of another tenant), per binding and dialect.
fn foreign_calls(task: &str) -> Vec<(&'static str, Call)> {
    let mut continue_v1 = user_message("continue");
    continue_v1["taskId"] = json!(task);
    vec![
        (
            "1.0 rpc GetTask",
            Call::rpc("GetTask", json!({"id": task}), "1.0"),
        ),
        (
            "1.0 rpc CancelTask",
            Call::rpc("CancelTask", json!({"id": task}), "1.0"),
        ),
        (
            "1.0 rpc SubscribeToTask",
            Call::rpc("SubscribeToTask", json!({"id": task}), "1.0"),
        ),
        (
            "1.0 rpc SendMessage",
            Call::rpc("SendMessage", json!({"message": continue_v1}), "1.0"),
        ),
        (
            "1.0 rest get",
            Call::rest(Method::GET, format!("/tasks/{task}"), None, "1.0"),
        ),
        (
            "1.0 rest cancel",
            Call::rest(Method::POST, format!("/tasks/{task}:cancel"), None, "1.0"),
        ),
        (
            "1.0 rest subscribe",
            Call::rest(Method::GET, format!("/tasks/{task}:subscribe"), None, "1.0"),
        ),
        (
            "1.0 rest send",
            Call::rest(
                Method::POST,
                "/message:send".into(),
                Some(json!({"message": continue_v1})),
                "1.0",
            ),
        ),
        (
            "0.3 rpc tasks/get",
            Call::rpc("tasks/get", json!({"id": task}), "0.3"),
        ),
        (
            "0.3 rpc tasks/cancel",
            Call::rpc("tasks/cancel", json!({"id": task}), "0.3"),
        ),
        (
            "0.3 rpc tasks/resubscribe",
            Call::rpc("tasks/resubscribe", json!({"id": task}), "0.3"),
        ),
        (
            "0.3 rpc message/send",
            Call::rpc(
                "message/send",
                json!({"message": v03_message("continue", Some(task))}),
                "0.3",
            ),
        ),
        (
            "0.3 rest get",
            Call::rest(Method::GET, format!("/v1/tasks/{task}"), None, "0.3"),
        ),
        (
            "0.3 rest cancel",
            Call::rest(
                Method::POST,
                format!("/v1/tasks/{task}:cancel"),
                None,
                "0.3",
            ),
        ),
        (
            "0.3 rest subscribe",
            Call::rest(
                Method::GET,
                format!("/v1/tasks/{task}:subscribe"),
                None,
                "0.3",
            ),
        ),
        (
            "0.3 rest send",
            Call::rest(
                Method::POST,
                "/v1/message:send".into(),
                Some(json!({"message": v03_message("continue", Some(task))})),
                "0.3",
            ),
        ),
    ]
}

fn list_calls() -> Vec<(&'static str, Call)> {
    vec![
        (
            "1.0 rpc ListTasks",
            Call::rpc("ListTasks", json!({}), "1.0"),
        ),
        (
            "1.0 rest list",
            Call::rest(Method::GET, "/tasks".into(), None, "1.0"),
        ),
    ]
}

fn is_not_found(status: StatusCode, body: &Value) -> bool {
    body["error"]["code"] == -32001
        || (status == StatusCode::NOT_FOUND && body["error"]["status"] == "NOT_FOUND")
}

#[actix_web::test]
async fn a_tenant_can_never_reach_another_tenants_tasks() {
    let app = spawn_app_with(Backend::Sqlite, keys).await;
    // acme's task waits for input: open, cancelable, subscribable.
    let mut start = user_message("input please");
    start["contextId"] = json!("shared-context-name");
    let (status, _, created) = Call::rpc("SendMessage", json!({"message": start}), "1.0")
        .send(&app, Some(ACME))
        .await;
    assert_eq!(status, StatusCode::OK);
    let task = created["result"]["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        created["result"]["task"]["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );

    for (name, call) in foreign_calls(&task) {
        let (status, _, body) = call.send(&app, Some(GLOBEX)).await;
        assert!(
            is_not_found(status, &body),
            "{name}: globex got {status} {body}"
        );
    }
    for (name, call) in list_calls() {
        let (status, _, body) = call.send(&app, Some(GLOBEX)).await;
        assert_eq!(status, StatusCode::OK, "{name}");
        let page = if body["result"].is_object() {
            &body["result"]
        } else {
            &body
        };
        assert_eq!(page["totalSize"], 0, "{name}: {body}");
    }
    // The same context id under another tenant is another thread.
    let mut same_context = user_message("hello");
    same_context["contextId"] = json!("shared-context-name");
    let (_, _, other) = Call::rpc("SendMessage", json!({"message": same_context}), "1.0")
        .send(&app, Some(GLOBEX))
        .await;
    assert_eq!(
        other["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{other}"
    );

    // acme still sees its task, untouched by all of the above.
    let (_, _, own) = Call::rpc("GetTask", json!({"id": task, "historyLength": 10}), "1.0")
        .send(&app, Some(ACME))
        .await;
    assert_eq!(
        own["result"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{own}"
    );
    assert_eq!(
        own["result"]["history"].as_array().unwrap().len(),
        2,
        "{own}"
    );
    let (_, _, listed) = Call::rpc("ListTasks", json!({}), "1.0")
        .send(&app, Some(ACME))
        .await;
    assert_eq!(listed["result"]["totalSize"], 1, "{listed}");
    app.stop().await;
}

#[actix_web::test]
async fn missing_or_wrong_credentials_are_refused_on_every_binding() {
    let app = spawn_app_with(Backend::Sqlite, keys).await;
    let mut calls = foreign_calls("any-task");
    calls.extend(list_calls());
    calls.push((
        "1.0 rpc stream",
        Call::rpc(
            "SendStreamingMessage",
            json!({"message": user_message("x")}),
            "1.0",
        ),
    ));
    calls.push((
        "1.0 rpc push",
        Call::rpc("CreateTaskPushNotificationConfig", json!({}), "1.0"),
    ));
    calls.push((
        "seed send",
        Call::rest(
            Method::POST,
            "/tasks/send".into(),
            Some(json!({"message": user_message("x")})),
            "1.0",
        ),
    ));
    for key in [None, Some("not-a-key")] {
        for (name, call) in &calls {
            let (status, challenge, body) = call.send(&app, key).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{name} {key:?}: {body}");
            assert_eq!(
                challenge.as_deref(),
                Some(r#"Bearer realm="agent-a2a""#),
                "{name}"
            );
            let reason = if call.path == "/" {
                assert_eq!(body["error"]["code"], -32000, "{name}: {body}");
                assert_eq!(body["id"], 3, "{name}: the request id is echoed");
                &body["error"]["data"][0]["reason"]
            } else {
                assert_eq!(body["error"]["status"], "UNAUTHENTICATED", "{name}: {body}");
                &body["error"]["details"][0]["reason"]
            };
            assert_eq!(reason, "UNAUTHENTICATED", "{name}: {body}");
        }
    }
    // Public: the card (which declares the schemes), health and metrics.
    let card: Value = app
        .get("/.well-known/agent-card.json")
        .await
        .json()
        .await
        .unwrap();
    assert!(card["securitySchemes"]["bearer"].is_object(), "{card}");
    assert_eq!(app.get("/health").await.status(), StatusCode::OK);
    assert_eq!(app.get("/metrics").await.status(), StatusCode::OK);
    // Either header carries a key.
    let response = app
        .client
        .post(format!("{}/", app.url))
        .header("X-API-Key", ACME)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    app.stop().await;
}

#[actix_web::test]
async fn over_the_limit_is_429_with_retry_after_on_every_binding() {
    let app = spawn_app_with(Backend::Sqlite, |s| {
        keys(s);
        s.rate_limit.default_per_minute = 2;
        s.rate_limit
            .tiers
            .insert("pro".into(), LimitSettings { per_minute: 100 });
    })
    .await;
    let calls = [
        ("1.0 rpc", Call::rpc("ListTasks", json!({}), "1.0")),
        (
            "1.0 rest",
            Call::rest(Method::GET, "/tasks".into(), None, "1.0"),
        ),
        (
            "0.3 rest",
            Call::rest(Method::GET, "/v1/tasks/missing".into(), None, "0.3"),
        ),
    ];
    // acme (tier free → the default 2/min) spends its budget, then every binding says 429.
    for (_, call) in calls.iter().take(2) {
        let (status, _, _) = call.send(&app, Some(ACME)).await;
        assert_eq!(status, StatusCode::OK);
    }
    for (name, call) in &calls {
        let response = {
            let mut request = app
                .client
                .request(call.method.clone(), format!("{}{}", app.url, call.path))
                .header("A2A-Version", call.version)
                .header("Authorization", format!("Bearer {ACME}"));
            if let Some(body) = &call.body {
                request = request.json(body);
            }
            request.send().await.unwrap()
        };
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS, "{name}");
        let retry: u64 = response.headers()["Retry-After"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=30).contains(&retry), "{name}: Retry-After {retry}");
        let body: Value = response.json().await.unwrap();
        let reason = if call.path == "/" {
            assert_eq!(body["error"]["code"], -32000, "{body}");
            &body["error"]["data"][0]["reason"]
        } else {
            assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED", "{body}");
            &body["error"]["details"][0]["reason"]
        };
        assert_eq!(reason, "RATE_LIMIT_EXCEEDED", "{name}: {body}");
    }
    // globex (tier pro) has its own, larger budget.
    let (status, _, _) = calls[0].1.send(&app, Some(GLOBEX)).await;
    assert_eq!(status, StatusCode::OK);
    let metrics = app.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(r#"agent_a2a_rate_limited_total{tenant_id="acme",skill_name=""} 3"#),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("rate_limited"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    app.stop().await;
}

async fn tool(app: &TestApp, key: &str, tool: &str, arguments: Value) -> (StatusCode, Value) {
    let message = json!({
        "messageId": uuid::Uuid::new_v4().to_string(),
        "role": "ROLE_USER",
        "parts": [{"data": {"tool": tool, "arguments": arguments}}],
    });
    let (status, _, body) = Call::rpc("SendMessage", json!({"message": message}), "1.0")
        .send(app, Some(key))
        .await;
    (status, body)
}

#[actix_web::test]
async fn memories_are_per_tenant_and_skill_limits_apply_to_direct_calls() {
    let app = spawn_configured(Backend::Sqlite, |s| {
        keys(s);
        s.rate_limit
            .skills
            .insert("memory".into(), LimitSettings { per_minute: 3 });
    })
    .await;
    let add = json!({"content": "acme ships on Fridays", "layer": "user", "userId": "u1"});
    let (_, added) = tool(&app, ACME, "memory_add", add).await;
    assert_eq!(
        added["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{added}"
    );
    let search = json!({"query": "ships Fridays", "userId": "u1"});
    let (_, theirs) = tool(&app, GLOBEX, "memory_search", search.clone()).await;
    let found = &theirs["result"]["task"]["artifacts"][0]["parts"][0]["data"];
    assert_eq!(
        found["totalCount"], 0,
        "globex sees none of acme's memories: {theirs}"
    );
    let (_, ours) = tool(&app, ACME, "memory_search", search.clone()).await;
    let found = &ours["result"]["task"]["artifacts"][0]["parts"][0]["data"];
    assert_eq!(found["totalCount"], 1, "{ours}");
    // acme's third memory call passes, the fourth is over the skill's 3/min.
    let (status, _) = tool(&app, ACME, "memory_search", search.clone()).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = tool(&app, ACME, "memory_search", search.clone()).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("on skill memory"),
        "{body}"
    );
    // Other skills, and other tenants, are not affected.
    let (_, other_skill) = tool(&app, ACME, "governance_constraints", json!({})).await;
    assert_eq!(
        other_skill["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{other_skill}"
    );
    let (_, other_tenant) = tool(&app, GLOBEX, "memory_search", search).await;
    assert_eq!(
        other_tenant["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{other_tenant}"
    );
    app.stop().await;
}

/// With auth on, the card offers the extended card, and every binding and dialect gives
/// an authenticated caller the public card with its own tenant, tier and budgets.
#[actix_web::test]
async fn authenticated_callers_get_the_extended_card_with_their_terms() {
    let app = spawn_app_with(Backend::Sqlite, |s| {
        keys(s);
        s.rate_limit
            .tiers
            .insert("pro".into(), LimitSettings { per_minute: 600 });
        s.rate_limit
            .skills
            .insert("memory".into(), LimitSettings { per_minute: 30 });
    })
    .await;
    let public: Value = app
        .get("/.well-known/agent-card.json")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(public["capabilities"]["extendedAgentCard"], true);
    assert_eq!(public["supportsAuthenticatedExtendedCard"], true);

    let calls = [
        (
            "1.0 rpc",
            Call::rpc("GetExtendedAgentCard", json!({}), "1.0"),
        ),
        (
            "0.3 rpc",
            Call::rpc("agent/getAuthenticatedExtendedCard", json!({}), "0.3"),
        ),
        (
            "1.0 rest",
            Call::rest(Method::GET, "/extendedAgentCard".into(), None, "1.0"),
        ),
        (
            "0.3 rest",
            Call::rest(Method::GET, "/v1/card".into(), None, "0.3"),
        ),
    ];
    let terms_of = |card: &Value| -> Value {
        card["capabilities"]["extensions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["uri"] == "urn:agent-a2a:tenant:v1")
            .map(|e| e["params"].clone())
            .unwrap_or(Value::Null)
    };
    for (name, call) in &calls {
        let (status, _, body) = call.send(&app, Some(GLOBEX)).await;
        assert_eq!(status, StatusCode::OK, "{name}: {body}");
        let card = body.get("result").unwrap_or(&body);
        assert_eq!(card["name"], public["name"], "{name}");
        let terms = terms_of(card);
        assert_eq!(terms["tenant"], "globex", "{name}: {card}");
        assert_eq!(terms["tier"], "pro", "{name}");
        assert_eq!(terms["requestsPerMinute"], 600, "{name}");
        assert_eq!(terms["skillCallsPerMinute"]["memory"], 30, "{name}");

        // Another tenant sees its own terms, never globex's.
        let (_, _, body) = call.send(&app, Some(ACME)).await;
        let card = body.get("result").unwrap_or(&body);
        assert_eq!(terms_of(card)["tenant"], "acme", "{name}");
        assert_eq!(terms_of(card)["requestsPerMinute"], 10_000, "{name}");

        // No credentials: the authentication error, not a card.
        let (status, challenge, body) = call.send(&app, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{name}: {body}");
        assert!(challenge.is_some(), "{name}");
    }
}

/// An address that keeps presenting wrong keys gets 429 with `Retry-After` — even with a
/// right key — until its budget of failures refills; the failures are counted.
#[actix_web::test]
async fn failed_authentications_are_throttled_per_address() {
    let app = spawn_app_with(Backend::Sqlite, |s| {
        keys(s);
        s.auth.failures_per_minute = 5;
    })
    .await;
    let call = Call::rpc("GetTask", json!({"id": "t"}), "1.0");
    for _ in 0..5 {
        let (status, _, _) = call.send(&app, Some("wrong")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    // The sixth failure is past the budget: the address is blocked from then on.
    let (status, _, _) = call.send(&app, Some("wrong")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let response = app
        .client
        .post(format!("{}/", app.url))
        .header("Authorization", format!("Bearer {ACME}"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=12).contains(&retry_after), "{retry_after}");
    let metrics = app.get("/metrics").await.text().await.unwrap();
    let count = |outcome: &str| -> f64 {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("agent_a2a_auth_failures_total")
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    assert!(count("refused") >= 6.0, "{metrics}");
    assert!(count("throttled") >= 1.0, "{metrics}");
}
