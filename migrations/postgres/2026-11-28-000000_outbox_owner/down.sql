DROP INDEX push_outbox_owned;
ALTER TABLE push_outbox DROP COLUMN node_id;
