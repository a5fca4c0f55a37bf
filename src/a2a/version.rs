//! `A2A-Version` negotiation.
//!
//! Only `Major.Minor` counts (a patch is tolerated and ignored). An absent or empty
//! value does not reject the request: the spec says it means 0.3, but 1.0 conformance
//! clients omit it too, so the request's shape (slash method or `/v1/` path = 0.3,
//! PascalCase or unprefixed path = 1.0) decides the dialect. A request that names a
//! supported version is served in the dialect its shape implies; anything else is
//! `VersionNotSupported` (-32009), which the TCK probes with `99.0`.

use super::Dialect;
use crate::error::Error;

/// The protocol versions this server speaks, in preference order.
pub const SUPPORTED_VERSIONS: &[&str] = &["1.0", "0.3"];

/// Picks the dialect for a request whose shape implies `shape`, given the `A2A-Version`
/// header or query value.
pub fn negotiate(requested: Option<&str>, shape: Dialect) -> Result<Dialect, Error> {
    let Some(raw) = requested.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(shape);
    };
    match parse(raw) {
        Some((1, 0) | (0, 3)) => Ok(shape),
        _ => Err(Error::VersionNotSupported(raw.to_owned())),
    }
}

/// Whether `requested` is a well-formed version newer than the newest supported (1.0),
/// which a client may send before this server learns it; the caller logs a warning.
pub fn is_newer_than_supported(requested: &str) -> bool {
    parse(requested.trim()).is_some_and(|version| version > (1, 0))
}

/// `"1"`, `"1.0"` or `"1.0.3"` -> `(1, 0)`; anything else -> `None`.
fn parse(raw: &str) -> Option<(u32, u32)> {
    let mut numbers = raw.split('.').map(|n| {
        if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
            n.parse::<u32>().ok()
        } else {
            None
        }
    });
    let major = numbers.next()??;
    let minor = numbers.next().unwrap_or(Some(0))?;
    let _patch = numbers.next().unwrap_or(Some(0))?;
    if numbers.next().is_some() {
        return None;
    }
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_table() {
        let served = [
            (None, Dialect::V1),
            (Some(""), Dialect::V03Rpc),
            (Some("  "), Dialect::V1),
            (Some("1.0"), Dialect::V1),
            (Some("1.0.1"), Dialect::V1),
            (Some("1"), Dialect::V03Rest),
            (Some(" 1.0 "), Dialect::V1),
            (Some("0.3"), Dialect::V03Rpc),
            (Some("0.3.0"), Dialect::V1),
        ];
        for (requested, shape) in served {
            assert_eq!(negotiate(requested, shape), Ok(shape), "{requested:?}");
        }
        for refused in [
            "99.0", "2.0", "1.1", "0.2", "0.1", "garbage", "1.x", "v1.0", "1.0.0.0", ".1", "1.",
        ] {
            assert_eq!(
                negotiate(Some(refused), Dialect::V1),
                Err(Error::VersionNotSupported(refused.to_owned())),
                "{refused}"
            );
        }
    }

    #[test]
    fn newer_versions_are_recognised_for_logging() {
        assert!(is_newer_than_supported("1.1"));
        assert!(is_newer_than_supported("99.0"));
        assert!(!is_newer_than_supported("1.0"));
        assert!(!is_newer_than_supported("0.3"));
        assert!(!is_newer_than_supported("garbage"));
    }

    #[test]
    fn supported_versions_are_what_negotiate_accepts() {
        for v in SUPPORTED_VERSIONS {
            assert!(negotiate(Some(v), Dialect::V1).is_ok(), "{v}");
        }
    }
}
