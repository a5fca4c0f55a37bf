//! One implementation of every A2A operation, shared by every binding (JSON-RPC and
//! HTTP+JSON in `http`, gRPC in `grpc`): a binding decodes its framing into the
//! operation's ProtoJSON-shaped parameters, and frames what comes back.

use std::pin::Pin;

use futures_util::Stream;
use serde_json::Value;
use tracing::Instrument;

use super::Service;
use super::auth::{Credentials, Principal};
use crate::a2a::{self, Dialect, Operation, generations};
use crate::domain::{PartContent, PushConfig, SendMessage, SendOutcome, Task};
use crate::error::{Error, Result};
use crate::runtime::SeqEvent;
use crate::telemetry::trace;

/// What an operation reads of a request besides its parameters: headers (gRPC:
/// metadata) by lowercase name, and the event id a resuming subscriber names.
pub trait Request: Credentials {
    /// `Last-Event-ID` on HTTP (header or `lastEventId` query parameter),
    /// `last-event-id` metadata on gRPC; read only by `SubscribeToTask`.
    fn last_event_id(&self) -> Result<Option<i64>>;

    /// Whether the answer travels as JSON, where an extension may add fields the 1.0
    /// schema lacks (the HTTP bindings). gRPC's protobuf messages cannot carry them.
    fn json_wire(&self) -> bool {
        true
    }

    /// The binding that carried the request (`jsonrpc`, `http_json`, `grpc`), as the
    /// request span names it.
    fn binding(&self) -> &'static str;
}

/// The header (gRPC: metadata) that names a send's idempotency key instead of its
/// message id.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Longest idempotency key accepted.
const MAX_IDEMPOTENCY_KEY: usize = 256;

/// What an operation produced.
pub enum Reply {
    Json(Body),
    Stream(Pin<Box<dyn Stream<Item = Result<SeqEvent>> + Send>>),
}

/// A JSON answer: a value, or a task or send outcome that the HTTP bindings write
/// straight from the domain (`a2a::encode`'s views) instead of through a `Value` tree.
pub enum Body {
    Value(Value),
    Outcome(Dialect, Box<SendOutcome>),
    Task(Dialect, Box<Task>),
}

impl Body {
    /// The answer as a JSON value (the gRPC binding reads it as ProtoJSON).
    pub fn into_value(self) -> Value {
        match self {
            Body::Value(value) => value,
            Body::Outcome(d, outcome) => a2a::encode_send_outcome(d, &outcome),
            Body::Task(d, task) => a2a::encode_task(d, &task),
        }
    }

    /// Whether the operation had nothing to answer (a delete).
    pub fn is_null(&self) -> bool {
        matches!(self, Body::Value(Value::Null))
    }
}

impl serde::Serialize for Body {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Body::Value(value) => value.serialize(serializer),
            Body::Outcome(d, outcome) => a2a::OutcomeWire(*d, outcome).serialize(serializer),
            Body::Task(d, task) => a2a::TaskWire(*d, task).serialize(serializer),
        }
    }
}

/// A stable name for logs and metrics labels.
pub fn name(op: Operation) -> &'static str {
    match op {
        Operation::SendMessage => "SendMessage",
        Operation::SendStreamingMessage => "SendStreamingMessage",
        Operation::GetTask => "GetTask",
        Operation::ListTasks => "ListTasks",
        Operation::CancelTask => "CancelTask",
        Operation::SubscribeToTask => "SubscribeToTask",
        Operation::CreatePushConfig => "CreateTaskPushNotificationConfig",
        Operation::GetPushConfig => "GetTaskPushNotificationConfig",
        Operation::ListPushConfigs => "ListTaskPushNotificationConfigs",
        Operation::DeletePushConfig => "DeleteTaskPushNotificationConfig",
        Operation::GetExtendedAgentCard => "GetExtendedAgentCard",
    }
}

