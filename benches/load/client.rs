//! The client side of the load generator: one pooled reqwest client that posts JSON-RPC
//! requests to the target URL with the dialect's `A2A-Version` header and the API key,
//! and reads answers either as one JSON document or as a Server-Sent Events stream — or,
//! with `--binding grpc`, the same calls over gRPC (`grpc.rs`).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use eventsource_stream::Eventsource;
use futures_util::{Stream, StreamExt};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use crate::args::MessageIds;
use crate::grpc::GrpcWire;
use crate::protocol::{Dialect, ErrorKind, Reply, StreamEvent, rpc_request, rpc_result};

/// Which headers carry the API key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthHeader {
    /// `Authorization: Bearer <key>`.
    Bearer,
    /// `X-API-Key: <key>`.
    XApiKey,
    /// Both headers.
    Both,
}

/// A JSON-RPC client of one A2A endpoint.
pub struct Client {
    http: reqwest::Client,
    url: reqwest::Url,
    dialect: Dialect,
    message_id_prefix: String,
    message_ids: MessageIds,
    next_id: AtomicU64,
    /// Calls go over gRPC instead (`--binding grpc`).
    grpc: Option<GrpcWire>,
}

impl Client {
    /// A client keeping up to `connections` idle connections to the target.
    pub fn new(
        url: reqwest::Url,
        dialect: Dialect,
        api_key: Option<(&str, AuthHeader)>,
        connections: usize,
        message_id_prefix: String,
        message_ids: MessageIds,
    ) -> anyhow::Result<Self> {
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("a2a-version"),
            HeaderValue::from_static(dialect.version()),
        );
        if let Some((key, header)) = api_key {
            let bearer = HeaderValue::from_str(&format!("Bearer {key}"))
                .context("the API key is not a valid header value")?;
            let plain =
                HeaderValue::from_str(key).context("the API key is not a valid header value")?;
            if matches!(header, AuthHeader::Bearer | AuthHeader::Both) {
                headers.insert(AUTHORIZATION, mark_sensitive(bearer));
            }
            if matches!(header, AuthHeader::XApiKey | AuthHeader::Both) {
                headers.insert(HeaderName::from_static("x-api-key"), mark_sensitive(plain));
            }
        }
        // reqwest is built with `rustls-no-provider` (the server's outgoing HTTPS picks
        // ring); a client can only be built once a provider is installed, even for plain
        // HTTP. Err means one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .pool_max_idle_per_host(connections)
            .tcp_nodelay(true)
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Self {
            http,
            url,
            dialect,
            message_id_prefix,
            message_ids,
            next_id: AtomicU64::new(1),
            grpc: None,
        })
    }

    /// Sends the calls over gRPC, to the interface the card lists.
    pub fn with_grpc(mut self, grpc: GrpcWire) -> Self {
        self.grpc = Some(grpc);
        self
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// A fresh message id, `<prefix>-<uuid>`.
    pub fn message_id(&self) -> String {
        let uuid = match self.message_ids {
            MessageIds::Random => uuid::Uuid::new_v4(),
            MessageIds::TimeOrdered => uuid::Uuid::now_v7(),
        };
        format!("{}-{uuid}", self.message_id_prefix)
    }

    async fn post(&self, method: &str, params: Value) -> Result<reqwest::Response, ErrorKind> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = rpc_request(id, method, params).to_string();
        self.http
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| ErrorKind::from_reqwest(&e))
    }

    /// A unary JSON-RPC call; returns its `result`.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, ErrorKind> {
        if let Some(grpc) = &self.grpc {
            return grpc.call(method, params).await;
        }
        let response = self.post(method, params).await?;
        read_json(response).await
    }

    /// `SendMessage` (or `message/send`) of one message.
    pub async fn send_message(&self, message: Value) -> Result<Reply, ErrorKind> {
        let params = serde_json::json!({ "message": message });
        let result = self.call(self.dialect.send_method(), params).await?;
        Reply::parse(self.dialect, &result)
    }

    /// A streaming call (`SendStreamingMessage`, `SubscribeToTask`, …). A request the
    /// server refuses before streaming comes back as plain JSON and becomes its error.
    pub async fn open_stream(&self, method: &str, params: Value) -> Result<Events, ErrorKind> {
        if let Some(grpc) = &self.grpc {
            return Ok(Events {
                dialect: self.dialect,
                inner: Frames::Grpc(Box::new(grpc.open_stream(method, params).await?)),
            });
        }
        let response = self.post(method, params).await?;
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_sse {
            // Usually a JSON-RPC error; a result here is not a stream at all.
            read_json(response).await?;
            return Err(ErrorKind::UnexpectedResult);
        }
        if response.status() != reqwest::StatusCode::OK {
            return Err(ErrorKind::HttpStatus(response.status().as_u16()));
        }
        Ok(Events {
            dialect: self.dialect,
            inner: Frames::Sse(Box::pin(response.bytes_stream().eventsource())),
        })
    }
}

