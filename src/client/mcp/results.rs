//! What a call's answer becomes: why it failed ([`Failure`], from the request's error),
//! the text of a result the server marks `isError`, and a result's pieces as the parts
//! of a direct call's artifact ([`parts_of`]) or, their bytes left out, as the model is
//! shown them ([`without_bytes`]).

use rmcp::ServiceError;
use serde_json::{Value, json};

use crate::domain::{Part, PartContent};

/// Why a request failed, as a call's failure.
pub(super) fn failure(error: ServiceError) -> Failure {
    match error {
        // A Streamable HTTP server that forgot the session and says so with a 400 rather
        // than the 404 the client re-initializes on: connect anew.
        ServiceError::McpError(error)
            if error.code.0 == -32000 && error.message.to_lowercase().contains("session") =>
        {
            Failure::Down(format!("the server forgot the session: {}", error.message))
        }
        ServiceError::McpError(error) => Failure::Refused(format!(
            "{} (JSON-RPC error {})",
            error.message, error.code.0
        )),
        ServiceError::Timeout { .. } => Failure::Slow,
        // Streamable HTTP: an answer past `max_json_response_size`, dropped undecoded.
        other if other.to_string().contains("exceeded the maximum size") => {
            Failure::TooLarge(format!("an answer {other}"))
        }
        other => Failure::Down(other.to_string()),
    }
}

/// The text blocks of a result's `content`, joined.
pub(super) fn text_of(content: Option<&Value>) -> String {
    let texts: Vec<&str> = content
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect();
    if texts.is_empty() {
        "(no text)".into()
    } else {
        texts.join("\n")
    }
}

/// A result's pieces as parts of their kinds, for a direct call's artifact: a text
/// block is a text part; an image or audio block, or an embedded binary resource, a
/// part of its bytes with its media type; an embedded text resource a text part with
/// its media type; a resource link a URL part (its name as the filename); a block of
/// another kind (or whose bytes are not base64) a data part holding the block; and the
/// structured content, last, a JSON data part. A resource's URI is in its part's
/// metadata (`uri`). A result with no pieces is one data part holding it.
pub(super) fn parts_of(result: &Value) -> Vec<Part> {
    use base64::Engine as _;
    let bytes = |data: &Value| {
        let text = data.as_str()?;
        base64::engine::general_purpose::STANDARD.decode(text).ok()
    };
    let typed = |content: PartContent, media: &Value| Part {
        media_type: media.as_str().map(str::to_owned),
        ..Part::of(content)
    };
    let with_uri = |mut part: Part, uri: &Value| {
        if let Some(uri) = uri.as_str() {
            part.metadata
                .get_or_insert_with(Default::default)
                .insert("uri".into(), json!(uri));
        }
        part
    };
    let mut parts = Vec::new();
    for block in result["content"].as_array().into_iter().flatten() {
        let part = match block["type"].as_str() {
            Some("text") => block["text"].as_str().map(Part::text),
            Some("image" | "audio") => {
                bytes(&block["data"]).map(|raw| typed(PartContent::Raw(raw), &block["mimeType"]))
            }
            Some("resource") => {
                let resource = &block["resource"];
                let content = match (resource["text"].as_str(), bytes(&resource["blob"])) {
                    (Some(text), _) => Some(PartContent::Text(text.to_owned())),
                    (None, Some(raw)) => Some(PartContent::Raw(raw)),
                    (None, None) => None,
                };
                content.map(|c| with_uri(typed(c, &resource["mimeType"]), &resource["uri"]))
            }
            Some("resource_link") => block["uri"].as_str().map(|uri| Part {
                filename: block["name"].as_str().map(str::to_owned),
                ..typed(PartContent::Url(uri.to_owned()), &block["mimeType"])
            }),
            _ => None,
        };
        parts.push(part.unwrap_or_else(|| Part::data(block.clone())));
    }
    if let Some(structured) = result.get("structuredContent") {
        parts.push(Part {
            media_type: Some("application/json".into()),
            ..Part::data(structured.clone())
        });
    }
    if parts.is_empty() {
        parts.push(Part::data(result.clone()));
    }
    parts
}

/// `result` with the base64 of its image and audio blocks and embedded binary
/// resources replaced by what they are and their size.
pub(super) fn without_bytes(mut result: Value) -> Value {
    if let Some(blocks) = result.get_mut("content").and_then(Value::as_array_mut) {
        for block in blocks {
            let kind = block["type"].as_str().unwrap_or_default().to_owned();
            let media = block["mimeType"].as_str().unwrap_or("unknown").to_owned();
            match kind.as_str() {
                "image" | "audio" => elide(block, "data", &format!("{kind} {media}")),
                "resource" => {
                    let resource = &mut block["resource"];
                    let media = resource["mimeType"]
                        .as_str()
                        .unwrap_or("unknown")
                        .to_owned();
                    elide(resource, "blob", &format!("resource {media}"));
                }
                _ => {}
            }
        }
    }
    result
}

