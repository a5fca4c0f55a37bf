-- Memories (Postgres). Mirrors migrations/sqlite/2026-11-22-000100_memories except for
-- full-text search: here a generated tsvector with a GIN index, there an FTS5 table.
--
-- Scope columns hold '' (never NULL) when the layer is not keyed by them: a memory of the
-- `user` layer has user_id set and the other six ''. NULLs would be distinct from each
-- other in the unique index, so duplicates could be stored twice; '' compares equal and
-- keeps the index usable as is by ON CONFLICT and by the scope filters. Scope ids are
-- validated non-empty, so '' never collides with a real id.

CREATE TABLE memories (
    id           TEXT             PRIMARY KEY,
    tenant_id    TEXT             NOT NULL,
    layer        TEXT             NOT NULL
        CHECK (layer IN ('agent', 'user', 'session', 'project', 'team', 'org', 'company')),
    agent_id     TEXT             NOT NULL DEFAULT '',
    user_id      TEXT             NOT NULL DEFAULT '',
    session_id   TEXT             NOT NULL DEFAULT '',
    project_id   TEXT             NOT NULL DEFAULT '',
    team_id      TEXT             NOT NULL DEFAULT '',
    org_id       TEXT             NOT NULL DEFAULT '',
    company_id   TEXT             NOT NULL DEFAULT '',
    content      TEXT             NOT NULL,
    -- hex SHA-256 of content
    content_hash TEXT             NOT NULL,
    -- JSON array of strings
    tags         TEXT             NOT NULL DEFAULT '[]',
    -- JSON object
    metadata     TEXT             NOT NULL DEFAULT '{}',
    importance   DOUBLE PRECISION NOT NULL DEFAULT 0.5 CHECK (importance >= 0 AND importance <= 1),
    -- JSON array of numbers, or NULL when no embeddings service is configured (or it failed)
    embedding    TEXT,
    created_at   BIGINT           NOT NULL,
    updated_at   BIGINT           NOT NULL,
    -- 'simple': no stemming and no stop words, so any language is matched word for word.
    content_tsv  tsvector         GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED
);

-- One memory per content per scope; its prefix (tenant, layer, scope ids) also serves
-- every scoped lookup.
CREATE UNIQUE INDEX memories_unique_content ON memories
    (tenant_id, layer, agent_id, user_id, session_id, project_id, team_id, org_id, company_id, content_hash);

CREATE INDEX memories_fts ON memories USING GIN (content_tsv);
