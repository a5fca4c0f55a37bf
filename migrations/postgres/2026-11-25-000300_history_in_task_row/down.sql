CREATE TABLE task_history (
    tenant_id   TEXT   NOT NULL,
    task_id     TEXT   NOT NULL,
    position    BIGINT NOT NULL,
    thread_id   TEXT   NOT NULL,
    message_seq BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, task_id, position)
);

INSERT INTO task_history (tenant_id, task_id, position, thread_id, message_seq)
SELECT t.tenant_id, t.task_id, h.n - 1, t.context_id, h.seq::bigint
FROM tasks AS t, unnest(string_to_array(t.history, ',')) WITH ORDINALITY AS h(seq, n)
WHERE t.history <> '';

ALTER TABLE tasks DROP COLUMN history;
