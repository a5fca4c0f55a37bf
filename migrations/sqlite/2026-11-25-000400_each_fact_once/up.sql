-- Each fact is stored once. A message is its row in `messages`, whole: the A2A fields it
-- lacked (extensions, referenced tasks) are columns now, and `content` is '' when it is
-- the text of the message's parts (every A2A message) instead of a second copy of it.
-- A task's status message is an entry of its history, so the task row names the entry
-- (`status_entry`) instead of copying the message; a logged status update names its
-- message in the thread (`message_seq`) and its payload leaves the message out; so does
-- an idempotency claim the reply of its turn (`reply_seq`).
ALTER TABLE messages ADD COLUMN extensions TEXT;
ALTER TABLE messages ADD COLUMN reference_task_ids TEXT;
ALTER TABLE tasks ADD COLUMN status_entry INTEGER;
ALTER TABLE task_events ADD COLUMN message_seq INTEGER;
ALTER TABLE idempotency_keys ADD COLUMN reply_seq INTEGER;

-- The copies already stored become references wherever the message row says the same:
-- rows written before this release kept no extensions nor referenced tasks, so a status
-- message with either stays a copy.
UPDATE tasks SET status_entry = (
    SELECT max(CAST(h.key AS INTEGER))
    FROM json_each('[' || tasks.history || ']') AS h
    JOIN messages AS m
        ON m.tenant_id = tasks.tenant_id AND m.thread_id = tasks.context_id AND m.seq = h.value
    WHERE m.message_id = json_extract(tasks.status_message, '$.message_id')
)
WHERE status_message IS NOT NULL AND history <> ''
    AND json_type(status_message, '$.extensions') IS NULL
    AND json_type(status_message, '$.reference_task_ids') IS NULL;
UPDATE tasks SET status_message = NULL WHERE status_entry IS NOT NULL;

UPDATE task_events SET message_seq = (
    SELECT m.seq FROM messages AS m
    WHERE m.tenant_id = task_events.tenant_id
        AND m.task_id = task_events.task_id
        AND m.thread_id = json_extract(task_events.payload, '$.context_id')
        AND m.message_id = json_extract(task_events.payload, '$.status.message.message_id')
)
WHERE kind = 'status_update'
    AND json_type(payload, '$.status.message') = 'object'
    AND json_type(payload, '$.status.message.extensions') IS NULL
    AND json_type(payload, '$.status.message.reference_task_ids') IS NULL;
UPDATE task_events SET payload = json_remove(payload, '$.status.message')
WHERE message_seq IS NOT NULL;

UPDATE idempotency_keys SET reply_seq = (
    SELECT m.seq FROM messages AS m
    WHERE m.tenant_id = idempotency_keys.tenant_id
        AND m.thread_id = idempotency_keys.context_id
        AND m.task_id IS NULL
        AND m.message_id = json_extract(idempotency_keys.reply, '$.message_id')
)
WHERE reply IS NOT NULL
    AND json_type(reply, '$.extensions') IS NULL
    AND json_type(reply, '$.reference_task_ids') IS NULL;
UPDATE idempotency_keys SET reply = NULL WHERE reply_seq IS NOT NULL;