/// Executes `op` for `principal` (already admitted) with its decoded-from-JSON parameters
/// and what `request` carries besides them — inside the request's span when traces are
/// exported (`telemetry::trace`).
pub async fn execute(
    state: &Service,
    principal: &Principal,
    op: Operation,
    dialect: Dialect,
    params: &Value,
    request: &impl Request,
) -> Result<Reply> {
    execute_input(state, principal, op, dialect, Input::Json(params), request).await
}

/// Executes a send its binding already read into the domain (`a2a::fast_send`): the same
/// operation as [`execute`] on its JSON, without the generic decoding. Not for a request
/// that activates the task-generations extension, whose condition is read from the JSON.
pub async fn execute_send(
    state: &Service,
    principal: &Principal,
    op: Operation,
    dialect: Dialect,
    send: SendMessage,
    request: &impl Request,
) -> Result<Reply> {
    if !matches!(op, Operation::SendMessage | Operation::SendStreamingMessage) {
        return Err(Error::internal(format!("a decoded send for {}", name(op))));
    }
    if !takes_decoded_send(dialect, request) {
        return Err(Error::internal(
            "a decoded send outside 1.0, or of a request activating the generations extension",
        ));
    }
    let input = Input::Send(Box::new(send));
    execute_input(state, principal, op, dialect, input, request).await
}

/// An operation's parameters: as JSON, or a send already decoded.
enum Input<'a> {
    Json(&'a Value),
    Send(Box<SendMessage>),
}

async fn execute_input(
    state: &Service,
    principal: &Principal,
    op: Operation,
    dialect: Dialect,
    params: Input<'_>,
    request: &impl Request,
) -> Result<Reply> {
    if !trace::on() {
        return run(state, principal, op, dialect, params, request).await;
    }
    let span = trace::request(name(op), request.binding(), request);
    span.record("a2a.tenant.id", principal.tenant.as_str());
    if !span.is_none()
        && let Some(client) = state.gate.client(request)
    {
        span.record("client.address", client.to_string());
    }
    let result = run(state, principal, op, dialect, params, request)
        .instrument(span.clone())
        .await;
    if let Err(e) = &result {
        trace::failed(&span, crate::a2a::errors::map_error(e).reason);
    }
    result
}

/// Records the task and thread a request touched on its span.
fn touched(task: &Task) {
    if trace::on() {
        let span = tracing::Span::current();
        span.record("a2a.task.id", task.id.as_str());
        span.record("gen_ai.conversation.id", task.context_id.as_str());
    }
}

