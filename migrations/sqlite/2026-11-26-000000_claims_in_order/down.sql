-- Back to one row per key under its primary key: the newest claim of each key.
CREATE TABLE idempotency_by_key (
    tenant_id  TEXT    NOT NULL,
    idem_key   TEXT    NOT NULL,
    context_id TEXT    NOT NULL,
    task_id    TEXT    NOT NULL,
    digest     TEXT    NOT NULL,
    reply      TEXT,
    created_at INTEGER NOT NULL,
    reply_seq  INTEGER,
    PRIMARY KEY (tenant_id, idem_key)
) WITHOUT ROWID;
INSERT OR REPLACE INTO idempotency_by_key (tenant_id, idem_key, context_id, task_id, digest,
    reply, created_at, reply_seq)
SELECT tenant_id, idem_key, context_id, task_id, digest, reply, created_at, reply_seq
FROM idempotency_keys ORDER BY id;
DROP TABLE idempotency_index_state;
DROP TABLE idempotency_key_index;
DROP TABLE idempotency_keys;
ALTER TABLE idempotency_by_key RENAME TO idempotency_keys;
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);
