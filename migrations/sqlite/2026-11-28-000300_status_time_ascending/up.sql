-- `ListTasks` reads tasks newest first. Under a descending index a new task's entry went to
-- the index's left edge, where a full page splits in halves that then only the next few
-- entries of the same millisecond fill: the index held ~120 bytes per task for ~56 of
-- entries (half its pages empty). Ascending, a new entry lands at the right edge, where
-- SQLite starts a new page when the last is full; the list query scans it backwards
-- (`EXPLAIN QUERY PLAN`: the same index, no sort). Postgres made the same change in
-- `…_binary_ids`. Rebuilding the index reads every task once, at the first start.
DROP INDEX tasks_by_status_time;
CREATE INDEX tasks_by_status_time ON tasks (tenant_id, status_timestamp, task_id);