async fn run(
    state: &Service,
    principal: &Principal,
    op: Operation,
    dialect: Dialect,
    input: Input<'_>,
    request: &impl Request,
) -> Result<Reply> {
    let tenant = &principal.tenant;
    let rt = &state.runtime;
    let generations = generations_active(dialect, request);
    let params = match input {
        Input::Json(params) => params,
        Input::Send(decoded) => {
            // A stream past the node's bound is refused before anything else, as below.
            let place = stream_place(state, op, request)?;
            let cmd = prepare_send(state, principal, *decoded, None, request)?;
            return send(state, tenant, op, dialect, cmd, place, false).await;
        }
    };
    match op {
        Operation::SendMessage | Operation::SendStreamingMessage => {
            let place = stream_place(state, op, request)?;
            let cmd = decode_send(state, principal, dialect, params, request)?;
            send(state, tenant, op, dialect, cmd, place, generations).await
        }
        Operation::GetTask => {
            let query = a2a::decode_get_task(dialect, params)?;
            let task = match generations::decode_current_generation(params, generations)? {
                Some(current) => {
                    let wait = state.long_poll;
                    rt.tasks()
                        .get_after(tenant, &query.id, query.history_length, current, wait)
                        .await?
                }
                None => {
                    rt.tasks()
                        .get(tenant, &query.id, query.history_length)
                        .await?
                }
            };
            touched(&task);
            Ok(Reply::Json(task_body(dialect, task, generations)))
        }
        Operation::ListTasks => {
            let query = a2a::decode_list_tasks(dialect, params)?;
            let page = rt.tasks().list(tenant, &query).await?;
            let mut encoded = a2a::encode_task_page(dialect, &page);
            if generations {
                let tasks: Vec<&Task> = page.tasks.iter().collect();
                generations::annotate_tasks(&mut encoded, &tasks);
            }
            Ok(Reply::Json(Body::Value(encoded)))
        }
        Operation::CancelTask => {
            let id = a2a::decode_task_id(dialect, params)?;
            let task = rt.tasks().cancel(tenant, &id).await?;
            Ok(Reply::Json(task_body(dialect, task, generations)))
        }
        Operation::SubscribeToTask => {
            let place = state.open_stream(request.binding())?;
            let id = a2a::decode_task_id(dialect, params)?;
            let resume = request.last_event_id()?;
            let sub = rt.subscriptions().subscribe(tenant, &id, resume).await?;
            Ok(Reply::Stream(Box::pin(holding(
                rt.subscriptions().events(sub),
                place,
            ))))
        }
        // Without push, refused before anything else, as the spec requires: no task lookup
        // happens.
        Operation::CreatePushConfig => {
            let policy = state.push_policy()?;
            let (task_id, spec) = a2a::decode_create_push(dialect, params)?;
            policy.check_url(&spec.url)?;
            let config = rt.push_configs().create(tenant, &task_id, spec).await?;
            Ok(Reply::Json(Body::Value(a2a::encode_push_config(
                dialect, &config,
            ))))
        }
        Operation::GetPushConfig => {
            state.push_policy()?;
            let (task_id, id) = a2a::decode_push_ref(dialect, params)?;
            let configs = rt.push_configs().list(tenant, &task_id).await?;
            // 0.3 and 0.1 may leave the id out: the task's first config.
            let found = match &id {
                Some(id) => configs.into_iter().find(|c| &c.id == id),
                None => configs.into_iter().next(),
            };
            let config = found.ok_or_else(|| {
                Error::invalid_params(match &id {
                    Some(id) => format!("task {task_id} has no push notification config {id:?}"),
                    None => format!("task {task_id} has no push notification config"),
                })
            })?;
            Ok(Reply::Json(Body::Value(a2a::encode_push_config(
                dialect, &config,
            ))))
        }
        Operation::ListPushConfigs => {
            state.push_policy()?;
            let (task_id, page_size, page_token) = a2a::decode_list_push(dialect, params)?;
            let configs = rt.push_configs().list(tenant, &task_id).await?;
            let (page, next) = push_page(configs, page_size, page_token.as_deref())?;
            Ok(Reply::Json(Body::Value(a2a::encode_push_list(
                dialect, &page, &next,
            ))))
        }
        Operation::DeletePushConfig => {
            state.push_policy()?;
            let (task_id, id) = a2a::decode_push_ref(dialect, params)?;
            let id =
                id.ok_or_else(|| Error::invalid_params("pushNotificationConfigId: is required"))?;
            rt.push_configs().delete(tenant, &task_id, &id).await?;
            Ok(Reply::Json(Body::Value(Value::Null)))
        }
        // The gate admitted an authenticated caller; with auth off there is nobody to
        // tell their terms, and the card says `extendedAgentCard: false`.
        Operation::GetExtendedAgentCard if state.gate.authenticates() => {
            Ok(Reply::Json(Body::Value(state.extended_card(principal)?)))
        }
        Operation::GetExtendedAgentCard => match dialect {
            Dialect::V03Rpc | Dialect::V03Rest => Err(Error::ExtendedAgentCardNotConfigured),
            Dialect::V1 | Dialect::V01 => Err(Error::UnsupportedOperation(
                "this agent has no extended agent card (capabilities.extendedAgentCard is false)"
                    .into(),
            )),
        },
    }
}

