//! Identifier newtypes ("parse, don't validate") and the timestamp type.
//!
//! An id can only be built through `parse` (client input) or `generate` (server-minted),
//! so every id that reaches the runtime or the store is non-empty, bounded and printable.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest id accepted from a client.
pub const MAX_ID_LEN: usize = 256;

/// Why a client-supplied id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("must not be empty")]
    Empty,
    #[error("must be at most {MAX_ID_LEN} characters")]
    TooLong,
    #[error("must not contain control characters")]
    ControlCharacter,
}

fn check(raw: &str) -> Result<(), IdError> {
    if raw.is_empty() {
        return Err(IdError::Empty);
    }
    if raw.len() > MAX_ID_LEN {
        return Err(IdError::TooLong);
    }
    if raw.chars().any(char::is_control) {
        return Err(IdError::ControlCharacter);
    }
    Ok(())
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Accepts a client-supplied id if it is non-empty, bounded and printable.
            pub fn parse(raw: impl Into<String>) -> Result<Self, IdError> {
                let raw = raw.into();
                check(&raw)?;
                Ok(Self(raw))
            }

            /// A fresh server-generated id (UUID v7: unique and roughly time-ordered).
            pub fn generate() -> Self {
                Self(uuid::Uuid::now_v7().to_string())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

id_type!(
    /// The tenant a request acts for; every stored row is scoped by it.
    TenantId
);
id_type!(
    /// An A2A `contextId`: one conversation thread, owned by one `ThreadActor`.
    ContextId
);
id_type!(
    /// An A2A task id (server-generated, except for the 0.1 dialect).
    TaskId
);
id_type!(
    /// An A2A `messageId` (chosen by whoever created the message).
    MessageId
);

impl TenantId {
    /// The tenant of requests when authentication is off.
    pub fn default_tenant() -> Self {
        Self("default".to_owned())
    }
}

/// Milliseconds since the Unix epoch, UTC. Stored as BIGINT, sent as RFC 3339 with `Z`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub i64);

impl Timestamp {
    pub fn now() -> Self {
        Self(chrono::Utc::now().timestamp_millis())
    }

    pub fn millis(self) -> i64 {
        self.0
    }

    /// RFC 3339, UTC, millisecond precision: `2026-11-22T06:44:55.123Z`.
    pub fn to_rfc3339(self) -> String {
        chrono::DateTime::from_timestamp_millis(self.0)
            .unwrap_or_default()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    }

    /// Parses any RFC 3339 timestamp (any offset) into UTC milliseconds.
    pub fn parse_rfc3339(raw: &str) -> Option<Self> {
        chrono::DateTime::parse_from_rfc3339(raw.trim())
            .ok()
            .map(|t| Self(t.timestamp_millis()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_refuse_empty_long_and_control_characters() {
        assert_eq!(TaskId::parse(""), Err(IdError::Empty));
        assert_eq!(
            TaskId::parse("a".repeat(MAX_ID_LEN + 1)),
            Err(IdError::TooLong)
        );
        assert_eq!(TaskId::parse("a\nb"), Err(IdError::ControlCharacter));
        assert_eq!(TaskId::parse("task-1").unwrap().as_str(), "task-1");
    }

    #[test]
    fn generated_ids_are_unique() {
        assert_ne!(ContextId::generate(), ContextId::generate());
    }

    #[test]
    fn timestamps_round_trip_through_rfc3339() {
        let t = Timestamp(1_763_793_895_123);
        let s = t.to_rfc3339();
        assert!(s.ends_with('Z'), "{s}");
        assert_eq!(Timestamp::parse_rfc3339(&s), Some(t));
        assert_eq!(
            Timestamp::parse_rfc3339("2026-01-01T01:00:00+01:00"),
            Timestamp::parse_rfc3339("2026-01-01T00:00:00Z")
        );
        assert_eq!(Timestamp::parse_rfc3339("yesterday"), None);
    }
}
