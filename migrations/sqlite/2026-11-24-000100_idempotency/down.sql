DROP INDEX idempotency_keys_by_age;
DROP TABLE idempotency_keys;
