//! The service [`Error`] as every binding reports it: JSON-RPC code, HTTP status, gRPC
//! status name and `google.rpc.ErrorInfo` reason, per the A2A 1.0.1 table.
//!
//! **Architecture invariant:** [`map_error`] is the only place a variant becomes a code,
//! and it matches exhaustively, so a new variant does not compile until it is mapped.
//! Variants carrying internal detail (`Internal`, `Unavailable`, `InvalidAgentResponse`)
//! get a fixed client message; the detail stays in the log.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::version::SUPPORTED_VERSIONS;
use crate::error::Error;

/// `ErrorInfo.domain` of every A2A error.
pub const ERROR_DOMAIN: &str = "a2a-protocol.org";
/// The `@type` of a `google.rpc.ErrorInfo` detail.
pub const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";

/// How one error is reported on every binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorMapping {
    /// JSON-RPC `error.code`.
    pub code: i64,
    /// HTTP status of a REST response (JSON-RPC errors always travel with 200).
    pub http_status: u16,
    /// gRPC status name, also the REST `error.status`.
    pub grpc_status: &'static str,
    /// `ErrorInfo.reason`.
    pub reason: &'static str,
    /// The client-facing message: never internal detail.
    pub message: String,
    /// `ErrorInfo.metadata` (string values only, as `map<string,string>` requires).
    pub metadata: BTreeMap<String, String>,
}

