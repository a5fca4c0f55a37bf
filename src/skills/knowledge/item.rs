//! A knowledge item and its file format: TOML front matter between `+++` lines
//! (Hugo/Zola style), then the Markdown body.
//!
//! ```text
//! +++
//! type = "adr"
//! status = "accepted"
//! title = "Use PostgreSQL"
//! tags = ["database"]
//! created_at = "2026-11-22T06:44:55.123Z"
//! updated_at = "2026-11-22T06:44:55.123Z"
//! author = "acme"
//!
//! [[constraints]]
//! id = "no-mysql"
//! target = "dependency"
//! operator = "must_not_use"
//! value = "mysql"
//! severity = "block"
//! message = "We use PostgreSQL"
//! +++
//!
//! # Context …
//! ```
//!
//! Everything about an item is in its one file, so there is no metadata sidecar to
//! collide (the original's `with_extension("metadata.json")` mapped `a.md` and `a.txt` to
//! the same sidecar) or to drift from the content.

use serde::{Deserialize, Serialize};

use super::lifecycle::Status;
use super::paths::ItemId;
use crate::domain::Timestamp;
use crate::skills::governance::{Mode, RuleSpec};

/// The line that opens and closes the front matter.
const DELIMITER: &str = "+++";

/// What kind of knowledge an item records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ItemType {
    /// An architecture decision record.
    Adr,
    /// A policy: its constraints feed governance once accepted.
    Policy,
    Pattern,
    Spec,
}

impl ItemType {
    /// Every type (for schemas).
    pub const ALL: [ItemType; 4] = [
        ItemType::Adr,
        ItemType::Policy,
        ItemType::Pattern,
        ItemType::Spec,
    ];

    /// The wire and file spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemType::Adr => "adr",
            ItemType::Policy => "policy",
            ItemType::Pattern => "pattern",
            ItemType::Spec => "spec",
        }
    }
}

/// The front matter of an item file. Field order matters: TOML needs the plain values
/// before the `[[constraints]]` tables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrontMatter {
    #[serde(rename = "type")]
    pub item_type: ItemType,
    pub status: Status,
    pub title: String,
    #[serde(default)]
    pub tags: Vec<String>,
    /// For policies: whether lower layers may override it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// The id (`<layer>/<path>`) of the accepted item that replaced this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
    #[serde(with = "rfc3339")]
    pub created_at: Timestamp,
    #[serde(with = "rfc3339")]
    pub updated_at: Timestamp,
    /// Who proposed it (the caller's tenant).
    pub author: String,
    #[serde(default)]
    pub constraints: Vec<RuleSpec>,
}

/// Why an item file could not be rendered or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    #[error("the file does not start with a `+++` line")]
    NoOpening,
    #[error("the front matter has no closing `+++` line")]
    NoClosing,
    #[error("invalid front matter: {0}")]
    Toml(String),
    #[error("a front matter value would contain a line `+++`")]
    DelimiterInValue,
}

/// An item file's content: front matter and body.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub front: FrontMatter,
    pub body: String,
}

impl Document {
    /// The file text: `+++`, the TOML, `+++`, a blank line, the body.
    pub fn render(&self) -> Result<String, DocumentError> {
        let toml = toml::to_string(&self.front).map_err(|e| DocumentError::Toml(e.to_string()))?;
        // A multi-line string value could hold a `+++` line and end the front matter
        // early when read back; refuse it rather than write an unreadable file.
        if toml.lines().any(|l| l.trim_end() == DELIMITER) {
            return Err(DocumentError::DelimiterInValue);
        }
        Ok(format!("{DELIMITER}\n{toml}{DELIMITER}\n\n{}", self.body))
    }

    /// Reads a file written by [`Document::render`] (or by hand in the same format).
    pub fn parse(text: &str) -> Result<Document, DocumentError> {
        let rest = text
            .strip_prefix(DELIMITER)
            .and_then(|r| r.strip_prefix("\r\n").or_else(|| r.strip_prefix('\n')))
            .ok_or(DocumentError::NoOpening)?;
        let mut offset = 0;
        for line in rest.split_inclusive('\n') {
            if line.trim_end_matches(['\r', '\n']) == DELIMITER {
                let front = toml::from_str(&rest[..offset])
                    .map_err(|e| DocumentError::Toml(e.to_string()))?;
                let body = &rest[offset + line.len()..];
                let body = body
                    .strip_prefix("\r\n")
                    .or_else(|| body.strip_prefix('\n'))
                    .unwrap_or(body);
                return Ok(Document {
                    front,
                    body: body.to_owned(),
                });
            }
            offset += line.len();
        }
        Err(DocumentError::NoClosing)
    }
}

