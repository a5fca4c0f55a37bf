//! Identifier newtypes ("parse, don't validate") and the timestamp type.
//!
//! An id can only be built through `parse` (client input, also when deserialized) or
//! `generate` (server-minted), so every id that reaches the runtime or the store is
//! non-empty, bounded and printable. A tenant id has a narrower shape of its own
//! ([`TenantId::parse`]): it comes from configuration, a token claim or a proxy's header,
//! and names folders and metric labels, so it is a short run of safe characters.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Longest id accepted from a client.
pub const MAX_ID_LEN: usize = 256;
/// Longest tenant id.
pub const MAX_TENANT_LEN: usize = 64;

/// Why a client-supplied id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("must not be empty")]
    Empty,
    #[error("must be at most {MAX_ID_LEN} characters")]
    TooLong,
    #[error("must not contain control characters")]
    ControlCharacter,
    #[error(
        "must be 1 to {MAX_TENANT_LEN} of A-Z, a-z, 0-9, `.`, `_` and `-`, begin with a \
         letter or digit, and not contain `..`"
    )]
    Tenant,
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

/// The one rule for a tenant id, wherever it comes from (`auth.api_keys`, an issuer's
/// fixed tenant, a token's tenant claim, a trusted proxy's header):
/// `[A-Za-z0-9][A-Za-z0-9._-]{0,63}` without `..`. It is always one safe path segment
/// (the knowledge repository's folder per tenant), never a traversal, and fits a log line
/// or a metric label as it is.
fn check_tenant(raw: &str) -> Result<(), IdError> {
    if raw.is_empty() {
        return Err(IdError::Empty);
    }
    let safe = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    let fits = raw.len() <= MAX_TENANT_LEN
        && raw.as_bytes()[0].is_ascii_alphanumeric()
        && raw.bytes().all(safe)
        && !raw.contains("..");
    if fits { Ok(()) } else { Err(IdError::Tenant) }
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $check:path) => {
        $(#[$doc])*
        ///
        /// Shared, not copied: a clone is a reference count, since an id travels with every
        /// message, task, event and row of a request.
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
        #[serde(try_from = "String")]
        pub struct $name(Arc<str>);

        impl $name {
            /// Accepts an id from outside if it has its kind's shape (the module header).
            pub fn parse(raw: impl Into<String>) -> Result<Self, IdError> {
                let raw = raw.into();
                $check(&raw)?;
                Ok(Self(raw.into()))
            }

            /// A fresh server-generated id (UUID v7: unique and roughly time-ordered).
            pub fn generate() -> Self {
                let mut buf = uuid::Uuid::encode_buffer();
                Self(Arc::from(&*uuid::Uuid::now_v7().hyphenated().encode_lower(&mut buf)))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
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

        impl TryFrom<String> for $name {
            type Error = IdError;

            fn try_from(raw: String) -> Result<Self, IdError> {
                Self::parse(raw)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0.as_ref().to_owned()
            }
        }
    };
}

id_type!(
    /// The tenant a request acts for; every stored row is scoped by it.
    TenantId,
    check_tenant
);
id_type!(
    /// An A2A `contextId`: one conversation thread, owned by one `ThreadActor`.
    ContextId,
    check
);
id_type!(
    /// An A2A task id (server-generated, except for the 0.1 dialect).
    TaskId,
    check
);
id_type!(
    /// An A2A `messageId` (chosen by whoever created the message).
    MessageId,
    check
);

impl TenantId {
    /// The tenant of requests when authentication is off.
    pub fn default_tenant() -> Self {
        Self(Arc::from("default"))
    }

    /// A tenant id read back from a stored row. Rows written before tenant ids had their
    /// shape (0.1.0 took any printable tenant from configuration or a proxy header) stay
    /// readable, so their tasks and deliveries are still recovered and swept; such a
    /// tenant can no longer authenticate, so no request reaches them.
    pub fn from_store(raw: impl Into<String>) -> Result<Self, IdError> {
        let raw = raw.into();
        check(&raw)?;
        Ok(Self(raw.into()))
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

    /// The instant in UTC; one outside chrono's range (some 262,000 years either way)
    /// reads as the epoch.
    pub fn to_datetime(self) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::from_timestamp_millis(self.0).unwrap_or_default()
    }

    /// RFC 3339, UTC, millisecond precision: `2026-11-22T06:44:55.123Z`.
    pub fn to_rfc3339(self) -> String {
        self.to_datetime()
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
    fn a_tenant_id_is_a_short_run_of_safe_characters() {
        let longest = "t".repeat(MAX_TENANT_LEN);
        for good in [
            "acme",
            "default",
            "t1",
            "tenant-a",
            "Acme_Corp.eu",
            "0",
            "a.b-c_d",
            longest.as_str(),
        ] {
            assert_eq!(TenantId::parse(good).unwrap().as_str(), good);
        }
        let too_long = "t".repeat(MAX_TENANT_LEN + 1);
        for (bad, why) in [
            ("", IdError::Empty),
            ("../x", IdError::Tenant),
            ("..", IdError::Tenant),
            ("a..b", IdError::Tenant),
            ("a/b", IdError::Tenant),
            ("a\\b", IdError::Tenant),
            (".hidden", IdError::Tenant),
            ("-x", IdError::Tenant),
            ("_x", IdError::Tenant),
            ("a b", IdError::Tenant),
            (" acme", IdError::Tenant),
            ("acme\n", IdError::Tenant),
            ("alice@example.com", IdError::Tenant),
            ("org:1", IdError::Tenant),
            ("acmé", IdError::Tenant),
            (too_long.as_str(), IdError::Tenant),
        ] {
            assert_eq!(TenantId::parse(bad), Err(why), "{bad:?}");
        }
        // Deserializing is parsing too.
        assert!(serde_json::from_str::<TenantId>(r#""../x""#).is_err());
        let acme: TenantId = serde_json::from_str(r#""acme""#).unwrap();
        assert_eq!(serde_json::to_string(&acme).unwrap(), r#""acme""#);
        // Stored rows keep the generic rule (ids of 0.1.0 stay readable).
        assert_eq!(TenantId::from_store("a b").unwrap().as_str(), "a b");
        assert_eq!(TenantId::from_store(""), Err(IdError::Empty));
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
