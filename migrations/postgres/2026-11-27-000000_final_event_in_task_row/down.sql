-- Back to every event in the log: the final events kept in task rows are written out as
-- the release before logged them (the status without its message, which `message_seq`
-- names: the history entry `status_entry`).
INSERT INTO task_events (tenant_id, task_id, seq, kind, payload, created_at, message_seq)
SELECT tenant_id, task_id, final_event_seq, 'status_update',
    json_build_object('kind', 'status_update', 'task_id', task_id, 'context_id', context_id,
        'status', json_build_object('state', state, 'timestamp', status_timestamp),
        'metadata', NULL)::text,
    updated_at,
    CASE WHEN status_entry IS NULL THEN NULL
        ELSE split_part(history, ',', status_entry::int + 1)::bigint END
FROM tasks WHERE final_event_seq IS NOT NULL;
ALTER TABLE tasks DROP COLUMN final_event_seq;
