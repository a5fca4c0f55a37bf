-- The copies an older release reads: each referenced message inlined again (as the
-- serde encoding of `domain::Message`), and every message's text in `content`.
CREATE FUNCTION pg_temp.a2a_message(m messages, task TEXT) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object('message_id', m.message_id, 'context_id', m.thread_id,
        'task_id', task, 'role', m.role, 'parts', m.parts::jsonb)
        || CASE WHEN m.metadata IS NULL THEN '{}'::jsonb
           ELSE jsonb_build_object('metadata', m.metadata::jsonb) END
        || CASE WHEN m.extensions IS NULL THEN '{}'::jsonb
           ELSE jsonb_build_object('extensions', m.extensions::jsonb) END
        || CASE WHEN m.reference_task_ids IS NULL THEN '{}'::jsonb
           ELSE jsonb_build_object('reference_task_ids', m.reference_task_ids::jsonb) END
$$;

UPDATE tasks SET status_message = pg_temp.a2a_message(m, tasks.task_id)::text
FROM messages AS m
WHERE tasks.status_entry IS NOT NULL
    AND m.tenant_id = tasks.tenant_id AND m.thread_id = tasks.context_id
    AND m.seq = (string_to_array(tasks.history, ','))[tasks.status_entry + 1]::bigint;

UPDATE task_events
SET payload = jsonb_set(task_events.payload::jsonb, '{status,message}',
    pg_temp.a2a_message(m, task_events.task_id))::text
FROM messages AS m
WHERE task_events.message_seq IS NOT NULL
    AND m.tenant_id = task_events.tenant_id
    AND m.thread_id = task_events.payload::jsonb ->> 'context_id'
    AND m.seq = task_events.message_seq;

UPDATE idempotency_keys
SET reply = (pg_temp.a2a_message(m, NULL) - 'task_id')::text
FROM messages AS m
WHERE idempotency_keys.reply_seq IS NOT NULL
    AND m.tenant_id = idempotency_keys.tenant_id
    AND m.thread_id = idempotency_keys.context_id
    AND m.seq = idempotency_keys.reply_seq;

UPDATE messages SET content = coalesce((
    SELECT string_agg(p.v #>> '{content,text}', E'\n' ORDER BY p.n)
    FROM jsonb_array_elements(messages.parts::jsonb) WITH ORDINALITY AS p(v, n)
    WHERE p.v -> 'content' ? 'text'
), '')
WHERE content = '' AND parts <> '[]';

ALTER TABLE idempotency_keys DROP COLUMN reply_seq;
ALTER TABLE task_events DROP COLUMN message_seq;
ALTER TABLE tasks DROP COLUMN status_entry;
ALTER TABLE messages DROP COLUMN extensions, DROP COLUMN reference_task_ids;
