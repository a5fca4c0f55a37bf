//! `lf.a2a.v1.A2AService`: every RPC is the operation of the same name in
//! `service::operation`, framed for gRPC.
//!
//! A call passes the same steps as on the HTTP bindings, in the same order: its metadata
//! read as gRPC's printable ASCII, the gate (credentials from `authorization: Bearer …`
//! or `x-api-key` metadata, then the tenant's rate limit), the request's message (one
//! whose bytes did not decode is refused here, see `codec`) and its ProtoJSON
//! (`convert`), the `a2a-version` metadata, the operation, and the result's protobuf.
//! The common send, its outcome, tasks and stream events skip the ProtoJSON (`direct`),
//! which leaves everything it does not carry exactly to it.
//! Errors become statuses with `ErrorInfo` (`status`). Streams carry the events of the
//! SSE streams in the same order; each event but a lone message names its place in the
//! task's durable log in its `metadata` under [`super::EVENT_ID_KEY`], which a
//! `SubscribeToTask` can name in its `last-event-id` metadata to resume after it.

use std::cell::RefCell;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2a_pb::proto::{self, a2a_service_server::A2aService};
use a2a_pb::protojson;
use futures_util::{Stream, StreamExt};
use prost::Message;
use serde::Serialize;
use serde_json::Value;
use tonic::metadata::{KeyAndValueRef, MetadataMap};
use tonic::{Code, Request, Response, Status};
use tracing::Instrument;

use super::convert::{by_twin, frame, send_answer, task_answer, to_json};
use super::direct;
use super::status::{code_name, status};
use crate::a2a::version::{is_newer_than_supported, negotiate};
use crate::a2a::{Dialect, Operation};
use crate::cluster::deadline;
use crate::domain::SendMessage;
use crate::error::Error;
use crate::service::Service;
use crate::service::auth::{Credentials, Principal};
use crate::service::operation::{self, Body, Reply};
use crate::telemetry;

/// A server stream of events.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<proto::StreamResponse, Status>> + Send>>;

/// The gRPC service over the shared operations.
pub struct A2a {
    service: Arc<Service>,
}

impl A2a {
    pub fn new(service: Arc<Service>) -> Self {
        Self { service }
    }
}

/// What a gRPC caller presented: its metadata and peer address.
struct Caller<'a> {
    metadata: &'a MetadataMap,
    peer: Option<IpAddr>,
    /// The client the connection's PROXY header named (`server.trusted_proxies`).
    proxied: Option<IpAddr>,
}

impl Credentials for Caller<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.metadata.get(name).and_then(|v| v.to_str().ok())
    }

    fn header_values(&self, name: &str) -> Vec<&str> {
        self.metadata
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect()
    }

    fn peer(&self) -> Option<IpAddr> {
        self.peer
    }

    fn proxied(&self) -> Option<IpAddr> {
        self.proxied
    }
}

impl operation::Request for Caller<'_> {
    fn last_event_id(&self) -> Result<Option<i64>, Error> {
        operation::event_id(self.header("last-event-id"))
    }

    fn json_wire(&self) -> bool {
        false
    }

    fn binding(&self) -> &'static str {
        "grpc"
    }
}

impl A2a {
    /// Admits a caller whose metadata is gRPC's: the metadata first (a value that is not
    /// printable ASCII would otherwise read as absent, credentials included), then the
    /// gate.
    async fn admit(&self, caller: &Caller<'_>) -> Result<Principal, Error> {
        printable(caller.metadata)?;
        self.service.gate.admit(caller).await
    }

    /// Refuses a call whose message did not decode with `error` — once its caller is
    /// admitted, so a stranger learns nothing of its request — and counts it as every
    /// call is counted.
    pub async fn refuse(&self, op: Operation, request: Request<()>, error: Error) -> Status {
        let started = Instant::now();
        let name = operation::name(op);
        let peer = request.remote_addr().map(|addr| addr.ip());
        let caller = Caller {
            metadata: request.metadata(),
            peer,
            proxied: proxied_client(&request),
        };
        let error = match self
            .admit(&caller)
            .instrument(tracing::debug_span!("grpc", method = name))
            .await
        {
            Ok(_) => error,
            Err(refused) => refused,
        };
        let status = status(&self.service.report(&error, name));
        observe(name, Some(&status), started);
        status
    }

