-- Memories (SQLite). Mirrors migrations/postgres/2026-11-22-000100_memories except for
-- full-text search (an FTS5 external-content table here, a tsvector there) and the
-- integer key below.
--
-- doc_id is an explicit INTEGER PRIMARY KEY (an alias of the rowid) because the FTS5
-- index refers to rows by rowid, and VACUUM may renumber the rowids of a table that has
-- no such column, which would silently detach the index from its rows. The memory's
-- public id is the UNIQUE `id`.
--
-- Scope columns hold '' (never NULL) when the layer is not keyed by them, so the unique
-- index treats them as equal (see the Postgres migration).

CREATE TABLE memories (
    doc_id       INTEGER PRIMARY KEY,
    id           TEXT    NOT NULL UNIQUE,
    tenant_id    TEXT    NOT NULL,
    layer        TEXT    NOT NULL
        CHECK (layer IN ('agent', 'user', 'session', 'project', 'team', 'org', 'company')),
    agent_id     TEXT    NOT NULL DEFAULT '',
    user_id      TEXT    NOT NULL DEFAULT '',
    session_id   TEXT    NOT NULL DEFAULT '',
    project_id   TEXT    NOT NULL DEFAULT '',
    team_id      TEXT    NOT NULL DEFAULT '',
    org_id       TEXT    NOT NULL DEFAULT '',
    company_id   TEXT    NOT NULL DEFAULT '',
    content      TEXT    NOT NULL,
    content_hash TEXT    NOT NULL,
    tags         TEXT    NOT NULL DEFAULT '[]',
    metadata     TEXT    NOT NULL DEFAULT '{}',
    importance   REAL    NOT NULL DEFAULT 0.5 CHECK (importance >= 0 AND importance <= 1),
    embedding    TEXT,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);

CREATE UNIQUE INDEX memories_unique_content ON memories
    (tenant_id, layer, agent_id, user_id, session_id, project_id, team_id, org_id, company_id, content_hash);

-- The default unicode61 tokenizer folds case and diacritics.
CREATE VIRTUAL TABLE memories_fts USING fts5(content, content = 'memories', content_rowid = 'doc_id');

CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, content) VALUES (new.doc_id, new.content);
END;

CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content) VALUES ('delete', old.doc_id, old.content);
END;

CREATE TRIGGER memories_fts_update AFTER UPDATE OF content ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content) VALUES ('delete', old.doc_id, old.content);
    INSERT INTO memories_fts (rowid, content) VALUES (new.doc_id, new.content);
END;
