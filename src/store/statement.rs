//! A statement of the store as it is sent: SQL text in one backend's dialect and the
//! values bound to it, in order. Values are bound, not formatted into the text (the one
//! exception, the outbox poll's two integers, is a statement not kept prepared:
//! `tables/push_outbox.rs`).
//!
//! Each table's module (`tables/`) builds its statements for either dialect; the backends
//! only run them ([`Reader`](crate::store::reads::Reader)). A statement is a diesel query
//! of its own, kept prepared by its text in the connection's statement cache — one text
//! per statement whatever its values: a list of values is one array on Postgres
//! (`= ANY($n)`), and on SQLite, which has no arrays, one placeholder per value (`IN (?,
//! …)`), a text per length that is not cached (as diesel does for its own `IN` lists).

use std::fmt::Write;
use std::ops::Range;

use diesel::QueryResult;
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{Array, BigInt, Double, Nullable, Text, Untyped};
use diesel::sqlite::Sqlite;

use crate::store::packed::Packed;

/// Which SQL dialect a statement is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Postgres,
    Sqlite,
}

/// One bound value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bind {
    Text(String),
    /// Text of a `Packed` column (an id of the tables `packed.rs` describes).
    Packed(String),
    NullableText(Option<String>),
    Double(f64),
    BigInt(i64),
    /// Postgres only ([`Statement::any`]): an array of `Packed` values.
    PackedArray(Vec<String>),
    /// Postgres only ([`Statement::any`]): an array of integers.
    BigIntArray(Vec<i64>),
}

/// SQL text and its bound values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Statement {
    pub(crate) dialect: Dialect,
    pub(crate) sql: String,
    pub(crate) binds: Vec<Bind>,
    /// Where in `sql` each bind's placeholder is.
    holes: Vec<Range<usize>>,
    /// Whether the connection keeps the statement prepared (not a text per length).
    cached: bool,
}

impl Statement {
    pub(crate) fn new(dialect: Dialect, sql: &str) -> Statement {
        Statement {
            dialect,
            sql: sql.to_owned(),
            binds: Vec::new(),
            holes: Vec::new(),
            cached: true,
        }
    }

    pub(crate) fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    /// Appends a placeholder for `value`.
    pub(crate) fn bind(&mut self, value: Bind) -> &mut Self {
        self.binds.push(value);
        let start = self.sql.len();
        match self.dialect {
            Dialect::Postgres => {
                // Writing into a String cannot fail.
                let _ = write!(self.sql, "${}", self.binds.len());
            }
            Dialect::Sqlite => self.sql.push('?'),
        }
        self.holes.push(start..self.sql.len());
        self
    }

    pub(crate) fn text(&mut self, value: &str) -> &mut Self {
        self.bind(Bind::Text(value.to_owned()))
    }

    /// A value of a `Packed` column.
    pub(crate) fn packed(&mut self, value: &str) -> &mut Self {
        self.bind(Bind::Packed(value.to_owned()))
    }

    pub(crate) fn int(&mut self, value: i64) -> &mut Self {
        self.bind(Bind::BigInt(value))
    }

    /// `usize` limits as SQL `LIMIT`s (saturating: nobody asks for 2^63 rows).
    pub(crate) fn limit(&mut self, n: usize) -> &mut Self {
        self.push(" LIMIT ").int(limit(n))
    }

    /// `<column> = ANY(<values>)` on Postgres, `<column> IN (<values>)` on SQLite (which
    /// makes the statement one that is not kept prepared). `values` must not be empty.
    pub(crate) fn any(&mut self, column: &str, values: List) -> &mut Self {
        self.push(column);
        match self.dialect {
            Dialect::Postgres => {
                self.push(" = ANY(").bind(match values {
                    List::Packed(v) => Bind::PackedArray(v),
                    List::BigInt(v) => Bind::BigIntArray(v),
                });
            }
            Dialect::Sqlite => {
                self.cached = false;
                self.push(" IN (");
                let binds: Vec<Bind> = match values {
                    List::Packed(v) => v.into_iter().map(Bind::Packed).collect(),
                    List::BigInt(v) => v.into_iter().map(Bind::BigInt).collect(),
                };
                for (i, value) in binds.into_iter().enumerate() {
                    if i > 0 {
                        self.push(", ");
                    }
                    self.bind(value);
                }
            }
        }
        self.push(")")
    }

    /// Marks a statement whose text changes from one run to the next (values written
    /// into it) as one the connection does not keep prepared.
    pub(crate) fn uncached(&mut self) -> &mut Self {
        self.cached = false;
        self
    }

