//! A lenient reader over JSON objects, shared by every dialect's decoder.
//!
//! ProtoJSON parsers must accept camelCase *and* snake_case field names, treat `null` as
//! "unset", take integers and booleans given as strings (REST query parameters arrive
//! that way) and ignore unknown fields. Doing that once here keeps the decoders about
//! shapes, not spelling. Every error names the offending field by its camelCase path
//! (`message.parts[0].text`), whatever spelling the client used.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use serde_json::{Map, Value};

use crate::domain::{IdError, Metadata};
use crate::error::Error;

/// A JSON object being decoded, with the path that names it in error messages.
pub(crate) struct Fields<'a> {
    /// `None` for an absent or `null` body: every field then reads as unset.
    map: Option<&'a Map<String, Value>>,
    path: String,
}

/// `path.name`, or just `name` at the root.
pub(crate) fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// An invalid-params error naming `path`.
pub(crate) fn invalid(path: &str, problem: impl std::fmt::Display) -> Error {
    Error::InvalidParams(format!("{path}: {problem}"))
}

/// `historyLength` -> `history_length`.
fn snake_case(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Calls `f` with the snake_case spelling of `camel`, written on the stack when it is
/// short (every field name of the protocol is): looking up an absent optional field is
/// the common case and allocates nothing.
fn with_snake_case<T>(camel: &str, f: impl FnOnce(&str) -> T) -> T {
    let mut buf = [0u8; 64];
    let mut len = 0;
    for b in camel.bytes() {
        let (upper, lower) = (b.is_ascii_uppercase(), b.to_ascii_lowercase());
        let need = if upper { 2 } else { 1 };
        if len + need > buf.len() {
            return f(&snake_case(camel));
        }
        if upper {
            buf[len] = b'_';
            len += 1;
        }
        buf[len] = lower;
        len += 1;
    }
    // Only ASCII bytes were changed, and only into ASCII: still UTF-8.
    match std::str::from_utf8(&buf[..len]) {
        Ok(snake) => f(snake),
        Err(_) => f(&snake_case(camel)),
    }
}

impl<'a> Fields<'a> {
    /// The top-level params or body. `null` (an empty REST body) counts as `{}`.
    pub(crate) fn root(value: &'a Value) -> Result<Self, Error> {
        match value {
            Value::Null => Ok(Self {
                map: None,
                path: String::new(),
            }),
            Value::Object(map) => Ok(Self {
                map: Some(map),
                path: String::new(),
            }),
            _ => Err(Error::InvalidParams("params must be a JSON object".into())),
        }
    }

    /// A nested object at `path`.
    pub(crate) fn object(value: &'a Value, path: String) -> Result<Self, Error> {
        match value {
            Value::Object(map) => Ok(Self {
                map: Some(map),
                path,
            }),
            _ => Err(invalid(&path, "must be an object")),
        }
    }

    /// The path of this object, for callers composing their own messages.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// The path of one of this object's fields.
    pub(crate) fn path_of(&self, camel: &str) -> String {
        join(&self.path, camel)
    }

    /// The raw value of a field under its camelCase or snake_case name; `null` is unset.
    pub(crate) fn get(&self, camel: &str) -> Option<&'a Value> {
        let map = self.map?;
        let found = match map.get(camel) {
            Some(v) => Some(v),
            // A name without capitals is its own snake_case: no second look.
            None if !camel.bytes().any(|b| b.is_ascii_uppercase()) => None,
            None => with_snake_case(camel, |snake| map.get(snake)),
        };
        found.filter(|v| !v.is_null())
    }

    /// Whether the field is present and not `null`.
    pub(crate) fn has(&self, camel: &str) -> bool {
        self.get(camel).is_some()
    }

    pub(crate) fn opt_str(&self, camel: &str) -> Result<Option<&'a str>, Error> {
        match self.get(camel) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(invalid(&self.path_of(camel), "must be a string")),
        }
    }

    pub(crate) fn req_str(&self, camel: &str) -> Result<&'a str, Error> {
        self.opt_str(camel)?
            .ok_or_else(|| invalid(&self.path_of(camel), "is required"))
    }

    /// A string where `""` means unset, as for proto3 scalar fields without presence.
    pub(crate) fn opt_nonempty_str(&self, camel: &str) -> Result<Option<&'a str>, Error> {
        Ok(self.opt_str(camel)?.filter(|s| !s.is_empty()))
    }

    /// An integer given as a JSON number or a numeric string.
    pub(crate) fn opt_int(&self, camel: &str) -> Result<Option<i64>, Error> {
        let Some(value) = self.get(camel) else {
            return Ok(None);
        };
        let parsed = match value {
            Value::Number(n) => n.as_i64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                    .map(|f| f as i64)
            }),
            Value::String(s) => s.trim().parse::<i64>().ok(),
            _ => None,
        };
        parsed
            .map(Some)
            .ok_or_else(|| invalid(&self.path_of(camel), "must be an integer"))
    }

    /// A non-negative count such as `historyLength`; values past `u32::MAX` mean "all".
    pub(crate) fn opt_count(&self, camel: &str) -> Result<Option<u32>, Error> {
        match self.opt_int(camel)? {
            None => Ok(None),
            Some(n) if n < 0 => Err(invalid(&self.path_of(camel), "must not be negative")),
            Some(n) => Ok(Some(u32::try_from(n).unwrap_or(u32::MAX))),
        }
    }

    /// A boolean given as JSON `true`/`false` or the strings `"true"`/`"false"`.
    pub(crate) fn opt_bool(&self, camel: &str) -> Result<Option<bool>, Error> {
        match self.get(camel) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(Some(true)),
            Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Ok(Some(false)),
            Some(_) => Err(invalid(&self.path_of(camel), "must be true or false")),
        }
    }

    /// A free-form metadata object.
    pub(crate) fn opt_metadata(&self, camel: &str) -> Result<Option<Metadata>, Error> {
        match self.get(camel) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map.clone())),
            Some(_) => Err(invalid(&self.path_of(camel), "must be an object")),
        }
    }

    /// A nested object, if present.
    pub(crate) fn opt_child(&self, camel: &str) -> Result<Option<Fields<'a>>, Error> {
        self.get(camel)
            .map(|v| Fields::object(v, self.path_of(camel)))
            .transpose()
    }

    pub(crate) fn opt_array(&self, camel: &str) -> Result<Option<&'a [Value]>, Error> {
        match self.get(camel) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(_) => Err(invalid(&self.path_of(camel), "must be an array")),
        }
    }

    /// An array of strings; absent means empty.
    pub(crate) fn strings(&self, camel: &str) -> Result<Vec<String>, Error> {
        let Some(items) = self.opt_array(camel)? else {
            return Ok(Vec::new());
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s.clone()),
                _ => Err(invalid(
                    &format!("{}[{i}]", self.path_of(camel)),
                    "must be a string",
                )),
            })
            .collect()
    }
}

