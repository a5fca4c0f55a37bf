//! The common `SendMessageRequest` read straight into the domain's [`SendMessage`].
//!
//! It reads a user message with at least one part, each a text, raw, url or non-null
//! data part, with ids that parse, metadata whose numbers are finite, and a
//! `configuration` without a push config (accepted output modes, a history length that
//! is not negative, `return_immediately`); the request's `tenant`, like the ProtoJSON
//! road, it leaves aside. Anything else it declines — no message or parts, another role,
//! an empty or refused id, a part without content or with `null` data, a NaN, a push
//! config — and the request takes the ProtoJSON road (`convert::to_json` and
//! `a2a::decode_send`), where the rules and their error messages live. What it does read
//! it must read to the very command that road makes: the property test below holds the
//! two to that.

use a2a_pb::proto;
use a2a_pb::proto::part::Content;
use serde_json::Value;

use super::value;
use crate::a2a::without_reserved_keys;
use crate::domain::{
    Message, MessageId, Metadata, Part, PartContent, Role, SendConfig, SendMessage, TaskId,
};

/// The send `request` carries, if it has the common shape; `None` sends it the
/// ProtoJSON way.
pub fn read_send(request: &proto::SendMessageRequest) -> Option<SendMessage> {
    let m = request.message.as_ref()?;
    // Proto3 strings have no presence: an empty id is "not given", which the general
    // reader refuses with its own message.
    if m.role != proto::Role::User as i32 || m.parts.is_empty() || m.message_id.is_empty() {
        return None;
    }
    let config = match &request.configuration {
        None => SendConfig::default(),
        Some(c) => config(c)?,
    };
    let message = Message {
        message_id: MessageId::parse(m.message_id.as_str()).ok()?,
        context_id: optional_id(&m.context_id)?,
        task_id: optional_id(&m.task_id)?,
        role: Role::User,
        parts: m.parts.iter().map(part).collect::<Option<_>>()?,
        metadata: without_reserved_keys(metadata(m.metadata.as_ref())?),
        extensions: m.extensions.clone(),
        reference_task_ids: m
            .reference_task_ids
            .iter()
            .map(|id| TaskId::parse(id.as_str()).ok())
            .collect::<Option<_>>()?,
    };
    Some(SendMessage {
        message,
        config,
        metadata: without_reserved_keys(metadata(request.metadata.as_ref())?),
        create_missing_task: false,
        idempotency_key: None,
    })
}

/// An id that may be left empty: `Some(None)` when it is, `None` when it does not parse.
fn optional_id<T: TryFrom<String>>(raw: &str) -> Option<Option<T>> {
    match raw {
        "" => Some(None),
        raw => T::try_from(raw.to_owned()).ok().map(Some),
    }
}

fn config(c: &proto::SendMessageConfiguration) -> Option<SendConfig> {
    if c.task_push_notification_config.is_some() {
        return None;
    }
    let history_length = match c.history_length {
        Some(n) => Some(u32::try_from(n).ok()?),
        None => None,
    };
    Some(SendConfig {
        accepted_output_modes: c.accepted_output_modes.clone(),
        history_length,
        return_immediately: c.return_immediately,
        push: None,
        if_generation_match: None,
    })
}

fn part(p: &proto::Part) -> Option<Part> {
    let content = match p.content.as_ref()? {
        Content::Text(text) => PartContent::Text(text.clone()),
        Content::Raw(bytes) => PartContent::Raw(bytes.clone()),
        Content::Url(url) => PartContent::Url(url.clone()),
        // `null` data reads as no content at all.
        Content::Data(data) => match value::to_json(data)? {
            Value::Null => return None,
            data => PartContent::Data(data),
        },
    };
    Some(Part {
        content,
        filename: nonempty(&p.filename),
        media_type: nonempty(&p.media_type),
        metadata: metadata(p.metadata.as_ref())?,
    })
}

