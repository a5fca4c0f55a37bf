ALTER INDEX threads_pkey RESET (fillfactor);
ALTER INDEX messages_pkey RESET (fillfactor);
ALTER INDEX tasks_pkey RESET (fillfactor);
ALTER INDEX tasks_by_context RESET (fillfactor);
ALTER INDEX task_events_pkey RESET (fillfactor);
ALTER TABLE threads ALTER COLUMN thread_id TYPE text USING a2a_id_text(thread_id);
ALTER TABLE messages
    ALTER COLUMN thread_id TYPE text USING a2a_id_text(thread_id),
    ALTER COLUMN message_id TYPE text USING a2a_id_text(message_id),
    ALTER COLUMN task_id TYPE text USING a2a_id_text(task_id);
DROP INDEX tasks_by_status_time;
ALTER TABLE tasks
    ALTER COLUMN task_id TYPE text COLLATE "C" USING a2a_id_text(task_id),
    ALTER COLUMN context_id TYPE text USING a2a_id_text(context_id);
CREATE INDEX tasks_by_status_time ON tasks (tenant_id, status_timestamp DESC, task_id DESC);
ALTER TABLE task_events ALTER COLUMN task_id TYPE text USING a2a_id_text(task_id);
ALTER TABLE push_configs ALTER COLUMN task_id TYPE text USING a2a_id_text(task_id);
ALTER TABLE push_outbox ALTER COLUMN task_id TYPE text USING a2a_id_text(task_id);
ALTER TABLE idempotency_keys
    ALTER COLUMN idem_key TYPE text USING a2a_id_text(idem_key),
    ALTER COLUMN context_id TYPE text USING a2a_id_text(context_id),
    ALTER COLUMN task_id TYPE text USING a2a_id_text(task_id),
    ALTER COLUMN digest TYPE text USING a2a_id_text(digest);
DROP FUNCTION a2a_id_text(bytea);
DROP FUNCTION a2a_id(text);