/// A task in `dialect`, annotated with its generation when the extension is active
/// (which needs the value).
fn task_body(dialect: Dialect, task: Task, generations: bool) -> Body {
    if generations {
        let mut encoded = a2a::encode_task(dialect, &task);
        generations::annotate_task(&mut encoded, &task);
        return Body::Value(encoded);
    }
    Body::Task(dialect, Box::new(task))
}

/// A streaming send's place among the node's open streams (none for a blocking send).
fn stream_place(
    state: &Service,
    op: Operation,
    request: &impl Request,
) -> Result<Option<tokio::sync::OwnedSemaphorePermit>> {
    match op {
        Operation::SendStreamingMessage => Ok(Some(state.open_stream(request.binding())?)),
        _ => Ok(None),
    }
}

/// Runs a decoded send: its outcome (`SendMessage`), or its events holding the stream's
/// `place` (`SendStreamingMessage`).
async fn send(
    state: &Service,
    tenant: &crate::domain::TenantId,
    op: Operation,
    dialect: Dialect,
    cmd: SendMessage,
    place: Option<tokio::sync::OwnedSemaphorePermit>,
    generations: bool,
) -> Result<Reply> {
    let rt = &state.runtime;
    if let Some(place) = place {
        let sub = rt.sends().streaming(tenant, cmd).await?;
        return Ok(Reply::Stream(Box::pin(holding(
            rt.subscriptions().events(sub),
            place,
        ))));
    }
    debug_assert_eq!(op, Operation::SendMessage);
    let outcome = rt.sends().send(tenant, cmd).await?;
    if let SendOutcome::Task(task) = &outcome {
        touched(task);
    }
    if let (true, SendOutcome::Task(task)) = (generations, &outcome) {
        let mut encoded = a2a::encode_send_outcome(dialect, &outcome);
        generations::annotate_tasks(&mut encoded, &[task]);
        return Ok(Reply::Json(Body::Value(encoded)));
    }
    Ok(Reply::Json(Body::Outcome(dialect, Box::new(outcome))))
}

/// One page of a task's configs (in the order they were registered) and the token of
/// the next (`""` on the last). The token is the position of the page's last config:
/// its registration time and id, so deleting configs between pages skips nothing.
fn push_page(
    configs: Vec<PushConfig>,
    page_size: Option<u32>,
    page_token: Option<&str>,
) -> Result<(Vec<PushConfig>, String)> {
    let size = match page_size {
        None | Some(0) => usize::MAX,
        Some(n) if n <= a2a::MAX_PAGE_SIZE => n as usize,
        Some(_) => {
            return Err(Error::invalid_params(format!(
                "pageSize: must be at most {}",
                a2a::MAX_PAGE_SIZE
            )));
        }
    };
    let after = match page_token {
        None => None,
        Some(token) => {
            let bad = || Error::invalid_params("pageToken: not a token this server issued");
            let (at, id) = token.split_once('.').ok_or_else(bad)?;
            Some((at.parse::<i64>().map_err(|_| bad())?, id.to_owned()))
        }
    };
    let mut rest: Vec<PushConfig> = configs
        .into_iter()
        .filter(|c| {
            after
                .as_ref()
                .is_none_or(|(at, id)| (c.created_at.millis(), &c.id) > (*at, id))
        })
        .collect();
    if rest.len() <= size {
        return Ok((rest, String::new()));
    }
    rest.truncate(size);
    let last = &rest[size - 1];
    let next = format!("{}.{}", last.created_at.millis(), last.id);
    Ok((rest, next))
}

/// Whether a send a binding read into the domain itself (the 1.0 readers: JSON-RPC's
/// `a2a::fast_send`, gRPC's `direct`) may run as read ([`execute_send`]): in the 1.0
/// dialect, without the task-generations extension, whose condition only the general
/// reader takes from the request's JSON. Otherwise the general reader decides.
pub fn takes_decoded_send(dialect: Dialect, request: &impl Request) -> bool {
    dialect == Dialect::V1 && !generations_active(dialect, request)
}

