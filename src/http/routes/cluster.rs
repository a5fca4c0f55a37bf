//! The calls between the nodes of a cluster (`crate::cluster::forward`): a node forwards
//! what changes a thread to the node that owns it. Served only in cluster mode and only
//! with the cluster's secret; anything else is 404, as if the path did not exist.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::cluster::forward::{
    Answer, CancelCall, CreatePushCall, DeletePushCall, FROM_HEADER, SendCall,
};
use crate::http::AppState;
use crate::http::body::read_limited;
use crate::runtime::Runtime;
use crate::telemetry::trace;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/send").route(web::post().to(send)))
        .service(web::resource("/cancel").route(web::post().to(cancel)))
        .service(web::resource("/push/create").route(web::post().to(create_push)))
        .service(web::resource("/push/delete").route(web::post().to(delete_push)));
}

/// The call's body, once the caller proved to be a node of the cluster.
async fn admitted<B: DeserializeOwned>(
    req: &HttpRequest,
    state: &AppState,
    body: web::Payload,
) -> Result<B, HttpResponse> {
    let Some(cluster) = state.service.runtime.cluster() else {
        return Err(HttpResponse::NotFound().finish());
    };
    let authorization = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if !cluster.peer().admits(authorization) {
        tracing::warn!(peer = ?req.peer_addr(), "a cluster call without the cluster's secret");
        return Err(HttpResponse::NotFound().finish());
    }
    // A forwarded message is re-encoded: room for the encoding's difference.
    let bytes = read_limited(req, body, state.max_body_bytes.saturating_mul(2))
        .await
        .map_err(|_| HttpResponse::PayloadTooLarge().finish())?;
    serde_json::from_slice(&bytes).map_err(|e| {
        tracing::warn!(error = %e, "an unreadable cluster call");
        HttpResponse::BadRequest().body(e.to_string())
    })
}

fn answer<T: Serialize>(req: &HttpRequest, result: crate::error::Result<T>) -> HttpResponse {
    if let Err(e) = &result {
        let from = req
            .headers()
            .get(FROM_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("?");
        tracing::debug!(from, error = %e, "a forwarded call failed");
    }
    HttpResponse::build(StatusCode::OK).json(Answer::from(result))
}

/// Runs an admitted call with the runtime and answers with its result — inside a span
/// that continues the forwarding node's trace when traces are exported.
async fn serve<C, T>(
    (req, state, body): (HttpRequest, web::Data<AppState>, web::Payload),
    call_name: &'static str,
    run: impl AsyncFnOnce(&Runtime, C) -> crate::error::Result<T>,
) -> HttpResponse
where
    C: DeserializeOwned,
    T: Serialize,
{
    let call = match admitted(&req, &state, body).await {
        Ok(call) => call,
        Err(refused) => return refused,
    };
    let span = trace::request(call_name, "cluster", &req);
    let result = run(&state.service.runtime, call)
        .instrument(span.clone())
        .await;
    if let Err(e) = &result {
        trace::failed(&span, crate::a2a::errors::map_error(e).reason);
    }
    answer(&req, result)
}

async fn send(req: HttpRequest, state: web::Data<AppState>, body: web::Payload) -> HttpResponse {
    serve(
        (req, state, body),
        "cluster.send",
        async |rt, c: SendCall| rt.sends().serve(&c.tenant, c.cmd, c.mode).await,
    )
    .await
}

async fn cancel(req: HttpRequest, state: web::Data<AppState>, body: web::Payload) -> HttpResponse {
    serve(
        (req, state, body),
        "cluster.cancel",
        async |rt, c: CancelCall| rt.tasks().serve_cancel(&c.tenant, &c.task_id).await,
    )
    .await
}

async fn create_push(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Payload,
) -> HttpResponse {
    serve(
        (req, state, body),
        "cluster.push.create",
        async |rt, c: CreatePushCall| {
            rt.push_configs()
                .serve_create(&c.tenant, &c.task_id, c.spec)
                .await
        },
    )
    .await
}

async fn delete_push(
    req: HttpRequest,
    state: web::Data<AppState>,
    body: web::Payload,
) -> HttpResponse {
    serve(
        (req, state, body),
        "cluster.push.delete",
        async |rt, c: DeletePushCall| {
            rt.push_configs()
                .serve_delete(&c.tenant, &c.task_id, &c.config_id)
                .await
        },
    )
    .await
}
