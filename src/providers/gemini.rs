//! Google Gemini (`POST {base_url}/models/{model}:streamGenerateContent?alt=sse`).
//!
//! Gemini differs from the other two in three ways this file absorbs: the assistant role is
//! `model` and tool results are `functionResponse` parts addressed by the tool's *name*;
//! function calls arrive whole (one [`ToolCallFragment`] each) and without ids, so we give
//! them ids unique across streams and restarts (`call_<name>_<random>`, the session's own
//! fallback shape); and the stream has no end marker — it is complete
//! when a chunk carried a `finishReason`, and cut short otherwise.

use std::collections::HashMap;

use eventsource_stream::Event;
use serde_json::{Value, json};

use super::http::{HttpProvider, KeyHeader, SseDecoder, WireFormat, parse_json, truncate_body};
use super::{
    GenerateParams, Message, ProviderError, ProviderEvent, Role, ToolCallFragment, ToolChoice,
    Usage,
};

/// A provider speaking the Gemini API.
pub type GeminiProvider = HttpProvider<StreamGenerateContent>;

/// The Gemini API's `streamGenerateContent`.
pub struct StreamGenerateContent;

impl WireFormat for StreamGenerateContent {
    const KEY_HEADER: KeyHeader = KeyHeader::Named("x-goog-api-key");
    type Decoder = ChunkDecoder;

    fn request(model: &str, params: &GenerateParams) -> (String, Value) {
        let path = format!("/models/{model}:streamGenerateContent?alt=sse");
        (path, request_body(params))
    }
}

/// The `generateContent` request for `params`.
fn request_body(params: &GenerateParams) -> Value {
    let system: Vec<&str> = params
        .messages
        .iter()
        .filter(|m| m.role == Role::System && !m.content.is_empty())
        .map(|m| m.content.as_str())
        .collect();
    let mut body = json!({"contents": contents(&params.messages)});
    if !system.is_empty() {
        body["systemInstruction"] = json!({"parts": [{"text": system.join("\n")}]});
    }
    if !params.tools.is_empty() {
        let declarations: Vec<Value> = params
            .tools
            .iter()
            // `parametersJsonSchema` takes full JSON Schema; the older `parameters` takes an
            // OpenAPI subset that rejects e.g. `additionalProperties`.
            .map(|t| json!({"name": t.name, "description": t.description, "parametersJsonSchema": t.parameters}))
            .collect();
        body["tools"] = json!([{"functionDeclarations": declarations}]);
        let only = match &params.tool_choice {
            ToolChoice::Auto => None,
            ToolChoice::Required => Some(json!({"mode": "ANY"})),
            ToolChoice::Tool(name) => Some(json!({"mode": "ANY", "allowedFunctionNames": [name]})),
        };
        if let Some(config) = only {
            body["toolConfig"] = json!({"functionCallingConfig": config});
        }
    }
    let mut config = serde_json::Map::new();
    if let Some(t) = params.temperature {
        config.insert("temperature".into(), json!(t));
    }
    if let Some(n) = params.max_tokens {
        config.insert("maxOutputTokens".into(), json!(n));
    }
    if !config.is_empty() {
        body["generationConfig"] = Value::Object(config);
    }
    body
}

/// The conversation as Gemini contents; consecutive parts of one side share a content, so
/// the responses to parallel calls arrive together as Gemini requires.
fn contents(messages: &[Message]) -> Vec<Value> {
    // Results name their tool; when a tool message lacks the name, its call has it.
    let call_names: HashMap<&str, &str> = messages
        .iter()
        .flat_map(|m| m.tool_calls.iter())
        .map(|c| (c.id.as_str(), c.name.as_str()))
        .collect();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in messages {
        let (role, parts) = match m.role {
            Role::System => continue,
            Role::User => ("user", text_part(&m.content).into_iter().collect()),
            Role::Assistant => {
                let mut parts: Vec<Value> = text_part(&m.content).into_iter().collect();
                parts.extend(m.tool_calls.iter().map(|c| {
                    json!({"functionCall": {"name": c.name, "args": arguments_object(&c.arguments)}})
                }));
                ("model", parts)
            }
            Role::Tool => {
                let name = m.name.as_deref().or_else(|| {
                    m.tool_call_id
                        .as_deref()
                        .and_then(|id| call_names.get(id).copied())
                });
                let part = json!({"functionResponse": {
                    "name": name.unwrap_or_default(),
                    "response": response_object(&m.content),
                }});
                ("user", vec![part])
            }
        };
        if parts.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(parts),
            _ => turns.push((role, parts)),
        }
    }
    turns
        .into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect()
}

