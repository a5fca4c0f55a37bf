-- A task's history is the list of its messages' sequence numbers in its thread, kept in
-- the task's row (comma-separated, oldest first; '' when empty) instead of one
-- task_history row per entry: a turn that appends two messages to a task rewrote the
-- task's row anyway, and wrote two more rows and two index entries besides.
ALTER TABLE tasks ADD COLUMN history TEXT NOT NULL DEFAULT '';

UPDATE tasks SET history = h.seqs
FROM (
    SELECT tenant_id, task_id, string_agg(message_seq::text, ',' ORDER BY position) AS seqs
    FROM task_history
    GROUP BY tenant_id, task_id
) AS h
WHERE tasks.tenant_id = h.tenant_id AND tasks.task_id = h.task_id;

DROP TABLE task_history;
