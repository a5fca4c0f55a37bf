//! The HTTP+JSON binding: 1.0 routes unprefixed, 0.3 routes under `/v1` (the same
//! handlers; the prefix selects the dialect), and the seed's aliases
//! `POST /tasks/send` and `GET /tasks/{id}/get`.
//!
//! `/tasks/{id}:cancel` and `/tasks/{id}:subscribe` share a path segment with the id, so
//! one `/tasks/{tail}` route per verb splits the suffix itself: `GET /tasks/x:subscribe`
//! can never be read as `GetTask("x:subscribe")`.

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Map, Value};

use crate::a2a::{Dialect, Operation};
use crate::error::Error;
use crate::http::AppState;
use crate::http::body::{check_json_content_type, dialect, read_limited, url_query_pairs};
use crate::http::observe::{Binding, tag};
use crate::http::respond::{A2A_JSON, method_not_allowed, rest_err, rest_ok};
use crate::http::sse::{self, Framing};
use crate::service::operation::{self, Reply};

pub fn configure(cfg: &mut web::ServiceConfig) {
    use super::{POST, READ, read, resource};
    cfg.service(resource("/message:send", POST).route(web::post().to(send)))
        .service(resource("/message:stream", POST).route(web::post().to(stream)))
        .service(resource("/tasks", READ).route(read().to(list)))
        .service(
            resource("/tasks/{id}/pushNotificationConfigs", "GET, HEAD, POST")
                .route(read().to(push_list))
                .route(web::post().to(push_create)),
        )
        .service(
            resource(
                "/tasks/{id}/pushNotificationConfigs/{config_id}",
                "GET, HEAD, DELETE",
            )
            .route(read().to(push_get))
            .route(web::delete().to(push_delete)),
        )
        // `GET /tasks/{id}`, `POST /tasks/{id}:cancel`, either for `:subscribe`; the
        // handlers refine the `Allow` by verb.
        .service(
            resource("/tasks/{tail}", "GET, HEAD, POST")
                .route(read().to(task_get))
                .route(web::post().to(task_post)),
        )
        .service(resource("/extendedAgentCard", READ).route(read().to(extended_card)))
        .service(resource("/card", READ).route(read().to(extended_card)));
}

/// 0.3 routes live under `/v1`; everything else is 1.0.
fn shape(req: &HttpRequest) -> Dialect {
    if req.path().starts_with("/v1/") {
        Dialect::V03Rest
    } else {
        Dialect::V1
    }
}

async fn send(req: HttpRequest, payload: web::Payload, state: web::Data<AppState>) -> HttpResponse {
    let params = json_body(&req, payload, &state, true).await;
    run(&req, &state, Operation::SendMessage, shape(&req), params).await
}

async fn stream(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    let params = json_body(&req, payload, &state, true).await;
    run(
        &req,
        &state,
        Operation::SendStreamingMessage,
        shape(&req),
        params,
    )
    .await
}

async fn list(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let params = Ok(query_object(&req, None));
    run(&req, &state, Operation::ListTasks, shape(&req), params).await
}

async fn task_get(
    req: HttpRequest,
    tail: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    let (id, verb) = split_verb(&tail);
    let op = match verb {
        None => Operation::GetTask,
        Some("subscribe") => Operation::SubscribeToTask,
        Some("cancel") => return method_not_allowed(&req, super::POST),
        Some(_) => return not_found(req, state).await,
    };
    let params = Ok(query_object(&req, Some(id)));
    run(&req, &state, op, shape(&req), params).await
}

