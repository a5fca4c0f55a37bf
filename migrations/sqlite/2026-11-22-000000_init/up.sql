-- Initial schema (SQLite). Must stay column-for-column identical to
-- migrations/postgres and src/store/schema.rs: JSON lives in TEXT, time in INTEGER (64-bit) epoch ms.

CREATE TABLE threads (
    tenant_id            TEXT   NOT NULL,
    thread_id            TEXT   NOT NULL,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    expires_at           INTEGER NOT NULL,
    status               TEXT   NOT NULL CHECK (status IN ('active', 'expired')),
    conversation_context TEXT   NOT NULL,
    PRIMARY KEY (tenant_id, thread_id)
);

-- The janitor looks for active threads past their expiry across all tenants.
CREATE INDEX threads_by_expiry ON threads (status, expires_at);

CREATE TABLE messages (
    tenant_id  TEXT   NOT NULL,
    thread_id  TEXT   NOT NULL,
    seq        INTEGER NOT NULL,
    message_id TEXT,
    task_id    TEXT,
    role       TEXT   NOT NULL,
    author     TEXT,
    content    TEXT   NOT NULL,
    parts      TEXT   NOT NULL,
    tool_calls TEXT   NOT NULL,
    metadata   TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, thread_id, seq)
);

CREATE TABLE tasks (
    tenant_id        TEXT   NOT NULL,
    -- SQLite's default BINARY collation orders ids byte-wise, as Postgres' COLLATE "C"
    -- does: ListTasks breaks timestamp ties by task id the same way on both backends.
    task_id          TEXT   NOT NULL,
    context_id       TEXT   NOT NULL,
    state            TEXT   NOT NULL,
    status_message   TEXT,
    status_timestamp INTEGER NOT NULL,
    artifacts        TEXT   NOT NULL,
    transitions      TEXT   NOT NULL,
    metadata         TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, task_id)
);

CREATE INDEX tasks_by_status_time ON tasks (tenant_id, status_timestamp DESC, task_id DESC);
CREATE INDEX tasks_by_context ON tasks (tenant_id, context_id);

CREATE TABLE task_history (
    tenant_id   TEXT   NOT NULL,
    task_id     TEXT   NOT NULL,
    position    INTEGER NOT NULL,
    thread_id   TEXT   NOT NULL,
    message_seq INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, task_id, position)
);

CREATE TABLE task_events (
    tenant_id  TEXT   NOT NULL,
    task_id    TEXT   NOT NULL,
    seq        INTEGER NOT NULL,
    kind       TEXT   NOT NULL,
    payload    TEXT   NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, task_id, seq)
);
