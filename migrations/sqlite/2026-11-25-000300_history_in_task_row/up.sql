-- A task's history is the list of its messages' sequence numbers in its thread, kept in
-- the task's row (comma-separated, oldest first; '' when empty) instead of one
-- task_history row per entry: a turn that appends two messages to a task rewrote the
-- task's row anyway, and wrote two more rows and two index entries besides.
ALTER TABLE tasks ADD COLUMN history TEXT NOT NULL DEFAULT '';

UPDATE tasks SET history = COALESCE((
    SELECT group_concat(h.message_seq, ',' ORDER BY h.position)
    FROM task_history AS h
    WHERE h.tenant_id = tasks.tenant_id AND h.task_id = tasks.task_id
), '');

DROP TABLE task_history;
