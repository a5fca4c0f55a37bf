//! What the engine is asked to do, as typed requests, and the checks every request
//! goes through before anything is stored or searched.
//!
//! The request types deserialize from tool arguments (camelCase, unknown fields refused,
//! lowercase enums); the scope ids are taken out of the arguments first
//! ([`split_scope_ids`]) because serde cannot combine a flattened struct with
//! `deny_unknown_fields`.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::skills::SkillError;
use crate::store::memories::{MemoryLayer, ScopeField, ScopeIds, check_scope_id};

/// Most tags on one memory or in one search.
pub const MAX_TAGS: usize = 32;
/// Longest tag, in bytes.
pub const MAX_TAG_BYTES: usize = 64;
/// Longest memory id accepted.
const MAX_MEMORY_ID_BYTES: usize = 256;

/// `memory_add`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddMemory {
    pub content: String,
    pub layer: MemoryLayer,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    #[serde(skip)]
    pub ids: ScopeIds,
}

/// `memory_search`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SearchMemories {
    pub query: String,
    /// Default: every layer whose ids are given.
    #[serde(default)]
    pub layers: Option<Vec<MemoryLayer>>,
    /// Only memories carrying every one of these tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    pub limit: Option<usize>,
    /// Lowest final score kept, in [0, 1]; default 0 (every match).
    #[serde(default)]
    pub threshold: Option<f64>,
    #[serde(skip)]
    pub ids: ScopeIds,
}

/// `memory_get` and `memory_delete`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryRef {
    pub memory_id: String,
    #[serde(skip)]
    pub ids: ScopeIds,
}

/// `memory_update`: at least one of content, tags, metadata.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateMemory {
    pub memory_id: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    #[serde(skip)]
    pub ids: ScopeIds,
}

/// Why feedback was given. It is logged with the reward; only the reward moves the
/// importance (its sign says whether the memory helped, the kind says why).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeedbackKind {
    Helpful,
    Irrelevant,
    Outdated,
    Inaccurate,
    Duplicate,
}

impl FeedbackKind {
    /// Every kind, in the order the tool schema lists them.
    pub const ALL: [FeedbackKind; 5] = [
        FeedbackKind::Helpful,
        FeedbackKind::Irrelevant,
        FeedbackKind::Outdated,
        FeedbackKind::Inaccurate,
        FeedbackKind::Duplicate,
    ];

    /// The wire name (lowercase).
    pub fn as_str(self) -> &'static str {
        match self {
            FeedbackKind::Helpful => "helpful",
            FeedbackKind::Irrelevant => "irrelevant",
            FeedbackKind::Outdated => "outdated",
            FeedbackKind::Inaccurate => "inaccurate",
            FeedbackKind::Duplicate => "duplicate",
        }
    }
}

/// `memory_feedback`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryFeedback {
    pub memory_id: String,
    /// In [-1, 1].
    pub reward: f64,
    pub kind: FeedbackKind,
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(skip)]
    pub ids: ScopeIds,
}

fn invalid(message: impl Into<String>) -> SkillError {
    SkillError::InvalidArguments(message.into())
}

/// Takes the scope ids (`agentId`, …) out of `arguments`; each must be a string or
/// null (absent).
pub fn split_scope_ids(arguments: &mut Map<String, Value>) -> Result<ScopeIds, SkillError> {
    let mut ids = ScopeIds::new();
    for field in ScopeField::ALL {
        match arguments.remove(field.wire_name()) {
            None | Some(Value::Null) => {}
            Some(Value::String(value)) => ids.set(field, value),
            Some(_) => return Err(invalid(format!("{}: must be a string", field.wire_name()))),
        }
    }
    Ok(ids)
}

/// Every id given is well-formed, whether or not the chosen layer uses it.
pub(crate) fn check_ids(ids: &ScopeIds) -> Result<(), SkillError> {
    for field in ScopeField::ALL {
        if let Some(value) = ids.get(field) {
            check_scope_id(field, value).map_err(|e| invalid(e.to_string()))?;
        }
    }
    Ok(())
}

/// A memory id as given: non-empty and bounded (it is only ever compared, never parsed).
pub(crate) fn check_memory_id(id: &str) -> Result<(), SkillError> {
    if id.is_empty() || id.len() > MAX_MEMORY_ID_BYTES || id.chars().any(char::is_control) {
        return Err(invalid(
            "memoryId: must be 1 to 256 bytes without control characters",
        ));
    }
    Ok(())
}

