//! The common shape of a 1.0 JSON-RPC send — `{"jsonrpc":"2.0","id":…,"method":
//! "SendMessage"|"SendStreamingMessage","params":{"message":{"messageId","role":
//! "ROLE_USER","parts":[{"text"}…],…}}}` — read by serde straight from the request's bytes
//! into the domain, with no `serde_json::Value` tree in between.
//!
//! It reads a strict subset of what the general reader ([`super::jsonrpc::parse_request`]
//! and [`super::decode_send`]) accepts, and declines everything else — other fields,
//! other spellings, other part kinds, a `configuration`, empty ids — which then takes the
//! general road, so the dialects' rules and their error messages stay in one place. What
//! it does read it must decode to the very command the general reader makes: the
//! property test below holds the two to that.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use super::client_message::without_reserved_keys;
use crate::domain::{
    ContextId, Message, MessageId, Metadata, Part, Role, SendConfig, SendMessage, TaskId,
};

/// A send read by the fast road: the request's id, its method name and the command.
#[derive(Debug)]
pub struct FastSend {
    pub id: Value,
    pub method: &'static str,
    pub send: SendMessage,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    #[serde(borrow)]
    jsonrpc: Cow<'a, str>,
    #[serde(default)]
    id: Option<Value>,
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(borrow)]
    params: Params<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params<'a> {
    #[serde(borrow)]
    message: WireMessage<'a>,
    #[serde(default)]
    metadata: Option<Metadata>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WireMessage<'a> {
    #[serde(borrow)]
    message_id: Cow<'a, str>,
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(borrow)]
    parts: Vec<TextPart<'a>>,
    #[serde(default, borrow)]
    context_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    task_id: Option<Cow<'a, str>>,
    #[serde(default)]
    metadata: Option<Metadata>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TextPart<'a> {
    #[serde(borrow)]
    text: Cow<'a, str>,
}

