-- Push notifications: the configs registered per task, and the durable outbox of
-- deliveries, written in the same transaction as the task event each row delivers.
-- Must stay column-for-column identical to migrations/sqlite and src/store/schema.rs.

CREATE TABLE push_configs (
    tenant_id        TEXT    NOT NULL,
    task_id          TEXT    NOT NULL,
    config_id        TEXT    NOT NULL,
    -- Which payload the receiver gets: 'v1' (StreamResponse) or 'v03' (Task).
    dialect          TEXT    NOT NULL CHECK (dialect IN ('v1', 'v03')),
    url              TEXT    NOT NULL,
    token            TEXT,
    auth_scheme      TEXT,
    auth_credentials TEXT,
    created_at       BIGINT  NOT NULL,
    PRIMARY KEY (tenant_id, task_id, config_id)
);

-- One row per (config, task event) still to deliver; deleted once delivered or given up.
-- Rows of one config are delivered in `seq` order.
CREATE TABLE push_outbox (
    tenant_id       TEXT    NOT NULL,
    task_id         TEXT    NOT NULL,
    config_id       TEXT    NOT NULL,
    seq             BIGINT  NOT NULL,
    -- JSON `domain::PushPayload`.
    payload         TEXT    NOT NULL,
    created_at      BIGINT  NOT NULL,
    attempts        BIGINT  NOT NULL,
    next_attempt_at BIGINT  NOT NULL,
    PRIMARY KEY (tenant_id, task_id, config_id, seq)
);

-- The delivery looks for rows that are due, oldest first.
CREATE INDEX push_outbox_due ON push_outbox (next_attempt_at);
