//! The JSON-RPC 2.0 envelope: parsing a request body and building responses.
//!
//! Batches are refused (no A2A SDK supports them). A request without `id` is answered
//! like one with `id: null` rather than treated as a notification, because every A2A
//! method has a result the client is waiting for. Errors carry the request id whenever
//! it could be read, so a client can match them; `null` otherwise.

use serde_json::{Map, Value, json};

use super::errors::jsonrpc_error_object;
use crate::error::Error;

/// A well-formed JSON-RPC request.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcRequest {
    /// String, number or `null`; echoed in the response.
    pub id: Value,
    /// The method name, resolved by [`super::method`].
    pub method: String,
    /// Always an object (`{}` when the request had none).
    pub params: Value,
}

/// Parses a request body. On failure returns the id to answer with (the request's when
/// readable, else `null`) and the error: `Parse` for invalid JSON, `InvalidRequest` for
/// a valid document that is not a single JSON-RPC 2.0 request with object params.
pub fn parse_request(body: &[u8]) -> Result<RpcRequest, (Value, Error)> {
    let doc: Value =
        serde_json::from_slice(body).map_err(|e| (Value::Null, Error::Parse(e.to_string())))?;
    let mut obj = match doc {
        Value::Object(obj) => obj,
        Value::Array(_) => return Err(refuse(Value::Null, "batch requests are not supported")),
        _ => return Err(refuse(Value::Null, "the request must be a JSON object")),
    };
    let id = match obj.get("id") {
        None => Value::Null,
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id.clone(),
        Some(_) => {
            return Err(refuse(
                Value::Null,
                "id: must be a string, a number or null",
            ));
        }
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(refuse(id, "jsonrpc: must be \"2.0\""));
    }
    // Taken out of the document rather than copied: the params are most of a request.
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => return Err(refuse(id, "method: must be a string")),
        None => return Err(refuse(id, "method: is required")),
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(params @ Value::Object(_)) => params,
        Some(_) => return Err(refuse(id, "params: must be an object")),
    };
    Ok(RpcRequest { id, method, params })
}

fn refuse(id: Value, why: &str) -> (Value, Error) {
    (id, Error::InvalidRequest(why.to_owned()))
}

/// A success response, as serde writes it: the result is borrowed as it is (a value or a
/// view of the domain, `a2a::encode`), never copied into the envelope.
#[derive(serde::Serialize)]
pub struct Success<'a, T> {
    jsonrpc: &'static str,
    id: &'a Value,
    result: &'a T,
}

impl<'a, T> Success<'a, T> {
    /// The response answering request `id` with `result`.
    pub fn of(id: &'a Value, result: &'a T) -> Self {
        Self {
            jsonrpc: "2.0",
            id,
            result,
        }
    }
}

/// An error response (`error` = [`jsonrpc_error_object`]).
pub fn error_response(id: &Value, err: &Error) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": jsonrpc_error_object(err)})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(body: &str) -> (Value, Error) {
        parse_request(body.as_bytes()).unwrap_err()
    }

    fn invalid_request(body: &str) -> (Value, String) {
        match refused(body) {
            (id, Error::InvalidRequest(why)) => (id, why),
            other => panic!("{body}: {other:?}"),
        }
    }

    #[test]
    fn a_well_formed_request() {
        let req =
            parse_request(br#"{"jsonrpc":"2.0","id":7,"method":"GetTask","params":{"id":"t"}}"#)
                .unwrap();
        assert_eq!(req.id, json!(7));
        assert_eq!(req.method, "GetTask");
        assert_eq!(req.params, json!({"id": "t"}));
    }

    #[test]
    fn absent_or_null_params_become_an_empty_object() {
        let req = parse_request(br#"{"jsonrpc":"2.0","id":"a","method":"GetExtendedAgentCard"}"#)
            .unwrap();
        assert_eq!(req.params, json!({}));
        let req =
            parse_request(br#"{"jsonrpc":"2.0","id":"a","method":"x","params":null}"#).unwrap();
        assert_eq!(req.params, json!({}));
    }

    #[test]
    fn invalid_json_is_a_parse_error_with_null_id() {
        let (id, err) = refused(r#"{"jsonrpc":"2.0","id":1,"#);
        assert_eq!(id, Value::Null);
        assert!(matches!(err, Error::Parse(_)), "{err:?}");
    }

    #[test]
    fn batches_are_refused() {
        let (id, why) = invalid_request(r#"[{"jsonrpc":"2.0","id":1,"method":"GetTask"}]"#);
        assert_eq!(id, Value::Null);
        assert_eq!(why, "batch requests are not supported");
    }

    #[test]
    fn envelope_errors_keep_the_readable_id() {
        assert_eq!(invalid_request(r#""hello""#).0, Value::Null);
        let (id, why) = invalid_request(r#"{"jsonrpc":"1.0","id":"r1","method":"GetTask"}"#);
        assert_eq!(
            (id, why.as_str()),
            (json!("r1"), "jsonrpc: must be \"2.0\"")
        );
        let (id, _) = invalid_request(r#"{"id":"r2","method":"GetTask"}"#);
        assert_eq!(id, json!("r2"), "missing jsonrpc");
        let (id, why) = invalid_request(r#"{"jsonrpc":"2.0","id":3}"#);
        assert_eq!((id, why.as_str()), (json!(3), "method: is required"));
        let (_, why) = invalid_request(r#"{"jsonrpc":"2.0","id":3,"method":5}"#);
        assert_eq!(why, "method: must be a string");
        let (id, why) =
            invalid_request(r#"{"jsonrpc":"2.0","id":4,"method":"GetTask","params":[1]}"#);
        assert_eq!((id, why.as_str()), (json!(4), "params: must be an object"));
    }

    #[test]
    fn ids_of_other_types_are_invalid_requests_answered_with_null() {
        for id in ["{}", "[1]", "true"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"GetTask"}}"#);
            let (answer_id, why) = invalid_request(&body);
            assert_eq!(answer_id, Value::Null);
            assert_eq!(why, "id: must be a string, a number or null");
        }
    }

    #[test]
    fn responses_echo_the_id() {
        assert_eq!(
            serde_json::to_value(Success::of(&json!("x"), &json!({"ok": true}))).unwrap(),
            json!({"jsonrpc": "2.0", "id": "x", "result": {"ok": true}})
        );
        let err = error_response(&json!(9), &Error::MethodNotFound("Nope".into()));
        assert_eq!(err["id"], 9);
        assert_eq!(err["error"]["code"], -32601);
        assert!(err.get("result").is_none());
    }
}