/// Whether the request activates the task-generations extension: a 1.0 request naming
/// it in `A2A-Extensions` (gRPC: `a2a-extensions` metadata; `X-A2A-Extensions` is the
/// 0.3 spelling, accepted too). The binding echoes the header when it is.
pub fn generations_active(dialect: Dialect, request: &impl Request) -> bool {
    dialect == Dialect::V1
        && request.json_wire()
        && (generations::names_generations(request.header("a2a-extensions"))
            || generations::names_generations(request.header("x-a2a-extensions")))
}

/// The request's `Idempotency-Key` (an alias of the message's id), if it has one.
fn idempotency_key(request: &impl Request) -> Result<Option<String>> {
    let Some(raw) = request.header(IDEMPOTENCY_KEY).map(str::trim) else {
        return Ok(None);
    };
    if raw.is_empty() || raw.len() > MAX_IDEMPOTENCY_KEY {
        return Err(Error::invalid_params(format!(
            "Idempotency-Key: must be 1 to {MAX_IDEMPOTENCY_KEY} characters"
        )));
    }
    Ok(Some(raw.to_owned()))
}

/// The event id a resuming subscriber names (`Last-Event-ID` on HTTP, `last-event-id`
/// metadata on gRPC): absent or blank is none; anything but a non-negative integer is
/// invalid.
pub fn event_id(raw: Option<&str>) -> Result<Option<i64>> {
    match raw.map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .map(Some)
            .ok_or_else(|| {
                Error::invalid_params("Last-Event-ID: must be an event id from this stream")
            }),
    }
}

/// A send's command: decoded, its part types checked, a direct tool call charged to the
/// caller's budget for that skill, and the user a trusted proxy named given to the agent as
/// `userId` (it beats any the client sent: the proxy vouched for it).
fn decode_send(
    state: &Service,
    principal: &Principal,
    dialect: Dialect,
    params: &Value,
    request: &impl Request,
) -> Result<SendMessage> {
    let cmd = a2a::decode_send(dialect, params)?;
    let if_generation_match =
        generations::decode_if_generation_match(params, generations_active(dialect, request))?;
    prepare_send(state, principal, cmd, if_generation_match, request)
}

/// The rest of [`decode_send`] once the message is read, whichever way it was.
fn prepare_send(
    state: &Service,
    principal: &Principal,
    mut cmd: SendMessage,
    if_generation_match: Option<i64>,
    request: &impl Request,
) -> Result<SendMessage> {
    cmd.idempotency_key = idempotency_key(request)?;
    cmd.config.if_generation_match = if_generation_match;
    a2a::check_input_modes(&cmd.message, &state.input_modes)?;
    // A config this server cannot honour is refused, never silently dropped.
    if let Some(push) = &cmd.config.push {
        state.push_policy()?.check_url(&push.url)?;
    }
    let tool = cmd
        .message
        .parts
        .iter()
        .find_map(|part| match &part.content {
            PartContent::Data(Value::Object(data)) => data.get("tool").and_then(Value::as_str),
            _ => None,
        });
    if let Some(skill) = tool.and_then(|tool| state.runtime.tools().skill_of(tool)) {
        state.gate.admit_skill(principal, &skill)?;
    }
    if let Some(user) = &principal.user {
        cmd.metadata
            .get_or_insert_with(Default::default)
            .insert("userId".into(), Value::String(user.clone()));
    }
    Ok(cmd)
}

/// `stream`, keeping its place among the node's open streams until it is dropped.
fn holding<S: Stream + Send>(
    stream: S,
    place: tokio::sync::OwnedSemaphorePermit,
) -> impl Stream<Item = S::Item> + Send {
    use futures_util::StreamExt;
    stream.map(move |item| {
        let _held = &place;
        item
    })
}
