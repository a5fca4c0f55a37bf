//! The SQL of the memory repository, built once for both backends.
//!
//! The memories table is wider than diesel's default 16-column tables and its full-text
//! search differs per backend, so its queries are raw SQL. They are assembled here as a
//! [`Statement`] (`store/statement.rs`): text with placeholders in the backend's syntax
//! (`$n` or `?`) and the values to bind, in order. No value is ever formatted into the
//! SQL text. The backend modules run it, not kept prepared (its text varies with the
//! scopes and tags asked for).

use super::scope::{MemoryScope, ScopeField};
use super::text_query::TextQuery;
use crate::store::fence::{HOLD_LOST, THREAD_ELSEWHERE};

pub(crate) use crate::store::statement::{Bind, Dialect, Statement};

/// The columns every read returns, prefixed with the table alias `m.`.
const COLUMNS: &str = "m.id, m.tenant_id, m.layer, m.agent_id, m.user_id, m.session_id, \
    m.project_id, m.team_id, m.org_id, m.company_id, m.content, m.content_hash, m.tags, \
    m.metadata, m.importance, m.embedding, m.created_at, m.updated_at";

/// The same columns unqualified, for `RETURNING` (SQLite does not resolve the alias of
/// the updated table there).
const RETURNING: &str = "id, tenant_id, layer, agent_id, user_id, session_id, project_id, \
    team_id, org_id, company_id, content, content_hash, tags, metadata, importance, \
    embedding, created_at, updated_at";

/// The unique key of a memory's content: the conflict target of inserts.
const CONTENT_KEY: &str = "tenant_id, layer, agent_id, user_id, session_id, project_id, \
    team_id, org_id, company_id, content_hash";

/// `AND (<scope> OR <scope> …)`, each scope matching its layer and every scope column
/// exactly (the unused ones are `''`), so a layer's memories are reached only with the
/// full set of its ids.
fn scope_filter(st: &mut Statement, scopes: &[MemoryScope]) {
    st.push(" AND (");
    for (i, scope) in scopes.iter().enumerate() {
        if i > 0 {
            st.push(" OR ");
        }
        st.push("(m.layer = ").text(scope.layer().as_str());
        for (field, value) in ScopeField::ALL.into_iter().zip(scope.columns()) {
            st.push(" AND m.")
                .push(field.column())
                .push(" = ")
                .text(value);
        }
        st.push(")");
    }
    st.push(")");
}

/// Memories carrying every one of `tags`.
fn tags_filter(st: &mut Statement, tags: &[String]) {
    if tags.is_empty() {
        return;
    }
    match st.dialect {
        Dialect::Postgres => {
            // Array containment: the stored array holds every element of the bound one.
            let wanted = serde_json::Value::from(tags.to_vec()).to_string();
            st.push(" AND m.tags::jsonb @> ")
                .bind(Bind::Text(wanted))
                .push("::jsonb");
        }
        Dialect::Sqlite => {
            for tag in tags {
                st.push(" AND EXISTS (SELECT 1 FROM json_each(m.tags) t WHERE t.value = ")
                    .text(tag)
                    .push(")");
            }
        }
    }
}

/// A write's check of the turn's hold on its thread (cluster mode, Postgres only): the
/// node and token the turn holds (`store::fence::ThreadHold`), and the thread.
pub(crate) struct Gate<'a> {
    pub(crate) node: &'a str,
    pub(crate) token: i64,
    pub(crate) tenant: &'a str,
    pub(crate) thread: &'a str,
}

impl<'a> Gate<'a> {
    /// Node `node`'s check of `hold`, a turn of `tenant`'s.
    pub(crate) fn new(
        node: &'a str,
        tenant: &'a crate::domain::TenantId,
        hold: crate::store::fence::ThreadHold<'a>,
    ) -> Self {
        Gate {
            node,
            token: hold.token,
            tenant: tenant.as_str(),
            thread: hold.thread.as_str(),
        }
    }
}

