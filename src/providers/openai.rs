//! OpenAI-compatible Chat Completions (`POST {base_url}/chat/completions`, `stream: true`):
//! OpenAI itself and the servers that copy its API (vLLM, Ollama, llama.cpp, LM Studio).
//!
//! The stream is a series of `chat.completion.chunk` objects ended by `data: [DONE]`; tool
//! calls arrive as `delta.tool_calls[]` pieces keyed by `index`, which map one to one onto
//! [`ToolCallFragment`]s.

use async_trait::async_trait;
use eventsource_stream::Event;
use futures_util::stream::BoxStream;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::{Value, json};

use super::http::{SseDecoder, Transport, parse_json, truncate_body};
use super::{
    GenerateParams, Message, Provider, ProviderError, ProviderEvent, Role, ToolCallFragment,
    ToolDefinition, Usage,
};
use crate::config::ProviderSettings;

/// A provider speaking OpenAI Chat Completions.
pub struct OpenAiProvider {
    id: String,
    model: String,
    api_key: Option<String>,
    transport: Transport,
}

impl OpenAiProvider {
    pub(crate) fn new(
        id: &str,
        settings: &ProviderSettings,
        api_key: Option<String>,
        transport: Transport,
    ) -> OpenAiProvider {
        OpenAiProvider {
            id: id.to_owned(),
            model: settings.model.clone(),
            api_key,
            transport,
        }
    }
}

#[async_trait]
impl Provider for OpenAiProvider {
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
        let body = request_body(&self.model, &params);
        let mut headers = HeaderMap::new();
        if let Some(key) = &self.api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                .map_err(|_| ProviderError::Config("API key is not a valid header".into()))?;
            // Keeps the key out of any debug output of the request.
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let url = self.transport.url("/chat/completions");
        self.transport
            .stream(&url, headers, &body, ChunkDecoder)
            .await
    }
}

/// The Chat Completions request for `params`.
fn request_body(default_model: &str, params: &GenerateParams) -> Value {
    let mut body = json!({
        "model": params.model.as_deref().unwrap_or(default_model),
        "messages": params.messages.iter().map(message).collect::<Vec<_>>(),
        "stream": true,
        // Without it the stream carries no token counts.
        "stream_options": {"include_usage": true},
    });
    if !params.tools.is_empty() {
        body["tools"] = params.tools.iter().map(tool).collect();
    }
    if let Some(t) = params.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(n) = params.max_tokens {
        body["max_tokens"] = json!(n);
    }
    body
}

fn message(m: &Message) -> Value {
    match m.role {
        Role::System => json!({"role": "system", "content": m.content}),
        Role::User => json!({"role": "user", "content": m.content}),
        Role::Assistant => {
            let mut v = json!({"role": "assistant"});
            // `content: null` is how OpenAI writes a turn that only calls tools.
            v["content"] = if m.content.is_empty() && !m.tool_calls.is_empty() {
                Value::Null
            } else {
                json!(m.content)
            };
            if !m.tool_calls.is_empty() {
                v["tool_calls"] = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        json!({
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        })
                    })
                    .collect();
            }
            v
        }
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.as_deref().unwrap_or_default(),
            "content": m.content,
        }),
    }
}

fn tool(t: &ToolDefinition) -> Value {
    json!({
        "type": "function",
        "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
    })
}

/// Decodes `chat.completion.chunk` events.
struct ChunkDecoder;

impl SseDecoder for ChunkDecoder {
    fn decode(&mut self, event: &Event) -> Vec<ProviderEvent> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return vec![ProviderEvent::Done];
        }
        if data.is_empty() {
            return Vec::new();
        }
        let chunk = match parse_json(event) {
            Ok(chunk) => chunk,
            Err(error) => return vec![error],
        };
        if let Some(error) = chunk.get("error") {
            return vec![ProviderEvent::Error(stream_error(error))];
        }
        let mut out = Vec::new();
        let delta = &chunk["choices"][0]["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            out.push(ProviderEvent::TextDelta(text.to_owned()));
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let function = &call["function"];
            out.push(ProviderEvent::ToolCallFragment(ToolCallFragment {
                index: call["index"].as_u64().and_then(|i| usize::try_from(i).ok()),
                id: non_empty(&call["id"]),
                name: non_empty(&function["name"]),
                arguments: function["arguments"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            }));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            out.push(ProviderEvent::Usage(Usage {
                input_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
                output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
            }));
        }
        out
    }
}

fn non_empty(v: &Value) -> Option<String> {
    v.as_str().filter(|s| !s.is_empty()).map(str::to_owned)
}

/// An `{"error": …}` chunk. Servers that copy the API put an HTTP-like status in `code`
/// (vLLM) or none at all (OpenAI: `type: "server_error"`), so 500 stands in.
fn stream_error(error: &Value) -> ProviderError {
    let status = error["code"]
        .as_u64()
        .or_else(|| error["code"].as_str().and_then(|c| c.parse().ok()))
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(500);
    ProviderError::Http {
        status,
        body: truncate_body(&error.to_string()),
    }
}
