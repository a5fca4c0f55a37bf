-- Initial schema (Postgres). Must stay column-for-column identical to
-- migrations/sqlite and src/store/schema.rs: JSON lives in TEXT, time in BIGINT epoch ms.

CREATE TABLE threads (
    tenant_id            TEXT   NOT NULL,
    thread_id            TEXT   NOT NULL,
    created_at           BIGINT NOT NULL,
    updated_at           BIGINT NOT NULL,
    expires_at           BIGINT NOT NULL,
    status               TEXT   NOT NULL CHECK (status IN ('active', 'expired')),
    conversation_context TEXT   NOT NULL,
    PRIMARY KEY (tenant_id, thread_id)
);

-- The janitor looks for active threads past their expiry across all tenants.
CREATE INDEX threads_by_expiry ON threads (status, expires_at);

CREATE TABLE messages (
    tenant_id  TEXT   NOT NULL,
    thread_id  TEXT   NOT NULL,
    seq        BIGINT NOT NULL,
    message_id TEXT,
    task_id    TEXT,
    role       TEXT   NOT NULL,
    author     TEXT,
    content    TEXT   NOT NULL,
    parts      TEXT   NOT NULL,
    tool_calls TEXT   NOT NULL,
    metadata   TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, thread_id, seq)
);

CREATE TABLE tasks (
    tenant_id        TEXT   NOT NULL,
    -- Byte-wise collation: ListTasks breaks timestamp ties by task id, and the keyset
    -- cursor must order ids exactly as SQLite (BINARY) does, whatever the server locale.
    task_id          TEXT   COLLATE "C" NOT NULL,
    context_id       TEXT   NOT NULL,
    state            TEXT   NOT NULL,
    status_message   TEXT,
    status_timestamp BIGINT NOT NULL,
    artifacts        TEXT   NOT NULL,
    transitions      TEXT   NOT NULL,
    metadata         TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, task_id)
);

CREATE INDEX tasks_by_status_time ON tasks (tenant_id, status_timestamp DESC, task_id DESC);
CREATE INDEX tasks_by_context ON tasks (tenant_id, context_id);

CREATE TABLE task_history (
    tenant_id   TEXT   NOT NULL,
    task_id     TEXT   NOT NULL,
    position    BIGINT NOT NULL,
    thread_id   TEXT   NOT NULL,
    message_seq BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, task_id, position)
);

CREATE TABLE task_events (
    tenant_id  TEXT   NOT NULL,
    task_id    TEXT   NOT NULL,
    seq        BIGINT NOT NULL,
    kind       TEXT   NOT NULL,
    payload    TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, task_id, seq)
);
