//! The service error: every way a request can fail, in the terms of the domain.
//!
//! `crate::a2a::errors` maps each variant to its JSON-RPC code, HTTP status and
//! `ErrorInfo` reason in one exhaustive `match`. What a client may read of an error is
//! [`Error::client_message`], on every binding and in a failed task's status: variants
//! that carry internal detail (`Internal`, `Unavailable`, `InvalidAgentResponse`) keep
//! it for the log only.

use crate::domain::{ContextId, TaskId, TaskState};

/// Serialized (its storage-style encoding) only between the nodes of a cluster, when a
/// node answers a request another node forwarded to it.
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum Error {
    /// The body is not JSON.
    #[error("invalid JSON: {0}")]
    Parse(String),
    /// Valid JSON that is not a valid request envelope (JSON-RPC shape, batch, …).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("method not found: {0}")]
    MethodNotFound(String),
    /// Parameters missing or malformed; the text names the field.
    #[error("invalid params: {0}")]
    InvalidParams(String),
    #[error("A2A version {0:?} is not supported (supported: 1.0, 0.3)")]
    VersionNotSupported(String),
    /// Wrong request `Content-Type`, or a part media type the agent does not accept.
    #[error("content type not supported: {0}")]
    ContentTypeNotSupported(String),
    #[error("request body exceeds the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },

    #[error("task {0} not found")]
    TaskNotFound(TaskId),
    #[error("task {task_id} is {} and cannot be canceled", state.as_str())]
    TaskNotCancelable { task_id: TaskId, state: TaskState },
    #[error("unsupported operation: {0}")]
    UnsupportedOperation(String),
    #[error("push notifications are not supported")]
    PushNotificationNotSupported,
    #[error("no extended agent card is configured")]
    ExtendedAgentCardNotConfigured,
    /// The agent produced something the protocol does not allow (logged in full).
    #[error("invalid agent response: {0}")]
    InvalidAgentResponse(String),
    #[error("thread {0} has expired; start a new conversation")]
    ThreadExpired(ContextId),
    /// `ifGenerationMatch` named another generation than the task's (the task-generations
    /// extension).
    #[error("task {task_id} is at generation {current}, not {expected}")]
    TaskGenerationMismatch {
        task_id: TaskId,
        expected: i64,
        current: i64,
    },

    /// Credentials missing or not recognised (HTTP 401 with `WWW-Authenticate`).
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// A bearer token (JWT) was presented and refused: HTTP 401 whose `WWW-Authenticate`
    /// says `error="invalid_token"` with the reason's fixed description (RFC 6750), which
    /// is also the whole client-facing message.
    #[error("{}", .0.description())]
    InvalidToken(TokenError),
    /// The caller is over a rate limit (HTTP 429 with `Retry-After`).
    #[error("rate limit exceeded for {scope}; retry after {retry_after_secs} s")]
    RateLimited {
        retry_after_secs: u64,
        /// Whose budget ran out, e.g. `tenant acme on skill memory`.
        scope: String,
    },

    /// A dependency (the database) is down or saturated: nothing was acknowledged and
    /// the client should retry after the given number of seconds.
    #[error("service unavailable: {detail}")]
    Unavailable {
        detail: String,
        retry_after_secs: u64,
    },
    /// A bug or an unexpected failure; the detail goes to the log, never to the client.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    pub fn invalid_params(msg: impl Into<String>) -> Self {
        Error::InvalidParams(msg.into())
    }

    pub fn internal(msg: impl std::fmt::Display) -> Self {
        Error::Internal(msg.to_string())
    }

    /// What a client may be told of this error, on any binding or in a failed task's
    /// status: the error itself, or a fixed text for the variants whose detail is
    /// internal.
    pub fn client_message(&self) -> String {
        self.client_view().0
    }

    /// The `errorCode` a task failed by this error carries in its status metadata.
    pub fn task_error_code(&self) -> &'static str {
        self.client_view().1
    }

    /// The client's view of an error: its text and a failed task's `errorCode`, decided
    /// together in one place. Exhaustive: a new variant does not compile until it is
    /// placed here.
    fn client_view(&self) -> (String, &'static str) {
        match self {
            Error::InvalidAgentResponse(_) => (
                "the agent produced an invalid response".into(),
                "INVALID_AGENT_RESPONSE",
            ),
            Error::Internal(_) => ("internal error".into(), "INTERNAL_ERROR"),
            Error::Unavailable { .. } => (
                "service temporarily unavailable, retry later".into(),
                "AGENT_ERROR",
            ),
            Error::Parse(_)
            | Error::InvalidRequest(_)
            | Error::MethodNotFound(_)
            | Error::InvalidParams(_)
            | Error::VersionNotSupported(_)
            | Error::ContentTypeNotSupported(_)
            | Error::PayloadTooLarge { .. }
            | Error::TaskNotFound(_)
            | Error::TaskNotCancelable { .. }
            | Error::UnsupportedOperation(_)
            | Error::PushNotificationNotSupported
            | Error::ExtendedAgentCardNotConfigured
            | Error::ThreadExpired(_)
            | Error::TaskGenerationMismatch { .. }
            | Error::Unauthenticated(_)
            | Error::InvalidToken(_)
            | Error::RateLimited { .. } => (self.to_string(), "AGENT_ERROR"),
        }
    }
}

