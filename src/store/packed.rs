//! Ids and digests as Postgres stores them: packed into bytes.
//!
//! A column of SQL type [`Packed`] holds text that is, nearly always, a canonical UUID
//! (lowercase and hyphenated: every id this server mints, and most that clients send) or
//! a SHA-256 digest in lowercase hex. On Postgres (`bytea`) such a value is stored as its
//! 16 or 32 bytes instead of 37 or 65 bytes of text, in its row and in every index entry
//! that holds it; any other text as its UTF-8 bytes, followed by a 0xFF byte when that
//! makes 16 or 32 bytes (UTF-8 never holds 0xFF, so a 16- or 32-byte value is always a
//! packed one). Bytes compare as the text did for the values that matter: a UUID's bytes
//! in the order of its text, so time-ordered ids stay in time order in every index.
//! On SQLite the column is text, as written. Migration `…_binary_ids` carries older
//! Postgres databases over, with the same encoding in SQL (`a2a_id`, `a2a_id_text`).

use std::io::Write;

use diesel::deserialize::{self, FromSql};
use diesel::pg::{Pg, PgValue};
use diesel::serialize::{self, IsNull, Output, ToSql};
use diesel::sql_types::Text;
use diesel::sqlite::{Sqlite, SqliteValue};

/// Text packed into bytes on Postgres (`bytea`), text on SQLite.
#[derive(
    Debug, Clone, Copy, Default, diesel::sql_types::SqlType, diesel::query_builder::QueryId,
)]
#[diesel(postgres_type(oid = 17, array_oid = 1001))]
#[diesel(sqlite_type(name = "Text"))]
pub struct Packed;

/// What follows a value's UTF-8 bytes when they alone would read as a packed value.
const MARKER: u8 = 0xFF;

/// `value` as Postgres stores it: `(bytes, marker)`, to be written one after the other;
/// `buf` holds the bytes of a packed value.
pub(super) fn pack<'a>(value: &'a str, buf: &'a mut [u8; 32]) -> (&'a [u8], &'static [u8]) {
    let raw = value.as_bytes();
    if let Some(uuid) = canonical_uuid(raw) {
        buf[..16].copy_from_slice(&uuid);
        return (&buf[..16], &[]);
    }
    if raw.len() == 64 && hex_into(raw, buf) {
        return (&buf[..], &[]);
    }
    match raw.len() {
        16 | 32 => (raw, &[MARKER]),
        _ => (raw, &[]),
    }
}

/// The text a stored value stands for.
pub(super) fn unpack(bytes: &[u8]) -> Result<String, String> {
    match bytes.len() {
        16 => {
            let uuid = uuid::Uuid::from_slice(bytes).map_err(|e| e.to_string())?;
            Ok(uuid.hyphenated().to_string())
        }
        // As the digests are written (`runtime::idempotency::digest`).
        32 => Ok(format!(
            "{:x}",
            sha2::digest::generic_array::GenericArray::<u8, sha2::digest::consts::U32>::from_slice(
                bytes
            )
        )),
        17 | 33 if bytes.last() == Some(&MARKER) => utf8(&bytes[..bytes.len() - 1]),
        _ => utf8(bytes),
    }
}

fn utf8(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|e| format!("a stored id is not UTF-8: {e}"))
}

/// The 16 bytes of `raw` when it is a UUID written as `uuid` writes one: lowercase hex,
/// hyphenated (`8-4-4-4-12`).
fn canonical_uuid(raw: &[u8]) -> Option<[u8; 16]> {
    if raw.len() != 36 {
        return None;
    }
    let mut out = [0u8; 16];
    let mut digits = [0u8; 32];
    let mut n = 0;
    for (i, &c) in raw.iter().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            if c != b'-' {
                return None;
            }
            continue;
        }
        digits[n] = c;
        n += 1;
    }
    let mut bytes = [0u8; 32];
    if !hex_into(&digits, &mut bytes) {
        return None;
    }
    out.copy_from_slice(&bytes[..16]);
    Some(out)
}

/// Decodes lowercase hex `raw` (an even number of digits, at most 64) into the start of
/// `out`; false if any digit is not one of `0-9a-f`.
fn hex_into(raw: &[u8], out: &mut [u8; 32]) -> bool {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    for (i, pair) in raw.chunks_exact(2).enumerate() {
        match (digit(pair[0]), digit(pair[1])) {
            (Some(hi), Some(lo)) => out[i] = hi << 4 | lo,
            _ => return false,
        }
    }
    true
}

impl ToSql<Packed, Pg> for str {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
        let mut buf = [0u8; 32];
        let (bytes, marker) = pack(self, &mut buf);
        out.write_all(bytes)?;
        out.write_all(marker)?;
        Ok(IsNull::No)
    }
}

