//! The HTTP bindings on actix-web: JSON-RPC and HTTP+JSON routes, SSE framing, body
//! limits, request metrics, health, the agent card and the operators' dashboard.
//!
//! [`server`] builds the HTTP server over an [`AppState`]; `startup` assembles the
//! process (store, runtime, this server and the gRPC one) and runs it.

mod body;
mod observe;
mod respond;
mod routes;
mod sse;
mod state;

use std::net::TcpListener;

use actix_web::dev::Server;
use actix_web::middleware::{NormalizePath, TrailingSlash, from_fn};
use actix_web::{App, HttpServer, web};

pub use state::AppState;

/// The HTTP server on `listener` with `workers` worker threads; it must be driven (e.g.
/// by `actix_web::rt::spawn`). Signals are not its business: `startup::serve` drains
/// the runtime and every binding together.
pub fn server(
    state: AppState,
    listener: TcpListener,
    workers: usize,
    shutdown_timeout_secs: u64,
    dashboard: bool,
) -> std::io::Result<Server> {
    let state = web::Data::new(state);
    Ok(HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            // Outermost last: paths are normalised before they are matched and measured.
            .wrap(from_fn(observe::record))
            .wrap(NormalizePath::new(TrailingSlash::Trim))
            .configure(|cfg| routes::configure(cfg, dashboard))
    })
    .workers(workers)
    .shutdown_timeout(shutdown_timeout_secs)
    .disable_signals()
    .listen(listener)?
    .run())
}