fn mark_sensitive(mut value: HeaderValue) -> HeaderValue {
    value.set_sensitive(true);
    value
}

async fn read_json(response: reqwest::Response) -> Result<Value, ErrorKind> {
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| ErrorKind::from_reqwest(&e))?;
    let envelope = serde_json::from_slice::<Value>(&body)
        .ok()
        .filter(|value| value.get("jsonrpc").is_some());
    match envelope {
        // A JSON-RPC answer keeps its own kind whatever the status (some servers answer
        // errors with 4xx/5xx); anything else off 200 (a REST error body, a proxy's
        // page) is an HTTP error.
        Some(envelope) => rpc_result(envelope),
        None if status != reqwest::StatusCode::OK => Err(ErrorKind::HttpStatus(status.as_u16())),
        None => Err(ErrorKind::InvalidBody),
    }
}

type SseStream = Pin<
    Box<
        dyn Stream<
                Item = Result<
                    eventsource_stream::Event,
                    eventsource_stream::EventStreamError<reqwest::Error>,
                >,
            > + Send,
    >,
>;

/// Where a stream's events come from.
enum Frames {
    Sse(SseStream),
    Grpc(Box<tonic::Streaming<a2a_pb::protojson::StreamResponse>>),
}

/// The events of one SSE response (or gRPC stream), read as A2A stream events.
pub struct Events {
    dialect: Dialect,
    inner: Frames,
}

impl Events {
    /// The next event; `None` when the server closed the stream. An `event: error`
    /// frame (a gRPC status) becomes the error it carries.
    pub async fn next(&mut self) -> Option<Result<StreamEvent, ErrorKind>> {
        let sse = match &mut self.inner {
            Frames::Sse(sse) => sse,
            Frames::Grpc(stream) => {
                let result = match stream.next().await? {
                    Ok(event) => serde_json::to_value(event).map_err(|_| ErrorKind::InvalidBody),
                    Err(status) => Err(crate::grpc::kind(&status)),
                };
                return Some(result.and_then(|event| StreamEvent::parse(self.dialect, &event)));
            }
        };
        let event = match sse.next().await? {
            Ok(event) => event,
            Err(eventsource_stream::EventStreamError::Transport(e)) => {
                return Some(Err(ErrorKind::from_reqwest(&e)));
            }
            Err(_) => return Some(Err(ErrorKind::InvalidBody)),
        };
        let parsed = serde_json::from_str::<Value>(&event.data)
            .map_err(|_| ErrorKind::InvalidBody)
            .and_then(rpc_result);
        Some(match parsed {
            // An error frame that does not hold a JSON-RPC error is still an error.
            Ok(_) if event.event == "error" => Err(ErrorKind::InvalidBody),
            Ok(result) => StreamEvent::parse(self.dialect, &result),
            Err(kind) => Err(kind),
        })
    }
}