async fn task_post(
    req: HttpRequest,
    tail: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    let (id, verb) = split_verb(&tail);
    let op = match verb {
        Some("cancel") => Operation::CancelTask,
        Some("subscribe") => Operation::SubscribeToTask,
        None => return method_not_allowed(&req, super::READ),
        Some(_) => return not_found(req, state).await,
    };
    // Bodies of these actions are optional: empty, `{}` and `null` are all accepted.
    let params = json_body(&req, payload, &state, false).await.map(|body| {
        let mut object = match body {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        object.insert("id".into(), Value::String(id.to_owned()));
        Value::Object(object)
    });
    run(&req, &state, op, shape(&req), params).await
}

/// `POST /tasks/{id}/pushNotificationConfigs`: the body is the config (1.0), or 0.3's
/// create request; the path names the task.
async fn push_create(
    req: HttpRequest,
    task: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    let params = json_body(&req, payload, &state, true)
        .await
        .and_then(|body| {
            let Value::Object(mut object) = body else {
                return Err(Error::invalid_params("body: must be a JSON object"));
            };
            object.insert("taskId".into(), Value::String(task.into_inner()));
            Ok(Value::Object(object))
        });
    run(
        &req,
        &state,
        Operation::CreatePushConfig,
        shape(&req),
        params,
    )
    .await
}

/// `GET /tasks/{id}/pushNotificationConfigs?pageSize&pageToken`.
async fn push_list(
    req: HttpRequest,
    task: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    let mut params = query_object(&req, None);
    params["taskId"] = Value::String(task.into_inner());
    run(
        &req,
        &state,
        Operation::ListPushConfigs,
        shape(&req),
        Ok(params),
    )
    .await
}

async fn push_get(
    req: HttpRequest,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> HttpResponse {
    let params = Ok(push_ref(&req, path.into_inner()));
    run(&req, &state, Operation::GetPushConfig, shape(&req), params).await
}

/// Answers 200 with `{}`: clients of both versions parse a JSON body on success.
async fn push_delete(
    req: HttpRequest,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> HttpResponse {
    let params = Ok(push_ref(&req, path.into_inner()));
    run(
        &req,
        &state,
        Operation::DeletePushConfig,
        shape(&req),
        params,
    )
    .await
}

/// The path's task and config as the dialect's parameters name them.
fn push_ref(req: &HttpRequest, (task, config): (String, String)) -> Value {
    let config_key = match shape(req) {
        Dialect::V03Rest => "configId",
        _ => "id",
    };
    let mut object = Map::new();
    object.insert("taskId".into(), Value::String(task));
    object.insert(config_key.into(), Value::String(config));
    Value::Object(object)
}

async fn extended_card(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let params = Ok(Value::Object(Map::new()));
    run(
        &req,
        &state,
        Operation::GetExtendedAgentCard,
        shape(&req),
        params,
    )
    .await
}

/// `POST /tasks/send`: the seed's alias of SendMessage. It takes the 1.0 body, or the
/// 0.1 `tasks/send` params (recognised by their client-chosen `id` and typed parts).
pub async fn seed_send(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    let params = json_body(&req, payload, &state, true).await;
    let looks_v01 = params
        .as_ref()
        .is_ok_and(|p| p.get("id").is_some() && p.pointer("/message/parts/0/type").is_some());
    let shape = if looks_v01 { Dialect::V01 } else { Dialect::V1 };
    run(&req, &state, Operation::SendMessage, shape, params).await
}

/// `GET /tasks/{id}/get`: the seed's alias of GetTask.
pub async fn seed_get(
    req: HttpRequest,
    id: web::Path<String>,
    state: web::Data<AppState>,
) -> HttpResponse {
    let params = Ok(query_object(&req, Some(&id)));
    run(&req, &state, Operation::GetTask, Dialect::V1, params).await
}

pub async fn not_found(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let e = Error::MethodNotFound(format!("{} {}", req.method(), req.path()));
    let mut response = rest_err(&e, "unknown", &state.service, shape(&req));
    tag(&mut response, Binding::Rest, "unknown");
    response
}

async fn run(
    req: &HttpRequest,
    state: &AppState,
    op: Operation,
    shape: Dialect,
    params: Result<Value, Error>,
) -> HttpResponse {
    let name = operation::name(op);
    // Authentication first: a stranger learns nothing, not even whether the body is valid.
    let service = &*state.service;
    let prepared = service
        .gate
        .admit(req)
        .await
        .and_then(|principal| Ok((principal, params?)))
        .and_then(|(principal, p)| Ok((principal, dialect(req, shape)?, p)));
    let mut response = match prepared {
        Err(e) => rest_err(&e, name, service, shape),
        Ok((principal, dialect, params)) => {
            let generations = operation::generations_active(dialect, req);
            let mut response =
                match operation::execute(service, &principal, op, dialect, &params, req).await {
                    // An operation with nothing to answer (a delete) answers `{}`.
                    Ok(Reply::Json(body)) if body.is_null() => {
                        rest_ok(&Value::Object(Map::new()), response_type(req, dialect))
                    }
                    Ok(Reply::Json(body)) => rest_ok(&body, response_type(req, dialect)),
                    Ok(Reply::Stream(events)) => {
                        sse::respond(events, dialect, Framing::Rest, state.keep_alive_secs, req)
                    }
                    Err(e) => rest_err(&e, name, service, shape),
                };
            if generations {
                crate::http::respond::echo_extension(
                    &mut response,
                    crate::a2a::generations::GENERATIONS_EXTENSION,
                );
            }
            response
        }
    };
    tag(&mut response, Binding::Rest, name);
    response
}

/// Reads a JSON body. With `required`, an empty body is an error; otherwise it is `null`.
async fn json_body(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
    required: bool,
) -> Result<Value, Error> {
    let body = read_limited(req, payload, state.max_body_bytes).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        if required {
            check_json_content_type(req, false)?;
            return Err(Error::invalid_params("body: a JSON object is required"));
        }
        return Ok(Value::Null);
    }
    check_json_content_type(req, false)?;
    serde_json::from_slice(&body).map_err(|e| Error::Parse(e.to_string()))
}

/// Query parameters as a JSON object of strings (the decoders accept numbers and
/// booleans written as strings), plus the path's task id.
fn query_object(req: &HttpRequest, id: Option<&str>) -> Value {
    let mut object = Map::new();
    for (key, value) in url_query_pairs(req.query_string()) {
        if key.eq_ignore_ascii_case("a2a-version") {
            continue;
        }
        object.entry(key).or_insert(Value::String(value));
    }
    if let Some(id) = id {
        object.insert("id".into(), Value::String(id.to_owned()));
    }
    Value::Object(object)
}

/// `application/a2a+json` (the 1.0.1 media type) for clients that speak it — by their
/// request's `Content-Type` or their `Accept` — and `application/json` for the rest, so a
/// client posting `application/json` gets `application/json` back.
fn response_type(req: &HttpRequest, dialect: Dialect) -> &'static str {
    let speaks_a2a = |header| {
        req.headers()
            .get(header)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains(A2A_JSON))
    };
    if dialect == Dialect::V1
        && (speaks_a2a(actix_web::http::header::CONTENT_TYPE)
            || speaks_a2a(actix_web::http::header::ACCEPT))
    {
        A2A_JSON
    } else {
        "application/json"
    }
}

fn split_verb(tail: &str) -> (&str, Option<&str>) {
    match tail.rsplit_once(':') {
        Some((id, verb)) => (id, Some(verb)),
        None => (tail, None),
    }
}
