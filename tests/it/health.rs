//! `/health` covers every dependency (contract B.10): the store, each skill's engine and
//! each model provider's circuit breaker. A required dependency down is a 503; a provider
//! whose circuit is open only degrades the answer; a check that does not answer within
//! `health.timeout_ms` counts as down.

use std::sync::Arc;

use agent_a2a::cli::{Agent, SkillSource};
use agent_a2a::config::{ProviderKind, ProviderSettings, Settings};
use agent_a2a::runtime::ToolRoutingExecutor;
use agent_a2a::skills::{Caller, Skill, SkillError, SkillInfo, SkillRegistry, ToolSpec};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::support::{Backend, TestApp, spawn_agent_in, spawn_configured, user_message};

async fn health(app: &TestApp) -> (u16, Value) {
    let response = app.get("/health").await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// A provider on a port nothing listens on: every generation fails to connect.
fn unreachable_provider(s: &mut Settings) {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    s.providers.insert(
        "default".into(),
        ProviderSettings {
            kind: ProviderKind::Openai,
            base_url: format!("http://127.0.0.1:{port}/v1"),
            model: "test-model".into(),
            api_key_env: String::new(),
            timeout_ms: 5_000,
            connect_timeout_ms: 1_000,
            max_retries: 0,
            retry_base_ms: 10,
            max_concurrency: 2,
        },
    );
}

#[actix_web::test]
async fn every_dependency_is_reported_and_a_provider_is_not_called() {
    let app = spawn_configured(Backend::Sqlite, unreachable_provider).await;
    let (status, body) = health(&app).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "ok", "{body}");
    let checks = &body["checks"];
    assert_eq!(checks["store"]["status"], "up");
    assert_eq!(checks["store"]["backend"], "sqlite");
    for skill in ["governance", "knowledge", "memory"] {
        assert_eq!(checks["skills"][skill]["status"], "up", "{skill}: {body}");
        assert!(checks["skills"][skill]["latencyMs"].is_number());
    }
    // Unreachable, yet up: its breaker is closed, and the check never called it.
    assert_eq!(
        checks["providers"]["default"],
        json!({"status": "up", "circuit": "closed", "consecutiveFailures": 0, "lastErrorKind": null})
    );
    assert_eq!(body["shuttingDown"], false);
    assert_eq!(app.get("/health/live").await.status(), 200);
}

#[actix_web::test]
async fn an_open_model_circuit_degrades_health_without_failing_it() {
    let app = spawn_configured(Backend::Sqlite, |s| {
        unreachable_provider(s);
        s.agent.provider = "default".into();
        s.models.breaker_failures = 1;
    })
    .await;
    let r = app
        .rpc("SendMessage", json!({"message": user_message("hello")}))
        .await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_FAILED",
        "{r}"
    );
    let (status, body) = health(&app).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "degraded", "{body}");
    let provider = &body["checks"]["providers"]["default"];
    assert_eq!(provider["status"], "degraded", "{body}");
    assert_eq!(provider["circuit"], "open");
    assert_eq!(provider["consecutiveFailures"], 1);
    assert_eq!(provider["lastErrorKind"], "connect");
    assert!(provider["retryAfterMs"].as_u64().unwrap() > 0);
    assert_eq!(body["checks"]["store"]["status"], "up");
}

#[actix_web::test]
async fn an_unreadable_knowledge_repository_makes_health_unavailable() {
    let kb = tempfile::tempdir().unwrap();
    let repo = kb.path().join("kb");
    let app = spawn_configured(Backend::Sqlite, |s| s.knowledge.repo_path = repo.clone()).await;
    assert_eq!(health(&app).await.0, 200);
    std::fs::remove_dir_all(repo.join(".git")).unwrap();
    let (status, body) = health(&app).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "unavailable");
    assert_eq!(
        body["checks"]["skills"]["knowledge"]["status"], "down",
        "{body}"
    );
    assert_eq!(
        body["checks"]["skills"]["knowledge"]["error"],
        "skill engine unavailable"
    );
    assert!(
        !body.to_string().contains(".git"),
        "no internal detail: {body}"
    );
    assert_eq!(body["checks"]["skills"]["memory"]["status"], "up");
}

/// A skill whose engine never answers a health check.
struct Stuck(SkillInfo);

#[async_trait]
impl Skill for Stuck {
    fn info(&self) -> &SkillInfo {
        &self.0
    }
    fn tools(&self) -> Vec<ToolSpec> {
        Vec::new()
    }
    async fn invoke(&self, _: &str, _: Value, _: &Caller) -> Result<Value, SkillError> {
        Err(SkillError::NotFound("no tools".into()))
    }
    async fn health(&self) -> Result<(), String> {
        std::future::pending().await
    }
}

#[actix_web::test]
async fn a_check_past_the_health_timeout_counts_as_down() {
    let mut registry = SkillRegistry::default();
    registry.register(Arc::new(Stuck(SkillInfo::new(
        "stuck",
        "Stuck",
        "Never says how it is",
    ))));
    let agent = Agent {
        skills: SkillSource::Registry(registry),
        ..Agent::new(Arc::new(ToolRoutingExecutor))
    };
    let app = spawn_agent_in(None, agent, |s| s.health.timeout_ms = 100).await;
    let (status, body) = health(&app).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        body["checks"]["skills"]["stuck"],
        json!({
            "status": "down",
            "latencyMs": body["checks"]["skills"]["stuck"]["latencyMs"],
            "error": "no answer within health.timeout_ms",
        })
    );
}
