DROP INDEX tasks_by_status_time;
CREATE INDEX tasks_by_status_time ON tasks (tenant_id, status_timestamp DESC, task_id DESC);
