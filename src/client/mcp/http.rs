//! The Streamable HTTP client of an MCP server: rmcp's reqwest client, whose answers and
//! events are bounded before they are decoded (`max_json_response_size`,
//! `max_sse_event_size`), with the request an oversized one answered told to
//! [`Oversized`]: rmcp ends the event stream on such an event without saying why to the
//! request that waits on it.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::StreamExt;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage};
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

use super::oversized::{Oversized, id_text};

/// How rmcp's bounded readers say a body or event went past its bound.
const PAST_THE_BOUND: &str = "exceeded the maximum size";

#[derive(Clone)]
pub(super) struct Watching {
    pub(super) client: reqwest::Client,
    pub(super) oversized: Arc<Oversized>,
    /// Why the last request could not be sent, with its causes (rmcp's error says only
    /// "error sending request"; the cause may be the URL policy's refusal).
    pub(super) unsent: Arc<std::sync::Mutex<Option<String>>>,
}

type Posted = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;

impl StreamableHttpClient for Watching {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Posted {
        let limits = StreamableHttpResponseLimits::default();
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Posted {
        let id = match &message {
            JsonRpcMessage::Request(request) => Some(id_text(&request.id)),
            _ => None,
        };
        let posted = self
            .client
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        if let Err(StreamableHttpError::Client(e)) = &posted {
            *self.unsent.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(crate::error::error_chain(e));
        }
        let Some(id) = id else { return posted };
        match posted {
            Ok(StreamableHttpPostResponse::Sse(events, session)) => {
                let oversized = self.oversized.clone();
                let events = events.inspect(move |event| {
                    if let Err(e) = event
                        && e.to_string().contains(PAST_THE_BOUND)
                    {
                        oversized.found(&id);
                    }
                });
                Ok(StreamableHttpPostResponse::Sse(events.boxed(), session))
            }
            Err(e) if e.to_string().contains(PAST_THE_BOUND) => {
                self.oversized.found(&id);
                Err(e)
            }
            other => other,
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.client
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxedSseResponse, StreamableHttpError<Self::Error>> {
        self.client
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxedSseResponse, StreamableHttpError<Self::Error>> {
        self.client
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}
