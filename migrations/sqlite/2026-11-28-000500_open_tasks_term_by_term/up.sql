-- `tasks_open`'s condition as four comparisons instead of a list. SQLite evaluates a
-- partial index's WHERE on every insert and update of a row, and codes `NOT IN` a list of
-- more than two constants as a lookup in a temporary b-tree built for each run of the
-- statement: every task written built one (opened, filled, searched and closed again),
-- about 4 % of an echo send's instructions. The reload's query writes the same four
-- comparisons (`reads.rs` `IsOpen`): a planner uses a partial index only for a condition
-- that is the index's own.
DROP INDEX tasks_open;
CREATE INDEX tasks_open ON tasks (tenant_id, context_id, created_at, task_id)
    WHERE state <> 'completed' AND state <> 'canceled' AND state <> 'failed'
        AND state <> 'rejected';