impl ToSql<Packed, Pg> for String {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
        <str as ToSql<Packed, Pg>>::to_sql(self.as_str(), out)
    }
}

impl ToSql<Packed, Sqlite> for str {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Sqlite>) -> serialize::Result {
        <str as ToSql<Text, Sqlite>>::to_sql(self, out)
    }
}

impl ToSql<Packed, Sqlite> for String {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Sqlite>) -> serialize::Result {
        <str as ToSql<Text, Sqlite>>::to_sql(self.as_str(), out)
    }
}

impl FromSql<Packed, Pg> for String {
    fn from_sql(value: PgValue<'_>) -> deserialize::Result<Self> {
        Ok(unpack(value.as_bytes())?)
    }
}

impl FromSql<Packed, Sqlite> for String {
    fn from_sql(value: SqliteValue<'_, '_, '_>) -> deserialize::Result<Self> {
        <String as FromSql<Text, Sqlite>>::from_sql(value)
    }
}

/// Text bound to a [`Packed`] column in a diesel query (`.eq(Id(…))`).
#[derive(Debug, Clone, Copy, diesel::expression::AsExpression)]
#[diesel(sql_type = Packed)]
pub(super) struct Id<'a>(pub(super) &'a str);

impl ToSql<Packed, Pg> for Id<'_> {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
        <str as ToSql<Packed, Pg>>::to_sql(self.0, out)
    }
}

impl ToSql<Packed, Sqlite> for Id<'_> {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Sqlite>) -> serialize::Result {
        <str as ToSql<Packed, Sqlite>>::to_sql(self.0, out)
    }
}

/// A value of a [`Packed`] column, bound through tokio-postgres (the write path's
/// statements, `postgres/writer.rs`, and the cluster's, `cluster.rs`): `bytea` packed as above.
#[derive(Debug, Clone, Copy)]
pub(super) struct PgPacked<'a>(pub(super) &'a str);

impl tokio_postgres::types::ToSql for PgPacked<'_> {
    fn to_sql(
        &self,
        _: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        let mut buf = [0u8; 32];
        let (bytes, marker) = pack(self.0, &mut buf);
        out.extend_from_slice(bytes);
        out.extend_from_slice(marker);
        Ok(tokio_postgres::types::IsNull::No)
    }

    tokio_postgres::types::accepts!(BYTEA);
    tokio_postgres::types::to_sql_checked!();
}

/// A [`Packed`] column read through tokio-postgres: the text it stands for.
pub(super) struct PgUnpacked(pub(super) String);

impl<'r> tokio_postgres::types::FromSql<'r> for PgUnpacked {
    fn from_sql(
        _: &tokio_postgres::types::Type,
        raw: &'r [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Self(unpack(raw)?))
    }

    tokio_postgres::types::accepts!(BYTEA);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(value: &str) -> Vec<u8> {
        let mut buf = [0u8; 32];
        let (bytes, marker) = pack(value, &mut buf);
        [bytes, marker].concat()
    }

    #[test]
    fn every_id_reads_back_as_written() {
        let v7 = uuid::Uuid::now_v7().to_string();
        let digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        for (value, len) in [
            (v7.as_str(), 16),
            ("00000000-0000-0000-0000-000000000000", 16),
            (digest, 32),
            // Not canonical: kept as text.
            ("0198AB12-0000-7000-8000-000000000000", 36),
            ("{0198ab12-0000-7000-8000-000000000000}", 38),
            ("0198ab12000070008000000000000000", 33),
            ("0198ab12-0000-7000-8000-00000000000g", 36),
            (
                "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08",
                64,
            ),
            ("m-1", 3),
            ("0123456789abcdef", 17),
            ("ünïcödé-íd", "ünïcödé-íd".len()),
            ("a", 1),
            ("abcdefghijklmnopqrstuvwxyz012345", 33),
            ("abcdefghijklmnopqrstuvwxyz0123456", 33),
        ] {
            let bytes = stored(value);
            assert_eq!(bytes.len(), len, "{value}");
            assert_eq!(unpack(&bytes).as_deref(), Ok(value), "{value}");
        }
    }

    #[test]
    fn time_ordered_ids_keep_their_order_as_bytes() {
        let ids: Vec<String> = (0..64).map(|_| uuid::Uuid::now_v7().to_string()).collect();
        let mut by_bytes = ids.clone();
        by_bytes.sort_by_key(|id| stored(id));
        let mut by_text = ids;
        by_text.sort();
        assert_eq!(by_bytes, by_text);
    }

    #[test]
    fn bytes_no_text_packs_to_are_refused() {
        assert!(unpack(&[0xC3]).is_err());
        assert!(unpack(&[b'a', 0xFF]).is_err());
    }
}
