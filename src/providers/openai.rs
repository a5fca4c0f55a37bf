//! OpenAI-compatible Chat Completions (`POST {base_url}/chat/completions`, `stream: true`):
//! OpenAI itself and the servers that copy its API (vLLM, Ollama, llama.cpp, LM Studio).
//!
//! The stream is a series of `chat.completion.chunk` objects ended by `data: [DONE]`; tool
//! calls arrive as `delta.tool_calls[]` pieces keyed by `index`, which map one to one onto
//! [`ToolCallFragment`]s.

use eventsource_stream::Event;
use serde_json::{Value, json};

use super::http::{HttpProvider, KeyHeader, SseDecoder, WireFormat, parse_json, truncate_body};
use super::{
    GenerateParams, Message, ProviderError, ProviderEvent, Role, ToolCallFragment, ToolChoice,
    ToolDefinition, Usage,
};

/// A provider speaking OpenAI Chat Completions.
pub type OpenAiProvider = HttpProvider<ChatCompletions>;

/// The Chat Completions API.
pub struct ChatCompletions;

impl WireFormat for ChatCompletions {
    const KEY_HEADER: KeyHeader = KeyHeader::Bearer;
    type Decoder = ChunkDecoder;

    fn request(model: &str, params: &GenerateParams) -> (String, Value) {
        ("/chat/completions".into(), request_body(model, params))
    }
}

/// The Chat Completions request for `params`, to `model`.
fn request_body(model: &str, params: &GenerateParams) -> Value {
    let mut body = json!({
        "model": model,
        "messages": params.messages.iter().map(message).collect::<Vec<_>>(),
        "stream": true,
        // Without it the stream carries no token counts.
        "stream_options": {"include_usage": true},
    });
    if !params.tools.is_empty() {
        body["tools"] = params.tools.iter().map(tool).collect();
        match &params.tool_choice {
            ToolChoice::Auto => {}
            ToolChoice::Required => body["tool_choice"] = json!("required"),
            ToolChoice::Tool(name) => {
                body["tool_choice"] = json!({"type": "function", "function": {"name": name}});
            }
        }
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
#[derive(Default)]
pub struct ChunkDecoder;

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
