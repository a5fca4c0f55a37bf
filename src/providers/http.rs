//! The HTTP side shared by all providers. [`HttpProvider`] is the one [`Provider`] of
//! them all: it holds a provider's name, model and key, and puts the key in its request
//! headers, marked sensitive; each provider file only gives its [`WireFormat`] — the
//! path, body and fixed headers of a request, and the decoder of its SSE answer. Below
//! it, [`Transport`]: one `reqwest` client per provider with the configured timeouts, a
//! concurrency bound, retries with backoff before the stream starts, and the SSE driver
//! that turns a response body into [`ProviderEvent`]s.
//!
//! Retries happen only while no byte of the answer has been used: once a stream is handed to
//! the caller, a failure becomes its terminal `Error` event, because re-sending would repeat
//! text (and tool calls) the caller has already seen.

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{GenerateParams, Provider, ProviderError, ProviderEvent};
use crate::config::ProviderSettings;

/// Most bytes of an error body kept in [`ProviderError::Http`].
const MAX_ERROR_BODY: usize = 4 * 1024;
/// Longest wait between two attempts; a `Retry-After` beyond it is handed to the caller as
/// [`ProviderError::RateLimited`] instead of holding the request.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);

/// How a provider's API takes its key.
pub enum KeyHeader {
    /// `Authorization: Bearer <key>`.
    Bearer,
    /// The key as it is, in the header of this (lowercase) name.
    Named(&'static str),
}

/// One provider's API: where a generation is sent, what it looks like, and how its answer
/// streams back. Everything else is [`HttpProvider`]'s.
pub trait WireFormat: Send + Sync + 'static {
    /// How a request carries the key.
    const KEY_HEADER: KeyHeader;
    /// Headers every request carries besides the key.
    const HEADERS: &'static [(&'static str, &'static str)] = &[];
    /// Decodes one answer's SSE events (a fresh one per generation).
    type Decoder: SseDecoder + Default;
    /// The path under the base URL and the JSON body of a generation of `model`.
    fn request(model: &str, params: &GenerateParams) -> (String, serde_json::Value);
}

/// A provider that speaks `W` over HTTP.
pub struct HttpProvider<W> {
    /// The name in `[providers.<name>]`.
    id: String,
    model: String,
    /// `W`'s headers and the key, built once (the key marked sensitive).
    headers: HeaderMap,
    transport: Transport,
    wire: PhantomData<W>,
}

impl<W: WireFormat> HttpProvider<W> {
    /// A key that cannot be a header value is refused here, at start-up.
    pub(crate) fn new(
        id: &str,
        settings: &ProviderSettings,
        api_key: Option<String>,
        transport: Transport,
    ) -> Result<Self, ProviderError> {
        Ok(Self {
            id: id.to_owned(),
            model: settings.model.clone(),
            headers: headers::<W>(api_key.as_deref())?,
            transport,
            wire: PhantomData,
        })
    }
}

/// `W`'s headers, and the key (when there is one) as `W` takes it.
fn headers<W: WireFormat>(api_key: Option<&str>) -> Result<HeaderMap, ProviderError> {
    let mut headers = HeaderMap::new();
    for &(name, value) in W::HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    let Some(key) = api_key else {
        return Ok(headers);
    };
    let (name, text) = match W::KEY_HEADER {
        KeyHeader::Bearer => (AUTHORIZATION, format!("Bearer {key}")),
        KeyHeader::Named(name) => (HeaderName::from_static(name), key.to_owned()),
    };
    let mut value = HeaderValue::from_str(&text)
        .map_err(|_| ProviderError::Config("API key is not a valid header".into()))?;
    // Keeps the key out of any debug output of the request.
    value.set_sensitive(true);
    headers.insert(name, value);
    Ok(headers)
}

#[async_trait]
impl<W: WireFormat> Provider for HttpProvider<W> {
    fn id(&self) -> &str {
        &self.id
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn generate(
        &self,
        params: GenerateParams,
    ) -> Result<BoxStream<'static, ProviderEvent>, ProviderError> {
        let model = params.model.as_deref().unwrap_or(&self.model);
        let (path, body) = W::request(model, &params);
        let headers = self.headers.clone();
        let url = self.transport.url(&path);
        self.transport
            .stream(&url, headers, &body, W::Decoder::default())
            .await
    }
}