/// `AND <the hold holds>`: a one-time filter Postgres evaluates before the write touches
/// a row, which reads the node's row under a KEY SHARE lock (kept until the write's
/// transaction ends, so a takeover waits for it) and fails the statement through
/// `a2a_require` with [`HOLD_LOST`] when the token moved, or with [`THREAD_ELSEWHERE`]
/// when another node owns the thread.
fn gate(st: &mut Statement, gate: Option<&Gate<'_>>) {
    let Some(gate) = gate else {
        return;
    };
    debug_assert_eq!(
        st.dialect,
        Dialect::Postgres,
        "cluster mode runs on Postgres"
    );
    st.push(
        " AND (SELECT true FROM (SELECT a2a_require(EXISTS (SELECT 1 FROM cluster_nodes \
         WHERE node_id = ",
    )
    .text(gate.node)
    .push(" AND token = ")
    .bind(Bind::BigInt(gate.token))
    .push(" FOR KEY SHARE), 'A2F01', ")
    .text(HOLD_LOST)
    .push("), a2a_require(NOT EXISTS (SELECT 1 FROM threads WHERE tenant_id = ")
    .text(gate.tenant)
    .push(" AND thread_id = ")
    .bind(Bind::Packed(gate.thread.to_owned()))
    .push(" AND owner_node <> ")
    .text(gate.node)
    .push("), 'A2F02', ")
    .text(THREAD_ELSEWHERE)
    .push(")) AS hold)");
}

/// A statement that writes nothing and fails as a write under `hold` would: what a tool
/// whose writes cannot join a statement (the knowledge skill's git commits) asks just
/// before it writes.
pub(crate) fn check_hold(hold: &Gate<'_>) -> Statement {
    let mut st = Statement::new(Dialect::Postgres, "SELECT 1 WHERE true");
    gate(&mut st, Some(hold));
    st
}

/// The row of a new memory, encoded for storage.
pub(crate) struct InsertRow<'a> {
    pub(crate) id: &'a str,
    pub(crate) tenant: &'a str,
    pub(crate) scope: &'a MemoryScope,
    pub(crate) content: &'a str,
    pub(crate) content_hash: &'a str,
    pub(crate) tags: String,
    pub(crate) metadata: String,
    pub(crate) importance: f64,
    pub(crate) embedding: Option<String>,
    pub(crate) at: i64,
}

/// Inserts the memory unless its content already exists in its scope; returns `id` when
/// inserted and no row when it was a duplicate. Under a `hold`, only while it holds.
pub(crate) fn insert(dialect: Dialect, row: InsertRow<'_>, hold: Option<&Gate<'_>>) -> Statement {
    let mut st = Statement::new(
        dialect,
        "INSERT INTO memories (id, tenant_id, layer, agent_id, user_id, session_id, \
         project_id, team_id, org_id, company_id, content, content_hash, tags, metadata, \
         importance, embedding, created_at, updated_at) ",
    );
    st.push(if hold.is_some() {
        "SELECT "
    } else {
        "VALUES ("
    });
    st.text(row.id)
        .push(", ")
        .text(row.tenant)
        .push(", ")
        .text(row.scope.layer().as_str());
    for value in row.scope.columns() {
        st.push(", ").text(value);
    }
    st.push(", ")
        .text(row.content)
        .push(", ")
        .text(row.content_hash)
        .push(", ")
        .bind(Bind::Text(row.tags))
        .push(", ")
        .bind(Bind::Text(row.metadata))
        .push(", ")
        .bind(Bind::Double(row.importance))
        .push(", ")
        .bind(Bind::NullableText(row.embedding))
        .push(", ")
        .bind(Bind::BigInt(row.at))
        .push(", ")
        .bind(Bind::BigInt(row.at));
    match hold {
        Some(_) => {
            st.push(" WHERE true");
            gate(&mut st, hold);
        }
        None => {
            st.push(")");
        }
    }
    st.push(" ON CONFLICT (")
        .push(CONTENT_KEY)
        .push(") DO NOTHING RETURNING id");
    st
}

