-- Idempotent sends: the first message accepted under a key (its messageId, or the
-- Idempotency-Key header) per tenant, written in the same transaction as the message.
-- The primary key is what refuses a second claim of the same key; a claim older than
-- idempotency.window_secs may be taken over. Must stay column-for-column identical to
-- migrations/postgres and src/store/schema.rs.

CREATE TABLE idempotency_keys (
    tenant_id  TEXT    NOT NULL,
    idem_key   TEXT    NOT NULL,
    context_id TEXT    NOT NULL,
    task_id    TEXT    NOT NULL,
    -- SHA-256 (hex) of the message as sent and the request metadata.
    digest     TEXT    NOT NULL,
    -- JSON `domain::Message`: the agent's reply when the turn answered without a task.
    reply      TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, idem_key)
) WITHOUT ROWID; -- one B-tree keyed by the claim, not a rowid table plus its key's index


-- The janitor forgets claims past the window, oldest first.
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);