/// Metadata as given: `Some(None)` when there is none, `None` when it cannot be read.
fn metadata(s: Option<&prost_types::Struct>) -> Option<Option<Metadata>> {
    match s {
        Some(s) => value::to_metadata(s).map(Some),
        None => Some(None),
    }
}

fn nonempty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

#[cfg(test)]
mod tests {
    use a2a_pb::protojson;
    use proptest::prelude::*;
    use prost_types::value::Kind;

    use super::*;
    use crate::a2a::strategies::{taken, text};
    use crate::a2a::{Dialect, decode_send};
    use crate::grpc::convert::to_json;

    /// What the ProtoJSON road makes of `request`.
    fn general(request: &proto::SendMessageRequest) -> Option<SendMessage> {
        let params = to_json::<protojson::SendMessageRequest>(request).ok()?;
        decode_send(Dialect::V1, &params).ok()
    }

    fn text_part(text: &str) -> proto::Part {
        proto::Part {
            content: Some(Content::Text(text.into())),
            ..Default::default()
        }
    }

    fn common() -> proto::SendMessageRequest {
        proto::SendMessageRequest {
            message: Some(proto::Message {
                message_id: "m-1".into(),
                context_id: "c-1".into(),
                role: proto::Role::User as i32,
                parts: vec![text_part("hi")],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_common_send_is_read_as_the_protojson_road_reads_it() {
        let request = common();
        let direct = read_send(&request).expect("taken");
        assert_eq!(Some(direct), general(&request));
    }

    /// The common send with its message edited.
    fn common_with(edit: impl FnOnce(&mut proto::Message)) -> proto::SendMessageRequest {
        let mut request = common();
        if let Some(message) = request.message.as_mut() {
            edit(message);
        }
        request
    }

    #[test]
    fn anything_else_is_declined() {
        let null_data = proto::Part {
            content: Some(Content::Data(prost_types::Value {
                kind: Some(Kind::NullValue(0)),
            })),
            ..Default::default()
        };
        let configured = |configuration| proto::SendMessageRequest {
            configuration: Some(configuration),
            ..common()
        };
        let declined = [
            // no message, an agent's, no id, no parts, a part without content, null data
            proto::SendMessageRequest {
                message: None,
                ..common()
            },
            common_with(|m| m.role = proto::Role::Agent as i32),
            common_with(|m| m.message_id.clear()),
            common_with(|m| m.parts.clear()),
            common_with(|m| m.parts = vec![proto::Part::default()]),
            common_with(|m| m.parts = vec![null_data]),
            // an id the general reader refuses, a NaN
            common_with(|m| m.context_id = "\u{7}".into()),
            common_with(|m| {
                m.metadata = Some(prost_types::Struct {
                    fields: [("n".to_owned(), prost_types::Value::from(f64::NAN))].into(),
                })
            }),
            // a push config, a negative history length
            configured(proto::SendMessageConfiguration {
                task_push_notification_config: Some(Default::default()),
                ..Default::default()
            }),
            configured(proto::SendMessageConfiguration {
                history_length: Some(-1),
                ..Default::default()
            }),
        ];
        for request in declined {
            assert!(read_send(&request).is_none(), "{request:?}");
        }
    }

    fn number() -> impl Strategy<Value = f64> {
        prop_oneof![
            4 => Just(1.0),
            2 => any::<f64>(),
            1 => Just(-0.0),
            1 => Just(f64::NAN),
            1 => Just(f64::INFINITY),
            1 => Just(9_007_199_254_740_993.0),
        ]
    }

    fn value() -> impl Strategy<Value = prost_types::Value> {
        let leaf = prop_oneof![
            Just(None),
            Just(Some(Kind::NullValue(0))),
            number().prop_map(|n| Some(Kind::NumberValue(n))),
            text().prop_map(|s| Some(Kind::StringValue(s))),
            any::<bool>().prop_map(|b| Some(Kind::BoolValue(b))),
        ]
        .prop_map(|kind| prost_types::Value { kind });
        leaf.prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(|values| {
                    prost_types::Value {
                        kind: Some(Kind::ListValue(prost_types::ListValue { values })),
                    }
                }),
                strukt(inner).prop_map(|s| prost_types::Value {
                    kind: Some(Kind::StructValue(s)),
                }),
            ]
        })
    }

    fn strukt(
        value: impl Strategy<Value = prost_types::Value>,
    ) -> impl Strategy<Value = prost_types::Struct> {
        let key = prop_oneof![
            4 => "[a-z]{1,3}",
            1 => Just(crate::a2a::TRANSITIONS_KEY.to_owned()),
        ];
        prop::collection::btree_map(key, value, 0..3)
            .prop_map(|fields| prost_types::Struct { fields })
    }

    fn metadata() -> impl Strategy<Value = Option<prost_types::Struct>> {
        prop::option::of(strukt(value()))
    }

    fn part() -> impl Strategy<Value = proto::Part> {
        let content = prop_oneof![
            12 => text().prop_map(Content::Text),
            2 => prop::collection::vec(any::<u8>(), 0..6).prop_map(Content::Raw),
            2 => text().prop_map(Content::Url),
            3 => value().prop_map(Content::Data),
        ];
        let optional = prop_oneof![4 => Just(String::new()), 1 => text()];
        (
            prop::option::weighted(0.95, content),
            optional.clone(),
            optional,
            prop::option::weighted(0.2, strukt(value())),
        )
            .prop_map(|(content, filename, media_type, metadata)| proto::Part {
                content,
                metadata,
                filename,
                media_type,
            })
    }

    fn configuration() -> impl Strategy<Value = proto::SendMessageConfiguration> {
        let push = prop::option::weighted(
            0.1,
            Just(proto::TaskPushNotificationConfig {
                url: "https://example.com/hook".into(),
                ..Default::default()
            }),
        );
        let history = prop::option::of(prop_oneof![Just(-1), Just(0), Just(3), Just(i32::MAX)]);
        (
            prop::collection::vec(text(), 0..2),
            push,
            history,
            any::<bool>(),
        )
            .prop_map(|(modes, push, history_length, return_immediately)| {
                proto::SendMessageConfiguration {
                    accepted_output_modes: modes,
                    task_push_notification_config: push,
                    history_length,
                    return_immediately,
                }
            })
    }

    prop_compose! {
        fn message()(
            message_id in text(),
            context_id in prop_oneof![2 => Just(String::new()), 1 => text()],
            task_id in prop_oneof![2 => Just(String::new()), 1 => text()],
            role in prop_oneof![8 => Just(1), 1 => Just(0), 1 => Just(2), 1 => Just(7)],
            parts in prop::collection::vec(part(), 0..4),
            metadata in prop::option::weighted(0.3, strukt(value())),
            extensions in prop::collection::vec(text(), 0..2),
            reference_task_ids in prop::collection::vec(text(), 0..2),
        ) -> proto::Message {
            proto::Message {
                message_id, context_id, task_id, role, parts, metadata, extensions,
                reference_task_ids,
            }
        }
    }

    prop_compose! {
        fn request()(
            tenant in prop_oneof![4 => Just(String::new()), 1 => text()],
            message in prop::option::weighted(0.95, message()),
            configuration in prop::option::weighted(0.4, configuration()),
            metadata in metadata(),
        ) -> proto::SendMessageRequest {
            proto::SendMessageRequest { tenant, message, configuration, metadata }
        }
    }

    /// The generator reaches the direct road often, not only its refusals.
    #[test]
    fn the_generated_requests_often_take_the_direct_road() {
        let taken = taken(request(), 1000, |request| read_send(request).is_some());
        assert!(taken >= 100, "only {taken} of 1000 took the direct road");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// Whatever the direct road reads, the ProtoJSON road reads the same.
        #[test]
        fn the_direct_road_reads_what_the_protojson_road_does(request in request()) {
            if let Some(direct) = read_send(&request) {
                let general = general(&request);
                prop_assert!(general.is_some(), "the ProtoJSON road refuses {:?}", request);
                prop_assert_eq!(Some(direct), general);
            }
        }
    }
}