fn text_part(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"text": text}))
}

/// `functionCall.args` must be an object; arguments that are not one become `{}`.
fn arguments_object(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({}),
    }
}

/// `functionResponse.response` must be an object: a JSON object result is sent as is, any
/// other result is wrapped as `{"result": …}`.
fn response_object(content: &str) -> Value {
    match serde_json::from_str::<Value>(content) {
        Ok(v @ Value::Object(_)) => v,
        Ok(other) => json!({"result": other}),
        Err(_) => json!({"result": content}),
    }
}

/// Decodes `GenerateContentResponse` chunks.
#[derive(Default)]
pub struct ChunkDecoder {
    /// Function calls seen so far: the next call's index.
    calls: usize,
    finished: bool,
    /// Gemini repeats cumulative usage on every chunk; only the last one is reported.
    usage: Option<Usage>,
}

impl SseDecoder for ChunkDecoder {
    fn decode(&mut self, event: &Event) -> Vec<ProviderEvent> {
        let chunk = match parse_json(event) {
            Ok(chunk) => chunk,
            Err(error) => return vec![error],
        };
        if let Some(error) = chunk.get("error") {
            return vec![ProviderEvent::Error(stream_error(error))];
        }
        let mut out = Vec::new();
        let candidate = &chunk["candidates"][0];
        for part in candidate["content"]["parts"]
            .as_array()
            .into_iter()
            .flatten()
        {
            // Thought summaries are not part of the answer.
            if part["thought"].as_bool() == Some(true) {
                continue;
            }
            if let Some(text) = part["text"].as_str().filter(|t| !t.is_empty()) {
                out.push(ProviderEvent::TextDelta(text.to_owned()));
            }
            if let Some(call) = part.get("functionCall") {
                let name = call["name"].as_str().unwrap_or_default().to_owned();
                let index = self.calls;
                self.calls += 1;
                let id = call["id"].as_str().filter(|id| !id.is_empty()).map_or_else(
                    || format!("call_{name}_{}", uuid::Uuid::new_v4().simple()),
                    str::to_owned,
                );
                let args = call.get("args").cloned().unwrap_or_else(|| json!({}));
                out.push(ProviderEvent::ToolCallFragment(ToolCallFragment {
                    index: Some(index),
                    id: Some(id),
                    name: Some(name),
                    arguments: args.to_string(),
                }));
            }
        }
        if let Some(usage) = chunk.get("usageMetadata").filter(|u| u.is_object()) {
            self.usage = Some(Usage {
                input_tokens: usage["promptTokenCount"].as_u64().unwrap_or(0),
                output_tokens: usage["candidatesTokenCount"].as_u64().unwrap_or(0),
            });
        }
        if candidate["finishReason"]
            .as_str()
            .is_some_and(|r| !r.is_empty())
        {
            self.finished = true;
        }
        out
    }

    fn end(&mut self) -> Vec<ProviderEvent> {
        if !self.finished {
            return vec![ProviderEvent::Error(ProviderError::StreamEnded)];
        }
        let mut out: Vec<ProviderEvent> = self
            .usage
            .take()
            .map(ProviderEvent::Usage)
            .into_iter()
            .collect();
        out.push(ProviderEvent::Done);
        out
    }
}

/// An `{"error": {code, message, status}}` chunk; `code` is the HTTP status.
fn stream_error(error: &Value) -> ProviderError {
    let status = error["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(500);
    ProviderError::Http {
        status,
        body: truncate_body(&error.to_string()),
    }
}