/// Maps a service error to its codes, reason and client-facing message.
pub fn map_error(err: &Error) -> ErrorMapping {
    let shown = || err.client_message();
    let meta = |pairs: &[(&str, String)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    };
    let (code, http_status, grpc_status, reason, message, metadata) = match err {
        Error::Parse(_) => (
            -32700,
            400,
            "INVALID_ARGUMENT",
            "PARSE_ERROR",
            shown(),
            meta(&[]),
        ),
        Error::InvalidRequest(_) => (
            -32600,
            400,
            "INVALID_ARGUMENT",
            "INVALID_REQUEST",
            shown(),
            meta(&[]),
        ),
        Error::MethodNotFound(method) => (
            -32601,
            404,
            "NOT_FOUND",
            "METHOD_NOT_FOUND",
            shown(),
            meta(&[("method", method.clone())]),
        ),
        Error::InvalidParams(_) => (
            -32602,
            400,
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
            shown(),
            meta(&[]),
        ),
        Error::VersionNotSupported(requested) => (
            -32009,
            400,
            "FAILED_PRECONDITION",
            "VERSION_NOT_SUPPORTED",
            shown(),
            meta(&[
                ("requestedVersion", requested.clone()),
                ("supportedVersions", SUPPORTED_VERSIONS.join(",")),
            ]),
        ),
        // 415 follows the transport-level case (a wrong Content-Type header); 1.0.1 lists
        // 400 for part media types, and the http layer may choose that status itself.
        // The text is free-form (it may explain the fix), so it goes in the message only.
        Error::ContentTypeNotSupported(_) => (
            -32005,
            415,
            "INVALID_ARGUMENT",
            "CONTENT_TYPE_NOT_SUPPORTED",
            shown(),
            meta(&[]),
        ),
        Error::PayloadTooLarge { limit } => (
            -32600,
            413,
            "INVALID_ARGUMENT",
            "PAYLOAD_TOO_LARGE",
            shown(),
            meta(&[("limitBytes", limit.to_string())]),
        ),
        Error::TaskNotFound(task_id) => (
            -32001,
            404,
            "NOT_FOUND",
            "TASK_NOT_FOUND",
            shown(),
            meta(&[("taskId", task_id.to_string())]),
        ),
        Error::TaskNotCancelable { task_id, .. } => (
            -32002,
            400,
            "FAILED_PRECONDITION",
            "TASK_NOT_CANCELABLE",
            shown(),
            meta(&[("taskId", task_id.to_string())]),
        ),
        Error::UnsupportedOperation(_) => (
            -32004,
            400,
            "FAILED_PRECONDITION",
            "UNSUPPORTED_OPERATION",
            shown(),
            meta(&[]),
        ),
        // The A2A 1.1 draft's error, served by the task-generations extension.
        Error::TaskGenerationMismatch {
            task_id,
            expected,
            current,
        } => (
            -32010,
            409,
            "ABORTED",
            "TASK_GENERATION_MISMATCH",
            shown(),
            meta(&[
                ("taskId", task_id.to_string()),
                ("expectedGeneration", expected.to_string()),
                ("currentGeneration", current.to_string()),
            ]),
        ),
        Error::PushNotificationNotSupported => (
            -32003,
            400,
            "FAILED_PRECONDITION",
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
            shown(),
            meta(&[]),
        ),
        Error::ExtendedAgentCardNotConfigured => (
            -32007,
            400,
            "FAILED_PRECONDITION",
            "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            shown(),
            meta(&[]),
        ),
        // The detail describes the agent's internals; it is logged, not sent.
        Error::InvalidAgentResponse(_) => (
            -32006,
            500,
            "INTERNAL",
            "INVALID_AGENT_RESPONSE",
            err.client_message(),
            meta(&[]),
        ),
        Error::ThreadExpired(context_id) => (
            -32004,
            400,
            "FAILED_PRECONDITION",
            "THREAD_EXPIRED",
            shown(),
            meta(&[("contextId", context_id.to_string())]),
        ),
        Error::Unauthenticated(_) => (
            -32000,
            401,
            "UNAUTHENTICATED",
            "UNAUTHENTICATED",
            shown(),
            meta(&[]),
        ),
        // The message is the RFC 6750 description the `WWW-Authenticate` header carries.
        Error::InvalidToken(_) => (
            -32000,
            401,
            "UNAUTHENTICATED",
            "UNAUTHENTICATED",
            shown(),
            meta(&[("error", "invalid_token".into())]),
        ),
        Error::RateLimited {
            retry_after_secs, ..
        } => (
            -32000,
            429,
            "RESOURCE_EXHAUSTED",
            "RATE_LIMIT_EXCEEDED",
            shown(),
            meta(&[("retryAfterSeconds", retry_after_secs.to_string())]),
        ),
        Error::Unavailable {
            retry_after_secs, ..
        } => (
            -32000,
            503,
            "UNAVAILABLE",
            "UNAVAILABLE",
            err.client_message(),
            meta(&[("retryAfterSeconds", retry_after_secs.to_string())]),
        ),
        Error::Internal(_) => (
            -32603,
            500,
            "INTERNAL",
            "INTERNAL_ERROR",
            err.client_message(),
            meta(&[]),
        ),
    };
    ErrorMapping {
        code,
        http_status,
        grpc_status,
        reason,
        message,
        metadata,
    }
}

/// The `google.rpc.ErrorInfo` detail of a mapping.
fn error_info(mapping: &ErrorMapping) -> Value {
    json!({
        "@type": ERROR_INFO_TYPE,
        "reason": mapping.reason,
        "domain": ERROR_DOMAIN,
        "metadata": mapping.metadata,
    })
}

/// The HTTP status of a JSON-RPC error response: 200 as the binding requires, except
/// where the transport itself must say it — 413 for a body over the limit (nothing was
/// parsed), 401 without credentials, 429 and 503 when the client should come back
/// later. Those are the REST statuses of the same errors, so the one table decides.
pub fn jsonrpc_http_status(err: &Error) -> u16 {
    match map_error(err).http_status {
        status @ (401 | 413 | 429 | 503) => status,
        _ => 200,
    }
}

/// The JSON-RPC `error` member: exactly `code`, `message` and `data` (an array holding
/// the `ErrorInfo`), as the conformance schema allows no other keys.
pub fn jsonrpc_error_object(err: &Error) -> Value {
    let mapping = map_error(err);
    json!({
        "code": mapping.code,
        "message": mapping.message,
        "data": [error_info(&mapping)],
    })
}

