-- The push outbox's poll (src/store/reads.rs `due_deliveries_sql`): the earliest owed
-- row of each config whose time has come, oldest first, at most `max_rows`.
--
-- As functions whose plan cannot read more than it returns, whatever the statistics
-- say. The outbox churns (every row is inserted and deleted within moments), so it is
-- often analyzed while it holds few live rows among many dead ones; from such
-- statistics Postgres expected a row or two, and planned the inline poll as a sort of
-- every due row, each checked against its config's earlier rows by a scan of the whole
-- primary key (seconds a poll at a few thousand owed; benches/README.md, "The outbox's
-- poll, planned the same whatever the statistics"). Here: no sequential or bitmap scan
-- and no sort, so the due rows come from the due index in its order and the scan stops
-- at the limit; each row's config's earliest owed `seq` is a subquery run with the
-- row's key (never turned into a join), so it reads that config's first key. Oldest
-- first by `next_attempt_at`; rows due at the same millisecond come in any order (each
-- config's own order is its `seq`, kept by the subquery). The settings hold only while
-- the function runs. STABLE: the caller's snapshot.
CREATE FUNCTION a2a_due_deliveries(due_at BIGINT, max_rows BIGINT)
RETURNS SETOF push_outbox
LANGUAGE sql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
AS $$
    SELECT * FROM push_outbox d
    WHERE d.next_attempt_at <= due_at
    AND d.seq = (SELECT p.seq FROM push_outbox p
        WHERE p.tenant_id = d.tenant_id AND p.task_id = d.task_id
        AND p.config_id = d.config_id ORDER BY p.seq LIMIT 1)
    ORDER BY d.next_attempt_at
    LIMIT max_rows
$$;

-- The same for a cluster node: the rows it owns, through `push_outbox_owned` (whose
-- condition is written out for the planner to use it).
CREATE FUNCTION a2a_owned_due_deliveries(due_at BIGINT, max_rows BIGINT, node TEXT)
RETURNS SETOF push_outbox
LANGUAGE sql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
AS $$
    SELECT * FROM push_outbox d
    WHERE d.node_id > '' AND d.node_id = node AND d.next_attempt_at <= due_at
    AND d.seq = (SELECT p.seq FROM push_outbox p
        WHERE p.tenant_id = d.tenant_id AND p.task_id = d.task_id
        AND p.config_id = d.config_id ORDER BY p.seq LIMIT 1)
    ORDER BY d.next_attempt_at
    LIMIT max_rows
$$;
