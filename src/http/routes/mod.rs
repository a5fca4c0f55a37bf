//! The URL space, laid out like the API it serves: JSON-RPC at `/`, HTTP+JSON 1.0
//! unprefixed, HTTP+JSON 0.3 under `/v1`, the seed's aliases, the agent card, health,
//! metrics and the operators' dashboard. Every A2A operation is executed by
//! `service::operation::execute`, so the bindings behave identically and differ only in
//! framing.

mod card;
mod dashboard;
mod health;
mod jsonrpc;
mod rest;

use actix_web::web;

/// Every route; the dashboard's only when `dashboard` is on (`metrics.dashboard`).
pub fn configure(cfg: &mut web::ServiceConfig, dashboard: bool) {
    if dashboard {
        cfg.configure(self::dashboard::configure);
    }
    cfg.route("/", web::post().to(jsonrpc::handle))
        .route(
            "/.well-known/agent-card.json",
            web::get().to(card::public_card),
        )
        .route("/.well-known/agent.json", web::get().to(card::public_card))
        .route("/health", web::get().to(health::health))
        .route("/health/live", web::get().to(health::live))
        .route("/health/ready", web::get().to(health::ready))
        .route("/metrics", web::get().to(health::metrics))
        // The seed's aliases first: `/tasks/{tail}` would otherwise take `/tasks/send`.
        .route("/tasks/send", web::post().to(rest::seed_send))
        .route("/tasks/{id}/get", web::get().to(rest::seed_get))
        .service(web::scope("/v1").configure(rest::configure))
        .configure(rest::configure)
        .default_service(web::to(rest::not_found));
}
