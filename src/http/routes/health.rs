//! Health for operators and orchestrators, and Prometheus metrics.
//!
//! - `/health` checks every dependency (`runtime::health`): the store with a real round
//!   trip, each skill's engine (the knowledge repository, the memory table), and each
//!   model provider's circuit breaker (never a call to the provider). `"ok"` and 200 when
//!   all are up; `"degraded"` and 200 when only providers are not serving; `"unavailable"`
//!   and 503 when the store or a skill is down.
//! - `/health/live` says the process serves HTTP (restart me if this fails).
//! - `/health/ready` says it should get traffic: start-up recovery has finished, no
//!   shutdown has begun, the node holds its cluster lease, and the store answers. 503
//!   otherwise, with the reason — at once, without a round trip, when the store's calls
//!   found Postgres silent (`store::Silence`) or the lease is not held. Ready, it
//!   names the outside servers the tools reach that are not connected (`disconnected`:
//!   MCP servers), without failing.
//!
//! Error details stay in the log; the bodies name only what is down.

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::http::AppState;
use crate::runtime::model_actor::Circuit;
use crate::runtime::{Check, Overall, ProviderHealth, Recovery};

pub async fn health(state: web::Data<AppState>) -> HttpResponse {
    let runtime = &state.service.runtime;
    let report = runtime.lifecycle().health().await;
    let overall = report.overall();
    let mut store = check_json(&report.store);
    store["backend"] = json!(runtime.store().backend());
    let skills: Map<String, Value> = report
        .skills
        .iter()
        .map(|(id, check)| (id.clone(), check_json(check)))
        .collect();
    let providers: Map<String, Value> = report
        .providers
        .iter()
        .map(|p| (p.name.clone(), provider_json(p)))
        .collect();
    let body = json!({
        "status": match overall {
            Overall::Ok => "ok",
            Overall::Degraded => "degraded",
            Overall::Unavailable => "unavailable",
        },
        "version": env!("CARGO_PKG_VERSION"),
        "checks": { "store": store, "skills": skills, "providers": providers },
        "threads": { "resident": runtime.resident_threads() },
        "recovery": recovery_json(runtime.lifecycle().recovery()),
        "shuttingDown": runtime.lifecycle().is_leaving(),
    });
    match overall {
        Overall::Ok | Overall::Degraded => HttpResponse::Ok().json(body),
        Overall::Unavailable => HttpResponse::ServiceUnavailable().json(body),
    }
}

fn check_json(check: &Check) -> Value {
    let mut value = json!({
        "status": if check.up { "up" } else { "down" },
        "latencyMs": check.latency_ms,
    });
    if let Some(problem) = check.problem {
        value["error"] = json!(problem);
    }
    value
}

fn provider_json(provider: &ProviderHealth) -> Value {
    let Some(breaker) = &provider.breaker else {
        return json!({"status": "down", "error": "model actor did not answer"});
    };
    let mut value = json!({
        "status": if provider.serving() { "up" } else { "degraded" },
        "circuit": match breaker.circuit {
            Circuit::Closed => "closed",
            Circuit::Open { .. } => "open",
            Circuit::HalfOpen => "half_open",
        },
        "consecutiveFailures": breaker.consecutive_failures,
        "lastErrorKind": breaker.last_error,
    });
    if let Circuit::Open { retry_after } = breaker.circuit {
        value["retryAfterMs"] = json!(retry_after.as_millis() as u64);
    }
    value
}

fn recovery_json(recovery: Recovery) -> Value {
    match recovery {
        Recovery::Pending => json!({"state": "pending"}),
        Recovery::Running => json!({"state": "running"}),
        Recovery::Done { recovered, failed } => {
            json!({"state": "done", "recovered": recovered, "failed": failed})
        }
    }
}

pub async fn live() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

pub async fn ready(state: web::Data<AppState>) -> HttpResponse {
    let runtime = &state.service.runtime;
    if runtime.lifecycle().is_leaving() {
        return HttpResponse::ServiceUnavailable().json(json!({"status": "shutting down"}));
    }
    // At once, without a round trip: the database went silent, or the lease is not held.
    if runtime.lifecycle().store_silent() {
        runtime.lifecycle().probe_store();
        return HttpResponse::ServiceUnavailable().json(json!({
            "status": "not ready",
            "store": {"status": "down", "error": "not answering"},
        }));
    }
    if !runtime.lifecycle().holds_lease() {
        return HttpResponse::ServiceUnavailable().json(json!({
            "status": "not ready",
            "cluster": {"lease": "not held"},
        }));
    }
    if !runtime.lifecycle().is_ready() {
        return HttpResponse::ServiceUnavailable().json(json!({
            "status": "starting",
            "recovery": recovery_json(runtime.lifecycle().recovery()),
        }));
    }
    let store = runtime.lifecycle().check_store().await;
    if store.up {
        let mut body = json!({"status": "ready"});
        // Outside servers the agent's tools reach that are down: named, not failing
        // readiness (their calls fail; this server still serves).
        let down: Vec<String> = runtime
            .tools()
            .disconnected()
            .into_iter()
            .map(|(_, server)| server)
            .collect();
        if !down.is_empty() {
            body["disconnected"] = json!(down);
        }
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(json!({
            "status": "not ready",
            "store": check_json(&store),
        }))
    }
}

/// Prometheus exposition; with `metrics.bearer_token` set, only for that bearer token
/// (compared as SHA-256 digests, in constant time).
pub async fn metrics(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    if let Some(expected) = &state.metrics_token {
        let presented = req
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| Sha256::digest(token.trim().as_bytes()));
        let allowed = presented.is_some_and(|digest| bool::from(digest.as_slice().ct_eq(expected)));
        if !allowed {
            return HttpResponse::Unauthorized()
                .insert_header(("WWW-Authenticate", r#"Bearer realm="agent-a2a metrics""#))
                .content_type("text/plain")
                .body("metrics need \"Authorization: Bearer <metrics.bearer_token>\"\n");
        }
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render())
}