/// Turns a provider's SSE events into [`ProviderEvent`]s.
pub trait SseDecoder: Send + 'static {
    /// The events one SSE event stands for (possibly none); a terminal one ends the stream.
    fn decode(&mut self, event: &Event) -> Vec<ProviderEvent>;

    /// The events for a transport stream that ended before any terminal event. Most
    /// providers have an explicit end marker, so by default this is a failure.
    fn end(&mut self) -> Vec<ProviderEvent> {
        vec![ProviderEvent::Error(ProviderError::StreamEnded)]
    }
}

/// The client, endpoint root and retry policy of one provider.
pub(crate) struct Transport {
    client: reqwest::Client,
    base_url: String,
    max_retries: u32,
    retry_base: Duration,
    permits: Arc<Semaphore>,
}

impl Transport {
    /// A transport for `settings` (validates the base URL).
    pub(crate) fn new(settings: &ProviderSettings) -> Result<Transport, ProviderError> {
        let base_url = settings.base_url.trim().trim_end_matches('/').to_owned();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(ProviderError::Config(format!(
                "base_url must be an http:// or https:// URL, got {base_url:?}"
            )));
        }
        // Err means another part of the process installed a provider first: keep it.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(settings.connect_timeout_ms))
            .timeout(Duration::from_millis(settings.timeout_ms))
            .build()
            .map_err(|e| ProviderError::Config(format!("HTTP client: {e}")))?;
        Ok(Transport {
            client,
            base_url,
            max_retries: settings.max_retries,
            retry_base: Duration::from_millis(settings.retry_base_ms),
            // Zero would block every request forever; one is the smallest working bound.
            permits: Arc::new(Semaphore::new(settings.max_concurrency.max(1))),
        })
    }

    /// `{base_url}{path}`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// POSTs `body` to `url` (retrying as configured) and decodes the SSE answer.
    pub(crate) async fn stream<D: SseDecoder>(
        &self,
        url: &str,
        headers: HeaderMap,
        body: &serde_json::Value,
        decoder: D,
    ) -> Result<BoxStream<'static, ProviderEvent>, ProviderError> {
        // The permit travels with the stream: a generation counts until its stream is dropped.
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| ProviderError::Config("provider is shut down".into()))?;
        let response = self.send_with_retries(url, headers, body).await?;
        Ok(drive(response, decoder, permit))
    }

    async fn send_with_retries(
        &self,
        url: &str,
        headers: HeaderMap,
        body: &serde_json::Value,
    ) -> Result<reqwest::Response, ProviderError> {
        let mut headers = headers;
        crate::telemetry::trace::inject(&mut headers);
        let mut attempt: u32 = 0;
        loop {
            let sent = self
                .client
                .post(url)
                .headers(headers.clone())
                .json(body)
                .send()
                .await;
            let (error, retry_after) = match sent {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) => failed_response(response).await,
                Err(e) => (transport_error(&e), None),
            };
            let retryable = match &error {
                ProviderError::RateLimited { .. } | ProviderError::Connect(_) => true,
                ProviderError::Http { status, .. } => *status >= 500,
                _ => false,
            };
            if !retryable || attempt >= self.max_retries {
                return Err(error);
            }
            let wait = retry_after.unwrap_or_else(|| backoff(self.retry_base, attempt));
            if wait > MAX_RETRY_WAIT {
                return Err(error);
            }
            tracing::warn!(%url, attempt, ?wait, error = %error, "provider request failed; retrying");
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }
}

/// `base · 2^attempt`, capped at [`MAX_RETRY_WAIT`].
fn backoff(base: Duration, attempt: u32) -> Duration {
    let factor = 1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(MAX_RETRY_WAIT)
}

/// The error for a non-success answer, and the wait its `Retry-After` asks for.
async fn failed_response(response: reqwest::Response) -> (ProviderError, Option<Duration>) {
    let status = response.status();
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    if status == StatusCode::TOO_MANY_REQUESTS {
        return (ProviderError::RateLimited { retry_after }, retry_after);
    }
    let body = read_bounded(response).await;
    let error = ProviderError::Http {
        status: status.as_u16(),
        body,
    };
    (error, retry_after)
}

