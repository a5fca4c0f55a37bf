-- Cluster mode (Postgres only; SQLite serves one process): the nodes sharing this
-- database and the thread each one serves. Read and written with plain SQL by
-- src/store/cluster.rs, not through the shared diesel schema.

-- One row per node that ever joined. A node holds its lease while `expires_at` (epoch ms
-- of the database's clock) is ahead. `token` is the fencing token: every commit of the
-- node checks it under a KEY SHARE lock, and a node taking over a dead node's thread
-- raises the dead node's token first (under an exclusive row lock, which waits for the
-- dead node's commits in flight), so nothing it writes afterwards is accepted.
CREATE TABLE cluster_nodes (
    node_id    TEXT   PRIMARY KEY,
    token      BIGINT NOT NULL,
    url        TEXT   NOT NULL,
    started_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);

-- The node that serves a thread: it wrote the thread's last changes and is the only one
-- that may write it while its lease holds.
CREATE TABLE thread_owners (
    tenant_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    node_id   TEXT NOT NULL,
    PRIMARY KEY (tenant_id, thread_id)
);

-- The recovery sweep finds the threads of dead nodes.
CREATE INDEX thread_owners_by_node ON thread_owners (node_id);
