DROP INDEX push_outbox_due;
ALTER TABLE push_outbox DROP COLUMN node_id;
CREATE INDEX push_outbox_due ON push_outbox (next_attempt_at);