/// Text that is not blank and at most `max_bytes` long.
pub(crate) fn check_text(field: &str, text: &str, max_bytes: usize) -> Result<(), SkillError> {
    if text.trim().is_empty() {
        return Err(invalid(format!("{field}: must not be empty")));
    }
    if text.len() > max_bytes {
        return Err(invalid(format!(
            "{field}: is {} bytes; the limit is {max_bytes}",
            text.len()
        )));
    }
    Ok(())
}

/// Metadata whose JSON is at most `max_bytes` long.
pub(crate) fn check_metadata(
    metadata: Option<Map<String, Value>>,
    max_bytes: usize,
) -> Result<Option<Map<String, Value>>, SkillError> {
    if let Some(map) = &metadata {
        let size = Value::Object(map.clone()).to_string().len();
        if size > max_bytes {
            return Err(invalid(format!(
                "metadata: is {size} bytes as JSON; the limit is {max_bytes}"
            )));
        }
    }
    Ok(metadata)
}

/// Tags trimmed, deduplicated (first occurrence kept), each non-empty and bounded.
pub(crate) fn normalise_tags(tags: Option<Vec<String>>) -> Result<Vec<String>, SkillError> {
    let mut out: Vec<String> = Vec::new();
    for tag in tags.unwrap_or_default() {
        let tag = tag.trim();
        if tag.is_empty() || tag.len() > MAX_TAG_BYTES || tag.chars().any(char::is_control) {
            return Err(invalid(format!(
                "tags: each tag must be 1 to {MAX_TAG_BYTES} bytes without control characters"
            )));
        }
        if !out.iter().any(|t| t == tag) {
            out.push(tag.to_owned());
        }
    }
    if out.len() > MAX_TAGS {
        return Err(invalid(format!("tags: at most {MAX_TAGS}")));
    }
    Ok(out)
}

/// A number within `[low, high]` (which excludes NaN and the infinities).
pub(crate) fn check_range(field: &str, value: f64, low: f64, high: f64) -> Result<f64, SkillError> {
    if value.is_finite() && (low..=high).contains(&value) {
        Ok(value)
    } else {
        Err(invalid(format!(
            "{field}: must be a number from {low} to {high}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scope_ids_are_taken_out_of_the_arguments() {
        let Value::Object(mut args) =
            json!({"content": "x", "userId": "u1", "agentId": null, "layer": "user"})
        else {
            unreachable!()
        };
        let ids = split_scope_ids(&mut args).unwrap();
        assert_eq!(ids.get(ScopeField::UserId), Some("u1"));
        assert_eq!(ids.get(ScopeField::AgentId), None);
        assert_eq!(args.keys().collect::<Vec<_>>(), ["content", "layer"]);
        let Value::Object(mut bad) = json!({"teamId": 7}) else {
            unreachable!()
        };
        assert_eq!(
            split_scope_ids(&mut bad),
            Err(invalid("teamId: must be a string"))
        );
    }

    #[test]
    fn tags_are_trimmed_deduplicated_and_bounded() {
        let tags = |v: Vec<&str>| normalise_tags(Some(v.into_iter().map(String::from).collect()));
        assert_eq!(tags(vec![" a ", "b", "a"]).unwrap(), ["a", "b"]);
        assert!(tags(vec![" "]).is_err());
        assert!(tags(vec![&"x".repeat(MAX_TAG_BYTES + 1)]).is_err());
        let many: Vec<String> = (0..=MAX_TAGS).map(|i| i.to_string()).collect();
        assert!(normalise_tags(Some(many)).is_err());
        assert_eq!(normalise_tags(None).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn ranges_refuse_nan_and_infinities() {
        assert_eq!(check_range("r", -1.0, -1.0, 1.0), Ok(-1.0));
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.01] {
            assert!(check_range("r", bad, -1.0, 1.0).is_err(), "{bad}");
        }
    }

    #[test]
    fn text_limits_count_bytes() {
        assert!(check_text("content", "ééé", 6).is_ok());
        assert!(check_text("content", "éééé", 6).is_err());
        assert!(check_text("content", " \n ", 6).is_err());
    }
}
