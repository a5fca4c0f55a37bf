//! Message and artifact parts in each dialect.
//!
//! | domain | 1.0 | 0.3 JSON-RPC (0.1: `type` for `kind`) | 0.3 REST |
//! |---|---|---|---|
//! | text | `{text}` | `{kind:"text",text}` | `{text}` |
//! | raw bytes | `{raw:<b64>}` | `{kind:"file",file:{bytes,name,mimeType}}` | `{file:{fileWithBytes,name,mimeType}}` |
//! | url | `{url}` | `{kind:"file",file:{uri,name,mimeType}}` | `{file:{fileWithUri,name,mimeType}}` |
//! | data | `{data:<any>}` | `{kind:"data",data:{object}}` | `{data:{data:{object}}}` |
//!
//! Only 1.0 has `filename`/`mediaType` on every kind; older dialects carry them on file
//! parts only, so a text or data part loses them there. Older dialects also require data
//! to be an object: other JSON values are sent wrapped as `{"value": <v>}` rather than
//! producing a document their clients would reject.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use super::Dialect;
use super::fields::{Fields, decode_base64, invalid};
use crate::domain::{Part, PartContent};
use crate::error::Error;

/// The wire form of a part in `d`, written straight from the domain by serde.
pub(crate) struct PartWire<'a>(pub Dialect, pub &'a Part);

impl Serialize for PartWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let PartWire(d, part) = *self;
        let mut out = serializer.serialize_map(None)?;
        match d {
            Dialect::V1 => {
                match &part.content {
                    PartContent::Text(t) => out.serialize_entry("text", t)?,
                    PartContent::Raw(bytes) => {
                        out.serialize_entry("raw", &STANDARD.encode(bytes))?
                    }
                    PartContent::Url(u) => out.serialize_entry("url", u)?,
                    PartContent::Data(v) => out.serialize_entry("data", v)?,
                }
                if let Some(name) = &part.filename {
                    out.serialize_entry("filename", name)?;
                }
                if let Some(media) = &part.media_type {
                    out.serialize_entry("mediaType", media)?;
                }
            }
            Dialect::V03Rpc | Dialect::V01 => {
                let tag = if d == Dialect::V01 { "type" } else { "kind" };
                match &part.content {
                    PartContent::Text(t) => {
                        out.serialize_entry(tag, "text")?;
                        out.serialize_entry("text", t)?;
                    }
                    PartContent::Raw(_) | PartContent::Url(_) => {
                        out.serialize_entry(tag, "file")?;
                        out.serialize_entry("file", &LegacyFile(part, "bytes", "uri"))?;
                    }
                    PartContent::Data(v) => {
                        out.serialize_entry(tag, "data")?;
                        out.serialize_entry("data", &DataObject(v))?;
                    }
                }
            }
            Dialect::V03Rest => match &part.content {
                PartContent::Text(t) => out.serialize_entry("text", t)?,
                PartContent::Raw(_) | PartContent::Url(_) => {
                    out.serialize_entry("file", &LegacyFile(part, "fileWithBytes", "fileWithUri"))?
                }
                PartContent::Data(v) => {
                    out.serialize_entry("data", &Entries([("data", &DataObject(v))]))?
                }
            },
        }
        if let Some(metadata) = &part.metadata {
            out.serialize_entry("metadata", metadata)?;
        }
        out.end()
    }
}

/// The wire form of a part in `d`, as a JSON value.
#[cfg(test)]
pub(crate) fn encode_part(d: Dialect, part: &Part) -> Value {
    serde_json::to_value(PartWire(d, part)).unwrap_or(Value::Null)
}

/// A 0.1/0.3 file object: content under the bytes key or the uri key, plus name and
/// mimeType.
struct LegacyFile<'a>(&'a Part, &'static str, &'static str);

impl Serialize for LegacyFile<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let LegacyFile(part, bytes_key, uri_key) = *self;
        let mut file = serializer.serialize_map(None)?;
        match &part.content {
            PartContent::Raw(bytes) => file.serialize_entry(bytes_key, &STANDARD.encode(bytes))?,
            PartContent::Url(u) => file.serialize_entry(uri_key, u)?,
            PartContent::Text(_) | PartContent::Data(_) => {}
        }
        if let Some(name) = &part.filename {
            file.serialize_entry("name", name)?;
        }
        if let Some(media) = &part.media_type {
            file.serialize_entry("mimeType", media)?;
        }
        file.end()
    }
}

/// Data as the object older dialects require: an object as it is, anything else as
/// `{"value": <v>}`.
struct DataObject<'a>(&'a Value);

impl Serialize for DataObject<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(_) => self.0.serialize(serializer),
            other => Entries([("value", other)]).serialize(serializer),
        }
    }
}

/// A JSON object of fixed entries.
pub(crate) struct Entries<'a, T: ?Sized, const N: usize>(pub [(&'static str, &'a T); N]);

