-- Idempotency claims in the order they are made, their keys indexed apart in sorted runs.
-- A claim is keyed by the client's message id, which clients draw at random (UUIDv4): as
-- the primary key of a WITHOUT ROWID table, every claim landed on a leaf of its own, one
-- more page written to the WAL (and copied by the checkpoint) per send — a quarter of a
-- send's cost, growing with the table. Now a claim is a row appended at the end of the log
-- (its `id`, given by the writer, never reused), and the index from key to claim
-- (`idempotency_key_index`: a 64-bit hash of tenant and key, then the claim's id) is
-- written by the writer a range of keys at a time, sorted, from the claims it holds in
-- memory meanwhile (`store/sqlite_claims.rs`). `idempotency_index_state` says from which
-- id on claims may still lack their index entries: the writer indexes them when it opens.
-- Migrated claims are all past it, so the first start indexes them.
CREATE TABLE idempotency_log (
    id         INTEGER PRIMARY KEY,
    tenant_id  TEXT    NOT NULL,
    idem_key   TEXT    NOT NULL,
    context_id TEXT    NOT NULL,
    task_id    TEXT    NOT NULL,
    digest     TEXT    NOT NULL,
    reply      TEXT,
    created_at INTEGER NOT NULL,
    reply_seq  INTEGER
);
INSERT INTO idempotency_log (tenant_id, idem_key, context_id, task_id, digest, reply,
    created_at, reply_seq)
SELECT tenant_id, idem_key, context_id, task_id, digest, reply, created_at, reply_seq
FROM idempotency_keys ORDER BY created_at;
DROP TABLE idempotency_keys;
ALTER TABLE idempotency_log RENAME TO idempotency_keys;
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);

CREATE TABLE idempotency_key_index (
    key_hash INTEGER NOT NULL,
    id       INTEGER NOT NULL,
    PRIMARY KEY (key_hash, id)
) WITHOUT ROWID;

CREATE TABLE idempotency_index_state (
    one            INTEGER PRIMARY KEY CHECK (one = 1),
    unindexed_from INTEGER NOT NULL
);
INSERT INTO idempotency_index_state (one, unindexed_from) VALUES (1, 0);
