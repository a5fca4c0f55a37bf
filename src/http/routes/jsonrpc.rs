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
    // The common 1.0 send is read straight into the domain; anything else, the general way.
    let rpc = match a2a::fast_send(&body) {
        Some(fast) => Parsed::Fast(Box::new(fast)),
        None => match parse_request(&body) {
            Ok(rpc) => Parsed::General(rpc),
            Err((id, e)) => return (jsonrpc_err(&id, &e, unknown, retry), unknown),
        },
    };
    // Before the method is even looked up: nothing about the server answers a stranger.
    let principal = match state.service.gate.admit(req).await {
        Ok(principal) => principal,
        Err(e) => return (jsonrpc_err(rpc.id(), &e, unknown, retry), unknown),
    };
    let Some((op, shape)) = a2a::method(rpc.method()) else {
        let e = Error::MethodNotFound(rpc.method().to_owned());
        return (jsonrpc_err(rpc.id(), &e, unknown, retry), unknown);
    };
    let name = operation::name(op);
    let dialect = match dialect(req, shape) {
        Ok(d) => d,
        Err(e) => return (jsonrpc_err(rpc.id(), &e, name, retry), name),
    };
    let generations = operation::generations_active(dialect, req);
    let rpc = match rpc {
        Parsed::Fast(_) if !operation::takes_decoded_send(dialect, req) => {
            match parse_request(&body) {
                Ok(rpc) => Parsed::General(rpc),
                Err((id, e)) => return (jsonrpc_err(&id, &e, name, retry), name),
            }
        }
        rpc => rpc,
    };
    let (id, executed) = match rpc {
        Parsed::Fast(fast) => {
            let a2a::FastSend { id, send, .. } = *fast;
            let executed =
                operation::execute_send(&state.service, &principal, op, dialect, send, req).await;
            (id, executed)
        }
        Parsed::General(rpc) => {
            let executed =
                operation::execute(&state.service, &principal, op, dialect, &rpc.params, req).await;
            (rpc.id, executed)
        }
    };
    let mut response = match executed {
        Ok(Reply::Json(result)) => jsonrpc_ok(&id, &result),
        Ok(Reply::Stream(events)) => sse::respond(
            events,
            dialect,
            Framing::JsonRpc(id.clone()),
            state.keep_alive_secs,
            req,
        ),
        Err(e) => jsonrpc_err(&id, &e, name, retry),
    };
    if generations {
        crate::http::respond::echo_extension(
            &mut response,
            crate::a2a::generations::GENERATIONS_EXTENSION,
        );
    }
    (response, name)
}

/// A request as read: the common send by the fast road, anything else in general.
enum Parsed {
    Fast(Box<a2a::FastSend>),
    General(a2a::jsonrpc::RpcRequest),
}

impl Parsed {
    fn id(&self) -> &Value {
        match self {
            Parsed::Fast(fast) => &fast.id,
            Parsed::General(rpc) => &rpc.id,
        }
    }

    fn method(&self) -> &str {
        match self {
            Parsed::Fast(fast) => fast.method,
            Parsed::General(rpc) => &rpc.method,
        }
    }
}
