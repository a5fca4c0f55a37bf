//! Model providers: one streaming interface over OpenAI-compatible Chat Completions,
//! Anthropic Messages and Google Gemini.
//!
//! The runtime speaks only the vocabulary defined here ([`Message`], [`GenerateParams`],
//! [`ProviderEvent`]); each provider file translates it to and from its own wire format.
//! The module knows nothing of actix or of A2A: it takes messages and tools in, and gives a
//! stream of events out.
//!
//! **Stream contract:** events arrive in the provider's order; exactly one terminal event —
//! [`ProviderEvent::Done`] or [`ProviderEvent::Error`] — comes last, and then the stream
//! ends. A transport stream that stops without the provider's end marker yields
//! `Error(ProviderError::StreamEnded)`, never a silent success. Tool calls arrive as
//! [`ToolCallFragment`]s that the consumer assembles by `index` (see seed contract A.11).

mod anthropic;
mod gemini;
mod http;
mod openai;
mod scripted;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::stream::BoxStream;

use crate::config::{ProviderKind, ProviderSettings};

pub use anthropic::AnthropicProvider;
pub use gemini::GeminiProvider;
pub use openai::OpenAiProvider;
pub use scripted::ScriptedProvider;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
    /// The result of a tool call, answering the call named by `tool_call_id`.
    Tool,
}

/// A complete tool call made by the model in an earlier turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as JSON text (an object), exactly as the model produced them.
    pub arguments: String,
}

/// One message of the conversation sent to a provider.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub content: String,
    /// Calls the assistant made in this message (assistant messages only).
    pub tool_calls: Vec<ToolCall>,
    /// The call this message answers (tool messages only).
    pub tool_call_id: Option<String>,
    /// The tool's name on a tool message (Gemini addresses results by name, not id).
    pub name: Option<String>,
}

impl Message {
    /// A message with only text.
    pub fn text(role: Role, content: impl Into<String>) -> Message {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// Whether the model must call one of the tools it is offered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// The model decides: each API's default when tools are offered, so nothing is sent.
    #[default]
    Auto,
    /// It must call one of them.
    Required,
    /// It must call this one.
    Tool(String),
}

/// One generation request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GenerateParams {
    /// `None`: the provider's configured model.
    pub model: Option<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolDefinition>,
    /// Ignored when `tools` is empty.
    pub tool_choice: ToolChoice,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
}

/// A piece of a tool call as it streams in. The first fragment of a call carries its
/// `index` (and usually `id` and `name`); later fragments of the same call carry the same
/// `index` and more `arguments` text to append.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolCallFragment {
    pub index: Option<usize>,
    pub id: Option<String>,
    pub name: Option<String>,
    /// JSON text to append to the call's arguments (may be empty).
    pub arguments: String,
}

/// Tokens used by one generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// One event of a provider stream.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderEvent {
    TextDelta(String),
    ToolCallFragment(ToolCallFragment),
    Usage(Usage),
    /// The provider finished the turn (terminal).
    Done,
    /// The request or the stream failed (terminal).
    Error(ProviderError),
}

impl ProviderEvent {
    /// Whether this event ends the stream.
    pub fn is_terminal(&self) -> bool {
        matches!(self, ProviderEvent::Done | ProviderEvent::Error(_))
    }
}

/// Why a generation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    /// The provider answered with an error status, or reported an error inside the stream
    /// (then `status` is the one its error type stands for; 500 when it names none).
    #[error("provider answered HTTP {status}: {body}")]
    Http {
        status: u16,
        /// The error body, truncated to a few KiB.
        body: String,
    },
    /// 429 after all retries (or with a `Retry-After` too long to wait for here).
    #[error("provider rate limit (retry after {retry_after:?})")]
    RateLimited { retry_after: Option<Duration> },
    #[error("provider request timed out")]
    Timeout,
    #[error("cannot reach provider: {0}")]
    Connect(String),
    /// The provider sent something that is not its documented format.
    #[error("cannot decode provider response: {0}")]
    Decode(String),
    /// The stream stopped without the provider's end marker.
    #[error("provider stream ended without its end marker")]
    StreamEnded,
    #[error("provider configuration: {0}")]
    Config(String),
    /// The provider kept failing; calls fail fast until it has had time to recover.
    #[error("provider unavailable after repeated failures (retry after {retry_after:?})")]
    CircuitOpen { retry_after: Duration },
}

impl ProviderError {
    /// Whether sending the same request again may succeed. The caller still decides whether a
    /// retry is safe once part of a stream has been used.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Http { status, .. } => {
                *status == 408 || *status == 429 || *status >= 500
            }
            ProviderError::RateLimited { .. }
            | ProviderError::CircuitOpen { .. }
            | ProviderError::Timeout
            | ProviderError::Connect(_)
            | ProviderError::StreamEnded => true,
            ProviderError::Decode(_) | ProviderError::Config(_) => false,
        }
    }
}

/// A model provider: turns a conversation into a stream of [`ProviderEvent`]s.
#[async_trait]
pub trait Provider: Send + Sync {
    /// The provider's name in `[providers.<name>]`.
    fn id(&self) -> &str;
    /// The configured model (used when [`GenerateParams::model`] is `None`).
    fn model(&self) -> &str;
    /// Starts a generation. `Err` means no stream was produced (the request failed after its
    /// retries); failures after that arrive as the stream's terminal `Error` event.
    async fn generate(
        &self,
        params: GenerateParams,
    ) -> Result<BoxStream<'static, ProviderEvent>, ProviderError>;
}

/// The provider `[providers.<name>]` describes. The API key is read now from the
/// environment variable named by `api_key_env`, so a missing key stops start-up.
pub fn build(name: &str, settings: &ProviderSettings) -> Result<Arc<dyn Provider>, ProviderError> {
    let api_key = read_api_key(&settings.api_key_env)?;
    let transport = http::Transport::new(settings)?;
    let provider: Arc<dyn Provider> = match settings.kind {
        ProviderKind::Openai => Arc::new(OpenAiProvider::new(name, settings, api_key, transport)?),
        ProviderKind::Anthropic => {
            Arc::new(AnthropicProvider::new(name, settings, api_key, transport)?)
        }
        ProviderKind::Gemini => Arc::new(GeminiProvider::new(name, settings, api_key, transport)?),
    };
    Ok(provider)
}

/// The key in `var`; `None` when no variable is named (local servers need none).
fn read_api_key(var: &str) -> Result<Option<String>, ProviderError> {
    let var = var.trim();
    if var.is_empty() {
        return Ok(None);
    }
    match std::env::var(var) {
        Ok(key) if !key.trim().is_empty() => Ok(Some(key.trim().to_owned())),
        _ => Err(ProviderError::Config(format!(
            "environment variable {var} (api_key_env) is not set"
        ))),
    }
}
