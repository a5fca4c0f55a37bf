CREATE TABLE task_history (
    tenant_id   TEXT   NOT NULL,
    task_id     TEXT   NOT NULL,
    position    INTEGER NOT NULL,
    thread_id   TEXT   NOT NULL,
    message_seq INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, task_id, position)
);

INSERT INTO task_history (tenant_id, task_id, position, thread_id, message_seq)
SELECT t.tenant_id, t.task_id, CAST(j.key AS INTEGER), t.context_id, j.value
FROM tasks AS t, json_each('[' || t.history || ']') AS j
WHERE t.history <> '';

ALTER TABLE tasks DROP COLUMN history;