/// A knowledge item as read from the repository.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub id: ItemId,
    pub front: FrontMatter,
    pub body: String,
    /// The last commit that changed this item's file (not the repository's HEAD); `None`
    /// where it was not looked up (query results).
    pub commit: Option<String>,
}

/// Timestamps as RFC 3339 strings, so the files read well and diff cleanly.
mod rfc3339 {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    use crate::domain::Timestamp;

    /// As RFC 3339, UTC, milliseconds.
    pub fn serialize<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&t.to_rfc3339())
    }

    /// From any RFC 3339 time.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let raw = String::deserialize(d)?;
        Timestamp::parse_rfc3339(&raw)
            .ok_or_else(|| D::Error::custom(format!("{raw:?} is not an RFC 3339 time")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skills::governance::{Operator, Severity, Target};

    fn front() -> FrontMatter {
        FrontMatter {
            item_type: ItemType::Policy,
            status: Status::Draft,
            title: "No MySQL".into(),
            tags: vec!["db".into()],
            mode: Some(Mode::Mandatory),
            superseded_by: None,
            created_at: Timestamp(1_700_000_000_000),
            updated_at: Timestamp(1_700_000_000_123),
            author: "acme".into(),
            constraints: vec![
                RuleSpec {
                    id: "no-mysql".into(),
                    target: Target::Dependency,
                    operator: Operator::MustNotUse,
                    value: Some("mysql".into()),
                    severity: Severity::Block,
                    message: "use postgres".into(),
                },
                RuleSpec {
                    id: "has-body".into(),
                    target: Target::Content,
                    operator: Operator::MustExist,
                    value: None,
                    severity: Severity::Info,
                    message: "say something".into(),
                },
            ],
        }
    }

    #[test]
    fn documents_round_trip() {
        let doc = Document {
            front: front(),
            body: "# Title\n\n+++\nnot front matter\n".into(),
        };
        let text = doc.render().unwrap();
        assert!(text.starts_with("+++\ntype = \"policy\"\n"), "{text}");
        assert!(
            text.contains("created_at = \"2023-11-14T22:13:20.000Z\""),
            "{text}"
        );
        assert!(text.contains("[[constraints]]"), "{text}");
        assert_eq!(Document::parse(&text).unwrap(), doc);
    }

    #[test]
    fn crlf_files_written_by_hand_are_read() {
        let text = "+++\r\ntype = \"adr\"\r\nstatus = \"accepted\"\r\ntitle = \"T\"\r\n\
                    created_at = \"2026-01-01T00:00:00Z\"\r\nupdated_at = \"2026-01-01T00:00:00Z\"\r\n\
                    author = \"a\"\r\n+++\r\nbody\r\n";
        let doc = Document::parse(text).unwrap();
        assert_eq!(doc.front.item_type, ItemType::Adr);
        assert_eq!(doc.body, "body\r\n");
        assert!(doc.front.constraints.is_empty() && doc.front.tags.is_empty());
    }

    #[test]
    fn malformed_files_are_reported() {
        assert_eq!(
            Document::parse("no front matter"),
            Err(DocumentError::NoOpening)
        );
        assert_eq!(
            Document::parse("+++\ntitle = \"x\"\n"),
            Err(DocumentError::NoClosing)
        );
        assert!(matches!(
            Document::parse("+++\nunknown = 1\n+++\n"),
            Err(DocumentError::Toml(_))
        ));
    }

    #[test]
    fn a_delimiter_inside_a_value_is_refused() {
        let mut f = front();
        f.constraints[0].message = "line\n+++\nline".into();
        let doc = Document {
            front: f,
            body: String::new(),
        };
        assert_eq!(doc.render(), Err(DocumentError::DelimiterInValue));
    }
}