    /// Admits the caller and executes `op` with the request as `read` takes it into the
    /// domain, or else with its ProtoJSON.
    async fn execute<J, M>(
        &self,
        op: Operation,
        request: Request<M>,
        read: Read<M>,
    ) -> Result<Reply, Error>
    where
        J: Message + Default + Serialize,
        M: Message,
    {
        let peer = request.remote_addr().map(|addr| addr.ip());
        let proxied = proxied_client(&request);
        let (metadata, _, message) = request.into_parts();
        let caller = Caller {
            metadata: &metadata,
            peer,
            proxied,
        };
        // Credentials first: a stranger learns nothing, not even whether its request is valid.
        let principal = self.admit(&caller).await?;
        let params = match read(&message) {
            Some(send) => Params::Send(Box::new(send)),
            None => Params::Json(to_json::<J>(&message)?),
        };
        let dialect = version(&metadata)?;
        let timeout = timeout(&metadata)?;
        let params = match params {
            Params::Send(send) if operation::takes_decoded_send(dialect, &caller) => {
                let service = &self.service;
                let send =
                    operation::execute_send(service, &principal, op, dialect, *send, &caller);
                return deadline::within(timeout, send).await;
            }
            Params::Send(_) => to_json::<J>(&message)?,
            Params::Json(params) => params,
        };
        let executed = operation::execute(&self.service, &principal, op, dialect, &params, &caller);
        deadline::within(timeout, executed).await
    }

    /// A unary RPC: the request as `read` takes it or through its twin `J`, the result
    /// by `answer`.
    async fn unary<J, M, R>(
        &self,
        op: Operation,
        request: Request<M>,
        read: Read<M>,
        answer: fn(Body) -> Result<R, Error>,
    ) -> Result<Response<R>, Status>
    where
        J: Message + Default + Serialize,
        M: Message,
        R: Message + Default,
    {
        let started = Instant::now();
        let name = operation::name(op);
        let result = async {
            // Boxed: a future this large would be copied whole at each level that moves it.
            match Box::pin(self.execute::<J, M>(op, request, read)).await? {
                Reply::Json(body) => answer(body),
                Reply::Stream(_) => Err(Error::internal(format!("{name} answered with a stream"))),
            }
        }
        .instrument(tracing::debug_span!("grpc", method = name))
        .await;
        let result = result
            .map(Response::new)
            .map_err(|e| status(&self.service.report(&e, name)));
        observe(name, result.as_ref().err(), started);
        result
    }

    /// A server-streaming RPC: the request as `read` takes it or through its twin `J`.
    async fn streaming<J, M>(
        &self,
        op: Operation,
        request: Request<M>,
        read: Read<M>,
    ) -> Result<Response<EventStream>, Status>
    where
        J: Message + Default + Serialize,
        M: Message,
    {
        let started = Instant::now();
        let name = operation::name(op);
        let result = Box::pin(self.execute::<J, M>(op, request, read))
            .instrument(tracing::debug_span!("grpc", method = name))
            .await
            .and_then(|reply| match reply {
                Reply::Stream(events) => Ok(events),
                Reply::Json(_) => Err(Error::internal(format!("{name} answered without a stream"))),
            });
        let result = match result {
            Ok(events) => {
                let service = self.service.clone();
                let guard = telemetry::OpenGauge::new(telemetry::GRPC_STREAMS);
                let frames = events.map(move |item| {
                    let _open = &guard;
                    item.and_then(frame)
                        .map_err(|e| status(&service.report(&e, name)))
                });
                Ok(Response::new(Box::pin(frames) as EventStream))
            }
            Err(e) => Err(status(&self.service.report(&e, name))),
        };
        observe(name, result.as_ref().err(), started);
        result
    }
}

/// How a method's request may skip its ProtoJSON: a reader into the domain's send, or
/// [`by_protojson`].
type Read<M> = fn(&M) -> Option<SendMessage>;

/// A request as read: a send in the domain, or the ProtoJSON of any request.
enum Params {
    Send(Box<SendMessage>),
    Json(Value),
}

/// The [`Read`] of a method whose request always goes through its ProtoJSON.
fn by_protojson<M>(_: &M) -> Option<SendMessage> {
    None
}

/// Refuses metadata whose value is not printable ASCII (gRPC's `ASCII-Value`, `%x20-%x7E`),
/// naming the key but not the value (it may be a credential). `-bin` keys carry base64
/// of any bytes and are not read as text.
fn printable(metadata: &MetadataMap) -> Result<(), Error> {
    let unreadable = metadata.iter().find_map(|entry| match entry {
        KeyAndValueRef::Ascii(key, value) => (!value
            .as_encoded_bytes()
            .iter()
            .all(|b| (0x20..=0x7e).contains(b)))
        .then_some(key),
        KeyAndValueRef::Binary(..) => None,
    });
    match unreadable {
        Some(key) => Err(Error::invalid_params(format!(
            "metadata {}: not printable ASCII (binary values go under a key ending in -bin)",
            key.as_str()
        ))),
        None => Ok(()),
    }
}

