-- Cluster mode (src/cluster, src/store/cluster.rs; SQLite serves one process and only
-- gets the column, so that both schemas stay column-for-column identical).

-- The node that serves a thread: it writes the column with every upsert of the thread,
-- which the upsert refuses when another node owns the thread. NULL: no node claimed it
-- (a thread from before cluster mode, or SQLite).
ALTER TABLE threads ADD COLUMN owner_node TEXT;

-- One row per node that ever joined (read and written with plain SQL, not through the
-- shared diesel schema). A node holds its lease while `expires_at` (epoch ms of the
-- database's clock) is ahead. `token` is the fencing token: every commit of the node
-- checks it under a KEY SHARE lock, and a node taking over a dead node's thread raises
-- the dead node's token first (under an exclusive row lock, which waits for the dead
-- node's commits in flight), so nothing it writes afterwards is accepted. Rows are never
-- deleted: a token must never be handed out twice for one id. `swept_started_at`: the
-- `started_at` of the incarnation whose threads the leader has looked through after it
-- died, for tasks it left working (once per death: the look scans the threads).
CREATE TABLE cluster_nodes (
    node_id          TEXT   PRIMARY KEY,
    token            BIGINT NOT NULL,
    url              TEXT   NOT NULL,
    started_at       BIGINT NOT NULL,
    expires_at       BIGINT NOT NULL,
    swept_started_at BIGINT NOT NULL DEFAULT 0
);
