//! `google.protobuf.Value` and `Struct` <-> JSON values, by the rules ProtoJSON (the
//! `pbjson-types` the transcoding road goes through) applies to them: a number is a
//! double, a `Struct` is an object, and `null` is read as a value of no kind (not as
//! `NULL_VALUE`, which is written as `null` too).
//!
//! Where ProtoJSON refuses a value, these give `None`, and the caller leaves the message
//! to the transcoding road, which refuses it with its own error: a NaN or infinite
//! number is not written as JSON, and an integer past ±2^53 is not read as a double.

use prost_types::value::Kind;
use serde_json::{Map, Value};

use crate::domain::Metadata;

/// The magnitude ProtoJSON reads integers up to (exclusive): 2^53, past which a double
/// would not hold them exactly.
const EXACT_INTEGERS: u64 = 1 << f64::MANTISSA_DIGITS;

/// The JSON a protobuf value is written as; `None` for a number that is not finite.
pub(super) fn to_json(value: &prost_types::Value) -> Option<Value> {
    Some(match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) if n.is_finite() => Value::from(*n),
        Some(Kind::NumberValue(_)) => return None,
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::StructValue(s)) => Value::Object(to_metadata(s)?),
        Some(Kind::ListValue(list)) => Value::Array(
            list.values
                .iter()
                .map(to_json)
                .collect::<Option<Vec<_>>>()?,
        ),
    })
}

/// The JSON object a `Struct` is written as.
pub(super) fn to_metadata(s: &prost_types::Struct) -> Option<Metadata> {
    s.fields
        .iter()
        .map(|(key, value)| Some((key.clone(), to_json(value)?)))
        .collect::<Option<Map<_, _>>>()
}

/// The protobuf value a JSON value is read as; `None` for an integer past ±2^53.
pub(super) fn from_json(value: &Value) -> Option<prost_types::Value> {
    let kind = match value {
        Value::Null => return Some(prost_types::Value { kind: None }),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(number(n)?),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.iter().map(from_json).collect::<Option<_>>()?,
        }),
        Value::Object(map) => Kind::StructValue(from_metadata(map)?),
    };
    Some(prost_types::Value { kind: Some(kind) })
}

/// The `Struct` a JSON object is read as.
pub(super) fn from_metadata(map: &Metadata) -> Option<prost_types::Struct> {
    from_metadata_but(map, &[])
}

/// The `Struct` a JSON object is read as, without the keys in `replaced` (whose values
/// the caller writes itself, so theirs are never read).
pub(super) fn from_metadata_but(map: &Metadata, replaced: &[&str]) -> Option<prost_types::Struct> {
    Some(prost_types::Struct {
        fields: map
            .iter()
            .filter(|(key, _)| !replaced.contains(&key.as_str()))
            .map(|(key, value)| Some((key.clone(), from_json(value)?)))
            .collect::<Option<_>>()?,
    })
}

/// A JSON number as a double: floats as they are, integers only below 2^53 in magnitude.
fn number(n: &serde_json::Number) -> Option<f64> {
    if let Some(u) = n.as_u64() {
        return (u < EXACT_INTEGERS).then_some(u as f64);
    }
    if let Some(i) = n.as_i64() {
        return (i.unsigned_abs() < EXACT_INTEGERS).then_some(i as f64);
    }
    n.as_f64()
}
