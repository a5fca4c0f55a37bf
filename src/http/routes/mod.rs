//! The URL space, laid out like the API it serves: JSON-RPC at `/`, HTTP+JSON 1.0
//! unprefixed, HTTP+JSON 0.3 under `/v1`, the seed's aliases, the agent card, health,
//! metrics and the operators' dashboard. Every A2A operation is executed by
//! `service::operation::execute`, so the bindings behave identically and differ only in
//! framing.

mod card;
mod cluster;
mod dashboard;
mod health;
mod jsonrpc;
mod rest;

use actix_web::{HttpRequest, Resource, Route, guard, web};

use crate::http::respond::method_not_allowed;

/// Every route; the dashboard's only when `dashboard` is on (`metrics.dashboard`).
///
/// Each path is one resource: a method it does not serve answers 405 with `Allow`, and
/// `HEAD` is served wherever `GET` is (the headers of the `GET` answer, no body).
pub fn configure(cfg: &mut web::ServiceConfig, dashboard: bool) {
    if dashboard {
        cfg.configure(self::dashboard::configure);
    }
    cfg.service(resource("/", POST).route(web::post().to(jsonrpc::handle)))
        .service(resource("/.well-known/agent-card.json", READ).route(read().to(card::public_card)))
        .service(resource("/.well-known/agent.json", READ).route(read().to(card::public_card)))
        .service(resource("/.well-known/jwks.json", READ).route(read().to(card::signing_keys)))
        .service(resource("/health", READ).route(read().to(health::health)))
        .service(resource("/health/live", READ).route(read().to(health::live)))
        .service(resource("/health/ready", READ).route(read().to(health::ready)))
        .service(resource("/metrics", READ).route(read().to(health::metrics)))
        // The seed's aliases first: `/tasks/{tail}` would otherwise take `/tasks/send`.
        .service(resource("/tasks/send", POST).route(web::post().to(rest::seed_send)))
        .service(resource("/tasks/{id}/get", READ).route(read().to(rest::seed_get)))
        .service(web::scope(crate::cluster::forward::PREFIX).configure(cluster::configure))
        .service(web::scope("/v1").configure(rest::configure))
        .configure(rest::configure)
        .default_service(web::to(rest::not_found));
}

/// `Allow` of a path served by `POST` only.
const POST: &str = "POST";
/// `Allow` of a path served by `GET` (and so `HEAD`).
const READ: &str = "GET, HEAD";

/// `GET`, and `HEAD`: actix-web answers a `HEAD` with the headers of the same handler's
/// answer and no body.
fn read() -> Route {
    web::route().guard(guard::Any(guard::Get()).or(guard::Head()))
}

/// The resource at `path`, answering a method none of its routes serves with 405 and
/// `Allow: allow`.
fn resource(path: &str, allow: &'static str) -> Resource {
    web::resource(path).default_service(web::to(move |req: HttpRequest| async move {
        method_not_allowed(&req, allow)
    }))
}
