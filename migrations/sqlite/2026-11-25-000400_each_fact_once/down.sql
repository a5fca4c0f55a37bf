-- The copies an older release reads: each referenced message inlined again (as the
-- serde encoding of `domain::Message`), and every message's text in `content`.
UPDATE tasks SET status_message = (
    SELECT json_patch(json_object('message_id', m.message_id, 'context_id', m.thread_id,
            'task_id', tasks.task_id, 'role', m.role, 'parts', json(m.parts)),
        json_object('metadata', json(m.metadata), 'extensions', json(m.extensions),
            'reference_task_ids', json(m.reference_task_ids)))
    FROM json_each('[' || tasks.history || ']') AS h
    JOIN messages AS m
        ON m.tenant_id = tasks.tenant_id AND m.thread_id = tasks.context_id AND m.seq = h.value
    WHERE CAST(h.key AS INTEGER) = tasks.status_entry
)
WHERE status_entry IS NOT NULL;

UPDATE task_events SET payload = (
    SELECT json_set(task_events.payload, '$.status.message',
        json_patch(json_object('message_id', m.message_id, 'context_id', m.thread_id,
                'task_id', task_events.task_id, 'role', m.role, 'parts', json(m.parts)),
            json_object('metadata', json(m.metadata), 'extensions', json(m.extensions),
                'reference_task_ids', json(m.reference_task_ids))))
    FROM messages AS m
    WHERE m.tenant_id = task_events.tenant_id
        AND m.thread_id = json_extract(task_events.payload, '$.context_id')
        AND m.seq = task_events.message_seq
)
WHERE message_seq IS NOT NULL;

UPDATE idempotency_keys SET reply = (
    SELECT json_patch(json_object('message_id', m.message_id, 'context_id', m.thread_id,
            'role', m.role, 'parts', json(m.parts)),
        json_object('metadata', json(m.metadata), 'extensions', json(m.extensions),
            'reference_task_ids', json(m.reference_task_ids)))
    FROM messages AS m
    WHERE m.tenant_id = idempotency_keys.tenant_id
        AND m.thread_id = idempotency_keys.context_id
        AND m.seq = idempotency_keys.reply_seq
)
WHERE reply_seq IS NOT NULL;

UPDATE messages SET content = coalesce((
    SELECT group_concat(json_extract(p.value, '$.content.text'), char(10) ORDER BY p.key)
    FROM json_each(messages.parts) AS p
    WHERE json_type(p.value, '$.content.text') = 'text'
), '')
WHERE content = '' AND parts <> '[]';

ALTER TABLE idempotency_keys DROP COLUMN reply_seq;
ALTER TABLE task_events DROP COLUMN message_seq;
ALTER TABLE tasks DROP COLUMN status_entry;
ALTER TABLE messages DROP COLUMN reference_task_ids;
ALTER TABLE messages DROP COLUMN extensions;
