-- Each fact is stored once. A message is its row in `messages`, whole: the A2A fields it
-- lacked (extensions, referenced tasks) are columns now, and `content` is '' when it is
-- the text of the message's parts (every A2A message) instead of a second copy of it.
-- A task's status message is an entry of its history, so the task row names the entry
-- (`status_entry`) instead of copying the message; a logged status update names its
-- message in the thread (`message_seq`) and its payload leaves the message out; so does
-- an idempotency claim the reply of its turn (`reply_seq`).
ALTER TABLE messages ADD COLUMN extensions TEXT, ADD COLUMN reference_task_ids TEXT;
ALTER TABLE tasks ADD COLUMN status_entry BIGINT;
ALTER TABLE task_events ADD COLUMN message_seq BIGINT;
ALTER TABLE idempotency_keys ADD COLUMN reply_seq BIGINT;

-- The copies already stored become references wherever the message row says the same:
-- rows written before this release kept no extensions nor referenced tasks, so a status
-- message with either stays a copy.
UPDATE tasks SET status_entry = s.entry, status_message = NULL
FROM (
    SELECT t.tenant_id, t.task_id, max(h.n) - 1 AS entry
    FROM tasks AS t
    CROSS JOIN LATERAL unnest(string_to_array(t.history, ',')) WITH ORDINALITY AS h(seq, n)
    JOIN messages AS m
        ON m.tenant_id = t.tenant_id AND m.thread_id = t.context_id AND m.seq = h.seq::bigint
    WHERE t.status_message IS NOT NULL AND t.history <> ''
        AND m.message_id = t.status_message::jsonb ->> 'message_id'
        AND NOT t.status_message::jsonb ?| ARRAY['extensions', 'reference_task_ids']
    GROUP BY t.tenant_id, t.task_id
) AS s
WHERE tasks.tenant_id = s.tenant_id AND tasks.task_id = s.task_id;

UPDATE task_events
SET message_seq = m.seq, payload = (task_events.payload::jsonb #- '{status,message}')::text
FROM messages AS m
WHERE task_events.kind = 'status_update'
    AND m.tenant_id = task_events.tenant_id
    AND m.task_id = task_events.task_id
    AND m.thread_id = task_events.payload::jsonb ->> 'context_id'
    AND m.message_id = task_events.payload::jsonb #>> '{status,message,message_id}'
    AND NOT (task_events.payload::jsonb #> '{status,message}') ?| ARRAY['extensions', 'reference_task_ids'];

UPDATE idempotency_keys SET reply_seq = m.seq, reply = NULL
FROM messages AS m
WHERE idempotency_keys.reply IS NOT NULL
    AND m.tenant_id = idempotency_keys.tenant_id
    AND m.thread_id = idempotency_keys.context_id
    AND m.task_id IS NULL
    AND m.message_id = idempotency_keys.reply::jsonb ->> 'message_id'
    AND NOT idempotency_keys.reply::jsonb ?| ARRAY['extensions', 'reference_task_ids'];
