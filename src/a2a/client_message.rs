//! Decoding a message written in any dialect into a domain [`Message`].
//!
//! The shapes differ only a little: 1.0 and 0.3 JSON-RPC share field names, 0.3 REST
//! calls the part list `content`, and 0.1 messages have no ids at all (the caller
//! supplies the task and session ids, and the message id is minted here). Which role
//! a *client* may use is the caller's business ([`super::decode_send`] requires a user);
//! this decoder accepts both so agent messages round-trip in tests and tools.

use serde_json::Value;

use super::Dialect;
use super::encode::TRANSITIONS_KEY;
use super::enums::parse_role;
use super::fields::{Fields, invalid, parse_id};
use super::parts::decode_part;
use crate::domain::{ContextId, Message, MessageId, Metadata, TaskId};
use crate::error::Error;

/// Decodes the message at `path` (`"message"`). At least one part is required.
pub(crate) fn decode_message(d: Dialect, value: &Value, path: &str) -> Result<Message, Error> {
    let f = Fields::object(value, path.to_owned())?;

    let message_id = match (d, f.opt_nonempty_str("messageId")?) {
        (_, Some(raw)) => parse_id(raw, &f.path_of("messageId"), MessageId::parse)?,
        // 0.1 had no message ids; a 0.1 client never sends one.
        (Dialect::V01, None) => MessageId::generate(),
        (_, None) => return Err(invalid(&f.path_of("messageId"), "is required")),
    };
    let role = match f.get("role") {
        Some(raw) => parse_role(raw, &f.path_of("role"))?,
        None => return Err(invalid(&f.path_of("role"), "is required")),
    };

    // Proto3 strings have no presence: `""` means "not given".
    let context_id = f
        .opt_nonempty_str("contextId")?
        .map(|raw| parse_id(raw, &f.path_of("contextId"), ContextId::parse))
        .transpose()?;
    let task_id = f
        .opt_nonempty_str("taskId")?
        .map(|raw| parse_id(raw, &f.path_of("taskId"), TaskId::parse))
        .transpose()?;

    let parts_key = if d == Dialect::V03Rest && !f.has("parts") {
        "content"
    } else {
        "parts"
    };
    let raw_parts = f.opt_array(parts_key)?.unwrap_or_default();
    if raw_parts.is_empty() {
        return Err(invalid(
            &f.path_of(parts_key),
            "at least one part is required",
        ));
    }
    let parts = raw_parts
        .iter()
        .enumerate()
        .map(|(i, p)| decode_part(d, p, format!("{}[{i}]", f.path_of(parts_key))))
        .collect::<Result<Vec<_>, _>>()?;

    let reference_task_ids = f
        .strings("referenceTaskIds")?
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            parse_id(
                raw,
                &format!("{}[{i}]", f.path_of("referenceTaskIds")),
                TaskId::parse,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;

    Ok(Message {
        message_id,
        context_id,
        task_id,
        role,
        parts,
        metadata: without_reserved_keys(f.opt_metadata("metadata")?),
        extensions: f.strings("extensions")?,
        reference_task_ids,
    })
}

/// Drops keys this server writes itself (a client echoing a task's metadata back must
/// not be able to plant a transition history).
pub(crate) fn without_reserved_keys(metadata: Option<Metadata>) -> Option<Metadata> {
    metadata.map(|mut m| {
        m.remove(TRANSITIONS_KEY);
        m
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::{Part, Role};

    #[test]
    fn v1_message_with_snake_case_and_unknown_fields() {
        let wire = json!({
            "message_id": "m-1", "context_id": "ctx", "task_id": "",
            "role": 1, "parts": [{"text": "hi"}], "reference_task_ids": ["t-0"],
            "someFutureField": {"ignored": true}
        });
        let m = decode_message(Dialect::V1, &wire, "message").unwrap();
        assert_eq!(m.message_id.as_str(), "m-1");
        assert_eq!(m.context_id.as_ref().map(ContextId::as_str), Some("ctx"));
        assert_eq!(m.task_id, None, "empty string means unset");
        assert_eq!(m.role, Role::User);
        assert_eq!(m.parts, vec![Part::text("hi")]);
        assert_eq!(m.reference_task_ids, vec![TaskId::parse("t-0").unwrap()]);
    }

    #[test]
    fn missing_fields_are_named() {
        let cases = [
            (
                json!({"role": "ROLE_USER", "parts": [{"text": "x"}]}),
                "message.messageId: is required",
            ),
            (
                json!({"messageId": "m", "parts": [{"text": "x"}]}),
                "message.role: is required",
            ),
            (
                json!({"messageId": "m", "role": "ROLE_USER"}),
                "message.parts: at least one part is required",
            ),
            (
                json!({"messageId": "m", "role": "ROLE_USER", "parts": []}),
                "message.parts: at least one part is required",
            ),
            (
                json!({"messageId": "m", "role": "ROLE_USER", "parts": [{}]}),
                "message.parts[0]: exactly one of text, raw, url, data is required",
            ),
            (
                json!({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": 5}]}),
                "message.parts[0].text: must be a string",
            ),
        ];
        for (wire, expected) in cases {
            let err = decode_message(Dialect::V1, &wire, "message").unwrap_err();
            assert_eq!(err, Error::InvalidParams(expected.into()), "{wire}");
        }
    }

    #[test]
    fn v03_rest_reads_content_and_names_it_in_errors() {
        let wire = json!({"messageId": "m", "role": "ROLE_USER", "content": [{"text": "x"}]});
        let m = decode_message(Dialect::V03Rest, &wire, "message").unwrap();
        assert_eq!(m.parts, vec![Part::text("x")]);
        let empty = json!({"messageId": "m", "role": "ROLE_USER", "content": []});
        assert_eq!(
            decode_message(Dialect::V03Rest, &empty, "message").unwrap_err(),
            Error::InvalidParams("message.content: at least one part is required".into())
        );
    }

    #[test]
    fn v01_messages_get_a_fresh_id() {
        let wire = json!({"role": "user", "parts": [{"type": "text", "text": "x"}]});
        let a = decode_message(Dialect::V01, &wire, "message").unwrap();
        let b = decode_message(Dialect::V01, &wire, "message").unwrap();
        assert_ne!(a.message_id, b.message_id);
    }

    #[test]
    fn reserved_metadata_keys_are_dropped() {
        let wire = json!({"messageId": "m", "role": "user", "parts": [{"kind": "text", "text": "x"}],
                          "metadata": {"agent-a2a.transitions": [], "mine": 1}});
        let m = decode_message(Dialect::V03Rpc, &wire, "message").unwrap();
        assert_eq!(
            m.metadata,
            Some(Metadata::from_iter([("mine".to_owned(), json!(1))]))
        );
    }
}