/// The id of the memory of `scope` whose content hashes to `content_hash`.
pub(crate) fn find_by_hash(
    dialect: Dialect,
    tenant: &str,
    scope: &MemoryScope,
    content_hash: &str,
) -> Statement {
    let mut st = Statement::new(dialect, "SELECT m.id FROM memories m WHERE m.tenant_id = ");
    st.text(tenant);
    scope_filter(&mut st, std::slice::from_ref(scope));
    st.push(" AND m.content_hash = ").text(content_hash);
    st
}

/// `WHERE` for one memory of the tenant, reachable through one of `scopes`.
fn where_id(st: &mut Statement, tenant: &str, scopes: &[MemoryScope], id: &str) {
    st.push(" WHERE m.tenant_id = ")
        .text(tenant)
        .push(" AND m.id = ")
        .text(id);
    scope_filter(st, scopes);
}

/// One memory.
pub(crate) fn select(
    dialect: Dialect,
    tenant: &str,
    scopes: &[MemoryScope],
    id: &str,
) -> Statement {
    let mut st = Statement::new(dialect, "SELECT ");
    st.push(COLUMNS).push(" FROM memories m");
    where_id(&mut st, tenant, scopes, id);
    st
}

/// The new values of an update, encoded for storage; `None` keeps the stored value.
pub(crate) struct UpdateRow {
    /// New content with its hash and embedding (the old embedding describes the old
    /// content, so it is replaced even by `None`).
    pub(crate) content: Option<(String, String, Option<String>)>,
    pub(crate) tags: Option<String>,
    pub(crate) metadata: Option<String>,
    pub(crate) at: i64,
}

/// Updates one memory and returns it as stored.
pub(crate) fn update(
    dialect: Dialect,
    tenant: &str,
    scopes: &[MemoryScope],
    id: &str,
    row: UpdateRow,
    hold: Option<&Gate<'_>>,
) -> Statement {
    // Postgres and SQLite both accept an alias on the updated table.
    let mut st = Statement::new(dialect, "UPDATE memories AS m SET updated_at = ");
    st.bind(Bind::BigInt(row.at));
    if let Some((content, hash, embedding)) = row.content {
        st.push(", content = ")
            .bind(Bind::Text(content))
            .push(", content_hash = ")
            .bind(Bind::Text(hash))
            .push(", embedding = ")
            .bind(Bind::NullableText(embedding));
    }
    if let Some(tags) = row.tags {
        st.push(", tags = ").bind(Bind::Text(tags));
    }
    if let Some(metadata) = row.metadata {
        st.push(", metadata = ").bind(Bind::Text(metadata));
    }
    where_id(&mut st, tenant, scopes, id);
    gate(&mut st, hold);
    st.push(" RETURNING ").push(RETURNING);
    st
}

/// Moves one memory's importance by `delta`, clamped to [0, 1], in one statement (so
/// concurrent feedback is never lost); returns the new importance.
pub(crate) fn adjust_importance(
    dialect: Dialect,
    tenant: &str,
    scopes: &[MemoryScope],
    id: &str,
    delta: f64,
    hold: Option<&Gate<'_>>,
) -> Statement {
    let (lower, upper) = match dialect {
        Dialect::Postgres => ("GREATEST", "LEAST"),
        Dialect::Sqlite => ("MAX", "MIN"),
    };
    let mut st = Statement::new(dialect, "UPDATE memories AS m SET importance = ");
    st.push(upper)
        .push("(")
        .push(lower)
        .push("(m.importance + ")
        .bind(Bind::Double(delta))
        .push(", 0.0), 1.0)");
    where_id(&mut st, tenant, scopes, id);
    gate(&mut st, hold);
    st.push(" RETURNING importance");
    st
}

/// Deletes one memory.
pub(crate) fn delete(
    dialect: Dialect,
    tenant: &str,
    scopes: &[MemoryScope],
    id: &str,
    hold: Option<&Gate<'_>>,
) -> Statement {
    let mut st = Statement::new(dialect, "DELETE FROM memories AS m");
    where_id(&mut st, tenant, scopes, id);
    gate(&mut st, hold);
    st
}

