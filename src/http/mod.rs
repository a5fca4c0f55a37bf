//! The HTTP bindings on actix-web: JSON-RPC and HTTP+JSON routes, SSE framing, body
//! limits, request metrics, health, the agent card and the operators' dashboard.
//!
//! [`server`] builds the HTTP server over an [`AppState`]; `startup` assembles the
//! process (store, runtime, this server and the gRPC one) and runs it.

mod body;
mod connection;
mod deadline;
mod observe;
mod respond;
mod routes;
mod sse;
mod state;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_http::{HttpService, KeepAlive, Protocol};
use actix_service::{IntoServiceFactory, ServiceFactoryExt, fn_service, map_config};
use actix_web::dev::{AppConfig, Server};
use actix_web::middleware::{NormalizePath, TrailingSlash, from_fn};
use actix_web::rt::net::TcpStream;
use actix_web::{App, web};

pub use state::AppState;

use crate::service::client_addr::{TrustedProxies, read_proxy_header};
use connection::{Connection, ProxiedClient};

/// The HTTP server's settings.
pub struct Limits {
    /// Worker threads.
    pub workers: usize,
    /// Connections each worker accepts at once (`server.max_connections`): past it the
    /// worker stops accepting until one closes.
    pub max_connections_per_worker: usize,
    /// `server.shutdown_timeout_secs`.
    pub shutdown_timeout_secs: u64,
    /// `metrics.dashboard`.
    pub dashboard: bool,
    /// `server.trusted_proxies`, whose PROXY headers are read.
    pub trusted_proxies: TrustedProxies,
    /// `server.proxy_header_timeout_ms`.
    pub proxy_header_timeout: Duration,
}

/// The HTTP server on `listener`; it must be driven (e.g. by `actix_web::rt::spawn`).
/// Signals are not its business: `startup::serve` drains the runtime and every binding
/// together.
///
/// It is actix-web's `HttpServer` taken apart (same defaults: keep-alive 5 s, 5 s for a
/// request's head, 1 s to close), because a connection from a trusted proxy may begin
/// with a PROXY header that must be read before HTTP starts.
pub fn server(state: AppState, listener: TcpListener, limits: Limits) -> std::io::Result<Server> {
    let Limits {
        workers,
        max_connections_per_worker,
        shutdown_timeout_secs,
        dashboard,
        trusted_proxies,
        proxy_header_timeout,
    } = limits;
    let addr = listener.local_addr()?;
    let state = web::Data::new(state);
    let trusted = Arc::new(trusted_proxies);
    let builder = actix_server::Server::build();
    let shutdown = builder.graceful_shutdown_signal();
    Ok(builder
        .workers(workers)
        .max_concurrent_connections(max_connections_per_worker)
        .shutdown_timeout(shutdown_timeout_secs)
        .disable_signals()
        .listen("http", listener, move || {
            let state = state.clone();
            let app = App::new()
                .app_data(state)
                // Outermost last: paths are normalised before they are matched and measured.
                .wrap(from_fn(deadline::scope))
                .wrap(from_fn(observe::record))
                .wrap(NormalizePath::new(TrailingSlash::Trim))
                .configure(|cfg| routes::configure(cfg, dashboard));
            let shutdown = shutdown.clone();
            let http = HttpService::build()
                .keep_alive(KeepAlive::default())
                .client_request_timeout(Duration::from_secs(5))
                .client_disconnect_timeout(Duration::from_secs(1))
                .local_addr(addr)
                .graceful_shutdown_signal(move || {
                    let shutdown = shutdown.clone();
                    async move { shutdown.notified().await }
                })
                .on_connect_ext(|io: &Connection, data| {
                    if let Some(client) = io.proxied() {
                        data.insert(ProxiedClient(client));
                    }
                })
                .finish(map_config(
                    app.into_factory().map_err(|e| e.error_response()),
                    move |_| AppConfig::default(),
                ));
            let trusted = trusted.clone();
            fn_service(move |stream: TcpStream| {
                accept(stream, trusted.clone(), proxy_header_timeout)
            })
            .and_then(http)
        })?
        .run())
}

/// A connection as HTTP takes it: the PROXY header of a trusted proxy read off it first.
async fn accept(
    mut stream: TcpStream,
    trusted: Arc<TrustedProxies>,
    timeout: Duration,
) -> Result<(Connection, Protocol, Option<std::net::SocketAddr>), actix_http::error::DispatchError>
{
    let peer = stream.peer_addr().ok();
    let proxied = match trusted.is_empty() {
        true => None,
        false => read_proxy_header(&mut stream, &trusted, timeout)
            .await
            .map_err(|e| {
                tracing::debug!(peer = ?peer, error = %e, "connection dropped: bad PROXY header");
                actix_http::error::DispatchError::Io(e)
            })?,
    };
    Ok((Connection::new(stream, proxied), Protocol::Http1, peer))
}
