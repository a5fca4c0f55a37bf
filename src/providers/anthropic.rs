//! Anthropic Messages (`POST {base_url}/messages`, `stream: true`).
//!
//! Anthropic has no system role in `messages` (system text goes to `system`), answers tool
//! calls with `tool_result` blocks in a user turn, and streams content blocks by `index`:
//! a `tool_use` block's start carries its id and name, and its arguments follow as
//! `input_json_delta` pieces — each becomes a [`ToolCallFragment`] with the block's index.

use eventsource_stream::Event;
use serde_json::{Value, json};

use super::http::{HttpProvider, KeyHeader, SseDecoder, WireFormat, parse_json, truncate_body};
use super::{
    GenerateParams, Message, ProviderError, ProviderEvent, Role, ToolCallFragment, ToolChoice,
    Usage,
};

/// The API version this file speaks.
const API_VERSION: &str = "2023-06-01";
/// `max_tokens` is required by the API; this is used when the caller sets none.
const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A provider speaking Anthropic Messages.
pub type AnthropicProvider = HttpProvider<Messages>;

/// The Messages API.
pub struct Messages;

impl WireFormat for Messages {
    const KEY_HEADER: KeyHeader = KeyHeader::Named("x-api-key");
    const HEADERS: &'static [(&'static str, &'static str)] = &[("anthropic-version", API_VERSION)];
    type Decoder = EventDecoder;

    fn request(model: &str, params: &GenerateParams) -> (String, Value) {
        ("/messages".into(), request_body(model, params))
    }
}

/// The Messages request for `params`, to `model`.
fn request_body(model: &str, params: &GenerateParams) -> Value {
    let system: Vec<&str> = params
        .messages
        .iter()
        .filter(|m| m.role == Role::System && !m.content.is_empty())
        .map(|m| m.content.as_str())
        .collect();
    let mut body = json!({
        "model": model,
        "max_tokens": params.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        "messages": messages(&params.messages),
        "stream": true,
    });
    if !system.is_empty() {
        body["system"] = json!(system.join("\n"));
    }
    if !params.tools.is_empty() {
        body["tools"] = params
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        match &params.tool_choice {
            ToolChoice::Auto => {}
            ToolChoice::Required => body["tool_choice"] = json!({"type": "any"}),
            ToolChoice::Tool(name) => body["tool_choice"] = json!({"type": "tool", "name": name}),
        }
    }
    if let Some(t) = params.temperature {
        body["temperature"] = json!(t);
    }
    body
}

/// The conversation as Anthropic turns. Consecutive messages of one side are merged into
/// one turn, so several tool results answer their calls together as the API requires.
fn messages(messages: &[Message]) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in messages {
        let (role, blocks) = match m.role {
            Role::System => continue,
            Role::User => ("user", text_block(&m.content).into_iter().collect()),
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id.as_deref().unwrap_or_default(),
                    "content": m.content,
                })],
            ),
            Role::Assistant => {
                let mut blocks: Vec<Value> = text_block(&m.content).into_iter().collect();
                blocks.extend(m.tool_calls.iter().map(|c| {
                    json!({
                        "type": "tool_use",
                        "id": c.id,
                        "name": c.name,
                        "input": arguments_object(&c.arguments),
                    })
                }));
                ("assistant", blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// A text block, or none for empty text (the API rejects empty text blocks).
fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

/// `tool_use.input` must be an object; arguments that are not one become `{}`.
fn arguments_object(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({}),
    }
}

/// Decodes Messages stream events.
#[derive(Default)]
pub struct EventDecoder {
    /// From `message_start`; `message_delta` carries only the output count.
    input_tokens: u64,
}

impl SseDecoder for EventDecoder {
    fn decode(&mut self, event: &Event) -> Vec<ProviderEvent> {
        let data = match parse_json(event) {
            Ok(data) => data,
            Err(error) => return vec![error],
        };
        let index = data["index"].as_u64().and_then(|i| usize::try_from(i).ok());
        match data["type"].as_str().unwrap_or_default() {
            "message_start" => {
                self.input_tokens = data["message"]["usage"]["input_tokens"]
                    .as_u64()
                    .unwrap_or(0);
                Vec::new()
            }
            "content_block_start" => {
                let block = &data["content_block"];
                match block["type"].as_str() {
                    Some("text") => text_delta(&block["text"]),
                    Some("tool_use") => vec![ProviderEvent::ToolCallFragment(ToolCallFragment {
                        index,
                        id: block["id"].as_str().map(str::to_owned),
                        name: block["name"].as_str().map(str::to_owned),
                        arguments: String::new(),
                    })],
                    // Thinking and other block kinds are not part of the answer.
                    _ => Vec::new(),
                }
            }
            "content_block_delta" => {
                let delta = &data["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => text_delta(&delta["text"]),
                    Some("input_json_delta") => {
                        vec![ProviderEvent::ToolCallFragment(ToolCallFragment {
                            index,
                            id: None,
                            name: None,
                            arguments: delta["partial_json"]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned(),
                        })]
                    }
                    _ => Vec::new(),
                }
            }
            "message_delta" => match data.get("usage").filter(|u| u.is_object()) {
                Some(usage) => vec![ProviderEvent::Usage(Usage {
                    // Newer API versions repeat the input count here; prefer it when given.
                    input_tokens: usage["input_tokens"].as_u64().unwrap_or(self.input_tokens),
                    output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
                })],
                None => Vec::new(),
            },
            "message_stop" => vec![ProviderEvent::Done],
            "error" => vec![ProviderEvent::Error(stream_error(&data["error"]))],
            // `ping`, `content_block_stop` and event types added later carry nothing we use.
            _ => Vec::new(),
        }
    }
}

fn text_delta(text: &Value) -> Vec<ProviderEvent> {
    match text.as_str().filter(|t| !t.is_empty()) {
        Some(t) => vec![ProviderEvent::TextDelta(t.to_owned())],
        None => Vec::new(),
    }
}

/// An `error` event, with the HTTP status its documented error type stands for.
fn stream_error(error: &Value) -> ProviderError {
    let status = match error["type"].as_str().unwrap_or_default() {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        _ => 500,
    };
    ProviderError::Http {
        status,
        body: truncate_body(&error.to_string()),
    }
}
