-- Push deliveries by the node that owns them (cluster mode, src/push/delivery.rs).
--
-- `node_id`: the node whose delivery loop makes the row's delivery — the node that
-- committed the event (its thread's owner, fenced like every commit of the thread), or
-- the node that took the row over once that node's lease expired
-- (src/store/cluster.rs `adopt_owed`). NULL outside cluster mode: a server that runs
-- alone delivers every row, and gives every row back to NULL when it opens the store.
-- Postgres only: SQLite serves one process.
ALTER TABLE push_outbox ADD COLUMN node_id TEXT;

-- Each node reads its own due rows in order; outside cluster mode, the rows without a
-- node. (Replaces the index on `next_attempt_at` alone.)
DROP INDEX push_outbox_due;
CREATE INDEX push_outbox_due ON push_outbox (node_id, next_attempt_at);
