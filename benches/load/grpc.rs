//! The gRPC side of the load generator (`--binding grpc`): tonic's gRPC client over
//! `--connections` HTTP/2 connections to the address the agent card lists for its `GRPC`
//! interface, taking turns, calling `lf.a2a.v1.A2AService` as the generated client does.
//! Requests and answers are the 1.0 JSON-RPC `params` and `result` the scenarios build and
//! read: ProtoJSON and protobuf of `a2a.proto` are two encodings of one message, and
//! `a2a_pb`'s ProtoJSON types are prost messages of the same fields and tags, so the call
//! encodes a request straight from its ProtoJSON type and decodes the answer straight into
//! one — one typed step between the scenario's JSON and the wire each way, as the JSON-RPC
//! client has (JSON text to and from the same `Value`s).

use std::sync::atomic::{AtomicUsize, Ordering};

use a2a_pb::protojson;
use anyhow::Context;
use prost::Message;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tonic::client::Grpc;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::Channel;
use tonic_prost::ProstCodec;
use tonic_types::StatusExt;

use crate::protocol::ErrorKind;

/// Clients of one gRPC endpoint, one connection each.
pub struct GrpcWire {
    clients: Vec<Grpc<Channel>>,
    next: AtomicUsize,
    metadata: MetadataMap,
}

impl GrpcWire {
    /// Finds the gRPC interface in the card served beside `url` and opens `connections`
    /// connections to it.
    pub async fn connect(
        url: &reqwest::Url,
        connections: usize,
        api_key: Option<&str>,
    ) -> anyhow::Result<Self> {
        let card_url = url
            .join("/.well-known/agent-card.json")
            .context("the agent card's URL")?;
        let card: Value = reqwest::get(card_url.clone())
            .await
            .and_then(reqwest::Response::error_for_status)
            .with_context(|| format!("cannot read the agent card at {card_url}"))?
            .json()
            .await
            .with_context(|| format!("the agent card at {card_url} is not JSON"))?;
        let address = card["supportedInterfaces"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i["protocolBinding"] == "GRPC")
            .and_then(|i| i["url"].as_str())
            .with_context(|| format!("the agent card at {card_url} lists no GRPC interface"))?;
        let endpoint = Channel::from_shared(format!("http://{address}"))
            .with_context(|| format!("the card's gRPC address {address:?}"))?
            .tcp_nodelay(true);
        let mut clients = Vec::with_capacity(connections);
        for _ in 0..connections {
            let channel = endpoint
                .connect()
                .await
                .with_context(|| format!("cannot connect to gRPC at {address}"))?;
            clients.push(Grpc::new(channel));
        }
        let mut metadata = MetadataMap::new();
        metadata.insert("a2a-version", MetadataValue::from_static("1.0"));
        if let Some(key) = api_key {
            let key = MetadataValue::try_from(key).context("the API key as gRPC metadata")?;
            metadata.insert("x-api-key", key);
        }
        Ok(Self {
            clients,
            next: AtomicUsize::new(0),
            metadata,
        })
    }

    fn client(&self) -> Grpc<Channel> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.clients.len();
        self.clients[i].clone()
    }

    fn request<P: DeserializeOwned>(&self, params: Value) -> Result<tonic::Request<P>, ErrorKind> {
        let message: P = serde_json::from_value(params).map_err(|_| ErrorKind::UnexpectedResult)?;
        let mut request = tonic::Request::new(message);
        *request.metadata_mut() = self.metadata.clone();
        Ok(request)
    }

    /// A unary call to `path`, `P` in, `R` out.
    async fn unary<P, R>(&self, path: &'static str, params: Value) -> Result<Value, ErrorKind>
    where
        P: Message + DeserializeOwned + Send + Sync + 'static,
        R: Message + Default + Serialize + Send + Sync + 'static,
    {
        let request = self.request::<P>(params)?;
        let mut client = self.client();
        client.ready().await.map_err(|_| ErrorKind::Transport)?;
        let answer = client
            .unary(
                request,
                PathAndQuery::from_static(path),
                ProstCodec::<P, R>::default(),
            )
            .await
            .map_err(|s| kind(&s))?;
        serde_json::to_value(answer.into_inner()).map_err(|_| ErrorKind::InvalidBody)
    }

    /// A unary call of a 1.0 method; returns its `result` as JSON-RPC would.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, ErrorKind> {
        match method {
            "SendMessage" => {
                self.unary::<protojson::SendMessageRequest, protojson::SendMessageResponse>(
                    "/lf.a2a.v1.A2AService/SendMessage",
                    params,
                )
                .await
            }
            "CancelTask" => {
                self.unary::<protojson::CancelTaskRequest, protojson::Task>(
                    "/lf.a2a.v1.A2AService/CancelTask",
                    params,
                )
                .await
            }
            _ => Err(ErrorKind::UnexpectedResult),
        }
    }

    /// A server-streaming call of a 1.0 method.
    pub async fn open_stream(
        &self,
        method: &str,
        params: Value,
    ) -> Result<tonic::Streaming<protojson::StreamResponse>, ErrorKind> {
        match method {
            "SendStreamingMessage" => {
                self.streaming::<protojson::SendMessageRequest>(
                    "/lf.a2a.v1.A2AService/SendStreamingMessage",
                    params,
                )
                .await
            }
            "SubscribeToTask" => {
                self.streaming::<protojson::SubscribeToTaskRequest>(
                    "/lf.a2a.v1.A2AService/SubscribeToTask",
                    params,
                )
                .await
            }
            _ => Err(ErrorKind::UnexpectedResult),
        }
    }

    /// A server-streaming call to `path`, `P` in, stream events out.
    async fn streaming<P>(
        &self,
        path: &'static str,
        params: Value,
    ) -> Result<tonic::Streaming<protojson::StreamResponse>, ErrorKind>
    where
        P: Message + DeserializeOwned + Send + Sync + 'static,
    {
        let request = self.request::<P>(params)?;
        let mut client = self.client();
        client.ready().await.map_err(|_| ErrorKind::Transport)?;
        let codec = ProstCodec::<P, protojson::StreamResponse>::default();
        client
            .server_streaming(request, PathAndQuery::from_static(path), codec)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| kind(&s))
    }
}

/// Classifies a status: its code and `ErrorInfo` reason (never the free-text message).
pub fn kind(status: &tonic::Status) -> ErrorKind {
    let reason = status
        .get_details_error_info()
        .map(|info| info.reason)
        .unwrap_or_default();
    match status.code() {
        tonic::Code::DeadlineExceeded => ErrorKind::Timeout,
        tonic::Code::Unavailable if reason.is_empty() => ErrorKind::Transport,
        code => ErrorKind::Grpc {
            code: format!("{code:?}"),
            reason,
        },
    }
}