/// The caller's deadline, `grpc-timeout` (gRPC over HTTP/2: at most eight digits and a
/// unit, `H` `M` `S` `m` `u` `n`).
fn timeout(metadata: &MetadataMap) -> Result<Option<Duration>, Error> {
    let Some(value) = metadata.get("grpc-timeout") else {
        return Ok(None);
    };
    let value = value.to_str().unwrap_or_default();
    grpc_timeout(value).map(Some).ok_or_else(|| {
        Error::invalid_params(format!(
            "grpc-timeout {value:?}: not up to eight digits followed by H, M, S, m, u or n"
        ))
    })
}

fn grpc_timeout(value: &str) -> Option<Duration> {
    let split = value.len().checked_sub(1)?;
    let (digits, unit) = value.split_at_checked(split)?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The dialect of the `a2a-version` metadata: the gRPC service is 1.0's.
fn version(metadata: &MetadataMap) -> Result<Dialect, Error> {
    let requested = metadata.get("a2a-version").and_then(|v| v.to_str().ok());
    if let Some(v) = requested
        && is_newer_than_supported(v)
    {
        tracing::warn!(requested = %v, "request announces a newer A2A version than this server supports");
    }
    negotiate(requested, Dialect::V1)
}

/// A series' handles: its call counter and its latency histogram.
type Series = (metrics::Counter, metrics::Histogram);

thread_local! {
    /// Each worker's handles by (method, status code), as the HTTP bindings keep theirs
    /// (`http::observe`): a call finds its series without building the labels and looking
    /// them up in the recorder. Methods and codes are bounded, and so is this map.
    static SERIES: RefCell<telemetry::SeriesCache<(&'static str, i32), Series>> =
        RefCell::default();
}

/// Counts a call by method and status code, and times it until its answer (a stream's
/// head): the HTTP bindings' metrics with `binding="grpc"`.
fn observe(method: &'static str, error: Option<&Status>, started: Instant) {
    let code = error.map_or(Code::Ok, Status::code);
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    telemetry::with_series(
        &SERIES,
        (method, code as i32),
        |_| series(method, code),
        |(counter, histogram)| {
            counter.increment(1);
            histogram.record(elapsed_ms);
        },
    );
}

fn series(method: &'static str, code: Code) -> Series {
    let counter = metrics::counter!(
        telemetry::HTTP_REQUESTS,
        "binding" => "grpc",
        "method" => method,
        "status" => code_name(code)
    );
    let histogram =
        metrics::histogram!(telemetry::HTTP_LATENCY_MS, "binding" => "grpc", "method" => method);
    (counter, histogram)
}

#[tonic::async_trait]
impl A2aService for A2a {
    async fn send_message(
        &self,
        request: Request<proto::SendMessageRequest>,
    ) -> Result<Response<proto::SendMessageResponse>, Status> {
        let op = Operation::SendMessage;
        self.unary::<protojson::SendMessageRequest, _, _>(
            op,
            request,
            direct::read_send,
            send_answer,
        )
        .await
    }

    type SendStreamingMessageStream = EventStream;

    async fn send_streaming_message(
        &self,
        request: Request<proto::SendMessageRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let op = Operation::SendStreamingMessage;
        self.streaming::<protojson::SendMessageRequest, _>(op, request, direct::read_send)
            .await
    }

    async fn get_task(
        &self,
        request: Request<proto::GetTaskRequest>,
    ) -> Result<Response<proto::Task>, Status> {
        let op = Operation::GetTask;
        self.unary::<protojson::GetTaskRequest, _, _>(op, request, by_protojson, task_answer)
            .await
    }

    async fn list_tasks(
        &self,
        request: Request<proto::ListTasksRequest>,
    ) -> Result<Response<proto::ListTasksResponse>, Status> {
        self.unary::<protojson::ListTasksRequest, _, _>(
            Operation::ListTasks,
            request,
            by_protojson,
            by_twin::<protojson::ListTasksResponse, _>,
        )
        .await
    }

    async fn cancel_task(
        &self,
        request: Request<proto::CancelTaskRequest>,
    ) -> Result<Response<proto::Task>, Status> {
        let op = Operation::CancelTask;
        self.unary::<protojson::CancelTaskRequest, _, _>(op, request, by_protojson, task_answer)
            .await
    }

    type SubscribeToTaskStream = EventStream;

    async fn subscribe_to_task(
        &self,
        request: Request<proto::SubscribeToTaskRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let op = Operation::SubscribeToTask;
        self.streaming::<protojson::SubscribeToTaskRequest, _>(op, request, by_protojson)
            .await
    }

    async fn create_task_push_notification_config(
        &self,
        request: Request<proto::TaskPushNotificationConfig>,
    ) -> Result<Response<proto::TaskPushNotificationConfig>, Status> {
        self.unary::<protojson::TaskPushNotificationConfig, _, _>(
            Operation::CreatePushConfig,
            request,
            by_protojson,
            by_twin::<protojson::TaskPushNotificationConfig, _>,
        )
        .await
    }

    async fn get_task_push_notification_config(
        &self,
        request: Request<proto::GetTaskPushNotificationConfigRequest>,
    ) -> Result<Response<proto::TaskPushNotificationConfig>, Status> {
        self.unary::<protojson::GetTaskPushNotificationConfigRequest, _, _>(
            Operation::GetPushConfig,
            request,
            by_protojson,
            by_twin::<protojson::TaskPushNotificationConfig, _>,
        )
        .await
    }

    async fn list_task_push_notification_configs(
        &self,
        request: Request<proto::ListTaskPushNotificationConfigsRequest>,
    ) -> Result<Response<proto::ListTaskPushNotificationConfigsResponse>, Status> {
        self.unary::<protojson::ListTaskPushNotificationConfigsRequest, _, _>(
            Operation::ListPushConfigs,
            request,
            by_protojson,
            by_twin::<protojson::ListTaskPushNotificationConfigsResponse, _>,
        )
        .await
    }

    async fn get_extended_agent_card(
        &self,
        request: Request<proto::GetExtendedAgentCardRequest>,
    ) -> Result<Response<proto::AgentCard>, Status> {
        self.unary::<protojson::GetExtendedAgentCardRequest, _, _>(
            Operation::GetExtendedAgentCard,
            request,
            by_protojson,
            by_twin::<protojson::AgentCard, _>,
        )
        .await
    }

    async fn delete_task_push_notification_config(
        &self,
        request: Request<proto::DeleteTaskPushNotificationConfigRequest>,
    ) -> Result<Response<()>, Status> {
        self.unary::<protojson::DeleteTaskPushNotificationConfigRequest, _, _>(
            Operation::DeletePushConfig,
            request,
            by_protojson,
            by_twin::<(), ()>,
        )
        .await
    }
}

/// The client a trusted proxy named in the call's connection (its PROXY header).
fn proxied_client<T>(request: &Request<T>) -> Option<IpAddr> {
    request
        .extensions()
        .get::<super::ProxiedClient>()
        .map(|client| client.0.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_read_only_as_printable_ascii() {
        let mut metadata = MetadataMap::new();
        metadata.insert("x-api-key", "key-acme".parse().unwrap());
        metadata.insert_bin(
            "trace-bin",
            tonic::metadata::MetadataValue::from_bytes(b"\xff\x00"),
        );
        assert_eq!(printable(&metadata), Ok(()));
        for bad in ["key-acmé".as_bytes(), b"tab\there"] {
            metadata.insert(
                "x-api-key",
                tonic::metadata::MetadataValue::try_from(bad).unwrap(),
            );
            let Err(Error::InvalidParams(text)) = printable(&metadata) else {
                panic!("{bad:?} was read");
            };
            assert!(text.starts_with("metadata x-api-key: "), "{text}");
            assert!(!text.contains("acm"), "the value is not echoed: {text}");
        }
    }

    #[test]
    fn grpc_timeout_is_eight_digits_and_a_unit() {
        assert_eq!(grpc_timeout("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(
            grpc_timeout("99999999H"),
            Some(Duration::from_secs(99_999_999 * 3600))
        );
        assert_eq!(grpc_timeout("250u"), Some(Duration::from_micros(250)));
        for bad in ["", "m", "123456789m", "10", "10s", "1.5S", "-1S", "é"] {
            assert_eq!(grpc_timeout(bad), None, "{bad:?}");
        }
        let mut metadata = MetadataMap::new();
        assert_eq!(timeout(&metadata), Ok(None));
        metadata.insert("grpc-timeout", "soon".parse().unwrap());
        let Err(Error::InvalidParams(text)) = timeout(&metadata) else {
            panic!("a bad grpc-timeout was read");
        };
        assert!(text.starts_with("grpc-timeout \"soon\""), "{text}");
    }
}