impl<T: Serialize + ?Sized, const N: usize> Serialize for Entries<'_, T, N> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_map(Some(N))?;
        for (key, value) in &self.0 {
            out.serialize_entry(key, value)?;
        }
        out.end()
    }
}

/// Decodes one part written in `d`; `path` names it in errors (`message.parts[0]`).
pub(crate) fn decode_part(d: Dialect, value: &Value, path: String) -> Result<Part, Error> {
    let f = Fields::object(value, path)?;
    let mut part = match d {
        Dialect::V1 => decode_v1(&f)?,
        Dialect::V03Rpc => decode_tagged(&f, "kind")?,
        Dialect::V01 => decode_tagged(&f, "type")?,
        Dialect::V03Rest => decode_v03_rest(&f)?,
    };
    part.metadata = f.opt_metadata("metadata")?;
    Ok(part)
}

/// The one member of a oneof that is set, refusing none or several.
fn only_member<'k>(f: &Fields<'_>, members: &[&'k str]) -> Result<&'k str, Error> {
    let present: Vec<&str> = members.iter().copied().filter(|m| f.has(m)).collect();
    match present.as_slice() {
        [one] => Ok(one),
        [] => Err(invalid(
            f.path(),
            format!("exactly one of {} is required", members.join(", ")),
        )),
        several => Err(invalid(
            f.path(),
            format!("only one of {} may be set", several.join(", ")),
        )),
    }
}

fn decode_v1(f: &Fields<'_>) -> Result<Part, Error> {
    let content = match only_member(f, &["text", "raw", "url", "data"])? {
        "text" => PartContent::Text(f.req_str("text")?.to_owned()),
        "raw" => PartContent::Raw(decode_base64(f.req_str("raw")?, &f.path_of("raw"))?),
        "url" => PartContent::Url(f.req_str("url")?.to_owned()),
        _ => PartContent::Data(f.get("data").cloned().unwrap_or(Value::Null)),
    };
    Ok(Part {
        content,
        filename: f.opt_nonempty_str("filename")?.map(str::to_owned),
        media_type: f.opt_nonempty_str("mediaType")?.map(str::to_owned),
        metadata: None,
    })
}

/// 0.3 JSON-RPC (`kind`) and 0.1 (`type`) parts. The tag is optional on input: when
/// missing, the member that is present decides.
fn decode_tagged(f: &Fields<'_>, tag: &str) -> Result<Part, Error> {
    let kind = match f.opt_str(tag)? {
        Some(kind) => kind,
        None => only_member(f, &["text", "file", "data"])?,
    };
    match kind {
        "text" => Ok(Part::text(f.req_str("text")?)),
        "file" => {
            let file = f
                .opt_child("file")?
                .ok_or_else(|| invalid(&f.path_of("file"), "is required"))?;
            decode_legacy_file(&file, "bytes", "uri")
        }
        "data" => {
            let data = f
                .get("data")
                .ok_or_else(|| invalid(&f.path_of("data"), "is required"))?;
            Ok(Part::data(data.clone()))
        }
        other => Err(invalid(
            &f.path_of(tag),
            format!("{other:?} is not one of \"text\", \"file\", \"data\""),
        )),
    }
}

fn decode_v03_rest(f: &Fields<'_>) -> Result<Part, Error> {
    match only_member(f, &["text", "file", "data"])? {
        "text" => Ok(Part::text(f.req_str("text")?)),
        "file" => {
            let file = Fields::object(f.get("file").unwrap_or(&Value::Null), f.path_of("file"))?;
            decode_legacy_file(&file, "fileWithBytes", "fileWithUri")
        }
        _ => {
            // The proto wraps the Struct in a DataPart (`{"data":{"data":{..}}}`); a bare
            // object is taken as the data itself.
            let outer = f.get("data").unwrap_or(&Value::Null);
            let inner = match outer {
                Value::Object(map) => map.get("data").filter(|v| !v.is_null()),
                _ => None,
            };
            Ok(Part::data(inner.unwrap_or(outer).clone()))
        }
    }
}

fn decode_legacy_file(file: &Fields<'_>, bytes_key: &str, uri_key: &str) -> Result<Part, Error> {
    let content = match only_member(file, &[bytes_key, uri_key])? {
        key if key == bytes_key => {
            PartContent::Raw(decode_base64(file.req_str(key)?, &file.path_of(key))?)
        }
        key => PartContent::Url(file.req_str(key)?.to_owned()),
    };
    let media_type = match file.opt_nonempty_str("mimeType")? {
        Some(m) => Some(m),
        None => file.opt_nonempty_str("mediaType")?,
    };
    Ok(Part {
        content,
        filename: file.opt_nonempty_str("name")?.map(str::to_owned),
        media_type: media_type.map(str::to_owned),
        metadata: None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    use super::*;

    const DIALECTS: [Dialect; 4] = [Dialect::V1, Dialect::V03Rpc, Dialect::V03Rest, Dialect::V01];

    fn file_part(content: PartContent) -> Part {
        Part {
            content,
            filename: Some("output.txt".into()),
            media_type: Some("text/plain".into()),
            metadata: Some(Map::from_iter([("k".to_owned(), json!(1))])),
        }
    }

    /// Parts every dialect can carry without loss.
    fn portable_parts() -> Vec<Part> {
        vec![
            Part::text("hello"),
            file_part(PartContent::Raw(b"\x00\xffbytes".to_vec())),
            file_part(PartContent::Url("https://example.com/output.txt".into())),
            Part::data(json!({"key": "value", "count": 42})),
        ]
    }

    #[test]
    fn every_part_kind_round_trips_in_every_dialect() {
        for d in DIALECTS {
            for part in portable_parts() {
                let wire = encode_part(d, &part);
                let back = decode_part(d, &wire, "p".into()).unwrap();
                assert_eq!(back, part, "{d:?}: {wire}");
            }
        }
    }

    #[test]
    fn v1_carries_media_type_and_filename_on_every_kind() {
        let mut part = Part::data(json!([1, 2]));
        part.media_type = Some("application/json".into());
        part.filename = Some("list.json".into());
        let wire = encode_part(Dialect::V1, &part);
        assert_eq!(
            wire,
            json!({"data": [1, 2], "filename": "list.json", "mediaType": "application/json"})
        );
        assert_eq!(decode_part(Dialect::V1, &wire, "p".into()).unwrap(), part);
    }

    #[test]
    fn wire_shapes_match_each_dialect() {
        let raw = file_part(PartContent::Raw(b"hi".to_vec()));
        assert_eq!(
            encode_part(Dialect::V03Rpc, &raw),
            json!({"kind": "file", "file": {"bytes": "aGk=", "name": "output.txt",
                   "mimeType": "text/plain"}, "metadata": {"k": 1}})
        );
        assert_eq!(
            encode_part(Dialect::V03Rest, &raw)["file"]["fileWithBytes"],
            json!("aGk=")
        );
        assert_eq!(
            encode_part(Dialect::V01, &Part::text("x")),
            json!({"type": "text", "text": "x"})
        );
        assert_eq!(
            encode_part(Dialect::V03Rest, &Part::data(json!({"a": 1}))),
            json!({"data": {"data": {"a": 1}}})
        );
    }

    #[test]
    fn non_object_data_is_wrapped_for_older_dialects() {
        let wire = encode_part(Dialect::V03Rpc, &Part::data(json!("plain")));
        assert_eq!(wire["data"], json!({"value": "plain"}));
    }

    #[test]
    fn a_part_must_have_exactly_one_kind() {
        let none = decode_part(
            Dialect::V1,
            &json!({"filename": "x"}),
            "message.parts[0]".into(),
        );
        assert_eq!(
            none.unwrap_err(),
            Error::InvalidParams(
                "message.parts[0]: exactly one of text, raw, url, data is required".into()
            )
        );
        let two = decode_part(Dialect::V1, &json!({"text": "a", "url": "b"}), "p".into());
        assert_eq!(
            two.unwrap_err(),
            Error::InvalidParams("p: only one of text, url may be set".into())
        );
        let file = json!({"kind": "file", "file": {"bytes": "aGk=", "uri": "u"}});
        assert!(decode_part(Dialect::V03Rpc, &file, "p".into()).is_err());
    }

    #[test]
    fn legacy_tags_are_checked_and_may_be_omitted() {
        let bad = decode_part(Dialect::V03Rpc, &json!({"kind": "image"}), "p".into());
        assert_eq!(
            bad.unwrap_err(),
            Error::InvalidParams(
                "p.kind: \"image\" is not one of \"text\", \"file\", \"data\"".into()
            )
        );
        let untagged = decode_part(Dialect::V01, &json!({"text": "hi"}), "p".into());
        assert_eq!(untagged.unwrap(), Part::text("hi"));
    }

    #[test]
    fn lenient_input_snake_case_and_url_safe_base64() {
        let v1 = json!({"raw": "-_8", "media_type": "application/octet-stream", "extra": 1});
        let part = decode_part(Dialect::V1, &v1, "p".into()).unwrap();
        assert_eq!(part.content, PartContent::Raw(vec![0xfb, 0xff]));
        assert_eq!(part.media_type.as_deref(), Some("application/octet-stream"));
        let rest = json!({"file": {"file_with_uri": "u", "media_type": "text/plain"}});
        let part = decode_part(Dialect::V03Rest, &rest, "p".into()).unwrap();
        assert_eq!(part.content, PartContent::Url("u".into()));
        assert_eq!(part.media_type.as_deref(), Some("text/plain"));
        let bare = json!({"data": {"x": 1}});
        let part = decode_part(Dialect::V03Rest, &bare, "p".into()).unwrap();
        assert_eq!(part.content, PartContent::Data(json!({"x": 1})));
    }
}
