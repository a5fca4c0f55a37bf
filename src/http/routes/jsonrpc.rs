//! The JSON-RPC 2.0 binding at `/`: every dialect's method names on one endpoint.

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::Value;

use crate::a2a::{self, jsonrpc::parse_request};
use crate::error::Error;
use crate::http::AppState;
use crate::http::body::{check_json_content_type, dialect, read_limited};
use crate::http::observe::{Binding, tag};
use crate::http::respond::{jsonrpc_err, jsonrpc_ok};
use crate::http::sse::{self, Framing};
use crate::service::operation::{self, Reply};

pub async fn handle(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    let (mut response, method) = dispatch(&req, payload, &state).await;
    tag(&mut response, Binding::JsonRpc, method);
    response
}

async fn dispatch(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
) -> (HttpResponse, &'static str) {
    let unknown = "unknown";
    let retry = &*state.service;
    let body = match read_limited(req, payload, state.max_body_bytes).await {
        Ok(body) => body,
        Err(e) => return (jsonrpc_err(&Value::Null, &e, unknown, retry), unknown),
    };
    // A wrong content type is its own error (-32005), not a parse error; echo the id
    // when the body happens to be readable.
    if let Err(e) = check_json_content_type(req, false) {
        let id = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("id").cloned())
            .filter(|id| id.is_string() || id.is_number())
            .unwrap_or(Value::Null);
        return (jsonrpc_err(&id, &e, unknown, retry), unknown);
    }
    let rpc = match parse_request(&body) {
        Ok(rpc) => rpc,
        Err((id, e)) => return (jsonrpc_err(&id, &e, unknown, retry), unknown),
    };
    // Before the method is even looked up: nothing about the server answers a stranger.
    let principal = match state.service.gate.admit(req).await {
        Ok(principal) => principal,
        Err(e) => return (jsonrpc_err(&rpc.id, &e, unknown, retry), unknown),
    };
    let Some((op, shape)) = a2a::method(&rpc.method) else {
        let e = Error::MethodNotFound(rpc.method.clone());
        return (jsonrpc_err(&rpc.id, &e, unknown, retry), unknown);
    };
    let name = operation::name(op);
    let dialect = match dialect(req, shape) {
        Ok(d) => d,
        Err(e) => return (jsonrpc_err(&rpc.id, &e, name, retry), name),
    };
    let generations = operation::generations_active(dialect, req);
    let mut response =
        match operation::execute(&state.service, &principal, op, dialect, &rpc.params, req).await {
            Ok(Reply::Json(result)) => jsonrpc_ok(&rpc.id, &result),
            Ok(Reply::Stream(events)) => sse::respond(
                events,
                dialect,
                Framing::JsonRpc(rpc.id.clone()),
                state.keep_alive_secs,
                req,
            ),
            Err(e) => jsonrpc_err(&rpc.id, &e, name, retry),
        };
    if generations {
        crate::http::respond::echo_extension(
            &mut response,
            crate::a2a::generations::GENERATIONS_EXTENSION,
        );
    }
    (response, name)
}