/// Full-text candidates of one scope with a `score` in [0, 1), best first (ties: newest
/// first, then by id, so the order is total).
pub(crate) fn search_text(
    dialect: Dialect,
    tenant: &str,
    scope: &MemoryScope,
    query: &TextQuery,
    tags: &[String],
    max: usize,
) -> Statement {
    let mut st = Statement::new(dialect, "SELECT ");
    st.push(COLUMNS);
    match dialect {
        Dialect::Postgres => {
            // Normalisation 32 divides the rank by itself + 1: already in [0, 1).
            st.push(
                ", ts_rank_cd(m.content_tsv, q.query, 32)::float8 AS score \
                 FROM memories m, (SELECT ",
            );
            for (i, term) in query.terms().iter().enumerate() {
                if i > 0 {
                    st.push(" || ");
                }
                st.push("plainto_tsquery('simple', ").text(term).push(")");
            }
            st.push(") AS q(query) WHERE m.content_tsv @@ q.query");
        }
        Dialect::Sqlite => {
            // bm25() is negative, better matches more so: with s = -bm25 (≥ 0, as FTS5
            // floors every term's IDF at a small positive value), s / (s + 1) is in [0, 1).
            st.push(
                ", (-bm25(memories_fts)) / (1.0 - bm25(memories_fts)) AS score \
                 FROM memories_fts JOIN memories m ON m.doc_id = memories_fts.rowid \
                 WHERE memories_fts MATCH ",
            )
            .bind(Bind::Text(query.fts5_expression()));
        }
    }
    st.push(" AND m.tenant_id = ").text(tenant);
    scope_filter(&mut st, std::slice::from_ref(scope));
    tags_filter(&mut st, tags);
    st.push(" ORDER BY score DESC, m.updated_at DESC, m.id DESC");
    st.limit(max);
    st
}

/// The most recently updated memories of one scope that have an embedding.
pub(crate) fn scan_with_embeddings(
    dialect: Dialect,
    tenant: &str,
    scope: &MemoryScope,
    tags: &[String],
    max: usize,
) -> Statement {
    let mut st = Statement::new(dialect, "SELECT ");
    st.push(COLUMNS)
        .push(" FROM memories m WHERE m.embedding IS NOT NULL AND m.tenant_id = ")
        .text(tenant);
    scope_filter(&mut st, std::slice::from_ref(scope));
    tags_filter(&mut st, tags);
    st.push(" ORDER BY m.updated_at DESC, m.id DESC");
    st.limit(max);
    st
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memories::scope::{MemoryLayer, ScopeIds};

    fn user_scope() -> MemoryScope {
        MemoryScope::new(
            MemoryLayer::User,
            &ScopeIds::new().with(ScopeField::UserId, "u'1; DROP TABLE memories"),
        )
        .unwrap()
    }

    #[test]
    fn values_are_bound_never_formatted() {
        let query = TextQuery::parse("it's a \"test\"").unwrap();
        for dialect in [Dialect::Postgres, Dialect::Sqlite] {
            let tags = ["o'clock".to_owned()];
            let st = search_text(dialect, "t'1", &user_scope(), &query, &tags, 5);
            assert!(!st.sql.contains("DROP"), "{}", st.sql);
            assert!(!st.sql.contains("o'clock") && !st.sql.contains("t'1"));
            let placeholders = match dialect {
                Dialect::Postgres => st.sql.matches('$').count(),
                Dialect::Sqlite => st.sql.matches('?').count(),
            };
            assert_eq!(placeholders, st.binds.len());
        }
    }

    #[test]
    fn postgres_placeholders_are_numbered_in_bind_order() {
        let st = delete(Dialect::Postgres, "t1", &[user_scope()], "m1", None);
        assert!(
            st.sql
                .contains("m.tenant_id = $1 AND m.id = $2 AND ((m.layer = $3")
        );
        assert!(st.sql.ends_with("m.company_id = $10))"), "{}", st.sql);
        assert_eq!(st.binds.len(), 10);
        assert_eq!(st.binds[0], Bind::Text("t1".into()));
    }
}
