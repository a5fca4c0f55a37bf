//! What a call to a remote agent is made over, and how it fails: the interface chosen
//! from its card ([`Endpoint`], spoken in its [`Binding`]), the [`CallError`] every part
//! of the client answers with, and the reading of an HTTP answer (its body bounded by
//! `max_answer_bytes`, its status and error told). The call, the card's read and the
//! gRPC binding each import these, and none of them imports another.

use reqwest::{StatusCode, Url};
use serde_json::Value;

/// Why a call to a remote agent did not give an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// Not reached, or no answer in time, or a server error: counts against its breaker.
    #[error("{0}")]
    Unreachable(String),
    /// It answered, and the answer is a refusal or cannot be read.
    #[error("{0}")]
    Refused(String),
}

/// The binding an interface is spoken in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    JsonRpc,
    HttpJson,
    /// `lf.a2a.v1.A2AService`.
    Grpc,
    /// A2A 0.3 JSON-RPC (`message/send`, `tasks/get`, `kind`-tagged objects).
    JsonRpc03,
    /// A2A 0.3 HTTP+JSON (under `/v1/`, the 0.3 proto's JSON: `content` for a message's
    /// parts, `TASK_STATE_*` states).
    Rest03,
}

impl Binding {
    /// Spoken in 0.3: its answers are read in the 0.3 JSON-RPC shape.
    pub(super) fn v03(self) -> bool {
        matches!(self, Self::JsonRpc03 | Self::Rest03)
    }

    /// The names of its send, task read and cancel.
    pub(super) fn methods(self) -> [&'static str; 3] {
        if self.v03() {
            ["message/send", "tasks/get", "tasks/cancel"]
        } else {
            ["SendMessage", "GetTask", "CancelTask"]
        }
    }
}

/// The interface of the card the client speaks to.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub url: Url,
    pub binding: Binding,
    /// The card's `tenant` of the interface, sent with each request when set.
    pub tenant: String,
    /// The gRPC interface's channel (connections kept between calls).
    pub(super) grpc: Option<tonic::transport::Channel>,
}

/// The body, refused past `limit` bytes (`max_answer_bytes`).
pub(super) async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, CallError> {
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Err(CallError::Refused(format!(
            "answered with more than {limit} bytes (max_answer_bytes)"
        )));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| CallError::Unreachable(describe(&e)))?
    {
        if body.len() + chunk.len() > limit {
            return Err(CallError::Refused(format!(
                "answered with more than {limit} bytes (max_answer_bytes)"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A JSON-RPC error or a `google.rpc.Status`: its message and code.
pub(super) fn error_text(error: &Value) -> String {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("no message");
    match error.get("code") {
        Some(code) => format!("{message} (code {code})"),
        None => message.to_owned(),
    }
}

/// A server error or a throttle counts against the breaker; any other status is a
/// refusal.
pub(super) fn unreachable_or_refused(status: StatusCode, what: &str) -> CallError {
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        CallError::Unreachable(format!("{what}: HTTP {status}"))
    } else {
        CallError::Refused(format!("{what}: HTTP {status}"))
    }
}

/// A transport error without the URL's query (the URL itself is the operator's).
pub(super) fn describe(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else {
        "failed"
    };
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(e);
    let mut detail = String::new();
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    if detail.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind} ({detail})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_are_told_by_message_and_code() {
        assert_eq!(
            error_text(&json!({"code": -32001, "message": "Task not found"})),
            "Task not found (code -32001)"
        );
        assert_eq!(
            unreachable_or_refused(StatusCode::BAD_GATEWAY, "SendMessage"),
            CallError::Unreachable("SendMessage: HTTP 502 Bad Gateway".into())
        );
        assert_eq!(
            unreachable_or_refused(StatusCode::NOT_FOUND, "its card"),
            CallError::Refused("its card: HTTP 404 Not Found".into())
        );
    }
}