/// Replaces the base64 text at `field` of `block` (if there is one) by a note of what
/// it was.
fn elide(block: &mut Value, field: &str, what: &str) {
    if let Some(Value::String(data)) = block.get(field) {
        let padding = data.bytes().rev().take_while(|&b| b == b'=').count();
        let bytes = (data.len() / 4 * 3).saturating_sub(padding);
        block[field] = Value::String(format!("({what}, ~{bytes} bytes, not shown to the model)"));
    }
}

/// Why a call failed.
#[derive(Debug)]
pub(super) enum Failure {
    /// The server answered with a JSON-RPC error.
    Refused(String),
    /// The tool ran and says it failed (`isError`).
    ToolError(String),
    /// No answer within `timeout_ms`.
    Slow,
    /// Not connected, or the connection broke.
    Down(String),
    /// The answer was larger than `max_result_bytes` (how large it was, or how large it
    /// was found to be before it was dropped).
    TooLarge(String),
    /// The answer could not be read.
    Garbage(String),
}

impl Failure {
    /// Whether the server was reached (for its breaker).
    pub(super) fn reached(&self) -> bool {
        !matches!(self, Failure::Slow | Failure::Down(_))
    }

    pub(super) fn label(&self) -> &'static str {
        match self {
            Failure::Refused(_) => "refused",
            Failure::ToolError(_) => "tool_error",
            Failure::Slow => "timeout",
            Failure::Down(_) => "unreachable",
            Failure::TooLarge(_) => "too_large",
            Failure::Garbage(_) => "garbage",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_results_pieces_become_parts_of_their_kinds() {
        let result = json!({
            "content": [
                {"type": "text", "text": "here"},
                {"type": "image", "mimeType": "image/png", "data": "aGk="},
                {"type": "audio", "mimeType": "audio/wav", "data": "not base64!"},
                {"type": "resource", "resource": {"uri": "file:///a.zip", "mimeType": "application/zip", "blob": "UEs="}},
                {"type": "resource", "resource": {"uri": "file:///b.md", "mimeType": "text/markdown", "text": "# b"}},
                {"type": "resource_link", "uri": "https://example.com/c.pdf", "name": "c.pdf", "mimeType": "application/pdf"},
                {"type": "hologram", "x": 1},
            ],
            "structuredContent": {"n": 1},
        });
        let parts: Vec<Value> = parts_of(&result)
            .iter()
            .map(|p| serde_json::to_value(p).unwrap())
            .collect();
        assert_eq!(
            parts,
            [
                json!({"content": {"text": "here"}}),
                json!({"content": {"raw": "aGk="}, "media_type": "image/png"}),
                json!({"content": {"data": {"type": "audio", "mimeType": "audio/wav", "data": "not base64!"}}}),
                json!({"content": {"raw": "UEs="}, "media_type": "application/zip", "metadata": {"uri": "file:///a.zip"}}),
                json!({"content": {"text": "# b"}, "media_type": "text/markdown", "metadata": {"uri": "file:///b.md"}}),
                json!({"content": {"url": "https://example.com/c.pdf"}, "filename": "c.pdf", "media_type": "application/pdf"}),
                json!({"content": {"data": {"type": "hologram", "x": 1}}}),
                json!({"content": {"data": {"n": 1}}, "media_type": "application/json"}),
            ]
        );
        assert_eq!(
            parts_of(&json!({"content": []})),
            [Part::data(json!({"content": []}))]
        );
    }

    #[test]
    fn a_model_is_shown_what_binary_blocks_are_not_their_bytes() {
        let result = json!({
            "content": [
                {"type": "text", "text": "here"},
                {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
                {"type": "audio", "mimeType": "audio/wav", "data": "UklGRg=="},
                {"type": "resource", "resource": {"uri": "file:///a", "mimeType": "application/zip", "blob": "UEsDBA=="}},
                {"type": "resource", "resource": {"uri": "file:///b", "text": "plain"}},
            ],
            "structuredContent": {"n": 1},
        });
        let shown = without_bytes(result);
        assert_eq!(
            shown,
            json!({
                "content": [
                    {"type": "text", "text": "here"},
                    {"type": "image", "mimeType": "image/png", "data": "(image image/png, ~8 bytes, not shown to the model)"},
                    {"type": "audio", "mimeType": "audio/wav", "data": "(audio audio/wav, ~4 bytes, not shown to the model)"},
                    {"type": "resource", "resource": {"uri": "file:///a", "mimeType": "application/zip", "blob": "(resource application/zip, ~4 bytes, not shown to the model)"}},
                    {"type": "resource", "resource": {"uri": "file:///b", "text": "plain"}},
                ],
                "structuredContent": {"n": 1},
            })
        );
    }
}
