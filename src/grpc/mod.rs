//! The gRPC binding: `lf.a2a.v1.A2AService` (A2A 1.0) and `grpc.health.v1.Health` on
//! their own listener (`server.grpc_bind`, plaintext HTTP/2), beside the HTTP bindings
//! and over the same operations (`service`).
//!
//! Connections are accepted by an actix-server with as many workers as the HTTP server
//! has; each worker is an actix arbiter, so a request's new thread actor starts on the
//! worker that took the call, exactly as on HTTP, and serves the connection with hyper's
//! HTTP/2 and tonic's routing. The generated types and service trait are the official
//! Rust SDK's (`a2a_pb`); the service is routed by our own `router`, whose codec answers
//! request bytes that are not protobuf as the client's error (`INVALID_ARGUMENT`), not
//! the server's.
//!
//! **Bounds.** A request message larger than `server.max_body_bytes` is refused by the
//! framing before it is decoded (`OUT_OF_RANGE`, tonic's own status for it). A
//! connection carries at most `server.grpc_max_streams_per_connection` calls at once
//! (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`: a client past it waits).
//! **Shutdown.** [`GrpcServer::go_away`] tells every connection to finish: each sends an
//! HTTP/2 GOAWAY, lets the calls in flight end (event streams end as the runtime drains)
//! and closes; the workers stop after them, within `server.shutdown_timeout_secs`.

mod codec;
mod convert;
mod direct;
mod gather;
mod health;
mod router;
mod service;
mod status;
#[cfg(test)]
mod tests;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::Server;
use actix_web::rt::net::TcpStream;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::sync::watch;
use tonic::service::Routes;
use tonic::transport::server::TcpConnectInfo;
use tonic_health::pb::health_server::HealthServer;
use tower::ServiceExt;

pub use convert::EVENT_ID_KEY;
pub use health::A2A_SERVICE;

use crate::service::Service;
use crate::service::client_addr::{TrustedProxies, read_proxy_header};

/// A started gRPC server: the actix-server to drive, and the switch that makes every
/// connection finish.
pub struct GrpcServer {
    pub addr: SocketAddr,
    pub server: Server,
    pub go_away: GoAway,
}

/// Tells every open connection to finish its calls and close.
#[derive(Clone)]
pub struct GoAway(Arc<watch::Sender<bool>>);

impl GoAway {
    pub fn go_away(&self) {
        self.0.send_replace(true);
    }
}

/// The gRPC server's settings.
pub struct Limits {
    /// Worker threads (arbiters), as many as the HTTP server's.
    pub workers: usize,
    /// `server.max_body_bytes`: the largest request message.
    pub max_message_bytes: usize,
    /// `server.grpc_max_streams_per_connection`.
    pub max_streams_per_connection: u32,
    /// Connections each worker accepts at once (`server.max_connections`).
    pub max_connections_per_worker: usize,
    /// `server.shutdown_timeout_secs`.
    pub shutdown_timeout_secs: u64,
    /// `server.trusted_proxies`, whose PROXY headers are read.
    pub trusted_proxies: TrustedProxies,
    /// `server.proxy_header_timeout_ms`.
    pub proxy_header_timeout: Duration,
}

/// A call's extension: the client a trusted proxy named in the connection's PROXY header.
#[derive(Debug, Clone, Copy)]
struct ProxiedClient(SocketAddr);

