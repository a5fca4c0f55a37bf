//! Building responses: success bodies, and errors in each HTTP binding's shape, logged
//! and counted by [`Service::report`] (internal and unavailability errors with their full
//! detail; the client only ever sees the generic text of `a2a::errors`).

use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use serde::Serialize;
use serde_json::Value;

use crate::a2a::Dialect;
use crate::a2a::errors::{
    ERROR_DOMAIN, ERROR_INFO_TYPE, jsonrpc_error_object, jsonrpc_http_status, rest_error_body,
    rest_v03_error_body,
};
use crate::error::{Error, TokenError};
use crate::http::observe::{Binding, tag};
use crate::service::Service;

/// The media type of 1.0 HTTP+JSON success bodies.
pub const A2A_JSON: &str = "application/a2a+json";

/// A JSON-RPC success envelope around `result`, written in one pass.
pub fn jsonrpc_ok(id: &Value, result: &impl Serialize) -> HttpResponse {
    let envelope = crate::a2a::jsonrpc::Success::of(id, result);
    match serde_json::to_vec(&envelope) {
        Ok(bytes) => HttpResponse::Ok()
            .content_type(actix_web::http::header::ContentType::json())
            .body(bytes),
        Err(e) => unencodable(e),
    }
}

/// A JSON-RPC error envelope, with the status `a2a::errors::jsonrpc_http_status` gives.
pub fn jsonrpc_err(
    id: &Value,
    err: &Error,
    method: &'static str,
    service: &Service,
) -> HttpResponse {
    let err = &service.report(err, method);
    let status =
        StatusCode::from_u16(jsonrpc_http_status(err)).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status);
    challenge_headers(err, &mut response);
    response.json(serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": jsonrpc_error_object(err),
    }))
}

/// `Retry-After` when the client should come back later, `WWW-Authenticate` when it
/// should come back with credentials. An unavailability also closes the connection: a
/// node that is out of room (`streaming.max_streams`), draining or without its database
/// sheds the connection instead of keeping it idle, so the next one (a health check, a
/// send) finds a place.
fn challenge_headers(err: &Error, response: &mut actix_web::HttpResponseBuilder) {
    match err {
        Error::Unavailable {
            retry_after_secs, ..
        } => {
            response.insert_header(("Retry-After", retry_after_secs.to_string()));
            response.force_close();
        }
        Error::RateLimited {
            retry_after_secs, ..
        } => {
            response.insert_header(("Retry-After", retry_after_secs.to_string()));
        }
        Error::Unauthenticated(_) => {
            response.insert_header(("WWW-Authenticate", r#"Bearer realm="agent-a2a""#));
        }
        Error::InvalidToken(reason) => {
            response.insert_header(("WWW-Authenticate", invalid_token_challenge(*reason)));
        }
        _ => {}
    }
}

/// The RFC 6750 challenge of a refused bearer token. The description is one of a fixed
/// set of plain phrases, so it needs no quoting beyond the surrounding quotes.
fn invalid_token_challenge(reason: TokenError) -> String {
    format!(
        r#"Bearer realm="agent-a2a", error="invalid_token", error_description="{}""#,
        reason.description()
    )
}

/// A REST success body.
pub fn rest_ok(body: &impl Serialize, content_type: &'static str) -> HttpResponse {
    match serde_json::to_vec(body) {
        Ok(bytes) => HttpResponse::Ok().content_type(content_type).body(bytes),
        Err(e) => unencodable(e),
    }
}

/// An answer serde could not write (never, for the views `a2a::encode` makes: they write
/// strings, numbers, lists and objects with string keys only).
fn unencodable(e: serde_json::Error) -> HttpResponse {
    tracing::error!(error = %e, "could not encode an answer");
    HttpResponse::InternalServerError().finish()
}

/// A REST error: `google.rpc.Status` JSON with the mapped HTTP status.
pub fn rest_err(
    err: &Error,
    method: &'static str,
    service: &Service,
    dialect: Dialect,
) -> HttpResponse {
    let err = &service.report(err, method);
    let (status, body) = match dialect {
        Dialect::V03Rest => rest_v03_error_body(err),
        _ => rest_error_body(err),
    };
    let mut response = HttpResponse::build(
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
    );
    challenge_headers(err, &mut response);
    response
        .content_type("application/json")
        .body(body.to_string())
}

/// 405 for a method the path does not serve: `Allow` names those it does, and the body
/// is a `google.rpc.Status` like every REST error (reason `METHOD_NOT_ALLOWED`).
pub fn method_not_allowed(req: &actix_web::HttpRequest, allow: &'static str) -> HttpResponse {
    let message = format!(
        "{} is not served at {}; allowed: {allow}",
        req.method(),
        req.path()
    );
    let body = serde_json::json!({"error": {
        "code": 405,
        "status": "UNIMPLEMENTED",
        "message": message,
        "details": [{
            "@type": ERROR_INFO_TYPE,
            "reason": "METHOD_NOT_ALLOWED",
            "domain": ERROR_DOMAIN,
            "metadata": {"method": req.method().as_str(), "allow": allow},
        }],
    }});
    let mut response = HttpResponse::MethodNotAllowed()
        .insert_header((actix_web::http::header::ALLOW, allow))
        .content_type("application/json")
        .body(body.to_string());
    tag(&mut response, Binding::Rest, "unknown");
    response
}

/// Tells the client an extension it asked for is active (`A2A-Extensions`).
pub fn echo_extension(response: &mut HttpResponse, uri: &'static str) {
    response.headers_mut().insert(
        actix_web::http::header::HeaderName::from_static("a2a-extensions"),
        actix_web::http::header::HeaderValue::from_static(uri),
    );
}
