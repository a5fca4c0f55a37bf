-- Push deliveries by the node that owns them (cluster mode, src/push/delivery.rs).
--
-- `node_id`: the node whose delivery loop makes the row's delivery — the node that
-- committed the event (its thread's owner, fenced like every commit of the thread), or
-- the node that took the row over once that node's lease expired
-- (src/store/cluster.rs `adopt_owed`). '' (no node) outside cluster mode: a server that
-- runs alone delivers every row, and makes every row one of no node when it opens the
-- store. Postgres only: SQLite serves one process. (A column with a constant default
-- rewrites nothing.)
ALTER TABLE push_outbox ADD COLUMN node_id TEXT NOT NULL DEFAULT '';

-- A cluster node's poll reads its own due rows, oldest first. Only rows of a node are
-- in it: a server without cluster mode pays nothing for it, and reads the due rows
-- through `push_outbox_due` as before.
CREATE INDEX push_outbox_owned ON push_outbox (node_id, next_attempt_at) WHERE node_id > '';
