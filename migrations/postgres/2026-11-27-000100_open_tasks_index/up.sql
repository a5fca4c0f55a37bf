-- A thread's reload reads its open tasks: through `tasks_by_context` it read every task
-- the thread ever had, to keep the few not yet finished, so a reload cost grew with the
-- conversation's length. This index holds the open tasks only (a finished task leaves it),
-- in the order the reload reads them. Its WHERE is the text the reload's query writes
-- (`reads.rs` `NOT_TERMINAL`): a planner uses a partial index only for a condition that is
-- the index's own.
CREATE INDEX tasks_open ON tasks (tenant_id, context_id, created_at, task_id)
    WHERE state NOT IN ('completed', 'canceled', 'failed', 'rejected');