/// The REST error: HTTP status and a `google.rpc.Status` body
/// `{"error":{"code","status","message","details":[ErrorInfo]}}`.
pub fn rest_error_body(err: &Error) -> (u16, Value) {
    let mapping = map_error(err);
    let body = json!({
        "error": {
            "code": mapping.http_status,
            "status": mapping.grpc_status,
            "message": mapping.message,
            "details": [error_info(&mapping)],
        }
    });
    (mapping.http_status, body)
}

/// A 0.3 REST error: the `google.rpc.Status` body of [`rest_error_body`] plus the
/// top-level fields the SDKs' 0.3 REST clients read — `code` and `message` as in a
/// JSON-RPC error (the JavaScript SDK), and `type`, the error's class name (the Python
/// SDK's compat client), when the code has one.
pub fn rest_v03_error_body(err: &Error) -> (u16, Value) {
    let (status, mut body) = rest_error_body(err);
    let mapping = map_error(err);
    if let Some(top) = body.as_object_mut() {
        top.insert("code".into(), json!(mapping.code));
        top.insert("message".into(), json!(mapping.message));
        if let Some(name) = error_type_name(mapping.code) {
            top.insert("type".into(), json!(name));
        }
    }
    (status, body)
}

/// The A2A / JSON-RPC error class of a code, as the SDKs name it.
fn error_type_name(code: i64) -> Option<&'static str> {
    Some(match code {
        -32001 => "TaskNotFoundError",
        -32002 => "TaskNotCancelableError",
        -32003 => "PushNotificationNotSupportedError",
        -32004 => "UnsupportedOperationError",
        -32005 => "ContentTypeNotSupportedError",
        -32006 => "InvalidAgentResponseError",
        -32007 => "ExtendedAgentCardNotConfiguredError",
        -32008 => "ExtensionSupportRequiredError",
        -32009 => "VersionNotSupportedError",
        -32010 => "TaskGenerationMismatchError",
        -32600 => "InvalidRequestError",
        -32601 => "MethodNotFoundError",
        -32602 => "InvalidParamsError",
        -32603 => "InternalError",
        -32700 => "JSONParseError",
        _ => return None,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::domain::{ContextId, TaskId, TaskState};
    use crate::error::TokenError;

    #[test]
    fn json_rpc_errors_travel_with_200_unless_the_transport_must_speak() {
        for err in all_variants() {
            let expected = match err {
                Error::PayloadTooLarge { .. } => 413,
                Error::Unauthenticated(_) | Error::InvalidToken(_) => 401,
                Error::RateLimited { .. } => 429,
                Error::Unavailable { .. } => 503,
                _ => 200,
            };
            assert_eq!(jsonrpc_http_status(&err), expected, "{err:?}");
        }
    }

    #[test]
    fn v03_rest_errors_carry_the_top_level_fields_of_both_sdks() {
        let (status, body) =
            rest_v03_error_body(&Error::TaskNotFound(TaskId::parse("t-9").unwrap()));
        assert_eq!(status, 404);
        assert_eq!(body["code"], -32001);
        assert_eq!(body["type"], "TaskNotFoundError");
        assert_eq!(body["message"], body["error"]["message"]);
        assert_eq!(body["error"]["status"], "NOT_FOUND");
        // No class for the server-defined -32000 errors; internal text stays out.
        let (_, body) = rest_v03_error_body(&Error::Internal(SECRET.into()));
        assert_eq!(body["type"], "InternalError");
        assert!(!body.to_string().contains("hunter2"));
        let (_, body) = rest_v03_error_body(&Error::Unauthenticated("no key".into()));
        assert_eq!(body["code"], -32000);
        assert!(body.get("type").is_none());
    }

    const SECRET: &str = "db password=hunter2 at 10.0.0.5";

    /// One value of every variant; `variant_index` fails to compile when a variant is
    /// added, and `every_variant_is_listed` fails until the new one is listed here.
    pub(crate) fn all_variants() -> Vec<Error> {
        let task = TaskId::parse("t-1").unwrap();
        vec![
            Error::Parse("expected value".into()),
            Error::InvalidRequest("batch".into()),
            Error::MethodNotFound("Nope".into()),
            Error::InvalidParams("id: is required".into()),
            Error::VersionNotSupported("99.0".into()),
            Error::ContentTypeNotSupported("image/png".into()),
            Error::PayloadTooLarge { limit: 1024 },
            Error::TaskNotFound(task.clone()),
            Error::TaskNotCancelable {
                task_id: task,
                state: TaskState::Completed,
            },
            Error::UnsupportedOperation("task is completed".into()),
            Error::PushNotificationNotSupported,
            Error::ExtendedAgentCardNotConfigured,
            Error::InvalidAgentResponse(SECRET.into()),
            Error::ThreadExpired(ContextId::parse("ctx-1").unwrap()),
            Error::Unavailable {
                detail: SECRET.into(),
                retry_after_secs: 5,
            },
            Error::Internal(SECRET.into()),
            Error::Unauthenticated("invalid API key".into()),
            Error::RateLimited {
                retry_after_secs: 7,
                scope: "tenant acme".into(),
            },
            Error::TaskGenerationMismatch {
                task_id: TaskId::parse("t-9").unwrap(),
                expected: 3,
                current: 4,
            },
            Error::InvalidToken(TokenError::Expired),
        ]
    }

    fn variant_index(err: &Error) -> usize {
        match err {
            Error::Parse(_) => 0,
            Error::InvalidRequest(_) => 1,
            Error::MethodNotFound(_) => 2,
            Error::InvalidParams(_) => 3,
            Error::VersionNotSupported(_) => 4,
            Error::ContentTypeNotSupported(_) => 5,
            Error::PayloadTooLarge { .. } => 6,
            Error::TaskNotFound(_) => 7,
            Error::TaskNotCancelable { .. } => 8,
            Error::UnsupportedOperation(_) => 9,
            Error::PushNotificationNotSupported => 10,
            Error::ExtendedAgentCardNotConfigured => 11,
            Error::InvalidAgentResponse(_) => 12,
            Error::ThreadExpired(_) => 13,
            Error::Unavailable { .. } => 14,
            Error::Internal(_) => 15,
            Error::Unauthenticated(_) => 16,
            Error::RateLimited { .. } => 17,
            Error::TaskGenerationMismatch { .. } => 18,
            Error::InvalidToken(_) => 19,
        }
    }

    #[test]
    fn every_variant_is_listed() {
        let mut seen: Vec<usize> = all_variants().iter().map(variant_index).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
    }

    #[test]
    fn the_mapping_table() {
        let expected: [(i64, u16, &str, &str); 20] = [
            (-32700, 400, "INVALID_ARGUMENT", "PARSE_ERROR"),
            (-32600, 400, "INVALID_ARGUMENT", "INVALID_REQUEST"),
            (-32601, 404, "NOT_FOUND", "METHOD_NOT_FOUND"),
            (-32602, 400, "INVALID_ARGUMENT", "INVALID_PARAMS"),
            (-32009, 400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED"),
            (
                -32005,
                415,
                "INVALID_ARGUMENT",
                "CONTENT_TYPE_NOT_SUPPORTED",
            ),
            (-32600, 413, "INVALID_ARGUMENT", "PAYLOAD_TOO_LARGE"),
            (-32001, 404, "NOT_FOUND", "TASK_NOT_FOUND"),
            (-32002, 400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE"),
            (-32004, 400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION"),
            (
                -32003,
                400,
                "FAILED_PRECONDITION",
                "PUSH_NOTIFICATION_NOT_SUPPORTED",
            ),
            (
                -32007,
                400,
                "FAILED_PRECONDITION",
                "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            ),
            (-32006, 500, "INTERNAL", "INVALID_AGENT_RESPONSE"),
            (-32004, 400, "FAILED_PRECONDITION", "THREAD_EXPIRED"),
            (-32000, 503, "UNAVAILABLE", "UNAVAILABLE"),
            (-32603, 500, "INTERNAL", "INTERNAL_ERROR"),
            (-32000, 401, "UNAUTHENTICATED", "UNAUTHENTICATED"),
            (-32000, 429, "RESOURCE_EXHAUSTED", "RATE_LIMIT_EXCEEDED"),
            (-32010, 409, "ABORTED", "TASK_GENERATION_MISMATCH"),
            (-32000, 401, "UNAUTHENTICATED", "UNAUTHENTICATED"),
        ];
        for err in all_variants() {
            let m = map_error(&err);
            let (code, http, grpc, reason) = expected[variant_index(&err)];
            assert_eq!(
                (m.code, m.http_status, m.grpc_status, m.reason),
                (code, http, grpc, reason),
                "{err:?}"
            );
        }
    }

    #[test]
    fn internal_detail_never_reaches_the_client() {
        for err in all_variants() {
            let rpc = jsonrpc_error_object(&err).to_string();
            let (_, rest) = rest_error_body(&err);
            assert!(!rpc.contains("hunter2"), "{rpc}");
            assert!(!rest.to_string().contains("hunter2"), "{rest}");
        }
        assert_eq!(
            map_error(&Error::Internal(SECRET.into())).message,
            "internal error"
        );
        assert_eq!(
            map_error(&Error::Unavailable {
                detail: SECRET.into(),
                retry_after_secs: 5
            })
            .message,
            "service temporarily unavailable, retry later"
        );
    }

    #[test]
    fn a_refused_token_says_only_its_description() {
        let m = map_error(&Error::InvalidToken(TokenError::UnknownKey));
        assert_eq!(m.message, "unknown signing key");
        assert_eq!(m.metadata["error"], "invalid_token");
        let (status, body) = rest_error_body(&Error::InvalidToken(TokenError::Expired));
        assert_eq!(status, 401);
        assert_eq!(body["error"]["message"], "token expired");
    }

    #[test]
    fn client_errors_show_their_display_text() {
        let err = Error::InvalidParams("message.parts: at least one part is required".into());
        assert_eq!(map_error(&err).message, err.to_string());
    }

    #[test]
    fn jsonrpc_error_has_only_code_message_and_data_with_error_info() {
        for err in all_variants() {
            let obj = jsonrpc_error_object(&err);
            let keys: Vec<&String> = obj.as_object().unwrap().keys().collect();
            assert_eq!(keys.len(), 3, "{obj}");
            let info = &obj["data"][0];
            assert_eq!(info["@type"], ERROR_INFO_TYPE);
            assert_eq!(info["domain"], ERROR_DOMAIN);
            assert_eq!(info["reason"], map_error(&err).reason);
            assert!(
                info["metadata"]
                    .as_object()
                    .unwrap()
                    .values()
                    .all(Value::is_string)
            );
        }
    }

    #[test]
    fn error_info_metadata_carries_the_ids() {
        let obj = jsonrpc_error_object(&Error::TaskNotFound(TaskId::parse("t-42").unwrap()));
        assert_eq!(obj["data"][0]["metadata"]["taskId"], "t-42");
        let expired = jsonrpc_error_object(&Error::ThreadExpired(ContextId::parse("c-7").unwrap()));
        assert_eq!(expired["data"][0]["metadata"]["contextId"], "c-7");
        let busy = map_error(&Error::Unavailable {
            detail: String::new(),
            retry_after_secs: 30,
        });
        assert_eq!(busy.metadata["retryAfterSeconds"], "30");
    }

    #[test]
    fn rest_body_is_a_google_rpc_status() {
        let (status, body) = rest_error_body(&Error::TaskNotFound(TaskId::parse("t").unwrap()));
        assert_eq!(status, 404);
        assert_eq!(body["error"]["code"], 404);
        assert_eq!(body["error"]["status"], "NOT_FOUND");
        assert_eq!(body["error"]["details"][0]["reason"], "TASK_NOT_FOUND");
        assert_eq!(body["error"]["message"], "task t not found");
    }
}