    /// Walks the statement into a query of either backend: the text between the
    /// placeholders as it is, each value by `bind`.
    fn walk<'b, DB: diesel::backend::Backend>(
        &'b self,
        mut out: AstPass<'_, 'b, DB>,
        mut bind: impl FnMut(&'b Bind, &mut AstPass<'_, 'b, DB>) -> QueryResult<()>,
    ) -> QueryResult<()> {
        if !self.cached {
            out.unsafe_to_cache_prepared();
        }
        let mut at = 0;
        for (hole, value) in self.holes.iter().zip(&self.binds) {
            out.push_sql(&self.sql[at..hole.start]);
            bind(value, &mut out)?;
            at = hole.end;
        }
        out.push_sql(&self.sql[at..]);
        Ok(())
    }
}

/// The values of a [`Statement::any`].
pub(crate) enum List {
    Packed(Vec<String>),
    BigInt(Vec<i64>),
}

impl List {
    /// Ids of a `Packed` column.
    pub(crate) fn ids<'a>(ids: impl IntoIterator<Item = &'a str>) -> List {
        List::Packed(ids.into_iter().map(str::to_owned).collect())
    }
}

/// `usize` limits as SQL integers (saturating).
pub(crate) fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl QueryId for Statement {
    type QueryId = ();

    // Kept prepared by its text, not its type (see the module's header).
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl Query for Statement {
    type SqlType = Untyped;
}

impl<Conn> diesel::RunQueryDsl<Conn> for Statement {}

impl QueryFragment<Pg> for Statement {
    fn walk_ast<'b>(&'b self, out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        self.walk(out, |value, out| match value {
            Bind::Text(v) => out.push_bind_param::<Text, _>(v),
            Bind::Packed(v) => out.push_bind_param::<Packed, _>(v),
            Bind::NullableText(v) => out.push_bind_param::<Nullable<Text>, _>(v),
            Bind::Double(v) => out.push_bind_param::<Double, _>(v),
            Bind::BigInt(v) => out.push_bind_param::<BigInt, _>(v),
            Bind::PackedArray(v) => out.push_bind_param::<Array<Packed>, _>(v),
            Bind::BigIntArray(v) => out.push_bind_param::<Array<BigInt>, _>(v),
        })
    }
}

impl QueryFragment<Sqlite> for Statement {
    fn walk_ast<'b>(&'b self, out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
        self.walk(out, |value, out| match value {
            Bind::Text(v) => out.push_bind_param::<Text, _>(v),
            Bind::Packed(v) => out.push_bind_param::<Packed, _>(v),
            Bind::NullableText(v) => out.push_bind_param::<Nullable<Text>, _>(v),
            Bind::Double(v) => out.push_bind_param::<Double, _>(v),
            Bind::BigInt(v) => out.push_bind_param::<BigInt, _>(v),
            // `Statement::any` writes a placeholder per value on SQLite.
            Bind::PackedArray(_) | Bind::BigIntArray(_) => Err(
                diesel::result::Error::QueryBuilderError("SQLite has no array values".into()),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_one_array_on_postgres_and_a_placeholder_per_value_on_sqlite() {
        let ids = || List::ids(["a", "b"]);
        let mut pg = Statement::new(Dialect::Postgres, "SELECT 1 FROM t WHERE x = ");
        pg.int(3).push(" AND ").any("id", ids());
        assert_eq!(pg.sql, "SELECT 1 FROM t WHERE x = $1 AND id = ANY($2)");
        assert!(pg.cached);
        let mut lite = Statement::new(Dialect::Sqlite, "SELECT 1 FROM t WHERE x = ");
        lite.int(3).push(" AND ").any("id", ids());
        assert_eq!(lite.sql, "SELECT 1 FROM t WHERE x = ? AND id IN (?, ?)");
        assert_eq!(lite.binds.len(), 3);
        assert!(!lite.cached);
    }

    /// diesel writes each placeholder itself: what it writes is the statement's text.
    #[test]
    fn diesel_writes_the_statement_s_own_text() {
        let mut pg = Statement::new(Dialect::Postgres, "SELECT a FROM t WHERE x = ");
        pg.text("v").push(" AND y = ").int(2).limit(5);
        let written = diesel::debug_query::<Pg, _>(&pg).to_string();
        assert!(
            written.starts_with(&format!("{} -- binds:", pg.sql)),
            "{written}"
        );
        let mut lite = Statement::new(Dialect::Sqlite, "SELECT a FROM t WHERE x = ");
        lite.text("v")
            .push(" AND ")
            .any("id", List::ids(["a", "b"]));
        let written = diesel::debug_query::<Sqlite, _>(&lite).to_string();
        assert!(
            written.starts_with(&format!("{} -- binds:", lite.sql)),
            "{written}"
        );
    }
}
