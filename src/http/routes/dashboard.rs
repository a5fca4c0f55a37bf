//! The operators' dashboard: one self-contained page (`/dashboard`, its script and style
//! sheet compiled into the binary) that draws live charts from `/dashboard/stats.json`,
//! the per-second view of `telemetry::stats`.
//!
//! Nothing is loaded from another origin: the Content-Security-Policy allows scripts,
//! styles and fetches from this server only, no inline script or style at all, and no
//! framing. The page is off when `metrics.dashboard` is false (the routes are then not
//! registered).

use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, HttpResponseBuilder, web};

use crate::telemetry::stats;

const PAGE: &str = include_str!("../assets/dashboard.html");
const SCRIPT: &str = include_str!("../assets/dashboard.js");
const STYLE: &str = include_str!("../assets/dashboard.css");

/// Same-origin scripts, styles and fetches; a `data:` image for the (empty) favicon.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

pub fn configure(cfg: &mut web::ServiceConfig) {
    use super::{READ, read, resource};
    cfg.service(resource("/dashboard", READ).route(read().to(page)))
        .service(resource("/dashboard/dashboard.js", READ).route(read().to(script)))
        .service(resource("/dashboard/dashboard.css", READ).route(read().to(style)))
        .service(resource("/dashboard/stats.json", READ).route(read().to(stats_json)));
}

/// A response with the page's security headers. Everything is revalidated on each load:
/// the assets change with the binary, and the numbers every second.
fn secured(mut response: HttpResponseBuilder) -> HttpResponseBuilder {
    response
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header(("Cross-Origin-Opener-Policy", "same-origin"))
        .insert_header(("Cross-Origin-Resource-Policy", "same-origin"))
        .insert_header((header::CACHE_CONTROL, "no-store"));
    response
}

async fn page() -> HttpResponse {
    secured(HttpResponse::Ok())
        .content_type("text/html; charset=utf-8")
        .body(PAGE)
}

async fn script() -> HttpResponse {
    secured(HttpResponse::Ok())
        .content_type("text/javascript; charset=utf-8")
        .body(SCRIPT)
}

async fn style() -> HttpResponse {
    secured(HttpResponse::Ok())
        .content_type("text/css; charset=utf-8")
        .body(STYLE)
}

/// The dashboard's figures of this node; in a cluster also which node this is (each node
/// serves its own page: the Grafana dashboard adds the nodes up).
async fn stats_json(state: web::Data<crate::http::AppState>) -> HttpResponse {
    let mut body = serde_json::to_value(stats::global().snapshot()).unwrap_or_default();
    if let Some(cluster) = state.service.runtime.cluster() {
        body["cluster"] = serde_json::json!({
            "node": cluster.node_id(),
            "leader": cluster.is_leader(),
            "liveNodes": cluster.live_nodes().len(),
        });
    }
    secured(HttpResponse::Ok()).json(body)
}