/// The send `body` carries, if it has the common shape; `None` sends it the general way.
pub fn fast_send(body: &[u8]) -> Option<FastSend> {
    // A body naming neither send method (both end in `Message"`) goes the general way at
    // once, rather than after a read that was bound to fail.
    if !body.windows(8).any(|w| w == b"Message\"") {
        return None;
    }
    let envelope: Envelope<'_> = serde_json::from_slice(body).ok()?;
    let method = match &*envelope.method {
        "SendMessage" => "SendMessage",
        "SendStreamingMessage" => "SendStreamingMessage",
        _ => return None,
    };
    if envelope.jsonrpc != "2.0" {
        return None;
    }
    let id = match envelope.id {
        None => Value::Null,
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id,
        Some(_) => return None,
    };
    let m = envelope.params.message;
    if m.role != "ROLE_USER" || m.parts.is_empty() {
        return None;
    }
    // Proto3 strings have no presence: `""` is "not given" to the general reader; rare
    // enough to leave to it.
    let id_of = |raw: Option<Cow<'_, str>>| match raw {
        None => Some(None),
        Some(raw) if raw.is_empty() => None,
        Some(raw) => Some(Some(raw.into_owned())),
    };
    let context_id = match id_of(m.context_id)? {
        Some(raw) => Some(ContextId::parse(raw).ok()?),
        None => None,
    };
    let task_id = match id_of(m.task_id)? {
        Some(raw) => Some(TaskId::parse(raw).ok()?),
        None => None,
    };
    if m.message_id.is_empty() {
        return None;
    }
    let message = Message {
        message_id: MessageId::parse(m.message_id.into_owned()).ok()?,
        context_id,
        task_id,
        role: Role::User,
        parts: m
            .parts
            .into_iter()
            .map(|p| Part::text(p.text.into_owned()))
            .collect(),
        metadata: without_reserved_keys(m.metadata),
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    };
    Some(FastSend {
        id,
        method,
        send: SendMessage {
            message,
            config: SendConfig::default(),
            metadata: without_reserved_keys(envelope.params.metadata),
            create_missing_task: false,
            idempotency_key: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::a2a::strategies::{taken, text};
    use crate::a2a::{Dialect, decode_send, jsonrpc::parse_request};

    /// What the general reader makes of `body`: the request's id, method and command.
    fn general(body: &[u8]) -> Option<(Value, String, SendMessage)> {
        let rpc = parse_request(body).ok()?;
        let send = decode_send(Dialect::V1, &rpc.params).ok()?;
        Some((rpc.id, rpc.method, send))
    }

    #[test]
    fn the_common_send_takes_the_fast_road() {
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {
            "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}],
                        "contextId": "c-1", "metadata": {"k": 1}},
            "metadata": {"agent-a2a.transitions": [], "x": "y"}}})
        .to_string();
        let fast = fast_send(body.as_bytes()).expect("taken");
        let (id, method, send) = general(body.as_bytes()).unwrap();
        assert_eq!(
            (fast.id, fast.method, fast.send),
            (id, method.as_str(), send)
        );
    }

    #[test]
    fn anything_else_is_declined() {
        let declined = [
            // another method, another role spelling, another part kind, a configuration
            json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t"}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message":
                {"messageId": "m", "role": "user", "parts": [{"text": "x"}]}}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message":
                {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {}}]}}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message":
                {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]},
                "configuration": {"returnImmediately": true}}}),
            // snake_case, an empty context id, an object id, no parts, a wrong version
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message":
                {"message_id": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message":
                {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}],
                 "contextId": ""}}}),
            json!({"jsonrpc": "2.0", "id": {}, "method": "SendMessage", "params": {"message":
                {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message":
                {"messageId": "m", "role": "ROLE_USER", "parts": []}}}),
            json!({"jsonrpc": "1.0", "id": 1, "method": "SendMessage", "params": {"message":
                {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}}}),
        ];
        for body in declined {
            assert!(fast_send(body.to_string().as_bytes()).is_none(), "{body}");
        }
    }

    fn maybe(value: impl Strategy<Value = Value>) -> impl Strategy<Value = Option<Value>> {
        prop::option::of(value)
    }

    /// The generator reaches the fast road often, not only its refusals.
    #[test]
    fn the_generated_bodies_often_take_the_fast_road() {
        let taken = taken(body(), 1000, |body| fast_send(body.as_bytes()).is_some());
        assert!(taken >= 40, "only {taken} of 1000 took the fast road");
    }

    fn metadata() -> impl Strategy<Value = Value> {
        prop_oneof![
            4 => Just(json!({})),
            4 => Just(json!({"k": 1, "agent-a2a.transitions": [1]})),
            2 => Just(json!(null)),
            1 => Just(json!([1])),
            1 => Just(json!("text")),
        ]
    }

    fn part() -> impl Strategy<Value = Value> {
        prop_oneof![
            16 => text().prop_map(|t| json!({"text": t})),
            1 => Just(json!({"text": 5})),
            1 => Just(json!({"text": "x", "mediaType": "text/plain"})),
            1 => Just(json!({"raw": "aGk="})),
            1 => Just(json!({"kind": "text", "text": "x"})),
        ]
    }

    fn id() -> impl Strategy<Value = Value> {
        prop_oneof![
            8 => text().prop_map(Value::from),
            1 => Just(json!(1)),
            1 => Just(json!(null)),
            1 => Just(json!([])),
        ]
    }

    prop_compose! {
        fn body()(
            version in prop_oneof![8 => Just(json!("2.0")), 1 => Just(json!("1.0")),
                1 => Just(json!(2))],
            rpc_id in maybe(id()),
            method in prop_oneof![4 => Just("SendMessage"), 4 => Just("SendStreamingMessage"),
                1 => Just("GetTask"), 1 => Just("message/send")],
            message_id in prop_oneof![8 => id().prop_map(Some), 1 => Just(None)],
            role in prop_oneof![8 => Just(json!("ROLE_USER")), 1 => Just(json!("ROLE_AGENT")),
                1 => Just(json!("user")), 1 => Just(json!(1))],
            parts in prop::collection::vec(part(), 0..4),
            context_id in maybe(id()),
            task_id in maybe(id()),
            message_metadata in maybe(metadata()),
            params_metadata in maybe(metadata()),
            extra in prop_oneof![8 => Just(None), 1 => Just(Some(("extensions", json!(["e"])))),
                1 => Just(Some(("referenceTaskIds", json!(["t"]))))],
        ) -> String {
            let mut message = serde_json::Map::new();
            for (key, value) in [("messageId", message_id), ("contextId", context_id),
                ("taskId", task_id), ("metadata", message_metadata)] {
                if let Some(value) = value {
                    message.insert(key.into(), value);
                }
            }
            message.insert("role".into(), role);
            message.insert("parts".into(), Value::Array(parts));
            if let Some((key, value)) = extra {
                message.insert(key.into(), value);
            }
            let mut params = json!({"message": message});
            if let Some(metadata) = params_metadata {
                params["metadata"] = metadata;
            }
            let mut envelope = json!({"jsonrpc": version, "method": method, "params": params});
            if let Some(id) = rpc_id {
                envelope["id"] = id;
            }
            envelope.to_string()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Whatever the fast road reads, the general one reads the same.
        #[test]
        fn the_fast_road_decodes_what_the_general_one_does(body in body()) {
            if let Some(fast) = fast_send(body.as_bytes()) {
                let general = general(body.as_bytes());
                prop_assert!(general.is_some(), "the general reader refuses {}", body);
                let (id, method, send) = general.unwrap();
                prop_assert_eq!(fast.id, id);
                prop_assert_eq!(fast.method, method.as_str());
                prop_assert_eq!(fast.send, send);
            }
        }
    }
}
