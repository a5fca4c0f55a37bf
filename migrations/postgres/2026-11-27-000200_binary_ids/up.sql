-- Ids as bytes: a canonical UUID (lowercase, hyphenated: every id this server mints and
-- most that clients send) is stored as its 16 bytes instead of 37 bytes of text, in each
-- row and each index entry that holds it, and a SHA-256 digest in lowercase hex (the
-- idempotency claims' `digest`) as its 32 bytes; any other text as its UTF-8 bytes (text
-- of exactly 16 or 32 bytes gets a 0xFF byte after them, which UTF-8 never holds, so a
-- value of 16 or 32 bytes is always a packed one). `src/store/packed.rs` encodes and
-- decodes; these functions do the same in SQL, for this migration and for operators
-- reading the tables with psql:
--   SELECT a2a_id_text(task_id), state FROM tasks WHERE task_id = a2a_id('…');

CREATE FUNCTION a2a_id(id text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE
        WHEN id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
            THEN decode(replace(id, '-', ''), 'hex')
        WHEN id ~ '^[0-9a-f]{64}$' THEN decode(id, 'hex')
        WHEN octet_length(id) IN (16, 32) THEN convert_to(id, 'UTF8') || '\xff'::bytea
        ELSE convert_to(id, 'UTF8')
    END
$$;

CREATE FUNCTION a2a_id_text(id bytea) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE
        WHEN length(id) = 16 THEN regexp_replace(encode(id, 'hex'),
            '^(.{8})(.{4})(.{4})(.{4})(.{12})$', '\1-\2-\3-\4-\5')
        WHEN length(id) = 32 THEN encode(id, 'hex')
        WHEN length(id) IN (17, 33) AND get_byte(id, length(id) - 1) = 255
            THEN convert_from(substring(id FROM 1 FOR length(id) - 1), 'UTF8')
        ELSE convert_from(id, 'UTF8')
    END
$$;

-- Each table is rewritten once, its indexes rebuilt.
ALTER TABLE threads ALTER COLUMN thread_id TYPE bytea USING a2a_id(thread_id);
ALTER TABLE messages
    ALTER COLUMN thread_id TYPE bytea USING a2a_id(thread_id),
    ALTER COLUMN message_id TYPE bytea USING a2a_id(message_id),
    ALTER COLUMN task_id TYPE bytea USING a2a_id(task_id);
-- Ascending: a new task's status time is the newest, so its entry lands at the right
-- edge, where a full page splits 90/10; in a descending index it landed at the left edge,
-- where pages split in halves and the index grew twice as large. ListTasks (newest first)
-- reads it backwards.
DROP INDEX tasks_by_status_time;
ALTER TABLE tasks
    ALTER COLUMN task_id TYPE bytea USING a2a_id(task_id),
    ALTER COLUMN context_id TYPE bytea USING a2a_id(context_id);
CREATE INDEX tasks_by_status_time ON tasks (tenant_id, status_timestamp, task_id);
ALTER TABLE task_events ALTER COLUMN task_id TYPE bytea USING a2a_id(task_id);
ALTER TABLE push_configs ALTER COLUMN task_id TYPE bytea USING a2a_id(task_id);
ALTER TABLE push_outbox ALTER COLUMN task_id TYPE bytea USING a2a_id(task_id);
ALTER TABLE idempotency_keys
    ALTER COLUMN idem_key TYPE bytea USING a2a_id(idem_key),
    ALTER COLUMN context_id TYPE bytea USING a2a_id(context_id),
    ALTER COLUMN task_id TYPE bytea USING a2a_id(task_id),
    ALTER COLUMN digest TYPE bytea USING a2a_id(digest);

-- Keys that only grow at their right edge (ids minted in time order, times) fill their
-- pages: a page split there leaves the left page full rather than 90 % full. Rows are
-- never updated in these keys, so nothing needs the room.
ALTER INDEX threads_pkey SET (fillfactor = 100);
ALTER INDEX messages_pkey SET (fillfactor = 100);
ALTER INDEX tasks_pkey SET (fillfactor = 100);
ALTER INDEX tasks_by_context SET (fillfactor = 100);
ALTER INDEX tasks_by_status_time SET (fillfactor = 100);
ALTER INDEX task_events_pkey SET (fillfactor = 100);