/// At most [`MAX_ERROR_BODY`] bytes of the body, as text; a failed read keeps what arrived.
async fn read_bounded(mut response: reqwest::Response) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < MAX_ERROR_BODY {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    bytes.truncate(MAX_ERROR_BODY);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Truncates `text` to [`MAX_ERROR_BODY`] bytes on a character boundary.
pub(crate) fn truncate_body(text: &str) -> String {
    let mut end = text.len().min(MAX_ERROR_BODY);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// A reqwest failure before any answer arrived.
fn transport_error(e: &reqwest::Error) -> ProviderError {
    if e.is_timeout() {
        ProviderError::Timeout
    } else {
        // Connect failures and connections lost before the status line alike: nothing of the
        // request was answered, so it is safe to send again.
        ProviderError::Connect(e.to_string())
    }
}

/// State of one decoded stream.
struct Drive<D> {
    events: BoxStream<'static, Result<Event, EventStreamError<reqwest::Error>>>,
    decoder: D,
    pending: VecDeque<ProviderEvent>,
    finished: bool,
    _permit: OwnedSemaphorePermit,
}

/// The events of `response`'s SSE body, ending after exactly one terminal event.
fn drive<D: SseDecoder>(
    response: reqwest::Response,
    decoder: D,
    permit: OwnedSemaphorePermit,
) -> BoxStream<'static, ProviderEvent> {
    // `Response::chunk` needs no extra reqwest feature, unlike `bytes_stream`.
    let bytes = stream::unfold(response, |mut response| async move {
        match response.chunk().await {
            Ok(Some(chunk)) => Some((Ok(chunk), response)),
            Ok(None) => None,
            Err(e) => Some((Err(e), response)),
        }
    });
    let state = Drive {
        events: bytes.eventsource().boxed(),
        decoder,
        pending: VecDeque::new(),
        finished: false,
        _permit: permit,
    };
    stream::unfold(state, |mut state| async move {
        loop {
            if let Some(event) = state.pending.pop_front() {
                if event.is_terminal() {
                    state.finished = true;
                    state.pending.clear();
                }
                return Some((event, state));
            }
            if state.finished {
                return None;
            }
            match state.events.next().await {
                Some(Ok(event)) => {
                    let decoded = state.decoder.decode(&event);
                    state.pending.extend(decoded);
                }
                Some(Err(e)) => state
                    .pending
                    .push_back(ProviderEvent::Error(stream_error(e))),
                None => {
                    let rest = state.decoder.end();
                    state.pending.extend(rest);
                    // A decoder that ends without a terminal event still ends the stream.
                    state
                        .pending
                        .push_back(ProviderEvent::Error(ProviderError::StreamEnded));
                }
            }
        }
    })
    .boxed()
}

/// A failure while reading an SSE body that had already started.
fn stream_error(e: EventStreamError<reqwest::Error>) -> ProviderError {
    match e {
        EventStreamError::Transport(e) if e.is_timeout() => ProviderError::Timeout,
        EventStreamError::Transport(e) => {
            // The connection broke mid-answer: for the caller this is a stream that stopped
            // without its end marker; the cause goes to the log.
            tracing::warn!(error = %e, "provider stream broke");
            ProviderError::StreamEnded
        }
        EventStreamError::Utf8(e) => ProviderError::Decode(format!("stream is not UTF-8: {e}")),
        EventStreamError::Parser(e) => ProviderError::Decode(format!("malformed SSE: {e}")),
    }
}

/// The JSON of an SSE event's data, or the `Decode` error event for it.
pub(crate) fn parse_json(event: &Event) -> Result<serde_json::Value, ProviderEvent> {
    serde_json::from_str(&event.data).map_err(|e| {
        ProviderEvent::Error(ProviderError::Decode(format!(
            "event data is not JSON ({e}): {}",
            truncate_body(&event.data)
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let base = Duration::from_millis(100);
        assert_eq!(backoff(base, 0), Duration::from_millis(100));
        assert_eq!(backoff(base, 3), Duration::from_millis(800));
        assert_eq!(backoff(base, 40), MAX_RETRY_WAIT);
    }

    #[test]
    fn truncation_keeps_characters_whole() {
        let text = "é".repeat(MAX_ERROR_BODY);
        let cut = truncate_body(&text);
        assert!(cut.len() <= MAX_ERROR_BODY);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
