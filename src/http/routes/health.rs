//! Health for operators and orchestrators, and Prometheus metrics.
//!
//! `/health` makes a real round trip to the store and answers 503 when it fails;
//! `/health/live` only says the process serves HTTP; `/health/ready` says it can take
//! traffic (the store answers).

use std::time::Instant;

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::http::AppState;

pub async fn health(state: web::Data<AppState>) -> HttpResponse {
    let store = state.runtime.store();
    let started = Instant::now();
    let ping = store.ping().await;
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let store_check = match &ping {
        Ok(()) => json!({"status": "up", "backend": store.backend(), "latencyMs": latency_ms}),
        Err(e) => {
            tracing::warn!(error = %e, "health: store check failed");
            json!({"status": "down", "backend": store.backend(), "error": "store unreachable"})
        }
    };
    let body = json!({
        "status": if ping.is_ok() { "ok" } else { "unavailable" },
        "version": env!("CARGO_PKG_VERSION"),
        "checks": { "store": store_check },
        "threads": { "resident": state.runtime.resident_threads() },
    });
    if ping.is_ok() {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

pub async fn live() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

pub async fn ready(state: web::Data<AppState>) -> HttpResponse {
    match state.runtime.store().ping().await {
        Ok(()) => HttpResponse::Ok().json(json!({"status": "ready"})),
        Err(_) => HttpResponse::ServiceUnavailable().json(json!({"status": "not ready"})),
    }
}

pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render())
}