/// Why a bearer token was refused. Each reason has a short, fixed description that is
/// safe to send (it names no key, claim value or library detail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TokenError {
    Expired,
    NotYetValid,
    Audience,
    Issuer,
    /// No key of the issuer has the token's `kid`, even after a refetch.
    UnknownKey,
    /// The header names an algorithm the issuer is not configured to accept.
    Algorithm,
    Signature,
    /// Not a well-formed signed JWT (or a required claim such as `exp` is missing).
    Malformed,
    /// Longer than `auth.jwt_max_token_bytes`.
    TooLarge,
    /// The header has `crit`: it lists extensions the server must understand, and it
    /// understands none (RFC 7515 §4.1.11).
    Critical,
    /// Verified, but the claim that names the tenant is missing or not a tenant id
    /// (`TenantId::parse`).
    Tenant,
}

impl TokenError {
    /// The RFC 6750 `error_description`, and the client-facing message.
    pub fn description(self) -> &'static str {
        match self {
            TokenError::Expired => "token expired",
            TokenError::NotYetValid => "token not yet valid",
            TokenError::Audience => "audience not accepted",
            TokenError::Issuer => "issuer not accepted",
            TokenError::UnknownKey => "unknown signing key",
            TokenError::Algorithm => "algorithm not allowed",
            TokenError::Signature => "signature invalid",
            TokenError::Malformed => "malformed token",
            TokenError::TooLarge => "token too large",
            TokenError::Critical => "unsupported critical header",
            TokenError::Tenant => "tenant claim missing or not a valid tenant id",
        }
    }

    /// A label value for metrics.
    pub fn label(self) -> &'static str {
        match self {
            TokenError::Expired => "expired",
            TokenError::NotYetValid => "not_yet_valid",
            TokenError::Audience => "audience",
            TokenError::Issuer => "issuer",
            TokenError::UnknownKey => "unknown_key",
            TokenError::Algorithm => "algorithm",
            TokenError::Signature => "signature",
            TokenError::Malformed => "malformed",
            TokenError::TooLarge => "too_large",
            TokenError::Critical => "critical",
            TokenError::Tenant => "tenant",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `e` and its sources, each after a colon: the whole of why, where an error's own text
/// leaves its cause out.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_detail_never_reaches_a_client() {
        let secret = "db password=hunter2";
        for err in [
            Error::Internal(secret.into()),
            Error::InvalidAgentResponse(secret.into()),
            Error::Unavailable {
                detail: secret.into(),
                retry_after_secs: 1,
            },
        ] {
            assert!(err.to_string().contains("hunter2"), "the log keeps it");
            assert!(!err.client_message().contains("hunter2"), "{err:?}");
        }
        let shown = Error::invalid_params("message.parts: at least one part is required");
        assert_eq!(shown.client_message(), shown.to_string());
    }
}
