//! The gRPC side of the load generator (`--binding grpc`): the official generated client
//! (`a2a_pb`) over `--connections` HTTP/2 connections to the address the agent card
//! lists for its `GRPC` interface, taking turns. Requests and answers are the 1.0
//! JSON-RPC `params` and `result` the scenarios build and read, carried as their
//! protobuf (ProtoJSON and protobuf of `a2a.proto` are two encodings of one message).

use std::sync::atomic::{AtomicUsize, Ordering};

use a2a_pb::proto::a2a_service_client::A2aServiceClient;
use a2a_pb::{proto, protojson};
use anyhow::Context;
use prost::Message;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::Channel;
use tonic_types::StatusExt;

use crate::protocol::ErrorKind;

/// Clients of one gRPC endpoint, one connection each.
pub struct GrpcWire {
    clients: Vec<A2aServiceClient<Channel>>,
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
            clients.push(A2aServiceClient::new(channel));
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

    fn client(&self) -> A2aServiceClient<Channel> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.clients.len();
        self.clients[i].clone()
    }

    fn request<P: Message + Default, J: DeserializeOwned + Message>(
        &self,
        params: Value,
    ) -> Result<tonic::Request<P>, ErrorKind> {
        let twin: J = serde_json::from_value(params).map_err(|_| ErrorKind::UnexpectedResult)?;
        let message =
            P::decode(twin.encode_to_vec().as_slice()).map_err(|_| ErrorKind::InvalidBody)?;
        let mut request = tonic::Request::new(message);
        *request.metadata_mut() = self.metadata.clone();
        Ok(request)
    }

    /// A unary call of a 1.0 method; returns its `result` as JSON-RPC would.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, ErrorKind> {
        let mut client = self.client();
        match method {
            "SendMessage" => {
                let request = self
                    .request::<proto::SendMessageRequest, protojson::SendMessageRequest>(params)?;
                let answer = client.send_message(request).await.map_err(|s| kind(&s))?;
                to_json::<protojson::SendMessageResponse>(&answer.into_inner())
            }
            "CancelTask" => {
                let request =
                    self.request::<proto::CancelTaskRequest, protojson::CancelTaskRequest>(params)?;
                let answer = client.cancel_task(request).await.map_err(|s| kind(&s))?;
                to_json::<protojson::Task>(&answer.into_inner())
            }
            _ => Err(ErrorKind::UnexpectedResult),
        }
    }

    /// A server-streaming call of a 1.0 method.
    pub async fn open_stream(
        &self,
        method: &str,
        params: Value,
    ) -> Result<tonic::Streaming<proto::StreamResponse>, ErrorKind> {
        let mut client = self.client();
        let answer = match method {
            "SendStreamingMessage" => {
                let request = self
                    .request::<proto::SendMessageRequest, protojson::SendMessageRequest>(params)?;
                client.send_streaming_message(request).await
            }
            "SubscribeToTask" => {
                let request = self
                    .request::<proto::SubscribeToTaskRequest, protojson::SubscribeToTaskRequest>(
                        params,
                    )?;
                client.subscribe_to_task(request).await
            }
            _ => return Err(ErrorKind::UnexpectedResult),
        };
        answer
            .map(tonic::Response::into_inner)
            .map_err(|s| kind(&s))
    }
}

/// A message's ProtoJSON, through its twin type `J`.
pub fn to_json<J: Message + Default + Serialize>(
    message: &impl Message,
) -> Result<Value, ErrorKind> {
    let twin = J::decode(message.encode_to_vec().as_slice()).map_err(|_| ErrorKind::InvalidBody)?;
    serde_json::to_value(twin).map_err(|_| ErrorKind::InvalidBody)
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
