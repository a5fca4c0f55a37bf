//! The `ListTasks` keyset cursor: the sort key `(status_timestamp, task_id)` of the last
//! task of a page, as an opaque base64url string.
//!
//! Carrying the task id as well as the timestamp is what keeps paging exact: a cursor of
//! the timestamp alone would skip or repeat tasks whose status changed in the same
//! millisecond. The token is not signed; a forged one only moves the caller's own
//! window, because every query stays scoped by tenant.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The position after which the next page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Cursor {
    pub(super) status_timestamp: i64,
    pub(super) task_id: String,
}

impl Cursor {
    pub(super) fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!("{}:{}", self.status_timestamp, self.task_id))
    }

    /// `None` for anything [`Cursor::encode`] did not produce.
    pub(super) fn decode(token: &str) -> Option<Self> {
        let raw = URL_SAFE_NO_PAD.decode(token).ok()?;
        let raw = String::from_utf8(raw).ok()?;
        // The timestamp has no ':', so the first one separates it from the id.
        let (ts, task_id) = raw.split_once(':')?;
        if task_id.is_empty() {
            return None;
        }
        Some(Self {
            status_timestamp: ts.parse().ok()?,
            task_id: task_id.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_even_with_colons_in_the_id() {
        let c = Cursor {
            status_timestamp: -5,
            task_id: "a:b".into(),
        };
        assert_eq!(Cursor::decode(&c.encode()), Some(c));
    }

    #[test]
    fn foreign_tokens_are_refused() {
        assert_eq!(Cursor::decode("not base64!"), None);
        assert_eq!(Cursor::decode(&URL_SAFE_NO_PAD.encode("12")), None);
        assert_eq!(Cursor::decode(&URL_SAFE_NO_PAD.encode("x:task")), None);
        assert_eq!(Cursor::decode(&URL_SAFE_NO_PAD.encode("12:")), None);
    }
}
