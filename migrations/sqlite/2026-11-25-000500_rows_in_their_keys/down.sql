-- The rowid tables of the release before.
CREATE TABLE threads_with_rowid (
    tenant_id            TEXT    NOT NULL,
    thread_id            TEXT    NOT NULL,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    expires_at           INTEGER NOT NULL,
    status               TEXT    NOT NULL CHECK (status IN ('active', 'expired')),
    conversation_context TEXT    NOT NULL,
    owner_node           TEXT,
    PRIMARY KEY (tenant_id, thread_id)
);
INSERT INTO threads_with_rowid (tenant_id, thread_id, created_at, updated_at, expires_at, status,
    conversation_context, owner_node)
SELECT tenant_id, thread_id, created_at, updated_at, expires_at, status,
    conversation_context, owner_node
FROM threads;
DROP TABLE threads;
ALTER TABLE threads_with_rowid RENAME TO threads;
CREATE INDEX threads_by_expiry ON threads (status, expires_at);

CREATE TABLE messages_with_rowid (
    tenant_id          TEXT    NOT NULL,
    thread_id          TEXT    NOT NULL,
    seq                INTEGER NOT NULL,
    message_id         TEXT,
    task_id            TEXT,
    role               TEXT    NOT NULL,
    author             TEXT,
    content            TEXT    NOT NULL,
    parts              TEXT    NOT NULL,
    tool_calls         TEXT    NOT NULL,
    metadata           TEXT,
    created_at         INTEGER NOT NULL,
    extensions         TEXT,
    reference_task_ids TEXT,
    PRIMARY KEY (tenant_id, thread_id, seq)
);
INSERT INTO messages_with_rowid (tenant_id, thread_id, seq, message_id, task_id, role, author,
    content, parts, tool_calls, metadata, created_at, extensions, reference_task_ids)
SELECT tenant_id, thread_id, seq, message_id, task_id, role, author,
    content, parts, tool_calls, metadata, created_at, extensions, reference_task_ids
FROM messages;
DROP TABLE messages;
ALTER TABLE messages_with_rowid RENAME TO messages;

CREATE TABLE task_events_with_rowid (
    tenant_id   TEXT    NOT NULL,
    task_id     TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    kind        TEXT    NOT NULL,
    payload     TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    message_seq INTEGER,
    PRIMARY KEY (tenant_id, task_id, seq)
);
INSERT INTO task_events_with_rowid (tenant_id, task_id, seq, kind, payload, created_at,
    message_seq)
SELECT tenant_id, task_id, seq, kind, payload, created_at, message_seq
FROM task_events;
DROP TABLE task_events;
ALTER TABLE task_events_with_rowid RENAME TO task_events;
