//! Checks on the fields of an item a client gives: title, tags, constraints, and the
//! reason of a status change. Each refusal names its field; each limit is a constant here
//! so the schemas and the tests use the same numbers.

use super::error::KnowledgeError;
use super::query::{CheckInput, QueryInput};
use crate::skills::governance::{Rule, RuleSpec};

/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Most tags on one item.
pub const MAX_TAGS: usize = 32;
/// Longest tag, in characters.
pub const MAX_TAG_CHARS: usize = 64;
/// Most constraints on one item.
pub const MAX_CONSTRAINTS: usize = 64;
/// Longest reason given with a status change, in characters.
pub const MAX_REASON_CHARS: usize = 1000;
/// Longest query text, in characters.
pub const MAX_QUERY_CHARS: usize = 1000;
/// Most dependencies, and most tools, in one check.
pub const MAX_CHECK_LIST: usize = 1000;

/// An argument error with `message`.
pub(super) fn invalid(message: impl Into<String>) -> KnowledgeError {
    KnowledgeError::InvalidArguments(message.into())
}

/// The trimmed title: one line, not empty, bounded.
pub(super) fn check_title(raw: &str) -> Result<String, KnowledgeError> {
    let title = raw.trim();
    if title.is_empty() {
        return Err(invalid("title: must not be empty"));
    }
    if title.chars().count() > MAX_TITLE_CHARS {
        return Err(invalid(format!(
            "title: must be at most {MAX_TITLE_CHARS} characters"
        )));
    }
    if title.chars().any(char::is_control) {
        return Err(invalid(
            "title: must be one line without control characters",
        ));
    }
    Ok(title.to_owned())
}

/// Trimmed, without duplicates (ignoring case, the first spelling wins).
pub(super) fn check_tags(raw: &[String]) -> Result<Vec<String>, KnowledgeError> {
    let mut tags: Vec<String> = Vec::new();
    for tag in raw {
        let tag = tag.trim();
        if tag.is_empty()
            || tag.chars().count() > MAX_TAG_CHARS
            || tag.chars().any(char::is_control)
        {
            return Err(invalid(format!(
                "tags: {tag:?} must be 1 to {MAX_TAG_CHARS} characters without control characters"
            )));
        }
        if !tags.iter().any(|t| t.eq_ignore_ascii_case(tag)) {
            tags.push(tag.to_owned());
        }
    }
    if tags.len() > MAX_TAGS {
        return Err(invalid(format!("tags: at most {MAX_TAGS} are allowed")));
    }
    Ok(tags)
}

/// Every rule builds (its regex compiles) and no rule id is used twice.
pub(super) fn check_constraints(specs: &[RuleSpec]) -> Result<(), KnowledgeError> {
    if specs.len() > MAX_CONSTRAINTS {
        return Err(invalid(format!(
            "constraints: at most {MAX_CONSTRAINTS} are allowed"
        )));
    }
    for (i, spec) in specs.iter().enumerate() {
        Rule::new(spec.clone()).map_err(|e| invalid(format!("constraints[{i}]: {e}")))?;
        if specs[..i].iter().any(|s| s.id == spec.id) {
            return Err(invalid(format!(
                "constraints[{i}]: rule id {:?} is used twice",
                spec.id
            )));
        }
    }
    Ok(())
}

/// The trimmed reason, if any: bounded, lines allowed (it goes into a commit message).
pub(super) fn check_reason(raw: Option<&str>) -> Result<Option<String>, KnowledgeError> {
    let Some(reason) = raw.map(str::trim).filter(|r| !r.is_empty()) else {
        return Ok(None);
    };
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(invalid(format!(
            "reason: must be at most {MAX_REASON_CHARS} characters"
        )));
    }
    if reason.chars().any(|c| c.is_control() && c != '\n') {
        return Err(invalid("reason: must not contain control characters"));
    }
    Ok(Some(reason.to_owned()))
}

/// A query's text and tags are bounded.
pub(super) fn check_query(input: &QueryInput) -> Result<(), KnowledgeError> {
    if input
        .text
        .as_deref()
        .is_some_and(|t| t.chars().count() > MAX_QUERY_CHARS)
    {
        return Err(invalid(format!(
            "query: must be at most {MAX_QUERY_CHARS} characters"
        )));
    }
    if input.tags.len() > MAX_TAGS {
        return Err(invalid(format!("tags: at most {MAX_TAGS} are allowed")));
    }
    Ok(())
}

/// A check's lists are bounded (the content is bounded by the request body limit).
pub(super) fn check_check(input: &CheckInput) -> Result<(), KnowledgeError> {
    for (field, list) in [
        ("dependencies", &input.dependencies),
        ("tools", &input.tools),
    ] {
        if list.len() > MAX_CHECK_LIST {
            return Err(invalid(format!(
                "{field}: at most {MAX_CHECK_LIST} are allowed"
            )));
        }
    }
    Ok(())
}
