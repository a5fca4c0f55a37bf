-- A task's final status update is its row. The event that ends a task (a terminal status,
-- no metadata of its own) says nothing the task's row does not: its state, timestamp and
-- message are the row's status. Such an event is no longer written to `task_events`; the
-- row names its place in the log (`final_event_seq`) and reads build it from the row.
-- Rows written before keep their final events in the log (`final_event_seq` NULL).
ALTER TABLE tasks ADD COLUMN final_event_seq INTEGER;