/// The gRPC server on `listener`.
pub fn server(
    service: Arc<Service>,
    listener: TcpListener,
    limits: Limits,
) -> std::io::Result<GrpcServer> {
    let Limits {
        workers,
        max_message_bytes,
        max_streams_per_connection,
        max_connections_per_worker,
        shutdown_timeout_secs,
        trusted_proxies,
        proxy_header_timeout,
    } = limits;
    let trusted = Arc::new(trusted_proxies);
    let addr = listener.local_addr()?;
    let runtime = service.runtime.clone();
    let routes = Routes::new(router::A2aRouter::new(
        service::A2a::new(service),
        max_message_bytes,
    ))
    .add_service(HealthServer::new(health::HealthService::new(runtime)))
    .prepare();
    let (go_away, stop) = watch::channel(false);
    let server = actix_server::Server::build()
        .workers(workers)
        .max_concurrent_connections(max_connections_per_worker)
        .shutdown_timeout(shutdown_timeout_secs)
        .disable_signals()
        .listen("grpc", listener, move || {
            let routes = routes.clone();
            let stop = stop.clone();
            let trusted = trusted.clone();
            actix_service::fn_service(move |stream: TcpStream| {
                connection(
                    stream,
                    routes.clone(),
                    max_streams_per_connection,
                    stop.clone(),
                    (trusted.clone(), proxy_header_timeout),
                )
            })
        })?
        .run();
    Ok(GrpcServer {
        addr,
        server,
        go_away: GoAway(Arc::new(go_away)),
    })
}

/// Runs a connection's streams on the worker that accepted it, inside its arbiter (a
/// plain `tokio::spawn` would leave the arbiter's context, where the thread actors a
/// call starts live).
#[derive(Clone, Copy)]
struct OnThisWorker;

impl<F> hyper::rt::Executor<F> for OnThisWorker
where
    F: std::future::Future + 'static,
{
    fn execute(&self, future: F) {
        actix_web::rt::spawn(async move {
            future.await;
        });
    }
}

/// `io` served as an HTTP/2 connection by `service`, its writes gathered until h2 flushes
/// ([`gather`]: a unary answer's frames leave in one write).
fn http2<I, S, B>(
    io: I,
    service: S,
    max_streams: u32,
) -> hyper::server::conn::http2::Connection<TokioIo<gather::Gathered<I>>, S, OnThisWorker>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    OnThisWorker: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    hyper::server::conn::http2::Builder::new(OnThisWorker)
        .max_concurrent_streams(max_streams)
        // gRPC reads no `date`; each answer would carry it, HPACK-encoded.
        .auto_date_header(false)
        .serve_connection(TokioIo::new(gather::Gathered::new(io)), service)
}

/// Serves one HTTP/2 connection until the peer closes it, or until a GOAWAY asked for
/// and its calls in flight are over.
async fn connection(
    mut stream: TcpStream,
    routes: Routes,
    max_streams: u32,
    mut stop: watch::Receiver<bool>,
    (trusted, header_timeout): (Arc<TrustedProxies>, Duration),
) -> Result<(), std::convert::Infallible> {
    let info = TcpConnectInfo {
        local_addr: stream.local_addr().ok(),
        remote_addr: stream.peer_addr().ok(),
    };
    // A trusted proxy's PROXY header comes before the HTTP/2 preface.
    let proxied = match trusted.is_empty() {
        true => None,
        false => match read_proxy_header(&mut stream, &trusted, header_timeout).await {
            Ok(proxied) => proxied.map(ProxiedClient),
            Err(e) => {
                tracing::debug!(peer = ?info.remote_addr, error = %e, "gRPC connection dropped: bad PROXY header");
                return Ok(());
            }
        },
    };
    // Small frames (a unary answer) must not wait for Nagle.
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(info.clone());
        if let Some(proxied) = proxied {
            request.extensions_mut().insert(proxied);
        }
        routes.clone().oneshot(request)
    });
    let connection = http2(stream, service, max_streams);
    tokio::pin!(connection);
    let asked = async {
        if stop.wait_for(|stop| *stop).await.is_err() {
            // The switch is gone with its server: only the peer ends this connection.
            std::future::pending::<()>().await;
        }
    };
    let served = tokio::select! {
        served = connection.as_mut() => served,
        () = asked => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = served {
        tracing::debug!(error = %e, "gRPC connection ended with an error");
    }
    Ok(())
}
