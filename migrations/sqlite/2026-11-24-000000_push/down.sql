DROP INDEX push_outbox_due;
DROP TABLE push_outbox;
DROP TABLE push_configs;