/// Builds a domain id from client input, naming the field when it is refused.
pub(crate) fn parse_id<T>(
    raw: &str,
    path: &str,
    parse: impl FnOnce(String) -> Result<T, IdError>,
) -> Result<T, Error> {
    parse(raw.to_owned()).map_err(|e| invalid(path, e))
}

/// Decodes base64 in either alphabet, padded or not (ProtoJSON accepts both).
pub(crate) fn decode_base64(raw: &str, path: &str) -> Result<Vec<u8>, Error> {
    let trimmed: String = raw
        .chars()
        .filter(|c| !c.is_ascii_whitespace() && *c != '=')
        .collect();
    let engine = if trimmed.contains(['-', '_']) {
        URL_SAFE_NO_PAD
    } else {
        STANDARD_NO_PAD
    };
    engine
        .decode(trimmed)
        .map_err(|_| invalid(path, "must be base64-encoded bytes"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn snake_case_on_the_stack_matches_the_allocating_one() {
        let long = "aB".repeat(40);
        for camel in [
            "historyLength",
            "taskId",
            "x",
            "",
            "pushNotificationConfigId",
            &long,
            "ünïCödeX",
        ] {
            assert_eq!(
                with_snake_case(camel, str::to_owned),
                snake_case(camel),
                "{camel}"
            );
        }
    }

    #[test]
    fn fields_are_found_under_camel_and_snake_case() {
        let v = json!({"historyLength": 3, "page_size": "7", "contextId": null});
        let f = Fields::root(&v).unwrap();
        assert_eq!(f.opt_int("historyLength").unwrap(), Some(3));
        assert_eq!(f.opt_int("pageSize").unwrap(), Some(7), "snake + string");
        assert!(!f.has("contextId"), "null means unset");
    }

    #[test]
    fn errors_name_the_field_path() {
        let v = json!({"configuration": {"historyLength": -1, "blocking": "yes"}});
        let f = Fields::root(&v).unwrap();
        let cfg = f.opt_child("configuration").unwrap().unwrap();
        assert_eq!(
            cfg.opt_count("historyLength").unwrap_err(),
            Error::InvalidParams("configuration.historyLength: must not be negative".into())
        );
        assert_eq!(
            cfg.opt_bool("blocking").unwrap_err(),
            Error::InvalidParams("configuration.blocking: must be true or false".into())
        );
    }

    #[test]
    fn integers_and_booleans_may_arrive_as_strings() {
        let v = json!({"a": "12", "b": "true", "c": "FALSE", "d": 4.0, "e": "x"});
        let f = Fields::root(&v).unwrap();
        assert_eq!(f.opt_int("a").unwrap(), Some(12));
        assert_eq!(f.opt_bool("b").unwrap(), Some(true));
        assert_eq!(f.opt_bool("c").unwrap(), Some(false));
        assert_eq!(f.opt_int("d").unwrap(), Some(4));
        assert!(f.opt_int("e").is_err());
    }

    #[test]
    fn a_null_body_reads_as_empty_and_a_scalar_body_is_refused() {
        assert!(!Fields::root(&Value::Null).unwrap().has("id"));
        assert!(Fields::root(&json!([1])).is_err());
    }

    #[test]
    fn base64_accepts_both_alphabets_with_or_without_padding() {
        let bytes = vec![0xfb, 0xff, 0xfe, 0x41];
        for raw in ["+//+QQ==", "+//+QQ", "-__-QQ==", "-__-QQ"] {
            assert_eq!(decode_base64(raw, "raw").unwrap(), bytes, "{raw}");
        }
        assert_eq!(
            decode_base64("not base64!", "message.parts[0].raw").unwrap_err(),
            Error::InvalidParams("message.parts[0].raw: must be base64-encoded bytes".into())
        );
    }

    #[test]
    fn string_lists_name_the_bad_element() {
        let v = json!({"modes": ["text/plain", 3]});
        let err = Fields::root(&v).unwrap().strings("modes").unwrap_err();
        assert_eq!(
            err,
            Error::InvalidParams("modes[1]: must be a string".into())
        );
    }
}
