DROP INDEX tasks_open;
CREATE INDEX tasks_open ON tasks (tenant_id, context_id, created_at, task_id)
    WHERE state NOT IN ('completed', 'canceled', 'failed', 'rejected');
